package core_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// drive runs an EngineCore under the simulator, feeds it inputs and
// returns every batch it emitted until it closed its output queue.
func drive(t *testing.T, cfg core.Config, feed func(rt task.Runtime, c *core.EngineCore)) []*core.Outputs {
	t.Helper()
	var got []*core.Outputs
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		in := task.NewQueue[core.Input](rt)
		aborts := task.NewQueue[[]string](rt)
		out := task.NewQueue[*core.Outputs](rt)
		c := core.NewEngineCore(rt, cfg.WithDefaults(), in, aborts, out, nil)
		g := task.NewGroup(rt, "g")
		g.Go("engine-core", c.Run)
		feed(rt, c)
		for o, ok := out.Get(); ok; o, ok = out.Get() {
			got = append(got, o)
		}
		g.Wait()
		return nil
	})
	require.NoError(t, res.Err)
	return got
}

func frames(outs []*core.Outputs) []core.Frame {
	var fs []core.Frame
	for _, o := range outs {
		fs = append(fs, o.Frames...)
	}
	return fs
}

func TestEngineCoreRunsRequestsToTheirEnd(t *testing.T) {
	outs := drive(t, core.Config{}, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "short", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 2}, Incarnation: 1}})
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "long", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 1000}, Incarnation: 2}})
		rt.Go("stopper", func() {
			rt.Sleep(2 * time.Second) // 1000 steps of 1ms, and then some
			c.Send(core.Input{Kind: core.InputShutdown})
		})
	})
	fs := frames(outs)
	require.NotEmpty(t, fs)
	last := fs[len(fs)-1]
	assert.Equal(t, "long", last.InternalID)
	assert.Equal(t, core.FinishLength, last.Reason)
	assert.Len(t, fs, 2+1000)
}

// TestEngineCoreShutdownAbortsWhatItHolds: a shutdown ends the requests
// the core holds with an abort frame each, gives their blocks back, and
// leaves gauges that say so.
func TestEngineCoreShutdownAbortsWhatItHolds(t *testing.T) {
	var ec *core.EngineCore
	outs := drive(t, core.Config{}, func(rt task.Runtime, c *core.EngineCore) {
		ec = c
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "long", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 100000}, Incarnation: 1}})
		rt.Sleep(3 * time.Millisecond) // it runs, and holds a block
		require.Equal(t, 1, c.Stats().KVUsedBlocks)
		c.Send(core.Input{Kind: core.InputShutdown})
	})
	fs := frames(outs)
	require.NotEmpty(t, fs)
	last := fs[len(fs)-1]
	assert.True(t, last.Finished)
	assert.Equal(t, core.FinishAbort, last.Reason, "shutdown sends an explicit abort frame")
	assert.NoError(t, ec.CheckKV())
	st := ec.Stats()
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{st.Running, st.Waiting, st.KVUsedBlocks}, "running, waiting, KV blocks used after the shutdown")
}

func TestEngineCoreClientAbortEmitsNothing(t *testing.T) {
	outs := drive(t, core.Config{}, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "a", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 100000}, Incarnation: 1}})
		c.SendAbort([]string{"a"})
		c.Send(core.Input{Kind: core.InputShutdown})
	})
	for _, f := range frames(outs) {
		assert.False(t, f.Finished, "a client abort has no output from the core")
	}
}

// TestEngineCoreGivesAnAbortedRequestsBlocksBack: a request the client
// aborts while it runs gives its KV blocks back, so once the core has shut
// down every block is free (CheckKV), and the core never reports a leak.
// With the leak of core/kv-leak-on-abort planted, the aborted request's
// blocks stay held by no request: the core reports them once, as the abort
// leaves it empty (EventKVLeak, before "b" arrives), and CheckKV names one
// of them and the request that took it.
func TestEngineCoreGivesAnAbortedRequestsBlocksBack(t *testing.T) {
	for _, bug := range []bool{false, true} {
		var leaks []core.Event
		cfg := core.Config{Observer: func(ev core.Event) {
			if ev.Kind == core.EventKVLeak {
				leaks = append(leaks, ev)
			}
		}}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreKVLeakOnAbort.Name+"=return")
		}
		var ec *core.EngineCore
		var abortedHeld int
		outs := drive(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			ec = c
			c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "a", Prompt: make([]int, 40), Params: core.SamplingParams{MaxTokens: 100000}, Incarnation: 1}})
			rt.Sleep(5 * time.Millisecond) // a few steps: it holds blocks
			abortedHeld = c.Stats().KVUsedBlocks
			c.SendAbort([]string{"a"})
			rt.Sleep(time.Millisecond) // the core takes the abort alone
			c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "b", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 3}, Incarnation: 2}})
			rt.Sleep(10 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		require.NotEmpty(t, frames(outs))
		err := ec.CheckKV()
		if !bug {
			assert.NoError(t, err, "every block is free after the shutdown")
			assert.Empty(t, leaks, "the core reported no leak")
			continue
		}
		require.Error(t, err, "the planted leak")
		assert.Regexp(t, `^block \d+ is held by no request, its reference count 1: a leak \(last taken by incarnation 1, #1 in a story\)$`, err.Error())
		require.Len(t, leaks, 1, "one leak, reported once: neither b's run nor the shutdown reports it again")
		assert.Equal(t, abortedHeld, leaks[0].Held, "every block the aborted request held")
		assert.Greater(t, abortedHeld, 1)
		assert.Equal(t, err, leaks[0].Err, "the same leak, named as CheckKV names it")
	}
}

