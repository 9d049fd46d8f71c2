package sim_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// tellers is the lost update of the package example; with probes, each
// teller says so when the other wrote between its read and its write: the
// race's window.
func tellers(probes bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		balance := 100
		g := task.NewGroup(rt, "tellers")
		for _, name := range []string{"deposit", "withdraw"} {
			g.Go(name, func() {
				b := balance
				rt.Yield("teller.after-read")
				if probes && balance != b {
					task.Reach(rt, "teller.raced")
				}
				if probes {
					task.Reach(rt, "teller.wrote")
				}
				if name == "deposit" {
					balance = b + 10
				} else {
					balance = b - 10
				}
			})
		}
		g.Wait()
		if balance != 100 {
			return fmt.Errorf("balance %d, want 100", balance)
		}
		return nil
	}
}

// TestReachSaysWhichSeedsOpenedTheWindow: a seed fails exactly when it
// reached the window; the probes change nothing of the run (the same trace
// hash without them); a replay reaches what the run reached.
func TestReachSaysWhichSeedsOpenedTheWindow(t *testing.T) {
	failed, raced := 0, 0
	for seed := uint64(0); seed < 200; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, tellers(true))
		bare := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, tellers(false))
		require.Equal(t, bare.TraceHash, res.TraceHash, "seed %d: a probe changed the run", seed)
		assert.Empty(t, bare.Reached)
		in := assert.ObjectsAreEqual([]string{"teller.wrote", "teller.raced"}, res.Reached)
		if !in {
			assert.Equal(t, []string{"teller.wrote"}, res.Reached, "seed %d: each name once, in the order first reached", seed)
		}
		assert.Equal(t, in, res.Err != nil, "seed %d: reached %v, failed %v", seed, res.Reached, res.Err)
		if res.Err != nil {
			failed++
		}
		if in {
			raced++
			again := sim.Run(sim.Options{Strategy: sim.Replay(res.Schedule)}, tellers(true))
			assert.Equal(t, res.Reached, again.Reached, "seed %d: the replay", seed)
		}
	}
	assert.Positive(t, raced)
	assert.Less(t, raced, 200, "Random opens the window on some seeds, not all")
	assert.Equal(t, failed, raced)
}

func TestReachOnTheRealRuntimeDoesNothing(t *testing.T) {
	rt := task.Real()
	g := task.NewGroup(rt, "probes")
	for range 4 {
		g.Go("probe", func() { task.Reach(rt, "anything") })
	}
	assert.NotPanics(t, g.Wait)
}
