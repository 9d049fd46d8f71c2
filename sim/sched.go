package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/llmdst/llmdst/clock"
	"github.com/llmdst/llmdst/internal/stacks"
	"github.com/llmdst/llmdst/task"
)

// unwinding is the panic value that unwinds a parked task when its run ends.
type unwinding struct{}

// TaskStopping marks unwinding for task.Stopping.
func (unwinding) TaskStopping() {}

// sched is one run: the task.Runtime handed to the simulated program, the
// baton-passing loop, the virtual clock and the recorder.
type sched struct {
	opts   *Options
	debug  bool // opts.Debug, read at every call
	sw     Switcher
	policy Policy
	choose Chooser // the policy's draws, guarded unless they cannot fail

	// The run's tasks, mutexes and conds, allocated a few at a time.
	taskSlab  slab[Task]
	mutexSlab slab[simMutex]
	condSlab  slab[simCond]

	tasks []*Task // every task ever started, by id
	live  []*Task // tasks not done, by id
	// slots[1:] are the runnable tasks other than the running one, by id;
	// slots[0] is where the task at a point goes when it may continue, so
	// that the candidates are one slice without copying.
	slots []*Task
	cur   *Task // the task holding the baton
	next  *Task // the task that runs next; nil ends the run
	view  View

	pointCache *pointCache // a pool's, shared by its runs, or the run's own
	watches    []*ctxWatch // contexts to poll at every decision

	now      time.Duration // virtual time since Epoch
	timers   timerHeap
	timerSeq uint64
	spare    []*timerEntry // fired sleepers' entries, for reuse

	steps     int64
	switches  int64
	stepsMax  int64
	hash      hasher
	schedule  Schedule
	trace     *Trace
	err       error
	ended     bool
	unwinding bool
	// draining is the task let go on in a deferred call of its own panic
	// after the run ended (see drain); nil until then.
	draining *drainState
	// spin counts the runtime calls a task makes after the run ended, in
	// its deferred calls, bounded by drainCallsMax (see drainCall).
	spin struct {
		t     *Task
		calls int
	}
	// spun names the tasks whose deferred calls the unwind had to stop.
	spun    []string
	mainErr error
	reached []string // task.Reach's names, each once, in the order first reached
	// reachedBuf holds a run's first few names, which a scenario's
	// checker reaches in most seeds: no allocation for them.
	reachedBuf [4]string
}

var (
	_ task.Runtime        = (*sched)(nil)
	_ task.ContextWatcher = (*sched)(nil)
	_ task.Mutex          = (*simMutex)(nil)
	_ task.Cond           = (*simCond)(nil)
	_ clock.Timer         = (*simTimer)(nil)
	_ clock.Resetter      = (*simTimer)(nil)
)

func newSched(opts *Options, c Chooser) *sched {
	s := &sched{opts: opts, debug: opts.Debug, sw: opts.switcher, hash: newHasher(), slots: make([]*Task, 1, 16)}
	if opts.Pool != nil {
		s.pointCache = &opts.Pool.points
		s.taskSlab.hint, s.mutexSlab.hint, s.condSlab.hint = opts.Pool.slabs[0], opts.Pool.slabs[1], opts.Pool.slabs[2]
		if n := min(opts.Pool.slabs[0], slabHintMax); n > 0 {
			s.tasks, s.live = make([]*Task, 0, n), make([]*Task, 0, n)
		}
	} else {
		s.pointCache = new(pointCache)
	}
	s.schedule.off = opts.NoRecord
	s.schedule.record()
	if pcg, ok := c.(*PCGChooser); ok {
		s.choose = pcgDraws{pcg}
	} else {
		s.choose = &guardedDraws{inner: c, s: s}
	}
	s.policy = opts.strategy().NewPolicy(s.choose)
	s.stepsMax = opts.StepsMax
	if s.stepsMax == 0 {
		s.stepsMax = DefaultStepsMax
	}
	if !opts.NoRecord && (s.stepsMax < 0 || s.stepsMax > ScheduleStepsMax) {
		s.stepsMax = ScheduleStepsMax // what a schedule can hold
	}
	if opts.Trace {
		s.trace = &Trace{}
	}
	s.view.Chooser = s.choose
	s.view.s = s
	return s
}

