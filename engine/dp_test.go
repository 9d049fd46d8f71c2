package engine_test

import (
	"context"
	"fmt"
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

// dpRun runs body on an engine of cfg under the simulator's strategy st,
// with the checker (checkedRun), and returns the core's events, each
// stamped with its core's rank.
func dpRun(t *testing.T, seed uint64, st sim.Strategy, cfg engine.Config, body func(rt task.Runtime, e *engine.AsyncLLM)) (*props.Checker, []engine.Event) {
	t.Helper()
	var events []engine.Event
	cfg.Observer = func(ev engine.Event) {
		switch ev.Kind {
		case core.EventCoreAdd, core.EventCoreAbort, core.EventFrameEmitted, core.EventStep, core.EventPause, core.EventCacheReset, core.EventIdle, core.EventCallSplit:
			ev.Tokens = nil // the core's: it grows
			events = append(events, ev)
		}
	}
	c, err := checkedRun(t, seed, st, cfg, body)
	require.NoError(t, err, "seed %d", seed)
	require.NoError(t, c.Finish(), "seed %d", seed)
	return c, events
}

// byEngine counts the events of kind by the rank of their core.
func byEngine(events []engine.Event, kind core.EventKind) map[int]int {
	n := make(map[int]int)
	for _, ev := range events {
		if ev.Kind == kind {
			n[ev.Engine]++
		}
	}
	return n
}

// TestDataParallelSpreadsTheRequests: eight clients at once on two cores
// each get the model's tokens; the load balancer puts four on each, both
// cores step, and the frames of the two are numbered apart.
func TestDataParallelSpreadsTheRequests(t *testing.T) {
	for seed := uint64(1); seed <= 16; seed++ {
		_, events := dpRun(t, seed, sim.Chaos(), engine.Config{DataParallelSize: 2}, func(rt task.Runtime, e *engine.AsyncLLM) {
			g := task.NewGroup(rt, "clients")
			for i := range 8 {
				g.Go("client", func() {
					prompt := fmt.Sprintf("%s %d", pauseLong, i)
					r, err := e.AddRequest(fmt.Sprint("c", i), prompt, engine.Params{MaxTokens: 6, IgnoreEOS: true})
					require.NoError(t, err)
					assert.Equal(t, want(prompt, 6), tokensOf(engine.Cumulative, drain(t, r)), "seed %d client %d", seed, i)
				})
			}
			g.Wait()
			s := e.Stats()
			assert.Equal(t, 2, s.DataParallelSize)
			assert.Equal(t, 2*core.Config{}.WithDefaults().NumBlocks, s.KVNumBlocks, "each core has its own cache")
			assert.Zero(t, s.KVCacheUsage())
		})
		assert.Equal(t, map[int]int{0: 4, 1: 4}, byEngine(events, core.EventCoreAdd), "seed %d", seed)
		steps := byEngine(events, core.EventStep)
		assert.Positive(t, steps[0], "seed %d", seed)
		assert.Positive(t, steps[1], "seed %d", seed)
		frames := make(map[uint64]int)
		for _, ev := range events {
			if ev.Kind == core.EventFrameEmitted {
				if prev, ok := frames[ev.Frame]; ok {
					t.Fatalf("seed %d: frame %d emitted by core %d and core %d", seed, ev.Frame, prev, ev.Engine)
				}
				frames[ev.Frame] = ev.Engine
			}
		}
		assert.Len(t, frames, 8*6, "seed %d", seed)
	}
}

// TestDataParallelRankPinsARequest: a request naming a rank runs on that
// core, every sequence of it; a rank past the cores is refused.
func TestDataParallelRankPinsARequest(t *testing.T) {
	_, events := dpRun(t, 1, sim.Random(), engine.Config{DataParallelSize: 3}, func(rt task.Runtime, e *engine.AsyncLLM) {
		for i := range 3 {
			r, err := e.AddRequest(fmt.Sprint("r", i), pauseLong, engine.Params{MaxTokens: 3, N: 2, DataParallelRank: new(2)})
			require.NoError(t, err)
			drain(t, r)
		}
		for _, rank := range []int{3, -1} {
			_, err := e.AddRequest("bad", pauseLong, engine.Params{MaxTokens: 3, DataParallelRank: new(rank)})
			require.ErrorIs(t, err, engine.ErrInvalidRequest)
			assert.EqualError(t, err, fmt.Sprintf("engine: invalid request: DataParallelRank %d is out of range [0, 3): the engine has 3 data-parallel core(s) (Config.DataParallelSize)", rank))
		}
	})
	assert.Equal(t, map[int]int{2: 6}, byEngine(events, core.EventCoreAdd))

	e, err := engine.New(engine.Config{})
	require.NoError(t, err)
	defer e.Close()
	_, err = e.AddRequest("one", pauseLong, engine.Params{MaxTokens: 3, DataParallelRank: new(1)})
	assert.EqualError(t, err, "engine: invalid request: DataParallelRank 1 is out of range [0, 1): the engine has 1 data-parallel core(s) (Config.DataParallelSize)")
}

// TestDataParallelAbortGoesToItsCore: a request aborted mid-stream on
// core 1, beside one on core 0, is aborted by core 1, which held it; the
// engine goes idle with every block back, whatever the interleaving.
func TestDataParallelAbortGoesToItsCore(t *testing.T) {
	found := 0
	for seed := uint64(1); seed <= 32; seed++ {
		_, events := dpRun(t, seed, sim.Random(), engine.Config{DataParallelSize: 2}, func(rt task.Runtime, e *engine.AsyncLLM) {
			stay, err := e.AddRequest("stay", pauseLong, engine.Params{MaxTokens: 8, IgnoreEOS: true, DataParallelRank: new(0)})
			require.NoError(t, err)
			doomed, err := e.AddRequest("doomed", pauseLong, engine.Params{MaxTokens: 1000, IgnoreEOS: true, DataParallelRank: new(1)})
			require.NoError(t, err)
			_, err = doomed.Next()
			require.NoError(t, err)
			e.Abort("doomed")
			assert.Equal(t, engine.FinishAbort, last(drain(t, doomed)).FinishReason)
			assert.Equal(t, want(pauseLong, 8), tokensOf(engine.Cumulative, drain(t, stay)))
			require.NoError(t, e.WaitIdle(context.Background()))
		})
		for _, ev := range events {
			if ev.Kind == core.EventCoreAbort && ev.RequestID == "doomed" {
				assert.Equal(t, 1, ev.Engine, "seed %d: the abort of a request on core 1", seed)
				if ev.Incarnation != 0 {
					found++
				}
			}
		}
	}
	assert.Positive(t, found, "the core held the request when its abort came, in some seed")
}

// TestDataParallelMisroutedAbortIsCaught plants engine/dp-abort-misrouted:
// the abort of the request on core 1 goes to the core the load balancer
// would choose now, core 0, where "stay" runs; core 1 runs the request on
// for nobody, and the checker names the core that took the abort.
func TestDataParallelMisroutedAbortIsCaught(t *testing.T) {
	cfg := engine.Config{DataParallelSize: 2, Faults: rttest.Armed(t, "engine/dp-abort-misrouted=return")}
	c, err := checkedRun(t, 1, sim.Random(), cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
		doomed, err := e.AddRequest("doomed", pauseLong, engine.Params{MaxTokens: 40, IgnoreEOS: true, DataParallelRank: new(1)})
		require.NoError(t, err)
		_, err = doomed.Next()
		require.NoError(t, err)
		e.Abort("doomed")
		drain(t, doomed)
		require.NoError(t, e.WaitIdle(context.Background()))
	})
	require.NoError(t, err)
	var v *props.Violation
	require.ErrorAs(t, c.Finish(), &v)
	assert.Equal(t, props.AbortReachesItsCore, v.Property)
	assert.Contains(t, v.Detail, "core 0 took an abort of doomed-")
	assert.Contains(t, v.Detail, "whose ADD went to core(s) [1]: the sequence runs on there for nobody")
}

