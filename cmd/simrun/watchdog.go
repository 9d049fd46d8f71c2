package main

import (
	"errors"
	"flag"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/internal/stacks"
	"github.com/llmdst/llmdst/sim"
)

// A run that never ends is a failure no step limit can see: a task that
// loops without reaching a scheduling point (no Yield, Lock, Sleep or queue
// call) keeps the baton, so the simulator never decides again, and a task
// blocked on a real channel or lock, one the simulator does not know of,
// never gives the baton back. Either hangs simrun with nothing said. The
// watchdog notices a seed that has made no scheduling decision for
// -seed-timeout of wall time (sim.Options.Progress counts them: a livelock
// that goes on deciding is the step limit's, however long it runs),
// finds the task that holds the baton in a dump of every goroutine, and
// reports the seed as failed with that task's stack. It reads nothing of
// the run but that count and changes nothing in it: the run's decisions and hashes are
// the same with or without it. (sim.Options.HangAfter panics the process
// instead, for a test; simrun goes on and reports, so it watches itself.)

// seedTimeoutDefault is -seed-timeout's default: far above the wall time
// between two decisions of any run that goes on (microseconds; a whole
// seed takes tens of them, under the race detector on a loaded host
// milliseconds), and a bound on how long a hang stays silent. It counts
// time without a decision, not a seed's whole run, so a long seed needs no
// more of it.
const seedTimeoutDefault = 10 * time.Second

// registerSeedTimeout registers -seed-timeout on fs, into d.
func registerSeedTimeout(fs *flag.FlagSet, d *time.Duration) {
	*d = seedTimeoutDefault
	fs.Var((*seedTimeout)(d), "seed-timeout", "fail a seed that has made no scheduling decision for `DURATION` of wall time, with the stack of the task that holds the baton: a loop without a scheduling point, or a block on a channel or lock the simulator cannot see; one that goes on deciding is left to the step limit (0: wait forever)")
}

// seedTimeout is -seed-timeout's value: a duration ≥ 0.
type seedTimeout time.Duration

func (d *seedTimeout) String() string { return time.Duration(*d).String() }

func (d *seedTimeout) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 30s")
	}
	if v < 0 {
		return fmt.Errorf("want a duration ≥ 0 (0 means no timeout), got %v", v)
	}
	*d = seedTimeout(v)
	return nil
}

// watchdog watches the runs of a fixed set of slots, one per goroutine that
// runs seeds. Running a seed costs a slot two atomic operations.
type watchdog struct {
	timeout time.Duration
	slots   []watchSlot
	hung    chan *sim.HangError // one per slot at most, so never blocks
	quit    chan struct{}
	done    chan struct{}
}

type watchSlot struct {
	// seq counts the slot's starts and ends: odd while a seed runs;
	// abandonedSeq once the watchdog has given the slot's seed up.
	seq  atomic.Uint64
	seed atomic.Uint64
	goid atomic.Uint64 // the goroutine that runs the slot's seeds
	// progress counts the decisions of the slot's seed
	// (sim.Options.Progress): a seed that goes on deciding is no hang,
	// however long it runs; the step limit ends it.
	progress atomic.Int64
}

// abandonedSeq is even: an abandoned slot is never seen as running again.
const abandonedSeq = ^uint64(0) - 1

// startWatchdog starts a watchdog of n slots; timeout must be positive.
func startWatchdog(timeout time.Duration, n int) *watchdog {
	w := &watchdog{timeout: timeout, slots: make([]watchSlot, n), hung: make(chan *sim.HangError, n),
		quit: make(chan struct{}), done: make(chan struct{})}
	period := min(max(timeout/4, time.Millisecond), time.Second)
	tick := time.NewTicker(period)
	go func() {
		defer tick.Stop()
		w.loop(period, tick.C)
	}()
	return w
}

// own makes the calling goroutine the runner of slot i: the stuck task of
// a hung seed is found among the goroutines it started.
func (w *watchdog) own(i int) { w.slots[i].goid.Store(stacks.ID()) }

