package triage

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Z95 is the standard normal quantile of a two-sided 95% interval.
const Z95 = 1.959963984540054

// Alpha is the significance level at which a difference is called one.
const Alpha = 0.05

// fisherTolRel is the relative tolerance under which another table counts
// as exactly as probable as the observed one, so that floating-point noise
// between tables of equal probability does not drop them from the p-value.
const fisherTolRel = 1e-7

// logTiny is below the natural log of the smallest positive float64:
// hypergeometric terms beyond it add nothing to a sum.
const logTiny = -746.0

// Rate is K failures out of N runs.
type Rate struct {
	K, N int
}

// check panics when the invariant 0 ≤ K ≤ N is broken: a Rate is built by
// counting, so a broken one is a bug in the counting, not a user's mistake.
func (r Rate) check() {
	if r.K < 0 || r.N < 0 || r.K > r.N {
		panic(fmt.Sprintf("triage: Rate invariant 0 ≤ K ≤ N broken: K=%d N=%d", r.K, r.N))
	}
}

// P is the observed failure proportion K/N, or 0 when N is 0.
func (r Rate) P() float64 {
	r.check()
	if r.N == 0 {
		return 0
	}
	return float64(r.K) / float64(r.N)
}

// CI95 is the Wilson score interval at 95% for the failure probability.
// With no runs it is the whole [0, 1].
func (r Rate) CI95() (lo, hi float64) {
	r.check()
	if r.N == 0 {
		return 0, 1
	}
	n := float64(r.N)
	p := float64(r.K) / n
	z2 := Z95 * Z95
	den := 1 + z2/n
	center := (p + z2/(2*n)) / den
	half := Z95 * math.Sqrt(p*(1-p)/n+z2/(4*n*n)) / den
	lo, hi = center-half, center+half
	// The formula gives exactly 0 and 1 at the edges only up to rounding.
	if r.K == 0 || lo < 0 {
		lo = 0
	}
	if r.K == r.N || hi > 1 {
		hi = 1
	}
	return lo, hi
}

// UpperBound is a 95% upper bound on the failure probability: the rule of
// three (3/N, at most 1) when nothing failed, the Wilson upper bound
// otherwise, and 1 with no runs.
func (r Rate) UpperBound() float64 {
	r.check()
	if r.N == 0 {
		return 1
	}
	if r.K == 0 {
		return math.Min(1, 3/float64(r.N))
	}
	_, hi := r.CI95()
	return hi
}

// String reads "31/120 = 25.8% [18.8%, 34.3%]", "0/1000 = 0% [≤ 0.3%, rule
// of three]" when nothing failed, and "0/0 = no runs".
func (r Rate) String() string {
	r.check()
	if r.N == 0 {
		return "0/0 = no runs"
	}
	return fmt.Sprintf("%d/%d = %s", r.K, r.N, r.interval())
}

// interval reads "25.8% [18.8%, 34.3%]", or "0% [≤ 0.3%, rule of three]"
// when nothing failed. r.N must be positive.
func (r Rate) interval() string {
	if r.K == 0 {
		return fmt.Sprintf("0%% [≤ %s, rule of three]", Percent(r.UpperBound()))
	}
	lo, hi := r.CI95()
	return fmt.Sprintf("%s [%s, %s]", Percent(r.P()), Percent(lo), Percent(hi))
}

// Percent formats a proportion as a percentage: one decimal ("25.8%"),
// "0%" and "100%" at the edges, two significant digits below 0.1%, and
// above 99.9% two significant digits of what is missing to 100%
// ("99.9982%"), so that nothing short of all reads as "100.0%".
func Percent(x float64) string {
	v := 100 * x
	switch {
	case v == 0:
		return "0%"
	case v == 100:
		return "100%"
	case math.Abs(v) < 0.1:
		return strconv.FormatFloat(v, 'g', 2, 64) + "%"
	case v > 99.9 && v < 100:
		decimals := 1 - int(math.Floor(math.Log10(100-v)))
		s := strings.TrimRight(strconv.FormatFloat(v, 'f', decimals, 64), "0")
		return strings.TrimSuffix(s, ".") + "%"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "%"
}

// FormatP formats a p-value with two significant digits ("0.84",
// "0.003"), and as "<0.0001" below that.
func FormatP(p float64) string {
	if p < 1e-4 {
		return "<0.0001"
	}
	return strconv.FormatFloat(p, 'g', 2, 64)
}

// PWords is a p-value as a verdict reads it: "p=0.012", or "p<0.0001".
func PWords(p float64) string {
	if p < 1e-4 {
		return "p" + FormatP(p)
	}
	return "p=" + FormatP(p)
}

// Holm adjusts the p-values of several tests for their number by Holm's
// step-down method, which holds the chance of any false difference among
// them to the level each was tested at: the i-th smallest of m is
// multiplied by m−i+1, no adjusted value is below one of a smaller p, and
// none is above 1. A difference holds, among them all, when its adjusted
// p is below Alpha. The result is in the order of ps.
func Holm(ps []float64) []float64 {
	m := len(ps)
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ps[a], ps[b]) })
	adj := make([]float64, m)
	run := 0.0
	for rank, i := range order {
		run = max(run, min(1, float64(m-rank)*ps[i]))
		adj[i] = run
	}
	return adj
}

// FisherExact is the two-sided p-value of Fisher's exact test for the 2×2
// table [[a, b], [c, d]] — rows are variants A and B, columns are failed
// and passed runs. It sums the probabilities of every table with the same
// margins that is at most as probable as the observed one (within a
// relative tolerance of 1e-7). It works in log-factorials and walks out
// from the mode only as far as terms stay representable, so tables with
// millions of runs cost milliseconds. An empty table gives 1.
//
// Negative counts break the invariant that cells are counts, and panic.
func FisherExact(a, b, c, d int) float64 {
	if a < 0 || b < 0 || c < 0 || d < 0 {
		panic(fmt.Sprintf("triage: FisherExact invariant broken: cell counts must be ≥ 0, got [[%d %d] [%d %d]]", a, b, c, d))
	}
	r1, r2, c1 := a+b, c+d, a+c
	n := r1 + r2
	if n == 0 {
		return 1
	}
	lo, hi := max(0, c1-r2), min(r1, c1)
	logDen := logChoose(n, c1)
	logP := func(x int) float64 {
		return logChoose(r1, x) + logChoose(r2, c1-x) - logDen
	}
	threshold := logP(a) + math.Log1p(fisherTolRel)

	// The hypergeometric distribution is log-concave: terms fall
	// monotonically on both sides of the mode, so each walk may stop at the
	// first term too small to count.
	mode := int(math.Floor(float64(r1+1) * float64(c1+1) / float64(n+2)))
	mode = min(max(mode, lo), hi)
	sum := 0.0
	for x := mode; x >= lo; x-- {
		lp := logP(x)
		if lp <= threshold {
			sum += math.Exp(lp)
		}
		if lp < logTiny {
			break
		}
	}
	for x := mode + 1; x <= hi; x++ {
		lp := logP(x)
		if lp <= threshold {
			sum += math.Exp(lp)
		}
		if lp < logTiny {
			break
		}
	}
	return math.Min(sum, 1)
}

// logChoose is ln C(n, k) for 0 ≤ k ≤ n.
func logChoose(n, k int) float64 {
	return logFactorial(n) - logFactorial(k) - logFactorial(n-k)
}

func logFactorial(n int) float64 {
	v, _ := math.Lgamma(float64(n) + 1)
	return v
}
