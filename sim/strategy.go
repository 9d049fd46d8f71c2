package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Strategy is a policy for choosing which task runs at each scheduling
// point. A Strategy value is a description and may be shared between runs
// and goroutines; NewPolicy makes the state of one run.
type Strategy interface {
	// String names the strategy as ParseStrategy reads it ("pct:3").
	String() string
	// NewPolicy returns the state of one run, drawing from c.
	NewPolicy(c Chooser) Policy
}

// Policy makes the decisions of one run.
type Policy interface {
	// Pick decides what happens at a scheduling point.
	Pick(v *View) Decision
}

// Finisher is implemented by policies that have something to say when the
// run ends (Replay: decisions left over).
type Finisher interface {
	Finish(steps int64) error
}

// Warner is implemented by policies that can tell, once the run is over,
// that they could not do what they were asked (Starve: no task had a name
// its prefix matches, so nothing was starved). The run does not fail for
// it, since the program did nothing wrong, but a strategy that did nothing
// is most often a misspelt name: the warnings are in Result.Warnings.
type Warner interface {
	// Warnings says what went unheeded; tasks are every task the run
	// started, by ID.
	Warnings(tasks []*Task) []string
}

// View is what a Policy sees at a scheduling point. It is reused between
// calls; keep nothing from it but task IDs and names.
type View struct {
	// Now is the virtual time since Epoch.
	Now time.Duration
	// Step is the number of this decision, from 1.
	Step int64
	// At is the task at the scheduling point.
	At *Task
	// CanContinue reports whether At may go on, in which case it is
	// Candidates[0]; it is false when At blocked or exited.
	CanContinue bool
	// Candidates are the tasks that may run, At first when it may go on,
	// then the others by ID.
	Candidates []*Task
	// Live is every task that has not ended, by ID, whatever its state.
	Live []*Task
	// Chooser is the run's recorded source of decisions.
	Chooser Chooser

	s           *sched
	liveVersion int64 // changes whenever Live does
}

// Tracing reports whether the run keeps a trace, so that a policy formats
// notes only when someone will read them.
func (v *View) Tracing() bool { return v.s != nil && v.s.trace != nil }

// Note records a strategy event ("withhold output-handler for 2ms") in the
// trace.
func (v *View) Note(msg string) {
	if v.Tracing() {
		v.s.event(Event{Kind: EvStrategy, Task: -1, Text: msg})
	}
}

// Decision is what a Policy decided; Pick, WaitUntil and Fail make them.
// A Decision whose Until is set waits, whatever its Index.
type Decision struct {
	// Index is the candidate to run.
	Index int
	// Until is the virtual time to wait for, when the policy withholds every
	// candidate.
	Until time.Duration
	// Err ends the run with this error.
	Err error
	// Three fields in 32 bytes and no more: the compiler keeps a value
	// that small in registers, where a bigger one is copied through memory
	// at every decision.
}

// waits reports whether the decision withholds every candidate.
func (d Decision) waits() bool { return d.Until != 0 }

// until is the time a waiting decision asked for.
func (d Decision) until() time.Duration {
	if d.Until == waitAtZero {
		return 0
	}
	return d.Until
}

// Pick runs Candidates[i].
func Pick(i int) Decision { return Decision{Index: i} }

// waitAtZero is what WaitUntil(0) records: Until 0 means no wait, and a
// wait until 0 is as wrong as this one, since the clock starts at 0.
const waitAtZero time.Duration = math.MinInt64

// WaitUntil withholds every candidate: the clock moves on to t, or to the
// next timer if that comes first. t must be after now.
func WaitUntil(t time.Duration) Decision {
	if t == 0 {
		t = waitAtZero
	}
	return Decision{Until: t}
}

// Fail ends the run with err.
func Fail(err error) Decision { return Decision{Err: err} }

// Random picks uniformly among the runnable tasks at every point.
func Random() Strategy { return randomStrategy{} }

type randomStrategy struct{}

func (randomStrategy) String() string           { return "random" }
func (randomStrategy) NewPolicy(Chooser) Policy { return randomPolicy{} }
func (randomPolicy) Pick(v *View) Decision      { return Pick(v.Chooser.Intn(len(v.Candidates))) }