// run executes main as the first task and returns when the run is over and
// every task has been unwound.
func (s *sched) run(main func(rt task.Runtime) error) {
	if s.ended {
		// The strategy's first draws failed (NewPolicy): the run is over
		// before its first decision, and main would only run with every
		// scheduling point a no-op.
		return
	}
	m := s.spawn("main", func() {
		err := main(s)
		s.mainErr = err
	})
	s.removeRunnable(m)
	s.next = m
	// The loop is the root of the chain of hand-offs (see stop): it resumes
	// a task only when the chain above it is empty, which is at the start
	// and, with SwitchChan, at every hand-off.
	for s.next != nil {
		s.resume(s.next)
	}
	s.cur = nil
	s.unwind()
}

// resume runs t, which waits at home, from the loop until t hands the
// baton back down the chain. stop does the same from a task.
func (s *sched) resume(t *Task) {
	s.cur = t
	t.state = stateRunning
	t.co.resume()
	if t.state == stateDone {
		s.release(t) // its body returned (or recovered a panic)
	}
}

// spawn creates a runnable task on behalf of the running task (Go). It does
// not start running until chosen.
func (s *sched) spawn(name string, fn func()) *Task {
	parent := -1
	if s.cur != nil {
		parent = s.cur.id
	}
	return s.spawnBy(name, fn, parent)
}

// spawnBy creates a runnable task on behalf of task by; -1 is the simulator,
// which starts the tasks of timers and of done contexts: the task at the
// scheduling point did not, and may have exited already.
func (s *sched) spawnBy(name string, fn func(), by int) *Task {
	t := s.taskSlab.new()
	*t = Task{s: s, id: len(s.tasks), name: name, fn: fn, state: stateRunnable, point: "start", kind: PointStart}
	t.co = newCoroutine(s.sw, s.opts.Pool, t)
	t.pull, _ = t.co.(*pullCoro)
	s.tasks = append(s.tasks, t)
	s.live = append(s.live, t)
	s.liveChanged()
	s.slots = append(s.slots, t) // the newest id sorts last
	s.hash.word(hkSpawn)
	s.hash.word(uint64(t.id))
	s.hash.str(name)
	if s.trace != nil {
		s.event(Event{Kind: EvSpawn, Task: by, Arg: t.id, Point: name})
	}
	return t
}

// body runs inside the task's coroutine.
func (s *sched) body(t *Task) {
	if s.opts.Debug {
		t.goid = stacks.ID()
	}
	defer s.finish(t)
	t.fn()
	t.returned = true
}

// finish runs as the task's last deferred call: it tells a normal return from
// a panic, an unwind and a runtime.Goexit, and passes the baton on.
func (s *sched) finish(t *Task) {
	if !t.returned {
		r := recover()
		switch r.(type) {
		case unwinding:
			if s.drains(t) {
				// The deferred call that was let go on was stopped again
				// (see drainCall): what was in flight is lost, not where.
				s.failUnwound(&PanicError{TaskID: t.id, Task: t.name, Value: lostPanic, Stack: s.draining.stack, Goexit: s.draining.exit})
			}
			t.state = stateDone
			return
		case nil:
			// runtime.Goexit (t.FailNow from a task, say). It cannot be
			// stopped, so park here until the run is unwound; the Goexit then
			// completes on the throwaway goroutine that unwinds this task.
			if s.unwinding {
				if s.drains(t) {
					s.failUnwound(&PanicError{TaskID: t.id, Task: t.name, Goexit: true})
				}
				t.state = stateDone
				return
			}
			s.fail(&PanicError{TaskID: t.id, Task: t.name, Goexit: true})
			s.exitTask(t)
			t.state = stateGoexit
			s.next = nil
			t.co.yield()
			return
		default:
			if s.unwinding {
				if s.drains(t) {
					// The task's own panic, begun before the run ended.
					s.failUnwound(&PanicError{TaskID: t.id, Task: t.name, Value: r, Stack: debug.Stack(), site: panicSite(r)})
				}
				// Otherwise a deferred call failed while the task was being
				// unwound after the run ended; the run's outcome stands.
				t.state = stateDone
				return
			}
			s.fail(&PanicError{TaskID: t.id, Task: t.name, Value: r, Stack: debug.Stack(), site: panicSite(r)})
			s.exitTask(t)
			s.next = nil
			return
		}
	}
	s.exitTask(t)
	if t.id == 0 {
		s.ended = true
		s.next = nil
		return
	}
	if s.unwinding || s.ended {
		s.next = nil
		return
	}
	defer func() {
		// The strategy may panic (a bad index, a wait that is not after
		// now): the run fails with it. Chooser panics are caught earlier,
		// by guardedDraws.
		if r := recover(); r != nil {
			s.fail(&PanicError{TaskID: t.id, Task: t.name, Value: r, Stack: debug.Stack(), site: panicSite(r)})
			s.next = nil
		}
	}()
	t.point, t.kind = "exit", PointExit
	s.next = s.decide(nil, t)
	if s.next != nil {
		s.switches++
	}
}

