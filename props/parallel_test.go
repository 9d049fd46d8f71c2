package props_test

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// The checker tracks each sequence of a parallel-sampling request (N > 1)
// as a record of its own, keyed by (incarnation, Event.Index).

// seqTokens returns the first n tokens sequence index of a request for the
// prompt "hello" samples (no MinTokens, no stop tokens).
func seqTokens(index, n int) []int { return seqTokensFor(prompt, index, n) }

func seqTokensFor(prompt []int, index, n int) []int {
	m := core.ToyModel{}
	return core.TokensFor(m, core.SequenceKey(m.Prepare(prompt), index), n)
}

func seqName(index int) string { return fmt.Sprintf("%d_a-1", index) }

// addSeqs is the frontend's registration of the N sequences of incarnation
// inc of "a", in order, as AddRequest emits it.
func addSeqs(inc uint64, p engine.Params) []core.Event {
	var evs []core.Event
	for i := 0; i < p.N; i++ {
		evs = append(evs, core.Event{Kind: core.EventAdd, RequestID: "a", InternalID: seqName(i), Incarnation: inc, Index: i, Prompt: prompt, Params: p})
	}
	return evs
}

// seqDelivered is frame of sequence index's token at pos, delivered to the
// collector of sequence collectorIndex of the same incarnation.
func seqDelivered(frame, inc uint64, index, collectorIndex, pos int) core.Event {
	return core.Event{Kind: core.EventFrameDelivered, RequestID: "a", InternalID: seqName(index), Frame: frame, Incarnation: inc, Collector: inc,
		Index: index, CollectorIndex: collectorIndex, Tokens: seqTokens(index, pos+1)[pos:], Position: pos}
}

func seqFinish(inc uint64, index int, reason core.FinishReason, toks []int) core.Event {
	return core.Event{Kind: core.EventFinish, RequestID: "a", InternalID: seqName(index), Incarnation: inc, Index: index, Finished: true, Reason: reason, Tokens: toks}
}

// seqOutput is what Request.Next reports of one completion of an output.
func seqOutput(inc uint64, index int, toks []int, finished bool, reason core.FinishReason) core.Event {
	return core.Event{Kind: core.EventOutput, RequestID: "a", InternalID: seqName(index), Incarnation: inc, Index: index,
		Tokens: toks, Text: core.Tokenizer{}.Decode(toks), Finished: finished, Reason: reason}
}

func TestParallelSequencesAreCheckedEachByItsOwnKey(t *testing.T) {
	require.NotEqual(t, seqTokens(0, 4), seqTokens(1, 4), "the sequences differ")
	require.Equal(t, tokens(4), seqTokens(0, 4), "sequence 0 samples with the prompt's key")

	// A clean Delta run of two sequences, streamed one token at a time.
	p := engine.Params{MaxTokens: 2, N: 2, Output: engine.Delta}
	clean := addSeqs(1, p)
	for pos := 0; pos < 2; pos++ {
		for i := 0; i < 2; i++ {
			clean = append(clean, seqDelivered(uint64(2*pos+i+1), 1, i, i, pos))
			if pos == 1 {
				clean = append(clean, seqFinish(1, i, core.FinishLength, seqTokens(i, 2)))
			}
			var reason core.FinishReason
			if pos == 1 {
				reason = core.FinishLength
			}
			clean = append(clean, seqOutput(1, i, seqTokens(i, pos+1)[pos:], pos == 1, reason))
		}
	}
	require.NoError(t, check(clean...))

	// FinalOnly: one output with every sequence, after each finished.
	f := engine.Params{MaxTokens: 3, N: 3, Output: engine.FinalOnly}
	final := addSeqs(1, f)
	for i := 0; i < 3; i++ {
		final = append(final, seqFinish(1, i, core.FinishLength, seqTokens(i, 3)))
	}
	for i := 0; i < 3; i++ {
		final = append(final, seqOutput(1, i, seqTokens(i, 3), true, core.FinishLength))
	}
	require.NoError(t, check(final...))

	// Cumulative, one sequence aborted by its caller, the other finished.
	c := engine.Params{MaxTokens: 3, N: 2, Output: engine.Cumulative}
	cum := append(addSeqs(1, c),
		seqOutput(1, 1, seqTokens(1, 1), false, ""),
		core.Event{Kind: core.EventAbort, RequestID: "a", InternalID: seqName(1), Incarnation: 1, Index: 1},
		seqFinish(1, 1, core.FinishAbort, seqTokens(1, 1)),
		seqOutput(1, 1, seqTokens(1, 1), true, core.FinishAbort),
		seqFinish(1, 0, core.FinishLength, seqTokens(0, 3)),
		seqOutput(1, 0, seqTokens(0, 3), true, core.FinishLength))
	require.NoError(t, check(cum...))
}

