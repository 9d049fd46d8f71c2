package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/task"
)

// Epoch is the virtual time at which every run starts.
var Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// progressEvery+1 is how many decisions a run makes between two stores of
// its count into Options.Progress.
const progressEvery = 255

// DefaultStepsMax is the step limit of a run when Options.StepsMax is zero.
const DefaultStepsMax = 10_000_000

// Options configure a run.
type Options struct {
	// Seed seeds the default chooser. The same seed, program and strategy
	// give the same run, the same trace hash and the same schedule.
	Seed uint64
	// Strategy decides who runs at each scheduling point; nil means Random().
	Strategy Strategy
	// Chooser answers the strategy's draws; nil means a PCG chooser seeded
	// with Seed on StreamStrategy. A rapid-backed chooser lets rapid shrink
	// the schedule along with the rest of a test case.
	Chooser Chooser
	// StepsMax bounds the decisions of a run; 0 means DefaultStepsMax and a
	// negative value means no bound. A run that reaches it ends with a
	// *StepLimitError. A recorded run (NoRecord false) is bounded by
	// ScheduleStepsMax in any case: a longer one would record a schedule
	// that no parser reads back.
	StepsMax int64
	// Progress, if set, receives the run's count of decisions every
	// progressEvery+1 of them, for a watchdog on another goroutine: a
	// run whose count moves goes on (a livelock the step limit ends),
	// where one whose count stands still while it has not ended is stuck,
	// a task holding the baton without reaching a scheduling point. It
	// changes nothing in the run.
	Progress *atomic.Int64
	// Trace keeps every event in Result.Trace. The hash is computed either way.
	Trace bool
	// NoRecord skips recording the schedule, for sweeps that re-run the
	// few failing seeds with recording on; Result.Schedule is then empty.
	NoRecord bool
	// NoHash skips the trace hash, for a sweep's fast pass; TraceHash is
	// then 0. CheckDeterminism turns it back on.
	NoHash bool
	// CheckDeterminism runs the program twice and fails with a
	// *NondeterminismError when the two runs differ: in their trace
	// hashes, or, on the same hash, in the situations they reached
	// (task.Reach) or in whether they failed. It needs the default
	// chooser, and main must build all its state afresh.
	CheckDeterminism bool
	// Debug checks at every call into the runtime that the caller is the
	// running task, panicking with a *ForeignGoroutineError otherwise. It
	// costs microseconds per call.
	Debug bool
	// Repanic raises a task's panic again in the goroutine that called Run,
	// once the run is unwound, instead of returning it as a *PanicError.
	Repanic bool
	// Pool, if set, lends the goroutines of finished tasks to the tasks of
	// later runs (a sweep's worker keeps one). Without it, no goroutine
	// outlives Run.
	Pool *Pool
	// HangAfter, if set, bounds the wall time a run may go without a
	// scheduling decision. A run that has not ended and has decided
	// nothing for that long is stuck: a task loops without a scheduling
	// point, or blocks on something the simulator does not know of, and
	// keeps the baton, which no step limit sees. A run that goes on
	// deciding, however long, is left to the step limit (the watch counts
	// its decisions through Progress, its own unless the options set one). Run cannot return from it (the stuck
	// goroutine cannot be stopped), so the process panics with a
	// *HangError naming the seed, the strategy and the stuck task's
	// stack: a test then fails with them at once instead of when go test
	// -timeout ends it.
	HangAfter time.Duration

	switcher Switcher
	onHang   func(*HangError) // ExploreOptions.ReturnHang: called in place of the panic
}

func (o *Options) strategy() Strategy {
	if o.Strategy == nil {
		return Random()
	}
	return o.Strategy
}

