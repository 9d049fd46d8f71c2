package props_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// reached feeds events to a fresh checker and returns what it reached.
func reached(events ...core.Event) props.SituationSet {
	c := props.NewChecker(core.ToyModel{})
	for _, ev := range events {
		c.Observe(ev)
	}
	return c.Reached()
}

func coreAdd(inc uint64) core.Event {
	return core.Event{Kind: core.EventCoreAdd, RequestID: "a", Incarnation: inc}
}

func emitted(frame, inc uint64, pos int, finished bool) core.Event {
	return core.Event{Kind: core.EventFrameEmitted, RequestID: "a", Frame: frame, Incarnation: inc, Tokens: tokens(pos + 1)[pos:], Position: pos, Finished: finished}
}

func dropped(frame, inc uint64, pos int) core.Event {
	return core.Event{Kind: core.EventFrameDropped, RequestID: "a", Frame: frame, Incarnation: inc, Tokens: tokens(pos + 1)[pos:], Position: pos}
}

func abort(inc uint64) core.Event {
	return core.Event{Kind: core.EventAbort, RequestID: "a", Incarnation: inc}
}

func coreAbort(inc uint64) core.Event {
	return core.Event{Kind: core.EventCoreAbort, RequestID: "a", Incarnation: inc}
}

// TestTheFoundingWindowIsReachedWhereverTheStaleFrameGoes: a frame of the
// aborted incarnation 1 reaches the output processor once incarnation 2 of
// its id is live. The fixed engine drops it, the legacy engine delivers it
// to incarnation 2: both reached the window, and only the second violates
// a property.
func TestTheFoundingWindowIsReachedWhereverTheStaleFrameGoes(t *testing.T) {
	p := engine.Params{MaxTokens: 3, Output: engine.Delta}
	before := []core.Event{add(1, "a", p), coreAdd(1), emitted(1, 1, 0, false), abort(1), add(2, "a", p)}

	fixed := props.NewChecker(core.ToyModel{})
	for _, ev := range append(before, dropped(1, 1, 0)) {
		fixed.Observe(ev)
	}
	assert.Empty(t, fixed.Violations())
	assert.True(t, fixed.Reached().Has(props.StaleFrameAfterReuse), fixed.Reached().String())
	assert.True(t, fixed.Reached().Has(props.StaleFrameDropped))

	legacy := props.NewChecker(core.ToyModel{})
	for _, ev := range append(before, delivered(1, 1, 2, 0)) {
		legacy.Observe(ev)
	}
	requireViolation(t, legacy.Err(), props.NoStaleDelivery)
	assert.True(t, legacy.Reached().Has(props.StaleFrameAfterReuse), legacy.Reached().String())
	assert.False(t, legacy.Reached().Has(props.StaleFrameDropped), "nothing was dropped")

	// Both reused the id while the core held incarnation 1 and its frame
	// was on its way.
	for _, set := range []props.SituationSet{fixed.Reached(), legacy.Reached()} {
		assert.True(t, set.Has(props.ReuseBeforeCoreAbort), set.String())
		assert.True(t, set.Has(props.ReuseWithFramesInFlight), set.String())
	}
}

// TestTheFoundingWindowNeedsTheNewIncarnationLive: a stale frame dropped
// before the id's reuse, or after the new incarnation ended, is not the
// window: no new incarnation could have received it.
func TestTheFoundingWindowNeedsTheNewIncarnationLive(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	early := reached(add(1, "a", p), coreAdd(1), emitted(1, 1, 0, false), abort(1), dropped(1, 1, 0), coreAbort(1), add(2, "a", p))
	assert.True(t, early.Has(props.StaleFrameDropped))
	assert.False(t, early.Has(props.StaleFrameAfterReuse), early.String())
	assert.False(t, early.Has(props.ReuseBeforeCoreAbort), "the core had taken the abort: %s", early)
	assert.False(t, early.Has(props.ReuseWithFramesInFlight), "the frame was dropped: %s", early)

	late := reached(add(1, "a", p), coreAdd(1), emitted(1, 1, 0, false), abort(1), add(2, "a", p), abort(2), dropped(1, 1, 0))
	assert.False(t, late.Has(props.StaleFrameAfterReuse), "incarnation 2 was aborted: %s", late)

	// Three incarnations: the frame of the first reaches the output
	// processor while the third is live.
	third := reached(add(1, "a", p), coreAdd(1), emitted(1, 1, 0, false), abort(1), add(2, "a", p), abort(2), add(3, "a", p), dropped(1, 1, 0))
	assert.True(t, third.Has(props.StaleFrameAfterReuse), third.String())
}

