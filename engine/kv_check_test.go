package engine_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/task"
)

// TestCheckKVWaitsForClose: the core's blocks are its loop's while it runs,
// so CheckKV refuses to read them before Close returned, saying why; after
// Close, with a request served and another aborted, every block is free.
func TestCheckKVWaitsForClose(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime})
	err := e.CheckKV()
	require.Error(t, err)
	assert.Equal(t, "engine: CheckKV before Close returned: the core's KV blocks are its loop's while it runs", err.Error())
	drain(t, add(t, e, "served", "hello", engine.Params{MaxTokens: 5}))
	long := add(t, e, "aborted", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta})
	_, err = long.Next()
	require.NoError(t, err)
	e.Abort("aborted")
	require.NoError(t, e.Close())
	assert.NoError(t, e.CheckKV())
}
