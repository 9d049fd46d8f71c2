package engine

import (
	"cmp"
	"io"
	"slices"

	"github.com/llmdst/llmdst/task"
)

// collector is vLLM's RequestOutputCollector: a single slot and a wake-up.
// A slow consumer of a Delta request finds one merged delta; Cumulative and
// FinalOnly outputs replace each other; an error overwrites everything.
type collector struct {
	mu   task.Mutex
	cond task.Cond
	kind OutputKind

	slot   Output
	has    bool
	text   []byte // the merged text of a Delta slot, once two deltas merged
	merged bool
	err    error
	ended  bool // the finished output was put
	closed bool // the finished output was taken
}

func newCollector(rt task.Runtime, kind OutputKind) *collector {
	mu := rt.NewMutex("collector")
	return &collector{mu: mu, cond: rt.NewCond(mu), kind: kind}
}

func (c *collector) put(o Output) {
	c.mu.Lock()
	if c.err == nil && !c.ended {
		switch {
		case !c.has:
			c.slot, c.has = o, true
		case o.Completions != nil:
			c.mergeCompletions(o)
		case c.kind == Delta:
			// Merge into a buffer: concatenating strings would copy the
			// whole merged text again for every token of a slow consumer.
			if !c.merged {
				c.merged = true
				c.text = append(c.text[:0], c.slot.Text...)
				c.slot.TokenIDs = append([]int(nil), c.slot.TokenIDs...) // the core's, not ours to grow
			}
			c.slot.TokenIDs = append(c.slot.TokenIDs, o.TokenIDs...)
			c.text = append(c.text, o.Text...)
			c.slot.Finished, c.slot.FinishReason, c.slot.StopReason = o.Finished, o.FinishReason, o.StopReason
		default:
			c.slot = o
		}
		c.ended = o.Finished
		c.cond.Signal()
	}
	c.mu.Unlock()
}

// mergeCompletions merges the output of a parallel-sampling request into
// the slot, sequence by sequence, as vLLM's RequestOutput.add: a Delta
// sequence's tokens and text are appended to what the slot holds of it,
// a Cumulative one replaces it, and a sequence the slot lacks joins it.
func (c *collector) mergeCompletions(o Output) {
	for _, nc := range o.Completions {
		i, found := slices.BinarySearchFunc(c.slot.Completions, nc.Index, func(x Completion, idx int) int { return cmp.Compare(x.Index, idx) })
		switch {
		case !found:
			c.slot.Completions = slices.Insert(c.slot.Completions, i, nc)
		case c.kind == Delta:
			sc := &c.slot.Completions[i]
			// A Delta completion's tokens are the core's, with no room
			// past them (core.Frame.NewTokens), or none: the first append
			// copies them, and later ones grow that copy.
			sc.TokenIDs = append(sc.TokenIDs, nc.TokenIDs...)
			sc.Text += nc.Text
			sc.FinishReason, sc.StopReason = nc.FinishReason, nc.StopReason
		default:
			c.slot.Completions[i] = nc
		}
	}
	c.slot.Finished = o.Finished
}

func (c *collector) fail(err error) {
	c.mu.Lock()
	if !c.ended { // a request that already has its final output keeps it
		c.err = err
		c.has = false
		c.cond.Signal()
	}
	c.mu.Unlock()
}

// next waits for an output. After the finished output it returns io.EOF;
// after an error, that error, every time.
func (c *collector) next() (Output, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.has && c.err == nil && !c.closed {
		c.cond.Wait("request.next")
	}
	switch {
	case c.err != nil:
		return Output{}, c.err
	case c.has:
		o := c.slot
		if c.merged {
			o.Text = string(c.text)
			c.merged = false
		}
		c.slot, c.has = Output{}, false
		if o.Finished {
			c.closed = true
		}
		return o, nil
	}
	return Output{}, io.EOF
}
