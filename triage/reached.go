package triage

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
)

// Situation is one situation in a variant's tally: a name the program
// passed to task.Reach, and what became of the copies that reached it.
// A copy that passes says nothing of a race whose window it never opened;
// the tally says how many copies opened it.
type Situation struct {
	Name string
	// Target says the situation is one of StressConfig.Targets, reported
	// whether or not a copy reached it.
	Target bool
	// Copies is how many of the variant's copies reached it; Failed is
	// how many of those failed.
	Copies, Failed int
	// First is the CopyResult.Index of the first copy that reached it, -1
	// when none did.
	First int
}

// situationTally counts, for each situation, the copies of one variant
// that reached it.
type situationTally map[string]*Situation

// add counts the situations copy c, of index i among its variant's runs,
// reached. Copies come in the order they ran, so the first to reach a
// situation keeps its place.
func (t *situationTally) add(c CopyResult, i int) {
	for _, name := range c.Reached {
		if *t == nil {
			*t = situationTally{}
		}
		s := (*t)[name]
		if s == nil {
			s = &Situation{Name: name, First: i}
			(*t)[name] = s
		}
		s.Copies++
		if c.Failed {
			s.Failed++
		}
	}
}

// list returns the tally: the targets first, in their order, reached or
// not; then every other situation reached, most copies first, then by
// name. It is nil when there are no targets and nothing was reached.
func (t situationTally) list(targets []string) []Situation {
	var out []Situation
	for _, name := range targets {
		s := Situation{Name: name, First: -1}
		if got := t[name]; got != nil {
			s = *got
		}
		s.Target = true
		out = append(out, s)
	}
	var rest []Situation
	for name, s := range t {
		if !slices.Contains(targets, name) {
			rest = append(rest, *s)
		}
	}
	slices.SortFunc(rest, func(a, b Situation) int {
		return cmp.Or(cmp.Compare(b.Copies, a.Copies), strings.Compare(a.Name, b.Name))
	})
	return append(out, rest...)
}

