package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestGaugesFollowAnAbortWhenTheCoreGoesIdle: an aborted request leaves
// the core with no output of its own, yet the running gauge and the KV
// usage drop with it, as vLLM's core reports its scheduler stats on the
// step after an abort even when nothing else is produced.
func TestGaugesFollowAnAbortWhenTheCoreGoesIdle(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{})
		defer e.Close()
		r := add(t, e, "long", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta})
		_, err := r.Next()
		require.NoError(t, err)
		e.Abort("long")
		require.NoError(t, e.WaitIdle(context.Background()))
		st := e.Stats()
		assert.Zero(t, st.RequestsRunning, "running after the only request was aborted")
		assert.Zero(t, st.RequestsWaiting)
		assert.Zero(t, st.KVUsedBlocks, "KV blocks in use after the only request was aborted")
		assert.Equal(t, int64(1), st.FinishedAbort)
	})
}
