package sim_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmdst/llmdst/clock"
	"github.com/llmdst/llmdst/internal/golden"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lostUpdate is two tasks incrementing a counter with a read, a yield and a
// write: the classic lost update.
func lostUpdate(rt task.Runtime) error { return increments(false, "inc-a", "inc-b")(rt) }

// increments is a task per name incrementing a counter with a read, a yield
// and a write, under a lock when locked; it fails when an increment was
// lost.
func increments(locked bool, names ...string) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		var mu task.Mutex
		if locked {
			mu = rt.NewMutex("counter")
		}
		counter := 0
		g := task.NewGroup(rt, "incrementers")
		for _, name := range names {
			g.Go(name, func() {
				if locked {
					mu.Lock()
					defer mu.Unlock()
				}
				v := counter
				rt.Yield("between-read-and-write")
				counter = v + 1
			})
		}
		g.Wait()
		if counter != len(names) {
			return fmt.Errorf("lost update: counter is %d after %d increments", counter, len(names))
		}
		return nil
	}
}

func TestLostUpdateIsFoundAndReplays(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(2)} {
		t.Run(st.String(), func(t *testing.T) {
			var failed *sim.Result
			for seed := uint64(0); seed < 100 && failed == nil; seed++ {
				res := sim.Run(sim.Options{Seed: seed, Strategy: st}, lostUpdate)
				if res.Err != nil {
					failed = &res
				}
			}
			require.NotNil(t, failed, "%s found no lost update in 100 seeds", st)
			require.ErrorContains(t, failed.Err, "lost update")

			text := failed.Schedule.String()
			parsed, err := sim.ParseSchedule(text)
			require.NoError(t, err)
			again := sim.Run(sim.Options{Strategy: sim.Replay(parsed)}, lostUpdate)
			require.Error(t, again.Err)
			assert.Equal(t, failed.Err.Error(), again.Err.Error())
			assert.Equal(t, failed.TraceHash, again.TraceHash, "replay must give the same trace hash")
			assert.Equal(t, failed.Steps, again.Steps)
			assert.Equal(t, text, again.Schedule.String())
		})
	}
}

func TestMutexPreventsLostUpdate(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, increments(true, "inc", "inc", "inc"))
		require.NoError(t, res.Err, "seed %d", seed)
	}
}

func lockOrderInversion(rt task.Runtime) error {
	a, b := rt.NewMutex("A"), rt.NewMutex("B")
	g := task.NewGroup(rt, "lockers")
	g.Go("takes-a-then-b", func() {
		a.Lock()
		rt.Yield("holding-a")
		b.Lock()
		b.Unlock()
		a.Unlock()
	})
	g.Go("takes-b-then-a", func() {
		b.Lock()
		rt.Yield("holding-b")
		a.Lock()
		a.Unlock()
		b.Unlock()
	})
	g.Wait()
	return nil
}

func TestLockOrderInversionIsReportedAsDeadlock(t *testing.T) {
	var dl *sim.DeadlockError
	for seed := uint64(0); seed < 100 && dl == nil; seed++ {
		res := sim.Run(sim.Options{Seed: seed}, lockOrderInversion)
		if res.Err != nil {
			require.ErrorAs(t, res.Err, &dl, "seed %d", seed)
		}
	}
	require.NotNil(t, dl, "no deadlock in 100 seeds")
	byName := map[string]sim.BlockedTask{}
	for _, b := range dl.Blocked {
		byName[b.Name] = b
	}
	ab, ba := byName["takes-a-then-b"], byName["takes-b-then-a"]
	assert.Equal(t, "B.lock", ab.Point)
	assert.Equal(t, "takes-b-then-a", ab.Holder)
	assert.Equal(t, "A.lock", ba.Point)
	assert.Equal(t, "takes-a-then-b", ba.Holder)
	assert.Equal(t, "lockers.wait", byName["main"].Point)
	msg := dl.Error()
	for _, want := range []string{`"takes-a-then-b" waits at "B.lock" (held by task`, `"takes-b-then-a" waits at "A.lock"`, `"main" waits at "lockers.wait"`} {
		assert.Contains(t, msg, want)
	}
	goleak.VerifyNone(t)
}

func TestSleepAdvancesVirtualTimeExactly(t *testing.T) {
	var start, end time.Time
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		start = rt.Now()
		for i := 0; i < 1000; i++ {
			rt.Sleep(10 * time.Millisecond)
		}
		end = rt.Now()
		return nil
	})
	require.NoError(t, res.Err)
	assert.Equal(t, 10*time.Second, res.Elapsed)
	assert.Equal(t, sim.Epoch, start)
	assert.Equal(t, 10*time.Second, end.Sub(start))
}

