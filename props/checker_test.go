package props_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// The checker is tested on event streams made by hand: each property is
// violated once, and the checker must name it.

var prompt = core.Tokenizer{}.Encode("hello")

func tokens(n int) []int { return core.Tokens(core.ToyModel{}, prompt, n) }

func add(inc uint64, id string, p engine.Params) core.Event {
	return core.Event{Kind: core.EventAdd, RequestID: id, InternalID: id, Incarnation: inc, Prompt: prompt, Params: p}
}

func delivered(frame, producer, collector uint64, pos int) core.Event {
	return core.Event{Kind: core.EventFrameDelivered, RequestID: "a", Frame: frame, Incarnation: producer, Collector: collector,
		Tokens: tokens(pos + 1)[pos:], Position: pos}
}

func finish(inc uint64, reason core.FinishReason, toks []int) core.Event {
	return core.Event{Kind: core.EventFinish, RequestID: "a", Incarnation: inc, Finished: true, Reason: reason, Tokens: toks}
}

func output(inc uint64, toks []int, finished bool, reason core.FinishReason) core.Event {
	return core.Event{Kind: core.EventOutput, RequestID: "a", Incarnation: inc, Tokens: toks, Finished: finished, Reason: reason}
}

func check(events ...core.Event) error {
	c := props.NewChecker(core.ToyModel{})
	for _, ev := range events {
		c.Observe(ev)
	}
	return c.Finish()
}

func requireViolation(t *testing.T, err error, property string) *props.Violation {
	t.Helper()
	var v *props.Violation
	require.ErrorAs(t, err, &v)
	assert.Equal(t, property, v.Property, v.Error())
	return v
}

func TestACleanRunPasses(t *testing.T) {
	p := engine.Params{MaxTokens: 2, Output: engine.Delta}
	require.NoError(t, check(
		add(1, "a", p),
		delivered(1, 1, 1, 0), output(1, tokens(1), false, ""),
		delivered(2, 1, 1, 1), finish(1, core.FinishLength, tokens(2)), output(1, tokens(2)[1:], true, core.FinishLength),
		core.Event{Kind: core.EventIdle},
	))
}

func TestStaleDeliveryIsCaughtByProvenance(t *testing.T) {
	p := engine.Params{MaxTokens: 3, Output: engine.Delta}
	v := requireViolation(t, check(add(1, "a", p), add(2, "a", p), delivered(7, 1, 2, 4)), props.NoStaleDelivery)
	assert.Contains(t, v.Detail, "frame 7")
	assert.Contains(t, v.Detail, "delivered to incarnation 2")
}

func TestAnAcceptedRequestThatNeverEndsIsCaught(t *testing.T) {
	v := requireViolation(t, check(add(1, "a", engine.Params{MaxTokens: 3})), props.EndsExactlyOnce)
	assert.Contains(t, v.Detail, "accepted but never ended")
	requireViolation(t, check(add(1, "a", engine.Params{MaxTokens: 1}), finish(1, core.FinishLength, tokens(1)), finish(1, core.FinishAbort, tokens(1))), props.EndsExactlyOnce)
}

func TestDeltasMustAddUpToTheFinalTokens(t *testing.T) {
	p := engine.Params{MaxTokens: 3, Output: engine.Delta}
	requireViolation(t, check(add(1, "a", p), finish(1, core.FinishLength, tokens(3)),
		output(1, tokens(1), false, ""), output(1, tokens(3)[2:], true, core.FinishLength)), props.ModelTokens)
	c := engine.Params{MaxTokens: 3, Output: engine.Cumulative}
	requireViolation(t, check(add(1, "a", c), output(1, tokens(2), false, ""), output(1, tokens(1), false, "")), props.DeltasConcatenate)
	f := engine.Params{MaxTokens: 3, Output: engine.FinalOnly}
	requireViolation(t, check(add(1, "a", f), output(1, tokens(1), false, "")), props.DeltasConcatenate)
}

func TestNothingAfterFinish(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	requireViolation(t, check(add(1, "a", p), finish(1, core.FinishLength, tokens(1)),
		output(1, tokens(1), true, core.FinishLength), output(1, nil, false, "")), props.NothingAfterFinish)
}

func TestTokensMustBeTheModels(t *testing.T) {
	p := engine.Params{MaxTokens: 2, Output: engine.Delta}
	bad := core.Event{Kind: core.EventFrameEmitted, RequestID: "a", Incarnation: 1, Frame: 1, Tokens: []int{tokens(1)[0] + 1}}
	v := requireViolation(t, check(add(1, "a", p), bad), props.ModelTokens)
	assert.Contains(t, v.Detail, "frame 1 emitted by the core")
}

func TestAReusedIDMustFinishNormally(t *testing.T) {
	p := engine.Params{MaxTokens: 3, Output: engine.Delta}
	first := []core.Event{add(1, "a", p), {Kind: core.EventAbort, RequestID: "a", Incarnation: 1}, finish(1, core.FinishAbort, nil)}
	v := requireViolation(t, check(append(first, add(2, "a", p), finish(2, core.FinishError, nil))...), props.ReuseFinishesNormally)
	assert.Contains(t, v.Detail, `reason "error" without being aborted`)
	// Aborted by its caller, a reused request may end with reason abort.
	require.NoError(t, check(append(first, add(2, "a", p), core.Event{Kind: core.EventAbort, Incarnation: 2}, finish(2, core.FinishAbort, nil))...))
}

