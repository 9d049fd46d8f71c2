package engine_test

import (
	"context"
	"errors"
	"fmt"
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

// pauseSeeds is how many seeds most simulated pause tests run.
const pauseSeeds = 16

// pauseLong is a prompt of 24 tokens: six full blocks of 4, for the prefix
// cache to hold.
const pauseLong = "the of and to in is it you that he was for on are with as his they be at one have this"

// pauseRun is one simulated run of a pause test: its seed and strategy,
// and the engine's configuration.
type pauseRun struct {
	seed                  uint64
	st                    sim.Strategy
	async, prefix, legacy bool
	faults                string // failpoint terms, "name=terms", or none
	tweak                 func(*engine.Config)
}

func (r pauseRun) String() string {
	return fmt.Sprintf("seed %d strategy %s async=%v prefix-caching=%v legacy=%v faults=%q", r.seed, r.st, r.async, r.prefix, r.legacy, r.faults)
}

// pauseRuns returns n runs, seeds 1 to n: Chaos and Random by turns, async
// scheduling every other pair, prefix caching (with blocks of 4 tokens)
// every other four. The tests time their pauses for these strategies: a
// request meant to be running when a pause comes has tens of steps left,
// more than Chaos's windows (up to 3.2ms, a step being 1ms) withhold a
// task for.
func pauseRuns(n int) []pauseRun {
	runs := make([]pauseRun, n)
	for i := range runs {
		st := sim.Chaos()
		if i%2 == 1 {
			st = sim.Random()
		}
		runs[i] = pauseRun{seed: uint64(i + 1), st: st, async: i/2%2 == 1, prefix: i/4%2 == 1}
	}
	return runs
}

// pauseEnv is one run: its engine, a checker on the engine's events, and
// every event in order, so that a test can tell what happened before what.
// Under the simulator one task runs at a time: the body reads evs between
// two of its calls into the engine as a snapshot of that moment.
type pauseEnv struct {
	t   *testing.T
	run pauseRun
	rt  task.Runtime
	e   *engine.AsyncLLM
	c   *props.Checker
	evs []engine.Event
}

func (x *pauseEnv) observe(ev engine.Event) {
	x.c.Observe(ev)
	x.evs = append(x.evs, ev)
}

// mark is the index of the next event.
func (x *pauseEnv) mark() int { return len(x.evs) }

// count counts the events of kind in [from, to), of incarnation inc
// (any when 0).
func (x *pauseEnv) count(kind core.EventKind, inc uint64, from, to int) int {
	n := 0
	for _, ev := range x.evs[from:to] {
		if ev.Kind == kind && (inc == 0 || ev.Incarnation == inc) {
			n++
		}
	}
	return n
}

// index is the index of the first event of kind from from on, of
// incarnation inc (any when 0), or -1.
func (x *pauseEnv) index(kind core.EventKind, inc uint64, from int) int {
	for i := from; i < len(x.evs); i++ {
		if ev := x.evs[i]; ev.Kind == kind && (inc == 0 || ev.Incarnation == inc) {
			return i
		}
	}
	return -1
}

// ended reports whether the frontend has ended r, which happens right after
// it put r's final output in r's collector (engine's endLocked): r.Next
// then returns it without waiting for anything.
func (x *pauseEnv) ended(r *engine.Request) bool {
	return x.index(core.EventFinish, r.Incarnation(), 0) >= 0
}

// emitted returns the tokens the core emitted for r so far.
func (x *pauseEnv) emitted(r *engine.Request) []int {
	var ts []int
	for _, ev := range x.evs {
		if ev.Kind == core.EventFrameEmitted && ev.Incarnation == r.Incarnation() {
			ts = append(ts, ev.Tokens...)
		}
	}
	return ts
}

// frames counts the frames the core emitted for r in [from, to).
func (x *pauseEnv) frames(r *engine.Request, from, to int) int {
	return x.count(core.EventFrameEmitted, r.Incarnation(), from, to)
}

// resumeAt is the index of the core's first resume from from on: what it
// did after, it did after the resume.
func (x *pauseEnv) resumeAt(from int) int {
	x.t.Helper()
	i := x.index(core.EventResume, 0, from)
	require.GreaterOrEqual(x.t, i, 0, "the core took no resume")
	return i
}

// isPaused asks the engine whether it is paused.
func (x *pauseEnv) isPaused() bool {
	x.t.Helper()
	p, err := x.e.IsPaused(context.Background())
	require.NoError(x.t, err, "IsPaused")
	return p
}

// runPause runs body on a fresh engine under the simulator, closes the
// engine, and fails t with the run's configuration if the body did, the run
// did, or the checker found a property broken.
func runPause(t *testing.T, run pauseRun, body func(x *pauseEnv)) {
	t.Helper()
	res := sim.Run(sim.Options{Seed: run.seed, Strategy: run.st, HangAfter: asyncHang}, func(rt task.Runtime) error {
		x := &pauseEnv{t: t, run: run, rt: rt, c: props.NewChecker(core.ToyModel{})}
		x.c.SetModelLen(core.DefaultMaxModelLen)
		x.c.Where = func() (string, string) {
			tk, p, _ := sim.Where(rt)
			return tk, p
		}
		cfg := engine.Config{Runtime: rt, AsyncScheduling: run.async, LegacyIDRouting: run.legacy, Observer: x.observe}
		if run.prefix {
			cfg.EnablePrefixCaching, cfg.BlockSize = true, 4
		}
		if run.faults != "" {
			set, err := failpoints.NewSet(sim.NewPCGChooser(run.seed, sim.StreamFaults), run.faults)
			if err != nil {
				return err
			}
			cfg.Faults = set
		}
		if run.tweak != nil {
			run.tweak(&cfg)
		}
		e, err := engine.New(cfg)
		if err != nil {
			return err
		}
		x.e = e
		defer e.Close()
		body(x)
		e.Close()
		return x.c.Finish()
	})
	if res.Err != nil || t.Failed() {
		t.Fatalf("%s: %v", run, res.Err)
	}
}

// first reads r's first output.
func first(t *testing.T, r *engine.Request) engine.Output {
	t.Helper()
	o, err := r.Next()
	require.NoError(t, err, "first output of %q", r.ID())
	return o
}

// assertModelPrefix asserts that got is the model's first len(got) tokens
// for prompt, fewer than max.
func assertModelPrefix(t *testing.T, prompt string, max int, got []int, msgAndArgs ...any) {
	t.Helper()
	assert.Less(t, len(got), max, msgAndArgs...)
	if len(got) > 0 {
		assert.Equal(t, want(prompt, len(got)), got, msgAndArgs...)
	}
}

// TestPauseAbortEndsEveryRequestBeforeItReturns: PauseGeneration in its
// default mode aborts every request the core holds, and returns only once
// each one's final abort output is in its collector (its Next would not
// block), carrying exactly the tokens the core emitted for it, a prefix of
// the model's; in every output kind. The engine then runs nothing until
// the resume, after which it serves as before. Over 16 seeds of Chaos and
// Random, with and without async scheduling and prefix caching.
func TestPauseAbortEndsEveryRequestBeforeItReturns(t *testing.T) {
	prompts := []string{"hello", "the quick brown fox", pauseLong}
	const maxTokens = 1000
	someTokens := 0
	for _, run := range pauseRuns(pauseSeeds) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			assert.False(t, x.isPaused(), "before any pause")
			var reqs []*engine.Request
			for i, p := range prompts {
				reqs = append(reqs, add(t, e, fmt.Sprint("r", i), p, engine.Params{MaxTokens: maxTokens, Output: allKinds[i]}))
			}
			kindN := allKinds[run.seed%3]
			n2 := add(t, e, "n2", "what is the sea", engine.Params{MaxTokens: maxTokens, N: 2, Output: kindN})
			x.rt.Sleep(time.Duration(run.seed%4) * time.Millisecond)
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{}))
			returned := x.mark()
			// Nothing ran since it returned: each collector holds its
			// final output now.
			for _, r := range reqs {
				assert.True(t, x.ended(r), "%s: PauseGeneration(abort) returned before %s had its final output", run, r.ID())
			}
			assert.Equal(t, 2, x.count(core.EventFinish, n2.Incarnation(), 0, returned), "%s: both sequences of n2 ended", run)
			assert.False(t, e.HasUnfinishedRequests(), "%s", run)
			assert.True(t, x.isPaused(), "%s", run)
			outsN := drain(t, n2)
			if assert.NotEmpty(t, outsN, "%s", run) {
				o := last(outsN)
				assert.True(t, o.Finished, "%s", run)
				seqs := map[int]engine.FinishReason{}
				for _, o := range outsN {
					for _, c := range o.Completions {
						if c.FinishReason != "" {
							seqs[c.Index] = c.FinishReason
						}
					}
				}
				assert.Equal(t, map[int]engine.FinishReason{0: engine.FinishAbort, 1: engine.FinishAbort}, seqs, "%s: n2 (%s)", run, kindN)
			}
			for i, r := range reqs {
				outs := drain(t, r)
				o := last(outs)
				assert.True(t, o.Finished, "%s: %s", run, r.ID())
				assert.Equal(t, engine.FinishAbort, o.FinishReason, "%s: %s", run, r.ID())
				got := tokensOf(allKinds[i], outs)
				assert.Equal(t, len(x.emitted(r)), len(got), "%s: %s: the abort output carries every token the core emitted", run, r.ID())
				assertModelPrefix(t, prompts[i], maxTokens, got, "%s: %s", run, r.ID())
				if allKinds[i] == engine.FinalOnly {
					assert.Len(t, outs, 1, "%s: a FinalOnly request has one output", run)
				}
				if len(got) > 0 {
					someTokens++
				}
			}
			x.rt.Sleep(5 * time.Millisecond)
			assert.Zero(t, x.count(core.EventStep, 0, returned, x.mark()), "%s: a step while paused", run)
			require.NoError(t, e.ResumeGeneration(ctx))
			assert.False(t, x.isPaused(), "%s", run)
			after := drain(t, add(t, e, "after", "hello world", engine.Params{MaxTokens: 5}))
			assert.Equal(t, want("hello world", 5), tokensOf(engine.Cumulative, after), "%s", run)
			assert.Equal(t, engine.FinishLength, last(after).FinishReason, "%s", run)
			require.NoError(t, e.WaitIdle(ctx))
		})
	}
	assert.Positive(t, someTokens, "some request had tokens when the pause aborted it")
}