// busy is a program with queues, timers, mutexes and several tasks: enough
// decisions for a hash to mean something.
func busy(rt task.Runtime) error {
	in := task.NewQueue[int](rt, task.QueueName("in"))
	out := task.NewQueue[int](rt, task.QueueName("out"))
	g := task.NewGroup(rt, "workers")
	for w := 0; w < 3; w++ {
		g.Go("worker-"+strconv.Itoa(w), func() {
			for v, ok := in.Get(); ok; v, ok = in.Get() {
				rt.Sleep(time.Duration(v%3) * time.Millisecond)
				out.Put(v * v)
			}
		})
	}
	fired := 0
	rt.AfterFunc(5*time.Millisecond, func() { fired++ })
	for i := 0; i < 20; i++ {
		in.Put(i)
		rt.Yield("producer")
	}
	in.Close()
	g.Wait()
	out.Close()
	sum := 0
	for v, ok := out.Get(); ok; v, ok = out.Get() {
		sum += v
	}
	if sum != 2470 {
		return fmt.Errorf("sum of squares %d, want 2470", sum)
	}
	return nil
}

func TestSameSeedSameTraceHash(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos(), sim.Starve("worker")} {
		want := sim.Run(sim.Options{Seed: 42, Strategy: st}, busy)
		require.NoError(t, want.Err, st.String())
		for _, procs := range []int{1, 8} {
			prev := runtime.GOMAXPROCS(procs)
			for i := 0; i < 100; i++ {
				got := sim.Run(sim.Options{Seed: 42, Strategy: st}, busy)
				if got.TraceHash != want.TraceHash {
					runtime.GOMAXPROCS(prev)
					t.Fatalf("%s GOMAXPROCS=%d run %d: hash %016x, want %016x", st, procs, i, got.TraceHash, want.TraceHash)
				}
			}
			runtime.GOMAXPROCS(prev)
		}
	}
}

// TestTraceHashGolden pins the hash of fixed seeds, so that a machine, a Go
// version or a build flag that changes a run is caught. Regenerate with
// -rewrite after a deliberate change to the simulator.
func TestTraceHashGolden(t *testing.T) {
	var b strings.Builder
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos(), sim.Starve("worker")} {
		for _, seed := range []uint64{1, 42, 1 << 40} {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, busy)
			require.NoError(t, res.Err)
			fmt.Fprintf(&b, "%-14s seed=%-14d steps=%-5d elapsed=%-8v hash=%016x\n", st, seed, res.Steps, res.Elapsed, res.TraceHash)
		}
	}
	golden.Check(t, "hashes.golden", b.String())
}

func TestDeterminismSelfCheck(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 7, Strategy: sim.Chaos(), CheckDeterminism: true}, busy)
	require.NoError(t, res.Err)

	calls := 0 // state that leaks between runs: a nondeterministic program
	res = sim.Run(sim.Options{Seed: 7, CheckDeterminism: true}, func(rt task.Runtime) error {
		calls++
		if calls%2 == 0 {
			rt.Go("only-every-other-run", func() {})
		}
		rt.Yield("a")
		return nil
	})
	var nd *sim.NondeterminismError
	require.ErrorAs(t, res.Err, &nd)
	assert.NotEqual(t, nd.Hashes[0], nd.Hashes[1])
	assert.Contains(t, nd.Error(), "seed 7 is not deterministic")
}

// TestDeterminismSelfCheckComparesWhatTheHashLeavesOut: the situations a
// run reached are not hashed, and a failure need not change the schedule.
// A program that reaches a situation, or fails, on state kept from an
// earlier run makes the same decisions with the same hash each time: the
// check compares the situations and the outcome as well.
func TestDeterminismSelfCheckComparesWhatTheHashLeavesOut(t *testing.T) {
	calls := 0
	reaches := func(rt task.Runtime) error {
		calls++
		rt.Yield("a")
		if calls%2 == 1 {
			task.Reach(rt, "first-call")
		}
		return nil
	}
	res := sim.Run(sim.Options{Seed: 7, CheckDeterminism: true}, reaches)
	var nd *sim.NondeterminismError
	require.ErrorAs(t, res.Err, &nd)
	assert.Equal(t, nd.Hashes[0], nd.Hashes[1], "the schedule and events are the same")
	assert.Equal(t, [2][]string{{"first-call"}, nil}, nd.Reached)
	assert.Contains(t, nd.Error(), "seed 7 is not deterministic: the same schedule and trace hash")
	assert.Contains(t, nd.Error(), "the situations reached differ: [first-call], then none")

	calls = 0
	fails := func(rt task.Runtime) error {
		calls++
		rt.Yield("a")
		if calls%2 == 0 {
			return errors.New("only every other run")
		}
		return nil
	}
	res = sim.Run(sim.Options{Seed: 7, CheckDeterminism: true, NoRecord: true}, fails)
	require.ErrorAs(t, res.Err, &nd)
	assert.Equal(t, nd.Hashes[0], nd.Hashes[1])
	assert.NoError(t, nd.Errs[0])
	assert.EqualError(t, nd.Errs[1], "only every other run")
	assert.Contains(t, nd.Error(), "the first run passed and the second failed with: only every other run")

	// A program that reaches the same situations and fails the same way
	// every run is deterministic, its failure its own.
	same := func(rt task.Runtime) error {
		rt.Yield("a")
		task.Reach(rt, "always")
		return errors.New("always fails")
	}
	res = sim.Run(sim.Options{Seed: 7, CheckDeterminism: true}, same)
	assert.False(t, errors.As(res.Err, &nd), "%v", res.Err)
	assert.EqualError(t, res.Err, "always fails")
	assert.Equal(t, []string{"always"}, res.Reached)
}

