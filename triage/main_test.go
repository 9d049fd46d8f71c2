package triage

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// fixture is the flaky program of testdata/flaky, built once per test
// binary.
var fixture struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if fixture.dir != "" {
			os.RemoveAll(fixture.dir)
		}
		os.Exit(code)
	}))
}

// flakyBin returns the path of the built fixture, building it on first use.
func flakyBin(t *testing.T) string {
	t.Helper()
	fixture.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if fixture.dir, fixture.err = os.MkdirTemp("", "triage-flaky-"); fixture.err != nil {
			return
		}
		fixture.path = filepath.Join(fixture.dir, "flaky")
		out, err := exec.Command(goBin, "build", "-o", fixture.path, "./testdata/flaky").CombinedOutput()
		if err != nil {
			fixture.err = &buildError{err: err, out: string(out)}
		}
	})
	require.NoError(t, fixture.err, "building testdata/flaky")
	return fixture.path
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string {
	return "go build ./testdata/flaky: " + e.err.Error() + "\n" + e.out
}
