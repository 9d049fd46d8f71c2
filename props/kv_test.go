package props_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestCheckKVFindsALeakedBlock: once an engine is closed its KV blocks are
// all free, and CheckKV records nothing; with core/kv-leak-on-abort
// planted, a request aborted while it ran leaves its blocks held by no
// request. The checker records a violation of KVBlocksAccounted as the
// abort leaves the core empty (the core reports it), before WaitIdle
// returns, and CheckKV a second once the engine is closed. Every other
// property holds either way: only the blocks know.
func TestCheckKVFindsALeakedBlock(t *testing.T) {
	for _, bug := range []bool{false, true} {
		c := props.NewChecker(core.ToyModel{})
		res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
			cfg := engine.Config{Runtime: rt, Observer: c.Observe}
			if bug {
				cfg.Faults = rttest.Armed(t, failpoints.CoreKVLeakOnAbort.Name+"=return")
			}
			e, err := engine.New(cfg)
			if err != nil {
				return err
			}
			r, err := e.AddRequest("a", "hello", engine.Params{MaxTokens: 1000, Output: engine.Delta})
			if err != nil {
				return err
			}
			if _, err := r.Next(); err != nil { // it runs, and holds a block
				return err
			}
			e.Abort("a")
			if _, err := drainAll(r); err != nil {
				return err
			}
			require.NoError(t, e.WaitIdle(t.Context()))
			if bug {
				v := c.Violations()
				require.Len(t, v, 1, "found as the core went empty")
				assert.Equal(t, props.KVBlocksAccounted, v[0].Property)
				assert.Regexp(t, `^after core step \d+ the core held no request, yet 1 KV block\(s\) were in use: block \d+ is held by no request, its reference count 1: a leak \(last taken by incarnation 1, #1 in a story\)$`, v[0].Detail)
			} else {
				require.Empty(t, c.Violations(), "before the KV check")
			}
			e.Close()
			c.CheckKV(e)
			return nil
		})
		require.NoError(t, res.Err)
		err := c.Finish()
		if !bug {
			assert.NoError(t, err)
			continue
		}
		requireViolation(t, err, props.KVBlocksAccounted)
		all := c.Violations()
		require.Len(t, all, 2, "only the blocks know: the leak as the core went empty, and again after Close")
		assert.Equal(t, props.KVBlocksAccounted, all[1].Property)
		assert.Regexp(t, `^engine: KV blocks: block \d+ is held by no request, its reference count 1: a leak \(last taken by incarnation 1, #1 in a story\)$`, all[1].Detail)
	}
}