// TestDeterminismSelfCheckWithAChooserOfTheCallersWarns: Run cannot draw a
// caller's chooser twice, so it cannot check; it says so rather than pass
// silently.
func TestDeterminismSelfCheckWithAChooserOfTheCallersWarns(t *testing.T) {
	res := sim.Run(sim.Options{Chooser: sim.NewPCGChooser(7, sim.StreamStrategy), CheckDeterminism: true}, busy)
	require.NoError(t, res.Err)
	require.Len(t, res.Warnings, 1)
	assert.Contains(t, res.Warnings[0], "CheckDeterminism did nothing")

	res = sim.Run(sim.Options{Seed: 7, CheckDeterminism: true}, busy)
	assert.Empty(t, res.Warnings)
}

func TestStarveWithholdsTheNamedTaskWhileTheClockMovesOn(t *testing.T) {
	// x is always runnable and nothing else ever sleeps: without starvation
	// virtual time would never move.
	program := func(gaps *[]time.Duration) func(rt task.Runtime) error {
		return func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g")
			g.Go("x", func() {
				last := rt.Now()
				for i := 0; i < 200; i++ {
					rt.Yield("x.work")
					now := rt.Now()
					if d := now.Sub(last); d > 0 {
						*gaps = append(*gaps, d)
					}
					last = now
				}
			})
			g.Wait()
			return nil
		}
	}
	var gaps []time.Duration
	res := sim.Run(sim.Options{Seed: 3}, program(&gaps))
	require.NoError(t, res.Err)
	assert.Zero(t, res.Elapsed, "under Random nothing withholds x, so no time passes")
	assert.Empty(t, gaps)

	for seed := uint64(0); seed < 20; seed++ {
		gaps = gaps[:0]
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Starve("x")}, program(&gaps))
		require.NoError(t, res.Err)
		require.NotEmpty(t, gaps, "seed %d: x was never withheld", seed)
		assert.Positive(t, res.Elapsed)
		for _, g := range gaps {
			// A gap is one window or several back to back; every window is
			// 50µs·2^k, so a gap is a whole number of 50µs.
			assert.Zero(t, g%sim.StarveWindowMin, "seed %d: x was withheld for %v, not a sum of windows", seed, g)
		}
	}
}

// TestStarveOfANameNoTaskHasWarns: a starve prefix that matches no task
// starves nothing. The run does not fail for it, but its result says so,
// naming the tasks there were, directly and through Observe; a prefix that
// matches, and Chaos, which has none, warn of nothing.
func TestStarveOfANameNoTaskHasWarns(t *testing.T) {
	program := func(rt task.Runtime) error {
		g := task.NewGroup(rt, "g")
		for i := 0; i < 3; i++ {
			g.Go("worker", func() { rt.Yield("work") })
		}
		g.Wait()
		return nil
	}
	for _, st := range []sim.Strategy{sim.Starve("wroker"), sim.Observe(sim.Starve("wroker"), func(sim.Choice) {})} {
		res := sim.Run(sim.Options{Seed: 1, Strategy: st}, program)
		require.NoError(t, res.Err)
		assert.Equal(t, []string{`sim: strategy starve:wroker starved nothing: no task of the run has a name starting with "wroker"; the run's tasks were "main", "worker"`}, res.Warnings)
	}
	for _, st := range []sim.Strategy{sim.Starve("work"), sim.Starve("main"), sim.Chaos(), sim.Random()} {
		res := sim.Run(sim.Options{Seed: 1, Strategy: st}, program)
		require.NoError(t, res.Err)
		assert.Empty(t, res.Warnings, st)
	}
}

