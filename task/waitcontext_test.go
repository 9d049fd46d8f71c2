package task_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// inbox is a caller's own monitor: a count of items, a Cond signalled once
// per item.
type inbox struct {
	mu       task.Mutex
	nonEmpty task.Cond
	items    int
}

func newInbox(rt task.Runtime) *inbox {
	mu := rt.NewMutex("inbox")
	return &inbox{mu: mu, nonEmpty: rt.NewCond(mu)}
}

func (b *inbox) put() {
	b.mu.Lock()
	b.items++
	b.nonEmpty.Signal()
	b.mu.Unlock()
}

func (b *inbox) take(rt task.Runtime, ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := task.WaitContext(rt, ctx, b.mu, b.nonEmpty, "inbox.take", func() bool { return b.items > 0 })
	if err == nil {
		b.items--
	}
	return err
}

// TestWaitContextOnACallersOwnMonitor: a Cond wait with a context returns
// when what it waits for is there, with ctx's error when ctx is done first
// (a virtual timeout under the simulator), and a waiter that gave up
// passes its wake-up on, so the item reaches the waiter that stayed.
func TestWaitContextOnACallersOwnMonitor(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		b := newInbox(rt)

		ctx, cancel := task.WithTimeout(rt, context.Background(), 20*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, b.take(rt, ctx), context.DeadlineExceeded, "nothing came before the timeout")

		done, stop := context.WithCancel(context.Background())
		stop()
		b.put()
		assert.ErrorIs(t, b.take(rt, done), context.Canceled, "a done ctx wins even with an item there")
		require.NoError(t, b.take(rt, context.Background()), "the item is still there")

		// Two waiters; one gives up. The one item put reaches the other.
		quit, giveUp := context.WithCancel(context.Background())
		g := task.NewGroup(rt, "waiters")
		var stayed, left error
		g.Go("stays", func() { stayed = b.take(rt, context.Background()) })
		g.Go("leaves", func() { left = b.take(rt, quit) })
		rt.Sleep(5 * time.Millisecond)
		b.mu.Lock()
		b.items++
		b.nonEmpty.Signal() // wakes one of them, maybe the one about to leave
		giveUp()
		b.mu.Unlock()
		g.Wait()
		assert.NoError(t, stayed, "the waiter that stayed got the item")
		assert.ErrorIs(t, left, context.Canceled)
		b.mu.Lock()
		assert.Equal(t, 0, b.items)
		b.mu.Unlock()
	})
}
