package sim_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/stacks"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

//go:noinline
func spinForever() {
	n := 0
	for {
		n++ // a local: two runs may spin at once
	}
}

//go:noinline
func blockOnARealChannel() { <-make(chan struct{}) }

// hangChild is the program a child process runs: a task that spins, or one
// that blocks on a channel the simulator does not know of.
func hangChild(how string) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		done := task.NewQueue[struct{}](rt, task.QueueName("done"))
		rt.Go("stuck", func() {
			rt.Yield("stuck")
			if how == "spin" {
				spinForever()
			}
			blockOnARealChannel()
			done.Put(struct{}{})
		})
		done.Get() // main waits for the task, which never ends
		return nil
	}
}

// panicsInAChild runs test alone in a child process of this test binary,
// with env set, and returns what it printed: the child is to end in a
// panic, which ends the process, so it cannot run in this one.
func panicsInAChild(t *testing.T, test, env string) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s: %s", env, out)
	assert.Equal(t, 2, exit.ExitCode(), "%s: a panic", env)
	return out
}

// TestHangAfterPanicsWithTheSeedAndTheStuckTask runs a hanging program in a
// child process, since the panic ends the process: it fails at once with
// the seed, its strategy and where the task is stuck, instead of waiting out go test's
// timeout with neither.
func TestHangAfterPanicsWithTheSeedAndTheStuckTask(t *testing.T) {
	if how := os.Getenv("SIM_HANG_CHILD"); how != "" {
		sim.Run(sim.Options{Seed: 42, Strategy: sim.PCT(2), HangAfter: 100 * time.Millisecond}, hangChild(how))
		t.Fatal("the run of a stuck task returned")
	}
	for how, want := range map[string]string{
		"spin":  "a task runs in github.com/llmdst/llmdst/sim_test.spinForever without reaching a scheduling point",
		"block": "a task is blocked in github.com/llmdst/llmdst/sim_test.blockOnARealChannel [chan receive] on something the simulator cannot see",
	} {
		out := panicsInAChild(t, "TestHangAfterPanicsWithTheSeedAndTheStuckTask", "SIM_HANG_CHILD="+how)
		assert.Contains(t, string(out), "panic: hang: seed 42 (strategy pct:2) had not ended after ", how)
		assert.Contains(t, string(out), want, how)
		assert.Contains(t, string(out), stacks.TaskFrame, "%s: the stuck task's stack", how)
	}
}

// TestHangAfterLeavesARunThatEndsAlone: the watch changes nothing in the
// run and ends with it.
func TestHangAfterLeavesARunThatEndsAlone(t *testing.T) {
	plain := sim.Run(sim.Options{Seed: 9, Strategy: sim.Chaos()}, lostUpdate)
	watched := sim.Run(sim.Options{Seed: 9, Strategy: sim.Chaos(), HangAfter: 20 * time.Millisecond}, lostUpdate)
	assert.Equal(t, plain.TraceHash, watched.TraceHash)
	assert.Equal(t, plain.Steps, watched.Steps)
	time.Sleep(60 * time.Millisecond) // past the limit: a watch left running would panic now
}

// yieldForever is a livelock: two tasks that take turns for ever, deciding
// all the while, each turn 20µs of wall time.
func yieldForever(rt task.Runtime) error {
	for _, name := range []string{"a", "b"} {
		rt.Go(name, func() {
			for {
				for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
				}
				rt.Yield(name)
			}
		})
	}
	done := task.NewQueue[struct{}](rt, task.QueueName("done"))
	done.Get()
	return nil
}

// TestHangAfterLeavesARunThatGoesOnDeciding: a livelock that outlasts
// HangAfter several times over but makes decisions all the while is no hang:
// the step limit ends it. Options.Progress, the user's own here, counts
// its decisions as they go.
func TestHangAfterLeavesARunThatGoesOnDeciding(t *testing.T) {
	// 256 decisions, a store of the count, take some 5 ms; the limit
	// leaves room for a loaded machine to deschedule the run.
	const limit = 100 * time.Millisecond
	var progress atomic.Int64
	start := time.Now()
	res := sim.Run(sim.Options{Seed: 3, Strategy: sim.Chaos(), StepsMax: 25_000, NoRecord: true, HangAfter: limit, Progress: &progress}, yieldForever)
	var sl *sim.StepLimitError
	require.ErrorAs(t, res.Err, &sl)
	require.Greater(t, time.Since(start), 4*limit, "the run must outlast the limit, or the test tests nothing")
	assert.Equal(t, int64(25_000)&^255, progress.Load(), "the count as of its last store, every 256 decisions")
	time.Sleep(3 * limit) // past the limit: a watch left running would panic now
}

// TestTaskFrameIsInEveryTasksStack: stacks.FindStuck knows a task's
// goroutine by this frame; a rename of sched.body must take it along.
func TestTaskFrameIsInEveryTasksStack(t *testing.T) {
	var seen []string
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		look := func() {
			buf := make([]byte, 8<<10)
			seen = append(seen, string(buf[:runtime.Stack(buf, false)]))
		}
		rt.Go("other", look)
		look()
		rt.Yield("main")
		return nil
	})
	require.NoError(t, res.Err)
	require.Len(t, seen, 2)
	for _, st := range seen {
		assert.True(t, strings.Contains(st, stacks.TaskFrame), st)
	}
}

