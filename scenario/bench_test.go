package scenario_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// BenchmarkSeed measures one seed of each scenario on one core, as a
// sweep's fast pass runs it: no schedule recorded, no hash, no trace; on
// the fixed engine, the legacy one, and the fixed engine of two
// data-parallel cores (-config data-parallel-size=2), "dp2".
func BenchmarkSeed(b *testing.B) {
	for _, s := range scenario.All() {
		for _, variant := range []string{"fixed", "legacy", "dp2"} {
			legacy := variant == "legacy"
			var cfg func(*engine.Config)
			if variant == "dp2" {
				cfg = func(c *engine.Config) { c.DataParallelSize = 2 }
			}
			b.Run(s.Name+"/"+variant, func(b *testing.B) {
				st, _ := sim.ParseStrategy(s.DefaultStrategy)
				b.ReportAllocs()
				pool := sim.NewPool()
				defer pool.Close()
				var steps int64
				for i := 0; i < b.N; i++ {
					prog, out := s.Program(scenario.Options{Legacy: legacy, Seed: uint64(i), Engine: cfg})
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

// BenchmarkSeedParallel is BenchmarkSeed with a worker per core, as simrun
// sweep runs: seeds/s is the sweep's rate with -j set to the -cpu count.
func BenchmarkSeedParallel(b *testing.B) {
	for _, legacy := range []bool{false, true} {
		name := "abort-reuse/fixed"
		if legacy {
			name = "abort-reuse/legacy"
		}
		b.Run(name, func(b *testing.B) {
			st, _ := sim.ParseStrategy(scenario.AbortReuse.DefaultStrategy)
			var next atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				pool := sim.NewPool()
				defer pool.Close()
				for pb.Next() {
					seed := next.Add(1)
					prog, out := scenario.AbortReuse.Program(scenario.Options{Legacy: legacy, Seed: seed})
					res := sim.Run(sim.Options{Seed: seed, Strategy: st, NoRecord: true, NoHash: true, Pool: pool}, prog)
					_ = out.Err(res.Err)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seeds/s")
		})
	}
}

// scale is a workload of clients tasks, each adding and reading requests
// requests one after another, reusing its ids.
func scale(clients, requests int) *scenario.Scenario {
	return &scenario.Scenario{Name: "scale", DefaultStrategy: "chaos", Run: func(x *scenario.Run) error {
		e, err := x.NewEngine(engine.Config{StepTime: scenario.FoundingStepTime})
		if err != nil {
			return err
		}
		g := task.NewGroup(x.RT, "clients")
		for c := 0; c < clients; c++ {
			g.Go("client", func() {
				for i := 0; i < requests; i++ {
					r, err := e.AddRequest(fmt.Sprintf("c%d-%d", c, i%2), "hello", engine.Params{MaxTokens: 4, Output: engine.Delta})
					if err != nil {
						continue
					}
					for {
						if _, err := r.Next(); err != nil {
							break
						}
					}
				}
			})
		}
		g.Wait()
		return nil
	}}
}

// BenchmarkScale shows how the cost of a seed grows with the tasks and the
// requests of a scenario, to size a sweep.
func BenchmarkScale(b *testing.B) {
	st := sim.Chaos()
	for _, clients := range []int{1, 4, 16} {
		for _, requests := range []int{1, 4, 16} {
			sc := scale(clients, requests)
			b.Run(fmt.Sprintf("clients=%d/requests=%d", clients, requests), func(b *testing.B) {
				pool := sim.NewPool()
				defer pool.Close()
				var steps int64
				for i := 0; i < b.N; i++ {
					prog, out := sc.Program(scenario.Options{Seed: uint64(i)})
					res := sim.Run(sim.Options{Seed: uint64(i), Strategy: st, NoRecord: true, NoHash: true, Pool: pool}, prog)
					if err := out.Err(res.Err); err != nil {
						b.Fatal(err)
					}
					steps += res.Steps
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "seeds/s")
				b.ReportMetric(float64(steps)/float64(b.N), "steps/seed")
			})
		}
	}
}
