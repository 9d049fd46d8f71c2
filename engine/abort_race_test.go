package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
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
		var events []engine.Event
		var out engine.Output
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, func(rt task.Runtime) error {
			e, err := engine.New(engine.Config{Runtime: rt, Observer: func(ev engine.Event) {
				if ev.Kind == core.EventCoreAdd || ev.Kind == core.EventCoreAbort || ev.Kind == core.EventAbort {
					events = append(events, ev)
				}
			}})
			if err != nil {
				return err
			}
			defer e.Close()
			g := task.NewGroup(rt, "callers")
			var r *engine.Request
			g.Go("adder", func() {
				r, err = e.AddRequest("x", "hello", engine.Params{MaxTokens: 50})
			})
			g.Go("aborter", func() {
				for !e.HasUnfinishedRequests() {
					rt.Yield("aborter.poll")
				}
				e.Abort("x")
			})
			g.Wait()
			if err != nil {
				return err
			}
			for {
				o, err := r.Next()
				if err != nil {
					break
				}
				out = o
			}
			return e.WaitIdle(context.Background())
		})
		require.NoError(t, res.Err, "seed %d", seed)
		assert.Equal(t, engine.FinishAbort, out.FinishReason, "seed %d: the request ends aborted", seed)

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
