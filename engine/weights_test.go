package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/task"
)

// TestAWeightUpdateInFlight is an async RL trainer's update with no pause
// before it: a streams when the update starts, b is added during it, and
// a ResumeGeneration comes between the batches. Nothing steps from the
// start to the finish, and a WaitIdle called after the start does not
// return before it; then a and b run on with the model's tokens, and the
// version is the finish's.
func TestAWeightUpdateInFlight(t *testing.T) {
	for _, run := range pauseRuns(12) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			const n = 40
			p := engine.Params{MaxTokens: n, IgnoreEOS: true, Output: engine.Delta}
			a := add(t, e, "a", pauseLong, p)
			first(t, a)
			assert.Equal(t, engine.DefaultWeightVersion, e.WeightVersion(), "%s", run)
			require.NoError(t, e.StartWeightUpdate(ctx))
			started := x.mark()
			var idle atomic.Bool
			x.rt.Go("waiter", func() {
				assert.NoError(t, e.WaitIdle(ctx))
				idle.Store(true)
			})
			b := add(t, e, "b", "hello world", p)
			require.NoError(t, e.UpdateWeights(ctx))
			require.NoError(t, e.ResumeGeneration(ctx))
			x.rt.Sleep(5 * time.Millisecond)
			require.NoError(t, e.UpdateWeights(ctx))
			x.rt.Sleep(5 * time.Millisecond)
			assert.Zero(t, x.count(core.EventStep, 0, started, x.mark()), "%s: a step ran during the update", run)
			assert.False(t, x.ended(a), "%s: a is held, not ended", run)
			assert.False(t, idle.Load(), "%s: WaitIdle returned in the middle of the update", run)
			require.NoError(t, e.FinishWeightUpdate(ctx, "v1"))
			assert.Equal(t, "v1", e.WeightVersion(), "%s", run)
			for _, r := range []*engine.Request{a, b} {
				assert.Equal(t, engine.FinishLength, last(drain(t, r)).FinishReason, "%s", run)
			}
			assert.Equal(t, want(pauseLong, n), x.emitted(a), "%s", run)
			assert.Equal(t, want("hello world", n), x.emitted(b), "%s", run)
			for !idle.Load() {
				x.rt.Sleep(time.Millisecond) // WaitIdle returns once a and b ended
			}
		})
	}
}

// TestAWeightUpdateRefusesWhatItCannotDo: a batch or a finish with no
// update open (ErrNoWeightUpdate), a start while one is
// (ErrWeightUpdateActive) and a start while the weights sleep (ErrAsleep)
// each return an error that names the call, and a refused finish leaves
// the version as it was. Between WakeUp("weights") and WakeUp("kv_cache")
// the update goes through.
func TestAWeightUpdateRefusesWhatItCannotDo(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{})
	ctx := context.Background()
	err := e.UpdateWeights(ctx)
	assert.ErrorIs(t, err, engine.ErrNoWeightUpdate)
	assert.ErrorContains(t, err, "UpdateWeights refused")
	assert.ErrorIs(t, e.FinishWeightUpdate(ctx, "v9"), engine.ErrNoWeightUpdate)
	assert.Equal(t, engine.DefaultWeightVersion, e.WeightVersion(), "a refused finish names no version")

	require.NoError(t, e.StartWeightUpdate(ctx))
	err = e.StartWeightUpdate(ctx)
	assert.ErrorIs(t, err, engine.ErrWeightUpdateActive)
	assert.ErrorContains(t, err, "StartWeightUpdate refused")
	require.NoError(t, e.FinishWeightUpdate(ctx, ""))
	assert.Equal(t, engine.DefaultWeightVersion, e.WeightVersion(), "a finish without a version keeps it")
	e.UpdateWeightVersion("v0")
	assert.Equal(t, "v0", e.WeightVersion())

	require.NoError(t, e.Sleep(ctx, engine.SleepOptions{Level: 2}))
	err = e.StartWeightUpdate(ctx)
	assert.ErrorIs(t, err, engine.ErrAsleep)
	assert.ErrorIs(t, err, core.ErrWeightsAsleep)
	require.NoError(t, e.WakeUp(ctx, engine.WakeWeights))
	require.NoError(t, e.StartWeightUpdate(ctx))
	require.NoError(t, e.UpdateWeights(ctx))
	require.NoError(t, e.FinishWeightUpdate(ctx, "v1"))
	require.NoError(t, e.WakeUp(ctx, engine.WakeKVCache))
	assert.Equal(t, "v1", e.WeightVersion())
	r := add(t, e, "a", "hello world", engine.Params{MaxTokens: 4, IgnoreEOS: true})
	assert.Equal(t, want("hello world", 4), tokensOf(engine.Cumulative, drain(t, r)))
	require.NoError(t, e.Close())
	assert.ErrorIs(t, e.StartWeightUpdate(ctx), engine.ErrClosed)
	assert.ErrorIs(t, e.UpdateWeights(ctx), engine.ErrClosed)
	assert.ErrorIs(t, e.FinishWeightUpdate(ctx, "v2"), engine.ErrClosed)
	assert.Equal(t, "v1", e.WeightVersion(), "a finish that failed names no version")
}

// TestWeightUpdatesOnTheRealRuntime: on goroutines, a syncer updates the
// weights in flight, over and over, while clients stream and another
// caller pauses and resumes the engine: every request ends with the
// model's tokens, every call of the syncer succeeds, and the checker
// (newEngine's) finds every property held — no step during an update among
// them — under the race detector too.
func TestWeightUpdatesOnTheRealRuntime(t *testing.T) {
	for _, async := range []bool{false, true} {
		e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime, AsyncScheduling: async, EnablePrefixCaching: true, BlockSize: 4})
		ctx := context.Background()
		var updates atomic.Int64
		whileStreaming(t, e, 4, 1000, fmt.Sprintf("async=%v", async), func(i int) {
			assert.NoError(t, e.StartWeightUpdate(ctx))
			for range 1 + i%3 {
				assert.NoError(t, e.UpdateWeights(ctx))
			}
			v := fmt.Sprintf("v%d", i)
			assert.NoError(t, e.FinishWeightUpdate(ctx, v))
			assert.Equal(t, v, e.WeightVersion())
			updates.Add(1)
		}, func(i int) {
			if err := e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseMode(1 + i%2), KeepCache: true}); !errors.Is(err, engine.ErrResumed) {
				assert.NoError(t, err)
			}
			assert.NoError(t, e.ResumeGeneration(ctx))
		})
		t.Logf("async=%v: %d updates", async, updates.Load())
		require.NoError(t, e.Close())
	}
}