type randomPolicy struct{}

// DefaultPCTSteps is PCT's estimate of a run's length when none is given.
const DefaultPCTSteps = 1000

// PCT is probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010)
// with the default step estimate.
func PCT(depth int) Strategy { return PCTSteps(depth, DefaultPCTSteps) }

// PCTDepthMax bounds PCT's depth. A run draws depth−1 change points as it
// starts, so a depth of millions costs memory and time before the first
// decision, and the bound of 1/(n·k^(d−1)) is nothing long before that:
// bugs are found at depths of a few.
const PCTDepthMax = 1 << 10

// PCTSteps is PCT for bugs of the given depth in runs of about k steps:
// every task gets a random priority when first seen, the highest-priority
// runnable task runs, and at depth−1 random steps the running task drops
// below every initial priority. A bug of depth d is found with probability
// at least 1/(n·k^(d−1)) for n tasks. A task that yields without blocking
// drops below every task, and so does one that goes on for
// PCTSpinDecisionsMax decisions in a row while another could run, so a
// busy loop cannot hold the run forever. A
// depth below 1 is taken as 1 and one above PCTDepthMax as PCTDepthMax.
func PCTSteps(depth int, k int64) Strategy {
	depth = min(max(depth, 1), PCTDepthMax)
	if k < 1 {
		k = 1
	}
	return pctStrategy{depth: depth, k: k}
}

type pctStrategy struct {
	depth int
	k     int64
}

func (p pctStrategy) String() string {
	if p.k == DefaultPCTSteps {
		return "pct:" + strconv.Itoa(p.depth)
	}
	return fmt.Sprintf("pct:%d:%d", p.depth, p.k)
}

func (p pctStrategy) NewPolicy(c Chooser) Policy {
	pol := &pctPolicy{depth: p.depth}
	// The i-th change point drawn lowers the running task to priority i,
	// wherever it falls in the run: the order of the lowered tasks is not
	// the order of the change points in time, and a bug that needs a task
	// lowered earlier to run before one lowered later (a preempted, then b
	// preempted so that a goes on) is found as often as the reverse.
	for i := 1; i < p.depth; i++ {
		pol.changes = append(pol.changes, pctChange{step: int64(c.Intn(int(min(p.k, 1<<30)))) + 1, prio: int64(i)})
	}
	slices.SortStableFunc(pol.changes, func(a, b pctChange) int { return cmp.Compare(a.step, b.step) })
	return pol
}

// pctChange is a change point: at step, the running task drops to prio.
type pctChange struct {
	step int64
	prio int64 // 1..depth-1: below every initial priority
}

type pctPolicy struct {
	depth   int
	changes []pctChange // by step, ascending
	changed int         // change points passed
	prio    []int64     // by task ID; 0 = not seen yet
	low     int64       // next priority for a task that yields: below all others
	spinner *Task       // the task that went on at the last decisions while another could run
	spins   int         // how many decisions in a row it did
}

// PCTSpinDecisionsMax bounds how long PCT lets one task go on while
// another could run: after that many decisions in a row it is lowered as at
// a Yield. A task that polls under a mutex (a loop around a Queue's TryGet)
// passes a scheduling point at every Lock without yielding or blocking, and
// once the change points are behind the run nothing else would lower it:
// it would hold the run until the step limit, waiting for a task that
// cannot run. Runs of the engine's scenarios never come near it.
const PCTSpinDecisionsMax = 10_000

func (p *pctPolicy) priority(t *Task, c Chooser) int64 {
	for len(p.prio) <= t.id {
		p.prio = append(p.prio, 0)
	}
	if p.prio[t.id] == 0 {
		p.prio[t.id] = int64(p.depth) + int64(c.Intn(1<<30))
	}
	return p.prio[t.id]
}

