package scenario_test

import (
	"testing"

	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// BenchmarkSeed measures one seed of each scenario on one core, as a
// sweep's fast pass runs it: no schedule recorded, no hash, no trace.
func BenchmarkSeed(b *testing.B) {
	for _, s := range scenario.All() {
		for _, legacy := range []bool{false, true} {
			name := s.Name + "/fixed"
			if legacy {
				name = s.Name + "/legacy"
			}
			b.Run(name, func(b *testing.B) {
				st, _ := sim.ParseStrategy(s.DefaultStrategy)
				b.ReportAllocs()
				pool := sim.NewPool()
				defer pool.Close()
				var steps int64
				for i := 0; i < b.N; i++ {
					prog, out := s.Program(scenario.Options{Legacy: legacy, Seed: uint64(i)})
					res := sim.Run(sim.Options{Seed: uint64(i), Strategy: st, NoRecord: true, NoHash: true, Pool: pool}, prog)
					_ = out.Err(res.Err)
					steps += res.Steps
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seeds/s")
				b.ReportMetric(float64(steps)/float64(b.N), "steps/seed")
			})
		}
	}
}
