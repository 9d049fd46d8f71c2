package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// asyncHang bounds the wall time of one simulated run of these tests: a
// run stuck past it panics with the seed and the stuck task's stack.
const asyncHang = time.Minute

// stopAt returns a stop string that first appears in the text of prompt's
// tokens where token at does, and the text before it: the request that
// carries it finishes with reason stop after at+1 tokens.
func stopAt(t *testing.T, prompt string, at int) (stop, before string) {
	t.Helper()
	tok := core.Tokenizer{}
	ts := want(prompt, at+1)
	stop = tok.Piece(ts[at])
	text := tok.Decode(ts)
	i := strings.Index(text, stop)
	require.Equal(t, len(tok.Decode(ts[:at])), i, "test bug: %q appears before token %d of %q", stop, at, prompt)
	return stop, text[:i]
}

// asyncJob is one request of the async-scheduling workload.
type asyncJob struct {
	id, prompt string
	p          engine.Params
}

// asyncResult is what a caller got from a request, as a whole: the tokens
// and text its outputs add up to (per sequence for N > 1), how it
// finished, and how many outputs a FinalOnly request returned.
type asyncResult struct {
	Tokens     [][]int
	Text       []string
	Reason     []engine.FinishReason
	StopReason []string
	Finished   bool
	FinalOnlyN int
	Err        string
}

func summarize(p engine.Params, outs []engine.Output, err error) asyncResult {
	n := max(p.N, 1)
	r := asyncResult{Tokens: make([][]int, n), Text: make([]string, n), Reason: make([]engine.FinishReason, n), StopReason: make([]string, n)}
	if err != nil {
		r.Err = err.Error()
	}
	if p.Output == engine.FinalOnly {
		r.FinalOnlyN = len(outs)
	}
	for _, o := range outs {
		r.Finished = o.Finished
		cs := o.Completions
		if n == 1 {
			cs = []engine.Completion{{TokenIDs: o.TokenIDs, Text: o.Text, FinishReason: o.FinishReason, StopReason: o.StopReason}}
		}
		for _, c := range cs {
			if p.Output == engine.Delta {
				r.Tokens[c.Index] = append(r.Tokens[c.Index], c.TokenIDs...)
				r.Text[c.Index] += c.Text
			} else {
				r.Tokens[c.Index] = slices.Clone(c.TokenIDs)
				r.Text[c.Index] = c.Text
			}
			if c.FinishReason != "" {
				r.Reason[c.Index], r.StopReason[c.Index] = c.FinishReason, c.StopReason
			}
		}
	}
	return r
}

// asyncWorkload runs jobs at once, one caller task each, on an engine with
// chunked prefill and a KV cache small enough to preempt, under seed and
// strategy, and returns what each caller got, how many frames came out
// of a step older than the last one started, and how many preemptions
// there were.
func asyncWorkload(t *testing.T, async bool, seed uint64, st sim.Strategy, jobs []asyncJob) (map[string]asyncResult, int, int64) {
	t.Helper()
	w := jobsWorkload(t, engine.Config{AsyncScheduling: async}, seed, st, jobs)
	return w.results, w.overlaps, w.stats.Preemptions
}

// workloadRun is what jobsWorkload saw: each caller's result, the frames
// that came out of a step older than the last one started, the frames
// carrying several tokens, the tokens dropped past a request's end by
// why (core.EventTokensCut), and the engine's counts at the end.
type workloadRun struct {
	results          map[string]asyncResult
	overlaps, multis int
	cut              map[string]int
	stats            engine.Stats
}

// jobsWorkload runs jobs at once, one caller task each, on an engine of
// cfg with chunked prefill and a KV cache small enough to preempt, under
// seed and strategy.
func jobsWorkload(t *testing.T, cfg engine.Config, seed uint64, st sim.Strategy, jobs []asyncJob) workloadRun {
	t.Helper()
	w := workloadRun{results: make(map[string]asyncResult, len(jobs)), cut: map[string]int{}}
	started := int64(0)
	res := sim.Run(sim.Options{Seed: seed, Strategy: st, HangAfter: asyncHang}, func(rt task.Runtime) error {
		cfg.Runtime, cfg.BlockSize, cfg.NumBlocks, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = rt, 4, 10, 16, 4
		cfg.Observer = func(ev engine.Event) {
			switch ev.Kind {
			case core.EventStep:
				started = ev.Step
			case core.EventFrameEmitted:
				if ev.Step < started {
					w.overlaps++
				}
				if len(ev.Tokens) > 1 {
					w.multis++
				}
			case core.EventTokensCut:
				w.cut[ev.Text] += ev.Held
			}
		}
		e, err := engine.New(cfg)
		if err != nil {
			return err
		}
		defer e.Close()
		g := task.NewGroup(rt, "callers")
		for _, j := range jobs {
			g.Go("caller-"+j.id, func() {
				r, err := e.AddRequest(j.id, j.prompt, j.p)
				var outs []engine.Output
				if err == nil {
					outs, err = readAll(r)
				}
				w.results[j.id] = summarize(j.p, outs, err)
			})
		}
		g.Wait()
		err = e.WaitIdle(context.Background())
		w.stats = e.Stats()
		return err
	})
	require.NoError(t, res.Err, "seed %d config %+v", seed, cfg)
	return w
}