// Result is the outcome of a run.
type Result struct {
	// Err is nil, main's error, a *PanicError, a *DeadlockError, a
	// *StepLimitError, a *ScheduleMismatchError or a *NondeterminismError.
	// A task's panic that was still in flight when the run ended is joined
	// to the error that ended it (use errors.As).
	Err error
	// Steps is the number of scheduling decisions taken.
	Steps int64
	// Switches is the number of times the baton passed between tasks.
	Switches int64
	// Elapsed is the virtual time that passed.
	Elapsed time.Duration
	// TraceHash covers every decision, draw and event of the run.
	TraceHash uint64
	// Schedule records the decisions; Replay(Schedule) runs them again.
	Schedule *Schedule
	// Trace holds every event when Options.Trace was set.
	Trace *Trace
	// Seed and Strategy are those of the run.
	Seed     uint64
	Strategy string
	// Tasks is the number of tasks started.
	Tasks int
	// Warnings say what the strategy, or Run, could not do as asked (see
	// Warner; a CheckDeterminism with a Chooser of the caller's): the run
	// is not a failure for them, but it did not test what was meant.
	// A sweep should show each distinct one once.
	Warnings []string
	// Reached names the situations the program said it reached
	// (task.Reach), each once, in the order first reached.
	Reached []string
}

// StepLimited reports whether the run ended because it reached the step
// limit: a livelock or an overlong run, not a property failure.
func (r Result) StepLimited() bool {
	var sl *StepLimitError
	return errors.As(r.Err, &sl)
}

// Run runs main as the first task, named "main", under the simulator, one
// task at a time, and returns when main has returned (or the run failed) and
// every other task has been unwound. No goroutine outlives Run.
func Run(opts Options, main func(rt task.Runtime) error) Result {
	if opts.HangAfter > 0 {
		w := opts.Pool.hangWatch()
		w.begin(&opts)
		defer w.end()
	}
	if opts.CheckDeterminism {
		opts.NoHash = false
	}
	res := runOnce(&opts, main)
	if opts.CheckDeterminism && opts.Chooser == nil {
		again := runOnce(&opts, main)
		if err := differ(&opts, &res, &again); err != nil {
			res.Err = errors.Join(err, res.Err)
		}
	}
	if opts.CheckDeterminism && opts.Chooser != nil {
		res.Warnings = append(res.Warnings, noDeterminismCheck)
	}
	if w, ok := opts.Chooser.(*walkChooser); ok {
		res.Warnings = append(res.Warnings, w.unfollowed()...)
	}
	return res
}

// noDeterminismCheck is the warning of a run asked to CheckDeterminism with
// a chooser of the caller's, whose draws Run cannot repeat.
const noDeterminismCheck = "sim: CheckDeterminism did nothing: it needs the default chooser to run the seed twice, and Options.Chooser is set"

func runOnce(opts *Options, main func(rt task.Runtime) error) Result {
	c := opts.Chooser
	if c == nil {
		c = NewPCGChooser(opts.Seed, StreamStrategy)
	}
	s := newSched(opts, c)
	s.run(main)
	if p := opts.Pool; p != nil {
		p.slabs = [3]int{s.taskSlab.n, s.mutexSlab.n, s.condSlab.n}
	}
	err := s.err
	if err == nil {
		err = s.mainErr
	}
	if f, ok := s.policy.(Finisher); ok && s.err == nil {
		if ferr := f.Finish(s.steps); ferr != nil {
			err = errors.Join(ferr, err)
		}
	}
	var warnings []string
	if w, ok := s.policy.(Warner); ok {
		warnings = w.Warnings(s.tasks)
	}
	for _, t := range s.spun {
		warnings = append(warnings, fmt.Sprintf("sim: %s, unwound as the run ended, went on calling the runtime in a deferred call (%d calls: a wait for another task, which no longer runs); that deferred call was stopped", t, drainCallsMax))
	}
	names := make([]string, len(s.tasks))
	for i, t := range s.tasks {
		names[i] = t.name
	}
	s.schedule.Tasks = names
	s.schedule.keep()
	if s.trace != nil {
		s.trace.Tasks = names
	}
	hash := uint64(s.hash)
	if opts.NoHash {
		hash = 0
	}
	res := Result{
		Err: err, Steps: s.steps, Switches: s.switches, Elapsed: s.now, TraceHash: hash,
		Schedule: &s.schedule, Trace: s.trace, Seed: opts.Seed, Strategy: opts.strategy().String(), Tasks: len(s.tasks),
		Warnings: warnings, Reached: s.reached,
	}
	var pe *PanicError
	if errors.As(s.err, &pe) && !pe.Goexit {
		rp, _ := c.(Repanicker)
		if opts.Repanic || (rp != nil && rp.Repanic()) {
			repanic(pe.Value, pe.site)
		}
	}
	return res
}