// TestDataParallelCallsReachEveryCore: a pause takes effect on every core
// before PauseGeneration returns, aborting the requests of both; a reset
// of the prefix cache resets both caches; the engine resumes on both.
func TestDataParallelCallsReachEveryCore(t *testing.T) {
	for seed := uint64(1); seed <= 16; seed++ {
		_, events := dpRun(t, seed, sim.Chaos(), engine.Config{DataParallelSize: 2, EnablePrefixCaching: true}, func(rt task.Runtime, e *engine.AsyncLLM) {
			var reqs []*engine.Request
			for i := range 2 {
				r, err := e.AddRequest(fmt.Sprint("r", i), pauseLong, engine.Params{MaxTokens: 1000, IgnoreEOS: true, DataParallelRank: new(i)})
				require.NoError(t, err)
				reqs = append(reqs, r)
			}
			require.NoError(t, e.PauseGeneration(context.Background(), engine.PauseOptions{Mode: engine.PauseAbort}))
			for _, r := range reqs {
				assert.Equal(t, engine.FinishAbort, last(drain(t, r)).FinishReason, "seed %d", seed)
			}
			paused, err := e.IsPaused(context.Background())
			require.NoError(t, err)
			assert.True(t, paused)
			require.NoError(t, e.ResumeGeneration(context.Background()))
			reset, err := e.ResetPrefixCache(context.Background(), false)
			require.NoError(t, err)
			assert.True(t, reset, "seed %d: neither core holds a request", seed)
			r, err := e.AddRequest("after", pauseLong, engine.Params{MaxTokens: 2, DataParallelRank: new(1)})
			require.NoError(t, err)
			assert.Equal(t, want(pauseLong, 2), tokensOf(engine.Cumulative, drain(t, r)), "seed %d: core 1 runs after the resume", seed)
		})
		assert.Equal(t, map[int]int{0: 1, 1: 1}, byEngine(events, core.EventPause), "seed %d", seed)
		assert.Equal(t, map[int]int{0: 1, 1: 1}, byEngine(events, core.EventCacheReset), "seed %d", seed)
	}
}

