package props_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/task"
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

// output is an output of toks whose text is theirs, as for a request with
// no stop strings (a Delta one's toks are the new tokens).
func output(inc uint64, toks []int, finished bool, reason core.FinishReason) core.Event {
	return textOutput(inc, toks, core.Tokenizer{}.Decode(toks), finished, reason)
}

func textOutput(inc uint64, toks []int, text string, finished bool, reason core.FinishReason) core.Event {
	return core.Event{Kind: core.EventOutput, RequestID: "a", Incarnation: inc, Tokens: toks, Text: text, Finished: finished, Reason: reason}
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

// TestAStopTokenBelowMinTokensIsNotTheModels: below MinTokens a stop token
// cannot be sampled (vLLM masks it), so a frame that carries the model's
// stop token there is wrong, and the token that took its place is right.
func TestAStopTokenBelowMinTokensIsNotTheModels(t *testing.T) {
	stop := tokens(1)[0]
	p := engine.Params{MaxTokens: 3, MinTokens: 2, StopTokenIDs: []int{stop}, Output: engine.Delta}
	frame := func(tok int) core.Event {
		return core.Event{Kind: core.EventFrameEmitted, RequestID: "a", Incarnation: 1, Frame: 1, Tokens: []int{tok}}
	}
	v := requireViolation(t, check(add(1, "a", p), frame(stop)), props.ModelTokens)
	assert.Contains(t, v.Detail, "token 0")
	sp := p.Sampling()
	masked := core.Sampled(core.ToyModel{}, prompt, 1, &sp, core.EOSTokenID)[0]
	assert.Equal(t, (stop+1)%core.VocabSize, masked, "the next token id takes the masked one's place")
	c := props.NewChecker(core.ToyModel{})
	c.Observe(add(1, "a", p))
	c.Observe(frame(masked))
	assert.Empty(t, c.Violations(), "the token that took the stop token's place is the model's")
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

// TestOnGoroutinesWaitIdleAnswersForTheInputsBeforeIt: off the simulator
// another goroutine may add a request between WaitIdle's test and its
// event, and the core may admit it and emit its frames meanwhile; the
// checker holds WaitIdle to the inputs it waited for (Event.Input), and
// still catches what is held, or on its way, of those. Under the
// simulator, where nothing runs in between, everything counts.
func TestOnGoroutinesWaitIdleAnswersForTheInputsBeforeIt(t *testing.T) {
	p := engine.Params{MaxTokens: 2, Output: engine.Delta}
	coreAdd := func(inc, input uint64) core.Event {
		return core.Event{Kind: core.EventCoreAdd, Incarnation: inc, Input: input}
	}
	emitted := func(inc, frame uint64) core.Event {
		return core.Event{Kind: core.EventFrameEmitted, RequestID: "b", Incarnation: inc, Frame: frame, Tokens: tokens(1), Position: 0}
	}
	idle := func(input uint64) core.Event { return core.Event{Kind: core.EventIdle, Input: input} }
	// a (input 1) came and went; b (input 2) was added after WaitIdle's
	// test, and the core admitted it and emitted a frame of it.
	done := []core.Event{add(1, "a", p), coreAdd(1, 1), core.Event{Kind: core.EventAbort, RequestID: "a", Incarnation: 1},
		finish(1, core.FinishAbort, nil), core.Event{Kind: core.EventCoreAbort, RequestID: "a", Incarnation: 1}}
	late := append(done[:len(done):len(done)], add(2, "b", p), coreAdd(2, 2), emitted(2, 1))
	run := func(events []core.Event, real bool) error {
		c := props.NewChecker(core.ToyModel{})
		observe := c.ObserveEvent
		if real {
			o := c.Observer(task.Real())
			observe = func(ev *core.Event) { o(*ev) }
		}
		for _, ev := range events {
			observe(&ev)
		}
		return c.Err()
	}

	require.NoError(t, run(append(late, idle(1)), true), "b came after WaitIdle's inputs")
	v := requireViolation(t, run(append(late, idle(1)), false), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "held incarnation(s) [2]", "under the simulator nothing ran in between")
	v = requireViolation(t, run(append(late, idle(2)), true), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "held incarnation(s) [2]", "b was one of the inputs WaitIdle waited for")

	// A frame of an answered input still on its way is caught on
	// goroutines too; one of a later input is not.
	early := append(done[:len(done):len(done)], add(2, "b", p), coreAdd(2, 2), emitted(2, 1),
		core.Event{Kind: core.EventAbort, RequestID: "b", Incarnation: 2}, finish(2, core.FinishAbort, nil),
		core.Event{Kind: core.EventCoreAbort, RequestID: "b", Incarnation: 2})
	v = requireViolation(t, run(append(early, idle(2)), true), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "1 frame(s)")
	require.NoError(t, run(append(early, idle(1)), true))
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

// The model's text for the prompt "hello" begins " body interest now study";
// a stop string such as "dy int" spans the first two tokens.
func TestTheTextOfEachOutputKindIsChecked(t *testing.T) {
	toks := tokens(3)
	require.Equal(t, " body interest now", core.Tokenizer{}.Decode(toks))
	stop := func(kind engine.OutputKind, minTokens int, stops ...string) engine.Params {
		return engine.Params{MaxTokens: 3, MinTokens: minTokens, Output: kind, Stop: stops}
	}
	end := func(reason core.FinishReason, n int) core.Event { return finish(1, reason, toks[:n]) }

	// Right text passes. A stop string across a token boundary cuts the
	// text where it begins; a running request holds back its tail, as long
	// as the longest stop string less one byte (5 here).
	require.NoError(t, check(add(1, "a", stop(engine.Delta, 0, "dy int")),
		textOutput(1, toks[:1], "", false, ""), end(core.FinishStop, 2), textOutput(1, toks[1:2], " bo", true, core.FinishStop)))
	require.NoError(t, check(add(1, "a", stop(engine.Cumulative, 0, "dy int")),
		textOutput(1, toks[:1], "", false, ""), end(core.FinishStop, 2), textOutput(1, toks[:2], " bo", true, core.FinishStop)))
	require.NoError(t, check(add(1, "a", stop(engine.FinalOnly, 0, "dy int")),
		end(core.FinishStop, 2), textOutput(1, toks[:2], " bo", true, core.FinishStop)))
	// The tail held back is counted in characters, as vLLM counts a stop
	// string's length: "é" (two bytes) holds nothing back, "日本x" two
	// characters.
	require.NoError(t, check(add(1, "a", stop(engine.Cumulative, 0, "é")),
		textOutput(1, toks[:1], " body", false, ""), end(core.FinishLength, 3), textOutput(1, toks, " body interest now", true, core.FinishLength)))
	require.NoError(t, check(add(1, "a", stop(engine.Cumulative, 0, "日本x")),
		textOutput(1, toks[:1], " bo", false, ""), end(core.FinishLength, 3), textOutput(1, toks, " body interest now", true, core.FinishLength)))
	// A slow Delta consumer's merged output has the merged text.
	require.NoError(t, check(add(1, "a", stop(engine.Delta, 0, "xyz")),
		end(core.FinishLength, 3), textOutput(1, toks, " body interest now", true, core.FinishLength)))
	// Within MinTokens no stop string applies, but one that ends after
	// them does, even when it begins inside them.
	require.NoError(t, check(add(1, "a", stop(engine.Cumulative, 1, " body", "y int")),
		textOutput(1, toks[:1], " ", false, ""), end(core.FinishStop, 2), textOutput(1, toks[:2], " bod", true, core.FinishStop)))
	// A stop token that ended the request is not in its text; EOS is
	// nothing in it anyway.
	p := engine.Params{MaxTokens: 5, Output: engine.Delta, StopTokenIDs: []int{toks[2]}}
	require.NoError(t, check(add(1, "a", p), end(core.FinishStop, 3), textOutput(1, toks, " body interest", true, core.FinishStop)))
	// An aborted request's text is whole: nothing is held back any more.
	require.NoError(t, check(add(1, "a", stop(engine.Delta, 0, "xyz")), textOutput(1, toks[:1], " bo", false, ""),
		core.Event{Kind: core.EventAbort, Incarnation: 1}, end(core.FinishAbort, 1), textOutput(1, nil, "dy", true, core.FinishAbort)))

	// Delta texts that do not concatenate to the text.
	v := requireViolation(t, check(add(1, "a", engine.Params{MaxTokens: 2, Output: engine.Delta}),
		textOutput(1, toks[:1], " body", false, ""), end(core.FinishLength, 2), textOutput(1, toks[1:2], " body interest", true, core.FinishLength)),
		props.DeltasConcatenate)
	assert.Contains(t, v.Detail, `want " interest" after the 5 bytes received before it`)
	// A final text that runs past a stop string.
	v = requireViolation(t, check(add(1, "a", stop(engine.Cumulative, 0, " interest")),
		end(core.FinishStop, 2), textOutput(1, toks[:2], " body interest", true, core.FinishStop)), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, `want " body"`)
	assert.Contains(t, v.Detail, "cut at byte 5 before a stop string")
	// Tokens after the stop string: the request should have ended on it.
	v = requireViolation(t, check(add(1, "a", stop(engine.FinalOnly, 0, " interest")),
		end(core.FinishStop, 3), textOutput(1, toks, " body", true, core.FinishStop)), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, "reached the stop string at token 2")
	assert.Contains(t, v.Detail, "yet it received 3 tokens")
	// A stop string that is not looked for: the request runs on past it.
	v = requireViolation(t, check(add(1, "a", stop(engine.Delta, 0, "dy int")),
		textOutput(1, toks[:2], " body int", false, "")), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, "yet its output says finished=false")
	// A stop applied before MinTokens.
	v = requireViolation(t, check(add(1, "a", stop(engine.Cumulative, 2, " interest")),
		end(core.FinishStop, 2), textOutput(1, toks[:2], " body", true, core.FinishStop)), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, "no stop token ended it and no stop string")
	// Text that is not the tokens' detokenization, or that does not hold
	// back a running request's tail.
	v = requireViolation(t, check(add(1, "a", engine.Params{MaxTokens: 3}),
		textOutput(1, toks[:2], " body interests", false, "")), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, `an output's text is " body interests", want " body interest"`)
	requireViolation(t, check(add(1, "a", stop(engine.Cumulative, 0, "xyz")),
		textOutput(1, toks[:2], " body interest", false, "")), props.DeltasConcatenate)
	// A running request whose text ends in the stop string's first bytes
	// does not give them out yet.
	requireViolation(t, check(add(1, "a", stop(engine.Delta, 0, " interest now")),
		textOutput(1, toks[:1], " body", false, "")), props.DeltasConcatenate)
}

// TestOnGoroutinesWaitIdleAnswersForEachCoresInputs: with two cores,
// WaitIdle tells each core's inputs in an event of its own, numbered by
// that core; a sequence is held to its own core's, and a frame on its way
// is counted once every core's are known. b, on core 1, came after core
// 1's inputs in one WaitIdle and among them in the next.
func TestOnGoroutinesWaitIdleAnswersForEachCoresInputs(t *testing.T) {
	p := engine.Params{MaxTokens: 2, Output: engine.Delta}
	on := func(engine int, ev core.Event) core.Event { ev.Engine = engine; return ev }
	idle := func(engine int, input uint64) core.Event {
		return core.Event{Kind: core.EventIdle, Input: input, Engine: engine}
	}
	events := []core.Event{add(1, "a", p), {Kind: core.EventCoreAdd, Incarnation: 1, Input: 1},
		{Kind: core.EventAbort, RequestID: "a", Incarnation: 1}, finish(1, core.FinishAbort, nil), {Kind: core.EventCoreAbort, RequestID: "a", InternalID: "a", Incarnation: 1},
		on(1, add(2, "b", p)), on(1, core.Event{Kind: core.EventCoreAdd, Incarnation: 2, Input: 1}),
		on(1, core.Event{Kind: core.EventFrameEmitted, RequestID: "b", Incarnation: 2, Frame: 2, Tokens: tokens(1), Position: 0})}
	run := func(tail ...core.Event) error {
		c := props.NewChecker(core.ToyModel{})
		c.SetEngine(engine.Config{DataParallelSize: 2})
		o := c.Observer(task.Real())
		for _, ev := range append(events[:len(events):len(events)], tail...) {
			o(ev)
		}
		return c.Err()
	}
	require.NoError(t, run(idle(0, 1), idle(1, 0)), "b came after core 1's inputs")
	v := requireViolation(t, run(idle(0, 1), idle(1, 1)), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "held incarnation(s) [2]", "b was among core 1's inputs")

	ended := []core.Event{{Kind: core.EventAbort, RequestID: "b", Incarnation: 2}, finish(2, core.FinishAbort, nil),
		on(1, core.Event{Kind: core.EventCoreAbort, RequestID: "b", InternalID: "b", Incarnation: 2})}
	v = requireViolation(t, run(append(ended, idle(0, 1), idle(1, 1))...), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "1 frame(s)", "b's frame, of an input core 1 answered, still on its way")
	require.NoError(t, run(append(ended, idle(0, 1), idle(1, 0))...), "b's frame, of an input core 1 did not wait for")

	// c's two sequences went to two cores, each its own input 2 there;
	// the one on core 1 is still held when both cores' WaitIdle waited
	// for input 2.
	pn := engine.Params{MaxTokens: 2, N: 2, Output: engine.Delta}
	seq := func(index, engine int, kind core.EventKind) core.Event {
		ev := core.Event{Kind: kind, RequestID: "c", InternalID: fmt.Sprintf("%d_c", index), Incarnation: 3, Index: index, Input: 2, Engine: engine}
		if kind == core.EventAdd {
			ev.Prompt, ev.Params, ev.Input = prompt, pn, 0
		}
		return ev
	}
	// b's frame was dropped; c's sequence 0 was aborted and left core 0,
	// its sequence 1 is still held.
	spread := append(ended[:len(ended):len(ended)], core.Event{Kind: core.EventFrameDropped, RequestID: "b", InternalID: "b", Incarnation: 2, Frame: 2, Tokens: tokens(1)},
		seq(0, 0, core.EventAdd), seq(1, 1, core.EventAdd), seq(0, 0, core.EventCoreAdd), seq(1, 1, core.EventCoreAdd),
		core.Event{Kind: core.EventAbort, RequestID: "c", Incarnation: 3}, seq(0, 0, core.EventCoreAbort))
	v = requireViolation(t, run(append(spread, idle(0, 2), idle(1, 2))...), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "held incarnation(s) [3/1]", "core 1 waited for its input 2")
	require.NoError(t, run(append(spread, idle(0, 2), idle(1, 1))...), "core 1 did not wait for its input 2")
}

// TestARequestEndsWhereTheModelStops: a request that finished on its own
// ends at its first token that stops it, at MaxTokens, or at the model
// length: one that went on past a stop token (several tokens a step taken
// at once, sglang's #31599), past MaxTokens, or stopped short for length
// breaks ends-where-the-model-stops; an abort may end it anywhere.
func TestARequestEndsWhereTheModelStops(t *testing.T) {
	toks := tokens(6)
	run := func(p engine.Params, modelLen int, reason core.FinishReason, n int) error {
		c := props.NewChecker(core.ToyModel{})
		c.SetModelLen(modelLen)
		for _, ev := range []core.Event{add(1, "a", p), finish(1, reason, toks[:n])} {
			c.Observe(ev)
		}
		return c.Finish()
	}
	stopAt2 := engine.Params{MaxTokens: 6, Output: engine.Delta, StopTokenIDs: []int{toks[2]}}
	require.NoError(t, run(stopAt2, 0, core.FinishStop, 3), "the stop token ends it, its last")
	v := requireViolation(t, run(stopAt2, 0, core.FinishStop, 5), props.EndsWhereTheModelStops)
	assert.Contains(t, v.Detail, fmt.Sprintf("its token 2 (%d) stops it", toks[2]))
	requireViolation(t, run(stopAt2, 0, core.FinishLength, 6), props.EndsWhereTheModelStops)
	require.NoError(t, run(stopAt2, 0, core.FinishAbort, 5), "an abort may end it anywhere")

	four := engine.Params{MaxTokens: 4, Output: engine.Delta, IgnoreEOS: true}
	require.NoError(t, run(four, 1000, core.FinishLength, 4))
	v = requireViolation(t, run(four, 1000, core.FinishLength, 5), props.EndsWhereTheModelStops)
	assert.Contains(t, v.Detail, "more than its MaxTokens 4")
	v = requireViolation(t, run(four, 1000, core.FinishLength, 3), props.EndsWhereTheModelStops)
	assert.Contains(t, v.Detail, "finished for length with 3 tokens")
	require.NoError(t, run(four, len(prompt)+3, core.FinishLength, 3), "the model length leaves 3")
	require.NoError(t, run(four, 0, core.FinishLength, 3), "without the model length, fewer may be its cap")
}

// TestAStepMustStayWithinItsBudget: a step that schedules more requests
// than MaxNumSeqs, or computes more tokens than MaxNumBatchedTokens, is
// caught once the checker knows the budget; within it, or with no budget
// told, it passes.
func TestAStepMustStayWithinItsBudget(t *testing.T) {
	run := func(cfg *engine.Config, step core.Event) error {
		c := props.NewChecker(core.ToyModel{})
		if cfg != nil {
			c.SetEngine(*cfg)
		}
		c.Observe(step)
		return c.Finish()
	}
	cfg := &engine.Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8}
	require.NoError(t, run(cfg, core.Event{Kind: core.EventStep, Step: 1, Held: 2, StepTokens: 8}))
	v := requireViolation(t, run(cfg, core.Event{Kind: core.EventStep, Step: 1, Held: 3, StepTokens: 8}), props.StepWithinBudget)
	assert.Contains(t, v.Detail, "ran step 1 over 3 request(s) and 8 token(s), past its budget of 2 and 8")
	requireViolation(t, run(cfg, core.Event{Kind: core.EventStep, Step: 1, Held: 1, StepTokens: 9}), props.StepWithinBudget)
	// The engine's defaults: 256 requests and 8192 tokens a step.
	require.NoError(t, run(&engine.Config{}, core.Event{Kind: core.EventStep, Step: 1, Held: 256, StepTokens: 8192}))
	requireViolation(t, run(&engine.Config{}, core.Event{Kind: core.EventStep, Step: 1, Held: 257, StepTokens: 1}), props.StepWithinBudget)
	require.NoError(t, run(nil, core.Event{Kind: core.EventStep, Step: 1, Held: 1000, StepTokens: 100000}), "no budget told")
}

// TestAnOutputMustCarryItsRequestsIDAndEndingReason: the caller's output
// names its request by the caller's id, and its finished output says the
// reason the request ended with: another id, or another reason (an abort
// told as a length finish), is caught.
func TestAnOutputMustCarryItsRequestsIDAndEndingReason(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	require.NoError(t, check(add(1, "a", p), finish(1, core.FinishLength, tokens(1)), output(1, tokens(1), true, core.FinishLength)))

	other := output(1, tokens(1), true, core.FinishLength)
	other.RequestID = "a-00000001"
	v := requireViolation(t, check(add(1, "a", p), finish(1, core.FinishLength, tokens(1)), other), props.NoStaleDelivery)
	assert.Contains(t, v.Detail, `reached its caller as request "a-00000001"`)

	v = requireViolation(t, check(add(1, "a", p), finish(1, core.FinishAbort, tokens(1)), output(1, tokens(1), true, core.FinishLength)), props.EndsExactlyOnce)
	assert.Contains(t, v.Detail, `ended with reason abort, but its finished output says "length"`)
}