// TestPauseWaitFinishesTheRunningRequestsBeforeItReturns: PauseGeneration
// (wait) lets the running requests run to their ends and returns with each
// one's final output in its collector, while a request that was waiting
// (MaxNumSeqs 2, both slots taken) runs no step until the resume, then
// completes; every request gets the model's tokens in full.
func TestPauseWaitFinishesTheRunningRequestsBeforeItReturns(t *testing.T) {
	heldBack := 0
	for _, run := range pauseRuns(pauseSeeds) {
		run.tweak = func(c *engine.Config) { c.MaxNumSeqs = 2 }
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 30})
			b := add(t, e, "b", "the quick brown fox", engine.Params{MaxTokens: 24, Output: engine.Delta})
			c := add(t, e, "c", pauseLong, engine.Params{MaxTokens: 6, Output: engine.FinalOnly})
			// a and b are running once each has an output; c waits for
			// one of them to end.
			aFirst := first(t, a)
			bFirst := first(t, b)
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseWait, KeepCache: run.seed%3 == 0}))
			returned := x.mark()
			assert.True(t, x.ended(a), "%s: PauseGeneration(wait) returned before running a ended", run)
			assert.True(t, x.ended(b), "%s: PauseGeneration(wait) returned before running b ended", run)
			cWaited := !x.ended(c)
			if cWaited {
				heldBack++
				assert.Zero(t, x.frames(c, 0, returned), "%s: c was not running, yet has frames", run)
			}
			assert.True(t, x.isPaused(), "%s", run)
			x.rt.Sleep(10 * time.Millisecond)
			resumed := x.mark()
			if cWaited {
				assert.Zero(t, x.frames(c, 0, resumed), "%s: waiting c ran while paused", run)
				assert.True(t, e.HasUnfinishedRequests(), "%s", run)
			}
			assert.Zero(t, x.count(core.EventStep, 0, returned, resumed), "%s: a step while paused", run)
			require.NoError(t, e.ResumeGeneration(ctx))
			outsA := append([]engine.Output{aFirst}, drain(t, a)...)
			assert.Equal(t, want("hello", 30), tokensOf(engine.Cumulative, outsA), "%s", run)
			assert.Equal(t, engine.FinishLength, last(outsA).FinishReason, "%s", run)
			outsB := append([]engine.Output{bFirst}, drain(t, b)...)
			assert.Equal(t, want("the quick brown fox", 24), tokensOf(engine.Delta, outsB), "%s", run)
			assert.Equal(t, engine.FinishLength, last(outsB).FinishReason, "%s", run)
			outsC := drain(t, c)
			assert.Len(t, outsC, 1, "%s", run)
			assert.Equal(t, want(pauseLong, 6), tokensOf(engine.FinalOnly, outsC), "%s", run)
			assert.Equal(t, engine.FinishLength, last(outsC).FinishReason, "%s", run)
			if cWaited {
				assert.Greater(t, x.index(core.EventFrameEmitted, c.Incarnation(), 0), x.resumeAt(resumed), "%s", run)
			}
			require.NoError(t, e.WaitIdle(ctx))
		})
	}
	assert.Positive(t, heldBack, "on some seed c was waiting when the pause took effect")
	t.Logf("c waited out the pause on %d/%d seeds", heldBack, pauseSeeds)
}

