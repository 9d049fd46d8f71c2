package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
)

// TestSweepCountsTheSeedsThatReachedEachSituation: on abort-reuse the
// legacy engine fails on exactly the seeds that reached the founding
// race's window, and the fixed engine reaches it on as many and passes.
func TestSweepCountsTheSeedsThatReachedEachSituation(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	code, legacy := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-300")
	require.Equal(t, 1, code)
	assert.Equal(t, []string{target}, legacy.Targets)
	require.Positive(t, legacy.Failures)
	assert.Equal(t, legacy.Failures, legacy.Reached[target], "every legacy failure is a seed that reached the window, and no other")
	assert.Equal(t, *legacy.FirstFailure, legacy.ReachedFirst[target])

	code, fixed := sweepJSON(t, "-scenario", "abort-reuse", "-seeds", "1-300")
	require.Equal(t, 0, code)
	assert.Equal(t, legacy.Reached[target], fixed.Reached[target])
	for name, n := range fixed.Reached {
		_, err := props.ParseSituation(name)
		require.NoError(t, err)
		assert.LessOrEqual(t, n, fixed.Seeds, name)
	}

	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-300", "-out", t.TempDir())
	require.Equal(t, 0, code)
	assert.Contains(t, out, "situations reached, in seeds (* a target):")
	line := lineWith(t, out, "* "+target)
	assert.Contains(t, line, " "+itoa(fixed.Reached[target])+" ")
	assert.Contains(t, line, "first seed "+itoa(fixed.ReachedFirst[target]))
	assert.NotContains(t, out, "warning")

	// The first seed to reach each situation reached it, and no seed
	// before it did.
	for name, first := range fixed.ReachedFirst {
		for seed := uint64(1); seed <= first; seed++ {
			code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", itoa(seed), "-json")
			require.Equal(t, 0, code)
			var j runJSON
			require.NoError(t, json.Unmarshal([]byte(out), &j))
			assert.Equal(t, seed == first, slices.Contains(j.Reached, name), "%s: seed %d of first seed %d", name, seed, first)
		}
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// lineWith returns the line of out that holds s.
func lineWith(t *testing.T, out, s string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	t.Fatalf("no line holds %q in:\n%s", s, out)
	return ""
}

// TestMinReachedFailsASweepThatNeverOpenedTheWindow: waiting for the
// core before reusing the id closes the founding race's window, so a sweep
// of it proves nothing of the race: with the race's window as its target
// it warns, and with -min-reached it fails.
func TestMinReachedFailsASweepThatNeverOpenedTheWindow(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	code, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse-wait-idle", "-legacy", "-seeds", "1-100", "-out", t.TempDir(),
		"-targets", target)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "warning: no seed reached "+target+", a target")
	assert.Contains(t, lineWith(t, out, "* "+target), " 0  0%")

	code, _, errOut = simrun(t, "sweep", "-scenario", "abort-reuse-wait-idle", "-legacy", "-seeds", "1-100", "-out", t.TempDir(),
		"-targets", target, "-min-reached", "1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "target "+target+" was reached in 0 of 100 seeds, fewer than -min-reached 1")

	// abort-reuse reaches it on most seeds.
	code, _, errOut = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-100", "-out", t.TempDir(), "-min-reached", "50")
	assert.Equal(t, 0, code, errOut)
	code, _, errOut = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-100", "-out", t.TempDir(), "-min-reached", "101")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "fewer than -min-reached 101")
}

func TestReachFlagsRefuseBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-targets", "stale-frame"}, `-targets: no situation "stale-frame"; the situations are stale-frame-after-reuse,`},
		{[]string{"-targets", "preempted,"}, `-targets: no situation ""`},
		{[]string{"-scenario", "abort-reuse-wait-idle", "-min-reached", "5"}, "-min-reached 5: scenario abort-reuse-wait-idle names no target situations; name them with -targets"},
		{[]string{"-min-reached", "-1"}, "-min-reached"},
	} {
		args := append([]string{"sweep", "-seeds", "1-3", "-out", t.TempDir()}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "-scenario") {
			args = append(args, "-scenario", "abort-reuse")
		}
		code, _, errOut := simrun(t, args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}

func TestMergeAddsUpWhatTheShardsReachedAndChecksIt(t *testing.T) {
	dir := t.TempDir()
	a := shardJSON(t, dir, "a", "-seeds", "1-60", "-shard", "1/2")
	b := shardJSON(t, dir, "b", "-seeds", "1-60", "-shard", "2/2")
	target := props.StaleFrameAfterReuse.String()
	var ra, rb sweepResult
	for file, r := range map[string]*sweepResult{a: &ra, b: &rb} {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, r))
	}
	total := ra.Reached[target] + rb.Reached[target]
	require.Positive(t, ra.Reached[target])
	require.Positive(t, rb.Reached[target])

	code, out, errOut := simrun(t, "merge", "-min-reached", itoa(total), a, b)
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, lineWith(t, out, "* "+target), " "+itoa(total)+" ")
	code, _, errOut = simrun(t, "merge", "-min-reached", itoa(total+1), a, b)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "simrun merge: target "+target+" was reached in "+itoa(total)+" of 60 seeds")

	// Shards that counted other targets are of another sweep.
	other := shardJSON(t, dir, "other", "-seeds", "1-60", "-shard", "2/2", "-targets", "preempted")
	code, _, errOut = simrun(t, "merge", a, other)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "it has targets preempted, not "+target)
}

