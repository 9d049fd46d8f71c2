package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/scenario"
)

// decodeAll reads a stream of JSON objects, one a scenario.
func decodeAll[T any](t *testing.T, out string) []T {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	var all []T
	for {
		var v T
		err := dec.Decode(&v)
		if err == io.EOF {
			return all
		}
		require.NoError(t, err, out)
		all = append(all, v)
	}
}

// TestSweepOfSeveralScenarios: each scenario is swept in turn over the same
// seeds, as a sweep of it alone would be; the exit code is the worst of
// them, the JSON an object each, the JUnit report a suite each, and the
// text ends with what failed and what passed.
func TestSweepOfSeveralScenarios(t *testing.T) {
	dir := t.TempDir()
	junit := filepath.Join(dir, "sweep.xml")
	args := []string{"sweep", "-scenario", "abort-reuse, prefix-chat", "-legacy", "-seeds", "1-200", "-out", dir}
	code, out, errOut := simrun(t, append(args, "-json", "-junit", junit)...)
	require.Equal(t, 1, code, "the legacy engine fails abort-reuse: %s", errOut)
	rs := decodeAll[sweepResult](t, out)
	require.Len(t, rs, 2)
	assert.Equal(t, "abort-reuse", rs[0].Scenario)
	assert.Equal(t, "prefix-chat", rs[1].Scenario)
	for _, r := range rs {
		assert.Equal(t, "1-200", r.SeedRange, r.Scenario)
		assert.Equal(t, "legacy", r.Engine, r.Scenario)
	}
	assert.Positive(t, rs[0].Failures)
	assert.Zero(t, rs[1].Failures)

	// The same as a sweep of each alone: the same failing seeds.
	for _, r := range rs {
		_, alone := sweepJSON(t, "-scenario", r.Scenario, "-legacy", "-seeds", "1-200")
		assert.Equal(t, alone.FailingSeeds, r.FailingSeeds, r.Scenario)
		assert.Equal(t, alone.Reached, r.Reached, r.Scenario)
	}

	data, err := os.ReadFile(junit)
	require.NoError(t, err)
	var report struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Name     string `xml:"name,attr"`
			Failures int    `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(data, &report))
	require.Len(t, report.Suites, 2)
	assert.Equal(t, "simrun sweep abort-reuse", report.Suites[0].Name)
	assert.Equal(t, "simrun sweep prefix-chat", report.Suites[1].Name)
	assert.Positive(t, report.Suites[0].Failures)
	assert.Zero(t, report.Suites[1].Failures)
	assert.Equal(t, report.Suites[0].Failures, report.Failures)

	code, out, errOut = simrun(t, args...)
	require.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "sweep abort-reuse: strategy starve:output-handler, legacy engine, seeds 1-200\n")
	assert.Contains(t, out, "\n\nsweep prefix-chat: strategy chaos, legacy engine, seeds 1-200\n")
	assert.Regexp(t, `\nsweep of 2 scenarios: 400 seeds in [0-9.]+s\n  failed: abort-reuse \([0-9]+ of 200 seeds\)\n  passed: prefix-chat\n$`, out)
}

// TestSweepOfAllScenarios: all is every scenario, in simrun list's order.
// This package's tests register scenarios of their own, named test-…,
// some of which fail on purpose: the sweep fails with them, and the
// engine's scenarios pass.
func TestSweepOfAllScenarios(t *testing.T) {
	code, out, errOut := simrun(t, "sweep", "-scenario", "all", "-seeds", "1-2", "-json", "-out", t.TempDir())
	var got []string
	failed := false
	for _, r := range decodeAll[sweepResult](t, out) {
		got = append(got, r.Scenario)
		assert.Equal(t, uint64(2), r.Seeds, r.Scenario)
		if strings.HasPrefix(r.Scenario, "test-") {
			failed = failed || r.Failures > 0
			continue
		}
		assert.Zero(t, r.Failures, "%s: %s", r.Scenario, r.Error)
	}
	assert.Equal(t, scenario.Names(), got)
	require.True(t, failed, "a test- scenario fails")
	assert.Equal(t, 1, code, "the sweep fails with any of its scenarios: %s", errOut)
}

// TestSweepScenariosShareTheBudget: -for is the whole sweep's; each
// scenario takes a share of what is left, and says so when it runs out.
func TestSweepScenariosShareTheBudget(t *testing.T) {
	code, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse,swarm", "-seeds", "1-100000000", "-for", "200ms", "-json", "-out", t.TempDir())
	require.Equal(t, 0, code, errOut)
	rs := decodeAll[sweepResult](t, out)
	require.Len(t, rs, 2)
	for _, r := range rs {
		assert.Contains(t, r.Stopped, "share of the 200ms budget (-for) ran out", r.Scenario)
		assert.Positive(t, r.Seeds, r.Scenario)
		assert.Less(t, r.Seconds, 0.2, "%s: a share, not the whole budget", r.Scenario)
		requirePrefix(t, r, "1-100000000")
	}
}

// TestSweepScenariosBadInputIsExitTwo: a list it cannot read, settings
// every one of its scenarios refuses, or a replay of one scenario's
// schedule, is refused before anything runs.
func TestSweepScenariosBadInputIsExitTwo(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code, errOut)
	schedule := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	require.FileExists(t, schedule)
	assertRefused(t, []string{"sweep", "-seeds", "1-2", "-out", t.TempDir()}, []badInput{
		{[]string{"-scenario", "abort-reuse,,swarm"}, `-scenario "abort-reuse,,swarm" names an empty scenario`},
		{[]string{"-scenario", "abort-reuse,nope"}, `unknown scenario "nope"`},
		{[]string{"-scenario", "swarm,abort-reuse,swarm"}, `-scenario "swarm,abort-reuse,swarm" names swarm twice`},
		{[]string{"-scenario", "abort-reuse,abort-reuse-wait-idle", "-config", "num-blocks=40"}, "-config num-blocks=40: every scenario of -scenario abort-reuse,abort-reuse-wait-idle refuses these settings"},
		{[]string{"-scenario", "abort-reuse,swarm", "-legacy", "-seeds", "1", "-strategy", "replay:" + schedule}, "-strategy replay:FILE replays one scenario's schedule: give -scenario one name, not abort-reuse,swarm"},
	})
}

// badInput is a command line simrun refuses, and what its error says.
type badInput struct {
	args []string
	want string
}

// assertRefused runs cmd with each case's arguments after it: exit 2,
// the error on stderr, nothing run and so nothing on stdout.
func assertRefused(t *testing.T, cmd []string, cases []badInput) {
	t.Helper()
	for _, tc := range cases {
		code, out, errOut := simrun(t, append(slices.Clone(cmd), tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, errOut)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
		assert.Empty(t, out, "%v: nothing ran", tc.args)
	}
}

// TestMergeOfShardsOfSeveralScenarios: the shards of a sweep of several
// scenarios merge scenario by scenario, into what one sweep of each over
// all the seeds finds.
func TestMergeOfShardsOfSeveralScenarios(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, shard := range []string{"1/2", "2/2"} {
		_, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse,prefix-chat", "-legacy", "-seeds", "1-200", "-shard", shard, "-json", "-out", dir)
		file := filepath.Join(dir, "shard"+shard[:1]+".json")
		require.NoError(t, os.WriteFile(file, []byte(out), 0o644), errOut)
		files = append(files, file)
	}
	code, out, errOut := simrun(t, append([]string{"merge", "-json"}, files...)...)
	require.Equal(t, 1, code, errOut)
	ms := decodeAll[mergeResult](t, out)
	require.Len(t, ms, 2)
	for i, name := range []string{"abort-reuse", "prefix-chat"} {
		m := ms[i]
		assert.Equal(t, name, m.Scenario)
		assert.Equal(t, "1-200", m.SeedRange, name)
		assert.Equal(t, []string{"1/2", "2/2"}, m.Shards, name)
		_, whole := sweepJSON(t, "-scenario", name, "-legacy", "-seeds", "1-200")
		assert.Equal(t, whole.FailingSeeds, m.FailingSeeds, name)
	}

	code, out, errOut = simrun(t, append([]string{"merge"}, files...)...)
	require.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "sweep abort-reuse: ")
	assert.Contains(t, out, "\n\nmerge of 2 shard(s): 1/2, 2/2\nsweep prefix-chat: ")

	// A file that holds a scenario twice is not a sweep's.
	both, err := os.ReadFile(files[0])
	require.NoError(t, err)
	twice := filepath.Join(dir, "twice.json")
	require.NoError(t, os.WriteFile(twice, append(both, both...), 0o644))
	code, _, errOut = simrun(t, "merge", twice)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "holds scenario abort-reuse twice")
}

// TestSweepScenariosMinReached: -min-reached holds each scenario to its own
// targets; one that names none (abort-reuse-wait-idle) is not bad input
// among others that do, but is alone.
func TestSweepScenariosMinReached(t *testing.T) {
	code, _, errOut := simrun(t, "sweep", "-scenario", "abort-reuse-wait-idle,prefix-chat", "-seeds", "1-2", "-min-reached", "100", "-out", t.TempDir())
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "simrun sweep -scenario prefix-chat: target prefix-cache-hit was reached in 2 of 2 seeds, fewer than -min-reached 100")
	assert.NotContains(t, errOut, "abort-reuse-wait-idle")

	code, _, errOut = simrun(t, "sweep", "-scenario", "abort-reuse-wait-idle,prefix-chat", "-seeds", "1-2", "-min-reached", "1", "-out", t.TempDir())
	assert.Equal(t, 0, code, errOut)

	code, _, errOut = simrun(t, "sweep", "-scenario", "abort-reuse-wait-idle", "-seeds", "1-2", "-min-reached", "1", "-out", t.TempDir())
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "scenario abort-reuse-wait-idle names no target situations")

	code, _, errOut = simrun(t, "sweep", "-scenario", "abort-reuse-wait-idle,test-running", "-seeds", "1-2", "-min-reached", "1", "-out", t.TempDir())
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "-min-reached 1: scenarios abort-reuse-wait-idle,test-running name no target situations")
}
