package task

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/llmdst/llmdst/clock"
)

// Runtime runs tasks and provides the blocking primitives they share.
type Runtime interface {
	clock.Clock
	// Go starts fn as a new task. The name appears in traces ("engine-core",
	// "client-1"); several tasks may share one.
	Go(name string, fn func())
	// Yield is a point where another task may run first. It is a no-op on the
	// real runtime.
	Yield(point string)
	// Sleep parks the calling task for d on the runtime's clock. A d ≤ 0 is a
	// plain Yield.
	Sleep(d time.Duration)
	// NewMutex returns an unlocked mutex. Lock is a scheduling point named
	// name+".lock".
	NewMutex(name string) Mutex
	// NewCond returns a condition variable bound to m, which must come from
	// the same runtime.
	NewCond(m Mutex) Cond
}

// Mutex is a mutual-exclusion lock between tasks.
type Mutex interface {
	Lock()
	Unlock()
}

// Cond is a condition variable between tasks.
type Cond interface {
	// Wait unlocks the cond's mutex, parks the task at point until Signal or
	// Broadcast wakes it, and locks the mutex again before returning.
	Wait(point string)
	// Signal wakes the task that has waited longest, if any.
	Signal()
	// Broadcast wakes every waiting task.
	Broadcast()
}

// ContextWatcher is implemented by runtimes that can run a callback when a
// context is done: the real runtime with context.AfterFunc, the simulator by
// polling the context at every decision and running the callback as a
// simulated task, so that a cancellation from a simulated task stays
// deterministic.
type ContextWatcher interface {
	// AfterContext runs f once ctx is done, as context.AfterFunc does; stop
	// reports whether it prevented f from running.
	AfterContext(ctx context.Context, f func()) (stop func() bool)
}

// AfterContext arranges for f to run when ctx is done, if rt supports it. It
// reports false when rt cannot watch contexts; callers then check ctx.Err at
// their own scheduling points.
func AfterContext(rt Runtime, ctx context.Context, f func()) (stop func() bool, ok bool) {
	w, ok := rt.(ContextWatcher)
	if !ok {
		return func() bool { return false }, false
	}
	return w.AfterContext(ctx, f), true
}

// Stopping reports whether v, a value recovered from a panic, is a runtime
// stopping the task rather than a failure: the simulator unwinds the tasks
// still parked when a run ends by panicking in them. Code that recovers
// panics to report them must panic again with such a value, or it reports
// a failure that did not happen; the simulator then ends the task with
// runtime.Goexit when it comes back to wait or yield.
func Stopping(v any) bool {
	_, ok := v.(interface{ TaskStopping() })
	return ok
}

// Real returns the runtime of real goroutines and the wall clock. Yield is a
// no-op; Mutex and Cond are package sync's.
func Real() Runtime { return realRuntime{} }

// IsReal reports whether rt is the real runtime.
func IsReal(rt Runtime) bool {
	_, ok := rt.(realRuntime)
	return ok
}

type realRuntime struct{}

var (
	_ Runtime        = realRuntime{}
	_ ContextWatcher = realRuntime{}
	_ Mutex          = (*realMutex)(nil)
	_ Cond           = (*realCond)(nil)
)

func (realRuntime) Now() time.Time { return time.Now() }

func (realRuntime) AfterFunc(d time.Duration, f func()) clock.Timer { return time.AfterFunc(d, f) }

func (realRuntime) Go(_ string, fn func()) { go fn() }

func (realRuntime) Yield(string) {}

func (realRuntime) Sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

func (realRuntime) NewMutex(string) Mutex { return &realMutex{} }

func (realRuntime) NewCond(m Mutex) Cond {
	rm, ok := m.(*realMutex)
	if !ok {
		panic(fmt.Sprintf("task: NewCond needs a Mutex from the same runtime, got %T", m))
	}
	return &realCond{c: sync.Cond{L: &rm.mu}}
}

func (realRuntime) AfterContext(ctx context.Context, f func()) func() bool {
	return context.AfterFunc(ctx, f)
}

type realMutex struct{ mu sync.Mutex }

func (m *realMutex) Lock()   { m.mu.Lock() }
func (m *realMutex) Unlock() { m.mu.Unlock() }

type realCond struct{ c sync.Cond }

func (c *realCond) Wait(string) { c.c.Wait() }
func (c *realCond) Signal()     { c.c.Signal() }
func (c *realCond) Broadcast()  { c.c.Broadcast() }

// made returns mu, the monitor of a value of type typ (Queue, Group,
// Semaphore, Weighted, RWMutex, Once), for the value's methods to lock.
// Those monitors come from the runtime, so only the types' constructors
// make them. A zero value, where the sync type's would be ready for use,
// panics here saying so, rather than on a nil pointer with nothing to say
// why.
func made(mu Mutex, typ string) Mutex {
	if mu == nil {
		panicZero(typ)
	}
	return mu
}

//go:noinline
func panicZero(typ string) {
	panic(fmt.Sprintf("task: a zero %s is not ready for use: its lock comes from the runtime, so make it with task.New%s", typ, typ))
}