// liveChanged shows the strategies the new set of live tasks.
func (s *sched) liveChanged() {
	s.view.Live = s.live
	s.view.liveVersion++
}

func (s *sched) exitTask(t *Task) {
	t.state = stateDone
	for i, l := range s.live {
		if l == t {
			s.live = append(s.live[:i], s.live[i+1:]...)
			s.liveChanged()
			break
		}
	}
	s.removeRunnable(t)
	s.hash.word(hkExit)
	s.hash.word(uint64(t.id))
	if s.trace != nil {
		s.event(Event{Kind: EvExit, Task: t.id})
	}
}

// release hands the goroutine of a task whose body is over to the pool, or
// ends it: it is parked between bodies, with nothing of the task left on it.
func (s *sched) release(t *Task) {
	if c := t.pull; c != nil {
		t.co, t.pull = nil, nil
		s.opts.Pool.give(c)
	}
}

// unwind stops every task that is still parked, each from a throwaway
// goroutine, so that no goroutine outlives Run.
func (s *sched) unwind() {
	s.unwinding = true
	s.ended = true
	for i := 0; i < len(s.tasks); i++ { // tasks may start tasks while unwinding
		t := s.tasks[i]
		if t.co == nil {
			continue // released
		}
		if t.state == stateDone {
			s.release(t) // its goroutine waits for a next body
			continue
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.cur = t
			t.co.stop()
		}()
		<-done
		t.state = stateDone
	}
	s.cur = nil
}

// failUnwound records a panic or runtime.Goexit of a task that the unwind
// let finish (see drain). It began before the run ended, so it is a failure
// of the run even when the run ended first, by main returning or by a
// deadlock the panicking task was part of; it is joined to whatever error
// ended the run rather than hidden by it.
func (s *sched) failUnwound(pe *PanicError) {
	if s.err == nil {
		s.err = pe
	} else {
		s.err = errors.Join(s.err, pe)
	}
}

// lostPanic is the PanicError value of a panic that the unwind let go on but
// could not let finish: its value is gone, its stack is kept.
const lostPanic = "sim: a panic was in flight when the run ended, and a deferred call it ran had to be stopped again before the panic could finish; its value is lost (the stack shows where it began)"

// drainCallsMax bounds the runtime calls a draining task makes after the run
// ended: Yield and Lock return at once then, so a deferred call that loops
// on them waiting for another task would otherwise spin forever.
const drainCallsMax = 10_000

// drain decides what a task at a scheduling point does when the run ends
// under it. Normally it is stopped by a panic(unwinding{}), which runs its
// deferred calls. But when the point is inside a deferred call of the
// task's own panic (or runtime.Goexit), that new panic would replace the one
// in flight, whose value then could not be recovered anywhere: a task that
// panicked, and whose deferred Close took a lock, would pass silently if
// main returned meanwhile. So such a task is instead let go on, in the mode
// every deferred call runs in once the run is over (Lock takes the lock,
// Yield returns), and the panic then reaches finish, which reports it, or
// is recovered by the task, which is then not a failure. drain reports
// whether the task goes on.
//
//go:noinline
func (s *sched) drain(t *Task) bool {
	if s.drains(t) {
		return false
	}
	inFlight, goexit := panicInFlight()
	if !inFlight {
		return false
	}
	s.draining = &drainState{t: t, exit: goexit, stack: debug.Stack()}
	return true
}

// drainState is the task that drain let go on, and what it needs to report
// its panic. The unwind stops tasks one at a time, so there is one at most;
// it is kept here rather than on every task of every run.
type drainState struct {
	t     *Task
	exit  bool   // what was in flight was a runtime.Goexit
	stack []byte // the task's stack when the run ended
}

// drains reports whether t is the task drain let go on.
func (s *sched) drains(t *Task) bool { return s.draining != nil && s.draining.t == t }

