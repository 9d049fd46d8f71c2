package task_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// waitFor polls cond, sleeping on the runtime's clock, until it holds.
func waitFor(rt task.Runtime, cond func() bool) {
	for !cond() {
		rt.Sleep(time.Millisecond)
	}
}

// TestWeightedServesFirstComeFirstServed: units go to the waiting Acquire
// calls in the order they came, a large one first even when a later small
// one would fit; TryAcquire does not jump the queue either.
func TestWeightedServesFirstComeFirstServed(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		ctx := context.Background()
		s := task.NewWeighted(rt, "units", 10)
		require.NoError(t, s.Acquire(ctx, 10))
		g := task.NewGroup(rt, "acquirers")
		mu := rt.NewMutex("order")
		var order []string
		got := func(name string) { mu.Lock(); order = append(order, name); mu.Unlock() }
		g.Go("big", func() { assert.NoError(t, s.Acquire(ctx, 7)); got("big") })
		waitFor(rt, func() bool { return s.Waiting() == 1 })
		g.Go("small", func() { assert.NoError(t, s.Acquire(ctx, 2)); got("small") })
		waitFor(rt, func() bool { return s.Waiting() == 2 })

		s.Release(3) // 3 free: small would fit, but big came first
		assert.False(t, s.TryAcquire(1), "TryAcquire does not pass the waiting")
		rt.Sleep(5 * time.Millisecond)
		assert.Equal(t, 2, s.Waiting())
		s.Release(5) // 8 free: big takes 7, small waits for 2
		waitFor(rt, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 1 })
		assert.Equal(t, 1, s.Waiting(), "small still waits")
		s.Release(1)
		g.Wait()
		assert.Equal(t, []string{"big", "small"}, order)
		assert.Equal(t, int64(1+7+2), s.Held())
	})
}

// TestWeightedAcquireGivesUpWithItsContext: an Acquire whose ctx is done
// holds nothing and, when it was first in line, lets the ones behind it
// through; one larger than the size waits for its ctx alone.
func TestWeightedAcquireGivesUpWithItsContext(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		s := task.NewWeighted(rt, "units", 4)
		require.NoError(t, s.Acquire(context.Background(), 3))

		ctx, cancel := task.WithTimeout(rt, context.Background(), 10*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, s.Acquire(ctx, 5), context.DeadlineExceeded, "more than the size never comes")
		assert.Equal(t, 0, s.Waiting(), "and keeps no one waiting")

		quit, giveUp := context.WithCancel(context.Background())
		g := task.NewGroup(rt, "acquirers")
		var headErr, behindErr error
		g.Go("head", func() { headErr = s.Acquire(quit, 4) })
		waitFor(rt, func() bool { return s.Waiting() == 1 })
		g.Go("behind", func() { behindErr = s.Acquire(context.Background(), 1) })
		waitFor(rt, func() bool { return s.Waiting() == 2 })
		giveUp()
		g.Wait()
		assert.ErrorIs(t, headErr, context.Canceled)
		assert.NoError(t, behindErr, "the head gave up its place: the one behind fits")
		assert.Equal(t, int64(4), s.Held())

		done, stop := context.WithCancel(context.Background())
		stop()
		s.Release(4)
		assert.ErrorIs(t, s.Acquire(done, 1), context.Canceled, "a done ctx wins, units free or not")
		assert.Equal(t, int64(0), s.Held())
	})
}

func TestWeightedMisuse(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		s := task.NewWeighted(rt, "units", 4)
		require.NoError(t, s.Acquire(context.Background(), 2))
		assert.PanicsWithValue(t, `task: Release(3) of weighted semaphore "units", which holds 2: released more than held`, func() { s.Release(3) })
		assert.Equal(t, int64(2), s.Held(), "the failed Release changed nothing")
	})
	assert.PanicsWithValue(t, `task: NewWeighted("w", 0): size must be ≥ 1`, func() { task.NewWeighted(task.Real(), "w", 0) })
}

// TestWeightedNeverOverCommits: tasks acquiring and releasing drawn
// weights, some giving up, never hold more than the size together, and
// every unit comes back, whatever the interleaving.
func TestWeightedNeverOverCommits(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, func(rt task.Runtime) error {
			const size = 5
			s := task.NewWeighted(rt, "units", size)
			mu := rt.NewMutex("held")
			var held, most int64
			g := task.NewGroup(rt, "workers")
			for w := 0; w < 4; w++ {
				g.Go(fmt.Sprintf("w%d", w), func() {
					for i := 0; i < 3; i++ {
						n := int64(1 + (w+i)%size)
						ctx, cancel := task.WithTimeout(rt, context.Background(), time.Duration(1+w)*time.Millisecond)
						err := s.Acquire(ctx, n)
						cancel()
						if err != nil {
							continue
						}
						mu.Lock()
						held += n
						most = max(most, held)
						mu.Unlock()
						rt.Yield("work")
						mu.Lock()
						held -= n
						mu.Unlock()
						s.Release(n)
					}
				})
			}
			g.Wait()
			if most > size {
				return fmt.Errorf("%d units held at once, of %d", most, size)
			}
			if h := s.Held(); h != 0 {
				return fmt.Errorf("%d units still held at the end", h)
			}
			return nil
		})
		require.NoError(t, res.Err, "seed %d", seed)
	}
}
