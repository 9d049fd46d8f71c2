package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/reexec"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/sim/simtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// simrun runs the command in-process and returns its exit code and output.
func simrun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestList(t *testing.T) {
	code, out, _ := simrun(t, "list")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "abort-reuse")
	assert.Contains(t, out, "starve:output-handler")
	assert.Contains(t, out, "swarm")
}

// TestListJSON: each list as JSON holds the items its text lists, in the
// same order, with what the text says of each.
func TestListJSON(t *testing.T) {
	code, out, errOut := simrun(t, "list", "-json")
	require.Equal(t, 0, code, errOut)
	var scenarios []scenarioItem
	require.NoError(t, json.Unmarshal([]byte(out), &scenarios))
	require.Len(t, scenarios, len(scenario.All()))
	for i, sc := range scenario.All() {
		assert.Equal(t, sc.Name, scenarios[i].Name)
		assert.Equal(t, sc.DefaultStrategy, scenarios[i].DefaultStrategy, sc.Name)
		assert.Equal(t, sc.Summary, scenarios[i].Summary, sc.Name)
		assert.Equal(t, sc.Targets.Len(), len(scenarios[i].Targets), sc.Name)
		for _, name := range scenarios[i].Targets {
			s, err := props.ParseSituation(name)
			require.NoError(t, err)
			assert.True(t, sc.Targets.Has(s), "%s targets %s", sc.Name, name)
		}
	}
	assert.Contains(t, out, `"targets": []`, "a scenario without targets has an empty list, not null")

	code, out, errOut = simrun(t, "list", "-json", "-failpoints")
	require.Equal(t, 0, code, errOut)
	var fps []failpointItem
	require.NoError(t, json.Unmarshal([]byte(out), &fps))
	require.Len(t, fps, len(failpoints.All())+len(failpoints.Bugs()))
	for i, p := range append(failpoints.All(), failpoints.Bugs()...) {
		assert.Equal(t, p.Name, fps[i].Name)
		assert.Equal(t, p.FullName(), fps[i].FullName)
		assert.Equal(t, i >= len(failpoints.All()), fps[i].Bug, p.Name)
	}

	code, out, errOut = simrun(t, "list", "-json", "-situations")
	require.Equal(t, 0, code, errOut)
	var sits []situationItem
	require.NoError(t, json.Unmarshal([]byte(out), &sits))
	require.Len(t, sits, len(props.AllSituations))
	for i, s := range props.AllSituations {
		assert.Equal(t, s.String(), sits[i].Name)
		for _, name := range sits[i].TargetOf {
			sc, err := scenario.Lookup(name)
			require.NoError(t, err)
			assert.True(t, sc.Targets.Has(s), "%s targets %s", name, s)
		}
	}

	code, out, errOut = simrun(t, "list", "-json", "-properties")
	require.Equal(t, 0, code, errOut)
	var ps []propertyItem
	require.NoError(t, json.Unmarshal([]byte(out), &ps))
	require.Len(t, ps, len(props.All))
	for i, p := range props.All {
		assert.Equal(t, p, ps[i].Name)
		assert.Equal(t, props.Doc(p), ps[i].Doc)
	}
}

func TestRunFailingSeedPrintsItsReplayAndReplayReproducesIt(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL after")
	assert.Contains(t, out, "property no-cross-incarnation-delivery violated")
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	assert.Contains(t, out, "replay: simrun replay "+file)
	hash := between(out, "trace hash ", "\n")

	code, out, _ = simrun(t, "replay", file)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "trace hash "+hash+" (the same as recorded)")
	assert.Contains(t, out, "property no-cross-incarnation-delivery violated")
}

func TestRunJSONAndTraceFiles(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "trace.json")
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "3", "-json", "-trace", tr)
	require.Equal(t, 0, code, out)
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	for _, k := range []string{"seed", "failed", "error", "steps", "trace_hash"} {
		assert.Contains(t, j, k)
	}
	assert.Equal(t, false, j["failed"])
	assert.Equal(t, "", j["error"], "a pass has no error, and says so")
	data, err := os.ReadFile(tr)
	require.NoError(t, err)
	var pf struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(data, &pf))
	assert.NotEmpty(t, pf.TraceEvents)

	for _, ext := range []string{".jsonl", ".txt"} {
		code, _, _ = simrun(t, "run", "-scenario", "abort-reuse", "-seed", "3", "-trace", filepath.Join(dir, "t"+ext))
		require.Equal(t, 0, code)
		info, err := os.Stat(filepath.Join(dir, "t"+ext))
		require.NoError(t, err)
		assert.Positive(t, info.Size())
	}
}

func TestRunStory(t *testing.T) {
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-story", "-out", t.TempDir())
	require.Equal(t, 1, code)
	assert.Contains(t, out, "STALE: a previous incarnation's token")
}