// TestReuseWindowsAreTheEarlierIncarnationsState: the core holding an
// earlier incarnation, and its frames on their way, are told apart; an
// incarnation that left the core by its final frame, or through the
// engine's death, is held no longer.
func TestReuseWindowsAreTheEarlierIncarnationsState(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	inCoreOnly := reached(add(1, "a", p), coreAdd(1), abort(1), add(2, "a", p))
	assert.Equal(t, props.SetOf(props.ReuseBeforeCoreAbort), inCoreOnly)

	framesOnly := reached(add(1, "a", p), coreAdd(1), emitted(1, 1, 0, true), finish(1, core.FinishLength, tokens(1)), add(2, "a", p))
	assert.Equal(t, props.SetOf(props.ReuseWithFramesInFlight), framesOnly)

	settled := reached(add(1, "a", p), coreAdd(1), emitted(1, 1, 0, true), delivered(1, 1, 1, 0), finish(1, core.FinishLength, tokens(1)), add(2, "a", p))
	assert.Equal(t, props.SituationSet(0), settled)

	// A second ADD of a sequence the core holds counts it once: the abort
	// leaves nothing held.
	twice := reached(add(1, "a", p), coreAdd(1), coreAdd(1), abort(1), coreAbort(1), add(2, "a", p))
	assert.Equal(t, props.SituationSet(0), twice)

	dead := reached(add(1, "a", p), coreAdd(1), abort(1), core.Event{Kind: core.EventDead}, add(2, "a", p))
	assert.Equal(t, props.SetOf(props.EngineDied), dead)
}

func TestTheEnginesRarePathsAreReached(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	cases := []struct {
		want   props.Situation
		events []core.Event
	}{
		{props.LateCoreAbort, []core.Event{add(1, "a", p), {Kind: core.EventCoreAbort, InternalID: "a"}}},
		{props.CoreRefusedAdd, []core.Event{{Kind: core.EventCoreReject, RequestID: "a"}}},
		{props.Preempted, []core.Event{add(1, "a", p), coreAdd(1), {Kind: core.EventPreempt, RequestID: "a", Incarnation: 1}}},
		{props.PrefixCacheHit, []core.Event{add(1, "a", p), {Kind: core.EventPrefixHit, RequestID: "a", Incarnation: 1, Held: 16}}},
		{props.PauseWithRequests, []core.Event{add(1, "a", p), coreAdd(1), {Kind: core.EventPause, Call: 1, Text: "wait"}}},
		{props.PauseWhilePaused, []core.Event{{Kind: core.EventPause, Call: 1, Text: "keep"}, {Kind: core.EventPause, Call: 2, Text: "wait"}}},
		{props.ResumeBeforePauseTookEffect, []core.Event{{Kind: core.EventPause, Call: 1, Text: "wait"}, {Kind: core.EventResume, Call: 2}}},
		{props.AddWhilePaused, []core.Event{{Kind: core.EventPause, Call: 1, Text: "keep"}, {Kind: core.EventPauseDone, Call: 1}, add(1, "a", p), coreAdd(1)}},
		{props.KVStoreWaitedForLoads, []core.Event{add(1, "a", p), coreAdd(1), {Kind: core.EventKVStoreWait, RequestID: "a", Incarnation: 1, Held: 2, Text: "loads"}}},
		{props.KVLoadWaitedForALoad, []core.Event{add(1, "a", p), coreAdd(1), {Kind: core.EventKVLoadWait, RequestID: "a", Incarnation: 1}}},
		{props.KVLoadHeldBack, []core.Event{add(1, "a", p), coreAdd(1), {Kind: core.EventKVLoadWait, RequestID: "a", Incarnation: 1, Text: "loads"}}},
		{props.TokensCutAtAStop, []core.Event{add(1, "a", p), coreAdd(1), {Kind: core.EventTokensCut, RequestID: "a", Incarnation: 1, Held: 2, Text: "stop"}}},
	}
	for _, tc := range cases {
		assert.Equal(t, props.SetOf(tc.want), reached(tc.events...), tc.want.String())
	}
	// A reset that preempts a request with a step of it in flight is a
	// preemption too.
	inFlight := reached(add(1, "a", p), coreAdd(1), core.Event{Kind: core.EventPreempt, RequestID: "a", Incarnation: 1, Held: 1})
	assert.Equal(t, props.SetOf(props.Preempted, props.ResetWithStepInFlight), inFlight)
	// A store that waits for its own copies in flight, not for loads, is
	// not the window of core/kv-evict-while-loading.
	own := reached(add(1, "a", p), coreAdd(1), core.Event{Kind: core.EventKVStoreWait, RequestID: "a", Incarnation: 1, Held: 2})
	assert.Equal(t, props.SituationSet(0), own)
	// And not where they are not: the second copy of an abort the core
	// took (the frontend sends it on two queues) finds nothing, and is not
	// late.
	twice := reached(add(1, "a", p), coreAdd(1), abort(1), core.Event{Kind: core.EventCoreAbort, InternalID: "a", Incarnation: 1},
		core.Event{Kind: core.EventCoreAbort, InternalID: "a"})
	assert.Equal(t, props.SituationSet(0), twice)
	calm := reached(
		core.Event{Kind: core.EventPause, Call: 1, Text: "keep"}, core.Event{Kind: core.EventPauseDone, Call: 1},
		core.Event{Kind: core.EventResume, Call: 2}, add(1, "a", p), coreAdd(1))
	assert.Equal(t, props.SituationSet(0), calm, "an empty pause that took effect, then a resume, then an ADD")
}