// TestAMisroutedSequenceIsCaught: a frame of sequence 1 delivered to the
// collector of sequence 0 of the same incarnation is a stale delivery.
func TestAMisroutedSequenceIsCaught(t *testing.T) {
	p := engine.Params{MaxTokens: 3, N: 2, Output: engine.Delta}
	v := requireViolation(t, check(append(addSeqs(1, p), seqDelivered(7, 1, 1, 0, 0))...), props.NoStaleDelivery)
	assert.Contains(t, v.Detail, "frame 7")
	assert.Contains(t, v.Detail, "sequence 1")
	assert.Contains(t, v.Detail, "delivered to its sequence 0")
	require.NoError(t, check(append(addSeqs(1, p), seqDelivered(7, 1, 1, 1, 0), seqDelivered(8, 1, 0, 0, 0),
		seqFinish(1, 0, core.FinishAbort, nil), seqFinish(1, 1, core.FinishAbort, nil))...), "each frame to its own sequence")

	// Another incarnation's sequence is still caught by the incarnation.
	stale := seqDelivered(9, 1, 1, 1, 0)
	stale.Collector = 2
	v = requireViolation(t, check(append(append(addSeqs(1, p), addSeqs(2, p)...), stale)...), props.NoStaleDelivery)
	assert.Contains(t, v.Detail, "delivered to incarnation 2")
}

// TestAnotherSequencesTokensAreCaught: a sequence that carries the tokens
// of another sequence — as it would if every child sampled with the
// prompt's key — breaks ModelTokens, in a frame, an output and its final
// tokens.
func TestAnotherSequencesTokensAreCaught(t *testing.T) {
	p := engine.Params{MaxTokens: 3, N: 3, Output: engine.Delta}
	sameKey := seqTokens(0, 3) // sequence 0's: the prompt's own key
	emitted := core.Event{Kind: core.EventFrameEmitted, RequestID: "a", InternalID: seqName(2), Incarnation: 1, Index: 2, Frame: 1, Tokens: sameKey[:1]}
	v := requireViolation(t, check(append(addSeqs(1, p), emitted)...), props.ModelTokens)
	assert.Contains(t, v.Detail, "frame 1 emitted by the core")
	assert.Contains(t, v.Detail, "sequence 2")

	v = requireViolation(t, check(append(addSeqs(1, p), seqOutput(1, 1, sameKey[:2], false, ""))...), props.ModelTokens)
	assert.Contains(t, v.Detail, "a Delta output")
	assert.Contains(t, v.Detail, "sequence 1")

	v = requireViolation(t, check(append(addSeqs(1, p), seqFinish(1, 1, core.FinishLength, sameKey))...), props.ModelTokens)
	assert.Contains(t, v.Detail, "the final tokens")

	// Sequence 1's tokens in sequence 2 are as wrong.
	c := engine.Params{MaxTokens: 3, N: 3, Output: engine.Cumulative}
	requireViolation(t, check(append(addSeqs(1, c), seqOutput(1, 2, seqTokens(1, 2), false, ""))...), props.ModelTokens)

	// Each sequence's own tokens pass.
	ok := addSeqs(1, p)
	for i := 0; i < 3; i++ {
		own := core.Event{Kind: core.EventFrameEmitted, RequestID: "a", InternalID: seqName(i), Incarnation: 1, Index: i, Frame: uint64(i + 1), Tokens: seqTokens(i, 1)}
		ok = append(ok, own, seqFinish(1, i, core.FinishAbort, seqTokens(i, 1)))
	}
	require.NoError(t, check(ok...))
}

