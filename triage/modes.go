package triage

import (
	"cmp"
	"fmt"
	"slices"
)

// Mode is one failure mode: the failures that share a signature.
type Mode struct {
	// Signature is what the failures share (see Signature).
	Signature string
	// Count is how many failures have it.
	Count int
	// First is the index of its first occurrence, in the caller's
	// numbering of runs (Stress numbers a variant's runs from 0, round by
	// round, copy by copy).
	First int
	// Example tells how to reproduce the first occurrence; the caller
	// writes it (Stress writes a shell command line).
	Example string
}

// Rate is the mode's failure rate among total runs.
func (m Mode) Rate(total int) Rate {
	return Rate{K: m.Count, N: total}
}

// Modes collects failures into modes. The zero value is empty and ready;
// a Modes is not safe for concurrent use.
type Modes struct {
	index map[string]int // signature → position in list; looked up, never ranged
	list  []Mode
}

// Add records a failure with signature sig as the run numbered index, and
// how to reproduce it. A mode keeps the example of its earliest run, so
// the result does not depend on the order of the calls.
func (ms *Modes) Add(sig string, index int, example string) {
	if ms.index == nil {
		ms.index = map[string]int{}
	}
	i, ok := ms.index[sig]
	if !ok {
		ms.index[sig] = len(ms.list)
		ms.list = append(ms.list, Mode{Signature: sig, Count: 1, First: index, Example: example})
		return
	}
	m := &ms.list[i]
	m.Count++
	if index < m.First {
		m.First, m.Example = index, example
	}
}

// Failures is the number of failures added.
func (ms *Modes) Failures() int {
	n := 0
	for _, m := range ms.list {
		n += m.Count
	}
	return n
}

// List returns the modes, the most frequent first, ties broken by the
// earliest first occurrence and then by signature.
func (ms *Modes) List() []Mode {
	out := slices.Clone(ms.list)
	slices.SortFunc(out, func(a, b Mode) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.First, b.First), cmp.Compare(a.Signature, b.Signature))
	})
	return out
}

// Tally is a variant's runs and the failure modes among them.
type Tally struct {
	Runs  int
	Modes []Mode
}

// ModeComparison compares one failure mode between variants A and B.
type ModeComparison struct {
	Signature string
	// A and B are the mode's failures among each variant's runs.
	A, B Rate
	// P is the two-sided Fisher exact p-value of the difference: failures
	// of this mode against all other runs, A against B.
	P float64
	// Verdict reads "new in B (p=0.003)", "gone in B (p=0.01)", "worse in
	// B (p=0.003)", "better in B (p=0.01)" or "no significant change
	// (p=0.84)"; a new or gone mode that is not significant at Alpha says
	// so ("new in B, not significant (p=0.5)"). Among several modes, a
	// difference at P < Alpha goes on to say whether it holds once
	// corrected for their number: "gone in B (p=0.029); may be chance
	// among 3 modes (p=0.059 corrected)".
	Verdict string
	// PCorrected is P corrected for the number of modes compared, by
	// Holm's method (Holm): each mode is tested at Alpha on its own, and
	// among many one may differ by chance. A difference holds among them
	// all when PCorrected < Alpha. With one mode it is P.
	PCorrected float64
}

// CompareModes compares every mode seen in a or b, the most frequent
// (both variants together) first, ties broken by signature.
func CompareModes(a, b Tally) []ModeComparison {
	count := func(t Tally) map[string]int { // looked up, never ranged
		m := make(map[string]int, len(t.Modes))
		for _, mode := range t.Modes {
			m[mode.Signature] += mode.Count
		}
		return m
	}
	ca, cb := count(a), count(b)
	var sigs []string
	seen := map[string]bool{}
	for _, t := range []Tally{a, b} {
		for _, mode := range t.Modes {
			if !seen[mode.Signature] {
				seen[mode.Signature] = true
				sigs = append(sigs, mode.Signature)
			}
		}
	}
	out := make([]ModeComparison, 0, len(sigs))
	for _, sig := range sigs {
		ra, rb := Rate{K: ca[sig], N: a.Runs}, Rate{K: cb[sig], N: b.Runs}
		p, verdict := CompareRates(ra, rb)
		out = append(out, ModeComparison{Signature: sig, A: ra, B: rb, P: p, Verdict: verdict})
	}
	correct(out, "modes", func(c *ModeComparison) (*float64, *float64, *string) { return &c.P, &c.PCorrected, &c.Verdict })
	slices.SortStableFunc(out, func(x, y ModeComparison) int {
		return cmp.Or(cmp.Compare(y.A.K+y.B.K, x.A.K+x.B.K), cmp.Compare(x.Signature, y.Signature))
	})
	return out
}

// correct corrects the p-values of several comparisons, of things named
// noun, for their number (Holm): fields gives a comparison's p-value, its
// corrected p-value to set and its verdict. Among two or more, the verdict
// of a difference at p < Alpha goes on to say whether it holds once
// corrected: "; holds among 3 modes (p=0.01 corrected)" or "; may be
// chance among 3 modes (p=0.059 corrected)".
func correct[C any](cs []C, noun string, fields func(*C) (p, corrected *float64, verdict *string)) {
	ps := make([]float64, len(cs))
	for i := range cs {
		p, _, _ := fields(&cs[i])
		ps[i] = *p
	}
	for i, adj := range Holm(ps) {
		_, corrected, verdict := fields(&cs[i])
		*corrected = adj
		if len(ps) < 2 || ps[i] >= Alpha {
			continue
		}
		how := "holds"
		if adj >= Alpha {
			how = "may be chance"
		}
		*verdict += fmt.Sprintf("; %s among %d %s (%s corrected)", how, len(ps), noun, PWords(adj))
	}
}

// CompareRates tests whether B's failure rate differs from A's with
// Fisher's exact test and says how, at significance level Alpha.
func CompareRates(a, b Rate) (p float64, verdict string) {
	return compareRates(a, b, failureWords)
}

// rateWords are the words a comparison of two rates reads in: for none on
// either side, and for B's rate higher or lower than A's.
type rateWords struct{ none, higher, lower string }

// failureWords read rates of failure; reachedWords, rates at which copies
// reached a situation, where more often is not worse.
var (
	failureWords = rateWords{none: "no failures in either", higher: "worse in B", lower: "better in B"}
	reachedWords = rateWords{none: "reached by neither", higher: "more often in B", lower: "less often in B"}
)

// compareRates is CompareRates in the given words.
func compareRates(a, b Rate, w rateWords) (p float64, verdict string) {
	a.check()
	b.check()
	p = FisherExact(a.K, a.N-a.K, b.K, b.N-b.K)
	sig := p < Alpha
	ps := "(" + PWords(p) + ")"
	switch {
	case a.K == 0 && b.K == 0:
		return p, w.none
	case a.K == 0 && sig:
		return p, "new in B " + ps
	case a.K == 0:
		return p, "new in B, not significant " + ps
	case b.K == 0 && sig:
		return p, "gone in B " + ps
	case b.K == 0:
		return p, "gone in B, not significant " + ps
	case !sig:
		return p, "no significant change " + ps
	case b.P() > a.P():
		return p, w.higher + " " + ps
	}
	return p, w.lower + " " + ps
}