func TestWaitIdleMustMeanIdle(t *testing.T) {
	requireViolation(t, check(core.Event{Kind: core.EventIdle, Held: 2}), props.WaitIdleMeansIdle)
	// The checker keeps its own account of the core: admitted and not yet
	// aborted or finished there means held, whatever the engine counted.
	p := engine.Params{MaxTokens: 3}
	v := requireViolation(t, check(add(1, "a", p), core.Event{Kind: core.EventCoreAdd, Incarnation: 1}, core.Event{Kind: core.EventIdle}), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "held incarnation(s) [1]")
	_ = check(add(1, "a", p), core.Event{Kind: core.EventCoreAdd, Incarnation: 1},
		core.Event{Kind: core.EventCoreAbort, Incarnation: 1}, core.Event{Kind: core.EventIdle})
}

func TestViolationSaysWhere(t *testing.T) {
	c := props.NewChecker(nil)
	c.Where = func() (string, string) { return "output-handler", "frontend.lock" }
	c.Observe(core.Event{Kind: core.EventIdle, Held: 1})
	assert.EqualError(t, c.Err(), "property wait-idle-means-the-core-holds-nothing violated: WaitIdle returned while the core held incarnation(s) [] (it counted 1) (detected in task output-handler after frontend.lock)")
	assert.Len(t, c.Violations(), 1)
}

// TestACoreAbortNobodyMadeIsCaught: the core drops a live incarnation on an
// abort that was not of it — a predecessor's late abort, routed by the
// reused id (vLLM #23697). The request can no longer end on its own; when
// Close then aborts it, nothing else would show that it was lost.
func TestACoreAbortNobodyMadeIsCaught(t *testing.T) {
	p := engine.Params{MaxTokens: 3, Output: engine.Delta}
	first := []core.Event{add(1, "a", p), {Kind: core.EventCoreAdd, Incarnation: 1},
		{Kind: core.EventAbort, RequestID: "a", Incarnation: 1}, finish(1, core.FinishAbort, nil)}
	killed := append(first, add(2, "a", p), core.Event{Kind: core.EventCoreAdd, Incarnation: 2},
		core.Event{Kind: core.EventCoreAbort, RequestID: "a", InternalID: "a", Incarnation: 2},
		// Close aborts what is left.
		core.Event{Kind: core.EventAbort, RequestID: "a", Incarnation: 2}, finish(2, core.FinishAbort, nil))
	v := requireViolation(t, check(killed...), props.ReuseFinishesNormally)
	assert.Contains(t, v.Detail, "incarnation 2")

	// The core's abort of an incarnation its caller aborted, or that the
	// frontend finished on a stop string, is no violation.
	require.NoError(t, check(append(first, core.Event{Kind: core.EventCoreAbort, Incarnation: 1})...))
	stopped := []core.Event{add(1, "a", p), {Kind: core.EventCoreAdd, Incarnation: 1},
		finish(1, core.FinishStop, tokens(1)), {Kind: core.EventCoreAbort, Incarnation: 1}}
	require.NoError(t, check(stopped...))
}

// TestWaitIdleMustMeanTheFramesArrived: WaitIdle also promises that the
// output handler took every batch the core emitted. A final frame still on
// its way leaves the request unfinished in the frontend — and, were it
// routed by a reused id, it would reach the next incarnation.
func TestWaitIdleMustMeanTheFramesArrived(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	emitted := core.Event{Kind: core.EventFrameEmitted, RequestID: "a", Incarnation: 1, Frame: 1, Tokens: tokens(1), Finished: true, Reason: core.FinishLength}
	v := requireViolation(t, check(add(1, "a", p), core.Event{Kind: core.EventCoreAdd, Incarnation: 1}, emitted, core.Event{Kind: core.EventIdle}), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "1 frame(s)")
	dropped := emitted
	dropped.Kind = core.EventFrameDropped
	require.NoError(t, check(add(1, "a", p), core.Event{Kind: core.EventCoreAdd, Incarnation: 1},
		core.Event{Kind: core.EventAbort, Incarnation: 1}, finish(1, core.FinishAbort, nil),
		emitted, dropped, core.Event{Kind: core.EventIdle}))
}

// TestAReusedIDsLengthFinishHasItsExactTokenCount: with the model length
// known, a length finish has exactly MaxTokens tokens, or what the model
// length leaves after the prompt; fewer means the request was cut short.
func TestAReusedIDsLengthFinishHasItsExactTokenCount(t *testing.T) {
	p := engine.Params{MaxTokens: 4, Output: engine.Delta}
	first := []core.Event{add(1, "a", p), {Kind: core.EventAbort, RequestID: "a", Incarnation: 1}, finish(1, core.FinishAbort, nil)}
	run := func(modelLen, n int) error {
		c := props.NewChecker(core.ToyModel{})
		c.SetModelLen(modelLen)
		for _, ev := range append(first, add(2, "a", p), output(2, tokens(n), true, core.FinishLength), finish(2, core.FinishLength, tokens(n))) {
			c.Observe(ev)
		}
		return c.Finish()
	}
	require.NoError(t, run(0, 2), "without the model length, fewer than MaxTokens may be its cap")
	require.NoError(t, run(1000, 4))
	v := requireViolation(t, run(1000, 2), props.ReuseFinishesNormally)
	assert.Contains(t, v.Detail, "finished for length with 2 tokens")
	assert.Contains(t, v.Detail, "give 4")
	// The model length caps it: the prompt leaves 2.
	require.NoError(t, run(len(prompt)+2, 2))
	requireViolation(t, run(len(prompt)+3, 2), props.ReuseFinishesNormally)
}