func firstDivergence(a, b *Schedule) int64 {
	as, bs := a.Steps(), b.Steps()
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] != bs[i] {
			return int64(i + 1)
		}
	}
	if len(as) != len(bs) {
		return int64(min(len(as), len(bs)) + 1)
	}
	return 0
}

// PanicError is a panic, or a runtime.Goexit, in a simulated task. Its Error
// text holds the stack, whose goroutine numbers and addresses differ from run
// to run: a replay fails the same way when Task and Value are the same (and
// the TraceHash), not the text.
type PanicError struct {
	TaskID int
	Task   string
	Value  any
	Stack  []byte
	Goexit bool

	site uint64 // where it began, for Repanic
}

func (e *PanicError) Error() string {
	if e.Goexit {
		return fmt.Sprintf("sim: task %d %q called runtime.Goexit (t.FailNow or t.SkipNow from a simulated task?)", e.TaskID, e.Task)
	}
	return fmt.Sprintf("sim: task %d %q panicked: %v\n%s", e.TaskID, e.Task, e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// BlockedTask is a task in a deadlock.
type BlockedTask struct {
	ID       int
	Name     string
	Point    string // where it waits
	HolderID int    // for a mutex, the task that holds it; -1 otherwise
	Holder   string
}

// DeadlockError says that tasks wait while nothing can run and no timer is
// pending, or only timers past the end of virtual time, which never fire.
type DeadlockError struct {
	Step    int64
	At      time.Duration
	Blocked []BlockedTask
	// WallDeadlines counts the contexts watched with AfterContext that
	// have a deadline on the wall clock: one from context.WithTimeout,
	// which the simulator never waits for, and may be what the tasks wait
	// for. A deadline from task.WithTimeout or task.WithDeadline is on
	// the virtual clock and is not counted.
	WallDeadlines int
	// NeverTimers counts the timers pending past the end of virtual time
	// (a Sleep or AfterFunc more than about 292 years ahead), which never
	// fire: a task that sleeps on one waits for ever.
	NeverTimers int
}

func (e *DeadlockError) Error() string {
	var b strings.Builder
	pending := "no timer pending"
	if e.NeverTimers > 0 {
		pending = fmt.Sprintf("no timer pending but %d past the end of virtual time, which never fire (a sleep or AfterFunc of more than 292 years)", e.NeverTimers)
	}
	fmt.Fprintf(&b, "sim: deadlock at step %d (+%v): %d task(s) blocked, none runnable, %s:", e.Step, e.At, len(e.Blocked), pending)
	for _, t := range e.Blocked {
		fmt.Fprintf(&b, "\n  task %d %q waits at %q", t.ID, t.Name, t.Point)
		if t.HolderID >= 0 {
			fmt.Fprintf(&b, " (held by task %d %q)", t.HolderID, t.Holder)
		}
	}
	if e.WallDeadlines > 0 {
		fmt.Fprintf(&b, "\n  %d watched context(s) have a deadline on the wall clock, which virtual time never reaches"+
			" (context.WithTimeout? use task.WithTimeout(rt, ctx, d), due on the runtime's clock)", e.WallDeadlines)
	}
	return b.String()
}

// StepLimitError says that a run took more decisions than allowed.
type StepLimitError struct {
	Steps int64
	At    time.Duration
}

func (e *StepLimitError) Error() string {
	return fmt.Sprintf("sim: step limit of %d decisions reached at +%v: a livelock, or a run longer than Options.StepsMax allows", e.Steps, e.At)
}

// ScheduleMismatchError says that a replayed schedule no longer matches what
// the program does.
type ScheduleMismatchError struct {
	Step   int64
	Reason string
}

func (e *ScheduleMismatchError) Error() string {
	return fmt.Sprintf("sim: replay diverged at step %d: %s (was the code changed since the schedule was recorded?)", e.Step, e.Reason)
}

// differ compares two runs of one seed (CheckDeterminism): their trace
// hashes, and on the same hash what the hash leaves out — the situations
// each reached (task.Reach) and whether each failed. The same schedule
// that reaches another situation, or fails where it passed, is a program
// whose state outlives a run or comes from outside it.
func differ(opts *Options, a, b *Result) *NondeterminismError {
	e := &NondeterminismError{Seed: opts.Seed, Hashes: [2]uint64{a.TraceHash, b.TraceHash}}
	switch {
	case a.TraceHash != b.TraceHash:
		e.Step = -1 // without a record, where they part is not known
		if !opts.NoRecord {
			e.Step = firstDivergence(a.Schedule, b.Schedule)
		}
	case !slices.Equal(a.Reached, b.Reached):
		e.Reached = [2][]string{a.Reached, b.Reached}
	case (a.Err == nil) != (b.Err == nil):
		e.Errs = [2]error{a.Err, b.Err}
	default:
		return nil
	}
	return e
}

// NondeterminismError says that the same seed gave two different runs:
// different trace hashes, or on the same hash different situations reached
// or one run failing where the other passed.
type NondeterminismError struct {
	Seed   uint64
	Hashes [2]uint64
	// Step is the first decision that differed, 0 if the decisions agree,
	// -1 if they were not recorded (Options.NoRecord). It is 0 when the
	// hashes are the same.
	Step int64
	// Reached are the situations each run reached, set when the hashes
	// are the same and these differ.
	Reached [2][]string
	// Errs are the runs' errors, set when the hashes and the situations
	// are the same and one run failed where the other did not.
	Errs [2]error
}

func (e *NondeterminismError) Error() string {
	if e.Hashes[0] == e.Hashes[1] {
		var what string
		switch {
		case e.Reached[0] != nil || e.Reached[1] != nil:
			what = fmt.Sprintf("the situations reached differ: %s, then %s", reachedList(e.Reached[0]), reachedList(e.Reached[1]))
		case e.Errs[0] != nil:
			what = fmt.Sprintf("the first run failed and the second passed; the first failed with: %v", e.Errs[0])
		default:
			what = fmt.Sprintf("the first run passed and the second failed with: %v", e.Errs[1])
		}
		return fmt.Sprintf("sim: seed %d is not deterministic: the same schedule and trace hash %016x, but %s (state kept from an earlier run, a global, map iteration, wall time?)",
			e.Seed, e.Hashes[0], what)
	}
	where := fmt.Sprintf("first different decision at step %d", e.Step)
	switch {
	case e.Step < 0:
		where = "the decisions were not recorded (run it again without NoRecord to find the first that differs)"
	case e.Step == 0:
		where = "the same decisions, different events between them"
	}
	return fmt.Sprintf("sim: seed %d is not deterministic: trace hashes %016x and %016x, %s (map iteration, wall time, a goroutine the simulator does not manage?)",
		e.Seed, e.Hashes[0], e.Hashes[1], where)
}

// reachedList writes situations as a list, "none" for none.
func reachedList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return "[" + strings.Join(names, " ") + "]"
}

// ForeignGoroutineError is the panic of Options.Debug when a goroutine the
// simulator does not manage calls into it.
type ForeignGoroutineError struct {
	Goroutine uint64
	Running   string
}

func (e *ForeignGoroutineError) Error() string {
	return fmt.Sprintf("sim: goroutine %d called the simulated runtime while task %q holds the baton; only simulated tasks may call it (use Runtime.Go, not the go statement)", e.Goroutine, e.Running)
}

// Seed is the seed of the simulated run rt belongs to (Options.Seed), for
// a program that draws its workload from it as well as its schedule:
// NewPCGChooser(seed, StreamWorkload) gives every run of a seed the same
// workload. ok is false when rt is not the simulator's.
func Seed(rt task.Runtime) (seed uint64, ok bool) {
	s, ok := rt.(*sched)
	if !ok {
		return 0, false
	}
	return s.opts.Seed, true
}
