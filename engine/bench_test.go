package engine_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// BenchmarkThroughput streams tokens to 256 concurrent Delta consumers on
// goroutines, with a model of no latency: an op is one token delivered to
// a consumer. tokens/s is the engine's throughput; allocs/op is
// allocations per token.
func BenchmarkThroughput(b *testing.B) {
	const consumers = 256
	e, err := engine.New(engine.Config{StepTime: engine.NoStepTime, MaxNumSeqs: consumers})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	per := b.N/consumers + 1
	b.ReportAllocs()
	b.ResetTimer()
	g := task.NewGroup(task.Real(), "consumers")
	var got [consumers]int
	for c := 0; c < consumers; c++ {
		r, err := e.AddRequest(fmt.Sprint("c", c), "hello", engine.Params{MaxTokens: per, Output: engine.Delta, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		g.Go("consumer", func() {
			for {
				out, err := r.Next()
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					b.Error(err)
					return
				}
				got[c] += len(out.TokenIDs)
			}
		})
	}
	g.Wait()
	b.StopTimer()
	total := 0
	for _, n := range got {
		total += n
	}
	if total != consumers*per {
		b.Fatalf("%d tokens delivered, want %d", total, consumers*per)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkVirtualTime runs 1,000 engine steps of 10ms each — 10 virtual
// seconds — under the simulator; x-realtime is virtual time over wall time.
func BenchmarkVirtualTime(b *testing.B) {
	pool := sim.NewPool()
	defer pool.Close()
	var virtual time.Duration
	for i := 0; i < b.N; i++ {
		res := sim.Run(sim.Options{Seed: uint64(i), Strategy: sim.Random(), Pool: pool, NoRecord: true, NoHash: true}, func(rt task.Runtime) error {
			e, err := engine.New(engine.Config{Runtime: rt, StepTime: 10 * time.Millisecond})
			if err != nil {
				return err
			}
			defer e.Close()
			r, err := e.AddRequest("long", "hello", engine.Params{MaxTokens: 1000, Output: engine.FinalOnly, IgnoreEOS: true})
			if err != nil {
				return err
			}
			out, err := r.Next()
			if err != nil {
				return err
			}
			if len(out.TokenIDs) != 1000 {
				return fmt.Errorf("%d tokens", len(out.TokenIDs))
			}
			return nil
		})
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		virtual += res.Elapsed
	}
	b.ReportMetric(float64(virtual)/float64(b.Elapsed()), "x-realtime")
	b.ReportMetric(float64(virtual)/float64(b.N)/float64(time.Second), "virtual-s/op")
}