// TestStarveWindowCutAtItsDecisionCapWarns: a window is a length of
// virtual time, and where the others run without the clock moving it ends
// at its cap of decisions instead. The run does not fail for it, but its
// result says so: under a model that takes no time a step a seed runs
// thousands of times its decisions. When the clock moves, nothing is said.
func TestStarveWindowCutAtItsDecisionCapWarns(t *testing.T) {
	program := func(tick time.Duration) func(rt task.Runtime) error {
		return func(rt task.Runtime) error {
			rt.Go("victim", func() {
				for range 10 {
					rt.Yield("victim")
				}
			})
			for range 3 * sim.StarveWindowDecisionsMax {
				if tick > 0 {
					rt.Sleep(tick)
				} else {
					rt.Yield("busy")
				}
			}
			return nil
		}
	}
	res := sim.Run(sim.Options{Seed: 1, Strategy: sim.Starve("victim")}, program(0))
	require.NoError(t, res.Err)
	require.Len(t, res.Warnings, 1)
	assert.Regexp(t, `^sim: strategy starve:victim: [1-9][0-9]* of its [1-9][0-9]* starvation windows ended at their cap of 10000 decisions before the clock reached their end`, res.Warnings[0])

	res = sim.Run(sim.Options{Seed: 1, Strategy: sim.Starve("victim")}, program(time.Microsecond))
	require.NoError(t, res.Err)
	assert.Empty(t, res.Warnings, "the clock moves, and every window ends at its length")
}

func TestChaosStarvesRandomVictimsIncludingMain(t *testing.T) {
	starved := map[string]int{}
	for seed := uint64(0); seed < 30; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g")
			work := func(name string) {
				last := rt.Now()
				for i := 0; i < 100; i++ {
					rt.Yield(name + ".work")
					if rt.Now().Sub(last) > 0 {
						starved[name]++
					}
					last = rt.Now()
				}
			}
			g.Go("w1", func() { work("w1") })
			g.Go("w2", func() { work("w2") })
			work("main")
			g.Wait()
			return nil
		})
		require.NoError(t, res.Err)
	}
	for _, name := range []string{"main", "w1", "w2"} {
		assert.Positive(t, starved[name], "chaos never starved %s in 30 seeds", name)
	}
}

func TestPCTIsNotHeldForeverByAYieldLoop(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.PCT(3), StepsMax: 10_000}, spinUntilSet)
		require.NoError(t, res.Err, "seed %d", seed)
		assert.Less(t, res.Steps, int64(100), "seed %d", seed)
	}
}

func TestStepLimitIsReportedApartFromFailures(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1, StepsMax: 500}, func(rt task.Runtime) error {
		for {
			rt.Yield("forever")
		}
	})
	var sl *sim.StepLimitError
	require.ErrorAs(t, res.Err, &sl)
	assert.True(t, res.StepLimited())
	assert.Equal(t, int64(500), res.Steps)
	assert.Contains(t, res.Err.Error(), "step limit of 500")

	res = sim.Run(sim.Options{Seed: 1}, lostUpdateAlwaysFails)
	require.Error(t, res.Err)
	assert.False(t, res.StepLimited(), "a property failure is not a step-limit hit")
	goleak.VerifyNone(t)
}

func lostUpdateAlwaysFails(rt task.Runtime) error { return errors.New("property violated") }

func TestTaskPanicIsAnErrorAndNoGoroutineOutlivesRun(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		q := task.NewQueue[int](rt, task.QueueName("never"))
		rt.Go("waiter", func() { q.Get() }) // parked when the run ends
		rt.Go("bomb", func() { panic("boom") })
		rt.Sleep(time.Second)
		return nil
	})
	var pe *sim.PanicError
	require.ErrorAs(t, res.Err, &pe)
	assert.Equal(t, "bomb", pe.Task)
	assert.Equal(t, "boom", pe.Value)
	assert.Contains(t, string(pe.Stack), "sim_test")
	goleak.VerifyNone(t)
}

func TestRepanicRaisesTheSameValueInTheCaller(t *testing.T) {
	type marker struct{ n int }
	defer goleak.VerifyNone(t)
	got := func() (r any) {
		defer func() { r = recover() }()
		sim.Run(sim.Options{Seed: 1, Repanic: true}, func(rt task.Runtime) error {
			rt.Go("parked", func() { rt.Sleep(time.Hour) })
			rt.Go("bomb", func() { panic(marker{7}) })
			rt.Sleep(time.Minute)
			return nil
		})
		return nil
	}()
	assert.Equal(t, marker{7}, got)
}

func TestGoexitInATaskDoesNotEndTheCaller(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		rt.Go("quitter", func() {
			defer rt.Yield("deferred-in-quitter") // deferred calls may call in
			runtime.Goexit()
		})
		rt.Go("parked", func() { rt.Sleep(time.Hour) })
		rt.Sleep(time.Minute)
		return nil
	})
	var pe *sim.PanicError
	require.ErrorAs(t, res.Err, &pe)
	assert.True(t, pe.Goexit)
	assert.Equal(t, "quitter", pe.Task)
	goleak.VerifyNone(t)
}