// TestASequenceThatNeverEndsIsCaught: every sequence must end, once.
func TestASequenceThatNeverEndsIsCaught(t *testing.T) {
	p := engine.Params{MaxTokens: 2, N: 3, Output: engine.Delta}
	c := props.NewChecker(core.ToyModel{})
	for _, ev := range append(addSeqs(1, p), seqFinish(1, 0, core.FinishLength, seqTokens(0, 2)), seqFinish(1, 2, core.FinishLength, seqTokens(2, 2))) {
		c.Observe(ev)
	}
	require.NoError(t, c.Err(), "nothing is wrong before the end")
	assert.Equal(t, props.Summary{Requests: 1}, c.Summary(), "a request with a sequence running has not finished")
	v := requireViolation(t, c.Finish(), props.EndsExactlyOnce)
	assert.Contains(t, v.Detail, "never ended")
	assert.Contains(t, v.Detail, "sequence 1")
	assert.Len(t, c.Violations(), 1, "only sequence 1 never ended: %v", c.Violations())

	// A sequence that ends twice.
	v = requireViolation(t, check(append(addSeqs(1, p), seqFinish(1, 1, core.FinishLength, seqTokens(1, 2)), seqFinish(1, 1, core.FinishAbort, seqTokens(1, 2)))...), props.EndsExactlyOnce)
	assert.NotContains(t, v.Detail, "never ended")

	// Every sequence ended: the request finished.
	c = props.NewChecker(core.ToyModel{})
	for _, ev := range addSeqs(1, p) {
		c.Observe(ev)
	}
	for i := 0; i < 3; i++ {
		c.Observe(seqFinish(1, i, core.FinishLength, seqTokens(i, 2)))
	}
	require.NoError(t, c.Finish())
	assert.Equal(t, props.Summary{Requests: 1, Finished: 1}, c.Summary())
}

// TestAnOutputOfAFinishedSequenceIsCaught: after a sequence's finished
// output, nothing more of it reaches the caller — while its siblings go on.
func TestAnOutputOfAFinishedSequenceIsCaught(t *testing.T) {
	p := engine.Params{MaxTokens: 2, N: 2, Output: engine.Delta}
	evs := append(addSeqs(1, p),
		seqFinish(1, 0, core.FinishLength, seqTokens(0, 2)), seqOutput(1, 0, seqTokens(0, 2), true, core.FinishLength),
		seqOutput(1, 1, seqTokens(1, 1), false, ""))
	c := props.NewChecker(core.ToyModel{})
	for _, ev := range evs {
		c.Observe(ev)
	}
	require.NoError(t, c.Err(), "a sibling streams on after sequence 0 finished")
	c.Observe(seqOutput(1, 0, nil, false, ""))
	requireViolation(t, c.Err(), props.NothingAfterFinish)
}

// TestAHeldSequenceIsCaughtByWaitIdle: the checker's account of the core is
// per sequence; one still held when WaitIdle returns is named as
// INCARNATION/SEQUENCE.
func TestAHeldSequenceIsCaughtByWaitIdle(t *testing.T) {
	p := engine.Params{MaxTokens: 2, N: 3}
	evs := addSeqs(1, p)
	for i := 0; i < 3; i++ {
		evs = append(evs, core.Event{Kind: core.EventCoreAdd, RequestID: "a", InternalID: seqName(i), Incarnation: 1, Index: i})
	}
	evs = append(evs, core.Event{Kind: core.EventAbort, Incarnation: 1, Index: 0}, // the frontend aborts sequence 0 only
		core.Event{Kind: core.EventCoreAbort, InternalID: seqName(0), Incarnation: 1, Index: 0},
		core.Event{Kind: core.EventCoreAbort, InternalID: seqName(1), Incarnation: 1, Index: 1})
	v := requireViolation(t, check(append(evs, core.Event{Kind: core.EventIdle})...), props.EndsExactlyOnce)
	assert.Contains(t, v.Detail, seqName(1), "the core aborted sequence 1, which nobody aborted")

	c := props.NewChecker(core.ToyModel{})
	for _, ev := range evs[:len(evs)-1] { // the core aborted sequence 0 only
		c.Observe(ev)
	}
	c.Observe(core.Event{Kind: core.EventIdle})
	v = requireViolation(t, c.Err(), props.WaitIdleMeansIdle)
	assert.Contains(t, v.Detail, "[1/1 1/2]", "sequences 1 and 2 are still held")

	// Aborted(inc) covers every sequence: the core's aborts of them are the
	// caller's.
	c = props.NewChecker(core.ToyModel{})
	for _, ev := range evs[:3+3] { // added to the frontend and the core
		c.Observe(ev)
	}
	c.Aborted(1)
	for i := 0; i < 3; i++ {
		c.Observe(core.Event{Kind: core.EventCoreAbort, InternalID: seqName(i), Incarnation: 1, Index: i})
	}
	c.Observe(core.Event{Kind: core.EventIdle})
	assert.NoError(t, c.Err())
}

