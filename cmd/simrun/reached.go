package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/triage"
)

// A sweep counts the seeds that reached each situation (props.Situation):
// the race windows its properties are about. Seeds that pass say nothing
// of a race whose window none of them opened, so a sweep names the
// scenario's targets, warns when one was reached by no seed, and with
// -min-reached fails when one was reached by too few.

// reachFlags are -targets and -min-reached.
type reachFlags struct {
	targets string
	min     wholeNumber
}

func (f *reachFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.targets, "targets", "", "count these situations as the sweep's targets, comma-separated, in place of the scenario's (simrun list -situations lists them)")
	fs.Var(&f.min, "min-reached", "fail (exit 1) unless every target situation was reached in at least `N` seeds: a sweep that never opened a race's window proves nothing of it (0: only warn when a target was reached by none)")
}

// targetSet returns the target situations: -targets, else the scenario's.
func (f *reachFlags) targetSet(scenarioTargets props.SituationSet, scenarioName string) (props.SituationSet, error) {
	set := scenarioTargets
	if f.targets != "" {
		set = 0
		for _, name := range strings.Split(f.targets, ",") {
			s, err := props.ParseSituation(strings.TrimSpace(name))
			if err != nil {
				return 0, usagef("-targets: %v", err)
			}
			set = set.With(s)
		}
	}
	if f.min > 0 && set == 0 {
		return 0, usagef("-min-reached %d: scenario %s names no target situations; name them with -targets", f.min, scenarioName)
	}
	return set, nil
}

// reachTally counts, for each situation, the seeds that reached it, and
// keeps the lowest.
type reachTally struct {
	count, first []uint64
}

func (t *reachTally) add(seed uint64, set props.SituationSet) {
	if set == 0 {
		return
	}
	if t.count == nil {
		t.count, t.first = make([]uint64, len(props.AllSituations)), make([]uint64, len(props.AllSituations))
	}
	for s := range set.All() {
		if t.count[s] == 0 || seed < t.first[s] {
			t.first[s] = seed
		}
		t.count[s]++
	}
}

// summarize fills in r's targets and, by name, the seeds that reached each
// situation reached at all and each target, reached or not, and the first
// seed of each reached.
func (t *reachTally) summarize(r *sweepResult, targets props.SituationSet) {
	r.Targets, r.Reached, r.ReachedFirst = nil, map[string]uint64{}, map[string]uint64{}
	for _, s := range targets.List() {
		r.Targets = append(r.Targets, s.String())
		r.Reached[s.String()] = 0
	}
	for s, n := range t.count {
		if n > 0 {
			name := props.Situation(s).String()
			r.Reached[name], r.ReachedFirst[name] = n, t.first[s]
		}
	}
}

// printReached writes the situations a sweep reached, its targets first,
// and a warning for each target no seed reached.
func printReached(w io.Writer, r *sweepResult) {
	if len(r.Reached) == 0 {
		return
	}
	fmt.Fprintf(w, "  situations reached, in seeds (* a target):\n")
	row := func(mark, name string) {
		n := r.Reached[name]
		fmt.Fprintf(w, "    %s %-33s %8d  %-6s", mark, name, n, triage.Percent(float64(n)/float64(max(r.Seeds, 1))))
		if first, ok := r.ReachedFirst[name]; ok && n > 0 {
			fmt.Fprintf(w, " first seed %d", first)
		}
		fmt.Fprintln(w)
	}
	isTarget := map[string]bool{}
	for _, name := range r.Targets {
		isTarget[name] = true
		row("*", name)
	}
	for _, s := range props.AllSituations {
		if name := s.String(); !isTarget[name] && r.Reached[name] > 0 {
			row(" ", name)
		}
	}
	if r.Seeds == 0 {
		return
	}
	for _, name := range r.Targets {
		if r.Reached[name] == 0 {
			fmt.Fprintf(w, "  warning: no seed reached %s, a target: these seeds say nothing of the race it opens\n", name)
		}
	}
}

// shortTarget is a target fewer seeds reached than -min-reached asked.
type shortTarget struct {
	name       string
	n, of, min uint64
	unit       string // what n counts: "seeds", or a stress's "copies"
}

func (s shortTarget) String() string {
	return fmt.Sprintf("target %s was reached in %d of %d %s, fewer than -min-reached %d", s.name, s.n, s.of, s.unit, s.min)
}

// shortOfReach returns the targets reached in fewer than min seeds; none
// when min is 0.
func shortOfReach(r *sweepResult, min uint64) []shortTarget {
	var short []shortTarget
	for _, name := range r.Targets {
		if n := r.Reached[name]; n < min {
			short = append(short, shortTarget{name: name, n: n, of: r.Seeds, min: min, unit: "seeds"})
		}
	}
	return short
}

// reachCases are the failing JUnit cases of -min-reached: one for each
// target of r reached in fewer than min seeds, named prefix+"target NAME",
// so that a report does not pass a sweep over that proved nothing of a
// race.
func reachCases(r *sweepResult, min uint64, prefix, classname string) []triage.JUnitCase {
	var cases []triage.JUnitCase
	for _, short := range shortOfReach(r, min) {
		cases = append(cases, triage.JUnitCase{Name: prefix + "target " + short.name, Classname: classname, Failure: short.String(),
			Output: "a sweep whose seeds did not reach its target says nothing of the race there: sweep more seeds, or with a strategy that reaches it"})
	}
	return cases
}

// checkReached is -min-reached: it names each target reached in fewer than
// min seeds on stderr, after "simrun CMD: ", and returns errFailed if there
// is one.
func checkReached(stderr io.Writer, cmd string, r *sweepResult, min uint64) error {
	short := shortOfReach(r, min)
	for _, s := range short {
		fmt.Fprintf(stderr, "simrun %s: %s\n", cmd, s)
	}
	if len(short) > 0 {
		return errFailed
	}
	return nil
}