// drainCall counts a runtime call made after the run ended, by the task
// drain let go on or one the unwind stopped: it is stopped, with the panic
// that unwinds tasks, once it has made drainCallsMax of them. A task that
// swallowed that panic is ended (see stopTask).
func (s *sched) drainCall() {
	t := s.cur
	if t == nil {
		return
	}
	s.endIfSwallowed(t)
	// A deferred call that waits for another task (polls a queue's Len, a
	// flag under a lock) would spin for ever: nothing else runs now. Past
	// drainCallsMax calls the task is stopped (again), which ends that
	// deferred call and runs its others; a task stopped by the unwind gets
	// that many for each, and is named in the run's warnings.
	draining := s.drains(t)
	if !draining && !(t.stopped && s.unwinding) {
		return
	}
	if s.spin.t != t {
		s.spin.t, s.spin.calls = t, 0
	}
	if s.spin.calls++; s.spin.calls <= drainCallsMax {
		return
	}
	if !draining {
		s.spin.calls = 0
		s.spun = append(s.spun, fmt.Sprintf("task %d %q", t.id, t.name))
	}
	s.stopTask(t)
}

// stopTask stops t, the running task, as the run is unwound: it panics with
// the value task.Stopping recognises, which runs t's deferred calls.
//
// A task that recovers that panic and carries on (a worker whose loop
// recovers the panic of every job) would come back to wait again, be stopped
// again and recover again, for ever, and Run would never return. So a task
// that comes back to the runtime after it was stopped, with no panic in
// flight (it is not running the deferred calls the panic runs), has swallowed
// the panic, and it is ended with runtime.Goexit, which no recover stops and
// which runs its deferred calls too.
func (s *sched) stopTask(t *Task) {
	s.endIfSwallowed(t)
	t.stopped = true
	panic(unwinding{})
}

// endIfSwallowed ends t with runtime.Goexit when it was stopped and
// recovered the panic that stopped it (see stopTask).
func (s *sched) endIfSwallowed(t *Task) {
	if !t.stopped || !s.unwinding {
		return
	}
	if inFlight, _ := panicInFlight(); !inFlight {
		runtime.Goexit()
	}
}

// panicInFlight reports whether the calling goroutine runs a deferred call
// of a panic or of a runtime.Goexit, which then shows as a frame of the
// runtime's gopanic or Goexit below it, and whether the innermost is a
// Goexit. It reads the whole stack, but runs once per parked task at the
// end of a run, not at every point; it compares function entries rather
// than names, which would cost ten times as much.
func panicInFlight() (inFlight, goexit bool) {
	entries := runtimeEntries()
	pcs := make([]uintptr, 64)
	for {
		n := runtime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	for _, pc := range pcs {
		f := runtime.FuncForPC(pc - 1) // pc is a return address
		if f == nil {
			continue
		}
		switch f.Entry() {
		case entries.gopanic:
			return true, false
		case entries.goexit:
			return true, true
		}
	}
	return false, false
}

// runtimeEntries returns the entries of the runtime's functions that run
// deferred calls, found once by running one of each.
var runtimeEntries = sync.OnceValue(func() (e struct{ gopanic, goexit uintptr }) {
	find := func(name string) uintptr {
		var pcs [32]uintptr
		frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs[:])])
		for {
			f, more := frames.Next()
			if f.Function == name {
				return f.Entry
			}
			if !more {
				panic("sim: " + name + " is not on the stack of its own deferred call")
			}
		}
	}
	func() {
		defer func() {
			e.gopanic = find("runtime.gopanic")
			recover()
		}()
		panic("probe")
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { e.goexit = find("runtime.Goexit") }()
		runtime.Goexit()
	}()
	<-done
	return e
})

// fail records the first error of the run and ends it.
func (s *sched) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	s.ended = true
}

