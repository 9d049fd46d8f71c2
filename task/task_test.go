package task_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// onBoth runs body on the real runtime and under the simulator with a few
// seeds and strategies: one implementation, both worlds.
func onBoth(t *testing.T, body func(rt task.Runtime) error) {
	t.Helper()
	t.Run("real", func(t *testing.T) { require.NoError(t, body(task.Real())) })
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
		for seed := uint64(1); seed <= 5; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, body)
			require.NoError(t, res.Err, "sim %s seed %d", st, seed)
		}
	}
}

func TestQueueDeliversEveryItemInOrderToOneConsumer(t *testing.T) {
	onBoth(t, func(rt task.Runtime) error {
		q := task.NewQueue[int](rt, task.QueueName("q"))
		g := task.NewGroup(rt, "g")
		var got []int
		g.Go("consumer", func() {
			for v, ok := q.Get(); ok; v, ok = q.Get() {
				got = append(got, v)
			}
		})
		for i := 0; i < 1000; i++ {
			q.Put(i)
		}
		q.Close()
		g.Wait()
		if len(got) != 1000 {
			return fmt.Errorf("got %d items, want 1000", len(got))
		}
		for i, v := range got {
			if v != i {
				return fmt.Errorf("item %d is %d", i, v)
			}
		}
		return nil
	})
}

func TestQueueTryGetLenAndClose(t *testing.T) {
	onBoth(t, func(rt task.Runtime) error {
		q := task.NewQueue[string](rt, task.QueueCapacity(2))
		if _, ok := q.TryGet(); ok {
			return fmt.Errorf("TryGet on an empty queue succeeded")
		}
		for _, s := range []string{"a", "b", "c"} { // grows past its capacity
			q.Put(s)
		}
		if q.Len() != 3 {
			return fmt.Errorf("Len %d, want 3", q.Len())
		}
		q.Close()
		q.Close()
		if q.Put("d") {
			return fmt.Errorf("Put after Close accepted")
		}
		var got []string
		for v, ok := q.Get(); ok; v, ok = q.Get() {
			got = append(got, v)
		}
		if fmt.Sprint(got) != "[a b c]" {
			return fmt.Errorf("drained %v after Close, want [a b c]", got)
		}
		return nil
	})
}

// TestQueueCapacityIsAHint: a huge capacity ("unbounded") is not an
// allocation: the queue preallocates at most QueueCapacityMax and grows.
func TestQueueCapacityIsAHint(t *testing.T) {
	onBoth(t, func(rt task.Runtime) error {
		q := task.NewQueue[int](rt, task.QueueCapacity(math.MaxInt))
		for i := range task.QueueCapacityMax + 3 {
			q.Put(i)
		}
		for i := range task.QueueCapacityMax + 3 {
			if v, ok := q.TryGet(); !ok || v != i {
				return fmt.Errorf("item %d: got %d, %v", i, v, ok)
			}
		}
		return nil
	})
}

func TestGroupWaitsForEveryTask(t *testing.T) {
	onBoth(t, func(rt task.Runtime) error {
		mu := rt.NewMutex("count")
		n := 0
		g := task.NewGroup(rt, "g")
		for i := 0; i < 20; i++ {
			g.Go("w", func() {
				rt.Sleep(time.Duration(i%3) * time.Millisecond)
				mu.Lock()
				n++
				mu.Unlock()
			})
		}
		g.Wait()
		if n != 20 || g.Running() != 0 {
			return fmt.Errorf("after Wait: %d ran, %d running", n, g.Running())
		}
		return nil
	})
}

func TestCondBroadcastWakesAll(t *testing.T) {
	onBoth(t, func(rt task.Runtime) error {
		mu := rt.NewMutex("m")
		c := rt.NewCond(mu)
		open := false
		g := task.NewGroup(rt, "g")
		for i := 0; i < 5; i++ {
			g.Go("waiter", func() {
				mu.Lock()
				for !open {
					c.Wait("gate")
				}
				mu.Unlock()
			})
		}
		rt.Sleep(time.Millisecond)
		mu.Lock()
		open = true
		c.Broadcast()
		mu.Unlock()
		g.Wait()
		return nil
	})
}

