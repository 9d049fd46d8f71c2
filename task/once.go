package task

import "sync/atomic"

// Once runs a function once between tasks, as sync.Once does, built on the
// runtime's Mutex and Cond. It stands in for sync.Once, whose second Do
// blocks on a real lock while the first one's function runs: under the
// simulator that never gives the baton back when the function reaches a
// scheduling point. It needs the runtime, so it is made with NewOnce; a
// zero Once is not ready for use, and its Do panics saying so.
//
// Its scheduling points are name+".lock" (a Do before the function has
// returned) and name+".wait" (a Do waiting for the function that another
// Do runs).
type Once struct {
	mu        Mutex
	returned  Cond
	waitPoint string
	running   bool        // a Do is running f; guarded by mu
	done      atomic.Bool // f has returned or panicked
}

// NewOnce returns a Once whose function has not run.
func NewOnce(rt Runtime, name string) *Once {
	mu := rt.NewMutex(name)
	return &Once{mu: mu, returned: rt.NewCond(mu), waitPoint: name + ".wait"}
}

// Do calls f if and only if Do is called for the first time on o. A Do
// that comes while that f runs waits at name+".wait" until it returns, so
// when any Do returns f has returned and its effects are seen.
//
// If f panics, Do considers it returned, as sync.Once does: the Do that ran
// it panics with the same value, the waiting calls are woken and return,
// and no later Do calls f again. A Do that f itself calls on o waits for
// f for ever: a deadlock, which the simulator reports.
//
// Once f has returned, Do returns at once, without a scheduling point.
func (o *Once) Do(f func()) {
	if o.done.Load() {
		return
	}
	made(o.mu, "Once").Lock()
	if o.done.Load() {
		o.mu.Unlock()
		return
	}
	if o.running {
		for !o.done.Load() {
			o.returned.Wait(o.waitPoint)
		}
		o.mu.Unlock()
		return
	}
	o.running = true
	o.mu.Unlock()
	defer o.finish()
	f()
}

// finish marks f returned, normally or by a panic, and wakes the Do calls
// waiting for it.
func (o *Once) finish() {
	o.mu.Lock()
	o.running = false
	o.done.Store(true)
	o.returned.Broadcast()
	o.mu.Unlock()
}
