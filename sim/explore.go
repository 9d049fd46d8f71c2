package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/llmdst/llmdst/task"
)

// DefaultExploreDelays is ExploreOptions.Delays when it is 0: within two
// departures from the calm schedule lie the lost updates, the check-then-act
// races and the lock-order deadlocks of two tasks.
const DefaultExploreDelays = 2

// ExploreOptions bound Explore.
type ExploreOptions struct {
	// Options are every run's. Strategy is what is explored: nil is
	// Random, which orders tasks; Chaos and Starve also withhold them
	// (see Explore); PCT, whose draws are priorities of 2^30 answers, and
	// Replay, which draws nothing, cannot be. Chooser must be nil: Explore
	// answers the draws with a chooser of its own, which walks them.
	// CheckDeterminism must be false: Explore checks instead that every run
	// draws as the one it was derived from did, up to where it departs.
	Options
	// Delays is the most draws a schedule may make other than the calm one
	// (0: the task at the scheduling point goes on, or, when it cannot, the
	// first of the others by ID): delay bounding. 0 means
	// DefaultExploreDelays; a negative value means no bound. Bugs that need
	// few departures from the calm schedule are the common ones, and the
	// number of schedules grows as the number of scheduling points to the
	// power Delays.
	Delays int
	// MaxRuns stops the exploration after this many runs, Complete false;
	// 0 means no bound.
	MaxRuns int
	// Workers is how many goroutines run schedules at once (0 is 1). Each
	// takes the schedules whose first departure is at a draw whose number
	// is its own modulo Workers, in depth-first order, so main must share
	// nothing writable between runs. Runs and Complete of an exploration
	// that ends complete, and the failure of one that fails — the first in
	// depth-first order, whichever worker found it — are the same for any
	// number of workers; only Runs of one that fails depends on it. Each
	// worker has a Pool of its own: Options.Pool is not used.
	Workers int
	// Shard and Shards, when Shards is above 1, make this exploration one
	// of Shards (a CI matrix's job): it runs the schedules whose first
	// departure is at a draw whose number is Shard modulo Shards, 0 ≤
	// Shard < Shards, split among its Workers as a whole walk is. The
	// split depends on neither Workers nor the machine: the shards' Runs
	// add up to the whole walk's, it is complete when every shard is, and
	// its failure is the first, in depth-first order (by Draws), of the
	// shards' failures. Shard 0 counts the calm schedule.
	Shard, Shards int
	// OnRun, if set, is called after each run Runs counts, from the worker
	// that made it, so at once from several: for a progress display.
	OnRun func()
	// ReturnHang, with HangAfter set, makes a run that hangs end the
	// exploration with a *HangError, whose Draws are the run's, instead of
	// panicking the process. The run's goroutine cannot be stopped: it is
	// left behind, spinning or blocked, and so are its worker's. This is
	// for a tool that reports the hang and exits (simrun explore); in a
	// test, the panic is the better end.
	ReturnHang bool
}

// ExploreResult is what Explore ran and found.
type ExploreResult struct {
	// Runs is the number of runs made, each a distinct schedule.
	Runs int
	// Complete is set when every schedule within Delays was run and none
	// failed: for that program, seed and bound, the property holds under
	// every interleaving, not only under those a sample of seeds drew.
	Complete bool
	// Failed is the first run that failed, in the order explored (nil when
	// none did), run again with the caller's Options: its Schedule, when
	// recorded, replays it (Replay) and shrinks (Shrink).
	Failed *Result
	// Draws are the failing run's draws, at most Delays of them other than
	// 0: FollowDraws runs it again.
	Draws Draws
	// Deepest is the most draws one run made.
	Deepest int
}

// Departures is how many of Draws are not the calm answer 0: how far the
// failing schedule departs from the calm one.
func (r ExploreResult) Departures() int { return r.Draws.Departures() }