// stopFor finds a stop string of two words that sequence 1's first 20
// tokens for prompt spell and sequence 0's first 20 do not.
func stopFor(t *testing.T, prompt []int) string {
	tok := core.Tokenizer{}
	one, zero := seqTokensFor(prompt, 1, 20), tok.Decode(seqTokensFor(prompt, 0, 20))
	for j := 2; j+2 <= len(one); j++ {
		if s := tok.Decode(one[j : j+2]); !strings.Contains(zero, s) {
			return s
		}
	}
	t.Fatalf("no stop string for %v", prompt)
	return ""
}

// drainAll reads r to its end.
func drainAll(r *engine.Request) ([]engine.Output, error) {
	var outs []engine.Output
	for {
		out, err := r.Next()
		if errors.Is(err, io.EOF) {
			return outs, nil
		}
		if err != nil {
			return outs, err
		}
		outs = append(outs, out)
	}
}

// TestParallelSamplingPassesTheCheckerOnTheRealRuntime: N > 1 requests on
// the real runtime, in every output kind, run to their end, aborted,
// cancelled, cut by a stop string, reused and live at Close, break no
// property.
func TestParallelSamplingPassesTheCheckerOnTheRealRuntime(t *testing.T) {
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen)
	e, err := engine.New(engine.Config{Observer: c.Locked(), StepTime: 200 * time.Microsecond})
	require.NoError(t, err)
	stop := stopFor(t, prompt)
	kinds := []engine.OutputKind{engine.Cumulative, engine.Delta, engine.FinalOnly}
	var all []*engine.Request
	addReq := func(id string, p engine.Params) *engine.Request {
		r, err := e.AddRequest(id, "hello", p)
		require.NoError(t, err, id)
		all = append(all, r)
		return r
	}
	var full, stopped, aborted, cancelled []*engine.Request
	for _, k := range kinds {
		full = append(full, addReq("full-"+k.String(), engine.Params{MaxTokens: 8, N: 3, Output: k}))
		stopped = append(stopped, addReq("stop-"+k.String(), engine.Params{MaxTokens: 20, N: 2, Output: k, Stop: []string{stop}}))
		aborted = append(aborted, addReq("abort-"+k.String(), engine.Params{MaxTokens: 100000, N: 3, Output: k}))
		cancelled = append(cancelled, addReq("cancel-"+k.String(), engine.Params{MaxTokens: 100000, N: 3, Output: k}))
	}
	for _, r := range append(full, stopped...) {
		outs, err := drainAll(r)
		require.NoError(t, err, r.ID())
		require.NotEmpty(t, outs, r.ID())
		assert.True(t, outs[len(outs)-1].Finished, r.ID())
	}
	time.Sleep(5 * time.Millisecond)
	for i, k := range kinds {
		e.Abort("abort-" + k.String())
		cancelled[i].Cancel()
	}
	for _, r := range append(aborted, cancelled...) {
		_, err := drainAll(r)
		require.NoError(t, err, r.ID())
	}
	for _, k := range kinds { // reuse at once
		r := addReq("abort-"+k.String(), engine.Params{MaxTokens: 5, N: 3, Output: k})
		_, err := drainAll(r)
		require.NoError(t, err, r.ID())
	}
	live := addReq("live", engine.Params{MaxTokens: 100000, N: 3, Output: engine.Delta})
	_, err = live.Next()
	require.NoError(t, err)
	require.NoError(t, e.Close())
	c.CheckKV(e)
	_, err = drainAll(live)
	require.NoError(t, err)

	require.NoError(t, c.Finish())
	assert.Empty(t, c.Violations())
	s := c.Summary()
	assert.Equal(t, len(all), s.Requests, "one record per request, whatever its N")
	assert.Equal(t, len(all), s.Finished, "every request finished")
	assert.Equal(t, 2*len(kinds)+1, s.Aborted, "aborted, cancelled and closed")
	assert.Equal(t, len(kinds), s.Reused)
}

