// Package golden compares a test's output with a file in its package's
// testdata/ folder, and rewrites the file when the test binary runs with
// -rewrite, so a deliberate change is one command and a reviewed diff.
//
// Usage:
//
//	golden.Check(t, "hashes.golden", table) // go test -rewrite to accept a change
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/")

// Check asserts that testdata/name holds got; with -rewrite it writes got
// there first.
func Check(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -rewrite to create %s", path)
	assert.Equal(t, string(want), got, "%s differs; if the change is deliberate, run go test -rewrite and review the diff", path)
}