func (p *pctPolicy) Pick(v *View) Decision {
	if at := v.At; at != nil {
		p.priority(at, v.Chooser)
		switch {
		case !v.CanContinue || len(v.Candidates) == 1:
			p.spinner, p.spins = nil, 0
		case at != p.spinner:
			p.spinner, p.spins = at, 1
		default:
			p.spins++
		}
		if at.kind == PointYield || p.spins >= PCTSpinDecisionsMax {
			p.low--
			p.prio[at.id] = p.low
			p.spinner, p.spins = nil, 0
		}
		for p.changed < len(p.changes) && v.Step >= p.changes[p.changed].step {
			ch := p.changes[p.changed]
			p.changed++
			p.prio[at.id] = ch.prio
			if v.Tracing() {
				v.Note(fmt.Sprintf("pct: change point %d lowers task %d %q to priority %d", p.changed, at.id, at.name, ch.prio))
			}
		}
	}
	best, bestPrio := 0, int64(0)
	for i, t := range v.Candidates {
		if pr := p.priority(t, v.Chooser); i == 0 || pr > bestPrio {
			best, bestPrio = i, pr
		}
	}
	return Pick(best)
}

// StarveWindowMin is the shortest window a starved task is withheld for.
const StarveWindowMin = 50 * time.Microsecond

// DefaultStarveWindowMax is the longest window Chaos and Starve draw by
// default: long enough for an engine to run many steps ahead of a starved
// thread, short enough that a run stays a few hundred decisions long.
const DefaultStarveWindowMax = 3200 * time.Microsecond

// StarveWindowDecisionsMax bounds a window in decisions as well as in
// time. The clock moves only when no task may run, so while the tasks that
// do run spin at scheduling points — waiting, say, for the victim — it
// stands still, and a window measured in virtual time alone would withhold
// its victim for good: a program that ends in a few steps under Random would
// run into the step limit. Runs of the engine's scenarios hold a window
// this long only with a model that takes no time a step, or with dozens of
// data-parallel cores, each answering a control call at every step.
const StarveWindowDecisionsMax = 10_000

// StarveWindowLimit bounds the longest window ParseStrategy accepts for
// Chaos and Starve: an hour of virtual time withheld is far past any
// descheduling a real thread sees, and a window near the end of virtual
// time could not be waited out.
const StarveWindowLimit = time.Hour

// StarveWindows returns the windows Chaos and Starve draw from: log-spaced,
// StarveWindowMin·2^k up to max, so that both a short hiccup and a
// descheduled thread are drawn.
func StarveWindows(max time.Duration) []time.Duration {
	var ws []time.Duration
	for w := StarveWindowMin; w <= max; w *= 2 {
		ws = append(ws, w)
		if w > max/2 { // the next would pass max, or overflow
			break
		}
	}
	if len(ws) == 0 {
		ws = append(ws, StarveWindowMin)
	}
	return ws
}

// Chaos is rr's chaos mode: at random moments a random victim — any task,
// the first one included — is withheld for a window of virtual time drawn
// from StarveWindows(DefaultStarveWindowMax), while the others run in
// random order. When every runnable task is withheld the clock moves on:
// starvation is time passing while a thread could run but does not. A
// window also ends after StarveWindowDecisionsMax decisions, since the
// clock stands still while the others run.
func Chaos() Strategy { return ChaosUpTo(DefaultStarveWindowMax) }

// ChaosUpTo is Chaos with windows up to max, which is kept within
// [StarveWindowMin, StarveWindowLimit] as ParseStrategy keeps it: the
// strategy's name, recorded with every run, then parses back to it.
func ChaosUpTo(max time.Duration) Strategy {
	max = windowMax(max)
	return starveStrategy{name: "chaos", startOdds: 16, windows: StarveWindows(max), max: max}
}

// windowMax keeps a longest window within what ParseStrategy accepts; past
// StarveWindowLimit, a window's end could pass the end of virtual time.
func windowMax(longest time.Duration) time.Duration {
	return min(max(longest, StarveWindowMin), StarveWindowLimit)
}

// Starve is Chaos with victims limited to tasks whose name starts with
// prefix ("output-handler", "client"), starved again soon after each window.
func Starve(prefix string) Strategy { return StarveUpTo(prefix, DefaultStarveWindowMax) }

// StarveUpTo is Starve with windows up to max, kept within bounds as
// ChaosUpTo keeps it.
func StarveUpTo(prefix string, max time.Duration) Strategy {
	max = windowMax(max)
	return starveStrategy{name: "starve:" + prefix, prefix: prefix, only: true, startOdds: 2, windows: StarveWindows(max), max: max}
}