func TestEngineCoreRejectsWhatCanNeverFit(t *testing.T) {
	outs := drive(t, core.Config{BlockSize: 4, NumBlocks: 2}, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "huge", Prompt: make([]int, 12), Params: core.SamplingParams{MaxTokens: 5}, Incarnation: 1}})
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "dup", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 50}, Incarnation: 2}})
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "dup", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 50}, Incarnation: 3}})
		rt.Sleep(time.Second) // let the core find that "huge" can never be scheduled
		c.Send(core.Input{Kind: core.InputShutdown})
	})
	reasons := map[uint64]core.FinishReason{}
	for _, f := range frames(outs) {
		if f.Finished {
			reasons[f.Incarnation] = f.Reason
		}
	}
	assert.Equal(t, core.FinishError, reasons[1], "a request larger than the whole cache ends with an error, not a hang")
	assert.Equal(t, core.FinishError, reasons[3], "an ADD of a live internal id is refused")
}

func TestEngineCoreModelPanicIsDeath(t *testing.T) {
	for term, want := range map[string]string{
		"panic(boom)":  "engine core: failpoint core/model-panic: boom",
		"return(boom)": "engine core: failpoint core/model-panic: boom",
		"panic":        "engine core: failpoint core/model-panic: injected panic",
		"return":       "engine core: failpoint core/model-panic: injected panic",
	} {
		faults := rttest.Armed(t, "core/model-panic="+term)
		outs := drive(t, core.Config{Faults: faults}, func(rt task.Runtime, c *core.EngineCore) {
			c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "a", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 5}, Incarnation: 1}})
		})
		require.NotEmpty(t, outs, term)
		assert.EqualError(t, outs[len(outs)-1].Dead, want, term)
	}
}

// TestEngineCoreDiesRatherThanSpin: the core holds a request it can never
// schedule again (its MinTokens lies past the model length, which the
// frontend refuses but the core alone does not check): it dies with a
// message instead of looping on it forever.
func TestEngineCoreDiesRatherThanSpin(t *testing.T) {
	outs := drive(t, core.Config{MaxModelLen: 8}, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: "m", Prompt: []int{1, 2}, Params: core.SamplingParams{MaxTokens: 10, MinTokens: 10}, Incarnation: 1}})
	})
	require.NotEmpty(t, outs)
	assert.Len(t, frames(outs), 6, "the tokens up to the model length, and none past it")
	assert.ErrorContains(t, outs[len(outs)-1].Dead, "core: 1 running requests and none could be scheduled")
}

// TestReleasedBatchesAreReusedAndTokensStay releases every batch as soon as
// it is read, as the frontend does, while keeping the frames' tokens: the
// core reuses the batches, and the tokens kept stay the model's.
func TestReleasedBatchesAreReusedAndTokensStay(t *testing.T) {
	model := core.ToyModel{}
	reqs := []struct {
		id     string
		prompt []int
		max    int
	}{{"a", []int{1, 2}, 300}, {"b", []int{3}, 40}, {"c", []int{4, 5, 6}, 700}}
	kept := map[string][][]int{} // each frame's NewTokens, as they were handed over
	batches, seen := 0, map[*core.Outputs]bool{}
	res := sim.Run(sim.Options{Seed: 3}, func(rt task.Runtime) error {
		in := task.NewQueue[core.Input](rt)
		out := task.NewQueue[*core.Outputs](rt)
		c := core.NewEngineCore(rt, core.Config{Model: model}.WithDefaults(), in, task.NewQueue[[]string](rt), out, nil)
		g := task.NewGroup(rt, "g")
		g.Go("engine-core", c.Run)
		for i, r := range reqs {
			c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: r.id, Prompt: r.prompt,
				Params: core.SamplingParams{MaxTokens: r.max, IgnoreEOS: true}, Incarnation: uint64(i + 1)}})
		}
		for finished := 0; finished < len(reqs); {
			o, ok := out.Get()
			require.True(t, ok)
			batches++
			seen[o] = true
			for _, f := range o.Frames {
				if len(f.NewTokens) > 0 {
					require.Len(t, kept[f.InternalID], f.Position)
					kept[f.InternalID] = append(kept[f.InternalID], f.NewTokens)
				}
				if f.Finished {
					finished++
				}
			}
			o.Release()
		}
		c.Send(core.Input{Kind: core.InputShutdown})
		g.Wait()
		return nil
	})
	require.NoError(t, res.Err)
	assert.Less(t, len(seen), batches/2, "released batches come back")
	for _, r := range reqs {
		key := model.Prepare(r.prompt)
		require.Len(t, kept[r.id], r.max, r.id)
		for i, toks := range kept[r.id] {
			require.Equal(t, []int{model.TokenAt(key, i)}, toks, "%s token %d", r.id, i)
		}
	}
}
