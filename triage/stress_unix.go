//go:build unix

package triage

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the copy in a process group of its own and makes
// cancelling it signal the whole group, so that a copy that is a driver
// (go test, a shell script) does not leave its children running. The
// signal is SIGQUIT when quit says so (a timeout: a Go program then prints
// every goroutine's stack and exits, and whatever is still running after
// cmd.WaitDelay is killed), SIGKILL otherwise.
func ownProcessGroup(cmd *exec.Cmd, quit func() bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		sig := syscall.SIGKILL
		if quit() {
			sig = syscall.SIGQUIT
		}
		return syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// killProcessGroup kills what a copy left running in its process group
// once it has exited. A process group's id is not reused while the group
// has members, so this reaches only the copy's own stragglers.
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH: nothing was left
	}
}

// signalNames are the conventional names of the signals that end
// processes; others are named by number and description.
var signalNames = map[syscall.Signal]string{ // looked up, never ranged
	syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
	syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
	syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGTERM: "SIGTERM",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGXCPU: "SIGXCPU",
}

// signalName names the signal that ended a process ("SIGSEGV"), or "".
func signalName(state *os.ProcessState) string {
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return ""
	}
	if name, ok := signalNames[ws.Signal()]; ok {
		return name
	}
	return fmt.Sprintf("%d (%s)", int(ws.Signal()), ws.Signal())
}