func TestUnwindRunsDeferredCallsOfParkedTasks(t *testing.T) {
	unwound := 0
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		mu := rt.NewMutex("m")
		cond := rt.NewCond(mu)
		for i := 0; i < 3; i++ {
			rt.Go("waiter", func() {
				mu.Lock()
				defer mu.Unlock()
				defer func() {
					unwound++
					rt.Go("started-while-unwinding", func() { unwound += 100 })
				}()
				cond.Wait("forever")
			})
		}
		rt.Sleep(time.Millisecond)
		return nil
	})
	require.NoError(t, res.Err)
	assert.Equal(t, 3, unwound, "every parked task unwound; tasks started while unwinding never run")
	goleak.VerifyNone(t)
}

// TestATaskThatSwallowsTheUnwindIsStillStopped: a worker that recovers the
// panic of every job also recovers the panic that stops it when the run
// ends. It used to come back to wait again and be stopped again for ever, so
// Run never returned; it is now ended once it comes back.
func TestATaskThatSwallowsTheUnwindIsStillStopped(t *testing.T) {
	for name, wait := range map[string]func(rt task.Runtime, q *task.Queue[int]){
		"blocking": func(_ task.Runtime, q *task.Queue[int]) { q.Get() },
		"polling": func(rt task.Runtime, q *task.Queue[int]) {
			if _, ok := q.TryGet(); !ok {
				rt.Yield("poll")
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			rounds, recovered, cleanups := 0, 0, 0
			res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
				q := task.NewQueue[int](rt)
				started := false
				rt.Go("worker", func() {
					started = true
					defer func() { cleanups++ }()
					for ; rounds < 1000; rounds++ { // bounded, so that the test ends either way
						func() {
							defer func() {
								if recover() != nil {
									recovered++
								}
							}()
							wait(rt, q)
						}()
					}
				})
				for !started {
					rt.Yield("wait-for-worker")
				}
				return nil // while the worker waits
			})
			require.NoError(t, res.Err)
			assert.Equal(t, 1, recovered, "the worker swallowed the stop once, and was ended when it came back")
			assert.Less(t, rounds, 1000)
			assert.Equal(t, 1, cleanups, "the worker's deferred calls ran")
			goleak.VerifyNone(t)
		})
	}
}

func TestDebugCatchesAForeignGoroutine(t *testing.T) {
	caught := make(chan any, 1)
	res := sim.Run(sim.Options{Seed: 1, Debug: true}, func(rt task.Runtime) error {
		done := make(chan struct{})
		go func() { // deliberately foreign
			defer close(done)
			defer func() { caught <- recover() }()
			rt.Yield("from-a-foreign-goroutine")
		}()
		<-done
		return nil
	})
	require.NoError(t, res.Err)
	var fg *sim.ForeignGoroutineError
	got := <-caught
	require.IsType(t, fg, got)
	assert.Contains(t, got.(error).Error(), `while task "main" holds the baton`)
}

// TestDebugCatchesAForeignGoroutineAtCallsWithoutASchedulingPoint: Now, a
// timer's Stop, a context watch's stop, the trace notes and making a mutex
// or a condition (from the run's slabs) change or read the run's state
// too; from a goroutine of its own they race with the tasks.
func TestDebugCatchesAForeignGoroutineAtCallsWithoutASchedulingPoint(t *testing.T) {
	calls := map[string]func(rt task.Runtime, tm clock.Timer, stop func() bool){
		"Now":                 func(rt task.Runtime, _ clock.Timer, _ func() bool) { rt.Now() },
		"Timer.Stop":          func(_ task.Runtime, tm clock.Timer, _ func() bool) { tm.Stop() },
		"AfterContext's stop": func(_ task.Runtime, _ clock.Timer, stop func() bool) { stop() },
		"NoteHash":            func(rt task.Runtime, _ clock.Timer, _ func() bool) { sim.NoteHash(rt, "note", 1) },
		"NewMutex":            func(rt task.Runtime, _ clock.Timer, _ func() bool) { rt.NewMutex("m") },
		"NewCond":             func(rt task.Runtime, _ clock.Timer, _ func() bool) { rt.NewCond(nil) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			caught := make(chan any, 1)
			res := sim.Run(sim.Options{Seed: 1, Debug: true}, func(rt task.Runtime) error {
				tm := rt.AfterFunc(time.Second, func() {})
				stop, _ := task.AfterContext(rt, t.Context(), func() {})
				done := make(chan struct{})
				go func() { // deliberately foreign
					defer close(done)
					defer func() { caught <- recover() }()
					call(rt, tm, stop)
				}()
				<-done
				tm.Stop()
				stop()
				rt.Now() // the running task may
				return nil
			})
			require.NoError(t, res.Err)
			got := <-caught
			require.IsType(t, &sim.ForeignGoroutineError{}, got)
			assert.Contains(t, got.(error).Error(), `while task "main" holds the baton`)
		})
	}
}

