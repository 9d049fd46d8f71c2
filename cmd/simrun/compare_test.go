package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

func compareJSON(t *testing.T, wantCode int, args ...string) compareResult {
	t.Helper()
	code, out, errOut := simrun(t, append([]string{"compare", "-json", "-j", "2", "-out", t.TempDir()}, args...)...)
	require.Equal(t, wantCode, code, errOut)
	var r compareResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	return r
}

func modeOf(t *testing.T, r compareResult, prefix string) compareMode {
	t.Helper()
	for _, m := range r.Modes {
		if strings.HasPrefix(m.Signature, prefix) {
			return m
		}
	}
	t.Fatalf("no mode %q among %+v", prefix, r.Modes)
	return compareMode{}
}

func TestCompareForPairsThePrefixARanInHalfTheBudget(t *testing.T) {
	const asked = "1-100000000"
	r := compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", asked, "-a", "-legacy", "-b", "", "-for", "2ms")
	want, err := parseSeeds(asked)
	require.NoError(t, err)
	require.Positive(t, r.Seeds)
	require.Less(t, r.Seeds, want.n)
	assert.Equal(t, asked, r.Requested)
	assert.Equal(t, "the 2ms budget (-for) ran out, half of it for A", r.Stopped)
	assert.Equal(t, want.slice(0, r.Seeds).String(), r.SeedRange)
	assert.Equal(t, r.Seeds, r.A.Seeds)
	assert.Equal(t, r.Seeds, r.B.Seeds, "B runs the seeds A ran")
	assert.Equal(t, r.SeedRange, r.B.SeedRange)

	// Compared again over the range that ran, without a budget: the same.
	whole := compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", r.SeedRange, "-a", "-legacy", "-b", "")
	assert.Empty(t, whole.Stopped)
	assert.Equal(t, r.Paired, whole.Paired)
	assert.Equal(t, r.A.Failures, whole.A.Failures)
	assert.Equal(t, r.P, whole.P)
}

func TestCompareLegacyAgainstFixed(t *testing.T) {
	r := compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-150", "-a", "-legacy", "-b", "")
	assert.Equal(t, uint64(150), r.Seeds)
	assert.Equal(t, "legacy", r.A.Engine)
	assert.Equal(t, "fixed", r.B.Engine)
	assert.Equal(t, "-legacy", r.A.Flags)
	assert.Greater(t, r.A.Failures, uint64(75))
	assert.Zero(t, r.B.Failures)
	assert.InDelta(t, 3.0/150, r.B.CI95[1], 0.01, "B's upper bound is near the rule of three")
	assert.Less(t, r.P, 0.05)
	assert.Equal(t, pairedTable{OnlyA: r.A.Failures, Neither: 150 - r.A.Failures}, r.Paired)
	assert.True(t, strings.HasPrefix(r.Verdict, "gone in B"), r.Verdict)
	race := modeOf(t, r, "no-cross-incarnation-delivery")
	assert.Zero(t, race.B.Count)
	assert.Nil(t, race.B.FirstSeed)
	assert.Equal(t, 0.02, race.B.UpperBound, "3/150, the rule of three the text gives")
	assert.Equal(t, 0.02, r.B.UpperBound)
	assert.Equal(t, race.A.CI95[1], race.A.UpperBound)
	assert.NotNil(t, race.A.FirstSeed)
	assert.Contains(t, race.A.Replay, "simrun replay ")

	code, out, _ := simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-100", "-a", "-legacy", "-b", "", "-out", t.TempDir())
	require.Equal(t, 1, code)
	for _, want := range []string{
		"A  -legacy", "B  (no flags)", "0/100 = 0% [≤ 3.0%, rule of three]", "paired: both 0, only A ",
		"Fisher's exact test: gone in B (p<0.0001)", "no-cross-incarnation-delivery (in output-handler after frontend.lock): gone in B (p<0.0001)",
		"first in A: seed 1: simrun replay ",
	} {
		assert.Contains(t, out, want)
	}
}