// TestDataParallelOnBothRuntimes: two cores serve clients streaming at
// once, under the checker, on goroutines and under the simulator.
func TestDataParallelOnBothRuntimes(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{DataParallelSize: 2})
		defer e.Close()
		g := task.NewGroup(rt, "clients")
		for i := range 6 {
			g.Go("client", func() {
				prompt := fmt.Sprintf("%s %d", pauseLong, i)
				r := add(t, e, fmt.Sprint("c", i), prompt, engine.Params{MaxTokens: 12, IgnoreEOS: true, Output: engine.Delta})
				assert.Equal(t, want(prompt, 12), tokensOf(engine.Delta, drain(t, r)), "client %d", i)
			})
		}
		g.Wait()
		require.NoError(t, e.WaitIdle(context.Background()))
	})
}

// TestDataParallelSleepOvertakenOnOneCoreWakesTheOther: a sleep whose
// pause waits for a running request on core 0 takes effect at once on
// idle core 1; a resume then overtakes it on core 0, and core 1, asleep,
// refuses the resume. Sleep says ErrResumed, the engine runs: core 1 is
// woken, and a request on it runs to its end.
func TestDataParallelSleepOvertakenOnOneCoreWakesTheOther(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		c, events := dpRun(t, seed, sim.Random(), engine.Config{DataParallelSize: 2, StepTime: 200 * time.Microsecond}, func(rt task.Runtime, e *engine.AsyncLLM) {
			long, err := e.AddRequest("long", pauseLong, engine.Params{MaxTokens: 200, IgnoreEOS: true, DataParallelRank: new(0)})
			require.NoError(t, err)
			_, err = long.Next()
			require.NoError(t, err)
			var slept error
			g := task.NewGroup(rt, "sleeper")
			g.Go("sleeper", func() {
				slept = e.Sleep(context.Background(), engine.SleepOptions{Level: 1, Mode: engine.PauseWait})
			})
			rt.Sleep(time.Millisecond) // core 1 sleeps; core 0 waits for "long"
			assert.ErrorIs(t, e.ResumeGeneration(context.Background()), engine.ErrAsleep, "seed %d: core 1 refuses the resume", seed)
			g.Wait()
			assert.ErrorIs(t, slept, engine.ErrResumed, "seed %d: the resume overtook the sleep on core 0", seed)
			r, err := e.AddRequest("after", pauseLong, engine.Params{MaxTokens: 2, DataParallelRank: new(1)})
			require.NoError(t, err)
			assert.Equal(t, want(pauseLong, 2), tokensOf(engine.Cumulative, drain(t, r)), "seed %d: core 1 runs", seed)
			assert.Equal(t, want(pauseLong, 200), tokensOf(engine.Cumulative, drain(t, long)), "seed %d", seed)
		})
		var splits []engine.Event
		for _, ev := range events {
			if ev.Kind == core.EventCallSplit {
				splits = append(splits, ev)
			}
		}
		require.Len(t, splits, 1, "seed %d", seed)
		assert.Equal(t, "sleep", splits[0].Text)
		assert.Equal(t, 1, splits[0].Held, "the sleep took effect on one core")
		assert.True(t, splits[0].Finished, "and the engine woke it")
		assert.True(t, c.Reached().Has(props.CallSplitAcrossCores), "seed %d", seed)
	}
}

