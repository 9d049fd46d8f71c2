package task

import (
	"context"
	"errors"
)

// ErrClosed is the error of a Queue's GetContext once the queue is closed
// and drained, and of its PutContext once it is closed: what Get and Put
// report with ok == false.
var ErrClosed = errors.New("task: queue closed")

// ctxWake wakes the tasks waiting on a Cond when a context is done while a
// call that waits on that Cond with the context still waits: the monitor's
// form of select's case <-ctx.Done(). The caller checks ctx.Err() under the
// Cond's mutex before each Wait, and the callback takes that mutex before
// it broadcasts, so a context done between the check and the Wait still
// wakes the call.
type ctxWake struct {
	stop func() bool
	// waiting is true until the call ends (guarded by the Cond's mutex):
	// a callback that runs after it ended, its context done as it ended
	// or it seen by a stop that came too late, wakes no one.
	waiting bool
}

// watchCtx registers the wake-up for a call about to wait on c, whose
// mutex mu the caller holds. It returns nil when ctx is never done
// (context.Background) and there is nothing to watch. On a Runtime that is
// not a ContextWatcher nothing watches ctx either, and the call sees it
// done only when something else wakes it.
func watchCtx(rt Runtime, ctx context.Context, mu Mutex, c Cond) *ctxWake {
	if ctx.Done() == nil {
		return nil
	}
	w := &ctxWake{waiting: true}
	w.stop, _ = AfterContext(rt, ctx, func() {
		mu.Lock()
		if w.waiting {
			c.Broadcast()
		}
		mu.Unlock()
	})
	return w
}

// end stops the watch once the call no longer waits; the Cond's mutex is
// held. It is a no-op on nil.
func (w *ctxWake) end() {
	if w == nil {
		return
	}
	w.waiting = false
	w.stop()
}

// WaitContext is a Cond wait with a context, the monitor's form of a
// select on a channel and ctx.Done(): the caller holds mu, c's mutex, and
// WaitContext waits at point on c until ready reports that what the call
// waits for is there (or will never come), returning nil, or until ctx is
// done, returning ctx.Err(). ready is called with mu held, after every
// wake-up; a done ctx wins whenever it looks, ready or not. ctx is watched
// (on a Runtime that is a ContextWatcher, as both of this module's are)
// only once the call has to wait. A call that gives up after it waited,
// with what it waited for there, passes on the Signal that may have woken
// it rather than another waiter, which would then wait on beside it.
//
//	mu.Lock()
//	err := task.WaitContext(rt, ctx, mu, nonEmpty, "inbox.get", func() bool { return len(items) > 0 })
//	// err == nil: items is not empty; else ctx.Err()
//	mu.Unlock()
func WaitContext(rt Runtime, ctx context.Context, mu Mutex, c Cond, point string, ready func() bool) error {
	var (
		err    error
		w      *ctxWake
		waited bool
	)
	for {
		if err = ctx.Err(); err != nil {
			break
		}
		if ready() {
			break
		}
		if !waited {
			w, waited = watchCtx(rt, ctx, mu, c), true
		}
		c.Wait(point)
	}
	w.end()
	if err != nil && waited && ready() {
		c.Signal()
	}
	return err
}
