package triage

import (
	"math"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected values below were computed independently: Wilson bounds
// with the closed formula in Python, Fisher p-values with exact integer
// binomials in Python (fractions.Fraction, math.comb).

func TestWilsonKnownValues(t *testing.T) {
	for _, tc := range []struct {
		r      Rate
		lo, hi float64
	}{
		{Rate{31, 120}, 0.18837396318660649, 0.3432853005824337},
		{Rate{64, 120}, 0.4444278926967431, 0.6201708295420101},
		{Rate{8, 40}, 0.10499989725437704, 0.347573063463995},
		{Rate{4, 40}, 0.03957952868260638, 0.23051775227522298},
	} {
		lo, hi := tc.r.CI95()
		assert.InDelta(t, tc.lo, lo, 1e-9, "%v lower", tc.r)
		assert.InDelta(t, tc.hi, hi, 1e-9, "%v upper", tc.r)
	}
}

func TestRateString(t *testing.T) {
	assert.Equal(t, "31/120 = 25.8% [18.8%, 34.3%]", Rate{31, 120}.String())
	assert.Equal(t, "0/1000 = 0% [≤ 0.3%, rule of three]", Rate{0, 1000}.String())
	assert.Equal(t, "0/0 = no runs", Rate{}.String())
	assert.Equal(t, "120/120 = 100% [96.9%, 100%]", Rate{120, 120}.String())
	assert.Equal(t, "1/100000 = 0.001% [0.00018%, 0.0057%]", Rate{1, 100000}.String())
}

func TestRuleOfThree(t *testing.T) {
	assert.InDelta(t, 0.003, Rate{0, 1000}.UpperBound(), 1e-15)
	assert.InDelta(t, 0.1, Rate{0, 30}.UpperBound(), 1e-15)
	assert.Equal(t, 1.0, Rate{0, 2}.UpperBound(), "3/N is capped at 1")
	assert.Equal(t, 1.0, Rate{}.UpperBound(), "no runs bound nothing")
	_, hi := Rate{31, 120}.CI95()
	assert.Equal(t, hi, Rate{31, 120}.UpperBound(), "with failures the bound is Wilson's")
	lo, hi := Rate{}.CI95()
	assert.Equal(t, [2]float64{0, 1}, [2]float64{lo, hi})
}

func TestWilsonIsSaneEverywhere(t *testing.T) {
	for n := 1; n <= 80; n++ {
		prevLo, prevHi := -1.0, -1.0
		for k := 0; k <= n; k++ {
			r := Rate{k, n}
			lo, hi := r.CI95()
			require.True(t, 0 <= lo && lo <= r.P() && r.P() <= hi && hi <= 1, "%d/%d: [%v, %v]", k, n, lo, hi)
			require.Greater(t, lo, prevLo-1e-15, "lower bound grows with K at %d/%d", k, n)
			require.Greater(t, hi, prevHi, "upper bound grows with K at %d/%d", k, n)
			prevLo, prevHi = lo, hi
		}
		lo, hi := Rate{0, n}.CI95()
		assert.Zero(t, lo)
		assert.Less(t, hi, 1.0)
		lo, hi = Rate{n, n}.CI95()
		assert.Greater(t, lo, 0.0)
		assert.Equal(t, 1.0, hi)
	}
	width := 2.0
	for n := 4; n <= 4096; n *= 2 {
		lo, hi := Rate{n / 4, n}.CI95()
		assert.Less(t, hi-lo, width, "more runs narrow the interval at N=%d", n)
		assert.True(t, lo < 0.25 && 0.25 < hi)
		width = hi - lo
	}
}

func TestRatePanicsOnBrokenInvariant(t *testing.T) {
	assert.PanicsWithValue(t, "triage: Rate invariant 0 ≤ K ≤ N broken: K=5 N=3", func() { Rate{5, 3}.P() })
	assert.Panics(t, func() { Rate{-1, 3}.CI95() })
}

func TestFisherKnownValues(t *testing.T) {
	for _, tc := range []struct {
		a, b, c, d int
		p          float64
	}{
		{3, 1, 1, 3, 0.485714285714286},
		{1, 9, 11, 3, 0.00275945618522008},
		{31, 89, 31, 89, 1},
		{10, 0, 0, 10, 1.0825088224469e-05},
		{8, 32, 0, 40, 0.00530605167331368},
		{4, 36, 0, 40, 0.11556797632747},
		{31, 89, 52, 68, 0.0064714681435226},
		{1000, 999000, 1100, 998900, 0.0306330777419386},
		{20, 999980, 45, 999955, 0.00262596203137891},
		{0, 0, 0, 0, 1},
		{0, 5, 0, 7, 1},
	} {
		p := FisherExact(tc.a, tc.b, tc.c, tc.d)
		assert.InEpsilon(t, tc.p, p, 1e-6, "[[%d %d] [%d %d]]", tc.a, tc.b, tc.c, tc.d)
	}
	assert.Less(t, FisherExact(1, 9, 11, 3), Alpha)
}

// fisherModel is Fisher's exact test with exact rational arithmetic over
// every table with the margins, the reference FisherExact must agree with.
func fisherModel(a, b, c, d int) float64 {
	r1, r2, c1 := a+b, c+d, a+c
	terms := map[int]*big.Int{}
	total := new(big.Int)
	for x := max(0, c1-r2); x <= min(r1, c1); x++ {
		t := new(big.Int).Mul(new(big.Int).Binomial(int64(r1), int64(x)), new(big.Int).Binomial(int64(r2), int64(c1-x)))
		terms[x] = t
		total.Add(total, t)
	}
	obs := terms[a]
	sum := new(big.Int)
	for x := max(0, c1-r2); x <= min(r1, c1); x++ {
		if terms[x].Cmp(obs) <= 0 {
			sum.Add(sum, terms[x])
		}
	}
	p, _ := new(big.Rat).SetFrac(sum, total).Float64()
	return p
}

func TestFisherAgreesWithExactModel(t *testing.T) {
	for a := 0; a <= 7; a++ {
		for b := 0; b <= 7; b++ {
			for c := 0; c <= 7; c++ {
				for d := 0; d <= 7; d += 1 + a%2 {
					want := fisherModel(a, b, c, d)
					got := FisherExact(a, b, c, d)
					require.InEpsilon(t, want, got, 1e-9, "[[%d %d] [%d %d]]", a, b, c, d)
					require.InEpsilon(t, got, FisherExact(c, d, a, b), 1e-9, "swapping rows")
					require.InEpsilon(t, got, FisherExact(a, c, b, d), 1e-9, "transposing")
				}
			}
		}
	}
}

func TestFisherPanicsOnNegativeCounts(t *testing.T) {
	assert.PanicsWithValue(t, "triage: FisherExact invariant broken: cell counts must be ≥ 0, got [[1 -2] [3 4]]", func() { FisherExact(1, -2, 3, 4) })
}

// TestHolmKnownValues: adjusted p-values as R's p.adjust(ps, "holm")
// gives them.
func TestHolmKnownValues(t *testing.T) {
	for _, c := range []struct{ ps, want []float64 }{
		{nil, []float64{}},
		{[]float64{0.03}, []float64{0.03}},
		{[]float64{0.01, 0.04, 0.03, 0.005}, []float64{0.03, 0.06, 0.06, 0.02}},
		// a larger p adjusts to no less than a smaller one's adjusted value
		{[]float64{0.02, 0.021, 0.5}, []float64{0.06, 0.06, 0.5}},
		// capped at 1; ties keep their order
		{[]float64{0.6, 0.2, 0.2}, []float64{0.6, 0.6, 0.6}},
		{[]float64{0.00012, 0.016, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []float64{0.00156, 0.192, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		got := Holm(c.ps)
		require.Len(t, got, len(c.want), "%v", c.ps)
		for i := range got {
			assert.InDelta(t, c.want[i], got[i], 1e-12, "Holm(%v)[%d]", c.ps, i)
		}
	}
}

func TestPercentAndFormatP(t *testing.T) {
	assert.Equal(t, "25.8%", Percent(31.0/120))
	assert.Equal(t, "0%", Percent(0))
	assert.Equal(t, "100%", Percent(1))
	assert.Equal(t, "0.03%", Percent(0.0003))
	assert.Equal(t, "0.84", FormatP(0.8412))
	assert.Equal(t, "0.003", FormatP(0.003))
	assert.Equal(t, "<0.0001", FormatP(1e-9))
	assert.False(t, math.IsNaN(Rate{}.P()))
}

// TestPercentNearAllIsNotAll: one decimal rounds 99.99% up to "100.0%",
// which reads as every run failing, and a Wilson bound of N/N to a
// certainty; near 100% the digits that tell it apart are kept, as they are
// near 0%.
func TestPercentNearAllIsNotAll(t *testing.T) {
	assert.Equal(t, "99.9%", Percent(0.999))
	assert.Equal(t, "99.94%", Percent(0.9994))
	assert.Equal(t, "99.99%", Percent(0.9999))
	assert.Equal(t, "99.9982%", Percent(0.999982347))
	assert.Equal(t, "100%", Percent(1))
	for _, x := range []float64{0.9995, 0.99999, 1 - 1e-9, 1 - 1e-13} {
		assert.NotContains(t, Percent(x), "100", "Percent(%v)", x)
	}
	assert.Equal(t, "9999/10000 = 99.99% [99.943%, 99.9982%]", Rate{9999, 10000}.String())
	assert.Equal(t, "100000/100000 = 100% [99.9962%, 100%]", Rate{100000, 100000}.String())
}
