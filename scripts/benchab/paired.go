package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// A round runs both builds one right after the other, so the two results of
// a round share the machine's speed at that moment. benchstat compares the
// two sets of results as unpaired samples, and a drift of ±15% over the
// rounds hides a change of 5%; the ratio within each round cancels the drift,
// and a signed-rank test over those ratios sees what is left.

// metricKey names one metric of one benchmark.
type metricKey struct {
	pkg, bench, unit string
}

// results holds, per metric, one value a round for each side; a round where
// a side printed no value for it has NaN there.
type results struct {
	keys   []metricKey // in the order first seen
	values map[metricKey]*[2][]float64
}

func newResults() *results { return &results{values: map[metricKey]*[2][]float64{}} }

// add records what side printed for package pkg in round r (0-based) and
// returns the number of benchmark results in it.
func (rs *results) add(side, r int, pkg, output string) (n int) {
	for _, line := range strings.Split(output, "\n") {
		f := strings.Fields(line)
		// BenchmarkName-2  N  value unit  value unit ...
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		n++
		name := strings.TrimPrefix(f[0], "Benchmark")
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			k := metricKey{pkg, name, f[i+1]}
			vs := rs.values[k]
			if vs == nil {
				vs = new([2][]float64)
				rs.values[k] = vs
				rs.keys = append(rs.keys, k)
			}
			for len(vs[side]) <= r {
				vs[side] = append(vs[side], math.NaN())
			}
			vs[side][r] = v
		}
	}
	return n
}

// pairedRow is the comparison of one metric.
type pairedRow struct {
	key   metricKey
	ratio float64 // median of head ÷ base over the rounds where both are positive; NaN if none
	lower int     // rounds where head was below base
	pairs int     // rounds with a value on both sides
	p     float64 // two-sided signed-rank p-value of the log ratios; NaN without a ratio
}

// paired compares every metric that differs in some round. A round where a
// side is 0 (allocations where there were none) has no ratio: it counts
// among the pairs, not in the ratio or the test.
func (rs *results) paired() []pairedRow {
	var rows []pairedRow
	for _, k := range rs.keys {
		vs := rs.values[k]
		var logs, ratios []float64
		lower, pairs, differs := 0, 0, false
		for r := 0; r < min(len(vs[0]), len(vs[1])); r++ {
			b, h := vs[0][r], vs[1][r]
			if math.IsNaN(b) || math.IsNaN(h) {
				continue
			}
			pairs++
			differs = differs || h != b
			if h < b {
				lower++
			}
			if b <= 0 || h <= 0 {
				continue
			}
			ratios = append(ratios, h/b)
			logs = append(logs, math.Log(h/b))
		}
		if !differs {
			continue // equal in every round: nothing to say
		}
		row := pairedRow{key: k, ratio: math.NaN(), lower: lower, pairs: pairs, p: math.NaN()}
		if len(ratios) > 0 {
			row.ratio, row.p = median(ratios), signedRankP(logs)
		}
		rows = append(rows, row)
	}
	return rows
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// signedRankP is the exact two-sided p-value of Wilcoxon's signed-rank test
// that the differences d are symmetric about zero. Zeros are dropped; tied
// magnitudes share their mean rank, and the distribution is the exact one
// of those ranks under random signs, so ties need no correction.
func signedRankP(d []float64) float64 {
	var nz []float64
	for _, x := range d {
		if x != 0 {
			nz = append(nz, x)
		}
	}
	n := len(nz)
	if n == 0 {
		return 1
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		x, y := math.Abs(nz[a]), math.Abs(nz[b])
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	// Ranks, doubled so that a mean rank of a tie stays an integer.
	rank2 := make([]int, n)
	for i := 0; i < n; {
		j := i
		for j+1 < n && math.Abs(nz[idx[j+1]]) == math.Abs(nz[idx[i]]) {
			j++
		}
		for k := i; k <= j; k++ {
			rank2[idx[k]] = i + j + 2 // (i+1 + j+1) / 2, doubled
		}
		i = j + 1
	}
	total, obs := 0, 0
	for i, r := range rank2 {
		total += r
		if nz[i] > 0 {
			obs += r
		}
	}
	// ways[s]: the sign assignments whose positive ranks sum to s.
	ways := make([]float64, total+1)
	ways[0] = 1
	for _, r := range rank2 {
		for s := total; s >= r; s-- {
			ways[s] += ways[s-r]
		}
	}
	dev := math.Abs(float64(obs) - float64(total)/2)
	tail := 0.0
	for s, w := range ways {
		if math.Abs(float64(s)-float64(total)/2) >= dev-1e-9 {
			tail += w
		}
	}
	return min(1, tail/math.Exp2(float64(n)))
}

// writePaired prints the paired comparison.
func writePaired(w io.Writer, rows []pairedRow, rounds int) {
	fmt.Fprintf(w, "\nPaired by round (head ÷ base within each round, median of %d rounds; p: Wilcoxon signed-rank, exact):\n\n", rounds)
	if len(rows) == 0 {
		fmt.Fprintln(w, "every metric was equal in every round")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "package\tbenchmark\tmetric\thead÷base\thead lower\tp\t")
	for _, r := range rows {
		if math.IsNaN(r.ratio) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t—\t%d of %d\t—\t\n", r.key.pkg, r.key.bench, r.key.unit, r.lower, r.pairs)
			continue
		}
		mark := ""
		if r.p < 0.05 {
			mark = " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%d of %d\t%.3f%s\t\n", r.key.pkg, r.key.bench, r.key.unit, r.ratio, r.lower, r.pairs, r.p, mark)
	}
	tw.Flush()
	fmt.Fprintln(w, "\n* p < 0.05. For a rate (a unit per second) higher is better; for the rest, lower.")
	if slices.ContainsFunc(rows, func(r pairedRow) bool { return math.IsNaN(r.ratio) }) {
		fmt.Fprintln(w, "—: a side was 0 in every round, so there is no ratio; benchstat's tables above give both values.")
	}
}
