package task

import (
	"context"
	"fmt"
)

// Queue is a FIFO between tasks, built on the runtime's Mutex and Cond so
// that one implementation serves the real runtime and the simulator. It is
// unbounded unless made with QueueBound, which gives it the backpressure of
// a buffered channel. Its scheduling points are name+".lock" (every
// operation), name+".get" (Get or GetContext waiting for an item) and, for
// a bounded queue, name+".put" (Put or PutContext waiting for room).
type Queue[T any] struct {
	rt       Runtime // for GetContext's and PutContext's AfterContext
	mu       Mutex
	nonEmpty Cond
	getPoint string

	bounded *queueBound // nil when unbounded, keeping the common Queue small

	buf    []T // ring buffer; len(buf) is a power of two or zero
	head   int
	n      int
	closed bool
}

// queueBound is the state of a bounded queue: the most items it holds and
// where Put waits for room, apart from the getters so that a Signal wakes a
// task that can use it.
type queueBound struct {
	n        int
	notFull  Cond
	putPoint string
}

// QueueOption configures a Queue.
type QueueOption func(*queueOptions)

type queueOptions struct {
	name     string
	capacity int
	bound    int
}

// QueueName names the queue's scheduling points; the default is "queue".
func QueueName(name string) QueueOption { return func(o *queueOptions) { o.name = name } }

// QueueCapacity preallocates room for n items, up to QueueCapacityMax: a
// hint, not a bound (that is QueueBound). The queue still grows past it.
func QueueCapacity(n int) QueueOption { return func(o *queueOptions) { o.capacity = n } }

// QueueBound makes the queue hold at most n items, n ≥ 1: Put blocks while
// it is full, as a send on a channel made with make(chan T, n) does, and
// TryPut refuses. It panics for n < 1; an unbounded queue is the default.
func QueueBound(n int) QueueOption {
	if n < 1 {
		panic(fmt.Sprintf("task: QueueBound(%d): n must be ≥ 1", n))
	}
	return func(o *queueOptions) { o.bound = n }
}

// QueueCapacityMax is the most room QueueCapacity preallocates, so that a
// huge hint (math.MaxInt for "unbounded") is not an allocation that fails.
const QueueCapacityMax = 1 << 16

// NewQueue returns an empty, open queue.
func NewQueue[T any](rt Runtime, opts ...QueueOption) *Queue[T] {
	o := queueOptions{name: "queue"}
	for _, opt := range opts {
		opt(&o)
	}
	mu := rt.NewMutex(o.name)
	q := &Queue[T]{rt: rt, mu: mu, nonEmpty: rt.NewCond(mu), getPoint: o.name + ".get"}
	if o.bound > 0 {
		q.bounded = &queueBound{n: o.bound, notFull: rt.NewCond(mu), putPoint: o.name + ".put"}
	}
	if o.capacity > 0 {
		q.buf = make([]T, ceilPow2(min(o.capacity, QueueCapacityMax)))
	}
	return q
}

// Put appends v. On a bounded queue it blocks while the queue is full and
// open. It reports false, dropping v, when the queue is closed, before or
// while Put waits.
func (q *Queue[T]) Put(v T) bool {
	made(q.mu, "Queue").Lock()
	if b := q.bounded; b != nil && q.n >= b.n {
		q.waitRoom(b)
	}
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.push(v)
	q.mu.Unlock()
	return true
}

// PutContext is Put that gives up when ctx is done, the monitor's form of
//
//	select {
//	case ch <- v:
//	case <-ctx.Done():
//		return ctx.Err()
//	}
//
// It appends v and returns nil, waiting at name+".put" while a bounded
// queue is full; an unbounded queue never makes it wait. It returns
// ErrClosed when the queue is closed, before or while it waits, and
// ctx.Err() (not context.Cause, as the standard library's calls that take
// a context do) when ctx is done. A done ctx wins: whenever PutContext
// looks (on entry, under the queue's lock, and each time it wakes) a done
// ctx makes it return ctx.Err() even if there is room, where a select
// would pick one ready case at random. An error means v was not queued.
//
// It watches ctx with AfterContext only while it waits, and only a ctx
// that can be done; a PutContext that gives up passes on the wake-up of
// a Get it may have taken, so no other waiting Put is left behind.
func (q *Queue[T]) PutContext(ctx context.Context, v T) error {
	made(q.mu, "Queue").Lock()
	var err error
	if b := q.bounded; b != nil {
		err = WaitContext(q.rt, ctx, q.mu, b.notFull, b.putPoint, func() bool { return q.closed || q.n < b.n })
	} else {
		err = ctx.Err()
	}
	if err == nil && q.closed {
		err = ErrClosed
	}
	if err == nil {
		q.push(v)
	}
	q.mu.Unlock()
	return err
}

