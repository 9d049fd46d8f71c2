package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestARetryAfterAFailedLoadRunsOnAnIdleCore plants
// core/kv-load-retry-leaves-core-idle, local-inference-lab/vllm's #191:
// b's load from host memory is the only thing in flight, so the core
// stalls waiting for it; the load fails, and under recompute b goes back
// to compute from its failed block. Fixed, the copy's landing ends the
// stall and b runs at once. Planted, the core keeps the stall and waits
// for an input with b waiting: b gets its tokens only when the next
// call arrives, and with none the run deadlocks with b unfinished.
func TestARetryAfterAFailedLoadRunsOnAnIdleCore(t *testing.T) {
	type result struct {
		err      error
		tokens   []int
		finished bool
		ended    time.Duration // virtual time of b's last frame
		loaded   int           // EventKVLoaded of b
	}
	const wake = 50 * time.Millisecond // when the planted run's second call arrives
	run := func(t *testing.T, bug, call bool) (result, []int) {
		cfg := Config{BlockSize: 4, NumBlocks: 7, KVOffloadBlocks: 8, EnablePrefixCaching: true,
			KVLoadFailurePolicy: LoadFailureRecompute, StepTime: time.Millisecond}.WithDefaults()
		faults := []string{failpoints.CoreKVLoadFails.Name + "=return"}
		if bug {
			faults = append(faults, failpoints.CoreKVLoadRetryLeavesCoreIdle.Name+"=return")
		}
		cfg.Faults = rttest.Armed(t, faults...)
		var res result
		cfg.Observer = func(ev Event) {
			if ev.Kind == EventKVLoaded && ev.InternalID == "b" {
				res.loaded++
				assert.Equal(t, "failed", ev.Text)
				assert.False(t, ev.Finished, "recompute: b goes on")
			}
		}
		prompt := seq(1, 9) // two full blocks, stored when a ends
		a := &Request{InternalID: "a", ExternalID: "a", Prompt: prompt, Params: SamplingParams{MaxTokens: 1, IgnoreEOS: true}, Incarnation: 1}
		// c's five blocks, with a's three, outgrow the GPU's six: a's
		// cached blocks are evicted, and b finds its prompt in host memory
		// alone.
		c := &Request{InternalID: "c", ExternalID: "c", Prompt: seq(101, 17), Params: SamplingParams{MaxTokens: 1, IgnoreEOS: true}, Incarnation: 2}
		b := &Request{InternalID: "b", ExternalID: "b", Prompt: seq(1, 9), Params: SamplingParams{MaxTokens: 3, IgnoreEOS: true}, Incarnation: 3}
		res.err = sim.Run(sim.Options{Seed: 1, StepsMax: 100_000}, func(rt task.Runtime) error {
			core, _, out, g := startCore(rt, cfg)
			core.Send(Input{Kind: InputAdd, Req: a})
			rt.Sleep(10 * time.Millisecond) // a runs, ends, and its store lands
			core.Send(Input{Kind: InputAdd, Req: c})
			rt.Sleep(10 * time.Millisecond) // c evicts a's blocks from the GPU
			// The reader notes when each of b's frames comes out.
			r := task.NewGroup(rt, "r")
			r.Go("reader", func() {
				for !res.finished {
					o, ok := out.Get()
					if !assert.True(t, ok, "the output queue closed") || !assert.NoError(t, o.Dead) {
						return
					}
					for _, f := range o.Frames {
						if f.InternalID == "b" {
							res.tokens = append(res.tokens, f.NewTokens...)
							res.ended = rt.Now().Sub(sim.Epoch)
							res.finished = f.Finished
						}
					}
				}
			})
			core.Send(Input{Kind: InputAdd, Req: b})
			if call {
				rt.Sleep(wake)
				core.Send(Input{Kind: InputIsPaused, Call: 1})
			}
			r.Wait()
			core.Send(Input{Kind: InputShutdown})
			for _, ok := out.Get(); ok; _, ok = out.Get() {
			}
			g.Wait()
			return nil
		}).Err
		return res, Tokens(ToyModel{}, b.Prompt, 3)
	}

	t.Run("fixed", func(t *testing.T) {
		res, want := run(t, false, true)
		require.NoError(t, res.err)
		assert.Equal(t, 1, res.loaded, "b's one load failed")
		assert.True(t, res.finished)
		assert.Equal(t, want, res.tokens, "b computed from its failed block")
		assert.Less(t, res.ended, 20*time.Millisecond+wake, "b ran before the call came")
	})
	t.Run("planted, nothing else arrives", func(t *testing.T) {
		res, _ := run(t, true, false)
		var dl *sim.DeadlockError
		require.ErrorAs(t, res.err, &dl, "b waits on a core that waits for an input")
		assert.Equal(t, 1, res.loaded)
		assert.False(t, res.finished)
		assert.Empty(t, res.tokens, "b never got a token")
	})
	t.Run("planted, another call arrives", func(t *testing.T) {
		res, want := run(t, true, true)
		require.NoError(t, res.err)
		assert.Equal(t, want, res.tokens, "the call woke the core, and b ran")
		assert.GreaterOrEqual(t, res.ended, 20*time.Millisecond+wake, "b ran only after the call")
	})
}
