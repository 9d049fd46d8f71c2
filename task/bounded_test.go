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

// TestQueueBoundTryPutRefusesWhenFull: a bounded queue takes n items, then
// TryPut refuses until a Get or TryGet makes room; Put blocks until then.
func TestQueueBoundTryPutRefusesWhenFull(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		q := task.NewQueue[string](rt, task.QueueName("q"), task.QueueBound(2))
		require.True(t, q.TryPut("a"))
		require.True(t, q.TryPut("b"))
		assert.False(t, q.TryPut("x"), "TryPut into a full queue")
		assert.Equal(t, 2, q.Len())

		v, ok := q.TryGet()
		require.True(t, ok)
		assert.Equal(t, "a", v)
		require.True(t, q.TryPut("c"), "TryPut after TryGet made room")
		assert.False(t, q.TryPut("x"), "TryPut into a full queue")

		v, ok = q.Get()
		require.True(t, ok)
		assert.Equal(t, "b", v)
		require.True(t, q.Put("d"), "Put after Get made room")

		q.Close()
		assert.False(t, q.TryPut("x"), "TryPut after Close")
		var got []string
		for v, ok := q.Get(); ok; v, ok = q.Get() {
			got = append(got, v)
		}
		assert.Equal(t, []string{"c", "d"}, got)
	})
}

// TestQueueBoundPutWaitsForRoom: a Put into a full queue does not return
// before a Get has made room, and then it does.
func TestQueueBoundPutWaitsForRoom(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		q := task.NewQueue[int](rt, task.QueueName("q"), task.QueueBound(1))
		done := task.NewQueue[bool](rt, task.QueueName("done"))
		require.True(t, q.Put(1))
		g := task.NewGroup(rt, "g")
		g.Go("putter", func() { done.Put(q.Put(2)) })
		rt.Sleep(time.Millisecond) // give the putter the chance to be wrong
		_, returned := done.TryGet()
		require.False(t, returned, "Put into a full queue returned before any Get")
		assert.Equal(t, 1, q.Len())

		v, ok := q.Get()
		require.True(t, ok)
		assert.Equal(t, 1, v)
		accepted, _ := done.Get()
		assert.True(t, accepted, "the waiting Put was refused")
		v, ok = q.Get()
		require.True(t, ok)
		assert.Equal(t, 2, v)
		g.Wait()
	})
}

// TestQueueBoundCloseWakesBlockedPutters: Close refuses the Puts waiting
// for room, and every later one, while what was queued can still be taken.
func TestQueueBoundCloseWakesBlockedPutters(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		q := task.NewQueue[int](rt, task.QueueName("q"), task.QueueBound(1))
		require.True(t, q.Put(0))
		results := task.NewQueue[bool](rt, task.QueueName("results"))
		g := task.NewGroup(rt, "putters")
		for i := 1; i <= 3; i++ {
			g.Go("putter", func() { results.Put(q.Put(i)) })
		}
		rt.Sleep(time.Millisecond) // let the putters block
		q.Close()
		g.Wait() // a putter Close did not wake would hang here
		results.Close()
		for accepted, ok := results.Get(); ok; accepted, ok = results.Get() {
			assert.False(t, accepted, "a Put into a full queue was accepted across its Close")
		}
		assert.False(t, q.Put(9), "Put after Close")
		v, ok := q.Get()
		assert.True(t, ok)
		assert.Equal(t, 0, v)
		_, ok = q.Get()
		assert.False(t, ok, "Get of a closed, drained queue")
	})
}

// TestQueueBoundCloseWakesBlockedGetters: a bounded queue's getters are
// woken by Close as an unbounded queue's are.
func TestQueueBoundCloseWakesBlockedGetters(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		q := task.NewQueue[int](rt, task.QueueName("q"), task.QueueBound(1))
		g := task.NewGroup(rt, "getters")
		for range 3 {
			g.Go("getter", func() {
				_, ok := q.Get()
				assert.False(t, ok, "Get of a closed, empty queue")
			})
		}
		rt.Sleep(time.Millisecond)
		q.Close()
		g.Wait()
	})
}

func TestQueueBoundRejectsANonPositiveBound(t *testing.T) {
	assert.PanicsWithValue(t, "task: QueueBound(0): n must be ≥ 1", func() { task.QueueBound(0) })
	assert.PanicsWithValue(t, "task: QueueBound(-3): n must be ≥ 1", func() { task.QueueBound(-3) })
}