// Explore runs main under every schedule that departs from the calm one
// at most opts.Delays times, one after another, depth first, and stops at
// the first that fails. It is stateless model checking in the manner of
// CHESS: each schedule is a fresh run from the start, its draws those of
// the run before it up to the last one that still had an untried answer
// within the bound, that answer there, and 0 after. It needs what a sweep
// needs: main builds all its state afresh, and a run depends only on the
// seed and the draws.
//
// Under Random, Explore orders tasks at scheduling points and never
// withholds one while virtual time passes. A race that needs a task
// starved for a while — the founding race needs its output handler starved
// — needs Chaos or Starve: under them a window may open at any decision,
// for any task the strategy may starve and any of its window lengths
// (StarveWindows, 50µs·2^k), and the other tasks are ordered within it.
// Opening a window is a departure, and so are a window longer than the
// shortest and a victim other than the first; the lengths between the
// strategy's are not tried, since a wait of any length is a different
// schedule and there is no end to them.
//
// It returns an error, with the result so far, for options it cannot
// honour, when a run drew differently from the run it was derived from
// (main depends on something besides the seed and the draws), and when
// ctx is done; a failure found by then is in Failed, though another
// worker might have found one earlier in depth-first order.
func Explore(ctx context.Context, opts ExploreOptions, main func(rt task.Runtime) error) (ExploreResult, error) {
	var res ExploreResult
	if err := opts.Check(); err != nil {
		return res, err
	}
	x := &explorer{delays: opts.Delays, maxRuns: int64(opts.MaxRuns), workers: max(opts.Workers, 1), onRun: opts.OnRun,
		shard: opts.Shard, shards: max(opts.Shards, 1)}
	if x.delays == 0 {
		x.delays = DefaultExploreDelays
	}
	run := opts.Options
	run.Strategy = run.strategy()
	run.NoRecord, run.NoHash, run.Trace = true, true, false
	// Each worker reports what it ran on done, or, when a run of it
	// hangs, its watch reports the hang there first: then Explore does not
	// wait for it, since it may never end, and takes no later report of
	// it. Two reports a worker at most.
	done := make(chan explored, 2*x.workers)
	for w := range x.workers {
		go func() {
			// A pool of the worker's own, whose goroutines and hang
			// watch are its goroutine's.
			o := run
			o.Pool = NewPool()
			defer o.Pool.Close()
			if opts.ReturnHang {
				// A hung worker's report: nothing counted, not complete.
				o.onHang = func(h *HangError) { x.hang(h); done <- explored{worker: w} }
			}
			f := x.walk(ctx, w, o, main)
			f.worker = w
			done <- f
		}()
	}
	res.Complete = true
	reported := make([]bool, x.workers)
	for ended := 0; ended < x.workers; {
		f := <-done
		if reported[f.worker] {
			continue // a hung run that ended after all
		}
		reported[f.worker] = true
		ended++
		res.Runs += f.runs
		res.Deepest = max(res.Deepest, f.deepest)
		res.Complete = res.Complete && f.complete // false for a hang
	}
	if x.hangErr != nil {
		return res, x.hangErr
	}
	if x.err != nil {
		return res, x.err
	}
	if x.failed == nil {
		return res, ctx.Err()
	}
	res.Draws = x.failed.draws
	again := opts.Options
	ac := &walkChooser{prefix: x.failed.draws, among: x.failed.ranges}
	again.Strategy, again.Chooser = run.Strategy, ac
	f := Run(again, main)
	res.Failed = &f
	if ac.err != nil {
		return res, ac.err
	}
	// A failure found before ctx was done is kept: it is one, if not
	// then the first in depth-first order.
	return res, ctx.Err()
}

// Bound says in words which schedules opts lets Explore run: "within 2
// departures", "with no bound on departures".
func (opts ExploreOptions) Bound() string {
	switch d := cmp.Or(opts.Delays, DefaultExploreDelays); {
	case d < 0:
		return "with no bound on departures"
	case d == 1:
		return "within 1 departure"
	default:
		return fmt.Sprintf("within %d departures", d)
	}
}