// decide asks the strategy which task runs next. cur is the task at the
// point when it may go on, or nil when it blocked or exited; at is the task
// at the point either way. The task it returns has left the runnable set;
// it returns nil when the run is over. What is rare (a wait, an error, a bad
// pick) is kept out of line: this runs at every scheduling point.
func (s *sched) decide(cur, at *Task) *Task {
	for {
		if s.ended {
			return nil
		}
		if len(s.watches) > 0 {
			s.pollContexts()
		}
		if len(s.timers) > 0 && s.timers[0].deadline <= s.now {
			s.advance(s.now) // an AfterFunc(d ≤ 0) is due
		}
		cands := s.slots[1:]
		if cur != nil {
			s.slots[0] = cur
			cands = s.slots
		}
		if len(cands) == 0 {
			if !s.advance(-1) {
				s.fail(s.deadlock())
				return nil
			}
			continue
		}
		if s.steps >= s.stepsMax && s.stepsMax > 0 {
			s.fail(&StepLimitError{Steps: s.stepsMax, At: s.now})
			return nil
		}
		s.steps++
		if s.steps&progressEvery == 0 && s.opts.Progress != nil {
			s.opts.Progress.Store(s.steps)
		}
		v := &s.view
		v.Now, v.Step, v.Candidates = s.now, s.steps, cands
		v.At, v.CanContinue = at, cur != nil
		d := s.policy.Pick(v)
		if d.waits() || d.Err != nil || s.ended {
			if !s.unusual(d) {
				return nil
			}
			continue
		}
		if uint(d.Index) >= uint(len(cands)) {
			s.badPick(d.Index, len(cands))
		}
		t := cands[d.Index]
		s.slots[0] = nil
		if cur == nil {
			s.dropSlot(d.Index + 1)
		} else if d.Index > 0 {
			s.dropSlot(d.Index)
		}
		s.schedule.appendRun(t.id)
		if !s.opts.NoHash {
			// The time needs no word here: every move of the clock is
			// hashed where it happens.
			s.hash.word(hkRun<<32 | uint64(t.id))
			s.hashPoint(at.point)
		}
		if s.trace != nil && t != at {
			s.event(Event{Kind: EvSwitch, Task: at.id, Arg: t.id, Point: at.point})
		}
		return t
	}
}

// unusual carries out a decision that picks no task: the chooser failed, the
// strategy ended the run, or it waits. It reports whether to decide again.
//
//go:noinline
func (s *sched) unusual(d Decision) bool {
	if s.ended { // the chooser failed
		return false
	}
	if d.Err != nil {
		s.fail(d.Err)
		return false
	}
	if d.Until <= s.now {
		panic(fmt.Sprintf("sim: strategy %s asked to wait until %v, which is not after now (%v)", s.opts.strategy(), d.until(), s.now))
	}
	target := d.Until
	if len(s.timers) > 0 && s.timers[0].deadline < target {
		target = s.timers[0].deadline
	}
	s.schedule.appendWait(target)
	s.hash.word(hkWait)
	s.hash.word(uint64(target))
	if s.trace != nil {
		s.event(Event{Kind: EvWait, Task: -1, Arg: int(target - s.now)})
	}
	s.advance(target)
	return true
}

//go:noinline
func (s *sched) badPick(i, n int) {
	panic(fmt.Sprintf("sim: strategy %s picked candidate %d of %d", s.opts.strategy(), i, n))
}

// advance moves the clock to target, or to the next timer when target < 0,
// and fires every timer that is due. It reports false when there was nothing
// to move to: no timer, or only timers that never fire.
func (s *sched) advance(target time.Duration) bool {
	if target < 0 {
		if len(s.timers) == 0 || s.timers[0].deadline == never {
			return false
		}
		target = s.timers[0].deadline
	}
	if target > s.now {
		s.now = target
		s.hash.word(hkAdvance)
		s.hash.word(uint64(target))
		if s.trace != nil {
			s.event(Event{Kind: EvAdvance, Task: -1})
		}
	}
	for len(s.timers) > 0 && s.timers[0].deadline <= s.now && s.timers[0].deadline != never {
		tm := s.timers.pop()
		if tm.sleeper != nil {
			s.wakeBy(tm.sleeper, -1)
			tm.sleeper = nil
			s.spare = append(s.spare, tm) // no handle refers to a sleeper's entry
		} else {
			s.spawnBy("timer", tm.fn, -1)
		}
	}
	return true
}

// point is a scheduling point where the running task could go on.
func (s *sched) point(kind PointKind, point string) { s.stop(kind, point, true) }

// block parks the running task at point until something wakes it.
func (s *sched) block(point string) { s.stop(PointBlock, point, false) }