// TestPauseKeepResumesWithTheTokensOfAnUnpausedRun: PauseGeneration (keep)
// freezes every request — no frame, no step until the resume — and after
// it each request completes with the very tokens and text of the same
// request run unpaused on the same engine. With KeepCache the frozen
// requests keep their KV; without it the pause preempts the running ones
// (a among them) before it returns, and they compute again from nothing:
// under prefix caching a finds nothing of its own in the reset cache.
func TestPauseKeepResumesWithTheTokensOfAnUnpausedRun(t *testing.T) {
	type job struct {
		id, prompt string
		p          engine.Params
	}
	jobs := []job{
		{"a", pauseLong, engine.Params{MaxTokens: 30, Output: engine.Delta}},
		{"b", "the quick brown fox", engine.Params{MaxTokens: 25}},
		{"c", "a long way home", engine.Params{MaxTokens: 20, Output: engine.FinalOnly}},
	}
	preempted := 0
	for _, run := range pauseRuns(pauseSeeds) {
		for _, keepCache := range []bool{false, true} {
			runPause(t, run, func(x *pauseEnv) {
				t, e, ctx := x.t, x.e, context.Background()
				reqs := make([]*engine.Request, len(jobs))
				for i, j := range jobs {
					reqs[i] = add(t, e, j.id, j.prompt, j.p)
				}
				a := reqs[0]
				aFirst := first(t, a) // a is running
				x.rt.Sleep(time.Duration(run.seed%3) * time.Millisecond)
				start := x.mark()
				require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep, KeepCache: keepCache}))
				done := x.index(core.EventPauseDone, 0, start)
				require.GreaterOrEqual(t, done, 0, "%s: PauseGeneration returned before its pause took effect", run)
				assert.False(t, x.ended(a), "%s keep-cache=%v", run, keepCache)
				assert.True(t, x.isPaused(), "%s", run)
				froze := x.mark()
				x.rt.Sleep(10 * time.Millisecond)
				resumed := x.mark()
				assert.Zero(t, x.count(core.EventFrameEmitted, 0, done, resumed), "%s keep-cache=%v: frames while frozen", run, keepCache)
				assert.Zero(t, x.count(core.EventStep, 0, done, resumed), "%s keep-cache=%v: steps while frozen", run, keepCache)
				assert.Zero(t, x.count(core.EventFinish, 0, froze, resumed), "%s keep-cache=%v: a request ended while frozen", run, keepCache)
				if keepCache {
					assert.Zero(t, x.count(core.EventPreempt, 0, 0, resumed), "%s: KeepCache preempted", run)
				} else {
					assert.Equal(t, 1, x.count(core.EventPreempt, a.Incarnation(), start, done), "%s: the pause did not preempt running a to reset the cache", run)
					preempted++
				}
				require.NoError(t, e.ResumeGeneration(ctx))
				got := make([][]engine.Output, len(jobs))
				for i, r := range reqs {
					got[i] = drain(t, r)
				}
				got[0] = append([]engine.Output{aFirst}, got[0]...)
				if run.prefix && !keepCache {
					assert.Zero(t, x.count(core.EventPrefixHit, a.Incarnation(), resumed, x.mark()),
						"%s: preempted a found its blocks in a cache the pause reset", run)
				}
				// The same requests, unpaused.
				for i, j := range jobs {
					again := drain(t, add(t, e, j.id, j.prompt, j.p))
					k := j.p.Output
					assert.Equal(t, tokensOf(k, again), tokensOf(k, got[i]), "%s keep-cache=%v: %s", run, keepCache, j.id)
					assert.Equal(t, textOf(k, again), textOf(k, got[i]), "%s keep-cache=%v: %s", run, keepCache, j.id)
					assert.Equal(t, want(j.prompt, j.p.MaxTokens), tokensOf(k, got[i]), "%s keep-cache=%v: %s", run, keepCache, j.id)
					assert.Equal(t, engine.FinishLength, last(got[i]).FinishReason, "%s keep-cache=%v: %s", run, keepCache, j.id)
				}
				require.NoError(t, e.WaitIdle(ctx))
			})
		}
	}
	assert.Positive(t, preempted)
}

