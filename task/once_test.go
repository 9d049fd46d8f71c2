package task_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

func TestOnceRunsItsFunctionOnce(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		o := task.NewOnce(rt, "init")
		calls := 0
		for range 3 {
			o.Do(func() { calls++ })
		}
		assert.Equal(t, 1, calls)
		o.Do(func() { t.Error("a second function ran") })
	})
}

func TestOncePanicCountsAsDone(t *testing.T) {
	simThenReal(t, func(t *testing.T, rt task.Runtime) {
		o := task.NewOnce(rt, "init")
		assert.PanicsWithValue(t, "boom", func() { o.Do(func() { panic("boom") }) })
		o.Do(func() { t.Error("Do ran a function after the first one panicked") })
	})
}

// simThenReal runs body as rttest.Both does, under the simulator first and
// on the real runtime only if every simulated run passed: an
// implementation that leaves a task waiting for ever fails as a deadlock
// the simulator reports, rather than hanging the real run.
func simThenReal(t *testing.T, body func(t *testing.T, rt task.Runtime)) {
	t.Helper()
	rttest.Sim(t, body)
	if t.Failed() {
		return
	}
	t.Run("real", func(t *testing.T) { body(t, task.Real()) })
}

// onceCallers has callers Do one function that waits on a queue before it
// sets its result, so that the others come while it runs. It checks that
// the function ran once and that every caller saw its result when Do
// returned.
func onceCallers(rt task.Runtime) error {
	const callers = 4
	o := task.NewOnce(rt, "init")
	release := task.NewQueue[int](rt, task.QueueName("release"))
	tally := rt.NewMutex("tally")
	calls, value := 0, 0
	var bad error
	g := task.NewGroup(rt, "callers")
	for range callers {
		g.Go("caller", func() {
			o.Do(func() {
				tally.Lock()
				calls++
				tally.Unlock()
				v, _ := release.Get() // a scheduling point inside f
				value = v
			})
			tally.Lock()
			if value != 42 && bad == nil {
				bad = fmt.Errorf("a Do returned before the function set the value: %d", value)
			}
			tally.Unlock()
		})
	}
	rt.Sleep(time.Millisecond)
	release.Put(42)
	g.Wait()
	if bad != nil {
		return bad
	}
	if calls != 1 {
		return fmt.Errorf("the function ran %d times", calls)
	}
	return nil
}

// TestOnceCallersWaitForTheFunction: under many schedules the function
// runs once, and no Do returns before it has.
func TestOnceCallersWaitForTheFunction(t *testing.T) {
	for _, st := range sweep {
		for seed := uint64(1); seed <= 60; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, onceCallers)
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)
		}
	}
	require.NoError(t, onceCallers(task.Real()), "real runtime")
}

// oncePanics has callers Do a function that panics once the others have
// come; the one that ran it recovers. It reports how many callers waited
// for it and saw no panic.
func oncePanics(rt task.Runtime) (int, error) {
	const callers = 4
	o := task.NewOnce(rt, "init")
	arrived := task.NewSemaphore(rt, "arrived", callers)
	tally := rt.NewMutex("tally")
	calls, panicked, returned := 0, 0, 0
	g := task.NewGroup(rt, "callers")
	for range callers {
		g.Go("caller", func() {
			defer func() {
				v := recover()
				if v != nil && task.Stopping(v) {
					panic(v)
				}
				tally.Lock()
				if v != nil {
					panicked++
				} else {
					returned++
				}
				tally.Unlock()
			}()
			arrived.Acquire()
			o.Do(func() {
				tally.Lock()
				calls++
				tally.Unlock()
				// Give the others, which have all arrived, the time to
				// come to wait.
				for arrived.Held() < callers {
					rt.Sleep(time.Microsecond)
				}
				rt.Sleep(time.Millisecond)
				panic("init failed")
			})
		})
	}
	g.Wait()
	if calls != 1 || panicked != 1 {
		return returned, fmt.Errorf("the function ran %d times and %d Do panicked, want 1 and 1", calls, panicked)
	}
	return returned, nil
}

// TestOncePanicWakesTheWaitingCallers: a function that panics leaves Do
// done, and the callers waiting for it return rather than wait for ever
// (the simulator would report them as a deadlock at "init.wait").
func TestOncePanicWakesTheWaitingCallers(t *testing.T) {
	for _, st := range sweep {
		for seed := uint64(1); seed <= 60; seed++ {
			var returned int
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) (err error) {
				returned, err = oncePanics(rt)
				return err
			})
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)
			require.Equal(t, 3, returned, "sim %s seed %d", st, seed)
		}
	}
	returned, err := oncePanics(task.Real())
	require.NoError(t, err, "real runtime")
	require.Equal(t, 3, returned, "real runtime")
}

// TestOnceDoInsideItsFunctionIsADeadlock: a Do that the function itself
// calls waits for the function for ever, as with sync.Once; the simulator
// reports it at "init.wait".
func TestOnceDoInsideItsFunctionIsADeadlock(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1, Strategy: sim.Random()}, func(rt task.Runtime) error {
		o := task.NewOnce(rt, "init")
		o.Do(func() { o.Do(func() {}) })
		return nil
	})
	var dl *sim.DeadlockError
	require.True(t, errors.As(res.Err, &dl), "got %v, want a deadlock", res.Err)
	require.Len(t, dl.Blocked, 1)
	assert.Equal(t, "init.wait", dl.Blocked[0].Point)
}

func TestOnceSameSeedSameTrace(t *testing.T) {
	for _, st := range sweep {
		for seed := uint64(1); seed <= 5; seed++ {
			run := func() sim.Result { return sim.Run(sim.Options{Seed: seed, Strategy: st}, onceCallers) }
			a, b := run(), run()
			require.NoError(t, a.Err)
			assert.Equal(t, a.TraceHash, b.TraceHash, "sim %s seed %d", st, seed)
			assert.Equal(t, a.Steps, b.Steps, "sim %s seed %d", st, seed)
		}
	}
}

// onceInterrupted has a function that waits on a queue nobody fills while
// other callers wait for it, and main returns (end) or waits for them
// (deadlock): the simulator unwinds the function's task, whose Do marks
// the function done on the way out, and the waiting callers.
func onceInterrupted(end bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		o := task.NewOnce(rt, "init")
		never := task.NewQueue[int](rt, task.QueueName("never"))
		g := task.NewGroup(rt, "callers")
		for range 3 {
			g.Go("caller", func() {
				// A cleanup that calls Do again as its task is unwound
				// neither runs a function nor waits.
				defer o.Do(func() { panic("a cleanup's Do ran a function") })
				o.Do(func() { never.Get() })
			})
		}
		if end {
			rt.Sleep(time.Millisecond)
			return nil
		}
		g.Wait()
		return nil
	}
}

// TestOnceInterruptedByTheRunsEnd: a function parked when the run ends is
// no failure: the run ends as it would without the Once, with no panic
// reported and nothing left waiting.
func TestOnceInterruptedByTheRunsEnd(t *testing.T) {
	for _, st := range sweep {
		for seed := uint64(1); seed <= 20; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, onceInterrupted(true))
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)

			res = sim.Run(sim.Options{Seed: seed, Strategy: st}, onceInterrupted(false))
			var dl *sim.DeadlockError
			require.True(t, errors.As(res.Err, &dl), "sim %s seed %d: %v, want a deadlock", st, seed, res.Err)
			assert.ElementsMatch(t, []string{"main at callers.wait", "caller at never.get", "caller at init.wait", "caller at init.wait"},
				blockedAt(dl), "sim %s seed %d", st, seed)
		}
	}
}
