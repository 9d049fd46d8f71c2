package sim

import "iter"

// coroutine is how the simulator hands the baton to a task and back. Exactly
// one of the loop and the tasks runs at any moment.
type coroutine interface {
	// resume runs the task, from the loop, until it yields or returns.
	resume()
	// yield gives control back to the loop, from inside the task. It
	// reports false when the run is over and the task must unwind.
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

func newCoroutine(sw Switcher, body func()) coroutine {
	if sw == SwitchChan {
		return &chanCoro{body: body, wake: make(chan bool), back: make(chan struct{})}
	}
	c := &pullCoro{}
	c.next, c.stopf = iter.Pull(func(yield func(struct{}) bool) {
		c.yieldf = yield
		body()
	})
	return c
}

type pullCoro struct {
	next   func() (struct{}, bool)
	stopf  func()
	yieldf func(struct{}) bool
}

func (c *pullCoro) resume()     { c.next() }
func (c *pullCoro) yield() bool { return c.yieldf(struct{}{}) }
func (c *pullCoro) stop()       { c.stopf() }

type chanCoro struct {
	body    func()
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
	c.body()
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
