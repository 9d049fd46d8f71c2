package sim

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/internal/stacks"
)

// HangError is a run that had not ended after a wall-time limit
// (Options.HangAfter, or a tool's own): a task loops without a scheduling
// point, or blocks on something the simulator does not know of (a real
// channel, lock or sleep), and keeps the baton. No step limit sees it, since
// the simulator decides nothing until the baton comes back.
type HangError struct {
	Seed uint64
	// Strategy names the run's strategy, as ParseStrategy reads it; ""
	// when a tool of its own made the error without it.
	Strategy string
	// OwnChooser is set when the run drew from Options.Chooser (rapid's,
	// say) rather than from Seed.
	OwnChooser bool
	// Draws, for a run of Explore's walk or of FollowDraws, are its draws
	// up to its last departure: with Seed and Strategy, FollowDraws runs
	// the schedule that hung again.
	Draws Draws
	After time.Duration // the run had gone on at least this long
	// Idle is how long of it the run made no scheduling decision, as
	// Options.Progress counts them (After when nothing counted them).
	Idle time.Duration
	// Stuck is the task's goroutine: Status ("running" or "runnable" when it
	// spins, "chan receive" and the like when it waits; "" when no task was
	// found outside the simulator), Func (the innermost function of its own
	// code) and Stack.
	stacks.Stuck
	// Stacks is every goroutine's stack when the hang was seen; StacksFile
	// the file a tool wrote it to, "" when none.
	Stacks     []byte
	StacksFile string
}

func (e *HangError) Error() string {
	var b strings.Builder
	run := "a run drawn from Options.Chooser"
	switch {
	case e.OwnChooser:
	default:
		run = fmt.Sprintf("seed %d", e.Seed)
		var what []string
		if e.Strategy != "" {
			what = append(what, "strategy "+e.Strategy)
		}
		if e.Draws != nil {
			what = append(what, "draws "+e.Draws.String())
		}
		if len(what) > 0 {
			run += " (" + strings.Join(what, ", ") + ")"
		}
	}
	fmt.Fprintf(&b, "hang: %s had not ended after %v of wall time", run, e.After)
	if e.Idle > 0 && e.Idle < e.After {
		fmt.Fprintf(&b, ", the last %v of it without a scheduling decision", e.Idle)
	}
	switch {
	case e.Status == "":
		b.WriteString(", and none of its tasks is running or blocked outside the simulator")
	case e.Spinning():
		fmt.Fprintf(&b, ": a task runs in %s without reaching a scheduling point (a loop without a Yield, Lock, Sleep or queue call); no step limit can see it", e.Func)
	default:
		fmt.Fprintf(&b, ": a task is blocked in %s [%s] on something the simulator cannot see (a real channel, lock or sleep; use the task runtime's)", e.Func, e.Status)
	}
	if e.StacksFile != "" {
		fmt.Fprintf(&b, "; every goroutine's stack: %s", e.StacksFile)
	}
	if e.Stack != "" {
		b.WriteString("\n" + e.Stack)
	}
	return b.String()
}

// newHangError describes a hang of seed, seen after the given wall time,
// from dump (every goroutine's stack): the stuck task is looked for among
// the goroutines that runner, the goroutine that called Run, started.
func newHangError(opts *Options, after time.Duration, runner uint64, dump []byte) *HangError {
	stuck, _ := stacks.FindStuck(dump, runner)
	h := &HangError{Seed: opts.Seed, Strategy: opts.strategy().String(), OwnChooser: opts.Chooser != nil, After: after, Stuck: stuck, Stacks: dump}
	if walk, ok := opts.Chooser.(*walkChooser); ok {
		// Explore's, or FollowDraws': the seed, the strategy and the
		// draws say what ran. The run's goroutine cannot have gone on
		// to change them: it is stuck, or waits for the watch's lock
		// to end the run.
		h.OwnChooser, h.Draws = false, append(Draws{}, walk.prefix...) // not nil: the calm schedule is one too
	}
	return h
}

// hangWatch panics the process, from a timer's goroutine, when a run on
// the goroutine that made it has gone on past its Options.HangAfter. A
// Pool keeps one for the runs of its worker, one after another, so that a
// run pays a timer's Reset and Stop rather than a goroutine's ID read off
// a stack trace and a timer of its own (6 µs, a third of a small run). A
// run that ends while the stacks are being read is not a hang, and
// neither is one younger than its HangAfter, which a firing meant for the
// run before it finds.
type hangWatch struct {
	runner uint64 // the goroutine that runs the runs
	t      *time.Timer
	mu     sync.Mutex
	opts   *Options // the run watched
	start  time.Time
	live   bool
	// The run's decisions as Options.Progress counts them (own, when the
	// run's options had none), the count last seen and when it last
	// moved: a run that goes on deciding is no hang, however long.
	own   atomic.Int64
	seen  int64
	moved time.Time
}

// newHangWatch returns a watch of the runs of the calling goroutine.
func newHangWatch() *hangWatch {
	w := &hangWatch{runner: stacks.ID()}
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Stop()
	return w
}

// begin watches the run of opts, which starts now; it gives opts a
// Progress of its own when it has none.
func (w *hangWatch) begin(opts *Options) {
	if opts.Progress == nil {
		w.own.Store(0)
		opts.Progress = &w.own
	}
	w.mu.Lock()
	w.opts, w.start, w.live = opts, time.Now(), true
	w.seen, w.moved = opts.Progress.Load(), w.start
	w.mu.Unlock()
	w.t.Reset(opts.HangAfter)
}

// end stops watching the run.
func (w *hangWatch) end() {
	w.mu.Lock()
	w.live = false
	w.mu.Unlock()
	w.t.Stop()
}

func (w *hangWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.live {
		return
	}
	now := time.Now()
	if n := w.opts.Progress.Load(); n != w.seen {
		// It went on deciding: a long run, which the step limit ends.
		w.seen, w.moved = n, now
		w.t.Reset(w.opts.HangAfter)
		return
	}
	if idle := now.Sub(w.moved); idle >= w.opts.HangAfter {
		// Stuck: the goroutine that holds the baton cannot go on to
		// change what the dump shows, nor end the run, which waits for
		// the lock.
		h := newHangError(w.opts, now.Sub(w.start).Round(time.Millisecond), w.runner, stacks.All())
		h.Idle = idle.Round(time.Millisecond)
		if w.opts.onHang != nil {
			w.opts.onHang(h)
			return
		}
		panic(h)
	}
}
