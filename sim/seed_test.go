package sim_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestSeedIsTheRunsOwn: a program reads its run's seed, in every task and
// in both runs of a determinism check; goroutines have none.
func TestSeedIsTheRunsOwn(t *testing.T) {
	for _, seed := range []uint64{0, 7, 1 << 63} {
		var seen []uint64
		res := sim.Run(sim.Options{Seed: seed, CheckDeterminism: true}, func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g")
			g.Go("worker", func() {
				s, ok := sim.Seed(rt)
				assert.True(t, ok)
				seen = append(seen, s)
			})
			g.Wait()
			return nil
		})
		assert.NoError(t, res.Err)
		assert.Equal(t, []uint64{seed, seed}, seen)
	}
	_, ok := sim.Seed(task.Real())
	assert.False(t, ok)
}