// sameOutputJobs is the workload of the tests that run an engine setting
// against the engine without it and expect the same outputs: every output
// kind, stop strings (stopD in the sixth token of "hello", textD the text
// before it; stopC and textC in the fourth of "hello world"), a stop token
// (stopTok, the fifth of "the quick brown fox") after MinTokens, and
// parallel sampling.
func sameOutputJobs(t *testing.T) (jobs []asyncJob, stopD, textD, stopC, textC string, stopTok int) {
	t.Helper()
	long := "the of and to in is it you that he was for on are with as his they be at one have this"
	stopD, textD = stopAt(t, "hello", 5)
	stopC, textC = stopAt(t, "hello world", 3)
	stopTok = want("the quick brown fox", 6)[4]
	jobs = []asyncJob{
		{"len-c", "hello", engine.Params{MaxTokens: 12}},
		{"len-d", "the quick brown fox", engine.Params{MaxTokens: 9, Output: engine.Delta}},
		{"final", long, engine.Params{MaxTokens: 7, Output: engine.FinalOnly}},
		{"stop-d", "hello", engine.Params{MaxTokens: 30, Output: engine.Delta, Stop: []string{"no such words here", stopD}}},
		{"stop-c", "hello world", engine.Params{MaxTokens: 30, Stop: []string{stopC}}},
		{"stop-token", "the quick brown fox", engine.Params{MaxTokens: 30, MinTokens: 2, StopTokenIDs: []int{stopTok}, Output: engine.Delta}},
		{"n2", "a long way home", engine.Params{MaxTokens: 6, N: 2, Output: engine.Delta}},
		{"n3-final", "hello", engine.Params{MaxTokens: 5, N: 3, Output: engine.FinalOnly}},
	}
	return jobs, stopD, textD, stopC, textC, stopTok
}

// TestAsyncSchedulingGivesTheSameOutputs: with async scheduling every
// caller gets what it gets without — the tokens, the text, the finish
// reason, the stop string or token — in every output kind, with stop
// strings, stop tokens, MinTokens, parallel sampling, chunked prefill and
// preemption, over 20 seeds of Chaos (a task starved at random) and
// Random; and the steps really overlap: with it the core starts a step before the
// output of the one before is out, without it never.
func TestAsyncSchedulingGivesTheSameOutputs(t *testing.T) {
	jobs, stopD, textD, _, textC, stopTok := sameOutputJobs(t)
	preemptions := int64(0)
	for seed := uint64(1); seed <= 20; seed++ {
		st := sim.Chaos()
		if seed%2 == 0 {
			st = sim.Random()
		}
		syncRes, syncOverlaps, _ := asyncWorkload(t, false, seed, st, jobs)
		asyncRes, asyncOverlaps, preempted := asyncWorkload(t, true, seed, st, jobs)
		preemptions += preempted
		assert.Zero(t, syncOverlaps, "seed %d: without async scheduling a step's output is out before the next starts", seed)
		assert.Positive(t, asyncOverlaps, "seed %d: with async scheduling steps overlap", seed)
		for _, j := range jobs {
			s, a := syncRes[j.id], asyncRes[j.id]
			assert.Equal(t, s, a, "seed %d: %s", seed, j.id)
			assert.Empty(t, a.Err, "seed %d: %s", seed, j.id)
			assert.True(t, a.Finished, "seed %d: %s", seed, j.id)
		}
		// Not merely the same: right.
		assert.Equal(t, want("hello", 12), asyncRes["len-c"].Tokens[0])
		assert.Equal(t, []engine.FinishReason{engine.FinishLength}, asyncRes["len-c"].Reason)
		assert.Equal(t, want("the quick brown fox", 9), asyncRes["len-d"].Tokens[0])
		assert.Equal(t, want(jobs[2].prompt, 7), asyncRes["final"].Tokens[0])
		assert.Equal(t, 1, asyncRes["final"].FinalOnlyN)
		assert.Equal(t, 1, asyncRes["n3-final"].FinalOnlyN)
		for _, id := range []string{"stop-d", "stop-c"} {
			assert.Equal(t, engine.FinishStop, asyncRes[id].Reason[0], "seed %d: %s", seed, id)
		}
		assert.Equal(t, textD, asyncRes["stop-d"].Text[0])
		assert.Equal(t, stopD, asyncRes["stop-d"].StopReason[0])
		assert.Equal(t, want("hello", 6), asyncRes["stop-d"].Tokens[0], "the stop string is in the sixth token")
		assert.Equal(t, textC, asyncRes["stop-c"].Text[0])
		assert.Equal(t, want("hello world", 4), asyncRes["stop-c"].Tokens[0])
		assert.Equal(t, want("the quick brown fox", 5), asyncRes["stop-token"].Tokens[0], "the stop token is the fifth")
		assert.Equal(t, engine.FinishStop, asyncRes["stop-token"].Reason[0])
		assert.Equal(t, fmt.Sprint(stopTok), asyncRes["stop-token"].StopReason[0])
		for i := range 3 {
			assert.Len(t, asyncRes["n3-final"].Tokens[i], 5)
		}
		assert.NotEqual(t, asyncRes["n2"].Tokens[0], asyncRes["n2"].Tokens[1], "each sequence samples its own tokens")
		if t.Failed() {
			t.Fatalf("seed %d: see above", seed)
		}
	}
	assert.Positive(t, preemptions, "the cache is small enough that requests are preempted with a step in flight")
	t.Logf("preemptions with async scheduling over 20 seeds: %d", preemptions)
}

