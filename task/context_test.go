package task_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// waitDone parks the calling task until ctx is done, as a task blocked in
// task.AfterContext is, and returns the time on rt's clock at which the
// callback woke it.
func waitDone(t *testing.T, rt task.Runtime, ctx context.Context) time.Time {
	t.Helper()
	mu := rt.NewMutex("wait")
	c := rt.NewCond(mu)
	var at time.Time
	done := false
	stop, ok := task.AfterContext(rt, ctx, func() {
		mu.Lock()
		at, done = rt.Now(), true
		c.Broadcast()
		mu.Unlock()
	})
	require.True(t, ok)
	defer stop()
	mu.Lock()
	for !done {
		c.Wait("wait-for-ctx")
	}
	mu.Unlock()
	return at
}

var errCause = errors.New("the cause")

// TestWithTimeoutExpiresOnTheRuntimesClock: on both runtimes the context
// is done after its timeout, with DeadlineExceeded as Err and Cause, or
// the cause given.
func TestWithTimeoutExpiresOnTheRuntimesClock(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Millisecond)
		defer cancel()
		waitDone(t, rt, ctx)
		assert.Equal(t, context.DeadlineExceeded, ctx.Err())
		assert.Equal(t, context.DeadlineExceeded, context.Cause(ctx))
		cancel()
		assert.Equal(t, context.DeadlineExceeded, ctx.Err(), "a cancel after the deadline changes nothing")

		ctx2, cancel2 := task.WithTimeoutCause(rt, context.Background(), time.Millisecond, errCause)
		defer cancel2()
		waitDone(t, rt, ctx2)
		assert.Equal(t, context.DeadlineExceeded, ctx2.Err())
		assert.Equal(t, errCause, context.Cause(ctx2))
	})
}

// TestWithTimeoutExpiresAtExactlyTheVirtualDeadline: under the simulator
// the context is done when the virtual clock reaches the deadline, not a
// nanosecond before, and a task blocked in AfterContext on it wakes then
// (later only under a strategy that withholds tasks while the clock moves
// on, as Chaos does).
func TestWithTimeoutExpiresAtExactlyTheVirtualDeadline(t *testing.T) {
	rttest.Sim(t, func(t *testing.T, rt task.Runtime) {
		start := rt.Now()
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Second)
		defer cancel()
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		assert.Equal(t, start.Add(time.Second), dl)

		g := task.NewGroup(rt, "g")
		var woke time.Time
		g.Go("waiter", func() { woke = waitDone(t, rt, ctx) })
		rt.Sleep(time.Second - time.Nanosecond)
		if rt.Now().Before(dl) { // Chaos may have withheld this task past it
			assert.NoError(t, ctx.Err(), "done before its deadline")
		}
		g.Wait()
		assert.False(t, woke.Before(dl), "woke at %v, before the deadline", woke)
		assert.Equal(t, context.DeadlineExceeded, ctx.Err())
		assert.Equal(t, context.DeadlineExceeded, context.Cause(ctx))
	})
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3)} {
		for seed := uint64(1); seed <= 5; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error {
				ctx, cancel := task.WithTimeout(rt, context.Background(), time.Second)
				defer cancel()
				woke := waitDone(t, rt, ctx)
				assert.Equal(t, sim.Epoch.Add(time.Second), woke, "%s seed %d", st, seed)
				assert.Equal(t, context.DeadlineExceeded, ctx.Err())
				return nil
			})
			require.NoError(t, res.Err)
			assert.Equal(t, time.Second, res.Elapsed, "%s seed %d", st, seed)
		}
	}
}

func TestWithDeadlineReportsItsDeadline(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		at := rt.Now().Add(time.Hour)
		ctx, cancel := task.WithDeadline(rt, context.Background(), at)
		defer cancel()
		dl, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, at, dl)
		assert.NoError(t, ctx.Err())
		assert.Nil(t, context.Cause(ctx))
	})
}

