package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Guided follows a schedule leniently, for tools that edit schedules (a
// shrinker) and for schedules recorded on a slightly different program. At
// each decision it takes the schedule's next entry:
//
//   - a task entry runs that task when it is a candidate (and, when the
//     schedule lists task names, still has the recorded name);
//   - a wait entry withholds every candidate until its time when that time
//     is still ahead, and is skipped otherwise (the next entry is taken at
//     the same decision);
//   - when the recorded task cannot run, the decision falls back to the
//     calm choice, Candidates[0] — the task at the point when it may go on
//     (no preemption), else the candidate with the lowest ID — and the
//     entry is spent;
//   - once the schedule is exhausted every decision is calm: Guided never
//     withholds and never preempts on its own.
//
// Unlike Replay, Guided never fails a run: a schedule it follows to the
// letter gives the same run, the same decisions and the same trace hash as
// Replay would, and one it cannot follow still gives a run, whose own
// Result.Schedule records what really happened and replays strictly. When
// the run keeps a trace, every wait and every preemption Guided takes is
// explained in it ("guided: withhold task 2 "output-handler" for 150µs").
func Guided(s *Schedule) Strategy { return guidedStrategy{s: s} }

type guidedStrategy struct{ s *Schedule }

func (g guidedStrategy) String() string { return "guided" }

func (g guidedStrategy) NewPolicy(Chooser) Policy { return &guidedPolicy{s: g.s} }

type guidedPolicy struct {
	s     *Schedule
	c     cursor
	noted []time.Duration // by task ID: the end of the withholding last noted
}

func (p *guidedPolicy) Pick(v *View) Decision {
	for {
		task, until, ok := p.c.next(p.s)
		if !ok {
			return Pick(0)
		}
		if task < 0 {
			if until <= v.Now {
				continue // the clock is already past it
			}
			if v.Tracing() {
				p.noteWithheld(v, until)
			}
			return WaitUntil(until)
		}
		for i, t := range v.Candidates {
			if t.id != task || (task < len(p.s.Tasks) && p.s.Tasks[task] != t.name) {
				continue
			}
			if i != 0 && v.CanContinue && v.Tracing() {
				v.Note(fmt.Sprintf("guided: preempt task %d %q at %q to run task %d %q", v.At.id, v.At.name, v.At.point, t.id, t.name))
			}
			return Pick(i)
		}
		if v.Tracing() {
			v.Note(fmt.Sprintf("guided: the schedule runs task %d, which cannot run now; the calm choice runs task %d %q", task, v.Candidates[0].id, v.Candidates[0].name))
		}
		return Pick(0)
	}
}

// noteWithheld explains a wait in the trace: for every candidate not
// already said to be withheld, how long the schedule keeps it from running
// — until the last wait before its next entry.
func (p *guidedPolicy) noteWithheld(v *View, until time.Duration) {
	for _, t := range v.Candidates {
		for len(p.noted) <= t.id {
			p.noted = append(p.noted, 0)
		}
		if p.noted[t.id] > v.Now {
			continue
		}
		end := until
		for r := p.c.run + 1; r < len(p.s.runs); r++ {
			task, _, u := p.s.run(r)
			if task == t.id {
				break
			}
			if task < 0 {
				end = max(end, u)
			}
		}
		p.noted[t.id] = end
		v.Note(fmt.Sprintf("guided: withhold task %d %q for %v", t.id, t.name, end-v.Now))
	}
}

// Choice is one decision of a run together with what it was made on: the
// task at the scheduling point and whether that task could have gone on.
// A Schedule records only the decisions; Observe records Choices.
type Choice struct {
	// Step is the decision. For a wait, Until is the time the policy asked
	// for; the run's Schedule holds the time the clock really moved to,
	// earlier when a timer was due first.
	Step
	// At is the ID of the task at the scheduling point.
	At int
	// CanContinue reports whether At could have gone on.
	CanContinue bool
}

// Preempts reports whether the choice switched away from a task that could
// have gone on.
func (c Choice) Preempts() bool { return c.CanContinue && !c.Wait && c.Task != c.At }

// Preemptions counts the choices that switched away from a task that could
// have gone on.
func Preemptions(cs []Choice) int {
	n := 0
	for _, c := range cs {
		if c.Preempts() {
			n++
		}
	}
	return n
}

// Waits counts the choices that withheld every runnable task.
func Waits(cs []Choice) int {
	n := 0
	for _, c := range cs {
		if c.Wait {
			n++
		}
	}
	return n
}

// Observe wraps st so that every decision of a run made under it is passed
// to f as a Choice, in order. It adds a call per decision and nothing to
// runs that do not use it. f is called from the goroutine of the run; a
// Strategy from Observe is meant for one run at a time.
func Observe(st Strategy, f func(Choice)) Strategy { return observed{st: st, f: f} }

type observed struct {
	st Strategy
	f  func(Choice)
}

func (o observed) String() string { return o.st.String() }

func (o observed) NewPolicy(c Chooser) Policy {
	return &observedPolicy{p: o.st.NewPolicy(c), f: o.f}
}

type observedPolicy struct {
	p Policy
	f func(Choice)
}

func (o *observedPolicy) Pick(v *View) Decision {
	d := o.p.Pick(v)
	c := Choice{At: -1, CanContinue: v.CanContinue}
	if v.At != nil {
		c.At = v.At.id
	}
	switch {
	case d.Err != nil:
		return d
	case d.waits():
		c.Task, c.Wait, c.Until = -1, true, d.until()
	case d.Index >= 0 && d.Index < len(v.Candidates):
		c.Task = v.Candidates[d.Index].id
	default:
		return d // the simulator reports the bad index
	}
	o.f(c)
	return d
}

func (o *observedPolicy) Finish(steps int64) error {
	if f, ok := o.p.(Finisher); ok {
		return f.Finish(steps)
	}
	return nil
}

func (o *observedPolicy) Warnings(tasks []*Task) []string {
	if w, ok := o.p.(Warner); ok {
		return w.Warnings(tasks)
	}
	return nil
}

// Interleaving sums up how far a run strays from the calm one, in which
// every task runs until it blocks.
type Interleaving struct {
	// Decisions is the number of scheduling decisions.
	Decisions int64
	// Preemptions counts decisions that switched away from a task that could
	// have gone on.
	Preemptions int
	// Waits counts decisions that withheld every runnable task while the
	// clock moved on: starvation.
	Waits int
}

func interleavingOf(cs []Choice) Interleaving {
	return Interleaving{Decisions: int64(len(cs)), Preemptions: Preemptions(cs), Waits: Waits(cs)}
}

// simpler orders interleavings: fewer preemptions, then fewer waits, then
// fewer decisions.
func (a Interleaving) simpler(b Interleaving) bool {
	if a.Preemptions != b.Preemptions {
		return a.Preemptions < b.Preemptions
	}
	if a.Waits != b.Waits {
		return a.Waits < b.Waits
	}
	return a.Decisions < b.Decisions
}

func (a Interleaving) String() string {
	return fmt.Sprintf("%d preemptions, %d waits, %d decisions", a.Preemptions, a.Waits, a.Decisions)
}

// DefaultShrinkRunsMax is how many runs Shrink makes when
// ShrinkOptions.RunsMax is zero.
const DefaultShrinkRunsMax = 2000

// shrinkRoundsMax bounds the rounds of delta debugging, each over the
// preemptions and waits of the simplest run found so far.
const shrinkRoundsMax = 20

// ShrinkOptions bound a Shrink.
type ShrinkOptions struct {
	// RunsMax bounds the runs of the program; 0 means DefaultShrinkRunsMax.
	RunsMax int
	// StepsMax bounds the decisions of every candidate run, whose edited
	// schedule may send the program down a much longer path; 0 means ten
	// times the failing schedule's length plus 10000, and a negative value
	// means the simulator's own default.
	StepsMax int64
	// Progress, if set, is called after every run that found a simpler
	// failing interleaving.
	Progress func(ShrinkStats)
}

// ShrinkStats is what a Shrink did.
type ShrinkStats struct {
	// Runs is the number of runs of the program.
	Runs int
	// Rounds is the number of rounds of delta debugging.
	Rounds int
	// Before is the failing run as given, After the simplest failing run
	// found.
	Before, After Interleaving
	// Exhausted reports that RunsMax ended the shrink before it was done;
	// Cancelled that the context did.
	Exhausted, Cancelled bool
}

// ShrinkTest runs the program once with opts — adding what the program
// needs, such as the seed, but keeping opts.Strategy and opts.StepsMax and
// recording the schedule — and reports whether the run fails the way being
// shrunk (the same failure signature, not merely any failure).
type ShrinkTest func(opts Options) (res Result, fails bool)

// ErrShrinkNoFailure is Shrink's error when the failing schedule, followed
// by Guided, does not fail the way test looks for: the program changed since
// it was recorded, or the failure is not deterministic.
var ErrShrinkNoFailure = errors.New("sim: the schedule to shrink does not fail under guided replay (was the code changed since it was recorded?)")

// Shrink minimises a failing schedule to a run with as few preemptions and
// waits as it can find that still fails the same way, by delta debugging
// (Zeller's ddmin) over the recorded decisions, and returns the failing
// run's schedule, which Replay follows strictly.
//
// A run is seen as segments — stretches of one task — separated by
// scheduling decisions. Most separations are forced (the task blocked); a
// preemption (a task that could have gone on was switched away from) and a
// wait (every runnable task withheld while the clock moves on) are choices,
// and they are what Shrink removes. Removing a wait lets the withheld tasks
// run. Removing a preemption lets the preempted task go on, in one of two
// ways: its next segment moves up to run at once (when it never runs again,
// the run is cut there and calm choices follow), or the segment that
// preempted it moves down to just before its own task's next segment.
// Each candidate runs under Guided, so an edit the program does not follow
// exactly still gives a real run; a candidate is kept when it fails the
// same way and is no less simple (fewer preemptions, then fewer waits, then
// fewer decisions) than the simplest run so far.
//
// Shrink first cuts the schedule to the shortest prefix that still fails,
// found by bisection — after it, every decision is calm. Then it runs
// rounds, each over the choices of the simplest run found so far: ddmin
// over its waits, ddmin over its preemptions undone the first way, then
// the second way, and the prefix cut again; it stops when a round finds
// nothing simpler.
//
// The work is bounded by opts.RunsMax and by ctx; either ends the shrink
// early with the simplest run found so far. The schedule returned carries
// failing's Meta; the caller updates what changed.
func Shrink(ctx context.Context, failing *Schedule, test ShrinkTest, opts ShrinkOptions) (*Schedule, ShrinkStats, error) {
	sh := &shrinker{ctx: ctx, test: test, opts: opts, tasks: failing.Tasks, runsMax: opts.RunsMax}
	if sh.runsMax <= 0 {
		sh.runsMax = DefaultShrinkRunsMax
	}
	sh.stepsMax = opts.StepsMax
	switch {
	case sh.stepsMax == 0:
		sh.stepsMax = 10*failing.Len() + 10000
	case sh.stepsMax < 0:
		sh.stepsMax = 0
	}
	first, fails := sh.try(failing.Steps())
	if first == nil {
		return nil, sh.stats, ctx.Err()
	}
	if !fails {
		return nil, sh.stats, ErrShrinkNoFailure
	}
	sh.best = first
	sh.stats.Before, sh.stats.After = first.shape, first.shape
	if !sh.stopped() {
		sh.prefix()
	}
	for !sh.stopped() && sh.stats.Rounds < shrinkRoundsMax {
		sh.stats.Rounds++
		before := sh.best.shape
		// Waits first: a run starved less has fewer preemptions to shrink.
		// Then preemptions, undone both ways.
		sh.ddmin(true, false)
		sh.ddmin(false, false)
		sh.ddmin(false, true)
		sh.prefix()
		if !sh.best.shape.simpler(before) {
			break
		}
	}
	out := sh.best.res.Schedule
	out.Meta = append([]Meta(nil), failing.Meta...)
	return out, sh.stats, nil
}

type shrinker struct {
	ctx      context.Context
	test     ShrinkTest
	opts     ShrinkOptions
	tasks    []string
	runsMax  int
	stepsMax int64
	stats    ShrinkStats
	best     *attempt
}

// attempt is one candidate's run.
type attempt struct {
	res     Result
	choices []Choice // what each decision was made on, with the decisions as recorded
	shape   Interleaving
}

func (sh *shrinker) stopped() bool { return sh.stats.Exhausted || sh.stats.Cancelled }

// try runs the program under Guided(steps). It returns nil when the budget
// or the context ended the shrink.
func (sh *shrinker) try(steps []Step) (*attempt, bool) {
	if sh.ctx.Err() != nil {
		sh.stats.Cancelled = true
		return nil, false
	}
	if sh.stats.Runs >= sh.runsMax {
		sh.stats.Exhausted = true
		return nil, false
	}
	sh.stats.Runs++
	var cs []Choice
	st := Observe(Guided(NewSchedule(steps, sh.tasks, nil)), func(c Choice) { cs = append(cs, c) })
	res, fails := sh.test(Options{Strategy: st, StepsMax: sh.stepsMax})
	if res.Schedule == nil || (res.Schedule.Len() == 0 && res.Steps > 0) {
		panic("sim: Shrink's test must run the program with the options it is given, recording the schedule (no Options.NoRecord)")
	}
	// The schedule holds the wait times the clock really moved to.
	recorded := res.Schedule.Steps()
	cs = cs[:min(len(cs), len(recorded))]
	for i := range cs {
		if cs[i].Wait {
			cs[i].Until = recorded[i].Until
		}
	}
	return &attempt{res: res, choices: cs, shape: interleavingOf(cs)}, fails
}

// consider tries steps and keeps the run when it fails the same way and is
// no less simple than the best so far. It reports whether it kept it.
func (sh *shrinker) consider(steps []Step) bool {
	a, fails := sh.try(steps)
	if a == nil || !fails || sh.best.shape.simpler(a.shape) {
		return false
	}
	improved := a.shape.simpler(sh.best.shape)
	sh.best = a
	sh.stats.After = a.shape
	if improved && sh.opts.Progress != nil {
		sh.opts.Progress(sh.stats)
	}
	return true
}

// prefix cuts the best run's decisions to the shortest prefix that still
// fails, found by bisection; the run goes on calmly after it.
func (sh *shrinker) prefix() {
	steps := stepsOf(sh.best.choices)
	lo, hi := 0, len(steps)
	for lo < hi && !sh.stopped() {
		mid := lo + (hi-lo)/2
		if sh.consider(steps[:mid]) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
}

// ddmin runs delta debugging over the preemptions (waits false) or the
// waits (waits true) of the best run, keeping every choice of the other
// kind, and leaves the simplest failing run it found in sh.best.
func (sh *shrinker) ddmin(waits, later bool) {
	base := segmentsOf(sh.best.choices)
	var items, others []int // indices into base
	for i, s := range base {
		switch {
		case s.wait == waits && (s.wait || s.preempts):
			items = append(items, i)
		case s.wait || s.preempts:
			others = append(others, i)
		}
	}
	test := func(keep []int) bool {
		if sh.stopped() {
			return false
		}
		all := append(append([]int(nil), others...), keep...)
		slices.Sort(all)
		return sh.consider(build(base, all, later))
	}
	keep := items
	for n := 2; len(keep) > 0 && !sh.stopped(); {
		if len(keep) == 1 {
			test(nil) // ddmin's base case: without the last one
			return
		}
		n = min(n, len(keep))
		chunks := split(keep, n)
		reduced := false
		for _, c := range chunks {
			if test(c) {
				keep, n, reduced = c, 2, true
				break
			}
		}
		// With two chunks each complement is the other chunk, tried above.
		for i := 0; !reduced && n > 2 && i < len(chunks); i++ {
			if rest := without(chunks, i); test(rest) {
				keep, n, reduced = rest, max(n-1, 2), true
			}
		}
		if !reduced {
			if n >= len(keep) {
				return
			}
			n = min(2*n, len(keep))
		}
	}
}

// split cuts xs into n nearly equal chunks, in order.
func split(xs []int, n int) [][]int {
	out := make([][]int, 0, n)
	for i := 0; i < n; i++ {
		lo, hi := len(xs)*i/n, len(xs)*(i+1)/n
		if hi > lo {
			out = append(out, xs[lo:hi])
		}
	}
	return out
}

// without concatenates every chunk but the i-th.
func without(chunks [][]int, i int) []int {
	var out []int
	for j, c := range chunks {
		if j != i {
			out = append(out, c...)
		}
	}
	return out
}

// segment is a stretch of one task's decisions, or one wait.
type segment struct {
	task     int // -1 for a wait
	n        int
	until    time.Duration
	wait     bool
	preempts bool // its first decision switched away from prev, which could have gone on
	prev     int
}

// segmentsOf cuts a run's choices into segments.
func segmentsOf(cs []Choice) []segment {
	var out []segment
	for _, c := range cs {
		switch {
		case c.Wait:
			out = append(out, segment{task: -1, n: 1, until: c.Until, wait: true})
		case len(out) > 0 && !out[len(out)-1].wait && out[len(out)-1].task == c.Task:
			out[len(out)-1].n++
		default:
			out = append(out, segment{task: c.Task, n: 1, preempts: c.Preempts(), prev: c.At})
		}
	}
	return out
}

// build returns the decisions of base with only the preemptions and waits
// of the segments listed in keep (ascending indices into base): every other
// wait is dropped, and every other preemption is undone — when later is
// false, by moving the preempted task's next segment up in front of the
// segment that preempted it (or, when the preempted task never runs again,
// by cutting the run there, so that calm choices follow); when later is
// true, by moving the preempting segment down to just before its own task's
// next segment.
func build(base []segment, keep []int, later bool) []Step {
	kept := make(map[int]bool, len(keep)) // looked up, never ranged
	for _, i := range keep {
		kept[i] = true
	}
	type seg struct {
		segment
		undo bool // a preemption to undo
	}
	list := make([]seg, 0, len(base))
	for i, s := range base {
		if s.wait && !kept[i] {
			continue
		}
		list = append(list, seg{segment: s, undo: s.preempts && !kept[i]})
	}
	for i := 0; i < len(list); i++ {
		if !list[i].undo {
			continue
		}
		list[i].undo = false
		if later {
			// The preempting segment waits for its task's next segment.
			s := list[i]
			j := i + 1
			for j < len(list) && (list[j].wait || list[j].task != s.task) {
				j++
			}
			copy(list[i:j-1], list[i+1:j])
			list[j-1] = s
			i--
			continue
		}
		j := i + 1
		for j < len(list) && (list[j].wait || list[j].task != list[i].prev) {
			j++
		}
		if j == len(list) {
			// The preempted task never ran again: cut the run here, and
			// the calm choices that follow let it go on.
			list = list[:i]
			break
		}
		moved := list[j]
		moved.undo = false // it now goes on from the preempted task's own segment
		copy(list[i+1:j+1], list[i:j])
		list[i] = moved
	}
	var steps []Step
	for _, s := range list {
		for k := 0; k < s.n; k++ {
			steps = append(steps, Step{Task: s.task, Wait: s.wait, Until: s.until})
		}
	}
	return steps
}

func stepsOf(cs []Choice) []Step {
	out := make([]Step, len(cs))
	for i, c := range cs {
		out[i] = c.Step
	}
	return out
}

// String renders the choice as a trace line would: "2→1 (preempts)".
func (c Choice) String() string {
	switch {
	case c.Wait:
		return "@" + strconv.FormatInt(int64(c.Until), 10)
	case c.Preempts():
		return fmt.Sprintf("%d→%d (preempts)", c.At, c.Task)
	}
	return fmt.Sprintf("%d→%d", c.At, c.Task)
}
