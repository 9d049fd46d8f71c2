package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// A run that never ends is a failure no step limit can see: a task that
// loops without reaching a scheduling point (no Yield, Lock, Sleep or queue
// call) keeps the baton, so the simulator never decides again, and a task
// blocked on a real channel or lock, one the simulator does not know of,
// never gives the baton back. Either hangs simrun with nothing said. The
// watchdog notices a seed that runs longer than -seed-timeout of wall time,
// finds the task that holds the baton in a dump of every goroutine, and
// reports the seed as failed with that task's stack. It reads nothing of
// the run and changes nothing in it: the run's decisions and hashes are
// the same with or without it.

// seedTimeoutDefault is -seed-timeout's default: far above any seed that
// ends (tens of microseconds; 10 million steps, the default step limit,
// take seconds, under -race tens of seconds), and a bound on how long a
// hang stays silent.
const seedTimeoutDefault = time.Minute

// registerSeedTimeout registers -seed-timeout on fs, into d.
func registerSeedTimeout(fs *flag.FlagSet, d *time.Duration) {
	*d = seedTimeoutDefault
	fs.Var((*seedTimeout)(d), "seed-timeout", "fail a seed that has not ended after `DURATION` of wall time, with the stack of the task that holds the baton: a loop without a scheduling point, or a block on a channel or lock the simulator cannot see (0: wait forever)")
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
	hung    chan *hangError // one per slot at most, so never blocks
	quit    chan struct{}
	done    chan struct{}
}

type watchSlot struct {
	// seq counts the slot's starts and ends: odd while a seed runs;
	// abandonedSeq once the watchdog has given the slot's seed up.
	seq  atomic.Uint64
	seed atomic.Uint64
	goid atomic.Uint64 // the goroutine that runs the slot's seeds
}

// abandonedSeq is even: an abandoned slot is never seen as running again.
const abandonedSeq = ^uint64(0) - 1

// startWatchdog starts a watchdog of n slots; timeout must be positive.
func startWatchdog(timeout time.Duration, n int) *watchdog {
	w := &watchdog{timeout: timeout, slots: make([]watchSlot, n), hung: make(chan *hangError, n),
		quit: make(chan struct{}), done: make(chan struct{})}
	go w.loop(min(max(timeout/4, time.Millisecond), time.Second))
	return w
}

// own makes the calling goroutine the runner of slot i: the stuck task of
// a hung seed is found among the goroutines it started.
func (w *watchdog) own(i int) { w.slots[i].goid.Store(curGoroutine()) }