func TestSituationNames(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range props.AllSituations {
		name := s.String()
		require.NotContains(t, name, "situation(", "situation %d has no name", s)
		require.False(t, seen[name], "%s named twice", name)
		seen[name] = true
		assert.NotEmpty(t, s.Doc(), name)
		back, err := props.ParseSituation(name)
		require.NoError(t, err)
		assert.Equal(t, s, back)
	}
	_, err := props.ParseSituation("stale-frame")
	require.ErrorContains(t, err, `no situation "stale-frame"`)
	require.ErrorContains(t, err, "stale-frame-after-reuse", "the error lists the names")

	set := props.SetOf(props.PrefixCacheHit, props.StaleFrameAfterReuse)
	assert.Equal(t, []props.Situation{props.StaleFrameAfterReuse, props.PrefixCacheHit}, set.List())
	assert.Equal(t, "stale-frame-after-reuse, prefix-cache-hit", set.String())
	assert.Equal(t, 2, set.Len())
	assert.Equal(t, "none", props.SituationSet(0).String())
	var first []props.Situation
	for s := range set.All() {
		first = append(first, s)
		break
	}
	assert.Equal(t, []props.Situation{props.StaleFrameAfterReuse}, first, "All stops when asked")
	assert.Equal(t, len(props.AllSituations), props.SetOf(props.AllSituations...).Len())
}

// TestAnAbortAfterReuseIsReachedOnBothEngines: incarnation 1 of "a" is
// aborted, and incarnation 2 is in the core when the core takes the abort.
// The fixed engine aborts incarnation 1's internal id (which it may or may
// not still hold); the legacy engine aborts "a", which is incarnation 2
// now. Each reached the window; once incarnation 2 has left the core, a
// late abort of incarnation 1 is not it.
func TestAnAbortAfterReuseIsReachedOnBothEngines(t *testing.T) {
	p := engine.Params{MaxTokens: 1, Output: engine.Delta}
	addAs := func(inc uint64, internal string) core.Event {
		ev := add(inc, "a", p)
		ev.InternalID = internal
		return ev
	}
	before := []core.Event{addAs(1, "a-1"), coreAdd(1), abort(1), addAs(2, "a-2"), coreAdd(2)}
	held := reached(append(before, core.Event{Kind: core.EventCoreAbort, InternalID: "a-1", Incarnation: 1})...)
	assert.True(t, held.Has(props.AbortAfterReuse), held.String())
	gone := reached(append(before, coreAbort(1), core.Event{Kind: core.EventCoreAbort, InternalID: "a-1"})...)
	assert.True(t, gone.Has(props.AbortAfterReuse), "the second copy of the abort: %s", gone)

	legacy := []core.Event{add(1, "a", p), coreAdd(1), abort(1), coreAbort(1), add(2, "a", p), coreAdd(2),
		core.Event{Kind: core.EventCoreAbort, InternalID: "a", Incarnation: 2}}
	c := props.NewChecker(core.ToyModel{})
	for _, ev := range legacy {
		c.Observe(ev)
	}
	requireViolation(t, c.Err(), props.ReuseFinishesNormally)
	assert.True(t, c.Reached().Has(props.AbortAfterReuse), c.Reached().String())

	after := reached(addAs(1, "a-1"), coreAdd(1), abort(1), addAs(2, "a-2"), coreAdd(2), emitted(1, 2, 0, true),
		core.Event{Kind: core.EventCoreAbort, InternalID: "a-1"})
	assert.False(t, after.Has(props.AbortAfterReuse), "incarnation 2 had left the core: %s", after)
	assert.True(t, after.Has(props.LateCoreAbort), after.String())
}
