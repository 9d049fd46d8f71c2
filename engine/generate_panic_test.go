package engine_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestGenerateConsumerPanicAbortsTheRequest: a consumer whose loop body
// panics (a handler's bug, recovered further up) has walked away as surely
// as one that breaks: Generate owns the request, and only Generate can
// abort it. The request must not run on to MaxTokens, holding its id, a
// seat and KV blocks, for nobody.
func TestGenerateConsumerPanicAbortsTheRequest(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{})
		defer e.Close()
		func() {
			defer func() { assert.Equal(t, "handler bug", recover()) }()
			for _, err := range e.Generate(context.Background(), "p", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta}) {
				require.NoError(t, err)
				panic("handler bug")
			}
		}()
		assert.False(t, e.HasUnfinishedRequests(), "the request of the panicking consumer is still live")
		require.NoError(t, e.WaitIdle(context.Background()))
		r, err := e.AddRequest("p", "hello", engine.Params{MaxTokens: 2})
		require.NoError(t, err, "the id is free again")
		assert.Len(t, tokensOf(engine.Cumulative, drain(t, r)), 2)
	})
}

// TestGenerateConsumerGoexitAbortsTheRequest: a consumer that leaves by
// runtime.Goexit (t.FailNow in a test's goroutine) walks away as one that
// panics does. On goroutines only: the simulator takes a task's Goexit for
// the run's failure.
func TestGenerateConsumerGoexitAbortsTheRequest(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{})
	defer e.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, err := range e.Generate(context.Background(), "g", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta}) {
			if err == nil {
				runtime.Goexit()
			}
		}
	}()
	<-done
	require.False(t, e.HasUnfinishedRequests(), "the request of the consumer that left is still live")
	require.NoError(t, e.WaitIdle(context.Background()))
	r, err := e.AddRequest("g", "hello", engine.Params{MaxTokens: 2})
	require.NoError(t, err, "the id is free again")
	assert.Len(t, tokensOf(engine.Cumulative, drain(t, r)), 2)
}
