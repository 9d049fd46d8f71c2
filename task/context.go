package task

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmdst/llmdst/clock"
)

// WithTimeout is context.WithTimeout with the deadline on rt's clock:
// WithDeadline(rt, parent, rt.Now().Add(d)).
func WithTimeout(rt Runtime, parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return WithDeadlineCause(rt, parent, rt.Now().Add(d), nil)
}

// WithTimeoutCause is context.WithTimeoutCause with the deadline on rt's
// clock.
func WithTimeoutCause(rt Runtime, parent context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	return WithDeadlineCause(rt, parent, rt.Now().Add(d), cause)
}

// WithDeadline is context.WithDeadline with the deadline on rt's clock.
//
// On the real runtime it is context.WithDeadline. On any other runtime (the
// simulator) a context.WithDeadline would be due on the wall clock, which
// virtual time never reaches; this one is done when rt's clock reaches d,
// by a callback of rt.AfterFunc, which the simulator runs as a task, so that
// the expiry is part of the schedule and replays with it. As with the
// standard library:
//   - Deadline reports the earlier of d and the parent's deadline;
//   - once d passes, Err is context.DeadlineExceeded, and context.Cause
//     gives context.DeadlineExceeded too (WithDeadlineCause's cause, if
//     not nil); a d already past is due at once;
//   - the cancel function stops the timer and cancels with
//     context.Canceled;
//   - a cancelled parent cancels the context at once, with the parent's Err
//     and Cause (the context is built on context.WithCancelCause, so a
//     parent from package context or from this one knows it as a child,
//     and no goroutine watches it; a parent of another type may be watched by
//     a goroutine of package context, outside the schedule).
//
// The differences, under a simulated runtime:
//   - a context.WithCancel (or context.WithTimeout) of it, which it cancels
//     at its deadline, reports Err context.Canceled, though context.Cause
//     gives context.DeadlineExceeded: derive with this package's WithTimeout
//     or WithDeadline, which report context.DeadlineExceeded, or test
//     context.Cause (a context.WithValue of it shares its Err);
//   - context.WithTimeout and context.WithDeadline of it keep its virtual
//     deadline, earlier than any wall-clock one, and ignore their own;
//   - a parent's cancellation does not stop the timer: if the cancel
//     function is never called, it still fires at d as a task that does
//     nothing.
func WithDeadline(rt Runtime, parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return WithDeadlineCause(rt, parent, d, nil)
}

// WithDeadlineCause is context.WithDeadlineCause with the deadline on rt's
// clock; see WithDeadline.
func WithDeadlineCause(rt Runtime, parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc) {
	if IsReal(rt) {
		return context.WithDeadlineCause(parent, d, cause)
	}
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	inner, cancel := context.WithCancelCause(parent)
	c := &deadlineCtx{Context: inner, parent: parent, deadline: d, cancel: cancel}
	if cur, ok := parent.Deadline(); ok && cur.Before(d) {
		// The parent is due first and cancels c then, as the standard
		// library leaves it to do.
		c.deadline, c.inherited = cur, true
		return c, c.stop
	}
	dur := d.Sub(rt.Now())
	if dur <= 0 {
		c.expire(cause)
		return c, c.stop
	}
	if inner.Err() == nil {
		c.mu.Lock()
		c.timer = rt.AfterFunc(dur, func() { c.expire(cause) })
		c.mu.Unlock()
	}
	return c, c.stop
}

// VirtualDeadline reports whether ctx's deadline is one that WithDeadline or
// WithTimeout set on a simulated runtime: due on that runtime's clock, not
// on the wall clock, whether ctx is that context or derived from it.
func VirtualDeadline(ctx context.Context) bool {
	c, ok := ctx.Value(deadlineKey{}).(*deadlineCtx)
	if !ok {
		return false
	}
	if d, ok := ctx.Deadline(); !ok || !d.Equal(c.deadline) {
		return false // ctx has a deadline of its own, due first
	}
	if c.inherited {
		return VirtualDeadline(c.parent)
	}
	return true
}

type deadlineKey struct{}

// deadlineCtx is a context cancelled at a deadline on a simulated runtime's
// clock. The embedded context, from context.WithCancelCause, gives Done,
// Cause and the registration with the parent; deadlineCtx says why it was
// cancelled.
type deadlineCtx struct {
	context.Context
	parent   context.Context
	deadline time.Time // the earlier of its own and the parent's
	cancel   context.CancelCauseFunc

	// inherited: deadline is the parent's, due before c's own.
	inherited bool

	mu    sync.Mutex
	timer clock.Timer
	why   error // DeadlineExceeded or Canceled, once c cancelled itself
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Err is context.DeadlineExceeded once the deadline passed, context.Canceled
// once the cancel function ran, and the parent's Err when the parent
// cancelled c first.
func (c *deadlineCtx) Err() error {
	err := c.Context.Err()
	if err == nil {
		return nil
	}
	c.mu.Lock()
	why := c.why
	c.mu.Unlock()
	if why != nil {
		return why
	}
	if perr := c.parent.Err(); perr != nil {
		return perr
	}
	return err
}

func (c *deadlineCtx) Value(key any) any {
	if key == (deadlineKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func (c *deadlineCtx) String() string {
	return fmt.Sprintf("%v.WithDeadline(%v)", c.parent, c.deadline)
}

// expire cancels c at its deadline, unless something cancelled it first.
func (c *deadlineCtx) expire(cause error) {
	if c.settle(context.DeadlineExceeded) {
		c.cancel(cause)
	}
}

// stop is c's cancel function.
func (c *deadlineCtx) stop() {
	c.mu.Lock()
	t := c.timer
	c.timer = nil
	c.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	c.settle(context.Canceled)
	c.cancel(context.Canceled)
}

// settle records why c is done, if it is not done yet, and reports whether
// it was not. A c its parent cancelled is done: the parent's Err is its.
func (c *deadlineCtx) settle(why error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.why != nil || c.Context.Err() != nil {
		return false
	}
	c.why = why
	return true
}