// TestPauseResetsThePrefixCacheUnlessKeepCache: a pause of any mode resets
// the prefix cache once it took effect, unless KeepCache: a request after
// the resume with the prompt of one that finished before the pause finds
// its blocks cached only with KeepCache, and gets the model's tokens
// either way.
func TestPauseResetsThePrefixCacheUnlessKeepCache(t *testing.T) {
	modes := []engine.PauseMode{engine.PauseAbort, engine.PauseWait, engine.PauseKeep}
	for i, run := range pauseRuns(12) {
		run.prefix = true
		mode := modes[i%len(modes)]
		for _, keepCache := range []bool{false, true} {
			runPause(t, run, func(x *pauseEnv) {
				t, e, ctx := x.t, x.e, context.Background()
				hit := x.foundCachedAfter(func() {
					require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: mode, KeepCache: keepCache}))
					require.NoError(t, e.ResumeGeneration(ctx))
				})
				assert.Equal(t, keepCache, hit, "%s mode %s keep-cache=%v: found the prompt cached", run, mode, keepCache)
			})
		}
	}
}

// foundCachedAfter runs a request of pauseLong to its end, then between,
// then a request of the same prompt, and reports whether that one found
// the prompt's blocks cached; both must get the model's tokens.
func (x *pauseEnv) foundCachedAfter(between func()) bool {
	x.t.Helper()
	p := engine.Params{MaxTokens: 4}
	warm := drain(x.t, add(x.t, x.e, "warm", pauseLong, p))
	assert.Equal(x.t, want(pauseLong, 4), tokensOf(engine.Cumulative, warm), "%s", x.run)
	between()
	h := add(x.t, x.e, "hit", pauseLong, p)
	assert.Equal(x.t, want(pauseLong, 4), tokensOf(engine.Cumulative, drain(x.t, h)), "%s", x.run)
	return x.index(core.EventPrefixHit, h.Incarnation(), 0) >= 0
}

// TestPauseHoldsBackARequestAddedWhilePaused: a request added while the
// engine is paused (after a pause of each mode, one request in flight) is
// accepted and gets no frame until the resume, then completes; a WaitIdle
// begun while it is held back returns only after the resume, once it ended.
func TestPauseHoldsBackARequestAddedWhilePaused(t *testing.T) {
	modes := []engine.PauseMode{engine.PauseAbort, engine.PauseWait, engine.PauseKeep}
	for i, run := range pauseRuns(18) {
		mode := modes[i%len(modes)]
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 20, Output: engine.Delta})
			aFirst := first(t, a)
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: mode}))
			y := add(t, e, "y", "hello world", engine.Params{MaxTokens: 8, Output: engine.Delta})
			idleAt := -1
			var idleErr error
			g := task.NewGroup(x.rt, "waiters")
			g.Go("wait-idle", func() {
				idleErr = e.WaitIdle(ctx)
				idleAt = x.mark()
			})
			x.rt.Sleep(10 * time.Millisecond)
			assert.Equal(t, -1, idleAt, "%s mode %s: WaitIdle returned while the paused engine held y", run, mode)
			assert.Zero(t, x.frames(y, 0, x.mark()), "%s mode %s: y ran while paused", run, mode)
			assert.True(t, x.isPaused(), "%s", run)
			resumed := x.mark()
			require.NoError(t, e.ResumeGeneration(ctx))
			outs := drain(t, y)
			assert.Equal(t, want("hello world", 8), tokensOf(engine.Delta, outs), "%s mode %s", run, mode)
			assert.Equal(t, engine.FinishLength, last(outs).FinishReason, "%s mode %s", run, mode)
			assert.Greater(t, x.index(core.EventFrameEmitted, y.Incarnation(), 0), x.resumeAt(resumed), "%s mode %s", run, mode)
			g.Wait()
			require.NoError(t, idleErr)
			assert.Greater(t, idleAt, x.resumeAt(resumed), "%s mode %s", run, mode)
			assert.GreaterOrEqual(t, x.index(core.EventFinish, y.Incarnation(), 0), 0)
			assert.Less(t, x.index(core.EventFinish, y.Incarnation(), 0), idleAt, "%s mode %s: WaitIdle returned before y ended", run, mode)
			outsA := append([]engine.Output{aFirst}, drain(t, a)...)
			gotA := tokensOf(engine.Delta, outsA)
			switch mode {
			case engine.PauseAbort:
				assert.Equal(t, engine.FinishAbort, last(outsA).FinishReason, "%s", run)
				assertModelPrefix(t, "hello", 20, gotA, "%s", run)
			default:
				assert.Equal(t, engine.FinishLength, last(outsA).FinishReason, "%s mode %s", run, mode)
				assert.Equal(t, want("hello", 20), gotA, "%s mode %s", run, mode)
			}
		})
	}
}

