package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestStopStringAbortsGoToTheCoreChunkByChunk: as vLLM's output handler
// does, the frontend tells the core to abort what a chunk's stop strings
// finished once that chunk is processed, before it goes on to the next
// chunk of the batch, not once the whole batch is done. The batch is made
// by hand; the core's own first step takes an hour of virtual time.
func TestStopStringAbortsGoToTheCoreChunkByChunk(t *testing.T) {
	rttest.Sim(t, func(t *testing.T, rt task.Runtime) {
		var e *AsyncLLM
		sentAtB := uint64(0)
		e, err := New(Config{Runtime: rt, OutputChunkSize: 1, StepTime: time.Hour, Observer: func(ev Event) {
			if ev.Kind == core.EventFrameDelivered && ev.RequestID == "b" {
				sentAtB = e.cores[0].c.InputsSent()
			}
		}})
		require.NoError(t, err)
		defer e.Close()
		a, err := e.AddRequest("a", "hello", Params{MaxTokens: 5, Stop: []string{" end"}})
		require.NoError(t, err)
		b, err := e.AddRequest("b", "hello", Params{MaxTokens: 5})
		require.NoError(t, err)
		end := core.Tokenizer{}.Encode("end")
		frame := func(id uint64, r *Request) core.Frame {
			return core.Frame{ID: id, InternalID: r.internalID, ExternalID: r.id, Incarnation: r.incarnation, NewTokens: end, StopReason: -1}
		}
		before := e.cores[0].c.InputsSent()
		e.process(&core.Outputs{Frames: []core.Frame{frame(1, a), frame(2, b)}})
		assert.Equal(t, before+1, sentAtB, "a's stop string finished it in the first chunk: its abort is sent before the second chunk")
		out, err := a.Next()
		require.NoError(t, err)
		assert.Equal(t, FinishStop, out.FinishReason)
		assert.Equal(t, " end", out.StopReason)
	})
}
