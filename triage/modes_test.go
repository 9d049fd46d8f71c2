package triage

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestModesOrderAndFirstOccurrence(t *testing.T) {
	var ms Modes
	assert.Empty(t, ms.List(), "the zero value is empty")
	// Added out of order, as copies of a round may end in any order.
	ms.Add("tok", 11, "repro 11")
	ms.Add("check", 5, "repro 5")
	ms.Add("tok", 3, "repro 3")
	ms.Add("check", 0, "repro 0")
	ms.Add("panic", 2, "repro 2")
	ms.Add("check", 10, "repro 10")
	ms.Add("race", 1, "repro 1")

	assert.Equal(t, []Mode{
		{Signature: "check", Count: 3, First: 0, Example: "repro 0"},
		{Signature: "tok", Count: 2, First: 3, Example: "repro 3"},
		{Signature: "race", Count: 1, First: 1, Example: "repro 1"},
		{Signature: "panic", Count: 1, First: 2, Example: "repro 2"},
	}, ms.List())
	assert.Equal(t, 7, ms.Failures())
	assert.Equal(t, Rate{K: 3, N: 40}, ms.List()[0].Rate(40))

	l := ms.List()
	l[0].Count = 99
	assert.Equal(t, 3, ms.List()[0].Count, "List returns a copy")
}

func TestCompareRatesVerdicts(t *testing.T) {
	for _, tc := range []struct {
		a, b Rate
		want string
	}{
		{Rate{0, 40}, Rate{8, 40}, "new in B (p=0.0053)"},
		{Rate{0, 40}, Rate{1, 40}, "new in B, not significant (p=1)"},
		{Rate{8, 40}, Rate{0, 40}, "gone in B (p=0.0053)"},
		{Rate{4, 40}, Rate{0, 40}, "gone in B, not significant (p=0.12)"},
		{Rate{31, 120}, Rate{52, 120}, "worse in B (p=0.0065)"},
		{Rate{52, 120}, Rate{31, 120}, "better in B (p=0.0065)"},
		{Rate{31, 120}, Rate{31, 120}, "no significant change (p=1)"},
		{Rate{0, 10}, Rate{0, 10}, "no failures in either"},
		{Rate{0, 1000}, Rate{100, 1000}, "new in B (p<0.0001)"},
	} {
		_, verdict := CompareRates(tc.a, tc.b)
		assert.Equal(t, tc.want, verdict, "%v vs %v", tc.a, tc.b)
	}
}

func TestCompareModes(t *testing.T) {
	a := Tally{Runs: 40, Modes: []Mode{{Signature: "check", Count: 8}, {Signature: "tok", Count: 4}}}
	b := Tally{Runs: 40, Modes: []Mode{{Signature: "panic", Count: 8}, {Signature: "check", Count: 8}}}
	got := CompareModes(a, b)
	require.Len(t, got, 3)
	assert.Equal(t, "check", got[0].Signature, "the most frequent first")
	assert.Equal(t, Rate{8, 40}, got[0].A)
	assert.Equal(t, Rate{8, 40}, got[0].B)
	assert.InDelta(t, 1, got[0].P, 1e-12)
	assert.Equal(t, "no significant change (p=1)", got[0].Verdict)
	assert.Equal(t, "panic", got[1].Signature)
	assert.Equal(t, Rate{0, 40}, got[1].A)
	assert.True(t, strings.HasPrefix(got[1].Verdict, "new in B ("), got[1].Verdict)
	assert.Equal(t, "tok", got[2].Signature)
	assert.Equal(t, "gone in B, not significant (p=0.12)", got[2].Verdict)
	assert.Equal(t, Holm([]float64{got[0].P, got[1].P, got[2].P}), []float64{got[0].PCorrected, got[1].PCorrected, got[2].PCorrected})
}

// TestCompareModesCorrectsForTheirNumber: each mode is tested on its own
// at Alpha; among several, a verdict goes on to say whether its difference
// holds once corrected by Holm's method, and one mode alone is as it was.
func TestCompareModesCorrectsForTheirNumber(t *testing.T) {
	a := Tally{Runs: 120, Modes: []Mode{{Signature: "check", Count: 25}, {Signature: "tok", Count: 6}}}
	b := Tally{Runs: 120, Modes: []Mode{{Signature: "check", Count: 27}, {Signature: "panic", Count: 9}}}
	got := CompareModes(a, b)
	require.Len(t, got, 3)
	bySig := map[string]ModeComparison{}
	for _, c := range got {
		bySig[c.Signature] = c
	}
	panicked, tok, check := bySig["panic"], bySig["tok"], bySig["check"]
	assert.InDelta(t, 3*panicked.P, panicked.PCorrected, 1e-12, "the smallest p times the 3 tests")
	assert.InDelta(t, 2*tok.P, tok.PCorrected, 1e-12, "the next times 2")
	assert.InDelta(t, check.P, check.PCorrected, 1e-12)
	assert.Less(t, tok.P, Alpha)
	assert.GreaterOrEqual(t, tok.PCorrected, Alpha)
	assert.Equal(t, "gone in B (p=0.029); may be chance among 3 modes (p=0.059 corrected)", tok.Verdict)
	assert.Equal(t, "new in B (p=0.0033); holds among 3 modes (p=0.01 corrected)", panicked.Verdict)
	assert.Equal(t, "no significant change (p=0.88)", check.Verdict, "no difference, nothing to correct")

	alone := CompareModes(Tally{Runs: 120, Modes: []Mode{{Signature: "tok", Count: 6}}}, Tally{Runs: 120})
	require.Len(t, alone, 1)
	assert.Equal(t, "gone in B (p=0.029)", alone[0].Verdict)
	assert.Equal(t, alone[0].P, alone[0].PCorrected)
}