// TestIsPausedAndResumeWhenNotPaused: IsPaused is false before any pause,
// true after a pause (and another), false after the resume; a resume when
// not paused, before any request or in the middle of one, succeeds, sends
// no pause and changes nothing: the request streams its tokens in full.
func TestIsPausedAndResumeWhenNotPaused(t *testing.T) {
	for _, run := range pauseRuns(8) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			assert.False(t, x.isPaused())
			require.NoError(t, e.ResumeGeneration(ctx))
			require.NoError(t, e.ResumeGeneration(ctx))
			assert.False(t, x.isPaused(), "%s: a resume paused", run)
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 20, Output: engine.Delta})
			outs := []engine.Output{first(t, a)}
			require.NoError(t, e.ResumeGeneration(ctx))
			assert.False(t, x.isPaused(), "%s", run)
			outs = append(outs, drain(t, a)...)
			assert.Equal(t, want("hello", 20), tokensOf(engine.Delta, outs), "%s", run)
			assert.Equal(t, engine.FinishLength, last(outs).FinishReason, "%s", run)
			assert.Zero(t, x.count(core.EventPause, 0, 0, x.mark()), "%s", run)
			assert.Equal(t, 3, x.count(core.EventResume, 0, 0, x.mark()), "%s", run)

			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep}))
			assert.True(t, x.isPaused(), "%s", run)
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseWait, KeepCache: true}))
			assert.True(t, x.isPaused(), "%s: a second pause", run)
			require.NoError(t, e.ResumeGeneration(ctx))
			assert.False(t, x.isPaused(), "%s", run)
			require.NoError(t, e.ResumeGeneration(ctx))
			assert.False(t, x.isPaused(), "%s", run)
			b := drain(t, add(t, e, "b", "hello world", engine.Params{MaxTokens: 3}))
			assert.Equal(t, want("hello world", 3), tokensOf(engine.Cumulative, b), "%s", run)
		})
	}
}

// TestPauseCancelledWhileWaitingStillPauses: the caller of a wait-mode
// pause cancels its context while a running request still drains: the
// call returns context.Canceled at once, yet the core took the pause —
// IsPaused says so — the request runs to its end, and a request added
// meanwhile waits; the resume then runs it. A pause with a context
// cancelled before the call returns context.Canceled and is not sent.
func TestPauseCancelledWhileWaitingStillPauses(t *testing.T) {
	beforeEffect := 0
	for _, run := range pauseRuns(pauseSeeds) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, bg := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 40, Output: engine.Delta})
			outsA := []engine.Output{first(t, a)}
			ctx, cancel := context.WithCancel(bg)
			g := task.NewGroup(x.rt, "cancellers")
			g.Go("canceller", func() {
				x.rt.Sleep(4 * time.Millisecond)
				cancel()
			})
			err := e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseWait})
			g.Wait()
			require.ErrorIs(t, err, context.Canceled, "%s", run)
			assert.False(t, x.ended(a), "%s: the pause was not draining when its caller gave up", run)
			assert.Negative(t, x.index(core.EventPauseDone, 0, 0), "%s", run)
			assert.True(t, x.isPaused(), "%s: the core took the cancelled pause", run)
			if !x.ended(a) {
				// The reply came after every frame before it, so a's last
				// frame had not been emitted when the core answered: the
				// pause had not taken effect yet.
				beforeEffect++
			}
			y := add(t, e, "y", "hello world", engine.Params{MaxTokens: 5})
			outsA = append(outsA, drain(t, a)...)
			assert.Equal(t, want("hello", 40), tokensOf(engine.Delta, outsA), "%s: wait lets running a finish", run)
			assert.Equal(t, engine.FinishLength, last(outsA).FinishReason, "%s", run)
			for i := 0; x.index(core.EventPauseDone, 0, 0) < 0; i++ {
				require.Less(t, i, 100, "%s: the cancelled pause never took effect", run)
				x.rt.Sleep(time.Millisecond)
			}
			x.rt.Sleep(5 * time.Millisecond)
			assert.Zero(t, x.frames(y, 0, x.mark()), "%s: y ran while paused", run)
			assert.True(t, x.isPaused(), "%s", run)
			resumed := x.mark()
			require.NoError(t, e.ResumeGeneration(bg))
			assert.False(t, x.isPaused(), "%s", run)
			outsY := drain(t, y)
			assert.Equal(t, want("hello world", 5), tokensOf(engine.Cumulative, outsY), "%s", run)
			assert.Greater(t, x.index(core.EventFrameEmitted, y.Incarnation(), 0), x.resumeAt(resumed), "%s", run)
			assert.Zero(t, x.count(core.EventPaused, 0, 0, x.mark()), "%s: the cancelled call reported a return", run)

			// A context done before the call: the call returns its error
			// and sends nothing.
			done, cancelDone := context.WithCancel(bg)
			cancelDone()
			before := x.mark()
			require.ErrorIs(t, e.PauseGeneration(done, engine.PauseOptions{Mode: engine.PauseKeep}), context.Canceled, "%s", run)
			assert.False(t, x.isPaused(), "%s: a pause with a context done before the call is not sent", run)
			assert.Negative(t, x.index(core.EventPause, 0, before), "%s", run)
			z := drain(t, add(t, e, "z", "a long way home", engine.Params{MaxTokens: 3}))
			assert.Equal(t, want("a long way home", 3), tokensOf(engine.Cumulative, z), "%s", run)
		})
	}
	assert.Positive(t, beforeEffect, "on some seed IsPaused said true while the pause still drained")
}

// TestPauseOfAnUnknownModeIsRefused: a mode none of the three fails with
// an error naming it, sends the core nothing (no pause event, IsPaused
// false) and leaves a running request to run to its end.
func TestPauseOfAnUnknownModeIsRefused(t *testing.T) {
	for _, run := range pauseRuns(4) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 10})
			for _, m := range []engine.PauseMode{3, 7, 255} {
				err := e.PauseGeneration(ctx, engine.PauseOptions{Mode: m, KeepCache: true})
				require.Error(t, err, "mode %d", m)
				assert.Contains(t, err.Error(), fmt.Sprintf("pause mode %d", m))
				assert.NotErrorIs(t, err, engine.ErrClosed)
			}
			assert.False(t, x.isPaused(), "%s", run)
			outs := drain(t, a)
			assert.Equal(t, want("hello", 10), tokensOf(engine.Cumulative, outs), "%s", run)
			assert.Equal(t, engine.FinishLength, last(outs).FinishReason, "%s", run)
			assert.Zero(t, x.count(core.EventPause, 0, 0, x.mark()), "%s: a refused pause reached the core", run)
		})
	}
}