// TestComparePerModeVerdicts: a step limit cuts long runs short. Runs are
// the same up to the limit, so it cannot add a single race failure; the
// runs it cuts are a new failure mode — one verdict line each.
func TestComparePerModeVerdicts(t *testing.T) {
	sp := &spec{scenario: mustScenario(t, "abort-reuse"), legacy: true}
	var steps []int64
	for seed := uint64(1); seed <= 200; seed++ {
		steps = append(steps, sp.run(seed, sim.Options{NoRecord: true}).res.Steps)
	}
	slices.Sort(steps)
	limit := fmt.Sprintf("-legacy -steps-max %d", steps[len(steps)/2]) // cuts half the runs
	junit := filepath.Join(t.TempDir(), "compare.xml")
	r := compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-200", "-a", "-legacy", "-b", limit, "-junit", junit)
	race := modeOf(t, r, "no-cross-incarnation-delivery")
	assert.False(t, strings.HasPrefix(race.Verdict, "worse in B"), race.Verdict)
	assert.Positive(t, race.Paired.Both)
	assert.Zero(t, race.Paired.OnlyB, "a limit cannot add a race failure")
	crash := modeOf(t, r, "step limit") // not the requests the cut runs left unfinished
	assert.True(t, strings.HasPrefix(crash.Verdict, "new in B (p"), crash.Verdict)
	assert.Zero(t, crash.A.Count)
	assert.Equal(t, crash.B.Count, crash.Paired.OnlyB)
	assert.Less(t, crash.P, 0.05)
	assert.Contains(t, crash.B.Replay, "simrun replay ")

	doc := readJUnit(t, junit)
	require.Len(t, doc.Suites, 1)
	var names []string
	for _, c := range doc.Suites[0].Cases {
		names = append(names, c.Name)
	}
	assert.Contains(t, names, "A: -legacy")
	assert.Contains(t, names, "B: "+limit)
	assert.Contains(t, names, "mode "+crash.Signature)
}

func TestCompareOfTwoPassingVariants(t *testing.T) {
	r := compareJSON(t, 0, "-scenario", "abort-reuse", "-seeds", "1-50", "-a", "", "-b", "-strategy chaos")
	assert.Equal(t, "no failures in either", r.Verdict)
	assert.Equal(t, "chaos", r.B.Strategy)
	assert.Empty(t, r.Modes)
}

func TestCompareBadFlagsAreExitTwo(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-scenario", "abort-reuse", "-a", "-legcy"}, `-a "-legcy": flag provided but not defined: -legcy; -a and -b take run's flags`},
		{[]string{"-scenario", "abort-reuse", "-b", "-strategy 'chaos"}, "-b: \"-strategy 'chaos\" has an unterminated single quote"},
		{[]string{"-scenario", "abort-reuse", "-a", "-legacy stray"}, `-a "-legacy stray": unexpected argument "stray"`},
		{[]string{"-scenario", "abort-reuse", "-b", "-strategy nope"}, `variant B (-b "-strategy nope"): sim: unknown strategy "nope"`},
		{[]string{"-a", "-legacy"}, `variant A (-a "-legacy"): -scenario is required`},
		{[]string{"-scenario", "abort-reuse", "-seeds", "5-1"}, "is empty: its end 1 is below its start 5"},
		{[]string{"-scenario", "abort-reuse", "-j", "0"}, "-j must be ≥ 1"},
		{[]string{"-scenario", "abort-reuse", "-j", "100000"}, "-j must be at most 1024 (each run takes a core; more workers than cores add nothing), got 100000"},
		{[]string{"-scenario", "abort-reuse", "-targets", "stale-frame", "-min-reached", "1"}, `simrun compare: -targets: no situation "stale-frame"; the situations are `},
		{[]string{"-scenario", "abort-reuse", "-min-reached", "-1"}, "-min-reached"},
	}
	for _, c := range cases {
		code, _, errOut := simrun(t, append([]string{"compare"}, c.args...)...)
		assert.Equal(t, 2, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
}

func mustScenario(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	sc, err := scenario.Lookup(name)
	require.NoError(t, err)
	return sc
}

// TestCompareReplaysReproduceEachVariant: both variants may fail on the
// same seed with the same engine; each one's replay command must replay
// its own run, with the trace hash run gives for that variant.
func TestCompareReplaysReproduceEachVariant(t *testing.T) {
	dir := t.TempDir()
	variants := map[string][]string{"A": {"-legacy"}, "B": {"-legacy", "-strategy", "chaos:1ms"}}
	r := compareJSON(t, 1, "-scenario", "swarm", "-legacy", "-seeds", "1-400", "-a", "", "-b", "-strategy chaos:1ms", "-out", dir)
	shared := false
	for _, m := range r.Modes {
		if m.A.FirstSeed != nil && m.B.FirstSeed != nil && *m.A.FirstSeed == *m.B.FirstSeed {
			shared = true
			assert.NotEqual(t, m.A.Replay, m.B.Replay, "seed %d: one file for both variants", *m.A.FirstSeed)
		}
		for _, side := range []struct {
			name string
			mr   modeRate
		}{{"A", m.A}, {"B", m.B}} {
			if side.mr.FirstSeed == nil {
				continue
			}
			file, ok := strings.CutPrefix(side.mr.Replay, "simrun replay ")
			require.True(t, ok, side.mr.Replay)
			code, out, _ := simrun(t, "replay", file)
			require.Equal(t, 1, code, out)
			replayed := between(out, "trace hash ", " ")
			require.NotEmpty(t, replayed, out)
			args := append([]string{"run", "-scenario", "swarm", "-seed", fmt.Sprint(*side.mr.FirstSeed), "-out", t.TempDir()}, variants[side.name]...)
			code, out, _ = simrun(t, args...)
			require.Equal(t, 1, code, out)
			assert.Equal(t, between(out, "trace hash ", "\n"), replayed, "%s's replay of seed %d (%s)", side.name, *side.mr.FirstSeed, m.Signature)
		}
	}
	require.True(t, shared, "some mode fails first on the same seed in both variants")
}

func TestCompareVariantFailpoints(t *testing.T) {
	r := compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-20", "-a", "", "-b", "-failpoint core/model-panic=panic")
	assert.Zero(t, r.A.Failures)
	assert.Equal(t, uint64(20), r.B.Failures, "B's failpoint is armed")

	// A variant's failpoint replaces a common one of the same name.
	r = compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-20", "-failpoint", "core/model-panic=panic",
		"-a", "", "-b", "-failpoint 'core/model-panic=1/1000000*panic'")
	assert.Equal(t, uint64(20), r.A.Failures)
	assert.Zero(t, r.B.Failures)

	// By its full name (GO_FAILPOINTS's) too: one failpoint, not two.
	r = compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-20", "-failpoint", "core/model-panic=panic",
		"-a", "", "-b", "-failpoint 'github.com/llmdst/llmdst/core/model-panic=1/1000000*panic'")
	assert.Equal(t, uint64(20), r.A.Failures)
	assert.Zero(t, r.B.Failures)

	code, _, errOut := simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-20", "-b", "-failpoint nope=panic", "-out", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `variant B (-b "-failpoint nope=panic"): -failpoint: `)
}