// begin marks slot i's seed as started and returns the token end takes.
func (w *watchdog) begin(i int, seed uint64) uint64 {
	w.slots[i].seed.Store(seed)
	w.slots[i].progress.Store(0)
	return w.slots[i].seq.Add(1)
}

// progress is the counter of slot i's decisions, for the seed's
// sim.Options.Progress; nil for no watchdog.
func (w *watchdog) progress(i int) *atomic.Int64 {
	if w == nil {
		return nil
	}
	return &w.slots[i].progress
}

// end marks slot i's seed as ended. It reports false when the watchdog has
// already reported the seed as hung: its outcome is then not to be used,
// and the slot takes no more seeds.
func (w *watchdog) end(i int, token uint64) bool {
	return w.slots[i].seq.CompareAndSwap(token, token+1)
}

// stop ends the watchdog's goroutine.
func (w *watchdog) stop() {
	close(w.quit)
	<-w.done
}

// loop judges the slots at every tick, which come every period.
func (w *watchdog) loop(period time.Duration, ticks <-chan time.Time) {
	defer close(w.done)
	last := make([]uint64, len(w.slots))
	since := make([]time.Time, len(w.slots)) // when the slot's seed was first seen running
	moved := make([]time.Time, len(w.slots)) // when its count of decisions last moved
	counted := make([]int64, len(w.slots))   // that count
	var prev time.Time                       // the tick before
	for {
		var now time.Time
		select {
		case <-w.quit:
			return
		case now = <-ticks:
		}
		if late := now.Sub(prev); !prev.IsZero() && late > 2*period+pauseSlack {
			// The process did not run for a while (stopped, its machine
			// paused, the host's CPU taken): no seed could decide, so
			// none of that time is a seed's own. Each waits its timeout
			// again from now.
			for i := range moved {
				moved[i] = now
			}
		}
		prev = now
		for i := range w.slots {
			s := &w.slots[i]
			v := s.seq.Load()
			if v != last[i] {
				last[i], since[i], moved[i], counted[i] = v, now, now, 0
				continue
			}
			if n := s.progress.Load(); n != counted[i] {
				counted[i], moved[i] = n, now // it goes on deciding
				continue
			}
			if v&1 == 0 || now.Sub(moved[i]) < w.timeout || !s.seq.CompareAndSwap(v, abandonedSeq) {
				continue
			}
			// The seed has run at least since it was first seen running,
			// and decided nothing since its count last moved.
			dump := stacks.All()
			stuck, _ := stacks.FindStuck(dump, s.goid.Load())
			w.hung <- &sim.HangError{Seed: s.seed.Load(), After: now.Sub(since[i]).Round(time.Millisecond),
				Idle: now.Sub(moved[i]).Round(time.Millisecond), Stuck: stuck, Stacks: dump}
		}
	}
}

// pauseSlack is how late a tick may come before the watchdog takes the
// gap for a pause of the whole process: the Go scheduler's delays on a
// busy host are milliseconds.
const pauseSlack = 200 * time.Millisecond

// runOne runs one seed under a watchdog of its own, on a goroutine of its
// own so that a hang can be returned from: it returns the run's outcome, or
// the hang, and the hung goroutine is left behind, to end with the process.
func runOne(timeout time.Duration, seed uint64, run func(progress *atomic.Int64) outcome) (outcome, *sim.HangError) {
	if timeout <= 0 {
		return run(nil), nil
	}
	w := startWatchdog(timeout, 1)
	defer w.stop()
	ended := make(chan outcome, 1)
	go func() {
		w.own(0)
		token := w.begin(0, seed)
		o := run(w.progress(0))
		if w.end(0, token) {
			ended <- o
		}
	}()
	select {
	case o := <-ended:
		return o, nil
	case h := <-w.hung:
		return outcome{}, h
	}
}