// doomModel is the toy model but for one prompt, whose sampling panics at
// output position 5: the core that runs it dies.
type doomModel struct {
	core.ToyModel
	doomed uint64 // the prompt's key
}

func (m doomModel) TokenAt(key uint64, i int) int {
	if key == m.doomed && i == 5 {
		panic("the GPU of this rank fell off the bus")
	}
	return m.ToyModel.TokenAt(key, i)
}

// TestDataParallelOneCoreDyingKillsTheEngine: core 1 dies of its request
// while core 0 streams one; as vLLM's client fails every request once an
// engine is dead, both end with ErrEngineDead and its cause, later calls
// fail fast, and Close returns.
func TestDataParallelOneCoreDyingKillsTheEngine(t *testing.T) {
	model := doomModel{doomed: core.ToyModel{}.Prepare(core.Tokenizer{}.Encode("doom"))}
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{DataParallelSize: 2, Model: model})
		defer e.Close()
		healthy := add(t, e, "healthy", pauseLong, engine.Params{MaxTokens: 100000, IgnoreEOS: true, DataParallelRank: new(0)})
		_, err := healthy.Next()
		require.NoError(t, err)
		doomed := add(t, e, "doomed", "doom", engine.Params{MaxTokens: 10, IgnoreEOS: true, DataParallelRank: new(1)})
		for _, r := range []*engine.Request{doomed, healthy} {
			_, err := readAll(r)
			assert.ErrorIs(t, err, engine.ErrEngineDead, r.ID())
			assert.ErrorContains(t, err, "the GPU of this rank fell off the bus", r.ID())
		}
		assert.ErrorIs(t, e.CheckHealth(), engine.ErrEngineDead)
		_, err = e.AddRequest("later", pauseLong, engine.Params{MaxTokens: 1, DataParallelRank: new(0)})
		assert.ErrorIs(t, err, engine.ErrEngineDead, "the live core takes nothing more")
		require.NoError(t, e.Close())
	})
}