func TestTimersFireInDeadlineThenCreationOrderAsTasks(t *testing.T) {
	var order []string
	res := sim.Run(sim.Options{Seed: 5}, func(rt task.Runtime) error {
		mu := rt.NewMutex("order")
		add := func(s string) func() {
			return func() { mu.Lock(); order = append(order, s); mu.Unlock() }
		}
		rt.AfterFunc(2*time.Millisecond, add("c"))
		rt.AfterFunc(time.Millisecond, add("a"))
		rt.AfterFunc(time.Millisecond, add("b"))
		stopped := rt.AfterFunc(time.Millisecond, add("stopped"))
		if !stopped.Stop() {
			return errors.New("Stop of a pending timer reported false")
		}
		if stopped.Stop() {
			return errors.New("second Stop reported true")
		}
		rt.Sleep(10 * time.Millisecond)
		return nil
	})
	require.NoError(t, res.Err)
	assert.Equal(t, []string{"a", "b", "c"}, order)
	assert.Equal(t, []string{"main", "timer", "timer", "timer"}, res.Schedule.Tasks)
}

// TestTimerAndContextTasksAreStartedByTheSimulator: the trace says the
// simulator started the task of a timer or of a done context, not whichever
// task was at the scheduling point then, which may have exited already.
func TestTimerAndContextTasksAreStartedByTheSimulator(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Trace: true}, func(rt task.Runtime) error {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			task.AfterContext(rt, ctx, func() {})
			rt.Go("short-lived", func() {
				rt.AfterFunc(time.Millisecond, cancel)
			})
			rt.Sleep(2 * time.Millisecond)
			return nil
		})
		require.NoError(t, res.Err, "seed %d", seed)
		exited := map[int]bool{}
		started := map[string]int{}
		for _, e := range res.Trace.Events {
			if e.Task >= 0 && e.Kind != sim.EvSwitch { // "at exit → next runs" is its last word
				assert.False(t, exited[e.Task], "seed %d: %s acts after it exited: %s", seed, res.Trace.Tasks[e.Task], res.Trace.Describe(e))
			}
			switch e.Kind {
			case sim.EvExit:
				exited[e.Task] = true
			case sim.EvSpawn:
				if e.Point == "timer" || e.Point == "context" {
					started[e.Point]++
					assert.Equal(t, -1, e.Task, "seed %d: %s", seed, res.Trace.Describe(e))
				}
			}
		}
		assert.Equal(t, map[string]int{"timer": 1, "context": 1}, started, "seed %d", seed)
	}
}

func TestQueueUnderSimIsFIFOAndCloseWakesGetters(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, func(rt task.Runtime) error {
			q := task.NewQueue[int](rt, task.QueueName("q"))
			g := task.NewGroup(rt, "g")
			var got []int
			g.Go("consumer", func() {
				for v, ok := q.Get(); ok; v, ok = q.Get() {
					got = append(got, v)
				}
			})
			g.Go("idle-getter", func() {
				rt.Sleep(time.Millisecond)
				q.Get()
			})
			for i := 0; i < 50; i++ {
				q.Put(i)
			}
			q.Close()
			g.Wait()
			if q.Put(99) {
				return errors.New("Put after Close was accepted")
			}
			for i, v := range got {
				if v <= i-1 || (i > 0 && v <= got[i-1]) {
					return fmt.Errorf("out of order: %v", got)
				}
			}
			return nil
		})
		require.NoError(t, res.Err, "seed %d", seed)
	}
}

// raiser returns where a re-raised panic came from: the function of the
// frame that called panic.
func raiser(f func()) (fn string) {
	defer func() {
		recover()
		pcs := make([]uintptr, 16)
		n := runtime.Callers(3, pcs) // skip Callers, this func, gopanic
		frames := runtime.CallersFrames(pcs[:n])
		for {
			fr, more := frames.Next()
			if !strings.HasPrefix(fr.Function, "runtime.") {
				fn = fmt.Sprintf("%s:%d", fr.Function, fr.Line)
				return
			}
			if !more {
				return
			}
		}
	}()
	f()
	return ""
}