// stop is a scheduling point of the running task: the strategy decides who
// runs next, and the baton passes to it. It returns when the task holds the
// baton again. Yield, Lock, Wait and the rest come here through point and
// block, which are inlined: after a switch every return up the stack is
// mispredicted, so the hand-off is written out here rather than called.
//
// A task waits either at home, parked in its own coroutine, or in the
// chain: inside the resume of the task above it. The loop is the chain's
// root. A next task that waits at home is resumed from here, a single
// coroutine switch, and this one waits in the chain; one that waits in the
// chain is reached by returning down the chain, this one going home. So
// two tasks that take turns switch once per hand-off, where a loop in the
// middle would switch twice; every resume is returned from at most once,
// so no hand-off costs more than two switches over a run.
func (s *sched) stop(kind PointKind, point string, canGoOn bool) {
	me := s.cur
	me.point, me.kind = point, kind
	var next *Task
	if canGoOn {
		next = s.decide(me, me)
		if next == me {
			return
		}
		me.state = stateRunnable
		s.insertRunnable(me)
	} else {
		me.state = stateBlocked
		s.hash.word(hkBlock)
		if s.trace != nil {
			s.event(Event{Kind: EvBlock, Task: me.id, Point: point})
		}
		next = s.decide(nil, me)
		if next == me { // a timer woke it while the clock moved on
			me.state = stateRunning
			return
		}
	}
	if next != nil {
		s.switches++
	}
	s.next = next // nil ends the run
	for s.next != me {
		t := s.next
		if t == nil || t.inChain || t.pull == nil { // down the chain
			var ok bool
			if me.pull != nil {
				ok = me.pull.yieldf(struct{}{})
			} else {
				ok = me.co.yield()
			}
			if !ok {
				if !s.drain(me) {
					s.stopTask(me)
				}
				break // the run is over, but this task's panic goes on
			}
			continue
		}
		s.cur = t // t waits at home: resume it, waiting in the chain
		t.state = stateRunning
		me.inChain = true
		t.pull.next()
		me.inChain = false
		if t.state == stateDone {
			s.release(t)
		}
	}
	s.cur = me
	me.state = stateRunning
}

// wake makes a blocked task runnable on behalf of the running task.
func (s *sched) wake(t *Task) {
	by := -1
	if s.cur != nil {
		by = s.cur.id
	}
	s.wakeBy(t, by)
}

// wakeBy makes a blocked task runnable on behalf of task by (-1: the clock).
func (s *sched) wakeBy(t *Task, by int) {
	if s.unwinding {
		return
	}
	if t.state != stateBlocked {
		panic(fmt.Sprintf("sim: wake of task %d %q, which is not blocked", t.id, t.name))
	}
	t.state = stateRunnable
	s.insertRunnable(t)
	s.hash.word(hkWake)
	s.hash.word(uint64(t.id))
	if s.trace != nil {
		s.event(Event{Kind: EvWake, Task: by, Arg: t.id})
	}
}

// The runnable set is short: its shifts are loops of single pointer moves,
// cheaper than the runtime's bulk copy and clear at this size.

func (s *sched) insertRunnable(t *Task) {
	s.slots = append(s.slots, t)
	i := len(s.slots) - 1
	for ; i > 1 && s.slots[i-1].id > t.id; i-- {
		s.slots[i] = s.slots[i-1]
	}
	s.slots[i] = t
}

func (s *sched) removeRunnable(t *Task) {
	for i := 1; i < len(s.slots); i++ {
		if s.slots[i] == t {
			s.dropSlot(i)
			return
		}
	}
}

// dropSlot removes slots[i], keeping the order.
func (s *sched) dropSlot(i int) {
	last := len(s.slots) - 1
	for ; i < last; i++ {
		s.slots[i] = s.slots[i+1]
	}
	s.slots[last] = nil
	s.slots = s.slots[:last]
}

// pointHash caches the hash of a point name (or an annotation's kind),
// keyed by the name's bytes' address: such names are almost always
// constants, so the cache turns a byte loop per decision into a comparison. The cached value is the hash of
// the bytes, so a hit and a miss fold in the same word.
type pointHash struct {
	data *byte
	// n1 is the name's length plus one, so that an untouched slot (0)
	// matches no name: the empty name's data pointer may be nil, the
	// address an untouched slot holds.
	n1 int
	h  uint64
}

// pointCache is a small direct-mapped cache of point-name hashes.
type pointCache [64]pointHash

func (s *sched) hashPoint(p string) {
	data := unsafe.StringData(p)
	slot := s.pointCache.slot(p)
	if slot.data != data || slot.n1 != len(p)+1 {
		h := newHasher()
		h.str(p)
		*slot = pointHash{data: data, n1: len(p) + 1, h: uint64(h)}
	}
	s.hash.word(slot.h)
}

// slot returns the entry a name is cached in.
func (c *pointCache) slot(p string) *pointHash {
	return &c[(uintptr(unsafe.Pointer(unsafe.StringData(p)))>>3^uintptr(len(p)))&63]
}