// TestDataParallelStaleFramesCountToTheirCore: a request on core 2 that
// ends on a stop string while the core, under async scheduling, has its
// next step in flight: the frames that follow reach a frontend that no
// longer holds the request, and are counted to the core that sent them,
// read from the frame's number.
func TestDataParallelStaleFramesCountToTheirCore(t *testing.T) {
	stop, _ := stopAt(t, "hello", 3)
	seen := 0
	for seed := uint64(1); seed <= 20; seed++ {
		dpRun(t, seed, sim.Starve("output-handler"), engine.Config{DataParallelSize: 3, AsyncScheduling: true}, func(rt task.Runtime, e *engine.AsyncLLM) {
			r := add(t, e, "x", "hello", engine.Params{MaxTokens: 40, Stop: []string{stop}, DataParallelRank: new(2)})
			drain(t, r)
			require.NoError(t, e.WaitIdle(context.Background()))
			s := e.Stats()
			assert.Zero(t, s.Cores[0].StaleFramesDropped+s.Cores[1].StaleFramesDropped, "seed %d: a stale frame of core 2 counted to another", seed)
			assert.Equal(t, s.StaleFramesDropped, s.Cores[2].StaleFramesDropped, "seed %d", seed)
			if s.Cores[2].StaleFramesDropped > 0 {
				seen++
			}
		})
	}
	assert.Positive(t, seen, "no seed of 20 had a stale frame: the test shows nothing")
	t.Logf("seeds with a stale frame: %d of 20", seen)
}

// TestDataParallelOneCoreDyingStopsTheOthers: once core 1 dies, core 0
// drops the request it ran for nobody and frees its KV blocks before
// Close, as vLLM's client shuts every engine down when one dies, rather
// than decoding on for a request the frontend has already failed.
func TestDataParallelOneCoreDyingStopsTheOthers(t *testing.T) {
	model := doomModel{doomed: core.ToyModel{}.Prepare(core.Tokenizer{}.Encode("doom"))}
	dpRun(t, 3, sim.Random(), engine.Config{DataParallelSize: 2, Model: model}, func(rt task.Runtime, e *engine.AsyncLLM) {
		healthy := add(t, e, "healthy", pauseLong, engine.Params{MaxTokens: 100000, IgnoreEOS: true, DataParallelRank: new(0)})
		_, err := healthy.Next()
		require.NoError(t, err)
		require.Positive(t, e.Stats().Cores[0].KVUsedBlocks)
		doomed := add(t, e, "doomed", "doom", engine.Params{MaxTokens: 10, IgnoreEOS: true, DataParallelRank: new(1)})
		for _, r := range []*engine.Request{doomed, healthy} {
			_, err := readAll(r)
			require.ErrorIs(t, err, engine.ErrEngineDead, r.ID())
		}
		for i := 0; i < 1000 && e.Stats().Cores[0].RequestsRunning > 0; i++ {
			rt.Sleep(time.Millisecond) // a virtual second at most
		}
		s := e.Stats().Cores[0]
		assert.Zero(t, s.RequestsRunning, "core 0 still runs the failed request")
		assert.Zero(t, s.KVUsedBlocks, "core 0 still holds its KV blocks")
	})
}

