package sim

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

// TestTheEmptyPointNameHashesTheSameWhateverTheCacheHolds: the point-name
// cache is keyed by the name's address, which the empty name does not
// have. A run yielding at "" hashes the same in a fresh pool and in one
// whose slot for a nil address an earlier run has filled.
func TestTheEmptyPointNameHashesTheSameWhateverTheCacheHolds(t *testing.T) {
	empty := func(rt task.Runtime) error {
		rt.Go("other", func() { rt.Yield("") })
		rt.Yield("")
		return nil
	}
	var cache pointCache
	nilSlot := &cache[0] // where a nil address with length 0 falls
	names := strings.Repeat("abcdefgh", 64)
	filler := ""
	for i := 0; i+1 <= len(names); i++ {
		if p := names[i : i+1]; cache.slot(p) == nilSlot {
			filler = p
			break
		}
	}
	require.NotEmpty(t, filler, "some one-byte name is cached in slot 0")

	fresh := NewPool()
	defer fresh.Close()
	want := Run(Options{Seed: 3, Pool: fresh}, empty)
	require.NoError(t, want.Err)

	used := NewPool()
	defer used.Close()
	require.NoError(t, Run(Options{Seed: 3, Pool: used}, func(rt task.Runtime) error {
		rt.Yield(filler)
		return nil
	}).Err)
	require.NotNil(t, used.points[0].data, "the first run filled slot 0")
	got := Run(Options{Seed: 3, Pool: used}, empty)
	require.NoError(t, got.Err)
	assert.Equal(t, want.TraceHash, got.TraceHash)
}