// hangsOutOfTurn spins for good in the schedules where task b is the
// first of the two to pass its yield, which the calm schedule is not.
func hangsOutOfTurn(rt task.Runtime) error {
	first := ""
	g := task.NewGroup(rt, "turns")
	for _, name := range []string{"a", "b"} {
		g.Go(name, func() {
			rt.Yield("turn")
			if first == "" {
				first = name
			}
			if first == "b" {
				spinForever()
			}
		})
	}
	g.Wait()
	return nil
}

// TestExploreHangAfterPanicsWithTheSeedAndTheStuckTask: a schedule of a
// walk that hangs ends the process as a run's would, naming the seed and
// the strategy walked.
func TestExploreHangAfterPanicsWithTheSeedAndTheStuckTask(t *testing.T) {
	if os.Getenv("SIM_EXPLORE_HANG_CHILD") != "" {
		opts := sim.ExploreOptions{Options: sim.Options{Seed: 7, HangAfter: 100 * time.Millisecond}, Delays: -1, Workers: 2}
		_, _ = sim.Explore(context.Background(), opts, hangsOutOfTurn)
		t.Fatal("the walk of a stuck task returned")
	}
	out := panicsInAChild(t, "TestExploreHangAfterPanicsWithTheSeedAndTheStuckTask", "SIM_EXPLORE_HANG_CHILD=1")
	assert.Contains(t, string(out), "panic: hang: seed 7 (strategy random, draws ", "the schedule that hung, which FollowDraws runs again")
	assert.Contains(t, string(out), "a task runs in github.com/llmdst/llmdst/sim_test.spinForever without reaching a scheduling point")
}

// TestExploreHangAfterLeavesRunsThatEndAlone: a walk far longer than
// HangAfter, of runs each far shorter, is no hang, and no watch is left
// running after it.
func TestExploreHangAfterLeavesRunsThatEndAlone(t *testing.T) {
	// A run takes microseconds, and the limit leaves room for a loaded
	// machine to stall one. A walk of 30,000 runs takes a tenth of a
	// second on a fast machine, a third or more on a slow one: the walk
	// grows until it outlasts the limit twice over, or the test would test
	// nothing.
	const limit = 100 * time.Millisecond
	for runs := 30_000; ; runs *= 4 {
		require.LessOrEqual(t, runs, 30_000*64, "walks too quick to outlast the limit")
		start := time.Now()
		opts := sim.ExploreOptions{Options: sim.Options{HangAfter: limit}, Delays: -1, MaxRuns: runs, Workers: 2}
		res, err := sim.Explore(context.Background(), opts, increments(true, "inc-a", "inc-b", "inc-c"))
		require.NoError(t, err)
		if res.Runs < runs {
			t.Fatalf("the walk ran %d schedules of %d: it has fewer than the test needs", res.Runs, runs)
		}
		if time.Since(start) > 2*limit {
			break
		}
	}
	time.Sleep(3 * limit) // past the limit: a watch left running would panic now
}

// TestExploreReturnHangEndsTheWalkWithTheHungSchedule: with ReturnHang, the
// walk of a program that spins in some schedules returns a *HangError with
// those draws instead of panicking; FollowDraws runs that schedule again,
// and it hangs again. The spinning goroutine cannot be stopped, so each
// part runs in a child process, which exits at once.
func TestExploreReturnHangEndsTheWalkWithTheHungSchedule(t *testing.T) {
	switch draws := os.Getenv("SIM_EXPLORE_RETURN_HANG"); draws {
	case "":
	case "walk":
		opts := sim.ExploreOptions{Options: sim.Options{Seed: 7, HangAfter: 100 * time.Millisecond}, Delays: -1, Workers: 2, ReturnHang: true}
		res, err := sim.Explore(context.Background(), opts, hangsOutOfTurn)
		var h *sim.HangError
		if !errors.As(err, &h) {
			fmt.Printf("no hang: %+v, %v\n", res, err)
			os.Exit(1)
		}
		fmt.Printf("complete %v\nerror: %v\nDRAWS %s\n", res.Complete, h, h.Draws)
		os.Exit(3) // with the spinning goroutine
	default:
		d, err := sim.ParseDraws(draws)
		if err != nil {
			t.Fatal(err)
		}
		sim.Run(sim.Options{Seed: 7, HangAfter: 100 * time.Millisecond, Chooser: sim.FollowDraws(d)}, hangsOutOfTurn)
		t.Fatal("the run of a stuck task returned")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExploreReturnHangEndsTheWalkWithTheHungSchedule$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SIM_EXPLORE_RETURN_HANG=walk")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 3, exit.ExitCode(), "the walk returned the hang: %s", out)
	assert.Contains(t, string(out), "complete false\n")
	assert.Contains(t, string(out), "error: hang: seed 7 (strategy random, draws ")
	assert.Contains(t, string(out), "a task runs in github.com/llmdst/llmdst/sim_test.spinForever without reaching a scheduling point")
	_, draws, ok := strings.Cut(string(out), "DRAWS ")
	require.True(t, ok, "%s", out)
	draws, _, _ = strings.Cut(draws, "\n")
	d, err := sim.ParseDraws(draws)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Departures(), "b goes first after one departure: %s", draws)

	again := panicsInAChild(t, "TestExploreReturnHangEndsTheWalkWithTheHungSchedule", "SIM_EXPLORE_RETURN_HANG="+draws)
	assert.Contains(t, string(again), "panic: hang: seed 7 (strategy random, draws "+draws+") had not ended after ")
}