// TestQueueBoundProducersAndConsumers is the property of a bounded queue
// under many schedules: it never holds more than its bound, and what Put
// accepted is taken exactly once, in each producer's order; what it refused
// is never taken. The queue is closed either once the producers are done,
// so that a lost wakeup is a deadlock rather than rescued by Close, or
// while they may still wait for room.
func TestQueueBoundProducersAndConsumers(t *testing.T) {
	const (
		producers = 3
		consumers = 2
		items     = 12
	)
	program := func(rt task.Runtime, bound int, closeEarly bool) error {
		q := task.NewQueue[[2]int](rt, task.QueueName("jobs"), task.QueueBound(bound))
		mu := rt.NewMutex("tally")
		accepted := map[[2]int]bool{}
		taken := map[[2]int]int{}
		last := make([][producers]int, consumers) // per consumer, the last item taken from each producer
		var failure error
		fail := func(err error) {
			mu.Lock()
			if failure == nil {
				failure = err
			}
			mu.Unlock()
		}

		workers := task.NewGroup(rt, "workers")
		for p := range producers {
			workers.Go("producer", func() {
				for i := 1; i <= items; i++ {
					v := [2]int{p, i}
					var ok bool
					if i%4 == 0 {
						ok = q.TryPut(v)
					} else {
						ok = q.Put(v)
					}
					if n := q.Len(); n > bound {
						fail(fmt.Errorf("queue holds %d items, bound %d", n, bound))
					}
					if ok {
						mu.Lock()
						accepted[v] = true
						mu.Unlock()
					}
				}
			})
		}
		consumed := task.NewGroup(rt, "consumed")
		for c := range consumers {
			consumed.Go("consumer", func() {
				for {
					var v [2]int
					var ok bool
					if c == 0 {
						v, ok = q.TryGet()
						if !ok {
							if v, ok = q.Get(); !ok {
								return
							}
						}
					} else if v, ok = q.Get(); !ok {
						return
					}
					if v[1] <= last[c][v[0]] {
						fail(fmt.Errorf("consumer %d took %v after item %d of that producer", c, v, last[c][v[0]]))
					}
					last[c][v[0]] = v[1]
					mu.Lock()
					taken[v]++
					mu.Unlock()
					rt.Yield("consumer.took")
				}
			})
		}
		if closeEarly { // while the producers may still wait for room
			rt.Sleep(time.Duration(items/2) * time.Microsecond)
			q.Close()
			workers.Wait()
		} else {
			workers.Wait()
			q.Close()
		}
		consumed.Wait()
		if failure != nil {
			return failure
		}
		for v, n := range taken {
			if n != 1 {
				return fmt.Errorf("item %v taken %d times", v, n)
			}
			if !accepted[v] {
				return fmt.Errorf("item %v taken but its Put was refused", v)
			}
		}
		for v := range accepted {
			if taken[v] == 0 {
				return fmt.Errorf("item %v accepted but never taken", v)
			}
		}
		return nil
	}
	for _, bound := range []int{1, 3} {
		for _, closeEarly := range []bool{false, true} {
			// The simulator first: a lost wakeup it reports as a deadlock
			// hangs the real runtime.
			for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
				for seed := uint64(1); seed <= 40; seed++ {
					res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error { return program(rt, bound, closeEarly) })
					require.NoError(t, res.Err, "sim %s seed %d, bound %d, close early %v", st, seed, bound, closeEarly)
				}
			}
			require.NoError(t, program(task.Real(), bound, closeEarly), "real runtime, bound %d, close early %v", bound, closeEarly)
		}
	}
}

// stalledConsumer is a planted bug: the consumer stops reading at the
// first item it cannot handle, without draining or closing the queue, so
// the producer fills the bounded queue and waits for room forever while
// main waits for both.
func stalledConsumer(rt task.Runtime) error {
	jobs := task.NewQueue[int](rt, task.QueueName("jobs"), task.QueueBound(4))
	g := task.NewGroup(rt, "pipeline")
	g.Go("producer", func() {
		for i := range 10 {
			jobs.Put(i)
		}
		jobs.Close()
	})
	g.Go("consumer", func() {
		for v, ok := jobs.Get(); ok; v, ok = jobs.Get() {
			if v == 3 {
				return // the bug: gives up without draining jobs
			}
		}
	})
	g.Wait()
	return nil
}

// TestQueueBoundStalledConsumerIsADeadlock: the simulator reports the
// backpressure of a consumer that stops reading as a deadlock naming the
// producer's ".put" point.
func TestQueueBoundStalledConsumerIsADeadlock(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
		for seed := uint64(1); seed <= 20; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, stalledConsumer)
			var dl *sim.DeadlockError
			require.True(t, errors.As(res.Err, &dl), "sim %s seed %d: %v, want a deadlock", st, seed, res.Err)
			points := map[string]string{}
			for _, b := range dl.Blocked {
				points[b.Name] = b.Point
			}
			assert.Equal(t, map[string]string{"producer": "jobs.put", "main": "pipeline.wait"}, points, "sim %s seed %d", st, seed)
		}
	}
}

func ExampleQueueBound() {
	res := sim.Run(sim.Options{Seed: 1}, stalledConsumer)
	var dl *sim.DeadlockError
	if errors.As(res.Err, &dl) {
		for _, b := range dl.Blocked {
			fmt.Printf("%s waits at %s\n", b.Name, b.Point)
		}
	}
	// Output:
	// main waits at pipeline.wait
	// producer waits at jobs.put
}