func TestSweepLegacyFailsAndFixedPasses(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-200", "-legacy", "-out", dir, "-quiet")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "failures: ")
	assert.Contains(t, out, "first failing seed: ")
	assert.Contains(t, out, "replay: simrun replay "+dir)

	code, out, _ = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-200", "-j", "2", "-json", "-out", dir)
	require.Equal(t, 0, code, out)
	var r sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, uint64(200), r.Seeds)
	assert.Zero(t, r.Failures)
	assert.Nil(t, r.FirstFailure)
	assert.Empty(t, r.FailingSeeds)
	assert.Positive(t, r.SeedsPerSec)
	assert.Equal(t, [2]float64{0, r.CI95[1]}, r.CI95)
	assert.Positive(t, r.Determinism)
}

func TestSweepJSONFieldsOnFailure(t *testing.T) {
	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-100", "-legacy", "-json", "-out", t.TempDir())
	require.Equal(t, 1, code)
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	for _, k := range []string{"scenario", "strategy", "seeds", "failures", "rate", "ci95", "first_failure", "failing_seeds", "seeds_per_sec", "modes"} {
		assert.Contains(t, j, k)
	}
	assert.Greater(t, j["failures"].(float64), 10.0)
}

func TestSweepResultDoesNotDependOnWorkers(t *testing.T) {
	var results []sweepResult
	for _, j := range []string{"1", "2", "3"} {
		code, out, _ := simrun(t, "sweep", "-scenario", "swarm", "-seeds", "1-150", "-legacy", "-j", j, "-json", "-out", t.TempDir())
		require.Equal(t, 1, code)
		var r sweepResult
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		results = append(results, r)
	}
	for _, r := range results[1:] {
		assert.Equal(t, results[0].FailingSeeds, r.FailingSeeds)
		assert.Equal(t, len(results[0].Modes), len(r.Modes))
	}
}

func TestSweepShardsCoverTheRange(t *testing.T) {
	total := 0
	for _, shard := range []string{"1/3", "2/3", "3/3"} {
		code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-100", "-shard", shard, "-json", "-out", t.TempDir())
		require.Equal(t, 0, code)
		var r sweepResult
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		assert.Equal(t, shard, r.Shard)
		total += int(r.Seeds)
	}
	assert.Equal(t, 100, total)
}

func TestSweepJUnit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "report.xml")
	code, _, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-30", "-legacy", "-junit", file, "-out", t.TempDir(), "-quiet")
	require.Equal(t, 1, code)
	doc := readJUnit(t, file)
	require.Len(t, doc.Suites, 1)
	s := doc.Suites[0]
	assert.Equal(t, len(s.Cases), s.Tests)
	assert.Positive(t, s.Failures)
	var replays int
	for _, c := range s.Cases {
		if strings.Contains(c.Out, "simrun run -scenario abort-reuse -seed") {
			replays++
		}
	}
	assert.Equal(t, s.Failures-1, replays, "every failing seed's case carries its replay command")
}

