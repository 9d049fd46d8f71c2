// Package sim is a deterministic simulator for Go programs written against
// package task: it runs them one task at a time under a seeded Strategy and
// a virtual clock, so that any interleaving — the CPU-starvation ones that
// make CI flaky above all — can be found, replayed seed by seed, and looked
// at.
//
// Run executes a program as the task "main". At every scheduling point
// (Yield, a Mutex's Lock, a Cond's Wait, Sleep, a task's start and end) the
// Strategy picks the next task among those that may run, and the baton
// passes to it; nothing else runs meanwhile. Virtual time starts at Epoch
// and moves only when no task may run: to the next timer, or, when the
// strategy withholds every runnable task (Chaos, Starve), to the end of the
// starvation window — starvation is time passing while a thread could run.
//
// Every decision is drawn from a Chooser and recorded in a Schedule; a
// TraceHash covers every decision and event, so the same seed gives the same
// hash on any machine, any GOMAXPROCS, with or without -race, and
// Replay(schedule) runs the same interleaving again.
//
// The caller's duties:
//
//  1. Write the program against task.Runtime only: no go statements,
//     channels between tasks, select, package time's clock or global
//     math/rand. Options.Debug catches a foreign goroutine calling in.
//  2. Build all state inside main: a run must not depend on what an earlier
//     run left behind (Options.CheckDeterminism checks this).
//  3. Return an error from main for a property failure. Deadlocks, panics,
//     step-limit hits and replay divergences come back in Result.Err as
//     *DeadlockError, *PanicError, *StepLimitError and
//     *ScheduleMismatchError.
//  4. Print the replay command or keep Result.Schedule when a run fails;
//     count Result.Reached (task.Reach's names) over the seeds that pass,
//     to know that they reached the race's window.
//  5. In a test, set Options.HangAfter: a task that loops without a
//     scheduling point, or blocks on a channel of its own, keeps the baton
//     where no step limit sees it, and the process then panics with a
//     *HangError naming the stuck task instead of waiting for go test's
//     timeout.
//
// Beyond one run: Shrink delta-debugs a failing Schedule down to the fewest
// preemptions (then waits) that still fail with the same signature, driving
// the program with Guided, which follows the schedule's choices and lets
// every other decision fall to the calm default. Observe reports each
// decision as it is made. A sweep sets NoRecord and NoHash on its fast pass
// and re-runs only the failing seeds with recording on, and keeps one Pool
// per worker so that the goroutines of finished tasks serve later runs.
//
// Explore does not sample: it runs every schedule that departs from the
// calm one at most ExploreOptions.Delays times, depth first, each a fresh
// run, and stops at the first that fails. For a small program (a lock, a
// queue, a cache's refresh between two or three tasks) it turns "no seed
// failed" into "no schedule within the bound fails". Under Random it
// orders tasks at scheduling points; under Chaos or Starve it also opens
// their windows, at every decision, for each of their lengths, so that a
// race that needs a task starved while time passes (the founding race) is
// within its reach: three departures under starve:output-handler. A
// schedule of the walk is its Draws, written by their departures
// ("24:2,25:5,62:1"); FollowDraws runs it again, a hung one included
// (HangError.Draws).
//
// Package simtest does all of this for a Go test: seeds on every core over
// the strategies, the lowest failing seed shrunk, saved as a regression
// schedule and given the command that runs it again, targets counted.
// Signature names a failure's mode, for grouping failures and for Shrink's
// test; Seed gives a program its run's seed to draw a workload from.
//
// Usage:
//
//	res := sim.Run(sim.Options{Seed: 42, Strategy: sim.Chaos()},
//		func(rt task.Runtime) error {
//			q := task.NewQueue[int](rt, task.QueueName("jobs"))
//			rt.Go("worker", func() { q.Put(1) })
//			if v, _ := q.Get(); v != 1 {
//				return fmt.Errorf("got %d", v)
//			}
//			return nil
//		})
//	if res.Err != nil {
//		again := sim.Run(sim.Options{Strategy: sim.Replay(res.Schedule)}, program)
//		// again.TraceHash == res.TraceHash
//	}
//
// Tasks are driven as iter.Pull coroutines that hand the baton to each
// other: a switch is a direct handoff inside the Go runtime, one per hand-off
// when two tasks take turns, with a loop at the root for the start and the
// end of the run. Panics and runtime.Goexit in a task
// are caught inside its coroutine; tasks still parked when main returns are
// unwound (their deferred calls run) from throwaway goroutines, so no
// goroutine outlives Run and a task's t.FailNow cannot end Run's caller.
package sim
