package engine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
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

// TestTheNullBlockHoldsNoRequest: a cache of 8 blocks gives requests 7, as
// vLLM's BlockPool keeps one as its null block. A request that needs 8 is
// refused and says so; one that needs 7 runs alone to its end, and while
// it holds all 7 the KV usage is 1, as vLLM's usage leaves the null block
// out of the total.
func TestTheNullBlockHoldsNoRequest(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		var e *engine.AsyncLLM
		var mu sync.Mutex
		var peak engine.Stats
		e = newEngine(t, rt, engine.Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 8, Observer: func(ev engine.Event) {
			if ev.Kind != core.EventStep {
				return
			}
			// On the engine-core task, before the step: the gauges are
			// those of the step before.
			st := e.Stats()
			mu.Lock()
			if st.KVUsedBlocks > peak.KVUsedBlocks {
				peak = st
			}
			mu.Unlock()
		}})
		defer e.Close()

		_, err := e.AddRequest("eight", "hello", engine.Params{MaxTokens: 31})
		require.ErrorIs(t, err, engine.ErrInvalidRequest)
		assert.EqualError(t, err, "engine: invalid request: the request needs 8 KV blocks of 4 tokens for 32 tokens (prompt and MaxTokens), but the cache has only 7 usable (8 blocks, one of them vLLM's null block)")

		outs := drain(t, add(t, e, "seven", "hello", engine.Params{MaxTokens: 27, IgnoreEOS: true, Output: engine.Delta}))
		assert.Equal(t, want("hello", 27), tokensOf(engine.Delta, outs))
		assert.Equal(t, engine.FinishLength, last(outs).FinishReason)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 7, peak.KVUsedBlocks, "every usable block, and not the null block")
		assert.Equal(t, 8, peak.KVNumBlocks, "the whole cache, the null block included")
		assert.Equal(t, 1.0, peak.KVCacheUsage())
		assert.Zero(t, e.Stats().Preemptions, "7 blocks fit a cache of 8")
	})
}

// TestKVCacheUsageLeavesTheNullBlockOut: usage is the used blocks over the
// usable ones, KVNumBlocks−1, as vLLM's BlockPool.get_usage.
func TestKVCacheUsageLeavesTheNullBlockOut(t *testing.T) {
	full := engine.Stats{KVUsedBlocks: 7, KVNumBlocks: 8}
	assert.Equal(t, 1.0, full.KVCacheUsage())
	assert.Contains(t, full.Metrics(), engine.Metric{Name: "vllm:kv_cache_usage_perc", Value: 1})
	assert.Equal(t, 0.5, engine.Stats{KVUsedBlocks: 2, KVNumBlocks: 5}.KVCacheUsage())
	assert.Zero(t, engine.Stats{}.KVCacheUsage(), "no cache, no usage")
	assert.Zero(t, engine.Stats{KVNumBlocks: 1}.KVCacheUsage(), "a cache of the null block alone")
}