func TestRealRuntime(t *testing.T) {
	rt := task.Real()
	assert.True(t, task.IsReal(rt))
	start := rt.Now()
	rt.Sleep(time.Millisecond)
	rt.Sleep(0)
	rt.Yield("noop")
	assert.GreaterOrEqual(t, rt.Now().Sub(start), time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	fired := make(chan struct{})
	stop, ok := task.AfterContext(rt, ctx, func() { close(fired) })
	require.True(t, ok)
	cancel()
	<-fired
	assert.False(t, stop())

	assert.PanicsWithValue(t, "task: NewCond needs a Mutex from the same runtime, got *task_test.fakeMutex",
		func() { rt.NewCond(&fakeMutex{}) })
}

func TestAfterContextUnderSimRunsAsATask(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, func(rt task.Runtime) error {
			if task.IsReal(rt) {
				return fmt.Errorf("the simulator claims to be the real runtime")
			}
			mu := rt.NewMutex("m")
			c := rt.NewCond(mu)
			woken := false
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, ok := task.AfterContext(rt, ctx, func() {
				mu.Lock()
				woken = true
				c.Broadcast()
				mu.Unlock()
			})
			if !ok {
				return fmt.Errorf("the simulator does not watch contexts")
			}
			stopped, _ := task.AfterContext(rt, ctx, func() { panic("a stopped watch fired") })
			if !stopped() {
				return fmt.Errorf("stop of a pending watch reported false")
			}
			rt.Go("canceller", func() { rt.Sleep(time.Millisecond); cancel() })
			mu.Lock()
			for !woken {
				c.Wait("wait-for-cancel")
			}
			mu.Unlock()
			return nil
		})
		require.NoError(t, res.Err, "seed %d", seed)
		assert.Contains(t, res.Schedule.Tasks, "context")
	}
}

type fakeMutex struct{}

func (*fakeMutex) Lock()   {}
func (*fakeMutex) Unlock() {}

func ExampleQueue() {
	rt := task.Real()
	q := task.NewQueue[string](rt, task.QueueName("greetings"))
	g := task.NewGroup(rt, "consumers")
	g.Go("printer", func() {
		for s, ok := q.Get(); ok; s, ok = q.Get() {
			fmt.Println(s)
		}
	})
	q.Put("hello")
	q.Put("world")
	q.Close()
	g.Wait()
	// Output:
	// hello
	// world
}

// BenchmarkRealYield is the price of a scheduling point in production.
func BenchmarkRealYield(b *testing.B) {
	rt := task.Real()
	for i := 0; i < b.N; i++ {
		rt.Yield("bench")
	}
}

// BenchmarkRealReach is what a probe costs in production: one comparison
// of the runtime's type, the runtime read from a variable the compiler
// cannot see through.
func BenchmarkRealReach(b *testing.B) {
	for i := 0; i < b.N; i++ {
		task.Reach(opaqueRuntime, "bench")
	}
}

// opaqueRuntime is the real runtime where the compiler cannot prove it so.
var opaqueRuntime = task.Real()

// TestAfterContextStopOnceTheContextIsDone: context.AfterFunc starts f as
// soon as ctx is done (or at once, for a ctx done already), so a stop after
// that prevents nothing: it reports false and f still runs. The simulator
// must not open a window, between the cancel and its next decision, in
// which a stop takes back a callback the real runtime has already started.
func TestAfterContextStopOnceTheContextIsDone(t *testing.T) {
	onBoth(t, func(rt task.Runtime) error {
		for _, doneFirst := range []bool{false, true} {
			ctx, cancel := context.WithCancel(context.Background())
			if doneFirst {
				cancel()
			}
			q := task.NewQueue[int](rt, task.QueueName("ran"))
			stop, _ := task.AfterContext(rt, ctx, func() { q.Put(1) })
			cancel()
			if stop() {
				return fmt.Errorf("done first %v: stop after the cancel reported that it prevented f", doneFirst)
			}
			if _, ok := q.Get(); !ok {
				return fmt.Errorf("done first %v: f did not run", doneFirst)
			}
		}
		return nil
	})
}

// BenchmarkQueuePutGet is the price of a Put and a Get on an unbounded
// queue on the real runtime, with no other task contending: the path the
// engine's queues take.
func BenchmarkQueuePutGet(b *testing.B) {
	q := task.NewQueue[int](task.Real(), task.QueueName("bench"))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		q.Put(i)
		q.Get()
	}
}

// BenchmarkBoundedQueuePutGet is BenchmarkQueuePutGet on a bounded queue,
// whose Get also signals the Cond that Puts wait on.
func BenchmarkBoundedQueuePutGet(b *testing.B) {
	q := task.NewQueue[int](task.Real(), task.QueueName("bench"), task.QueueBound(8))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		q.Put(i)
		q.Get()
	}
}
