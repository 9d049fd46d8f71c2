package task_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// sweep is the strategies the RWMutex's and Once's properties are checked
// under, each with seeds 1..n.
var sweep = []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()}

func TestRWMutexTryLocksAndMisuse(t *testing.T) {
	simThenReal(t, func(t *testing.T, rt task.Runtime) {
		rw := task.NewRWMutex(rt, "cache")
		rw.RLock()
		require.True(t, rw.TryRLock(), "readers share the lock")
		assert.False(t, rw.TryLock(), "TryLock with readers inside")
		rw.RUnlock()
		assert.False(t, rw.TryLock(), "TryLock with a reader inside")
		rw.RUnlock()
		assert.PanicsWithValue(t, `task: RUnlock of RWMutex "cache" without an RLock: it is not locked for reading`, rw.RUnlock)
		assert.PanicsWithValue(t, `task: Unlock of RWMutex "cache", which is not locked for writing`, rw.Unlock)

		require.True(t, rw.TryLock(), "TryLock of a free lock")
		assert.False(t, rw.TryLock(), "TryLock with a writer inside")
		assert.False(t, rw.TryRLock(), "TryRLock with a writer inside")
		assert.PanicsWithValue(t, `task: RUnlock of RWMutex "cache" without an RLock: it is not locked for reading`, rw.RUnlock,
			"RUnlock of a lock held for writing")
		rw.Unlock()
		assert.PanicsWithValue(t, `task: Unlock of RWMutex "cache", which is not locked for writing`, rw.Unlock, "a second Unlock")

		rw.Lock()
		rw.Unlock()
		rw.RLock()
		rw.RUnlock()
		require.True(t, rw.TryLock(), "the lock works after the refused calls")
		rw.Unlock()
	})
}

// TestRWMutexWaitingWriterKeepsNewReadersOut: a Lock waits for the reader
// inside, and while it waits a new RLock waits behind it: the writer gets
// the lock before the later reader does.
func TestRWMutexWaitingWriterKeepsNewReadersOut(t *testing.T) {
	simThenReal(t, func(t *testing.T, rt task.Runtime) {
		rw := task.NewRWMutex(rt, "cache")
		order := task.NewQueue[string](rt, task.QueueName("order"))
		g := task.NewGroup(rt, "g")
		rw.RLock()
		g.Go("writer", func() {
			rw.Lock()
			order.Put("writer")
			rw.Unlock()
		})
		// Wait until the writer waits: from then on TryRLock refuses.
		for i := 0; rw.TryRLock(); i++ {
			rw.RUnlock()
			require.Less(t, i, 100_000, "the writer never came to wait")
			rt.Sleep(10 * time.Microsecond)
		}
		g.Go("reader", func() {
			rw.RLock()
			order.Put("reader")
			rw.RUnlock()
		})
		rt.Sleep(time.Millisecond) // give the writer and the reader the chance to be wrong
		_, early := order.TryGet()
		require.False(t, early, "a task got in while the first reader held the lock and a writer waited")
		rw.RUnlock()
		g.Wait()
		order.Close()
		var got []string
		for v, ok := order.Get(); ok; v, ok = order.Get() {
			got = append(got, v)
		}
		assert.Equal(t, []string{"writer", "reader"}, got, "the waiting writer goes before the reader that came after it")
	})
}

// rwExclusion is the property of a reader/writer lock under a schedule:
// a writer is never inside with anyone else, and every round gets
// through. It returns the most readers seen inside at once.
func rwExclusion(rt task.Runtime) (mostReaders int, err error) {
	const (
		workers = 5
		rounds  = 4
	)
	rw := task.NewRWMutex(rt, "cache")
	tally := rt.NewMutex("tally")
	readers, writers, done := 0, 0, 0
	var bad error
	check := func(who string) {
		if bad == nil && (writers > 1 || (writers == 1 && readers > 0)) {
			bad = fmt.Errorf("%s: %d writer(s) and %d reader(s) inside at once", who, writers, readers)
		}
	}
	g := task.NewGroup(rt, "workers")
	for w := range workers {
		g.Go("worker", func() {
			for r := range rounds {
				write := (w+r)%3 == 0
				if write {
					if r%2 == 1 || !rw.TryLock() {
						rw.Lock()
					}
				} else if r%2 == 1 || !rw.TryRLock() {
					rw.RLock()
				}
				tally.Lock()
				if write {
					writers++
				} else {
					readers++
					mostReaders = max(mostReaders, readers)
				}
				check("enter")
				tally.Unlock()
				rt.Yield("worker.inside")
				tally.Lock()
				check("inside")
				if write {
					writers--
				} else {
					readers--
				}
				done++
				tally.Unlock()
				if write {
					rw.Unlock()
				} else {
					rw.RUnlock()
				}
			}
		})
	}
	g.Wait()
	if bad != nil {
		return mostReaders, bad
	}
	if done != workers*rounds {
		return mostReaders, fmt.Errorf("%d of %d rounds done", done, workers*rounds)
	}
	return mostReaders, nil
}

// TestRWMutexExcludesWritersAndSharesReaders: under many schedules a
// writer is never inside with another task, and readers are inside
// together in some.
func TestRWMutexExcludesWritersAndSharesReaders(t *testing.T) {
	shared := 0
	for _, st := range sweep {
		for seed := uint64(1); seed <= 60; seed++ {
			var most int
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) (err error) {
				most, err = rwExclusion(rt)
				return err
			})
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)
			if most > 1 {
				shared++
			}
		}
	}
	assert.Positive(t, shared, "no schedule in 180 had two readers inside at once")
	_, err := rwExclusion(task.Real())
	require.NoError(t, err, "real runtime")
}