func TestWithDeadlineAlreadyPastIsDoneAtOnce(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		ctx, cancel := task.WithDeadline(rt, context.Background(), rt.Now().Add(-time.Second))
		defer cancel()
		assert.Equal(t, context.DeadlineExceeded, ctx.Err())
		assert.Equal(t, context.DeadlineExceeded, context.Cause(ctx))

		ctx2, cancel2 := task.WithDeadlineCause(rt, context.Background(), rt.Now(), errCause)
		defer cancel2()
		assert.Equal(t, context.DeadlineExceeded, ctx2.Err())
		assert.Equal(t, errCause, context.Cause(ctx2))
	})
}

func TestWithTimeoutCancelBeforeTheDeadline(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		ctx, cancel := task.WithTimeoutCause(rt, context.Background(), time.Hour, errCause)
		cancel()
		assert.Equal(t, context.Canceled, ctx.Err())
		assert.Equal(t, context.Canceled, context.Cause(ctx))
		cancel()
		assert.Equal(t, context.Canceled, ctx.Err())
	})
}

// TestWithTimeoutCancelStopsTheTimer: once cancelled, nothing is left
// pending on the virtual clock: a task that then waits for ever is a
// deadlock at once, not an hour later when a timer would fire.
func TestWithTimeoutCancelStopsTheTimer(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Hour)
		cancel()
		mu := rt.NewMutex("m")
		c := rt.NewCond(mu)
		mu.Lock()
		c.Wait("forever")
		mu.Unlock()
		return ctx.Err()
	})
	var de *sim.DeadlockError
	require.ErrorAs(t, res.Err, &de)
	assert.Equal(t, time.Duration(0), de.At)
	assert.Equal(t, time.Duration(0), res.Elapsed)
}

// TestWithTimeoutFollowsItsParent: a cancelled parent cancels the context
// at once, with its Err and Cause, and its timer no longer matters.
func TestWithTimeoutFollowsItsParent(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		parent, pcancel := context.WithCancelCause(context.Background())
		ctx, cancel := task.WithTimeout(rt, parent, time.Hour)
		defer cancel()
		pcancel(errCause)
		assert.Equal(t, context.Canceled, ctx.Err())
		assert.Equal(t, errCause, context.Cause(ctx))
		cancel()
		assert.Equal(t, context.Canceled, ctx.Err())
		assert.Equal(t, errCause, context.Cause(ctx), "cancel after the parent's changes nothing")

		done, dcancel := context.WithCancel(context.Background())
		dcancel()
		ctx2, cancel2 := task.WithTimeout(rt, done, time.Hour)
		defer cancel2()
		assert.Equal(t, context.Canceled, ctx2.Err(), "a parent done already")
	})
}

// TestWithTimeoutOfAParentDueFirst: the parent's earlier deadline is the
// child's, and the parent's expiry is the child's, with DeadlineExceeded.
func TestWithTimeoutOfAParentDueFirst(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		start := rt.Now()
		parent, pcancel := task.WithTimeout(rt, context.Background(), time.Millisecond)
		defer pcancel()
		ctx, cancel := task.WithTimeout(rt, parent, time.Hour)
		defer cancel()
		pdl, _ := parent.Deadline()
		dl, ok := ctx.Deadline()
		assert.True(t, ok)
		assert.Equal(t, pdl, dl)
		woke := waitDone(t, rt, ctx)
		assert.Equal(t, context.DeadlineExceeded, ctx.Err())
		assert.Equal(t, context.DeadlineExceeded, context.Cause(ctx))
		if !task.IsReal(rt) {
			assert.Equal(t, start.Add(time.Millisecond), woke)
		}

		// A child due first keeps its own deadline.
		parent2, pcancel2 := task.WithTimeout(rt, context.Background(), time.Hour)
		defer pcancel2()
		ctx2, cancel2 := task.WithTimeout(rt, parent2, time.Millisecond)
		defer cancel2()
		dl2, _ := ctx2.Deadline()
		pdl2, _ := parent2.Deadline()
		assert.True(t, dl2.Before(pdl2))
		waitDone(t, rt, ctx2)
		assert.Equal(t, context.DeadlineExceeded, ctx2.Err())
		assert.NoError(t, parent2.Err())
	})
}