// writeReached writes the situations the variant's copies reached, its
// targets first and marked, each with its copies, its share of the
// variant's runs, the first copy that reached it and how many of those
// failed; then a line for each target no copy reached. It writes nothing
// when the variant has no targets and reached nothing.
func (r *StressReport) writeReached(p *printer, v VariantReport) {
	if len(v.Reached) == 0 {
		return
	}
	p.printf("  situations reached (task.Reach), in copies (* a target):\n")
	counts, shares := make([]string, len(v.Reached)), make([]string, len(v.Reached))
	countWidth, shareWidth := 0, 0
	for i, s := range v.Reached {
		counts[i] = fmt.Sprintf("%d/%d", s.Copies, v.Total.N)
		shares[i] = fmt.Sprintf("%.1f%%", 100*float64(s.Copies)/float64(max(v.Total.N, 1)))
		countWidth, shareWidth = max(countWidth, len(counts[i])), max(shareWidth, len(shares[i]))
	}
	// The numbers are aligned on the right by hand: a tabwriter aligns
	// every column one way.
	tw := tabwriter.NewWriter(p, 0, 8, 3, ' ', 0)
	for i, s := range v.Reached {
		mark := " "
		if s.Target {
			mark = "*"
		}
		// A tab in a name would split its cell.
		fmt.Fprintf(tw, "    %s %s\t%*s\t%*s", mark, strings.ReplaceAll(s.Name, "\t", " "), countWidth, counts[i], shareWidth, shares[i])
		if s.Copies > 0 {
			fmt.Fprintf(tw, "  first at %s, %d of them failed", firstAt(s.First, r.Config.Parallel), s.Failed)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if v.Total.N == 0 {
		return
	}
	for _, s := range v.Reached {
		if s.Target && s.Copies == 0 {
			p.printf("  no copy reached target %s: its passing copies say nothing of what happens there\n", s.Name)
		}
	}
}

// SituationComparison compares, between variants A and B, the copies that
// reached one situation (task.Reach). It is not a ModeComparison: a
// situation is a name a program passed to task.Reach, not a failure's
// signature, its counts are copies that reached it whether they failed or
// not, and it may be a target, listed and marked though neither variant
// reached it.
type SituationComparison struct {
	Situation string
	// Target says the situation is one of StressConfig.Targets.
	Target bool
	// A and B are the copies that reached it among each variant's runs.
	A, B Rate
	// P is the two-sided Fisher exact p-value of the difference: copies
	// that reached it against all other runs, A against B.
	P float64
	// Verdict reads as CompareRates' does — "gone in B (p=0.003)", "new
	// in B", "no significant change (p=0.84)" — in words for situations:
	// "more often in B" and "less often in B" where a comparison of
	// failures says worse and better, and "reached by neither" where it
	// says "no failures in either". Among several situations, a
	// difference at P < Alpha goes on to say whether it holds once
	// corrected for their number, as a mode's does (ModeComparison).
	Verdict string
	// PCorrected is P corrected for the number of situations compared,
	// by Holm's method; with one situation it is P.
	PCorrected float64
}

// CompareSituations compares every situation a or b reached and every
// target (a Situation marked Target in either's Reached) between the two
// variants, with the Fisher exact test and the verdicts of CompareRates:
// the targets first, in their order, then the rest by the larger of the
// two counts of copies, then by name. It is nil when neither variant has
// targets or reached anything.
func CompareSituations(a, b VariantReport) []SituationComparison {
	copies := func(v VariantReport) map[string]int { // looked up, never ranged
		m := make(map[string]int, len(v.Reached))
		for _, s := range v.Reached {
			m[s.Name] += s.Copies
		}
		return m
	}
	ca, cb := copies(a), copies(b)
	var out []SituationComparison
	index := map[string]int{} // name → position in out; looked up, never ranged
	for _, v := range []VariantReport{a, b} {
		for _, s := range v.Reached {
			if i, ok := index[s.Name]; ok {
				out[i].Target = out[i].Target || s.Target
				continue
			}
			if !s.Target && ca[s.Name] == 0 && cb[s.Name] == 0 {
				continue
			}
			index[s.Name] = len(out)
			ra, rb := Rate{K: ca[s.Name], N: a.Total.N}, Rate{K: cb[s.Name], N: b.Total.N}
			p, verdict := compareRates(ra, rb, reachedWords)
			out = append(out, SituationComparison{Situation: s.Name, Target: s.Target, A: ra, B: rb, P: p, Verdict: verdict})
		}
	}
	// A's targets come first in its Reached, in their order, then B's
	// others; the stable sort keeps that order among targets.
	slices.SortStableFunc(out, func(x, y SituationComparison) int {
		switch {
		case x.Target && y.Target:
			return 0
		case x.Target:
			return -1
		case y.Target:
			return 1
		}
		return cmp.Or(cmp.Compare(max(y.A.K, y.B.K), max(x.A.K, x.B.K)), strings.Compare(x.Situation, y.Situation))
	})
	correct(out, "situations", func(c *SituationComparison) (*float64, *float64, *string) { return &c.P, &c.PCorrected, &c.Verdict })
	return out
}

// writeSituationComparisons writes the comparison of every situation
// between A and B, targets marked, in the layout of the comparison of
// failure modes; nothing when there is none.
func (r *StressReport) writeSituationComparisons(p *printer) {
	if len(r.SituationComparisons) == 0 {
		return
	}
	p.printf("\nA vs B, by situation reached (Fisher exact, α = %g):\n", Alpha)
	tw := tabwriter.NewWriter(p, 0, 8, 2, ' ', 0)
	for _, c := range r.SituationComparisons {
		mark := " "
		if c.Target {
			mark = "*"
		}
		// A tab in a name would split its cell.
		fmt.Fprintf(tw, "  %s %s\tA %d/%d\tB %d/%d\t%s\n", mark, strings.ReplaceAll(c.Situation, "\t", " "), c.A.K, c.A.N, c.B.K, c.B.N, c.Verdict)
	}
	tw.Flush()
}