// TestPauseOnAClosedEngine: a PauseGeneration (wait) still draining when
// the engine is closed returns ErrClosed, and Close of an engine a pause
// (keep) froze ends the frozen request with its abort output; afterwards
// PauseGeneration, ResumeGeneration and IsPaused fail with ErrClosed.
func TestPauseOnAClosedEngine(t *testing.T) {
	draining := 0
	for _, run := range pauseRuns(10) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 200, Output: engine.Delta})
			first(t, a)
			if run.seed%2 == 0 {
				require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep}))
				require.NoError(t, e.Close())
			} else {
				var pauseErr error
				g := task.NewGroup(x.rt, "pausers")
				g.Go("pauser", func() {
					pauseErr = e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseWait})
				})
				x.rt.Sleep(3 * time.Millisecond)
				if x.index(core.EventPause, 0, 0) >= 0 {
					draining++
				}
				require.NoError(t, e.Close())
				g.Wait()
				assert.ErrorIs(t, pauseErr, engine.ErrClosed, "%s", run)
			}
			assert.ErrorIs(t, e.PauseGeneration(ctx, engine.PauseOptions{}), engine.ErrClosed)
			assert.ErrorIs(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep}), engine.ErrClosed)
			assert.ErrorIs(t, e.ResumeGeneration(ctx), engine.ErrClosed)
			_, err := e.IsPaused(ctx)
			assert.ErrorIs(t, err, engine.ErrClosed)
			outs := drain(t, a)
			assert.Equal(t, engine.FinishAbort, last(outs).FinishReason, "%s: Close aborts", run)
		})
	}
	assert.Positive(t, draining, "on some seed the pause was draining when the engine closed")
}

// TestPauseOnADeadEngine: a PauseGeneration (wait) draining when the model
// panics (core/model-panic on the 11th step) returns ErrEngineDead with the
// cause; afterwards PauseGeneration, ResumeGeneration and IsPaused fail with
// it.
func TestPauseOnADeadEngine(t *testing.T) {
	const cause = "the GPU fell off the bus"
	diedDraining := 0
	for _, run := range pauseRuns(8) {
		run.faults = "core/model-panic=10*off->return(" + cause + ")"
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 50, Output: engine.Delta})
			first(t, a)
			err := e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseWait})
			require.ErrorIs(t, err, engine.ErrEngineDead, "%s", run)
			assert.ErrorContains(t, err, cause)
			if p, d := x.index(core.EventPause, 0, 0), x.index(core.EventDead, 0, 0); p >= 0 && p < d {
				diedDraining++
			}
			assert.ErrorIs(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep}), engine.ErrEngineDead)
			assert.ErrorIs(t, e.ResumeGeneration(ctx), engine.ErrEngineDead)
			_, err = e.IsPaused(ctx)
			assert.ErrorIs(t, err, engine.ErrEngineDead)
			_, err = readAll(a)
			assert.ErrorIs(t, err, engine.ErrEngineDead)
			assert.ErrorContains(t, x.c.Dead(), cause)
		})
	}
	assert.Positive(t, diedDraining, "on some seed the core died while the pause drained")
}

// TestAbortAndCancelWhilePaused: a request a pause (keep) froze, which its
// caller aborts, and one added while paused, which its caller cancels, end
// at once with their abort outputs and are aborted in the core while it is
// paused: after the resume neither runs (no frame; WaitIdle finds the core
// holding nothing), and the id is free for a request that runs in full.
func TestAbortAndCancelWhilePaused(t *testing.T) {
	for _, run := range pauseRuns(8) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 50, Output: engine.Delta})
			outsA := []engine.Output{first(t, a)}
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: engine.PauseKeep, KeepCache: run.seed%2 == 0}))
			b := add(t, e, "b", "hello world", engine.Params{MaxTokens: 10})
			e.Abort("a")
			b.Cancel()
			outsA = append(outsA, drain(t, a)...)
			assert.Equal(t, engine.FinishAbort, last(outsA).FinishReason, "%s", run)
			assert.Equal(t, x.emitted(a), tokensOf(engine.Delta, outsA), "%s", run)
			outsB := drain(t, b)
			assert.Equal(t, engine.FinishAbort, last(outsB).FinishReason, "%s", run)
			assert.Empty(t, tokensOf(engine.Cumulative, outsB), "%s", run)
			resumed := x.mark()
			require.NoError(t, e.ResumeGeneration(ctx))
			require.NoError(t, e.WaitIdle(ctx))
			assert.Zero(t, x.frames(a, resumed, x.mark()), "%s: aborted a ran after the resume", run)
			assert.Zero(t, x.frames(b, 0, x.mark()), "%s: cancelled b ran", run)
			resumeAt := x.resumeAt(resumed)
			assert.Equal(t, 1, x.count(core.EventCoreAbort, a.Incarnation(), 0, resumeAt), "%s: the paused core aborted a", run)
			assert.Equal(t, 1, x.count(core.EventCoreAbort, b.Incarnation(), 0, resumeAt), "%s: the paused core aborted b", run)
			again := drain(t, add(t, e, "a", "the quick brown fox", engine.Params{MaxTokens: 3}))
			assert.Equal(t, want("the quick brown fox", 3), tokensOf(engine.Cumulative, again), "%s", run)
		})
	}
}