func (s *sched) deadlock() *DeadlockError {
	d := &DeadlockError{Step: s.steps, At: s.now}
	for _, t := range s.live {
		b := BlockedTask{ID: t.id, Name: t.name, Point: t.point, HolderID: -1}
		if m := t.waitingOn; m != nil && m.owner != nil {
			b.HolderID, b.Holder = m.owner.id, m.owner.name
		}
		d.Blocked = append(d.Blocked, b)
	}
	sort.Slice(d.Blocked, func(i, j int) bool { return d.Blocked[i].ID < d.Blocked[j].ID })
	for _, t := range s.timers {
		if t.deadline == never {
			d.NeverTimers++
		}
	}
	for _, w := range s.watches {
		if _, ok := w.ctx.Deadline(); ok && !task.VirtualDeadline(w.ctx) {
			d.WallDeadlines++
		}
	}
	return d
}

// enter checks, in debug mode, that the caller is the running task.
func (s *sched) enter() {
	if s.cur == nil || s.debug { // small enough to be inlined at every call
		s.checkCaller()
	}
}

// checkLiveCaller is enter for the calls that have no scheduling point
// (Now, a timer's or a context watch's stop, Note) and may also be made
// outside the run, before it or after it ends: while the run goes on, a
// goroutine other than the running task's that makes them races with the
// tasks, and debug mode says so.
func (s *sched) checkLiveCaller() {
	if s.debug && s.cur != nil && !s.ended { // small enough to be inlined at every call
		s.checkCaller()
	}
}

func (s *sched) checkCaller() {
	if s.cur == nil {
		panic("sim: the runtime was called outside any simulated task")
	}
	if g := stacks.ID(); g != s.cur.goid && !s.unwinding {
		panic(&ForeignGoroutineError{Goroutine: g, Running: s.cur.name})
	}
}

// task.Runtime

func (s *sched) Now() time.Time {
	s.checkLiveCaller()
	return Epoch.Add(s.now)
}

// AfterFunc starts f as a task named "timer" once the clock reaches now+d.
// A deadline past the end of virtual time is never (see Sleep): f then
// never runs, though the timer can still be stopped.
func (s *sched) AfterFunc(d time.Duration, f func()) clock.Timer {
	s.enter()
	if s.ended {
		return &simTimer{}
	}
	if d < 0 {
		d = 0
	}
	return &simTimer{s: s, e: s.addTimer(s.deadline(d), nil, f)}
}

func (s *sched) Go(name string, fn func()) {
	s.enter()
	s.spawn(name, fn)
}

func (s *sched) Yield(point string) {
	s.enter()
	if s.ended {
		s.drainCall()
		return
	}
	s.point(PointYield, point)
}

// Sleep parks the running task until the clock reaches now+d. A deadline
// past the end of virtual time (math.MaxInt64 after Epoch) saturates to
// never, as the Go runtime's timers saturate: such a sleep never returns,
// like time.Sleep(math.MaxInt64). The clock is not moved to the end of time
// for it: when every task waits and only such timers are pending, nothing
// can ever happen, and the run ends with a *DeadlockError at the time it
// got stuck, which says more than a jump to the year 2292 would.
func (s *sched) Sleep(d time.Duration) {
	s.enter()
	if s.ended {
		if s.unwinding {
			s.stopTask(s.cur)
		}
		return
	}
	if d <= 0 {
		s.point(PointYield, "sleep")
		return
	}
	s.addTimer(s.deadline(d), s.cur, nil)
	s.block("sleep")
}

// never is the deadline of a timer due at or past the end of virtual time:
// it does not fire, and the clock does not move to it (see Sleep).
const never = time.Duration(math.MaxInt64)

// deadline returns now+d for a d ≥ 0, saturated at never rather than
// wrapped to a time in the past.
func (s *sched) deadline(d time.Duration) time.Duration {
	if d >= never-s.now {
		return never
	}
	return s.now + d
}

func (s *sched) NewMutex(name string) task.Mutex {
	s.checkLiveCaller()
	m := s.mutexSlab.new()
	*m = simMutex{s: s, name: name, lockPoint: s.opts.Pool.lockPoint(name)}
	m.waiters = m.buf[:0]
	return m
}

