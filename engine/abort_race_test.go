package engine_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
)

// TestAbortBeforeTheAddIsSentStillReachesTheCoreAfterIt: AddRequest
// registers a request, then sends its ADD; an Abort in between removes the
// state at once. Its ABORT must still reach the core after the ADD: one
// that comes first finds nothing, and the ADD that follows runs the request
// to MaxTokens for nobody, holding a seat and KV blocks, with WaitIdle
// waiting for it. Every interleaving of the two callers is tried over
// seeds; with unique internal ids, a core ADD after a core ABORT of the
// same id is that zombie.
func TestAbortBeforeTheAddIsSentStillReachesTheCoreAfterIt(t *testing.T) {
	raced := 0
	for seed := uint64(1); seed <= 300; seed++ {
		res, events, outs := addAbortRace(seed, engine.Params{MaxTokens: 50})
		require.NoError(t, res.Err, "seed %d", seed)
		assert.Equal(t, engine.FinishAbort, last(outs).FinishReason, "seed %d: the request ends aborted", seed)

		for i, ev := range events {
			switch {
			case ev.Kind == core.EventAbort && !sawCoreAdd(events[:i], ev.InternalID):
				raced++
			case ev.Kind == core.EventCoreAbort && !sawCoreAdd(events[:i], ev.InternalID):
				t.Errorf("seed %d: the core processed the abort of %s before its ADD; events%s", seed, ev.InternalID, kinds(events))
			}
		}
	}
	assert.Positive(t, raced, "some seed aborts the request before its ADD reaches the core")
}

// sawCoreAdd reports whether events hold the core's ADD of internal id id.
func sawCoreAdd(events []engine.Event, id string) bool {
	for _, e := range events {
		if e.Kind == core.EventCoreAdd && e.InternalID == id {
			return true
		}
	}
	return false
}

func kinds(events []engine.Event) string {
	s := ""
	for _, ev := range events {
		s += fmt.Sprintf(" %s(%s)", ev.Kind, ev.InternalID)
	}
	return s
}
