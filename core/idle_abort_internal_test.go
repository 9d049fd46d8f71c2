package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestAnAbortTakenWhileIdleStartsItsStoresLastCopy: q's pending store
// fills host memory, so r's store waits for room, and w waits for the
// blocks r holds; a keep pause freezes them, and q's copies land. r's
// abort comes on the aborts queue alone (SendAbort puts it there before
// its input), and the idle core takes it as an IsPaused input wakes it:
// r's end finds room and starts the last copy of its store, which holds
// r's blocks until it lands. The core must put that copy on the link, as
// an abort's input does; left among the stores started, it never lands,
// the resume's step schedules nothing with no copy in flight, and the
// guard against a step of nothing (rejectUnschedulable, "none could be
// scheduled") kills the core. With the copy on the link the core waits
// for it, and w runs.
func TestAnAbortTakenWhileIdleStartsItsStoresLastCopy(t *testing.T) {
	cfg := Config{BlockSize: 2, NumBlocks: 11, KVOffloadBlocks: 2, EnablePrefixCaching: true, StepTime: time.Millisecond}.WithDefaults()
	var events []Event
	cfg.Observer = func(ev Event) { events = append(events, ev) }
	q := &Request{InternalID: "q", ExternalID: "q", Prompt: seq(1, 4), Params: SamplingParams{MaxTokens: 1, IgnoreEOS: true}, Incarnation: 1}
	r := &Request{InternalID: "r", ExternalID: "r", Prompt: seq(101, 5), Params: SamplingParams{MaxTokens: 1000, IgnoreEOS: true}, Incarnation: 2}
	w := &Request{InternalID: "w", ExternalID: "w", Prompt: seq(201, 16), Params: SamplingParams{MaxTokens: 2, IgnoreEOS: true}, Incarnation: 3}
	var outs []*Outputs
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		c, aborts, out, g := startCore(rt, cfg)
		for _, req := range []*Request{q, r, w} {
			c.Send(Input{Kind: InputAdd, Req: req})
		}
		// q's prompt fills two blocks, whose store fills host memory, and
		// q ends; r's prompt fills two and takes a third, and its two wait
		// for room; w's eight do not fit. The pause comes before q's
		// copies land.
		rt.Sleep(1500 * time.Microsecond)
		c.Send(Input{Kind: InputPause, Call: 1, Mode: PauseKeep})
		rt.Sleep(10 * time.Millisecond) // q's copies land; the pause takes effect
		// The abort's first half only: its input never comes.
		c.abortsPending.Add(1)
		assert.True(t, aborts.Put([]string{"r"}))
		c.Send(Input{Kind: InputIsPaused, Call: 2})
		rt.Sleep(time.Millisecond) // the core takes it, and the abort, alone
		c.Send(Input{Kind: InputResume, Call: 3})
		rt.Sleep(20 * time.Millisecond) // r's copy lands; w runs
		c.Send(Input{Kind: InputShutdown})
		for o, ok := out.Get(); ok; o, ok = out.Get() {
			outs = append(outs, o)
		}
		g.Wait()
		return nil
	})
	require.NoError(t, res.Err)

	var wTokens []int
	wEnd := FinishReason("")
	for _, o := range outs {
		require.NoError(t, o.Dead, "the core died")
		for _, f := range o.Frames {
			if f.InternalID == "w" {
				wTokens = append(wTokens, f.NewTokens...)
				if f.Finished {
					wEnd = f.Reason
				}
			}
		}
	}
	assert.Equal(t, FinishLength, wEnd, "w ran to its end")
	assert.Equal(t, Tokens(ToyModel{}, w.Prompt, 2), wTokens)
	assert.Equal(t, StatusFinishedAborted, r.Status, "r ended aborted")

	// The scene the test means to set: r's store waited for room, q's
	// landed before r's abort, and the abort's end of r started its copy.
	order := map[string]int{}
	for i, ev := range events {
		var key string
		switch {
		case ev.Kind == EventKVStoreWait && ev.InternalID == "r":
			key = "r waits"
		case ev.Kind == EventKVStored && ev.InternalID == "q" && ev.Finished:
			key = "q landed"
		case ev.Kind == EventPauseDone:
			key = "paused"
		case ev.Kind == EventCoreAbort && ev.InternalID == "r":
			key = "r aborted"
		case ev.Kind == EventKVStore && ev.InternalID == "r":
			key = "r stores"
		case ev.Kind == EventResume:
			key = "resumed"
		case ev.Kind == EventKVStored && ev.InternalID == "r" && ev.Finished:
			key = "r landed"
		}
		if _, seen := order[key]; key != "" && !seen {
			order[key] = i
		}
	}
	steps := []string{"r waits", "q landed", "paused", "r aborted", "r stores", "resumed", "r landed"}
	for i, k := range steps {
		require.Contains(t, order, k)
		if i > 0 {
			assert.Less(t, order[steps[i-1]], order[k], "%s before %s", steps[i-1], k)
		}
	}
}

// startCore starts an engine core of cfg on rt, as the task
// "engine-core" of the group it returns, with its aborts and output
// queues; Send puts its inputs.
func startCore(rt task.Runtime, cfg Config) (*EngineCore, *task.Queue[[]string], *task.Queue[*Outputs], *task.Group) {
	in, aborts, out := task.NewQueue[Input](rt), task.NewQueue[[]string](rt), task.NewQueue[*Outputs](rt)
	c := NewEngineCore(rt, cfg, in, aborts, out, nil)
	g := task.NewGroup(rt, "g")
	g.Go("engine-core", c.Run)
	return c, aborts, out, g
}
