package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

// TestNoTwoIncarnationsShareAnInternalID: an id used again 2³² requests
// later, its old incarnation still live in the core, gets another internal
// id; one the same would let the old incarnation's frames and abort reach
// the new, the founding race.
func TestNoTwoIncarnationsShareAnInternalID(t *testing.T) {
	e, err := New(Config{Runtime: task.Real()})
	require.NoError(t, err)
	defer e.Close()
	r1, err := e.AddRequest("x", "hello", Params{MaxTokens: 1})
	require.NoError(t, err)
	assert.Equal(t, "x-00000001", r1.InternalID())
	e.mu.Lock()
	e.nextInc = 1 << 32 // 2³² requests later
	e.mu.Unlock()
	r1.Cancel()
	r2, err := e.AddRequest("x", "hello", Params{MaxTokens: 1})
	require.NoError(t, err)
	assert.Equal(t, "x-100000001", r2.InternalID())

	for inc, want := range map[uint64]string{1: "00000001", 0xffffffff: "ffffffff", 1 << 32: "100000000", 1<<64 - 1: "ffffffffffffffff"} {
		assert.Equal(t, want, incSuffix(inc), "incarnation %d", inc)
	}
}