// parallelWorkload is a small N > 1 workload for one simulated run: an N=3
// request of a drawn output kind runs to its end (unless a draw cancels
// it), an N=2 one meets a stop string, a long N=3 one is aborted and its id
// reused at once, and an N=3 one is live at Close. Every reader checks its
// sequences' tokens; the checker checks the rest.
func parallelWorkload(rt task.Runtime, seed uint64, stop string, shape *error) error {
	draw := sim.NewPCGChooser(seed, sim.StreamWorkload)
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen)
	c.Where = func() (string, string) {
		tk, p, _ := sim.Where(rt)
		return tk, p
	}
	e, err := engine.New(engine.Config{Runtime: rt, Observer: c.Observe, StepTime: 200_000})
	if err != nil {
		return err
	}
	kind := engine.OutputKind(draw.Intn(3))
	type job struct {
		id      string
		p       engine.Params
		r       *engine.Request
		outs    []engine.Output
		err     error
		aborted bool
	}
	jobs := []*job{
		{id: "a", p: engine.Params{MaxTokens: 2 + draw.Intn(4), N: 3, Output: kind}},
		{id: "s", p: engine.Params{MaxTokens: 20, N: 2, Output: engine.OutputKind(draw.Intn(3)), Stop: []string{stop}}},
		{id: "b", p: engine.Params{MaxTokens: 1000, N: 3, Output: engine.OutputKind(draw.Intn(3))}},
	}
	g := task.NewGroup(rt, "clients")
	start := func(j *job) error {
		r, err := e.AddRequest(j.id, "hello", j.p)
		if err != nil {
			return fmt.Errorf("AddRequest(%q): %w", j.id, err)
		}
		j.r = r
		g.Go("client", func() { j.outs, j.err = drainAll(r) })
		return nil
	}
	for _, j := range jobs {
		if err := start(j); err != nil {
			return err
		}
	}
	rt.Sleep(time.Duration(draw.Intn(5)) * 200 * time.Microsecond)
	e.Abort("b")
	jobs[2].aborted = true
	if draw.Intn(4) == 0 {
		jobs[0].r.Cancel()
		jobs[0].aborted = true
	}
	reused := &job{id: "b", p: engine.Params{MaxTokens: 3, N: 3, Output: engine.OutputKind(draw.Intn(3))}}
	if err := start(reused); err != nil {
		return err
	}
	jobs = append(jobs, reused)
	live, err := e.AddRequest("live", "hello", engine.Params{MaxTokens: 1000, N: 3, Output: engine.Delta})
	if err != nil {
		return err
	}
	g.Wait()
	e.Close()
	c.CheckKV(e)
	if _, err := drainAll(live); err != nil {
		return err
	}
	for _, j := range jobs {
		if err := checkJob(j.id, j.p, j.outs, j.err, j.aborted); err != nil {
			return err
		}
		if *shape == nil {
			*shape = checkShape(j.id, j.p, j.outs)
		}
	}
	if err := c.Finish(); err != nil {
		return err
	}
	if s := c.Summary(); s.Requests != 5 || s.Finished != 5 || s.Reused != 1 {
		return fmt.Errorf("the checker saw %+v, want 5 requests, all finished, 1 reused", s)
	}
	return nil
}

// checkShape checks the outputs of a request of N > 1 sequences as a
// caller sees them: each names the request and carries at least one
// sequence, only the last is finished, and a FinalOnly request returns
// one output with every sequence.
func checkShape(id string, p engine.Params, outs []engine.Output) error {
	for i, o := range outs {
		if o.RequestID != id || len(o.Completions) == 0 || o.Finished != (i == len(outs)-1) {
			return fmt.Errorf("%s (%s): output %d of %d is %+v", id, p.Output, i+1, len(outs), o)
		}
	}
	if p.Output == engine.FinalOnly && (len(outs) != 1 || len(outs[0].Completions) != p.N) {
		return fmt.Errorf("%s: a FinalOnly request of N=%d returned %d outputs: %+v", id, p.N, len(outs), outs)
	}
	return nil
}