// stopThenReuse runs one seed of vLLM #29355's pattern under async
// scheduling: "x" finishes on a stop string, which the frontend finds and
// aborts in the core while the core computes the step after it, and the
// caller reuses "x" at once, for a request of another prompt. It returns
// the first thing wrong: the new request's tokens are not its own, or it
// does not finish for length, or the checker saw a violation; and the
// number of frames the output handler dropped as stale.
func stopThenReuse(seed uint64, st sim.Strategy, legacy bool, stop string, kind engine.OutputKind) (dropped int64, err error) {
	res := sim.Run(sim.Options{Seed: seed, Strategy: st, HangAfter: asyncHang}, func(rt task.Runtime) error {
		c := props.NewChecker(core.ToyModel{})
		c.SetModelLen(core.DefaultMaxModelLen)
		c.Where = func() (string, string) {
			tk, p, _ := sim.Where(rt)
			return tk, p
		}
		e, err := engine.New(engine.Config{Runtime: rt, AsyncScheduling: true, LegacyIDRouting: legacy, Observer: c.Observe})
		if err != nil {
			return err
		}
		defer e.Close()
		old, err := e.AddRequest("x", "hello", engine.Params{MaxTokens: 40, Output: kind, Stop: []string{stop}})
		if err != nil {
			return err
		}
		outs, err := readAll(old)
		if err != nil {
			return err
		}
		if o := last(outs); !o.Finished || o.FinishReason != engine.FinishStop || o.StopReason != stop {
			return fmt.Errorf("the first x ended with %+v, not on its stop string", o)
		}
		// At once: the core has the step after the stop in flight.
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Second)
		defer cancel()
		var got []int
		var lastOut engine.Output
		for o, err := range e.Generate(ctx, "x", "hello world", engine.Params{MaxTokens: 6, Output: kind}) {
			if err != nil {
				return fmt.Errorf("the reused x: %w", err)
			}
			lastOut = o
			if kind == engine.Delta {
				got = append(got, o.TokenIDs...)
			} else {
				got = o.TokenIDs
			}
		}
		if w := want("hello world", 6); !slices.Equal(got, w) || lastOut.FinishReason != engine.FinishLength {
			return fmt.Errorf("the reused x got tokens %v and finished %q, want its own %v and length", got, lastOut.FinishReason, w)
		}
		if err := e.WaitIdle(context.Background()); err != nil {
			return err
		}
		dropped = e.Stats().StaleFramesDropped
		e.Close()
		c.CheckKV(e)
		return c.Finish()
	})
	return dropped, res.Err
}

