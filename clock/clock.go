package clock

import "time"

// Clock tells the time and runs callbacks after a delay.
type Clock interface {
	// Now returns the current time of this clock.
	Now() time.Time
	// AfterFunc arranges for f to run once, d after now. Under the simulator
	// f runs as a task of its own, since it may take a lock.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc callback.
type Timer interface {
	// Stop prevents the callback from running. It reports whether the call
	// stopped it: false means the callback already ran, is running, or was
	// stopped before.
	Stop() bool
}

// Resetter is a Timer that can be armed again, as time.Timer's Reset: the
// timers of both clocks here, the wall clock's and the simulator's,
// implement it. Assert it where the code needs it:
//
//	t := c.AfterFunc(d, f)
//	…
//	t.(clock.Resetter).Reset(d) // f runs again d from now
type Resetter interface {
	// Reset arranges for the callback to run once, d after now, whether it
	// was pending, already ran, or was stopped. It reports whether it was
	// pending, so that false means the callback ran or is running (and
	// will run again) or had been stopped.
	Reset(d time.Duration) bool
}

var _ Resetter = (*time.Timer)(nil)

// Real returns the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

var _ Clock = realClock{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
