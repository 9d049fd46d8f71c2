package task

import (
	"context"
	"fmt"
)

// Weighted is a weighted semaphore between tasks, as
// golang.org/x/sync/semaphore's Weighted: a caller acquires n of its size
// units at once, and callers are served first come, first served, so a
// large request is not starved by small ones that would fit before it.
// It is built on the runtime's Mutex and Cond, as Semaphore is; its
// scheduling points are name+".lock" (every operation) and name+".acquire"
// (Acquire waiting for its units).
type Weighted struct {
	rt           Runtime
	mu           Mutex
	granted      Cond // broadcast when units are handed to waiters
	name         string
	acquirePoint string
	size, cur    int64
	waiters      []*weightedWaiter // first come, first served
}

// weightedWaiter is an Acquire waiting for n units; ok is set, under the
// semaphore's lock, when they are handed to it.
type weightedWaiter struct {
	n  int64
	ok bool
}

// NewWeighted returns a weighted semaphore of size units, none held. It
// panics for size < 1.
func NewWeighted(rt Runtime, name string, size int64) *Weighted {
	if size < 1 {
		panic(fmt.Sprintf("task: NewWeighted(%q, %d): size must be ≥ 1", name, size))
	}
	mu := rt.NewMutex(name)
	return &Weighted{rt: rt, mu: mu, granted: rt.NewCond(mu), name: name, acquirePoint: name + ".acquire", size: size}
}

// Acquire takes n units, waiting at name+".acquire" behind every Acquire
// that came before it until they are free, or until ctx is done: then it
// returns ctx.Err() and holds nothing. A done ctx wins whenever Acquire
// looks, units free or not; units handed to an Acquire whose ctx was done
// by then are given back, as x/sync's are. n larger than the size can never
// be had: Acquire waits for ctx alone, and keeps no one else waiting.
func (s *Weighted) Acquire(ctx context.Context, n int64) error {
	if n < 0 {
		panic(fmt.Sprintf("task: Acquire(%d) of weighted semaphore %q: n must be ≥ 0", n, s.name))
	}
	made(s.mu, "Weighted").Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if n > s.size {
		return WaitContext(s.rt, ctx, s.mu, s.granted, s.acquirePoint, func() bool { return false })
	}
	if len(s.waiters) == 0 && s.size-s.cur >= n {
		s.cur += n
		return nil
	}
	w := &weightedWaiter{n: n}
	s.waiters = append(s.waiters, w)
	err := WaitContext(s.rt, ctx, s.mu, s.granted, s.acquirePoint, func() bool { return w.ok })
	if err == nil {
		return nil
	}
	if w.ok { // handed its units as its ctx was done: give them back
		s.cur -= n
	} else {
		for i, x := range s.waiters {
			if x == w {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
	}
	s.grant() // the units, or the place at the head, may serve those behind
	return err
}

// TryAcquire takes n units without waiting; it reports false, taking
// nothing, when they are not free or another Acquire waits before it.
func (s *Weighted) TryAcquire(n int64) bool {
	made(s.mu, "Weighted").Lock()
	ok := len(s.waiters) == 0 && s.size-s.cur >= n
	if ok {
		s.cur += n
	}
	s.mu.Unlock()
	return ok
}

// Release gives back n units and hands free units to the waiting Acquire
// calls in the order they came, stopping at the first that does not fit.
// It panics when fewer than n units are held.
func (s *Weighted) Release(n int64) {
	made(s.mu, "Weighted").Lock()
	if n < 0 || n > s.cur {
		held := s.cur
		s.mu.Unlock()
		panic(fmt.Sprintf("task: Release(%d) of weighted semaphore %q, which holds %d: released more than held", n, s.name, held))
	}
	s.cur -= n
	s.grant()
	s.mu.Unlock()
}

// grant hands free units to the waiters at the head, in order, and wakes
// them. The lock is held.
func (s *Weighted) grant() {
	woke := false
	for len(s.waiters) > 0 {
		w := s.waiters[0]
		if s.size-s.cur < w.n {
			break
		}
		s.cur += w.n
		w.ok = true
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		woke = true
	}
	if woke {
		s.granted.Broadcast()
	}
}

// Held returns the units held.
func (s *Weighted) Held() int64 {
	made(s.mu, "Weighted").Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Waiting returns the number of Acquire calls waiting for their units.
func (s *Weighted) Waiting() int {
	made(s.mu, "Weighted").Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}
