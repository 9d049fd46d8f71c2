package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// requests is a client that frees a request's slot when its answer or its
// timeout comes, whichever is first. The buggy one trusts Timer.Stop to have
// kept the timeout from firing: when the answer and the timeout come at the
// same moment, the timeout may have fired already, and the slot is freed
// twice. The fixed one decides under the lock which of the two frees it.
func requests(buggy bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		mu := rt.NewMutex("client")
		inflight := 0
		g := task.NewGroup(rt, "requests")
		for i, latency := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond} {
			g.Go(fmt.Sprintf("request-%d", i), func() {
				mu.Lock()
				inflight++
				mu.Unlock()
				answered := false
				timeout := rt.AfterFunc(10*time.Millisecond, func() {
					mu.Lock()
					defer mu.Unlock()
					if !answered {
						answered = true
						inflight--
					}
				})
				rt.Sleep(latency) // the backend answers
				timeout.Stop()
				mu.Lock()
				defer mu.Unlock()
				if buggy || !answered {
					answered = true
					inflight--
				}
			})
		}
		g.Wait()
		if inflight != 0 {
			return fmt.Errorf("%d requests in flight after every one ended", inflight)
		}
		return nil
	}
}

// Example_timerStopRace finds a timer whose Stop races its callback, shrinks
// the failing schedule, saves it as text and replays it, then checks the fix.
// The failure needs no preemption: only the order in which the answer and
// the timeout, due at the same virtual moment, run.
func Example_timerStopRace() {
	var failed sim.Result
	for seed := uint64(0); seed < 100; seed++ {
		if res := sim.Run(sim.Options{Seed: seed}, requests(true)); res.Err != nil {
			failed = res
			break
		}
	}
	fmt.Println("found:", failed.Err)

	sameFailure := func(opts sim.Options) (sim.Result, bool) {
		res := sim.Run(opts, requests(true))
		return res, res.Err != nil && res.Err.Error() == failed.Err.Error()
	}
	shrunk, stats, err := sim.Shrink(context.Background(), failed.Schedule, sameFailure, sim.ShrinkOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("shrunk to:", stats.After)

	text := shrunk.String() // what a test writes to a file
	parsed, err := sim.ParseSchedule(text)
	if err != nil {
		panic(err)
	}
	again := sim.Run(sim.Options{Strategy: sim.Replay(parsed)}, requests(true))
	fmt.Println("replayed from text:", again.Err)

	for seed := uint64(0); seed < 200; seed++ {
		if res := sim.Run(sim.Options{Seed: seed}, requests(false)); res.Err != nil {
			fmt.Println("the fix fails:", res.Err)
			return
		}
	}
	fmt.Println("the fix passes 200 seeds")
	// Output:
	// found: -1 requests in flight after every one ended
	// shrunk to: 0 preemptions, 0 waits, 16 decisions
	// replayed from text: -1 requests in flight after every one ended
	// the fix passes 200 seeds
}