func TestBadInputIsExitTwoWithAClearMessage(t *testing.T) {
	truncated := filepath.Join(t.TempDir(), "t.schedule")
	require.NoError(t, os.WriteFile(truncated, []byte("llmdst-schedule v1\nsteps 3\n0 1\n"), 0o644))
	foreign := filepath.Join(t.TempDir(), "f.schedule")
	require.NoError(t, os.WriteFile(foreign, []byte("llmdst-schedule v9\nsteps 0\nend\n"), 0o644))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run"}, "-scenario is required"},
		{[]string{"run", "-scenario", "nope"}, `unknown scenario "nope"`},
		{[]string{"run", "-scenario", "abort-reuse", "-strategy", "nope"}, `unknown strategy "nope"`},
		{[]string{"run", "-scenario", "abort-reuse", "-json", "-story"}, "-story and -json do not go together"},
		{[]string{"explore", "-scenario", "abort-reuse", "-json", "-story"}, "-story and -json do not go together"},
		{[]string{"shrink", "-scenario", "abort-reuse", "-legacy", "-json", "-story"}, "-story and -json do not go together"},
		{[]string{"run", "-scenario", "abort-reuse", "-strategy", "pct:0"}, "want pct:D with a depth D ≥ 1"},
		{[]string{"run", "-scenario", "abort-reuse", "-seed", "-1"}, `invalid value "-1" for flag -seed: want a whole number ≥ 0`},
		{[]string{"shrink", "-scenario", "abort-reuse", "-seed", "1.5"}, `invalid value "1.5" for flag -seed: want a whole number ≥ 0`},
		{[]string{"sweep", "-scenario", "abort-reuse", "-seeds", ""}, "-seeds is empty"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-seeds", "9-3"}, "is empty: its end 3 is below its start 9"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-seeds", "x"}, `"x" is not a seed or a range`},
		{[]string{"sweep", "-scenario", "abort-reuse", "-shard", "4/3"}, "shard 4 is out of range"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-shard", "1of3"}, "want I/N"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-j", "0"}, "-j must be ≥ 1"},
		{[]string{"run", "-scenario", "abort-reuse", "-steps-max", "4294967297"}, "-steps-max must be at most 4294967296, the most decisions a schedule file holds, got 4294967297"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-j", "help requested"}, `invalid value "help requested" for flag -j`},
		{[]string{"merge", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"replay"}, "want one schedule file"},
		{[]string{"replay", "/no/such/file"}, "cannot read the schedule"},
		{[]string{"replay", truncated}, "truncated"},
		{[]string{"replay", foreign}, `version "v9" is not supported`},
		{[]string{"run", "-scenario", "abort-reuse", "stray"}, `unexpected argument "stray"`},
	}
	for _, c := range cases {
		code, _, errOut := simrun(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// TestGOFailpointsIsReadAtStart runs this test binary again as simrun with
// GO_FAILPOINTS set, as a user would: a value simrun cannot take is bad
// input, exit code 2 and one line on standard error before anything runs
// (not exit 1, a failure found, with pingcap's message in the -json
// output), a name under the module's path must be in the catalogue, as
// -failpoint's must, and a good value is still in the environment of the
// processes simrun starts.
func TestGOFailpointsIsReadAtStart(t *testing.T) {
	if args, ok := os.LookupEnv("LLMDST_SIMRUN_CHILD"); ok {
		os.Exit(run(strings.Split(args, "\t"), os.Stdout, os.Stderr))
	}
	child := func(env string, args ...string) (int, string, string) {
		t.Helper()
		return reexec.Test(t, "TestGOFailpointsIsReadAtStart", "LLMDST_SIMRUN_CHILD="+strings.Join(args, "\t"), "GO_FAILPOINTS="+env)
	}
	stall := failpoints.CoreStallMidStep.FullName()
	for env, want := range map[string]string{
		"garbage":                 `failpoints: GO_FAILPOINTS: "garbage": want NAME=TERMS`,
		"other/x=return(1.5)":     `failpoints: GO_FAILPOINTS: other/x: failpoint: failed to parse "return(1.5)"`,
		stall + "=return(abc)":    "failpoints: GO_FAILPOINTS: core/stall-mid-step: return(abc): the delay must be",
		stall + "p=return":        `failpoints: GO_FAILPOINTS: unknown failpoint "github.com/llmdst/llmdst/core/stall-mid-stepp": want one of`,
		stall + "=50%return(400)": "", // pingcap's grammar: the process-wide set takes it, a run set refuses it
	} {
		code, out, errOut := child(env, "sweep", "-scenario", "abort-reuse", "-seeds", "1-10", "-json")
		assert.Equal(t, 2, code, "%s: %s", env, errOut)
		if want == "" {
			assert.Contains(t, errOut, "would break replay", env)
			continue
		}
		assert.Empty(t, out, env)
		assert.True(t, strings.HasPrefix(errOut, want), "%s: %s", env, errOut)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "%s: one line: %s", env, errOut)
	}

	env := stall + "=return(400);other/x=return(1)"
	code, out, errOut := child(env, "stress", "-p", "1", "-rounds", "1", "--", "sh", "-c", `test "$GO_FAILPOINTS" = "$0"`, env)
	assert.Equal(t, 0, code, "the copies stress runs see GO_FAILPOINTS as it was set: %s%s", out, errOut)
}

func TestReplayOfAScheduleThatNoLongerMatches(t *testing.T) {
	dir := t.TempDir()
	code, _, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	// Pretend the code changed: the schedule now belongs to the other scenario.
	other := strings.Replace(string(data), `meta "scenario" "abort-reuse"`, `meta "scenario" "swarm"`, 1)
	require.NoError(t, os.WriteFile(file, []byte(other), 0o644))
	code, _, errOut := simrun(t, "replay", file)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "no longer matches the code")
}

func between(s, a, b string) string {
	_, rest, _ := strings.Cut(s, a)
	v, _, _ := strings.Cut(rest, b)
	return v
}