// TestCompareAppliesEveryVariantFlag: every flag -a and -b accept changes
// the variant's spec; none is parsed and dropped.
func TestCompareAppliesEveryVariantFlag(t *testing.T) {
	values := map[string]string{
		"scenario":  "swarm",
		"strategy":  "chaos:1ms",
		"legacy":    "true",
		"steps-max": "77",
		"failpoint": "core/model-panic=panic",
		"config":    "prefix-caching=on",
	}
	var sf specFlags
	sf.scenario = "abort-reuse"
	base, err := variantSpec("a", "", sf)
	require.NoError(t, err)
	fs := flag.NewFlagSet("variant", flag.ContinueOnError)
	new(specFlags).register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := values[f.Name]
		require.True(t, ok, "the test has no value for the variant flag -%s", f.Name)
		sp, err := variantSpec("a", "-"+f.Name+"="+v, sf)
		require.NoError(t, err, f.Name)
		assert.NotEqual(t, fmt.Sprintf("%+v", *base), fmt.Sprintf("%+v", *sp), "-a -%s changes nothing", f.Name)
	})
}

// TestCompareMinReachedHoldsEachVariant: -min-reached holds both variants
// to it, each named, whether or not a seed failed: the legacy engine's
// failures fail the comparison as before, and a target too few seeds
// reached fails it too.
func TestCompareMinReachedHoldsEachVariant(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	args := []string{"compare", "-scenario", "abort-reuse", "-seeds", "1-100", "-a", "-legacy", "-b", "", "-j", "2"}
	code, out, errOut := simrun(t, append(args, "-out", t.TempDir(), "-min-reached", "1")...)
	assert.Equal(t, 1, code, "the legacy failures: %s", errOut)
	assert.Contains(t, out, "targets reached, in seeds:")
	assert.NotContains(t, errOut, "fewer than -min-reached")

	code, out, errOut = simrun(t, append(args, "-out", t.TempDir(), "-min-reached", "101", "-json")...)
	assert.Equal(t, 1, code)
	var r compareResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), "the report is printed: %s", errOut)
	require.Positive(t, r.A.Reached[target])
	for _, side := range []struct {
		name string
		r    *sweepResult
	}{{"A", &r.A.sweepResult}, {"B", &r.B.sweepResult}} {
		assert.Equal(t, []string{target}, side.r.Targets, side.name)
		assert.Contains(t, errOut, "simrun compare, "+side.name+": target "+target+" was reached in "+itoa(side.r.Reached[target])+
			" of 100 seeds, fewer than -min-reached 101\n")
	}
}