// TestAsyncSchedulingStopStringThenReuse: vLLM #29355's pattern — a
// request finishes on a stop string while the core has its next step in
// flight, and its id is reused at once — over 210 seeds that starve the
// output handler, the core or any task: the new request gets its own
// tokens only and finishes for length, and no property breaks. Starved,
// the output handler gets the stop late and the core emits frames of the
// finished request, which the engine drops; the legacy engine, routing by
// the caller's id, hands them to the new request on some of these seeds.
func TestAsyncSchedulingStopStringThenReuse(t *testing.T) {
	stop, _ := stopAt(t, "hello", 3)
	strategies := []sim.Strategy{sim.Starve("output-handler"), sim.Starve("engine-core"), sim.Chaos()}
	var dropped int64
	legacyFails := 0
	var legacyFirst error
	for i, st := range strategies {
		for seed := uint64(1); seed <= 70; seed++ {
			kind := allKinds[(int(seed)+i)%len(allKinds)]
			d, err := stopThenReuse(seed, st, false, stop, kind)
			require.NoError(t, err, "seed %d strategy %s kind %s", seed, st, kind)
			dropped += d
			if i == 0 && seed <= 30 {
				if _, err := stopThenReuse(seed, st, true, stop, kind); err != nil {
					legacyFails++
					if legacyFirst == nil {
						legacyFirst = err
					}
				}
			}
		}
	}
	assert.Positive(t, dropped, "a starved output handler makes the core emit frames after the stop, which the engine drops")
	assert.Positive(t, legacyFails, "the legacy engine, routing by the caller's id, must fail this test on some seed")
	t.Logf("frames dropped as stale: %d; legacy engine: %d/30 seeds fail, the first with: %v", dropped, legacyFails, legacyFirst)
}

// reuseWhileInFlight runs one seed of vLLM #42492's pattern under async
// scheduling with chunked prefill: "x" streams, its caller aborts it after
// two outputs and adds "x" again at once with a prompt longer than a
// step's budget, while the core has a step of the old "x" in flight. It
// returns the run's error and what the new request ended with: nil, or
// its error (the engine's death, or the timeout of a request the legacy
// core lost).
func reuseWhileInFlight(seed uint64, legacy, bug bool) (runErr, got error) {
	res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos(), HangAfter: asyncHang}, func(rt task.Runtime) error {
		cfg := engine.Config{Runtime: rt, AsyncScheduling: true, LegacyIDRouting: legacy, MaxNumBatchedTokens: 8, MaxNumSeqs: 4}
		if bug {
			set, err := failpoints.NewSet(sim.NewPCGChooser(seed, sim.StreamFaults), failpoints.CoreAsyncOutputByID.Name+"=return")
			if err != nil {
				return err
			}
			cfg.Faults = set
		}
		e, err := engine.New(cfg)
		if err != nil {
			return err
		}
		defer e.Close()
		old, err := e.AddRequest("x", "hello", engine.Params{MaxTokens: 100, Output: engine.Delta})
		if err != nil {
			return err
		}
		for range 2 {
			if _, err := old.Next(); err != nil {
				return err
			}
		}
		e.Abort("x")
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Second)
		defer cancel()
		long := "the of and to in is it you that he was for on are with as his they be at one"
		for _, err := range e.Generate(ctx, "x", long, engine.Params{MaxTokens: 4, Output: engine.Delta}) {
			if err != nil {
				got = err
				break
			}
		}
		return nil
	})
	return res.Err, got
}

// TestAsyncSchedulingOutputByIDKillsTheLegacyCore: with the planted bug
// core/async-output-by-id (vLLM #42492) and ids reused in the core (legacy
// id routing), a request aborted with a step in flight and added again at
// once takes that step's token, at a step that scheduled a chunk of its
// prompt and sampled nothing: the core finds no output placeholder left
// and dies, and the caller gets the engine-dead error. Some seeds among
// 200 do it (under Chaos nearly all); the same seeds without the bug, or on the fixed engine with
// it (internal ids are never reused), never do.
func TestAsyncSchedulingOutputByIDKillsTheLegacyCore(t *testing.T) {
	const placeholder = "no output placeholder left"
	deaths := 0
	var first uint64
	for seed := uint64(1); seed <= 200; seed++ {
		runErr, err := reuseWhileInFlight(seed, true, true)
		require.NoError(t, runErr, "seed %d", seed)
		if err != nil && strings.Contains(err.Error(), placeholder) {
			require.ErrorIs(t, err, engine.ErrEngineDead, "seed %d", seed)
			deaths++
			if first == 0 {
				first = seed
			}
		}
		for _, c := range []struct{ legacy, bug bool }{{true, false}, {false, true}} {
			runErr, err := reuseWhileInFlight(seed, c.legacy, c.bug)
			require.NoError(t, runErr, "seed %d legacy=%v bug=%v", seed, c.legacy, c.bug)
			if err != nil {
				assert.NotContains(t, err.Error(), placeholder, "seed %d legacy=%v bug=%v", seed, c.legacy, c.bug)
			}
		}
	}
	require.Positive(t, deaths, "the planted bug must kill the legacy core on some seed")
	t.Logf("the planted bug killed the legacy core on %d/200 seeds, the first %d", deaths, first)
}