func TestFailpointFlag(t *testing.T) {
	code, out, _ := simrun(t, "list", "-failpoints")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "core/model-panic")
	assert.Contains(t, out, "github.com/llmdst/llmdst/core/model-panic")
	faults, bugs, ok := strings.Cut(out, "Bugs, planted on purpose")
	require.True(t, ok, "the bugs have a section of their own:\n%s", out)
	assert.NotContains(t, faults, "core/kv-keep-evicted-hash")
	assert.Contains(t, bugs, "core/kv-keep-evicted-hash")

	dir := t.TempDir()
	code, out, _ = simrun(t, "run", "-scenario", "abort-reuse", "-seed", "4", "-legacy", "-out", dir,
		"-failpoint", "engine/abort-after-add=return", "-failpoint", "core/stall-mid-step=1/2*return(400)")
	require.Equal(t, 1, code, out)
	file := onlyFile(t, dir, "abort-reuse-legacy-*-seed4.schedule")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), `meta "failpoint" "engine/abort-after-add=return"`, "the schedule carries its failpoints")
	hash := between(out, "trace hash ", "\n")
	code, out, _ = simrun(t, "replay", file)
	require.Equal(t, 1, code)
	assert.Contains(t, out, "trace hash "+hash+" (the same as recorded)", "a run with faults replays exactly")

	code, out, _ = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-20", "-quiet", "-out", dir,
		"-failpoint", "core/stall-before-abort=return(3200)", "-failpoint", "engine/output-handler-stall=1/2*return(1600)")
	assert.Equal(t, 0, code, "the fixed engine survives the faults: %s", out)

	for spec, want := range map[string]string{
		"core/stall-mid-step=50%return":   "would break replay",
		"core/nope=return":                "unknown failpoint",
		"core/stall-mid-step":             "want NAME=TERMS",
		"core/stall-mid-step=return(abc)": `failpoints: core/stall-mid-step: return(abc): the delay must be a whole number of microseconds ≥ 0 or a quoted duration such as "2ms"`,
		"core/stall-mid-step=return(-5)":  "return(-5): the delay must be",
	} {
		code, _, errOut := simrun(t, "run", "-scenario", "abort-reuse", "-failpoint", spec)
		assert.Equal(t, 2, code, spec)
		assert.Contains(t, errOut, want, spec)
	}
}

// junitDoc is what the tests read of a JUnit report.
type junitDoc struct {
	Suites []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Cases    []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
			Out string `xml:"system-out"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// readJUnit parses the JUnit report in file.
func readJUnit(t *testing.T, file string) junitDoc {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(data, &doc), "%s is not JUnit XML", file)
	return doc
}

// TestAReplayWhoseTraceHashIsNotTheRecordedOneFails: a schedule that
// replays to another trace hash than it recorded is not the run recorded;
// the replay says so and exits 1, though the run itself passed, so that CI
// replaying kept schedules sees the drift.
func TestAReplayWhoseTraceHashIsNotTheRecordedOneFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pass.schedule")
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-schedule-out", file)
	require.Equal(t, 0, code, out)
	code, out, _ = simrun(t, "replay", file)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "(the same as recorded)")

	b, err := os.ReadFile(file)
	require.NoError(t, err)
	changed := regexp.MustCompile(`(?m)^meta "trace-hash" ".*"$`).ReplaceAllString(string(b), `meta "trace-hash" "0000000000000001"`)
	require.NotEqual(t, string(b), changed, "the schedule had a trace hash")
	require.NoError(t, os.WriteFile(file, []byte(changed), 0o644))
	code, out, _ = simrun(t, "replay", file)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, ": ok, ", "the run itself passed")
	assert.Contains(t, out, "(DIFFERENT from the recorded 0000000000000001: this is not the run recorded")
	code, out, _ = simrun(t, "replay", "-json", file)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, `"same_hash_as_recorded": false`)
}

func TestReplayOfAScheduleWithNoTraceHashSaysNoneWasRecorded(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code, out)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, `meta "trace-hash" `) {
			kept = append(kept, line)
		}
	}
	require.Less(t, len(kept), strings.Count(string(b), "\n")+1, "the schedule had a trace hash")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(kept, "\n")), 0o644))

	code, out, _ = simrun(t, "replay", file)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, " (the schedule recorded none)")
	assert.NotContains(t, out, "DIFFERENT")
	code, out, _ = simrun(t, "replay", "-json", file)
	require.Equal(t, 1, code, out)
	assert.NotContains(t, out, "same_hash_as_recorded", "there is nothing to compare with")
}

// TestReplayOfASimtestScheduleSaysWhichTestRunsIt: a schedule simtest saved
// for a Go test is no scenario's; replay names the test and its command.
func TestReplayOfASimtestScheduleSaysWhichTestRunsIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "seed-1-pct_3.schedule")
	s := sim.NewSchedule(nil, []string{"main"}, []sim.Meta{{Key: simtest.MetaTest, Value: "TestTellers/sub"},
		{Key: simtest.MetaCommand, Value: "go test -run '^TestTellers$/^sub$' example.com/bank"}, {Key: "seed", Value: "1"}})
	require.NoError(t, os.WriteFile(file, []byte(s.String()), 0o644))
	code, _, errOut := simrun(t, "replay", file)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "the schedule was saved by simtest for the Go test TestTellers/sub: run that test (go test -run '^TestTellers$/^sub$' example.com/bank), which runs the schedules saved for it first")
}