// Check reports the first option Explore would refuse, saying why, so that
// a caller can say so before anything runs.
func (opts ExploreOptions) Check() error {
	if err := explorable(opts.Strategy); err != nil {
		return err
	}
	switch {
	case opts.Chooser != nil:
		return errors.New("sim: Explore draws its own schedules: Options.Chooser must be nil")
	case opts.CheckDeterminism:
		return errors.New("sim: Explore checks each run against the one it was derived from: Options.CheckDeterminism must be false")
	case opts.Workers < 0:
		return fmt.Errorf("sim: Explore: Workers must be ≥ 0, got %d", opts.Workers)
	case opts.Shards < 0:
		return fmt.Errorf("sim: Explore: Shards must be ≥ 0, got %d", opts.Shards)
	case opts.Shard < 0 || opts.Shard >= max(opts.Shards, 1):
		return fmt.Errorf("sim: Explore: Shard must be from 0 to Shards-1 (%d), got %d", max(opts.Shards, 1)-1, opts.Shard)
	}
	return nil
}

// explorer is what Explore's workers share.
type explorer struct {
	delays  int
	maxRuns int64
	workers int
	shard   int // this exploration's, of shards
	shards  int
	onRun   func()
	runs    atomic.Int64 // runs begun, counted against maxRuns when it is set
	stop    atomic.Bool  // MaxRuns reached, or an error

	mu      sync.Mutex
	failed  *walkChooser // the first failure in depth-first order found so far
	err     error
	hangErr *HangError // the first run that hung (ReturnHang)
}

// explored is what one worker ran.
type explored struct {
	worker        int
	runs, deepest int  // runs: those it counts (the calm one is the first worker's)
	complete      bool // its share ran to the end without a failure
}

// hang records the hang of a run and stops the other workers. It is called
// from the hung run's watch, which holds the run's goroutine back from
// going on to its next run until it returns.
func (x *explorer) hang(h *HangError) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.hangErr == nil {
		x.hangErr = h
	}
	x.stop.Store(true)
}

// walk runs worker w's share of the schedules, depth first, until it is
// done, a failure comes before its next schedule in depth-first order, or
// the exploration stops.
func (x *explorer) walk(ctx context.Context, w int, run Options, main func(rt task.Runtime) error) explored {
	var e explored
	c := &walkChooser{}
	run.Chooser = c
	// Draw i is first departed from by shard i mod shards, and within it
	// by worker (i div shards) mod workers.
	owns := func(i int) bool { return i%x.shards == x.shard && i/x.shards%x.workers == w }
	for !x.stop.Load() && ctx.Err() == nil && !x.passed(c.prefix) {
		// Every worker runs the calm schedule, to learn its draws; the
		// first of shard 0 counts it.
		counts := (w == 0 && x.shard == 0) || len(c.prefix) > 0
		if counts && x.maxRuns > 0 && x.runs.Add(1) > x.maxRuns {
			x.stop.Store(true)
			break
		}
		c.start()
		r := Run(run, main)
		if counts {
			e.runs++
			if x.onRun != nil {
				x.onRun()
			}
		}
		e.deepest = max(e.deepest, len(c.draws))
		if c.err != nil {
			x.end(c.err)
			return e
		}
		if r.Err != nil {
			x.fail(c)
			return e
		}
		if !c.next(x.delays, owns) {
			e.complete = true
			return e
		}
	}
	return e
}

// end stops the exploration with err.
func (x *explorer) end(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil {
		x.err = err
	}
	x.stop.Store(true)
}

// fail records c's run as failed, if it comes before the one recorded.
func (x *explorer) fail(c *walkChooser) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.failed == nil || slices.Compare(c.draws, x.failed.draws) < 0 {
		x.failed = &walkChooser{draws: c.draws, ranges: c.ranges}
	}
}

