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

// TestSleepAndAStagedWakeUp is a colocated RL trainer's round: a streams
// when the engine sleeps (level 1, keep: its KV goes with the executor's
// memory, so it computes again after the wake-up), b is added while it
// sleeps, a resume is refused (ErrAsleep), and the wake-up is staged: after
// WakeUp("weights") the engine still sleeps and nothing steps; after
// WakeUp("kv_cache") it runs, and a and b end with the model's tokens.
func TestSleepAndAStagedWakeUp(t *testing.T) {
	for _, run := range pauseRuns(12) {
		run.prefix = true
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			const n = 40
			p := engine.Params{MaxTokens: n, IgnoreEOS: true, Output: engine.Delta}
			a := add(t, e, "a", pauseLong, p)
			first(t, a)
			require.NoError(t, e.Sleep(ctx, engine.SleepOptions{Level: 1, Mode: engine.PauseKeep}))
			slept := x.index(core.EventSleep, 0, 0)
			require.GreaterOrEqual(t, slept, 0, "%s: the executor slept before Sleep returned", run)
			assert.Equal(t, core.SleepAll, core.SleepTags(x.evs[slept].Held), "%s", run)
			assert.True(t, x.sleeping(), "%s: after Sleep", run)
			b := add(t, e, "b", "hello world", p)
			assert.ErrorIs(t, e.ResumeGeneration(ctx), engine.ErrAsleep, "%s", run)

			st := e.Stats()
			assert.True(t, st.Sleeping && st.SleepLevel == 1, "%s: the gauges say level 1: %+v", run, st)
			require.NoError(t, e.WakeUp(ctx, engine.WakeWeights))
			assert.True(t, x.sleeping(), "%s: the KV cache still sleeps", run)
			assert.True(t, x.isPaused(), "%s: a weights-only wake-up leaves the engine paused", run)
			x.rt.Sleep(10 * time.Millisecond)
			assert.Zero(t, x.count(core.EventStep, 0, slept, x.mark()), "%s: a step ran with the KV cache asleep", run)

			require.NoError(t, e.WakeUp(ctx, engine.WakeKVCache))
			assert.False(t, x.sleeping(), "%s: after the last wake-up", run)
			assert.False(t, e.Stats().Sleeping, "%s: the gauges say awake", run)
			for _, r := range []*engine.Request{a, b} {
				outs := drain(t, r)
				assert.Equal(t, engine.FinishLength, last(outs).FinishReason, "%s", run)
			}
			assert.Equal(t, want(pauseLong, n), x.emitted(a), "%s", run)
			assert.Equal(t, want("hello world", n), x.emitted(b), "%s", run)
			assert.Positive(t, x.count(core.EventPreempt, a.Incarnation(), 0, slept), "%s: the sleep preempted a", run)
		})
	}
}

// TestSleepLevelZeroIsAPause: a sleep of level 0 is a pause of its mode
// and releases nothing; WakeUp("scheduling") resumes it, as WakeUp() does.
func TestSleepLevelZeroIsAPause(t *testing.T) {
	for i, run := range pauseRuns(8) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", pauseLong, engine.Params{MaxTokens: 1000, Output: engine.Delta})
			first(t, a)
			require.NoError(t, e.Sleep(ctx, engine.SleepOptions{}))
			assert.True(t, x.ended(a), "%s: the abort sleep ended a before it returned", run)
			assert.True(t, x.sleeping(), "%s", run)
			assert.True(t, x.isPaused(), "%s", run)
			assert.Equal(t, -1, x.index(core.EventSleep, 0, 0), "%s: level 0 releases nothing", run)
			var tags []string
			if i%2 == 0 {
				tags = []string{engine.WakeScheduling}
			}
			require.NoError(t, e.WakeUp(ctx, tags...))
			assert.False(t, x.sleeping(), "%s", run)
			b := add(t, e, "b", "hello world", engine.Params{MaxTokens: 8, IgnoreEOS: true})
			drain(t, b)
			assert.Equal(t, want("hello world", 8), x.emitted(b), "%s", run)
		})
	}
}