// begin marks slot i's seed as started and returns the token end takes.
func (w *watchdog) begin(i int, seed uint64) uint64 {
	w.slots[i].seed.Store(seed)
	return w.slots[i].seq.Add(1)
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

func (w *watchdog) loop(period time.Duration) {
	defer close(w.done)
	tick := time.NewTicker(period)
	defer tick.Stop()
	last := make([]uint64, len(w.slots))
	since := make([]time.Time, len(w.slots))
	for {
		var now time.Time
		select {
		case <-w.quit:
			return
		case now = <-tick.C:
		}
		for i := range w.slots {
			s := &w.slots[i]
			v := s.seq.Load()
			if v != last[i] {
				last[i], since[i] = v, now
				continue
			}
			if v&1 == 0 || now.Sub(since[i]) < w.timeout || !s.seq.CompareAndSwap(v, abandonedSeq) {
				continue
			}
			// The seed has run at least since it was first seen running.
			w.hung <- diagnoseHang(s.seed.Load(), now.Sub(since[i]).Round(time.Millisecond), s.goid.Load(), allStacks())
		}
	}
}

// runOne runs one seed under a watchdog of its own, on a goroutine of its
// own so that a hang can be returned from: the hung goroutine is left
// behind, and ends with the process.
func runOne(timeout time.Duration, seed uint64, run func() outcome) outcome {
	if timeout <= 0 {
		return run()
	}
	w := startWatchdog(timeout, 1)
	defer w.stop()
	ended := make(chan outcome, 1)
	go func() {
		w.own(0)
		token := w.begin(0, seed)
		o := run()
		if w.end(0, token) {
			ended <- o
		}
	}()
	select {
	case o := <-ended:
		return o
	case h := <-w.hung:
		return outcome{seed: seed, err: h}
	}
}

// hangError is a seed that did not end in time.
type hangError struct {
	seed    uint64
	after   time.Duration // the seed ran at least this long
	status  string        // the stuck task's goroutine status; "" when none was found
	fn      string        // the function it is in, outside the runtime
	stack   string        // its goroutine's stack
	stacks  []byte        // every goroutine's
	written string        // the file the stacks were written to, once they are
}

func (e *hangError) Error() string {
	var b strings.Builder
	switch {
	case e.status == "":
		fmt.Fprintf(&b, "hang: the run had not ended after %v of wall time, and none of its tasks is running or blocked outside the simulator", e.after)
	case spinning(e.status):
		fmt.Fprintf(&b, "hang: the run had not ended after %v of wall time: a task runs in %s without reaching a scheduling point (a loop without a Yield, Lock, Sleep or queue call); no step limit can see it", e.after, e.fn)
	default:
		fmt.Fprintf(&b, "hang: the run had not ended after %v of wall time: a task is blocked in %s [%s] on something the simulator cannot see (a real channel, lock or sleep; use the task runtime's)", e.after, e.fn, e.status)
	}
	if e.written != "" {
		fmt.Fprintf(&b, "; every goroutine's stack: %s", e.written)
	}
	if e.stack != "" {
		b.WriteString("\n" + e.stack)
	}
	return b.String()
}

// signature is the failure mode: where the task is stuck.
func (e *hangError) signature() string {
	switch {
	case e.status == "":
		return "hang"
	case spinning(e.status):
		return "hang in " + e.fn
	}
	return "hang blocked in " + e.fn
}

func spinning(status string) bool { return status == "running" || status == "runnable" }

// allStacks returns a dump of every goroutine, as a crash prints it.
func allStacks() []byte {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// curGoroutine returns the calling goroutine's id, from its stack's header.
func curGoroutine() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	g, _ := parseGoroutineHeader(string(buf[:n]))
	return g.id
}

// goroutine is one goroutine of a stack dump.
type goroutine struct {
	id, parent uint64 // parent 0: not known
	status     string // "running", "chan receive", "coroutine", …
	text       string // its whole entry in the dump
}

// parseGoroutineHeader reads "goroutine 7 [chan receive, 2 minutes]:".
func parseGoroutineHeader(s string) (goroutine, bool) {
	rest, ok := strings.CutPrefix(s, "goroutine ")
	if !ok {
		return goroutine{}, false
	}
	idText, rest, ok := strings.Cut(rest, " [")
	if !ok {
		return goroutine{}, false
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return goroutine{}, false
	}
	status, _, _ := strings.Cut(rest, "]")
	status, _, _ = strings.Cut(status, ",")
	return goroutine{id: id, status: status}, true
}

// parseStacks splits a dump into its goroutines.
func parseStacks(dump []byte) []goroutine {
	var gs []goroutine
	for _, entry := range bytes.Split(dump, []byte("\n\n")) {
		text := strings.TrimSpace(string(entry))
		g, ok := parseGoroutineHeader(text)
		if !ok {
			continue
		}
		g.text = text
		if i := strings.LastIndex(text, "\ncreated by "); i >= 0 {
			line, _, _ := strings.Cut(text[i+1:], "\n")
			if _, p, ok := strings.Cut(line, " in goroutine "); ok {
				g.parent, _ = strconv.ParseUint(strings.TrimSpace(p), 10, 64)
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// taskFrame is in the stack of every goroutine that runs a task.
const taskFrame = "llmdst/sim.(*sched).body("

// diagnoseHang finds the stuck task of a hung seed in dump: a goroutine
// that runs a task and is not parked in the simulator (status coroutine),
// among those the slot's runner started, directly or through tasks.
func diagnoseHang(seed uint64, after time.Duration, runner uint64, dump []byte) *hangError {
	e := &hangError{seed: seed, after: after, stacks: dump}
	gs := parseStacks(dump)
	parent := make(map[uint64]uint64, len(gs))
	for _, g := range gs {
		parent[g.id] = g.parent
	}
	// startedBy reports whether g descends from runner. A goroutine
	// whose creator has ended breaks the chain: unknown.
	startedBy := func(g goroutine) (yes, known bool) {
		for id, hops := g.parent, 0; hops < len(gs); hops++ {
			if id == runner {
				return true, true
			}
			p, ok := parent[id]
			if !ok {
				return false, false // its creator has ended
			}
			if p == 0 {
				return false, true // a root: not runner's
			}
			id = p
		}
		return false, false
	}
	var unsure *goroutine
	for i := range gs {
		g := &gs[i]
		if g.status == "coroutine" || !strings.Contains(g.text, taskFrame) {
			continue
		}
		yes, known := startedBy(*g)
		if yes {
			e.setStuck(g)
			return e
		}
		if !known && unsure == nil {
			unsure = g
		}
	}
	if unsure != nil {
		e.setStuck(unsure)
	}
	return e
}

func (e *hangError) setStuck(g *goroutine) {
	e.status, e.stack = g.status, g.text
	e.fn = firstOwnFunction(g.text)
}

// libraryPrefixes are the packages a stuck task is seen in without being
// stuck because of them: it waits or loops in them on behalf of its caller.
var libraryPrefixes = []string{"runtime.", "internal/", "sync.", "sync/", "time.", "iter."}

// firstOwnFunction is the innermost function of a stack outside the
// runtime and the standard library's locks and channels: where a task
// spins, or what it blocks in.
func firstOwnFunction(stack string) string {
	lines := strings.Split(stack, "\n")
	first := ""
	for _, line := range lines[1:] {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") || line == "" {
			continue
		}
		fn := line
		if i := strings.LastIndex(fn, "("); i > 0 {
			fn = fn[:i]
		}
		if first == "" {
			first = fn
		}
		if !slices.ContainsFunc(libraryPrefixes, func(p string) bool { return strings.HasPrefix(fn, p) }) {
			return fn
		}
	}
	return first
}
