package sim

import "iter"

// coroutine is how the simulator hands the baton to a task and back. Exactly
// one of the loop and the tasks runs at any moment.
type coroutine interface {
	// resume runs the task, from the loop or another task, until it yields
	// or returns.
	resume()
	// yield gives control back to whoever resumed the task, from inside
	// the task. It reports false when the run is over and the task must
	// unwind.
	yield() bool
	// stop unwinds a parked task. It is called from a throwaway goroutine, so
	// that a runtime.Goexit during unwinding cannot end the caller of Run.
	stop()
}

// Switcher selects how tasks are switched.
type Switcher uint8

const (
	// SwitchPull drives each task as an iter.Pull coroutine: the switch is a
	// direct goroutine handoff inside the Go runtime, without the channel
	// machinery. It is the default because it is the faster.
	SwitchPull Switcher = iota
	// SwitchChan runs each task on a goroutine of its own and hands the baton
	// over channels. It exists to measure against SwitchPull.
	SwitchChan
)

func (sw Switcher) String() string {
	if sw == SwitchChan {
		return "chan"
	}
	return "pull"
}

// newCoroutine returns the coroutine that runs t's body (sched.body), a
// pool's when it has one.
func newCoroutine(sw Switcher, pool *Pool, t *Task) coroutine {
	if sw == SwitchChan {
		return &chanCoro{t: t, wake: make(chan bool), back: make(chan struct{})}
	}
	if c := pool.take(); c != nil {
		c.t = t
		return c
	}
	c := &pullCoro{t: t}
	c.next, c.stopf = iter.Pull(func(yield func(struct{}) bool) {
		c.yieldf = yield
		for {
			c.t.s.body(c.t)
			c.t = nil
			// The task is over. Park until a pool hands this goroutine
			// the next task's body, or stop ends it.
			if !yield(struct{}{}) {
				return
			}
		}
	})
	return c
}

// pullCoro is a task's coroutine. Its goroutine loops over tasks, so that a
// Pool can give a finished task's goroutine, its stack already grown, to the
// next task.
type pullCoro struct {
	next   func() (struct{}, bool)
	stopf  func()
	yieldf func(struct{}) bool
	t      *Task // the task it runs
}

func (c *pullCoro) resume()     { c.next() }
func (c *pullCoro) yield() bool { return c.yieldf(struct{}{}) }
func (c *pullCoro) stop()       { c.stopf() }

// Pool keeps the goroutines of tasks that finished, for the tasks of later
// runs: a sweep then neither creates a goroutine per task per run nor grows
// its stack again, and runs with Options.HangAfter share one watch. Runs
// that share a Pool must not run at the same time; give each worker of a
// sweep its own, and keep it on the worker's goroutine. The goroutines a
// Pool holds outlive the runs that made them until Close.
type Pool struct {
	idle   []*pullCoro
	points pointCache // hashes of point names, the same from run to run
	hang   *hangWatch // the watch of its runs with Options.HangAfter, made by the first
	// lockPoints holds the lock point of each mutex name its runs used
	// (simMutex.lockPoint), made once rather than at every run.
	lockPoints map[string]string
	// slabs is how many tasks, mutexes and conds the last run took: the
	// next makes room for as many at once (slab.hint).
	slabs [3]int
}

// hangWatch returns the watch of the pool's runs, made on the first call,
// or a new one for a run without a pool (nil p).
func (p *Pool) hangWatch() *hangWatch {
	if p == nil {
		return newHangWatch()
	}
	if p.hang == nil {
		p.hang = newHangWatch()
	}
	return p.hang
}

// lockPoint returns the scheduling point of a Lock of the mutex name.
func (p *Pool) lockPoint(name string) string {
	if p == nil {
		return name + ".lock"
	}
	if lp, ok := p.lockPoints[name]; ok {
		return lp
	}
	lp := name + ".lock"
	if len(p.lockPoints) < lockPointsMax {
		if p.lockPoints == nil {
			p.lockPoints = make(map[string]string)
		}
		p.lockPoints[name] = lp
	}
	return lp
}

// lockPointsMax bounds the names a Pool keeps the lock points of: a
// program that names its mutexes after its data makes more of them.
const lockPointsMax = 1024

// poolMax bounds the goroutines a Pool keeps.
const poolMax = 64

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{} }

func (p *Pool) take() *pullCoro {
	if p == nil || len(p.idle) == 0 {
		return nil
	}
	c := p.idle[len(p.idle)-1]
	p.idle = p.idle[:len(p.idle)-1]
	return c
}

// give keeps c, parked between bodies, or ends it when the pool is full.
func (p *Pool) give(c *pullCoro) {
	if p == nil || len(p.idle) >= poolMax {
		c.stop()
		return
	}
	p.idle = append(p.idle, c)
}

// Close ends every goroutine the pool holds.
func (p *Pool) Close() {
	for _, c := range p.idle {
		c.stop()
	}
	p.idle = nil
}

type chanCoro struct {
	t       *Task
	wake    chan bool // loop → task: true runs it, false unwinds it
	back    chan struct{}
	started bool
}

func (c *chanCoro) resume() {
	if !c.started {
		c.started = true
		go c.run()
	} else {
		c.wake <- true
	}
	<-c.back
}

func (c *chanCoro) run() {
	defer func() { c.back <- struct{}{} }()
	c.t.s.body(c.t)
}

func (c *chanCoro) yield() bool {
	c.back <- struct{}{}
	return <-c.wake
}

func (c *chanCoro) stop() {
	if !c.started {
		return
	}
	c.wake <- false
	<-c.back
}