// TestCompareTargetsReplaceEachVariantsOwn: -targets counts its situations
// as the targets of both variants, whatever their scenarios name; the
// race's window, which abort-reuse-wait-idle closes, fails -min-reached
// for the variant that runs it, and that one alone, though no seed
// failed.
func TestCompareTargetsReplaceEachVariantsOwn(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	r := compareJSON(t, 0, "-scenario", "abort-reuse-wait-idle", "-seeds", "1-50", "-a", "", "-b", "")
	assert.Empty(t, r.A.Targets, "the scenario names no targets")
	assert.Empty(t, r.B.Targets)

	r = compareJSON(t, 0, "-scenario", "abort-reuse-wait-idle", "-seeds", "1-50", "-a", "", "-b", "", "-targets", target)
	for _, side := range []*compareSide{&r.A, &r.B} {
		assert.Equal(t, []string{target}, side.Targets)
		n, counted := side.Reached[target]
		assert.True(t, counted, "a target is counted, reached or not")
		assert.Zero(t, n, "abort-reuse-wait-idle never reaches it")
	}

	code, out, errOut := simrun(t, "compare", "-scenario", "abort-reuse-wait-idle", "-seeds", "1-50", "-a", "", "-b", "", "-j", "2",
		"-out", t.TempDir(), "-targets", target, "-min-reached", "1")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, out, target+": A 0 (0%), B 0 (0%)")
	assert.Contains(t, errOut, "simrun compare, A: target "+target+" was reached in 0 of 50 seeds, fewer than -min-reached 1\n")
	assert.Contains(t, errOut, "simrun compare, B: target "+target+" was reached in 0 of 50 seeds, fewer than -min-reached 1\n")

	// A variant of another scenario: A reaches the window, B never does.
	code, _, errOut = simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-50", "-a", "", "-b", "-scenario abort-reuse-wait-idle", "-j", "2",
		"-out", t.TempDir(), "-targets", target, "-min-reached", "1")
	assert.Equal(t, 1, code, errOut)
	assert.NotContains(t, errOut, "simrun compare, A: target")
	assert.Contains(t, errOut, "simrun compare, B: target "+target+" was reached in 0 of 50 seeds, fewer than -min-reached 1\n")
}

// TestCompareMinReachedWithoutTargetsIsAUsageError: -min-reached of a
// variant whose scenario names no targets, and no -targets, is refused
// before anything runs, naming the variant.
func TestCompareMinReachedWithoutTargetsIsAUsageError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-scenario", "abort-reuse", "-b", "-scenario abort-reuse-wait-idle", "-min-reached", "5"},
			"simrun compare: variant B: -min-reached 5: scenario abort-reuse-wait-idle names no target situations; name them with -targets\n"},
		{[]string{"-scenario", "abort-reuse-wait-idle", "-a", "-legacy", "-b", "-scenario abort-reuse", "-min-reached", "1"},
			"simrun compare: variant A: -min-reached 1: scenario abort-reuse-wait-idle names no target situations; name them with -targets\n"},
	} {
		dir := filepath.Join(t.TempDir(), "out")
		junit := filepath.Join(t.TempDir(), "compare.xml")
		code, out, errOut := simrun(t, append([]string{"compare", "-seeds", "1-100", "-out", dir, "-junit", junit}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		assert.Equal(t, tc.want, errOut, "%v", tc.args)
		assert.Empty(t, out)
		assert.NoDirExists(t, dir, "nothing ran")
		assert.NoFileExists(t, junit)
	}
	// With -targets the scenario's are not needed.
	code, _, errOut := simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-20", "-b", "-scenario abort-reuse-wait-idle", "-j", "2",
		"-out", t.TempDir(), "-targets", "stale-frame-dropped", "-min-reached", "1")
	assert.Equal(t, 0, code, errOut)
}

// TestCompareJUnitFailsATargetTooFewSeedsReached: CI reads the JUnit
// report, so a variant that failed -min-reached has a failing case there,
// after its own, named as sweep names its.
func TestCompareJUnitFailsATargetTooFewSeedsReached(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	junit := filepath.Join(t.TempDir(), "compare.xml")
	r := compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-40", "-a", "", "-b", "-strategy chaos", "-min-reached", "41", "-junit", junit)
	require.Zero(t, r.A.Failures+r.B.Failures, "only -min-reached fails")
	doc := readJUnit(t, junit)
	require.Len(t, doc.Suites, 1)
	cases := doc.Suites[0].Cases
	var names []string
	for _, c := range cases {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"A: (no flags)", "A: target " + target, "B: -strategy chaos", "B: target " + target}, names)
	for i, side := range []*compareSide{&r.A, &r.B} {
		c := cases[2*i+1]
		require.NotNil(t, c.Failure, c.Name)
		assert.Equal(t, "target "+target+" was reached in "+itoa(side.Reached[target])+" of 40 seeds, fewer than -min-reached 41", c.Failure.Message)
		assert.Nil(t, cases[2*i].Failure, "no seed of %s failed", names[2*i])
	}
	assert.Equal(t, 2, doc.Suites[0].Failures)

	compareJSON(t, 0, "-scenario", "abort-reuse", "-seeds", "1-40", "-a", "", "-b", "-strategy chaos", "-min-reached", "1", "-junit", junit)
	assert.Len(t, readJUnit(t, junit).Suites[0].Cases, 2, "no target case")
}
