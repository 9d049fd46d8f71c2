package task

import (
	"context"
	"fmt"
)

// Semaphore is a counting semaphore between tasks, bounding how many hold
// one of its n permits at once, built on the runtime's Mutex and Cond as
// Queue is. It stands in for a buffered channel used as a semaphore, which a
// simulated task cannot block on. Its scheduling points are name+".lock"
// (every operation) and name+".acquire" (Acquire or AcquireContext waiting
// for a permit).
type Semaphore struct {
	rt           Runtime // for AcquireContext's AfterContext
	mu           Mutex
	free         Cond
	name         string
	acquirePoint string
	n, held      int
}

// NewSemaphore returns a semaphore of n permits, none held. It panics for
// n < 1.
func NewSemaphore(rt Runtime, name string, n int) *Semaphore {
	if n < 1 {
		panic(fmt.Sprintf("task: NewSemaphore(%q, %d): n must be ≥ 1", name, n))
	}
	mu := rt.NewMutex(name)
	return &Semaphore{rt: rt, mu: mu, free: rt.NewCond(mu), name: name, acquirePoint: name + ".acquire", n: n}
}

// Acquire takes a permit, blocking while all n are held.
func (s *Semaphore) Acquire() {
	made(s.mu, "Semaphore").Lock()
	for s.held >= s.n {
		s.free.Wait(s.acquirePoint)
	}
	s.held++
	s.mu.Unlock()
}

// AcquireContext is Acquire that gives up when ctx is done, the monitor's
// form of
//
//	select {
//	case sem <- struct{}{}:
//	case <-ctx.Done():
//		return ctx.Err()
//	}
//
// It takes a permit and returns nil, waiting at name+".acquire" while all
// n are held, or returns ctx.Err() (not context.Cause, as the standard
// library's calls that take a context do) when ctx is done, holding no
// permit then. A done ctx wins: whenever AcquireContext looks (on entry,
// under the semaphore's lock, and each time it wakes) a done ctx makes it
// return ctx.Err() even if a permit is free, as
// golang.org/x/sync/semaphore's Acquire does.
//
// It watches ctx with AfterContext only while it waits, and only a ctx
// that can be done; an AcquireContext that gives up passes on the wake-up
// of a Release it may have taken, so no other waiting Acquire is left
// behind with a permit free.
func (s *Semaphore) AcquireContext(ctx context.Context) error {
	made(s.mu, "Semaphore").Lock()
	err := WaitContext(s.rt, ctx, s.mu, s.free, s.acquirePoint, func() bool { return s.held < s.n })
	if err == nil {
		s.held++
	}
	s.mu.Unlock()
	return err
}

// TryAcquire takes a permit without blocking; it reports false when all n
// are held.
func (s *Semaphore) TryAcquire() bool {
	made(s.mu, "Semaphore").Lock()
	ok := s.held < s.n
	if ok {
		s.held++
	}
	s.mu.Unlock()
	return ok
}

// Release returns a permit and wakes an Acquire waiting for one. It panics
// when no permit is held: a Release without its Acquire.
func (s *Semaphore) Release() {
	made(s.mu, "Semaphore").Lock()
	if s.held == 0 {
		s.mu.Unlock()
		panic(fmt.Sprintf("task: Release of semaphore %q without an Acquire: no permit is held", s.name))
	}
	s.held--
	s.free.Signal()
	s.mu.Unlock()
}

// Held returns the number of permits held.
func (s *Semaphore) Held() int {
	made(s.mu, "Semaphore").Lock()
	h := s.held
	s.mu.Unlock()
	return h
}