func (s *sched) NewCond(m task.Mutex) task.Cond {
	s.checkLiveCaller()
	sm, ok := m.(*simMutex)
	if !ok || sm.s != s {
		panic(fmt.Sprintf("sim: NewCond needs a Mutex from the same run, got %T", m))
	}
	c := s.condSlab.new()
	c.m = sm
	c.waiters = c.buf[:0]
	return c
}

func (s *sched) addTimer(deadline time.Duration, sleeper *Task, fn func()) *timerEntry {
	s.timerSeq++
	var e *timerEntry
	if n := len(s.spare); n > 0 && sleeper != nil {
		e = s.spare[n-1]
		s.spare = s.spare[:n-1]
		*e = timerEntry{deadline: deadline, seq: s.timerSeq, sleeper: sleeper}
	} else {
		e = &timerEntry{deadline: deadline, seq: s.timerSeq, sleeper: sleeper, fn: fn}
	}
	s.timers.push(e)
	return e
}

// simTimer is an AfterFunc callback; e is its entry in the timer heap
// while it is pending.
type simTimer struct {
	s *sched
	e *timerEntry
}

// Reset implements clock.Resetter: the callback is due again d from now, in
// a new entry, ordered after every timer made or reset before it.
func (t *simTimer) Reset(d time.Duration) bool {
	if t.s == nil { // made after the run ended: it never fires
		return false
	}
	s := t.s
	s.checkLiveCaller()
	if s.ended {
		return false
	}
	pending := t.e.index >= 0
	if pending {
		s.timers.remove(t.e)
	}
	t.e = s.addTimer(s.deadline(max(d, 0)), nil, t.e.fn)
	return pending
}

func (t *simTimer) Stop() bool {
	if t.s != nil {
		t.s.checkLiveCaller()
	}
	if t.e == nil || t.e.index < 0 {
		return false
	}
	t.s.timers.remove(t.e)
	return true
}

// hash record kinds
const (
	hkSpawn uint64 = iota + 1
	hkExit
	hkRun
	hkWait
	hkAdvance
	hkBlock
	hkWake
	hkNote
)

// ctxWatch is a callback waiting for a context to be done.
type ctxWatch struct {
	ctx  context.Context
	f    func()
	done bool // fired or stopped
}

// AfterContext implements task.ContextWatcher by polling: at every decision
// the simulator checks the contexts it watches and starts a task named
// "context" running f for each one that is done. A context cancelled by a
// simulated task is therefore seen at the next decision, deterministically,
// or at a stop before it, which then starts f and reports false, as
// context.AfterFunc's stop does once the context is done;
// one cancelled by wall time (a deadline) is not deterministic and should
// not be used under the simulator.
func (s *sched) AfterContext(ctx context.Context, f func()) func() bool {
	s.enter()
	w := &ctxWatch{ctx: ctx, f: f}
	// When f can never run (the context is never done, or the run is
	// over), w is not watched; as with context.AfterFunc, the first stop
	// still reports that it prevented f, and any later one that it did
	// nothing.
	if ctx.Done() != nil && !s.ended {
		s.watches = append(s.watches, w)
	}
	return func() bool {
		s.checkLiveCaller()
		if !w.done && !s.ended && w.ctx.Err() != nil {
			// The context is done, so context.AfterFunc would have
			// started f already: start the callbacks due, as the next
			// decision would, rather than let stop take f back.
			s.pollContexts()
		}
		if w.done {
			return false
		}
		w.done = true
		s.watches = slices.DeleteFunc(s.watches, func(x *ctxWatch) bool { return x == w })
		return true
	}
}

func (s *sched) pollContexts() {
	for i := 0; i < len(s.watches); {
		w := s.watches[i]
		if w.ctx.Err() == nil {
			i++
			continue
		}
		w.done = true
		s.watches = slices.Delete(s.watches, i, i+1)
		s.spawnBy("context", w.f, -1)
	}
}

// Reach records a situation the running task reached (task.Reach), and
// the first time, when the run keeps a trace, an EvReach event, which the
// hash leaves out as it leaves out the strategy's notes. The names of a
// run are few: a scan finds one already recorded.
func (s *sched) Reach(name string) {
	s.checkLiveCaller()
	if slices.Contains(s.reached, name) {
		return
	}
	if s.reached == nil {
		s.reached = s.reachedBuf[:0]
	}
	s.reached = append(s.reached, name)
	if s.trace != nil {
		by := -1
		if s.cur != nil {
			by = s.cur.id
		}
		s.event(Event{Kind: EvReach, Task: by, Text: name})
	}
}