// TestSleepRefusesWhatItCannotDo: a level, a mode or a wake-up tag out of
// range is refused with an error that names it, and sends the core nothing.
func TestSleepRefusesWhatItCannotDo(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{})
	ctx := context.Background()
	for _, o := range []engine.SleepOptions{{Level: -1}, {Level: 3}, {Level: 1, Mode: 7}} {
		err := e.Sleep(ctx, o)
		require.Error(t, err, "%+v", o)
		assert.NotErrorIs(t, err, engine.ErrClosed)
	}
	assert.ErrorContains(t, e.Sleep(ctx, engine.SleepOptions{Level: 3}), "sleep level 3 is not 0")
	assert.ErrorContains(t, e.Sleep(ctx, engine.SleepOptions{Mode: 7}), "pause mode 7")
	assert.ErrorContains(t, e.WakeUp(ctx, engine.WakeWeights, "gpu"), `wake-up tag "gpu" is not one of weights, kv_cache, scheduling`)
	sleeping, err := e.IsSleeping(ctx)
	require.NoError(t, err)
	assert.False(t, sleeping, "nothing was sent")
	require.NoError(t, e.Close())
}

// TestSleepOnAClosedEngine: after Close every call fails with ErrClosed;
// with a ctx already done, with ctx's error.
func TestSleepOnAClosedEngine(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, e.Sleep(ctx, engine.SleepOptions{Level: 1}), context.Canceled)
	require.NoError(t, e.Close())
	bg := context.Background()
	assert.ErrorIs(t, e.Sleep(bg, engine.SleepOptions{Level: 1}), engine.ErrClosed)
	assert.ErrorIs(t, e.WakeUp(bg), engine.ErrClosed)
	_, err := e.IsSleeping(bg)
	assert.ErrorIs(t, err, engine.ErrClosed)
}

// TestSleepOnTheRealRuntime: on goroutines, a sleeper sleeps and wakes the
// engine in stages, over and over, while clients stream and another caller
// pauses and resumes it: every request ends with the model's tokens, every
// resume either resumes or finds the executor asleep, and the checker
// (newEngine's) finds every property held — no step while anything sleeps
// among them — under the race detector too.
func TestSleepOnTheRealRuntime(t *testing.T) {
	for _, async := range []bool{false, true} {
		e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime, AsyncScheduling: async, EnablePrefixCaching: true, BlockSize: 4})
		ctx := context.Background()
		var sleeps, refused atomic.Int64
		whileStreaming(t, e, 4, 1000, fmt.Sprintf("async=%v", async), func(i int) {
			err := e.Sleep(ctx, engine.SleepOptions{Level: 1 + i%2, Mode: engine.PauseKeep})
			if !errors.Is(err, engine.ErrResumed) {
				assert.NoError(t, err)
				sleeps.Add(1)
			}
			assert.NoError(t, e.WakeUp(ctx, engine.WakeWeights))
			assert.NoError(t, e.WakeUp(ctx, engine.WakeKVCache))
		}, func(int) {
			if err := e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep, KeepCache: true}); !errors.Is(err, engine.ErrResumed) {
				assert.NoError(t, err) // or the sleeper's wake-up overtook it
			}
			if err := e.ResumeGeneration(ctx); errors.Is(err, engine.ErrAsleep) {
				refused.Add(1)
			} else {
				assert.NoError(t, err)
			}
		})
		require.NoError(t, e.WakeUp(ctx)) // the pauser's last pause, if the sleeper's wake-up came first
		t.Logf("async=%v: %d sleeps, %d resumes refused", async, sleeps.Load(), refused.Load())
		require.NoError(t, e.Close())
	}
}

// sleeping is IsSleeping's answer.
func (x *pauseEnv) sleeping() bool {
	x.t.Helper()
	s, err := x.e.IsSleeping(context.Background())
	require.NoError(x.t, err, "IsSleeping")
	return s
}
