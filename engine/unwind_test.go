package engine_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestARunThatEndsWithTheEngineOpenDoesNotKillIt: a simulated run that
// returns with an engine still open stops the engine's parked tasks by
// unwinding them. The core must let that through, not take it for a model
// panic and tell the observer that the engine died.
func TestARunThatEndsWithTheEngineOpenDoesNotKillIt(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		var dead []error
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, func(rt task.Runtime) error {
			e := newEngine(t, rt, engine.Config{Observer: func(ev engine.Event) {
				if ev.Kind == core.EventDead {
					dead = append(dead, ev.Err)
				}
			}})
			add(t, e, "a", "hello", engine.Params{MaxTokens: 100000})
			rt.Yield("test.before-return")
			return nil // e is left open: its tasks are parked when the run ends
		})
		require.NoError(t, res.Err, "seed %d", seed)
		assert.Empty(t, dead, "seed %d: the core reported a death at the run's end", seed)
	}
}