// TestRepanicKeepsDifferentPanicsApart: rapid tells failures apart by the
// traceback of the panic it recovers, so panics that began in different
// places must be raised again from different places, and the same panic
// from the same place.
func TestRepanicKeepsDifferentPanicsApart(t *testing.T) {
	// Where a panic began picks one of a fixed set of re-raise sites, so two
	// given panics share one by chance (1 in len(repanicSites)); six of
	// them all sharing one would take a chance of about 1 in 30 million,
	// whatever lines this file's edits move them to.
	panics := []func(){
		func() { panic("from here") },
		func() { panic(fmt.Errorf("from there")) },
		func() { panic(1) },
		func() { panic(2.5) },
		func() { panic(struct{}{}) },
		func() { panic([]int{3}) },
	}
	run := func(which int) func() {
		return func() {
			sim.Run(sim.Options{Repanic: true}, func(rt task.Runtime) error {
				rt.Go("t", panics[which])
				rt.Sleep(time.Second)
				return nil
			})
		}
	}
	sites := map[string]bool{}
	for i := range panics {
		a1, a2 := raiser(run(i)), raiser(run(i))
		require.NotEmpty(t, a1)
		assert.Equal(t, a1, a2, "panic %d: the same panic is raised again from the same site", i)
		sites[a1] = true
	}
	assert.Greater(t, len(sites), 1, "different panics are raised again from different sites")
	goleak.VerifyNone(t)
}

// TestZeroDelayTimerFiresAtOnce: an AfterFunc due now runs at the next
// decision, even while the strategy withholds every task, and the schedule
// such a run records parses and replays to the same run.
func TestZeroDelayTimerFiresAtOnce(t *testing.T) {
	program := func(rt task.Runtime) error {
		fired := false
		rt.AfterFunc(0, func() { fired = true })
		for i := 0; i < 50 && !fired; i++ {
			rt.Yield("spin")
		}
		if !fired {
			return errors.New("a timer due now did not run while main kept yielding")
		}
		return nil
	}
	for seed := uint64(1); seed <= 30; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Starve("main")}, program)
		require.NoError(t, res.Err, "seed %d", seed)
		text := res.Schedule.String()
		sch, err := sim.ParseSchedule(text)
		require.NoError(t, err, "seed %d: the recorded schedule does not parse:\n%s", seed, text)
		again := sim.Run(sim.Options{Strategy: sim.Replay(sch)}, program)
		require.NoError(t, again.Err, "seed %d", seed)
		assert.Equal(t, res.TraceHash, again.TraceHash, "seed %d", seed)
	}
}

// TestTimersPastTheEndOfTimeNeverFire: once virtual time has passed, a
// deadline of now+math.MaxInt64 must not wrap into the past. Such a sleep
// never returns and such a callback never runs, while the rest of the run
// goes on; a timer past the end of time can still be stopped.
func TestTimersPastTheEndOfTimeNeverFire(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		woke, fired := false, false
		var stopped bool
		res := sim.Run(sim.Options{Seed: seed}, func(rt task.Runtime) error {
			rt.Sleep(time.Second)
			rt.Go("sleeper", func() {
				rt.Sleep(math.MaxInt64)
				woke = true
			})
			tm := rt.AfterFunc(math.MaxInt64, func() { fired = true })
			rt.Sleep(time.Hour)
			stopped = tm.Stop()
			return nil
		})
		require.NoError(t, res.Err, "seed %d", seed)
		assert.False(t, woke, "seed %d: Sleep(math.MaxInt64) returned", seed)
		assert.False(t, fired, "seed %d: AfterFunc(math.MaxInt64) fired", seed)
		assert.True(t, stopped, "seed %d: the pending timer was stopped", seed)
		assert.Equal(t, time.Second+time.Hour, res.Elapsed, "seed %d", seed)
	}
}

// TestASleepPastTheEndOfTimeIsADeadlock: when every task waits and the only
// timer is past the end of virtual time, nothing can ever happen: the run
// is a deadlock at the time it got stuck, not a jump of the clock to the
// end of time.
func TestASleepPastTheEndOfTimeIsADeadlock(t *testing.T) {
	for _, first := range []time.Duration{0, time.Second} {
		res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
			rt.Sleep(first)
			rt.Sleep(math.MaxInt64)
			return errors.New("Sleep(math.MaxInt64) returned")
		})
		var dl *sim.DeadlockError
		require.ErrorAs(t, res.Err, &dl, "after %v", first)
		assert.Equal(t, first, dl.At)
		require.Len(t, dl.Blocked, 1)
		assert.Equal(t, "sleep", dl.Blocked[0].Point)
		assert.Equal(t, first, res.Elapsed)
		assert.Equal(t, 1, dl.NeverTimers)
		assert.Contains(t, dl.Error(), "none runnable, no timer pending but 1 past the end of virtual time, which never fire")
	}
	// A deadlock with no such timer says only that none is pending.
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		task.NewQueue[int](rt).Get()
		return nil
	})
	var dl *sim.DeadlockError
	require.ErrorAs(t, res.Err, &dl)
	assert.Zero(t, dl.NeverTimers)
	assert.Contains(t, dl.Error(), "none runnable, no timer pending:")
}

// TestAfterContextStopOfAContextNeverDone: context.Background() is never
// done, so f can never run; stop reports on both runtimes that the first
// call prevented it, as context.AfterFunc's stop does, and that a second
// did nothing.
func TestAfterContextStopOfAContextNeverDone(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		stop, ok := task.AfterContext(rt, context.Background(), func() { t.Error("f ran for a context that is never done") })
		require.True(t, ok)
		assert.True(t, stop(), "the first stop prevents f")
		assert.False(t, stop(), "a second stop prevents nothing more")
	})
}

