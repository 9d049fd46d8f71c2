package engine

import (
	"io"

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
