package rttest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// Strategies are the simulator strategies Both runs a body under.
var Strategies = []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos(), sim.Starve("output-handler")}

// Seeds is how many seeds Both runs under each strategy.
const Seeds = 3

// Both runs body as the subtest "real" on task.Real(), then as
// "sim/STRATEGY/SEED" under the simulator for every strategy in Strategies
// and Seeds seeds; a failing simulated run prints its replay.
func Both(t *testing.T, body func(t *testing.T, rt task.Runtime)) {
	t.Helper()
	t.Run("real", func(t *testing.T) { body(t, task.Real()) })
	Sim(t, body)
}

// Sim runs body under the simulator only, as Both does.
func Sim(t *testing.T, body func(t *testing.T, rt task.Runtime)) {
	t.Helper()
	for _, st := range Strategies {
		for seed := uint64(1); seed <= Seeds; seed++ {
			t.Run(fmt.Sprintf("sim/%s/%d", st, seed), func(t *testing.T) {
				res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error {
					body(t, rt)
					return nil
				})
				if res.Err != nil && !t.Failed() {
					t.Fatalf("seed %d strategy %s: %v", seed, st, res.Err)
				}
				if t.Failed() {
					t.Logf("failed under the simulator: seed %d, strategy %s, %d steps, %v virtual", seed, st, res.Steps, res.Elapsed)
				}
			})
		}
	}
}

// Armed returns a failpoint set with specs armed, each NAME=TERMS as
// failpoints.NewSet takes them, drawing random terms from seed 1's fault
// stream: what a test that plants a fault or a bug on purpose wants. A spec
// that does not parse fails the test.
func Armed(t testing.TB, specs ...string) *failpoints.Set {
	t.Helper()
	s, err := failpoints.NewSet(sim.NewPCGChooser(1, sim.StreamFaults), specs...)
	require.NoError(t, err, "failpoints %q", specs)
	return s
}
