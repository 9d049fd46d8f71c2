package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/scenario"
)

// TestCompareOfSeveralScenarios: each scenario is compared in turn over
// the same seeds, as a compare of it alone would be; the exit code is the
// worst, the JSON an object a scenario, the JUnit report a suite a
// scenario, and the text ends with the scenarios B is worse in, better
// in, and the same in.
func TestCompareOfSeveralScenarios(t *testing.T) {
	dir := t.TempDir()
	junit := filepath.Join(dir, "compare.xml")
	args := []string{"compare", "-scenario", "abort-reuse,prefix-chat", "-seeds", "1-200", "-a", "-legacy", "-b", "", "-out", dir}
	code, out, errOut := simrun(t, append(args, "-json", "-junit", junit)...)
	require.Equal(t, 1, code, "the legacy engine fails abort-reuse: %s", errOut)
	rs := decodeAll[compareResult](t, out)
	require.Len(t, rs, 2)
	assert.Equal(t, "abort-reuse", rs[0].Scenario)
	assert.Equal(t, "prefix-chat", rs[1].Scenario)
	for _, r := range rs {
		assert.Equal(t, r.Scenario, r.A.Scenario)
		assert.Equal(t, r.Scenario, r.B.Scenario)
		assert.Equal(t, "legacy", r.A.Engine, r.Scenario)
		assert.Equal(t, "fixed", r.B.Engine, r.Scenario)
		assert.Equal(t, uint64(200), r.Seeds, r.Scenario)

		// The same as a compare of it alone.
		want := 0
		if r.A.Failures+r.B.Failures > 0 {
			want = 1
		}
		alone := compareJSON(t, want, "-scenario", r.Scenario, "-seeds", "1-200", "-a", "-legacy", "-b", "")
		assert.Empty(t, alone.Scenario, "one scenario's JSON is as before")
		assert.Equal(t, alone.A.FailingSeeds, r.A.FailingSeeds, r.Scenario)
		assert.Equal(t, alone.B.FailingSeeds, r.B.FailingSeeds, r.Scenario)
		assert.Equal(t, alone.Verdict, r.Verdict, r.Scenario)
	}
	assert.Positive(t, rs[0].A.Failures)
	assert.Zero(t, rs[0].B.Failures)
	assert.Contains(t, rs[0].Verdict, "gone in B")

	doc := readJUnit(t, junit)
	require.Len(t, doc.Suites, 2)
	assert.Equal(t, "simrun compare abort-reuse 1-200", doc.Suites[0].Name)
	assert.Equal(t, "simrun compare prefix-chat 1-200", doc.Suites[1].Name)
	assert.Positive(t, doc.Suites[0].Failures)
	assert.Zero(t, doc.Suites[1].Failures)

	code, out, errOut = simrun(t, args...)
	require.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "compare abort-reuse over seeds 1-200: 200 seeds per variant")
	assert.Contains(t, out, "\n\ncompare prefix-chat over seeds 1-200: 200 seeds per variant")
	assert.Regexp(t, `\ncompare of 2 scenarios: 400 seeds per variant in [0-9.]+s\n`+
		`  better in B: abort-reuse \(A [0-9]+, B 0 of 200 seeds, p<0\.0001; modes: [0-9]+ better\)\n`+
		`  no failures in either: prefix-chat\n`+
		`  each scenario is tested on its own at p < 0\.05; corrected for the 2 tests \(Holm's method\), every difference holds: abort-reuse \(p<0\.0001 corrected\)\n$`, out)

	// B worse: the planted bug against the engine, on two scenarios that
	// catch it and one that does not reach it.
	code, out, errOut = simrun(t, "compare", "-scenario", "abort-reuse,swarm,prefix-chat", "-seeds", "1-300", "-a", "", "-b", "-legacy", "-out", dir)
	require.Equal(t, 1, code, errOut)
	assert.Regexp(t, `\n  worse in B: abort-reuse \(A 0, B [0-9]+ of 300 seeds, p<0\.0001; modes: [0-9]+ worse in B\), swarm \(A 0, B [0-9]+ of 300 seeds, p[=<][0-9.]+[^)]*\)\n`+
		`  no failures in either: prefix-chat\n`, out)
}

// TestCompareOfAllScenarios: every scenario, in the order simrun list
// gives, two strategies of the same engine: none of the real scenarios
// fails on either side; the test- scenarios registered for these tests
// are among them, and one that always fails makes the exit code 1.
func TestCompareOfAllScenarios(t *testing.T) {
	code, out, errOut := simrun(t, "compare", "-scenario", "all", "-seeds", "1-4", "-a", "", "-b", "-strategy chaos", "-json", "-out", t.TempDir())
	var got []string
	for _, r := range decodeAll[compareResult](t, out) {
		got = append(got, r.Scenario)
		assert.Equal(t, uint64(4), r.Seeds, r.Scenario)
		if strings.HasPrefix(r.Scenario, "test-") {
			continue
		}
		assert.Equal(t, "no failures in either", r.Verdict, "%s: %s %s", r.Scenario, r.A.Error, r.B.Error)
	}
	assert.Equal(t, scenario.Names(), got)
	assert.Equal(t, 1, code, "test-running-failing fails on both sides: %s", errOut)
}

