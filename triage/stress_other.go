//go:build !unix

package triage

import (
	"os"
	"os/exec"
)

// ownProcessGroup leaves the copy in this process's group: without Unix
// process groups, cancelling a copy kills the copy alone.
func ownProcessGroup(*exec.Cmd, func() bool) {}

// killProcessGroup has no process group to kill.
func killProcessGroup(*exec.Cmd) {}

// signalName names the signal that ended a process, or "".
func signalName(state *os.ProcessState) string {
	if state.ExitCode() == -1 {
		return "killed"
	}
	return ""
}
