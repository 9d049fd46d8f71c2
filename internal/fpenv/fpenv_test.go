package fpenv_test

import (
	"os"
	"testing"

	"github.com/llmdst/llmdst/internal/fpenv"
	"github.com/llmdst/llmdst/internal/reexec"
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
	if code, stdout, stderr := reexec.Test(t, "TestTaken", "LLMDST_FPENV_CHILD=1", fpenv.Name+"=a=return"); code != 0 {
		t.Fatalf("exit code %d: %s%s", code, stdout, stderr)
	}
}