type starveStrategy struct {
	name      string
	prefix    string
	only      bool // victims must match prefix
	startOdds int  // a window starts at a step with probability 1/startOdds
	windows   []time.Duration
	max       time.Duration
}

func (s starveStrategy) String() string {
	// A prefix with a colon reads back only with the window after it (see
	// ParseStrategy).
	if s.max == DefaultStarveWindowMax && !strings.Contains(s.prefix, ":") {
		return s.name
	}
	return s.name + ":" + s.max.String()
}

// victim reports whether t may be starved.
func (s starveStrategy) victim(t *Task) bool { return !s.only || strings.HasPrefix(t.name, s.prefix) }

func (s starveStrategy) NewPolicy(c Chooser) Policy {
	return &starvePolicy{st: s, enum: enumerating(c)}
}

type starvePolicy struct {
	st     starveStrategy
	enum   bool // the chooser enumerates answers: draw each outcome once
	victim *Task
	until  time.Duration
	match  []*Task // the live tasks that may be victims
	seen   int64   // the live set's version match was built for
	// last is the window's last decision: it ends after it even when the
	// clock has not reached until (see StarveWindowDecisionsMax).
	last int64
	// windows are the windows opened, cut those that ended at last with
	// the clock short of until, for Warnings.
	windows, cut int
}

func (p *starvePolicy) Pick(v *View) Decision {
	c := v.Chooser
	if p.victim != nil && (v.Now >= p.until || v.Step > p.last || p.victim.state == stateDone) {
		if v.Now < p.until && v.Step > p.last && p.victim.state != stateDone {
			p.cut++
		}
		p.victim = nil
	}
	n := len(v.Candidates)
	if p.victim == nil {
		// One draw says both whether a window starts and, if not, who runs;
		// 0 is the calm answer: no window, the task at the point goes on.
		// Sampled, a window starts with odds 1/startOdds; enumerated, the
		// odds are nothing and each outcome is one answer, n the window.
		if p.enum {
			if r := c.Intn(n + 1); r < n {
				return Pick(r)
			}
		} else if r := c.Intn(p.st.startOdds * n); r/n != p.st.startOdds-1 {
			return Pick(r % n)
		}
		if v.liveVersion != p.seen {
			p.seen = v.liveVersion
			p.match = p.match[:0]
			for _, t := range v.Live {
				if p.st.victim(t) {
					p.match = append(p.match, t)
				}
			}
		}
		if len(p.match) > 0 {
			p.victim = p.match[c.Intn(len(p.match))]
			w := p.st.windows[c.Intn(len(p.st.windows))]
			p.until = v.Now + w
			p.last = v.Step + StarveWindowDecisionsMax
			p.windows++
			if v.Tracing() {
				v.Note(fmt.Sprintf("%s: withhold task %d %q for %v", p.st.name, p.victim.id, p.victim.name, w))
			}
		}
	}
	vi := -1
	if p.victim != nil {
		for i, t := range v.Candidates {
			if t == p.victim {
				vi = i
				break
			}
		}
	}
	if vi < 0 {
		return Pick(c.Intn(n))
	}
	if n == 1 {
		return WaitUntil(p.until)
	}
	i := c.Intn(n - 1)
	if i >= vi {
		i++
	}
	return Pick(i)
}

func (p *starvePolicy) Warnings(tasks []*Task) []string {
	var ws []string
	if p.cut > 0 {
		// A window is its length in virtual time; where the clock hardly
		// moves (a model with no step time) or the other tasks make very
		// many decisions in each step of it (dozens of cores answering
		// calls that take no time), it is its decision cap instead, and a
		// seed takes thousands of times its decisions.
		ws = append(ws, fmt.Sprintf("sim: strategy %s: %d of its %d starvation windows ended at their cap of %d decisions before the clock reached their end: the other tasks made that many decisions in less virtual time than the window's length (a model that takes no time a step, or many tasks whose work takes none), so those windows withheld their task for that many decisions of the others, and the run took that many more", p.st, p.cut, p.windows, StarveWindowDecisionsMax))
	}
	if p.st.only && !slices.ContainsFunc(tasks, p.st.victim) {
		ws = append(ws, fmt.Sprintf("sim: strategy %s starved nothing: no task of the run has a name starting with %q; the run's tasks were %s", p.st, p.st.prefix, taskNames(tasks)))
	}
	return ws
}

