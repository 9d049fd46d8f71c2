package fpenv_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/llmdst/llmdst/internal/fpenv"
)

// TestTaken runs this test binary again with GO_FAILPOINTS set: the
// package has the value and the environment does not.
func TestTaken(t *testing.T) {
	if os.Getenv("LLMDST_FPENV_CHILD") == "1" {
		if v, ok := fpenv.Taken(); v != "a=return" || !ok {
			t.Fatalf("Taken() = %q, %v; want %q, true", v, ok, "a=return")
		}
		if v, ok := os.LookupEnv(fpenv.Name); ok {
			t.Fatalf("GO_FAILPOINTS is still in the environment: %q", v)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestTaken$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LLMDST_FPENV_CHILD=1", fpenv.Name+"=a=return")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}