// TryPut appends v without blocking. It reports false, dropping v, when the
// queue is closed or, bounded, full.
func (q *Queue[T]) TryPut(v T) bool {
	made(q.mu, "Queue").Lock()
	if q.closed || (q.bounded != nil && q.n >= q.bounded.n) {
		q.mu.Unlock()
		return false
	}
	q.push(v)
	q.mu.Unlock()
	return true
}

// push appends v and wakes a Get; q.mu is held and the queue has room.
func (q *Queue[T]) push(v T) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
	q.nonEmpty.Signal()
}

// waitRoom parks Put while the bounded queue is full and open; q.mu is
// held.
func (q *Queue[T]) waitRoom(b *queueBound) {
	for q.n >= b.n && !q.closed {
		b.notFull.Wait(b.putPoint)
	}
}

// Get removes and returns the oldest item, blocking while the queue is empty
// and open. After Close it returns the remaining items, then ok == false.
func (q *Queue[T]) Get() (v T, ok bool) {
	made(q.mu, "Queue").Lock()
	for q.n == 0 && !q.closed {
		q.nonEmpty.Wait(q.getPoint)
	}
	v, ok = q.pop()
	if ok && q.bounded != nil {
		q.bounded.notFull.Signal()
	}
	q.mu.Unlock()
	return v, ok
}

// GetContext is Get that gives up when ctx is done, the monitor's form of
//
//	select {
//	case v, ok := <-ch:
//	case <-ctx.Done():
//		return ctx.Err()
//	}
//
// It removes and returns the oldest item with a nil error, waiting at
// name+".get" while the queue is empty and open. It returns ErrClosed once
// the queue is closed and drained (where Get reports ok == false), and
// ctx.Err() (not context.Cause, as the standard library's calls that take
// a context do) when ctx is done. A done ctx wins: whenever GetContext
// looks (on entry, under the queue's lock, and each time it wakes) a done
// ctx makes it return ctx.Err() even if an item is queued, where a select
// would pick one ready case at random. A GetContext that returns an error
// has taken nothing.
//
// It watches ctx with AfterContext only while it waits, and only a ctx
// that can be done; a GetContext that gives up passes on the wake-up of a
// Put it may have taken, so no other waiting Get is left behind.
func (q *Queue[T]) GetContext(ctx context.Context) (v T, err error) {
	made(q.mu, "Queue").Lock()
	err = WaitContext(q.rt, ctx, q.mu, q.nonEmpty, q.getPoint, func() bool { return q.n > 0 || q.closed })
	switch {
	case err != nil:
	case q.n > 0:
		v, _ = q.pop()
		if q.bounded != nil {
			q.bounded.notFull.Signal()
		}
	default:
		err = ErrClosed
	}
	q.mu.Unlock()
	return v, err
}

// TryGet removes and returns the oldest item without blocking; ok is false
// when the queue is empty. Get and TryGet wake a Put waiting for room.
func (q *Queue[T]) TryGet() (v T, ok bool) {
	made(q.mu, "Queue").Lock()
	v, ok = q.pop()
	if ok && q.bounded != nil {
		q.bounded.notFull.Signal()
	}
	q.mu.Unlock()
	return v, ok
}

// Close wakes every waiting Get and Put. Items already queued can still be
// taken; waiting and later Puts are refused. A second Close is a no-op.
func (q *Queue[T]) Close() {
	made(q.mu, "Queue").Lock()
	q.closed = true
	q.nonEmpty.Broadcast()
	if q.bounded != nil {
		q.bounded.notFull.Broadcast()
	}
	q.mu.Unlock()
}

// Len returns the number of queued items.
func (q *Queue[T]) Len() int {
	made(q.mu, "Queue").Lock()
	n := q.n
	q.mu.Unlock()
	return n
}

// pop takes the head item; q.mu is held. Its callers wake a Put waiting
// for the room it leaves in a bounded queue.
func (q *Queue[T]) pop() (v T, ok bool) {
	if q.n == 0 {
		return v, false
	}
	i := q.head
	v = q.buf[i]
	var zero T
	q.buf[i] = zero
	q.head = (i + 1) & (len(q.buf) - 1)
	q.n--
	return v, true
}

func (q *Queue[T]) grow() {
	size := len(q.buf) * 2
	if size == 0 {
		size = 8
	}
	buf := make([]T, size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = buf, 0
}

func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