// taskNamesMax bounds the names a warning lists.
const taskNamesMax = 8

// taskNames lists the distinct names of tasks, in order of first use.
func taskNames(tasks []*Task) string {
	var names []string
	more := false
	for _, t := range tasks {
		q := strconv.Quote(t.name)
		if slices.Contains(names, q) {
			continue
		}
		if len(names) == taskNamesMax {
			more = true
			break
		}
		names = append(names, q)
	}
	list := strings.Join(names, ", ")
	if more {
		list += ", …"
	}
	return list
}

// ParseStrategy reads a strategy as simrun's -strategy flag takes it:
// "random", "pct:D", "pct:D:K", "chaos", "chaos:MAX", "starve:PREFIX" or
// "starve:PREFIX:MAX", MAX being the longest starvation window ("51.2ms").
// A PREFIX may hold colons: what follows its last colon is MAX when it is a
// duration.
// Replay needs a schedule and is built with Replay.
func ParseStrategy(s string) (Strategy, error) {
	name, arg, hasArg := strings.Cut(s, ":")
	switch name {
	case "random":
		if hasArg {
			return nil, fmt.Errorf("sim: strategy %q takes no argument, got %q", name, s)
		}
		return Random(), nil
	case "chaos":
		if !hasArg {
			return Chaos(), nil
		}
		max, err := parseWindow(s, arg)
		if err != nil {
			return nil, err
		}
		return ChaosUpTo(max), nil
	case "pct":
		ds, ks, hasK := strings.Cut(arg, ":")
		d, err := strconv.Atoi(ds)
		if !hasArg || (err != nil && !isRange(err)) || d < 1 {
			return nil, fmt.Errorf("sim: strategy %q: want pct:D with a depth D ≥ 1, as in pct:3", s)
		}
		if err != nil || d > PCTDepthMax {
			return nil, fmt.Errorf("sim: strategy %q: a depth of %s is more than PCT can use; want D ≤ %d (bugs are found at depths of a few)", s, ds, PCTDepthMax)
		}
		if !hasK {
			return PCT(d), nil
		}
		k, err := strconv.ParseInt(ks, 10, 64)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("sim: strategy %q: want pct:D:K with a step estimate K ≥ 1", s)
		}
		return PCTSteps(d, k), nil
	case "starve":
		// The prefix may hold colons itself ("worker:" for tasks named
		// "worker:1"): the last part is the window when it is a duration,
		// and part of the prefix otherwise.
		prefix, ws, hasW := arg, "", false
		if i := strings.LastIndex(arg, ":"); i >= 0 {
			if _, err := time.ParseDuration(arg[i+1:]); err == nil {
				prefix, ws, hasW = arg[:i], arg[i+1:], true
			}
		}
		if prefix == "" {
			return nil, fmt.Errorf("sim: strategy %q: want starve:PREFIX naming the tasks to starve, as in starve:output-handler", s)
		}
		if !hasW {
			return Starve(prefix), nil
		}
		max, err := parseWindow(s, ws)
		if err != nil {
			return nil, err
		}
		return StarveUpTo(prefix, max), nil
	}
	return nil, fmt.Errorf("sim: unknown strategy %q: want random, pct:D, pct:D:K, chaos, chaos:MAX, starve:PREFIX, starve:PREFIX:MAX or replay:FILE", s)
}

func parseWindow(s, arg string) (time.Duration, error) {
	max, err := time.ParseDuration(arg)
	if err != nil || max < StarveWindowMin || max > StarveWindowLimit {
		return 0, fmt.Errorf("sim: strategy %q: the longest window must be a duration from %v to %v, as in 12.8ms, got %q", s, StarveWindowMin, StarveWindowLimit, arg)
	}
	return max, nil
}

// isRange reports whether a strconv error is a number out of range, which
// is a well-formed number, only too large.
func isRange(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}
