package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failAfter is a write that gives up after n bytes, as one does when the
// disk fills or the file size limit is reached.
func failAfter(n int) func(w io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, strings.Repeat("x", n)); err != nil {
			return err
		}
		return errors.New("file too large")
	}
}

func TestAFailedWriteLeavesNoPartialFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pf")
	file := filepath.Join(dir, "a.json")
	err := writeFile(file, failAfter(100))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "file too large")
	assert.NoFileExists(t, file, "a failed write leaves no truncated file")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nor a temporary file")

	// A failed write does not clobber the file an earlier run wrote.
	require.NoError(t, writeFile(file, func(w io.Writer) error {
		_, err := io.WriteString(w, "{}")
		return err
	}))
	require.Error(t, writeFile(file, failAfter(100)))
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "{}", string(data))
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1)
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
}

func TestReplayOffersOnlyTheFlagsItHonours(t *testing.T) {
	code, _, errOut := simrun(t, "replay", "-h")
	require.Equal(t, 0, code)
	for _, f := range []string{"-trace", "-story", "-json", "-html"} {
		assert.Regexp(t, `(?m)^  `+f+`\b`, errOut, "replay -h documents %s", f)
	}
	for _, f := range []string{"-out", "-schedule-out"} {
		assert.NotRegexp(t, `(?m)^  `+f+`\b`, errOut, "replay never writes a schedule, so -h does not offer %s", f)
	}

	dir := t.TempDir()
	code, _, _ = simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	for _, f := range []string{"-out", "-schedule-out"} {
		code, _, errOut = simrun(t, "replay", f, filepath.Join(dir, "x"), file)
		assert.Equal(t, 2, code, f)
		assert.Contains(t, errOut, "flag provided but not defined: "+f)
	}
}
