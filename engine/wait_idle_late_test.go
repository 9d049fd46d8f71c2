package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestWaitIdleWaitsForTheLastBatch: a request the core has finished but
// whose final frame is not on the output queue yet (the batch is late) is
// still the core's work: WaitIdle returns only once the output handler has
// taken that batch, so the request is finished in the frontend too.
func TestWaitIdleWaitsForTheLastBatch(t *testing.T) {
	rttest.Sim(t, func(t *testing.T, rt task.Runtime) {
		faults := rttest.Armed(t, "core/output-late=return(5000)")
		e := newEngine(t, rt, engine.Config{Faults: faults})
		defer e.Close()
		r := add(t, e, "r", "hello", engine.Params{MaxTokens: 1})
		rt.Sleep(2 * time.Millisecond) // the step is done, its batch held back
		require.NoError(t, e.WaitIdle(context.Background()))
		assert.False(t, e.HasUnfinishedRequests(), "WaitIdle returned before the frontend got the finished request's last batch")
		out, err := r.Next()
		require.NoError(t, err)
		assert.True(t, out.Finished)
		assert.Equal(t, engine.FinishLength, out.FinishReason)
	})
}