// readerStream runs three readers that hold the lock for 300µs of every
// 400µs, staggered so that one always holds it, and one writer that asks
// for the lock 1ms in. The readers stop when the writer is done or, at
// the latest, 100ms in. It reports whether the writer got in while the
// readers still streamed, and how long it waited.
func readerStream(rt task.Runtime) (inDuringStream bool, waited time.Duration) {
	const (
		hold   = 300 * time.Microsecond
		gap    = 100 * time.Microsecond
		stream = 100 * time.Millisecond
	)
	rw := task.NewRWMutex(rt, "cache")
	tally := rt.NewMutex("tally")
	start := rt.Now()
	writerDone, streamEnded := false, false
	g := task.NewGroup(rt, "g")
	for i := range 3 {
		g.Go("reader", func() {
			rt.Sleep(time.Duration(i) * (hold + gap) / 3)
			for {
				tally.Lock()
				if !writerDone && rt.Now().Sub(start) >= stream {
					streamEnded = true
				}
				stop := writerDone || streamEnded
				tally.Unlock()
				if stop {
					return
				}
				rw.RLock()
				rt.Sleep(hold)
				rw.RUnlock()
				rt.Sleep(gap)
			}
		})
	}
	g.Go("writer", func() {
		rt.Sleep(time.Millisecond)
		asked := rt.Now()
		rw.Lock()
		tally.Lock()
		waited = rt.Now().Sub(asked)
		inDuringStream = !streamEnded
		writerDone = true
		tally.Unlock()
		rt.Sleep(gap)
		rw.Unlock()
	})
	g.Wait()
	return inDuringStream, waited
}

// TestRWMutexWriterIsNotStarvedByReaders: readers that between them always
// hold the lock do not keep a writer out, since a waiting writer keeps new
// readers out; the writer gets in while they still stream, well within
// the stream's 100ms.
func TestRWMutexWriterIsNotStarvedByReaders(t *testing.T) {
	var longest time.Duration
	for _, st := range sweep {
		for seed := uint64(1); seed <= 40; seed++ {
			var (
				in     bool
				waited time.Duration
			)
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error {
				in, waited = readerStream(rt)
				return nil
			})
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)
			require.True(t, in, "sim %s seed %d: the writer got in only once the readers stopped, after %v", st, seed, waited)
			longest = max(longest, waited)
		}
	}
	assert.Less(t, longest, 50*time.Millisecond, "a writer waited half the stream")
	t.Logf("longest virtual wait of the writer: %v", longest)
}

// recursiveRLock is the classic deadlock of a writer-preferring lock: a
// reader takes RLock again while it holds it, and a writer's Lock comes in
// between, so the second RLock waits for the writer and the writer for the
// reader.
func recursiveRLock(rt task.Runtime) error {
	rw := task.NewRWMutex(rt, "cache")
	g := task.NewGroup(rt, "g")
	g.Go("reader", func() {
		rw.RLock()
		rt.Yield("reader.between-rlocks")
		rw.RLock() // the bug: the lock is held for reading already
		rw.RUnlock()
		rw.RUnlock()
	})
	g.Go("writer", func() {
		rw.Lock()
		rw.Unlock()
	})
	g.Wait()
	return nil
}

// TestRWMutexRecursiveRLockIsADeadlock: the simulator finds the schedules
// in which a writer comes between a reader's two RLocks, and reports each
// as a deadlock naming the ".rlock" and ".wlock" waits.
func TestRWMutexRecursiveRLockIsADeadlock(t *testing.T) {
	found := 0
	for _, st := range sweep {
		for seed := uint64(1); seed <= 30; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, recursiveRLock)
			if res.Err == nil {
				continue
			}
			var dl *sim.DeadlockError
			require.True(t, errors.As(res.Err, &dl), "sim %s seed %d: %v, want a deadlock", st, seed, res.Err)
			assert.ElementsMatch(t, []string{"main at g.wait", "reader at cache.rlock", "writer at cache.wlock"}, blockedAt(dl), "sim %s seed %d", st, seed)
			found++
		}
	}
	assert.Positive(t, found, "no schedule in 90 put the writer between the two RLocks")
}

func TestRWMutexSameSeedSameTrace(t *testing.T) {
	for _, st := range sweep {
		for seed := uint64(1); seed <= 5; seed++ {
			run := func() sim.Result {
				return sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error {
					_, err := rwExclusion(rt)
					return err
				})
			}
			a, b := run(), run()
			require.NoError(t, a.Err)
			assert.Equal(t, a.TraceHash, b.TraceHash, "sim %s seed %d", st, seed)
			assert.Equal(t, a.Steps, b.Steps, "sim %s seed %d", st, seed)
		}
	}
}

// ExampleRWMutex shows the simulator finding a reader that takes RLock
// twice: a writer that comes between the two waits for the first RLock,
// and the second waits for the writer.
func ExampleRWMutex() {
	for seed := uint64(1); seed <= 100; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, func(rt task.Runtime) error {
			rw := task.NewRWMutex(rt, "cache")
			g := task.NewGroup(rt, "g")
			g.Go("reader", func() {
				rw.RLock()
				rt.Yield("reader.between-rlocks")
				rw.RLock() // the bug: the lock is held for reading already
				rw.RUnlock()
				rw.RUnlock()
			})
			g.Go("writer", func() {
				rw.Lock()
				rw.Unlock()
			})
			g.Wait()
			return nil
		})
		var dl *sim.DeadlockError
		if errors.As(res.Err, &dl) {
			var waits []string
			for _, b := range dl.Blocked {
				waits = append(waits, b.Name+" waits at "+b.Point)
			}
			slices.Sort(waits)
			for _, w := range waits {
				fmt.Println(w)
			}
			return
		}
	}
	// Output:
	// main waits at g.wait
	// reader waits at cache.rlock
	// writer waits at cache.wlock
}
