package task

import "fmt"

// Semaphore is a counting semaphore between tasks, bounding how many hold
// one of its n permits at once, built on the runtime's Mutex and Cond as
// Queue is. It stands in for a buffered channel used as a semaphore, which a
// simulated task cannot block on. Its scheduling points are name+".lock"
// (every operation) and name+".acquire" (Acquire waiting for a permit).
type Semaphore struct {
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
	return &Semaphore{mu: mu, free: rt.NewCond(mu), name: name, acquirePoint: name + ".acquire", n: n}
}

// Acquire takes a permit, blocking while all n are held.
func (s *Semaphore) Acquire() {
	s.mu.Lock()
	for s.held >= s.n {
		s.free.Wait(s.acquirePoint)
	}
	s.held++
	s.mu.Unlock()
}

// TryAcquire takes a permit without blocking; it reports false when all n
// are held.
func (s *Semaphore) TryAcquire() bool {
	s.mu.Lock()
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
	s.mu.Lock()
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
	s.mu.Lock()
	h := s.held
	s.mu.Unlock()
	return h
}