func TestRunSaysWhatItReached(t *testing.T) {
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-json")
	require.Equal(t, 0, code)
	var j runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Contains(t, j.Reached, props.StaleFrameAfterReuse.String())

	code, out, _ = simrun(t, "run", "-scenario", "abort-reuse-wait-idle", "-seed", "1", "-out", t.TempDir())
	require.Equal(t, 0, code)
	assert.NotContains(t, lineWith(t, out, "  reached: "), props.StaleFrameAfterReuse.String())

	code, out, _ = simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-100", "-a", "-legacy", "-b", "", "-out", filepath.Join(t.TempDir(), "c"))
	require.Equal(t, 1, code)
	line := lineWith(t, out, props.StaleFrameAfterReuse.String()+": A ")
	a, b, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), props.StaleFrameAfterReuse.String()+": "), ", ")
	require.True(t, ok, line)
	assert.Equal(t, strings.TrimPrefix(a, "A "), strings.TrimPrefix(b, "B "), "both engines reach the window on the same seeds: %s", line)
}

func TestListNamesEverySituationAndEachScenariosTargets(t *testing.T) {
	code, out, _ := simrun(t, "list", "-situations")
	require.Equal(t, 0, code)
	for _, s := range props.AllSituations {
		assert.Contains(t, out, s.String()+"\n    "+s.Doc()+"\n")
	}
	assert.Contains(t, out, "    the target of: abort-reuse, parallel-abort-reuse, swarm\n")

	code, out, _ = simrun(t, "list")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "targets: stale-frame-after-reuse\n")
}

// TestListSaysWhatEachPropertyPromises: a failure names the property it
// violated; list -properties says what each promises. Two lists at once
// are refused.
func TestListSaysWhatEachPropertyPromises(t *testing.T) {
	code, out, _ := simrun(t, "list", "-properties")
	require.Equal(t, 0, code)
	for _, p := range props.All {
		require.NotEmpty(t, props.Doc(p), p)
		assert.Contains(t, out, p+"\n    "+props.Doc(p)+"\n")
	}
	assert.Equal(t, len(props.All)*2, strings.Count(out, "\n"), "a name and a sentence each:\n%s", out)
	assert.Empty(t, props.Doc("no-such-property"))

	code, _, errOut := simrun(t, "list", "-properties", "-situations")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "-failpoints, -situations and -properties each list something else: give one")
}

// TestSweepJUnitFailsATargetTooFewSeedsReached: CI reads the JUnit report,
// so a sweep that failed -min-reached has a failing case there too.
func TestSweepJUnitFailsATargetTooFewSeedsReached(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	junit := filepath.Join(t.TempDir(), "sweep.xml")
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-seeds", "1-40", "-min-reached", "41", "-junit", junit)
	require.Equal(t, 1, code)
	require.Zero(t, r.Failures)
	doc := readJUnit(t, junit)
	require.Len(t, doc.Suites, 1)
	cases := doc.Suites[0].Cases
	require.Len(t, cases, 2, "the summary and the target")
	assert.Nil(t, cases[0].Failure, "no seed failed")
	assert.Equal(t, "target "+target, cases[1].Name)
	require.NotNil(t, cases[1].Failure)
	assert.Equal(t, "target "+target+" was reached in "+itoa(r.Reached[target])+" of 40 seeds, fewer than -min-reached 41", cases[1].Failure.Message)
	assert.Equal(t, 1, doc.Suites[0].Failures)

	code, _ = sweepJSON(t, "-scenario", "abort-reuse", "-seeds", "1-40", "-min-reached", "1", "-junit", junit)
	require.Equal(t, 0, code)
	assert.Len(t, readJUnit(t, junit).Suites[0].Cases, 1)
}