// TestDataParallelStatsByCore: a request running on core 1 of two shows
// in core 1's gauges and in the sums, and the metrics label each core's
// series engine="N", as vLLM's, in place of their sum.
func TestDataParallelStatsByCore(t *testing.T) {
	dpRun(t, 1, sim.Random(), engine.Config{DataParallelSize: 2, NumBlocks: 64, BlockSize: 4}, func(rt task.Runtime, e *engine.AsyncLLM) {
		r, err := e.AddRequest("r", pauseLong, engine.Params{MaxTokens: 100, IgnoreEOS: true, DataParallelRank: new(1)})
		require.NoError(t, err)
		_, err = r.Next()
		require.NoError(t, err)
		s := e.Stats()
		require.Len(t, s.Cores, 2)
		assert.Equal(t, 0, s.Cores[0].RequestsRunning)
		assert.Equal(t, 1, s.Cores[1].RequestsRunning)
		assert.Equal(t, 1, s.RequestsRunning, "the sum")
		assert.Zero(t, s.Cores[0].KVUsedBlocks)
		assert.Positive(t, s.Cores[1].KVUsedBlocks)
		assert.Equal(t, s.Cores[1].KVUsedBlocks, s.KVUsedBlocks)
		assert.Equal(t, 128, s.KVNumBlocks)
		assert.InDelta(t, float64(s.Cores[1].KVUsedBlocks)/63, s.Cores[1].KVCacheUsage(), 1e-9)
		assert.InDelta(t, float64(s.KVUsedBlocks)/126, s.KVCacheUsage(), 1e-9, "a null block a core")
		ms := s.Metrics()
		assert.Contains(t, ms, engine.Metric{Name: `vllm:num_requests_running{engine="0"}`, Value: 0})
		assert.Contains(t, ms, engine.Metric{Name: `vllm:num_requests_running{engine="1"}`, Value: 1})
		assert.Contains(t, ms, engine.Metric{Name: `vllm:kv_cache_usage_perc{engine="1"}`, Value: s.Cores[1].KVCacheUsage()})
		for _, m := range ms {
			assert.NotEqual(t, "vllm:num_requests_running", m.Name, "no sum beside the cores' series")
		}
		short := add(t, e, "short", "a b c", engine.Params{MaxTokens: 3, IgnoreEOS: true, DataParallelRank: new(0)})
		require.Len(t, tokensOf(engine.Params{}.Output, drain(t, short)), 3)
		r.Cancel()
		got := tokensOf(engine.Params{}.Output, drain(t, r))
		require.NoError(t, e.WaitIdle(context.Background()))

		// The frontend's counts, each to the core of its request.
		s = e.Stats()
		c0, c1 := s.Cores[0], s.Cores[1]
		assert.Equal(t, [4]int64{0, 1, 0, 0}, [4]int64{c0.FinishedStop, c0.FinishedLength, c0.FinishedAbort, c0.FinishedError}, "core 0: short ran to its length")
		assert.Equal(t, [4]int64{0, 0, 1, 0}, [4]int64{c1.FinishedStop, c1.FinishedLength, c1.FinishedAbort, c1.FinishedError}, "core 1: r was cancelled")
		assert.Equal(t, int64(3), c0.GenerationTokens)
		assert.Equal(t, int64(len(got)), c1.GenerationTokens)
		assert.Equal(t, int64(len(core.Tokenizer{}.Encode("a b c"))), c0.PromptTokens)
		assert.Equal(t, int64(len(core.Tokenizer{}.Encode(pauseLong))), c1.PromptTokens)
		assert.Equal(t, c0.GenerationTokens+c1.GenerationTokens, s.GenerationTokens, "the sum")
		assert.Equal(t, int64(2), s.FinishedLength+s.FinishedAbort, "the sum")
		ms = s.Metrics()
		assert.Contains(t, ms, engine.Metric{Name: `vllm:request_success_total{engine="0",finished_reason="length"}`, Value: 1})
		assert.Contains(t, ms, engine.Metric{Name: `vllm:request_success_total{engine="1",finished_reason="abort"}`, Value: 1})
		assert.Contains(t, ms, engine.Metric{Name: `vllm:generation_tokens_total{engine="0"}`, Value: 3})
		assert.Contains(t, ms, engine.Metric{Name: `llmdst:stale_frames_dropped_total{engine="1"}`, Value: float64(c1.StaleFramesDropped)})
		for _, m := range ms {
			assert.NotEqual(t, "vllm:generation_tokens_total", m.Name, "no sum beside the cores' series")
		}
	})
	e, err := engine.New(engine.Config{})
	require.NoError(t, err)
	defer e.Close()
	assert.Nil(t, e.Stats().Cores, "one core has no series of its own")
}