// TestAStandardChildOfAVirtualDeadlineSaysCanceled is the documented
// difference: a context.WithCancel of the context, cancelled with it at
// its virtual deadline, says Canceled, and its Cause says why.
func TestAStandardChildOfAVirtualDeadlineSaysCanceled(t *testing.T) {
	rttest.Sim(t, func(t *testing.T, rt task.Runtime) {
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Second)
		defer cancel()
		child, ccancel := context.WithCancel(ctx)
		defer ccancel()
		dl, _ := ctx.Deadline()
		cdl, ok := child.Deadline()
		assert.True(t, ok)
		assert.Equal(t, dl, cdl)
		waitDone(t, rt, child)
		assert.Equal(t, context.DeadlineExceeded, ctx.Err())
		assert.Equal(t, context.Canceled, child.Err())
		assert.Equal(t, context.DeadlineExceeded, context.Cause(child))
		assert.Equal(t, context.DeadlineExceeded, context.WithValue(ctx, errCause, 1).Err(), "a value shares its parent's Err")
	})
}

func TestVirtualDeadline(t *testing.T) {
	assert.False(t, task.VirtualDeadline(context.Background()))
	real, cancel := task.WithTimeout(task.Real(), context.Background(), time.Hour)
	defer cancel()
	assert.False(t, task.VirtualDeadline(real), "the real runtime's deadline is on the wall clock")

	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		ctx, cancel := task.WithTimeout(rt, context.Background(), time.Hour)
		defer cancel()
		assert.True(t, task.VirtualDeadline(ctx))
		child, ccancel := context.WithCancel(ctx)
		defer ccancel()
		assert.True(t, task.VirtualDeadline(child), "derived, with its deadline")
		wall, wcancel := context.WithTimeout(ctx, time.Hour)
		defer wcancel()
		assert.True(t, task.VirtualDeadline(wall), "the virtual deadline is due first")
		of, ocancel := task.WithTimeout(rt, real, time.Minute)
		defer ocancel()
		assert.True(t, task.VirtualDeadline(of), "due before its parent's wall deadline")
		return nil
	})
	require.NoError(t, res.Err)
}

// TestWithTimeoutRunsAreDeterministic: expiries, cancels and the tasks
// they wake replay with the seed.
func TestWithTimeoutRunsAreDeterministic(t *testing.T) {
	program := func(rt task.Runtime) error {
		g := task.NewGroup(rt, "g")
		for i := range 4 {
			g.Go("worker", func() {
				ctx, cancel := task.WithTimeout(rt, context.Background(), time.Duration(i+1)*time.Millisecond)
				defer cancel()
				if i%2 == 0 {
					rt.Go("canceller", func() {
						rt.Sleep(time.Duration(i) * time.Millisecond)
						cancel()
					})
				}
				mu := rt.NewMutex("w")
				c := rt.NewCond(mu)
				done := false
				stop, _ := task.AfterContext(rt, ctx, func() { mu.Lock(); done = true; c.Broadcast(); mu.Unlock() })
				defer stop()
				mu.Lock()
				for !done {
					c.Wait("wait")
				}
				mu.Unlock()
			})
		}
		g.Wait()
		return nil
	}
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
		for seed := uint64(1); seed <= 5; seed++ {
			a := sim.Run(sim.Options{Seed: seed, Strategy: st}, program)
			b := sim.Run(sim.Options{Seed: seed, Strategy: st}, program)
			require.NoError(t, a.Err)
			require.NoError(t, b.Err)
			assert.Equal(t, a.TraceHash, b.TraceHash, "%s seed %d", st, seed)
		}
	}
	res := sim.Run(sim.Options{Seed: 1, CheckDeterminism: true}, program)
	require.NoError(t, res.Err)
}

// TestWithTimeoutPastTheEndOfVirtualTimeNeverFires: a deadline the clock
// cannot reach saturates, as a Sleep's does.
func TestWithTimeoutPastTheEndOfVirtualTimeNeverFires(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		rt.Sleep(time.Second)
		ctx, cancel := task.WithTimeout(rt, context.Background(), math.MaxInt64)
		defer cancel()
		rt.Sleep(time.Hour)
		return ctx.Err()
	})
	require.NoError(t, res.Err)
}