// passed reports whether the schedule of prefix, and so every one a worker
// would run after it, comes after the failure found in depth-first order:
// its draws are prefix and then 0s, and depth-first order is the order of
// draws, number by number.
func (x *explorer) passed(prefix []int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.failed == nil {
		return false
	}
	f := x.failed.draws
	n := min(len(prefix), len(f))
	if c := slices.Compare(prefix[:n], f[:n]); c != 0 {
		return c > 0
	}
	return len(prefix) > len(f)
}

// explorable reports why Explore cannot walk the draws of st, if it cannot.
// A strategy of the caller's own is taken on trust: Explore still reports
// a run that draws differently from the one it follows.
func explorable(st Strategy) error {
	switch st := st.(type) {
	case pctStrategy:
		return fmt.Errorf("sim: Explore cannot walk %v: its draws are priorities of 2^30 answers each; explore random, chaos or starve:PREFIX", st)
	case replayStrategy:
		return errors.New("sim: Explore cannot walk replay: it draws nothing, so there is one schedule, the one replayed; explore random, chaos or starve:PREFIX")
	case observed:
		return explorable(st.st)
	}
	return nil
}

// walkChooser answers a run's draws from prefix, then with 0, and keeps
// each draw's answer and range for next to derive the following schedule.
type walkChooser struct {
	prefix []int
	among  []int // the n of each draw of prefix, in the run it came from
	draws  []int // the answer given at each draw
	ranges []int // the n of each draw
	err    error
}

func (c *walkChooser) start() {
	c.draws, c.ranges = c.draws[:0], c.ranges[:0]
}

func (c *walkChooser) Intn(n int) int {
	i, v := len(c.draws), 0
	if i < len(c.prefix) {
		v = c.prefix[i]
		if i < len(c.among) && n != c.among[i] && c.err == nil {
			c.err = fmt.Errorf("sim: Explore: draw %d of a run had %d answers where the run it follows had %d: main depends on something besides the seed and the draws", i+1, n, c.among[i])
		}
		v = min(v, n-1)
	}
	c.draws = append(c.draws, v)
	c.ranges = append(c.ranges, n)
	return v
}

// unfollowed says which answers of the draws a run followed (FollowDraws)
// it could not give: a draw the run never made, or an answer past a
// draw's last, given as its last. The run is then not the schedule asked
// for.
func (c *walkChooser) unfollowed() []string {
	var w []string
	for i, v := range c.prefix {
		switch {
		case v == 0:
		case i >= len(c.ranges):
			return append(w, fmt.Sprintf("sim: draws: the run made %d draws, so the answer %d:%d and any after it were never given: the run is the calm one from there", len(c.ranges), i+1, v))
		case v >= c.ranges[i]:
			w = append(w, fmt.Sprintf("sim: draws: draw %d had %d answers, so %d:%d was answered %d, its last", i+1, c.ranges[i], i+1, v, c.ranges[i]-1))
		}
	}
	return w
}

// next sets prefix to the schedule after the one just run, in depth-first
// order, among those whose first departure is at a draw i that owns(i):
// its draws up to the last one with an answer left untried whose schedule
// departs from the calm one at most delays times (all of them for delays
// < 0), and that answer. It reports false when there is none.
func (c *walkChooser) next(delays int, owns func(i int) bool) bool {
	departs, first := 0, len(c.draws) // departures before draw i; the first
	for i, v := range c.draws {
		if v != 0 {
			departs++
			first = min(first, i)
		}
	}
	for i := len(c.draws) - 1; i >= 0; i-- {
		if c.draws[i] != 0 {
			departs--
		}
		// After the first departure, the schedule is this one's, which
		// is the caller's; at or before it, it is a first departure.
		if c.draws[i]+1 < c.ranges[i] && (delays < 0 || departs+1 <= delays) && (i > first || owns(i)) {
			c.prefix = append(append(c.prefix[:0], c.draws[:i]...), c.draws[i]+1)
			c.among = append(c.among[:0], c.ranges[:i+1]...)
			return true
		}
	}
	return false
}
