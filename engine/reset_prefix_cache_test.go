package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/task"
)

// TestResetPrefixCacheForgetsWhatFinished: with nothing running the reset
// succeeds, with or without resetRunning, and a request with the prompt of
// one that finished before it finds nothing cached; without a reset it
// finds the prompt's blocks. Tokens are the model's either way.
func TestResetPrefixCacheForgetsWhatFinished(t *testing.T) {
	for i, run := range pauseRuns(12) {
		run.prefix = true
		for _, reset := range []bool{false, true} {
			runPause(t, run, func(x *pauseEnv) {
				t, e, ctx := x.t, x.e, context.Background()
				hit := x.foundCachedAfter(func() {
					if reset {
						ok, err := e.ResetPrefixCache(ctx, i%2 == 0)
						assert.NoError(t, err)
						assert.True(t, ok, "%s: nothing runs, so the reset happens", run)
					}
				})
				assert.Equal(t, !reset, hit, "%s reset=%v: found the prompt cached", run, reset)
			})
		}
	}
}

// TestResetPrefixCacheWhileRequestsStream: while two requests stream, a
// reset without resetRunning is refused and preempts nothing; with it the
// core preempts both, and they end with the model's tokens, found again
// without the cache (no prefix hit after the reset). Under async
// scheduling a step of theirs is often in flight at the reset, and its
// tokens are dropped and sampled again (the checker would see a token
// twice, one place late, if it were kept).
func TestResetPrefixCacheWhileRequestsStream(t *testing.T) {
	inFlight := 0
	for _, run := range pauseRuns(16) {
		run.prefix = true
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			const n = 60
			p := engine.Params{MaxTokens: n, IgnoreEOS: true, Output: engine.Delta}
			a := add(t, e, "a", pauseLong, p)
			b := add(t, e, "b", "hello world", p)
			first(t, a)
			first(t, b)

			ok, err := e.ResetPrefixCache(ctx, false)
			require.NoError(t, err)
			assert.False(t, ok, "%s: a and b run", run)
			assert.Zero(t, x.count(core.EventPreempt, 0, 0, x.mark()), "%s: the refused reset preempted nothing", run)

			ok, err = e.ResetPrefixCache(ctx, true)
			require.NoError(t, err)
			assert.True(t, ok, "%s", run)
			at := x.index(core.EventCacheReset, 0, x.index(core.EventCacheReset, 0, 0)+1)
			require.GreaterOrEqual(t, at, 0, "%s: the core told the second reset", run)
			assert.Equal(t, 2, x.evs[at].Held, "%s: a and b were preempted", run)
			for _, ev := range x.evs[:at] {
				if ev.Kind == core.EventPreempt && ev.Held > 0 {
					assert.True(t, run.async, "%s: an output in flight without async scheduling", run)
					inFlight++
				}
			}
			for _, r := range []*engine.Request{a, b} {
				outs := drain(t, r)
				assert.Equal(t, engine.FinishLength, last(outs).FinishReason, "%s", run)
				assert.Len(t, x.emitted(r), n, "%s: %s's tokens, each once", run, r.ID())
			}
			assert.Equal(t, want(pauseLong, n), x.emitted(a), "%s", run)
			assert.Equal(t, want("hello world", n), x.emitted(b), "%s", run)
			assert.Equal(t, -1, x.index(core.EventPrefixHit, 0, at), "%s: nothing was found cached after the reset", run)
		})
	}
	assert.Positive(t, inFlight, "no seed reset with a step in flight")
}

// TestResetPrefixCacheOnTheRealRuntime: on goroutines, two callers reset
// the cache, with and without resetRunning, over and over while clients
// stream: every request ends with the model's tokens, every reset with
// resetRunning happens, and the checker (newEngine's) finds every property
// held, under the race detector too. Whether a reset meets a step in
// flight is the goroutines' timing; the simulated tests make sure of it.
func TestResetPrefixCacheOnTheRealRuntime(t *testing.T) {
	for _, async := range []bool{false, true} {
		e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime, AsyncScheduling: async, EnablePrefixCaching: true, BlockSize: 4})
		ctx := context.Background()
		var resets atomic.Int64
		reset := func(i int) {
			ok, err := e.ResetPrefixCache(ctx, i%2 == 0)
			assert.NoError(t, err)
			if i%2 == 0 {
				assert.True(t, ok, "a reset with resetRunning always happens")
				resets.Add(1)
			}
		}
		whileStreaming(t, e, 4, 300, fmt.Sprintf("async=%v", async), reset, reset)
		t.Logf("async=%v: %d resets with resetRunning, %d preemptions", async, resets.Load(), e.Stats().Preemptions)
		require.NoError(t, e.Close())
	}
}

// TestResetPrefixCacheOnAClosedEngine: after Close the call fails with
// ErrClosed; with a ctx already done it fails with ctx's error and sends
// nothing.
func TestResetPrefixCacheOnAClosedEngine(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := e.ResetPrefixCache(ctx, true)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ok)
	require.NoError(t, e.Close())
	ok, err = e.ResetPrefixCache(context.Background(), false)
	assert.ErrorIs(t, err, engine.ErrClosed)
	assert.False(t, ok)
}