// checkJob checks what a reader of a request of p.N sequences received:
// every sequence got its own tokens and finished, with reason length and
// MaxTokens tokens unless the caller aborted it or a stop string ended it.
func checkJob(id string, p engine.Params, outs []engine.Output, err error, aborted bool) error {
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	if len(outs) == 0 || !outs[len(outs)-1].Finished {
		return fmt.Errorf("%s: no finished output in %d", id, len(outs))
	}
	seqs := make([][]int, p.N)
	reasons := make([]engine.FinishReason, p.N)
	for _, o := range outs {
		for _, c := range o.Completions {
			if p.Output == engine.Delta {
				seqs[c.Index] = append(seqs[c.Index], c.TokenIDs...)
			} else {
				seqs[c.Index] = c.TokenIDs
			}
			if c.FinishReason != "" {
				reasons[c.Index] = c.FinishReason
			}
		}
	}
	for i, got := range seqs {
		if want := seqTokensFor(prompt, i, len(got)); !slices.Equal(got, want) {
			return fmt.Errorf("%s sequence %d received %v, want %v", id, i, got, want)
		}
		switch r := reasons[i]; {
		case r == engine.FinishLength && len(got) == p.MaxTokens:
		case r == engine.FinishAbort && aborted:
		case r == engine.FinishStop && len(p.Stop) > 0:
		default:
			return fmt.Errorf("%s sequence %d finished with %q after %d of %d tokens (aborted: %v)", id, i, r, len(got), p.MaxTokens, aborted)
		}
	}
	return nil
}

// TestParallelSamplingPassesTheCheckerUnderTheSimulator: a few hundred
// seeds of the N > 1 workload, under every strategy, break no property.
func TestParallelSamplingPassesTheCheckerUnderTheSimulator(t *testing.T) {
	stop := stopFor(t, prompt)
	strategies := []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos(), sim.Starve("output-handler")}
	const seeds = 400
	shapeFailures, firstShape := 0, error(nil)
	for seed := uint64(1); seed <= seeds; seed++ {
		st := strategies[int(seed)%len(strategies)]
		var shape error
		res := sim.Run(sim.Options{Seed: seed, Strategy: st, NoRecord: true, HangAfter: hangAfter}, func(rt task.Runtime) error {
			return parallelWorkload(rt, seed, stop, &shape)
		})
		require.NoError(t, res.Err, "seed %d strategy %s", seed, st)
		if shape != nil {
			shapeFailures++
			if firstShape == nil {
				firstShape = fmt.Errorf("seed %d strategy %s: %w", seed, st, shape)
			}
		}
	}
	assert.NoError(t, firstShape, "%d of %d seeds returned outputs of the wrong shape", shapeFailures, seeds)
}

// requestOutput is what Request.Next reports of an output of a request of
// several sequences as a whole, after its completions' events.
func requestOutput(inc uint64, carried int, finished bool) core.Event {
	return core.Event{Kind: core.EventRequestOutput, RequestID: "a", InternalID: "a-1", Incarnation: inc, Held: carried, Finished: finished}
}

// TestAnOutputOfTheWholeRequestIsChecked: an output of a request of
// several sequences carries at least one, is finished exactly when the
// caller has seen every sequence finish, and is the last.
func TestAnOutputOfTheWholeRequestIsChecked(t *testing.T) {
	p := engine.Params{MaxTokens: 1, N: 2, Output: engine.Cumulative}
	run := func(tail ...core.Event) error {
		evs := addSeqs(1, p)
		for i := 0; i < 2; i++ {
			evs = append(evs, seqDelivered(uint64(i+1), 1, i, i, 0), seqFinish(1, i, core.FinishLength, seqTokens(i, 1)))
		}
		return check(append(evs, tail...)...)
	}
	first := seqOutput(1, 0, seqTokens(0, 1), true, core.FinishLength)
	second := seqOutput(1, 1, seqTokens(1, 1), true, core.FinishLength)

	require.NoError(t, run(first, requestOutput(1, 1, false), second, requestOutput(1, 1, true)), "one sequence an output")
	require.NoError(t, run(first, second, requestOutput(1, 2, true)), "both in one output")

	v := requireViolation(t, run(first, requestOutput(1, 1, false), requestOutput(1, 0, false), second, requestOutput(1, 1, true)), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, "carries no sequence")
	v = requireViolation(t, run(first, requestOutput(1, 1, true)), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, "finished=true, while the caller had not seen sequence(s) [1] finish")
	v = requireViolation(t, run(first, second, requestOutput(1, 2, false)), props.DeltasConcatenate)
	assert.Contains(t, v.Detail, "finished=false")
	v = requireViolation(t, run(first, second, requestOutput(1, 2, true), requestOutput(1, 1, true)), props.NothingAfterFinish)
	assert.Contains(t, v.Detail, "after its finished one")
}
