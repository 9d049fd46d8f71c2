package task

// Queue is an unbounded FIFO between tasks, built on the runtime's Mutex and
// Cond so that one implementation serves the real runtime and the simulator.
// Its scheduling points are name+".lock" (every operation) and name+".get"
// (Get waiting for an item).
type Queue[T any] struct {
	mu       Mutex
	nonEmpty Cond
	getPoint string

	buf    []T // ring buffer; len(buf) is a power of two or zero
	head   int
	n      int
	closed bool
}

// QueueOption configures a Queue.
type QueueOption func(*queueOptions)

type queueOptions struct {
	name     string
	capacity int
}

// QueueName names the queue's scheduling points; the default is "queue".
func QueueName(name string) QueueOption { return func(o *queueOptions) { o.name = name } }

// QueueCapacity preallocates room for n items, up to QueueCapacityMax: a
// hint, not a bound. The queue still grows past it.
func QueueCapacity(n int) QueueOption { return func(o *queueOptions) { o.capacity = n } }

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
	q := &Queue[T]{mu: mu, nonEmpty: rt.NewCond(mu), getPoint: o.name + ".get"}
	if o.capacity > 0 {
		q.buf = make([]T, ceilPow2(min(o.capacity, QueueCapacityMax)))
	}
	return q
}

// Put appends v. It reports false, dropping v, when the queue is closed.
func (q *Queue[T]) Put(v T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
	q.nonEmpty.Signal()
	q.mu.Unlock()
	return true
}

// Get removes and returns the oldest item, blocking while the queue is empty
// and open. After Close it returns the remaining items, then ok == false.
func (q *Queue[T]) Get() (v T, ok bool) {
	q.mu.Lock()
	for q.n == 0 && !q.closed {
		q.nonEmpty.Wait(q.getPoint)
	}
	v, ok = q.pop()
	q.mu.Unlock()
	return v, ok
}

// TryGet removes and returns the oldest item without blocking; ok is false
// when the queue is empty.
func (q *Queue[T]) TryGet() (v T, ok bool) {
	q.mu.Lock()
	v, ok = q.pop()
	q.mu.Unlock()
	return v, ok
}

// Close wakes every waiting Get. Items already queued can still be taken;
// later Puts are refused. A second Close is a no-op.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	q.nonEmpty.Broadcast()
	q.mu.Unlock()
}

// Len returns the number of queued items.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	n := q.n
	q.mu.Unlock()
	return n
}

// pop takes the head item; q.mu is held.
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
