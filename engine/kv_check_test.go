package engine_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestCheckKVWaitsForClose: the core's blocks are its loop's while it runs,
// so CheckKV refuses to read them before Close returned, saying why; after
// Close, with a request served and another aborted, every block is free.
func TestCheckKVWaitsForClose(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime})
	err := e.CheckKV()
	require.Error(t, err)
	assert.Equal(t, "engine: CheckKV before Close returned: the core's KV blocks are its loop's while it runs", err.Error())
	drain(t, add(t, e, "served", "hello", engine.Params{MaxTokens: 5}))
	long := add(t, e, "aborted", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta})
	_, err = long.Next()
	require.NoError(t, err)
	e.Abort("aborted")
	require.NoError(t, e.Close())
	assert.NoError(t, e.CheckKV())
}

// TestTheCoreReportsALeakAsItGoesEmpty: on goroutines, where nothing may
// read the core's blocks while it runs, the core checks them itself. With
// core/kv-leak-on-abort planted, the abort that leaves the core empty
// leaves the aborted request's blocks in use, and the core reports them
// (core.EventKVLeak) before WaitIdle can return, and the engine's gauge
// llmdst:kv_leaked_blocks counts them; a served request, and an aborted
// one without the bug, leave no report and the gauge at 0.
func TestTheCoreReportsALeakAsItGoesEmpty(t *testing.T) {
	for _, bug := range []bool{false, true} {
		var mu sync.Mutex
		var leaks []core.Event
		cfg := engine.Config{Runtime: task.Real(), StepTime: engine.NoStepTime, Observer: func(ev core.Event) {
			if ev.Kind == core.EventKVLeak {
				mu.Lock()
				leaks = append(leaks, ev)
				mu.Unlock()
			}
		}}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreKVLeakOnAbort.Name+"=return")
		}
		e, err := engine.New(cfg)
		require.NoError(t, err)
		drain(t, add(t, e, "served", "hello", engine.Params{MaxTokens: 5}))
		long := add(t, e, "aborted", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta})
		_, err = long.Next()
		require.NoError(t, err)
		e.Abort("aborted")
		require.NoError(t, e.WaitIdle(t.Context()))
		mu.Lock()
		got := slices.Clone(leaks)
		mu.Unlock()
		leaked := e.Stats().KVLeakedBlocks
		require.NoError(t, e.Close())
		if !bug {
			assert.Empty(t, got, "no leak")
			assert.Zero(t, leaked, "llmdst:kv_leaked_blocks")
			assert.NoError(t, e.CheckKV())
			continue
		}
		require.Len(t, got, 1, "the leak, reported once, before WaitIdle returned")
		assert.Positive(t, got[0].Held, "the aborted request's blocks")
		assert.Equal(t, got[0].Held, leaked, "llmdst:kv_leaked_blocks, for the operator")
		assert.Regexp(t, `^block \d+ is held by no request, its reference count 1: a leak \(last taken by incarnation 2, #2 in a story\)$`, got[0].Err.Error())
		assert.Error(t, e.CheckKV(), "still there after Close")
	}
}