// TestPauseWhilePausedAbortsWhatWaits: a pause (abort) on an engine paused
// by wait or keep aborts what the core holds — the request the first pause
// froze, and the one added while paused — and returns with their final
// outputs in their collectors; what wait let finish stays finished. The
// engine serves again after the resume.
func TestPauseWhilePausedAbortsWhatWaits(t *testing.T) {
	for _, run := range pauseRuns(pauseSeeds) {
		firstMode := []engine.PauseMode{engine.PauseWait, engine.PauseKeep}[run.seed%2]
		runPause(t, run, func(x *pauseEnv) {
			t, e, ctx := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 30, Output: engine.Delta})
			outsA := []engine.Output{first(t, a)}
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: firstMode}))
			b := add(t, e, "b", "the quick brown fox", engine.Params{MaxTokens: 10})
			x.rt.Sleep(2 * time.Millisecond)
			require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{}))
			assert.True(t, x.ended(a), "%s", run)
			assert.True(t, x.ended(b), "%s: PauseGeneration(abort) returned before waiting b had its final output", run)
			assert.True(t, x.isPaused(), "%s", run)
			outsA = append(outsA, drain(t, a)...)
			gotA := tokensOf(engine.Delta, outsA)
			if firstMode == engine.PauseWait {
				assert.Equal(t, engine.FinishLength, last(outsA).FinishReason, "%s", run)
				assert.Equal(t, want("hello", 30), gotA, "%s", run)
			} else {
				assert.Equal(t, engine.FinishAbort, last(outsA).FinishReason, "%s: the abort pause did not abort frozen a", run)
				assert.Equal(t, x.emitted(a), gotA, "%s", run)
				assertModelPrefix(t, "hello", 30, gotA, "%s", run)
			}
			outsB := drain(t, b)
			assert.Equal(t, engine.FinishAbort, last(outsB).FinishReason, "%s: the abort pause did not abort waiting b", run)
			assert.Empty(t, tokensOf(engine.Cumulative, outsB), "%s", run)
			assert.Equal(t, 1, x.frames(b, 0, x.mark()), "%s: b has its abort frame only", run)
			require.NoError(t, e.ResumeGeneration(ctx))
			c := drain(t, add(t, e, "c", "hello world", engine.Params{MaxTokens: 4}))
			assert.Equal(t, want("hello world", 4), tokensOf(engine.Cumulative, c), "%s", run)
			require.NoError(t, e.WaitIdle(ctx))
		})
	}
}

// TestPauseAbortThenReuseTheID: a request aborted by a pause has ended when
// PauseGeneration returns, so its id can be added again at once — while
// paused or after the resume — and the new request runs to its end with its
// own tokens, the checker finding nothing; on the legacy engine too, whose
// core knows requests by the caller's id.
func TestPauseAbortThenReuseTheID(t *testing.T) {
	for i, run := range pauseRuns(pauseSeeds) {
		for _, legacy := range []bool{false, true} {
			run.legacy = legacy
			kind := allKinds[i%len(allKinds)]
			runPause(t, run, func(x *pauseEnv) {
				t, e, ctx := x.t, x.e, context.Background()
				old := add(t, e, "x", "hello", engine.Params{MaxTokens: 500, Output: kind})
				x.rt.Sleep(time.Duration(1+run.seed%3) * time.Millisecond)
				require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{}))
				p := engine.Params{MaxTokens: 6, Output: kind}
				var nx *engine.Request
				var err error
				if run.seed%2 == 0 {
					nx, err = e.AddRequest("x", "hello world", p) // while paused
					require.NoError(t, err, "%s: the id is still live after PauseGeneration(abort) returned", run)
				}
				require.NoError(t, e.ResumeGeneration(ctx))
				if nx == nil {
					nx, err = e.AddRequest("x", "hello world", p)
					require.NoError(t, err, "%s", run)
				}
				outsOld := drain(t, old)
				assert.Equal(t, engine.FinishAbort, last(outsOld).FinishReason, "%s", run)
				assertModelPrefix(t, "hello", 500, tokensOf(kind, outsOld), "%s", run)
				outs := drain(t, nx)
				assert.Equal(t, want("hello world", 6), tokensOf(kind, outs), "%s", run)
				assert.Equal(t, core.Tokenizer{}.Decode(want("hello world", 6)), textOf(kind, outs), "%s", run)
				assert.Equal(t, engine.FinishLength, last(outs).FinishReason, "%s", run)
				require.NoError(t, e.WaitIdle(ctx))
				s := x.c.Summary()
				assert.Equal(t, 1, s.Reused, "%s", run)
				assert.Equal(t, 1, s.Aborted, "%s: the pause's abort counts as the caller's", run)
			})
		}
	}
}

