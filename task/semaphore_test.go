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

func TestSemaphoreTryAcquireAndRelease(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		s := task.NewSemaphore(rt, "slots", 2)
		require.True(t, s.TryAcquire())
		s.Acquire()
		assert.False(t, s.TryAcquire(), "TryAcquire with every permit held")
		assert.Equal(t, 2, s.Held())
		s.Release()
		assert.Equal(t, 1, s.Held())
		require.True(t, s.TryAcquire(), "TryAcquire after a Release")
		s.Release()
		s.Release()
		assert.Equal(t, 0, s.Held())
		assert.PanicsWithValue(t, `task: Release of semaphore "slots" without an Acquire: no permit is held`, s.Release)
		require.True(t, s.TryAcquire(), "the semaphore works after a refused Release")
		s.Release()
	})
}

// TestSemaphoreAcquireWaitsForRelease: an Acquire with every permit held
// does not return before a Release, and then it does.
func TestSemaphoreAcquireWaitsForRelease(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		s := task.NewSemaphore(rt, "slots", 1)
		s.Acquire()
		acquired := task.NewQueue[bool](rt, task.QueueName("acquired"))
		g := task.NewGroup(rt, "g")
		g.Go("waiter", func() {
			s.Acquire()
			acquired.Put(true)
		})
		rt.Sleep(time.Millisecond) // give the waiter the chance to be wrong
		_, early := acquired.TryGet()
		require.False(t, early, "Acquire returned while the only permit was held")
		s.Release()
		_, ok := acquired.Get()
		require.True(t, ok)
		assert.Equal(t, 1, s.Held())
		s.Release()
		g.Wait()
	})
}

func TestSemaphoreRejectsANonPositiveCount(t *testing.T) {
	assert.PanicsWithValue(t, `task: NewSemaphore("slots", 0): n must be ≥ 1`,
		func() { task.NewSemaphore(task.Real(), "slots", 0) })
}

// TestSemaphoreBoundsConcurrency is the property of a semaphore under many
// schedules: never more than n tasks between Acquire and Release, and every
// task gets through.
func TestSemaphoreBoundsConcurrency(t *testing.T) {
	const (
		permits = 2
		workers = 6
		rounds  = 3
	)
	program := func(rt task.Runtime) error {
		s := task.NewSemaphore(rt, "slots", permits)
		mu := rt.NewMutex("tally")
		inside, most, done := 0, 0, 0
		g := task.NewGroup(rt, "workers")
		for w := range workers {
			g.Go("worker", func() {
				for r := range rounds {
					if (w+r)%2 == 0 || !s.TryAcquire() {
						s.Acquire()
					}
					mu.Lock()
					inside++
					most = max(most, inside)
					mu.Unlock()
					if r%2 == 0 {
						rt.Yield("worker.inside")
					} else {
						rt.Sleep(time.Duration(w) * time.Microsecond)
					}
					mu.Lock()
					inside--
					done++
					mu.Unlock()
					s.Release()
				}
			})
		}
		g.Wait()
		if most > permits {
			return fmt.Errorf("%d tasks held a permit at once, %d permits", most, permits)
		}
		if done != workers*rounds || s.Held() != 0 {
			return fmt.Errorf("%d of %d rounds done, %d permits still held", done, workers*rounds, s.Held())
		}
		return nil
	}
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
		for seed := uint64(1); seed <= 50; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, program)
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)
		}
	}
	require.NoError(t, program(task.Real()), "real runtime")
}

// leakedPermit is a planted bug: a worker whose job fails returns without
// releasing its permit. Two of three jobs fail, so when the one that
// succeeds is not the first to take a permit, the last worker waits
// forever for a permit that is gone.
func leakedPermit(rt task.Runtime) error {
	s := task.NewSemaphore(rt, "slots", 2)
	g := task.NewGroup(rt, "workers")
	for i := range 3 {
		g.Go("worker", func() {
			s.Acquire()
			if i != 1 {
				return // the bug: the error path forgets s.Release()
			}
			s.Release()
		})
	}
	g.Wait()
	return nil
}

// TestSemaphoreLeakedPermitIsADeadlock: the simulator finds the schedules
// in which a leaked permit starves a worker, and reports each as a
// deadlock naming the ".acquire" point.
func TestSemaphoreLeakedPermitIsADeadlock(t *testing.T) {
	found := 0
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
		for seed := uint64(1); seed <= 30; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, leakedPermit)
			if res.Err == nil {
				continue
			}
			var dl *sim.DeadlockError
			require.True(t, errors.As(res.Err, &dl), "sim %s seed %d: %v, want a deadlock", st, seed, res.Err)
			assert.ElementsMatch(t, []string{"main at workers.wait", "worker at slots.acquire"}, blockedAt(dl), "sim %s seed %d", st, seed)
			found++
		}
	}
	assert.Positive(t, found, "no schedule in 90 starved a worker")
}

// blockedAt lists a deadlock's blocked tasks as "NAME at POINT".
func blockedAt(dl *sim.DeadlockError) []string {
	var points []string
	for _, b := range dl.Blocked {
		points = append(points, b.Name+" at "+b.Point)
	}
	return points
}