// TestADeadlockWaitingForAWallClockDeadlineSaysSo: a context from
// context.WithTimeout is due on the wall clock, which the simulator never
// waits for. A task waiting for it is stuck at once, and the deadlock, which
// would otherwise claim that nothing at all is pending, points at it.
func TestADeadlockWaitingForAWallClockDeadlineSaysSo(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		mu := rt.NewMutex("m")
		c := rt.NewCond(mu)
		done := false
		task.AfterContext(rt, ctx, func() { mu.Lock(); done = true; c.Broadcast(); mu.Unlock() })
		task.AfterContext(rt, context.Background(), func() {}) // never done, no deadline
		mu.Lock()
		for !done {
			c.Wait("wait-for-timeout")
		}
		mu.Unlock()
		return nil
	})
	var de *sim.DeadlockError
	require.ErrorAs(t, res.Err, &de)
	assert.Equal(t, 1, de.WallDeadlines)
	assert.Contains(t, de.Error(), "1 watched context(s) have a deadline on the wall clock")
}

// TestADeadlockDoesNotCountVirtualDeadlinesAsWallOnes: a context from
// task.WithTimeout is due on the virtual clock. One that can never be due
// (past the end of virtual time), or a context derived from it, is not
// reported as waiting for the wall clock; a wall-clock one beside them is.
func TestADeadlockDoesNotCountVirtualDeadlinesAsWallOnes(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		ctx, cancel := task.WithTimeout(rt, context.Background(), math.MaxInt64)
		defer cancel()
		child, ccancel := context.WithCancel(ctx)
		defer ccancel()
		wall, wcancel := context.WithTimeout(context.Background(), time.Hour)
		defer wcancel()
		mu := rt.NewMutex("m")
		c := rt.NewCond(mu)
		for _, x := range []context.Context{ctx, child, wall} {
			task.AfterContext(rt, x, func() {})
		}
		mu.Lock()
		c.Wait("forever")
		mu.Unlock()
		return nil
	})
	var de *sim.DeadlockError
	require.ErrorAs(t, res.Err, &de)
	assert.Equal(t, 1, de.WallDeadlines)
	assert.Contains(t, de.Error(), "use task.WithTimeout(rt, ctx, d)")
}

// exhausted is a chooser that has no answer left, as rapid's ends a draw.
type exhausted struct{}

func (exhausted) Intn(int) int { panic("no draws left") }

// TestAChooserThatFailsBeforeTheRunDoesNotRunMain: PCT draws its change
// points as the run starts. When the chooser fails there, the run is over
// before its first decision, and main must not run with every scheduling
// point a no-op (Sleep returning at once, Lock never waiting), where its
// checks would report failures of a run that never happened.
func TestAChooserThatFailsBeforeTheRunDoesNotRunMain(t *testing.T) {
	ran := false
	res := sim.Run(sim.Options{Chooser: exhausted{}, Strategy: sim.PCT(3)}, func(rt task.Runtime) error {
		ran = true
		return nil
	})
	var pe *sim.PanicError
	require.ErrorAs(t, res.Err, &pe)
	assert.Equal(t, "no draws left", pe.Value)
	assert.False(t, ran, "main ran after the run had failed")
	assert.Zero(t, res.Steps)
	goleak.VerifyNone(t)
}

// TestDeterminismSelfCheckWithoutRecordingDoesNotClaimTheDecisionsAgree:
// a sweep checks determinism with recording off. Step 0 says the two runs
// made the same decisions, which cannot be known without a record: the
// error must say that the decisions were not recorded instead.
func TestDeterminismSelfCheckWithoutRecordingDoesNotClaimTheDecisionsAgree(t *testing.T) {
	calls := 0
	program := func(rt task.Runtime) error {
		calls++
		g := task.NewGroup(rt, "g")
		if calls%2 == 0 {
			g.Go("only-every-other-run", func() {})
		}
		g.Wait()
		return nil
	}
	res := sim.Run(sim.Options{Seed: 7, CheckDeterminism: true}, program)
	var nd *sim.NondeterminismError
	require.ErrorAs(t, res.Err, &nd)
	require.Positive(t, nd.Step, "recorded runs name the first decision that differed")

	res = sim.Run(sim.Options{Seed: 7, CheckDeterminism: true, NoRecord: true, NoHash: true}, program)
	require.ErrorAs(t, res.Err, &nd)
	assert.Equal(t, int64(-1), nd.Step)
	assert.NotContains(t, nd.Error(), "at step 0")
	assert.Contains(t, nd.Error(), "decisions were not recorded")
}