// pauseReplyRun runs one seed of the planted bug's workload: two Delta
// requests of 50 tokens, a pause (abort) 3ms in, a resume. It returns the
// checker's verdict and whether the frontend still held a request the
// pause aborted when PauseGeneration returned: one whose final output was
// not in its collector yet.
func pauseReplyRun(seed uint64, st sim.Strategy, bug bool) (verdict error, open bool, runErr error) {
	res := sim.Run(sim.Options{Seed: seed, Strategy: st, HangAfter: asyncHang}, func(rt task.Runtime) error {
		c := props.NewChecker(core.ToyModel{})
		c.SetModelLen(core.DefaultMaxModelLen)
		cfg := engine.Config{Runtime: rt, Observer: c.Observe}
		if bug {
			set, err := failpoints.NewSet(sim.NewPCGChooser(seed, sim.StreamFaults), failpoints.EnginePauseReplyOvertakes.Name+"=return")
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
		ctx := context.Background()
		var reqs []*engine.Request
		for i, p := range []string{"hello", "the quick brown fox"} {
			r, err := e.AddRequest(fmt.Sprint("r", i), p, engine.Params{MaxTokens: 50, Output: engine.Delta})
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
		rt.Sleep(3 * time.Millisecond)
		if err := e.PauseGeneration(ctx, engine.PauseOptions{}); err != nil {
			return err
		}
		open = e.HasUnfinishedRequests()
		if err := e.ResumeGeneration(ctx); err != nil {
			return err
		}
		for _, r := range reqs {
			outs, err := readAll(r)
			if err != nil {
				return err
			}
			if o := last(outs); !o.Finished || o.FinishReason != engine.FinishAbort {
				return fmt.Errorf("%s ended with %+v, not aborted", r.ID(), o)
			}
		}
		if err := e.WaitIdle(ctx); err != nil {
			return err
		}
		e.Close()
		verdict = c.Finish()
		return nil
	})
	return verdict, open, res.Err
}

// TestPauseReplyOvertakesIsCaught: with the planted bug
// engine/pause-reply-overtakes — vLLM's order: the core's reply reaches
// PauseGeneration ahead of the outputs before it, and a 20ms sleep stands in
// for them — an output handler starved past those 20ms leaves the aborted
// requests without their final outputs when PauseGeneration returns. Over
// 200 seeds under starve:output-handler the checker catches it, as
// PauseReturnsAfterItsOutputs, on some seeds, and the frontend still holds
// such a request on some; under Chaos, whose windows are shorter than the
// sleep, on none. Without the bug, never under either; and under starvation
// windows up to 100ms, with it, on most seeds.
func TestPauseReplyOvertakesIsCaught(t *testing.T) {
	const seeds = 200
	type key struct {
		bug bool
		st  string
	}
	caught, open := map[key]int{}, map[key]int{}
	for _, bug := range []bool{true, false} {
		for _, st := range []sim.Strategy{sim.Starve("output-handler"), sim.Chaos()} {
			k := key{bug, st.String()}
			for seed := uint64(1); seed <= seeds; seed++ {
				verdict, o, err := pauseReplyRun(seed, st, bug)
				require.NoError(t, err, "seed %d strategy %s bug=%v", seed, st, bug)
				if o {
					open[k]++
					require.Error(t, verdict, "seed %d strategy %s bug=%v: the frontend held an aborted request when PauseGeneration returned, and the checker saw nothing", seed, st, bug)
				}
				if verdict == nil {
					continue
				}
				caught[k]++
				var v *props.Violation
				require.ErrorAs(t, verdict, &v, "seed %d strategy %s bug=%v", seed, st, bug)
				assert.Equal(t, props.PauseReturnsAfterItsOutputs, v.Property, "seed %d strategy %s bug=%v: %v", seed, st, bug, v)
			}
		}
	}
	starve, chaos := sim.Starve("output-handler").String(), sim.Chaos().String()
	assert.Positive(t, caught[key{true, starve}], "the checker must catch the planted bug under a starved output handler")
	assert.Positive(t, open[key{true, starve}], "the frontend must hold an aborted request on some seed with the bug")
	assert.Zero(t, caught[key{true, chaos}], "Chaos's windows are shorter than the bug's 20ms sleep")
	assert.Zero(t, caught[key{false, starve}], "without the bug")
	assert.Zero(t, caught[key{false, chaos}], "without the bug")
	assert.Zero(t, open[key{false, starve}]+open[key{false, chaos}], "without the bug")

	const longSeeds = 40
	long := sim.StarveUpTo("output-handler", 100*time.Millisecond)
	longCaught := 0
	for seed := uint64(1); seed <= longSeeds; seed++ {
		verdict, _, err := pauseReplyRun(seed, long, true)
		require.NoError(t, err, "seed %d strategy %s", seed, long)
		var v *props.Violation
		if errors.As(verdict, &v) && v.Property == props.PauseReturnsAfterItsOutputs {
			longCaught++
		}
		verdict, _, err = pauseReplyRun(seed, long, false)
		require.NoError(t, err, "seed %d strategy %s", seed, long)
		assert.NoError(t, verdict, "seed %d strategy %s without the bug", seed, long)
	}
	assert.Greater(t, longCaught, longSeeds*3/4, "starvation windows up to 100ms catch the bug on most seeds")
	t.Logf("caught with the bug: %s %d/%d (frontend open %d), %s %d/%d, %s %d/%d",
		starve, caught[key{true, starve}], seeds, open[key{true, starve}], chaos, caught[key{true, chaos}], seeds, long, longCaught, longSeeds)
}

// TestAResumeOvertakesAPauseStillDraining: one caller's wait pause is still
// waiting for a long request when another caller resumes: the pause never
// takes effect, and PauseGeneration returns ErrResumed at once rather than
// when the engine next goes idle (vLLM's, which under steady load never
// comes); a request added meanwhile runs beside the long one.
func TestAResumeOvertakesAPauseStillDraining(t *testing.T) {
	for _, run := range pauseRuns(pauseSeeds) {
		runPause(t, run, func(x *pauseEnv) {
			t, e, bg := x.t, x.e, context.Background()
			a := add(t, e, "a", "hello", engine.Params{MaxTokens: 60, Output: engine.Delta})
			outsA := []engine.Output{first(t, a)}
			g := task.NewGroup(x.rt, "pauser")
			var perr error
			returned := -1
			g.Go("pauser", func() {
				perr = e.PauseGeneration(bg, engine.PauseOptions{Mode: engine.PauseWait})
				returned = x.mark()
			})
			x.rt.Sleep(4 * time.Millisecond)
			require.True(t, x.isPaused(), "%s: the pause was taken", run)
			y := add(t, e, "y", "hello world", engine.Params{MaxTokens: 5})
			resumed := x.mark()
			require.NoError(t, e.ResumeGeneration(bg))
			g.Wait()
			require.ErrorIs(t, perr, engine.ErrResumed, "%s", run)
			assert.False(t, x.ended(a), "%s: the pause returned as the resume came, not when a ended", run)
			assert.Greater(t, returned, x.resumeAt(resumed), "%s", run)
			outsY := drain(t, y)
			assert.Equal(t, want("hello world", 5), tokensOf(engine.Cumulative, outsY), "%s", run)
			assert.False(t, x.ended(a), "%s: y ran beside a", run)
			outsA = append(outsA, drain(t, a)...)
			assert.Equal(t, want("hello", 60), tokensOf(engine.Delta, outsA), "%s", run)
			assert.Negative(t, x.index(core.EventPauseDone, 0, 0), "%s: the overtaken pause never took effect", run)
			assert.Zero(t, x.count(core.EventPaused, 0, 0, x.mark()), "%s", run)
		})
	}
}
