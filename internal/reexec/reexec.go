// Package reexec runs one test of the running test binary again, in a
// process of its own with more environment, for what only a fresh process
// shows: package initialization, and code that ends the process.
package reexec

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Test runs the test named test of this binary again with env (KEY=VALUE
// entries) added to the environment, and returns its exit code and
// output. The child finds its part by the environment it was given.
func Test(t testing.TB, test string, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exit := (*exec.ExitError)(nil); err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %s: %v", os.Args[0], err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}
