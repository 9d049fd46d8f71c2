package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// streamed runs body under the simulator with the Random strategy, which
// moves the clock only when every task waits: a caller blocked in Next
// takes each output before the core's next step, so the outputs are the
// engine's own, not merged by a slow reader.
func streamed(t *testing.T, body func(rt task.Runtime) error) {
	t.Helper()
	res := sim.Run(sim.Options{Seed: 1, Strategy: sim.Random()}, body)
	require.NoError(t, res.Err)
}

func sizes(outs []engine.Output) []int {
	n := make([]int, len(outs))
	for i, o := range outs {
		n[i] = len(o.TokenIDs)
	}
	return n
}

// TestStreamIntervalBatchesDeltaOutputs: under a StreamInterval of 3 a
// Delta request's outputs are its first token, then three tokens at a
// time, then what is left with the finish, as vLLM's stream_interval; the
// tokens and text add up as ever. Cumulative outputs are not held back.
func TestStreamIntervalBatchesDeltaOutputs(t *testing.T) {
	var delta, cumulative []engine.Output
	streamed(t, func(rt task.Runtime) error {
		e := newEngine(t, rt, engine.Config{StreamInterval: 3})
		defer e.Close()
		delta = drain(t, add(t, e, "d", "hello", engine.Params{MaxTokens: 12, Output: engine.Delta}))
		cumulative = drain(t, add(t, e, "c", "hello", engine.Params{MaxTokens: 5, Output: engine.Cumulative}))
		return nil
	})
	assert.Equal(t, []int{1, 3, 3, 3, 2}, sizes(delta))
	assert.Equal(t, want("hello", 12), tokensOf(engine.Delta, delta))
	assert.Equal(t, core.Tokenizer{}.Decode(want("hello", 12)), textOf(engine.Delta, delta))
	assert.True(t, last(delta).Finished)
	assert.Equal(t, []int{1, 2, 3, 4, 5}, sizes(cumulative), "a Cumulative output for every token")

	// The default, and 1, send every token.
	for _, n := range []int{0, 1} {
		var outs []engine.Output
		streamed(t, func(rt task.Runtime) error {
			e := newEngine(t, rt, engine.Config{StreamInterval: n})
			defer e.Close()
			outs = drain(t, add(t, e, "d", "hello", engine.Params{MaxTokens: 4, Output: engine.Delta}))
			return nil
		})
		assert.Equal(t, []int{1, 1, 1, 1}, sizes(outs), "StreamInterval %d", n)
	}
}

// TestStreamIntervalAbortCarriesWhatWasHeldBack: the final output of an
// aborted Delta request carries the tokens the interval held back, so
// that its outputs still add up to every token it was given.
func TestStreamIntervalAbortCarriesWhatWasHeldBack(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		c := props.NewChecker(core.ToyModel{})
		observe := c.Observe
		if rt == task.Real() {
			observe = c.Locked()
		}
		e := newEngine(t, rt, engine.Config{StreamInterval: 1000, StepTime: 200 * time.Microsecond, Observer: observe})
		r := add(t, e, "a", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta})
		first, err := r.Next()
		require.NoError(t, err)
		require.Len(t, first.TokenIDs, 1, "the first token goes out at once")
		for e.Stats().GenerationTokens < 6 {
			rt.Sleep(time.Millisecond)
		}
		e.Abort("a")
		outs := append([]engine.Output{first}, drain(t, r)...)
		require.Len(t, outs, 2, "nothing between the first token and the abort")
		final := outs[1]
		assert.True(t, final.Finished)
		assert.Equal(t, engine.FinishAbort, final.FinishReason)
		assert.GreaterOrEqual(t, len(final.TokenIDs), 5, "the held-back tokens")
		got := tokensOf(engine.Delta, outs)
		assert.Equal(t, want("hello", len(got)), got)
		assert.Equal(t, core.Tokenizer{}.Decode(got), textOf(engine.Delta, outs))
		require.NoError(t, e.WaitIdle(context.Background()))
		e.Close()
		assert.NoError(t, c.Finish())
	})
}

func TestStreamIntervalMustNotBeNegative(t *testing.T) {
	_, err := engine.New(engine.Config{StreamInterval: -1})
	assert.EqualError(t, err, "engine: StreamInterval must be ≥ 0, got -1")
}