// TestCompareScenariosShareTheBudget: with -for, each scenario has its
// share of what the ones before it left, half of it for A.
func TestCompareScenariosShareTheBudget(t *testing.T) {
	code, out, errOut := simrun(t, "compare", "-scenario", "abort-reuse,swarm", "-seeds", "1-100000000", "-for", "400ms", "-a", "", "-b", "-legacy",
		"-json", "-out", t.TempDir())
	require.Equal(t, 1, code, errOut)
	rs := decodeAll[compareResult](t, out)
	require.Len(t, rs, 2)
	for _, r := range rs {
		assert.Contains(t, r.Stopped, "share of the 400ms budget (-for) ran out, half of it for A", r.Scenario)
		assert.Positive(t, r.Seeds, r.Scenario)
		assert.Equal(t, "1-100000000", r.Requested, r.Scenario)
		assert.Less(t, r.Seconds, 0.4, "%s: a share, not the whole budget", r.Scenario)
	}
}

// TestCompareScenariosSkipWhatTheSettingsDoNotSuit: a scenario whose
// requests the -config settings make the engine refuse is skipped and
// said to be; the others are compared.
func TestCompareScenariosSkipWhatTheSettingsDoNotSuit(t *testing.T) {
	code, out, errOut := simrun(t, "compare", "-scenario", "abort-reuse,prefix-chat", "-seeds", "1-20", "-config", "num-blocks=40", "-a", "", "-b", "-strategy random", "-out", t.TempDir())
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	assert.Contains(t, errOut, "simrun compare: skipping abort-reuse: variant A")
	assert.Contains(t, out, "compare prefix-chat over seeds 1-20")
	assert.NotContains(t, out, "compare abort-reuse over")
	assert.Contains(t, out, "\ncompare of 2 scenarios: 20 seeds per variant")
	assert.Contains(t, out, "  skipped (the -config settings do not suit them): abort-reuse\n")
}

func TestCompareScenariosBadInputIsExitTwo(t *testing.T) {
	assertRefused(t, []string{"compare", "-seeds", "1-2", "-out", t.TempDir()}, []badInput{
		{[]string{"-scenario", "abort-reuse,,swarm"}, `-scenario "abort-reuse,,swarm" names an empty scenario`},
		{[]string{"-scenario", "abort-reuse,nope"}, `unknown scenario "nope"`},
		{[]string{"-scenario", "abort-reuse,swarm", "-a", "-scenario swarm"}, "-a and -b may not name -scenario when -scenario names several: both variants run each of them"},
		{[]string{"-scenario", "all", "-b", "-scenario prefix-chat"}, "-a and -b may not name -scenario when -scenario names several"},
		{[]string{"-scenario", "abort-reuse,abort-reuse-wait-idle", "-config", "num-blocks=40"}, "-config num-blocks=40: every scenario of -scenario abort-reuse,abort-reuse-wait-idle refuses these settings"},
		{[]string{"-scenario", "abort-reuse,swarm", "-b", "-strategy nope"}, `variant B (-b "-strategy nope"): sim: unknown strategy "nope"`},
	})
}

// TestTheTotalCorrectsForTheScenariosTested: a compare of several
// scenarios says which differences hold once Holm's method corrects for
// their number, and which may be chance; a scenario stopped short is not
// among the tests.
func TestTheTotalCorrectsForTheScenariosTested(t *testing.T) {
	done := func(ps ...float64) []compareDone {
		var ds []compareDone
		for i, p := range ps {
			ds = append(ds, compareDone{scenario: fmt.Sprintf("s%d", i), res: &compareResult{P: p}})
		}
		return ds
	}
	const head = "each scenario is tested on its own at p < 0.05; corrected for the "
	assert.Empty(t, holmWords(done(0.01)), "one test needs no correction")
	assert.Equal(t, head+"13 tests (Holm's method), the difference holds in s0 (p=0.0016 corrected) and may be chance in s1 (p=0.19 corrected)",
		holmWords(done(0.00012, 0.016, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)))
	assert.Equal(t, head+"3 tests (Holm's method), every difference holds: s1 (p=0.0003 corrected), s2 (p=0.04 corrected)",
		holmWords(done(0.3, 0.0001, 0.02)))
	assert.Equal(t, head+"2 tests (Holm's method), every difference may be chance: s0 (p=0.08 corrected)",
		holmWords(done(0.04, 0.9)))
	assert.Equal(t, head+"2 tests (Holm's method), there is no difference to correct", holmWords(done(0.5, 1)))
	short := append(done(0.02, 0.03), compareDone{scenario: "s2", cut: "interrupted"})
	assert.Equal(t, head+"2 tests (Holm's method), every difference holds: s0 (p=0.04 corrected), s1 (p=0.04 corrected)", holmWords(short))
}

// TestTheTotalCountsTheModesThatHoldCorrected: the total's count of modes
// worse and better in B counts those whose difference holds once corrected
// for the modes compared, not each mode's own test.
func TestTheTotalCountsTheModesThatHoldCorrected(t *testing.T) {
	mode := func(a, b uint64, p, corrected float64) compareMode {
		return compareMode{A: modeRate{Count: a}, B: modeRate{Count: b}, P: p, PCorrected: corrected}
	}
	assert.Equal(t, "; modes: 1 worse in B, 1 better", modesWords([]compareMode{mode(0, 9, 0.003, 0.01), mode(6, 0, 0.02, 0.04), mode(6, 0, 0.04, 0.08)}))
	assert.Empty(t, modesWords([]compareMode{mode(0, 5, 0.03, 0.06), mode(5, 0, 0.03, 0.06)}), "each below 0.05 alone, neither once corrected")
}
