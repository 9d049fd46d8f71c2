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
