package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/props"
	"github.com/stretchr/testify/require"
)

const sample = `goos: linux
cpu: AMD EPYC
BenchmarkYieldSwitch/pull-2   	 1000	 110.0 ns/op	 110.0 ns/switch
BenchmarkYieldSwitch/pull-2   	 1000	  95.0 ns/op	  95.0 ns/switch
BenchmarkYieldSwitch/pull-2   	 1000	 101.0 ns/op	 101.0 ns/switch
`

func TestMedianAndSpreadOverTheCounts(t *testing.T) {
	b, env, err := parseBench(strings.NewReader(sample))
	require.NoError(t, err)
	assert.Equal(t, "AMD EPYC", env["cpu"])
	m, ok := get(b, "BenchmarkYieldSwitch/pull-2", "ns/switch")
	require.True(t, ok)
	assert.Equal(t, 101.0, m)
	assert.Equal(t, "95 – 110 (3)", spread(b, "BenchmarkYieldSwitch/pull-2", "ns/switch", "%.0f"))
	assert.Equal(t, "—", spread(b, "BenchmarkMissing-2", "ns/switch", "%.0f"))
	assert.Equal(t, "—", spread(b, "BenchmarkYieldSwitch/pull-2", "tokens/s", "%.0f"))
}

func TestParseBenchSaysWhatIsNotANumber(t *testing.T) {
	_, _, err := parseBench(strings.NewReader("BenchmarkX-2 10 fast ns/op\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"fast" is not a number`)
}

// TestBenchmarksAtThisMachinesProcs: the benchmarks make bench runs
// without -test.cpu are named after GOMAXPROCS, "-4" on four cores and no
// suffix on one; those run with -test.cpu 1,2 are named "" and "-2"
// everywhere. Both are found.
func TestBenchmarksAtThisMachinesProcs(t *testing.T) {
	for _, tc := range []struct {
		procs  int
		suffix string
	}{{4, "-4"}, {1, ""}, {2, "-2"}} {
		text := "cpu: AMD EPYC    \n" +
			"BenchmarkYieldSwitch/pull" + tc.suffix + "   \t 1000\t 101.0 ns/op\t 101.0 ns/switch\n" +
			"BenchmarkYieldSwitch/pull-sweep" + tc.suffix + "   \t 1000\t 90.0 ns/op\t 90.0 ns/switch\n" +
			"BenchmarkRealYield" + tc.suffix + "   \t 1000\t 0.55 ns/op\n" +
			"BenchmarkSeedParallel/abort-reuse/fixed   \t 100\t 11000 seeds/s\n" +
			"BenchmarkSeedParallel/abort-reuse/fixed-2   \t 100\t 21000 seeds/s\n"
		b, env, err := parseBench(strings.NewReader(text))
		require.NoError(t, err)
		var out strings.Builder
		write(&out, b, env, &stressSummary{}, &sweepSummary{}, nil, nil, tc.procs, "off")
		doc := out.String()
		assert.Contains(t, doc, "| a task switch (decision and baton pass) | < 100 ns | 101 ns | 101 – 101 (1) | **not met** |", "procs %d", tc.procs)
		assert.Contains(t, doc, "| Yield on the real runtime | < 2 ns | 0.55 ns |", "procs %d", tc.procs)
		assert.Contains(t, doc, "| iter.Pull coroutines (kept) | not measured | 101 | 90 | not measured |", "procs %d", tc.procs)
		assert.Contains(t, doc, "| fixed engine | 11000 | 21000 |", "procs %d", tc.procs)
		assert.Contains(t, doc, "**Machine:** AMD EPYC, ", "the CPU's name, its padding trimmed")
	}
}

// TestWindowsCountWhatEachExecutionIsWorth: the real processes' openings
// of the founding window, as their logs of situations counted them (a
// bound by the rule of three when there are none), set against the
// sweep's count of seeds that reached it; from a stress that counted none,
// their failures stand in.
func TestWindowsCountWhatEachExecutionIsWorth(t *testing.T) {
	stress := func(failed int, reached map[string]int) *stressSummary {
		s := &stressSummary{Parallel: 40, Rounds: 5}
		s.Variants = append(s.Variants, stressVariant{Runs: 200, Failed: failed, UpperBound: 0.015, ExecsPerSec: 100, Reached: reached})
		return s
	}
	sweep := &sweepSummary{Seeds: 1000, Seconds: 0.5, SeedsPerSec: 2000, Workers: 2,
		Reached: map[string]uint64{founding: 800, props.LateCoreAbort.String(): 10}}
	doc := func(s *stressSummary, sw *sweepSummary) string {
		var out strings.Builder
		write(&out, map[string]*result{}, map[string]string{}, s, sw, nil, nil, 2, "off")
		return out.String()
	}

	none := doc(stress(0, map[string]int{founding: 0, props.LateCoreAbort.String(): 1}), sweep)
	assert.Contains(t, none, "sweep opened it on 800 of its 1000 seeds, 1600 a second.")
	assert.Contains(t, none, "opened the window in 0 of their 200 executions, at most 1.50% of the time,\nat most 1.50 a second: the simulator opened it at least 1067 times as often")
	assert.Contains(t, none, "| `stale-frame-after-reuse` | 0 (0.0%) | 800 (80.0%) |")
	assert.Contains(t, none, "| `late-core-abort` | 1 (0.5%) | 10 (1.0%) |")
	assert.NotContains(t, none, "`preempted`", "a situation neither side reached")

	some := doc(stress(4, map[string]int{founding: 4}), sweep)
	assert.Contains(t, some, "opened the window in 4 of their 200 executions, 2.00% of the time,\n2.00 a second: the simulator opened it 800 times as often")

	old := doc(stress(4, nil), sweep)
	assert.Contains(t, old, "with 4 failures in 200 executions, opened it 2.00%\nof the time,\n2.00 a second: the simulator opened it 800 times as often")
	assert.NotContains(t, old, "| situation |", "no counts of situations from the real processes")

	assert.NotContains(t, doc(stress(0, nil), &sweepSummary{Seeds: 1000, Seconds: 0.5}), "sweep opened it on",
		"a sweep without the count says nothing of it")
}

// TestWalksAreSetOutBound: each explore -json output is a row, its outcome
// in words; without any, no section.
func TestWalksAreSetOutBound(t *testing.T) {
	walks := []exploreSummary{
		{Engine: "fixed", Delays: 3, Workers: 2, Schedules: 1100372, Complete: true, Seconds: 21.7, SchedulesPerSec: 50708},
		{Engine: "legacy", Delays: 3, Workers: 2, Schedules: 479938, Failed: true, Seconds: 9.6, SchedulesPerSec: 49993},
		{Engine: "fixed", Delays: 4, Workers: 2, Schedules: 1000, Seconds: 0.1, SchedulesPerSec: 10000},
	}
	var out strings.Builder
	write(&out, map[string]*result{}, map[string]string{}, &stressSummary{}, &sweepSummary{}, walks, nil, 2, "off")
	doc := out.String()
	assert.Contains(t, doc, "| fixed | 3 | 1100372 | every one passed | 21.70 s | 50708 |")
	assert.Contains(t, doc, "| legacy | 3 | 479938 | failed: the first failing schedule found | 9.60 s | 49993 |")
	assert.Contains(t, doc, "| fixed | 4 | 1000 | stopped early, none failed | 0.10 s | 10000 |")

	out.Reset()
	write(&out, map[string]*result{}, map[string]string{}, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	assert.NotContains(t, out.String(), "## Every schedule within a bound")
}

// TestEachScenarioIsARow: every scenario BenchmarkSeed ran on one core is a
// row, in name order, its cost a decision worked out from its rate and its
// decisions; one the legacy run missed says so; without any, no section.
func TestEachScenarioIsARow(t *testing.T) {
	text := "BenchmarkSeed/swarm/fixed   \t 100\t 250000 ns/op\t 4000 seeds/s\t 500.0 steps/seed\t 43000 B/op\t 400 allocs/op\n" +
		"BenchmarkSeed/swarm/legacy   \t 100\t 200000 ns/op\t 5000 seeds/s\t 450.0 steps/seed\t 41000 B/op\t 380 allocs/op\n" +
		"BenchmarkSeed/abort-reuse/fixed   \t 100\t 70000 ns/op\t 14000 seeds/s\t 340.0 steps/seed\t 20000 B/op\t 200 allocs/op\n" +
		"BenchmarkSeed/abort-reuse/dp2   \t 100\t 90000 ns/op\t 11000 seeds/s\t 380.0 steps/seed\t 26000 B/op\t 260 allocs/op\n" +
		"BenchmarkSeedParallel/abort-reuse/fixed-2   \t 100\t 28000 seeds/s\n"
	b, env, err := parseBench(strings.NewReader(text))
	require.NoError(t, err)
	var out strings.Builder
	write(&out, b, env, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	doc := out.String()
	abort := strings.Index(doc, "| abort-reuse | 14000 | not measured | 11000 | 340 | 0.21 | 20000 | 200 |")
	swarm := strings.Index(doc, "| swarm | 4000 | 5000 | not measured | 500 | 0.50 | 43000 | 400 |")
	require.NotEqual(t, -1, abort, doc)
	require.NotEqual(t, -1, swarm, doc)
	assert.Less(t, abort, swarm, "rows in name order")
	assert.NotContains(t, doc, "| abort-reuse-2 |", "the parallel benchmark is not a scenario's row")
	assert.NotContains(t, doc, "| abort-reuse/dp2 |", "two cores are a column, not a row")
	assert.Contains(t, doc, "(a sweep on more cores runs more: `BenchmarkSeedParallel` says how many)", "no one-core figure, no ratio")

	b, _, err = parseBench(strings.NewReader(text + "BenchmarkSeedParallel/abort-reuse/fixed   \t 100\t 16000 seeds/s\n"))
	require.NoError(t, err)
	out.Reset()
	write(&out, b, env, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	assert.Contains(t, out.String(), "(a sweep on two cores runs 1.8 times as many: abort-reuse's `BenchmarkSeedParallel`)", "28000 ÷ 16000")

	out.Reset()
	write(&out, map[string]*result{}, map[string]string{}, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	assert.NotContains(t, out.String(), "## Each scenario's seeds")
}

var twoCPUs = []run{
	{Date: "2026-11-30", Code: "aaaaaaa", CPU: "AMD EPYC", Procs: 2, RealPerSec: 250, SweepPerSec: 25000, BothCores: 19999.6, SwitchNs: 120},
	{Date: "2026-12-01", Code: "bbbbbbb", CPU: "AMD EPYC", Procs: 2, RealPerSec: 200, SweepPerSec: 30000, BothCores: 30000, SwitchNs: 90},
	{Date: "2026-12-02", Code: "ccccccc", CPU: "Oxide", Procs: 2, RealPerSec: 50.5, SweepPerSec: 25000, BothCores: 36000, SwitchNs: 99.96},
	{Date: "2026-12-03", Code: "ddddddd-dirty", CPU: "Oxide", Procs: 2, RealPerSec: 60, SweepPerSec: 30000, BothCores: 37000, SwitchNs: 65},
}

// TestRunsReadBackAsWritten: runs.tsv keeps a figure to its tenth, so that
// none read back falls on the other side of its target (99.96 ns was a
// miss before and is one after); a run that measured one side of the ratio
// only, or names no code, is not kept, and leaves the file as it was; a
// run the same as the last one kept is not kept twice.
func TestRunsReadBackAsWritten(t *testing.T) {
	var buf strings.Builder
	require.NoError(t, formatRuns(&buf, twoCPUs))
	assert.True(t, strings.HasPrefix(buf.String(), runsHeader+"\n"))
	assert.Contains(t, buf.String(), "2026-11-30\taaaaaaa\tAMD EPYC\t2\t250\t25000\t19999.6\t120\n")
	assert.Contains(t, buf.String(), "\t50.5\t25000\t36000\t100\n")
	got, err := parseRuns(strings.NewReader(buf.String()), "runs.tsv")
	require.NoError(t, err)
	want := slices.Clone(twoCPUs)
	want[2].SwitchNs = 100
	assert.Equal(t, want, got)

	path := filepath.Join(t.TempDir(), "runs.tsv")
	none, err := readRuns(path)
	require.NoError(t, err, "a file not there holds no runs yet")
	assert.Empty(t, none)
	require.NoError(t, recordRun(path, want[:1]))
	require.NoError(t, recordRun(path, want))
	got, err = readRuns(path)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	for _, tc := range []struct {
		this run
		err  string
	}{
		{run{Date: "2026-12-04", Code: "eeeeeee", CPU: "Oxide", Procs: 2, SweepPerSec: 30000},
			"this run measured 0.0 real executions a second and 30000 sweep seeds a second"},
		{run{Date: "2026-12-04", Code: "eeeeeee", CPU: "Oxide", Procs: 2, RealPerSec: 50},
			"this run measured 50.0 real executions a second and 0 sweep seeds a second"},
		{run{Date: "2026-12-04", CPU: "Oxide", Procs: 2, RealPerSec: 50, SweepPerSec: 30000},
			"this run names no code (-code)"},
	} {
		err = recordRun(path, append(slices.Clone(want), tc.this))
		require.Error(t, err, "%+v is not kept", tc.this)
		assert.Contains(t, err.Error(), tc.err)
		got, err = readRuns(path)
		require.NoError(t, err)
		assert.Equal(t, want, got, "the file as it was")
	}
	require.NoError(t, recordRun(path, append(slices.Clone(want), want[3])))
	got, err = readRuns(path)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the last run once")
}

func TestParseRunsSaysWhereAndWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"date\tcode\n", `runs.tsv:1: the header is "date\tcode"`},
		{runsHeader + "\n2026-12-01\tabc\tAMD EPYC\t2\t250\t25000\t30000\n", "runs.tsv:2: 7 tab-separated fields, want 8 (date, code, cpu, procs,"},
		{runsHeader + "\n\n2026-12-01\tabc\tAMD EPYC\t2\t250\tfast\t30000\t90\n", `runs.tsv:3: legacy_sweep_seeds_per_s is "fast", not a number ≥ 0`},
		{runsHeader + "\n2026-12-01\tabc\tAMD EPYC\t2\t-1\t25000\t30000\t90\n", `runs.tsv:2: real_executions_per_s is "-1", not a number ≥ 0`},
		{runsHeader + "\n2026-12-01\tabc\tAMD EPYC\t2\t250\t25000\t30000\tNaN\n", `runs.tsv:2: task_switch_ns is "NaN", not a number ≥ 0`},
		{runsHeader + "\n2026-12-01\tabc\tAMD EPYC\t0\t250\t25000\t30000\t90\n", `runs.tsv:2: procs is "0", not a whole number ≥ 1`},
		{runsHeader + "\n2026-12-01\t\tAMD EPYC\t2\t250\t25000\t30000\t90\n", `runs.tsv:2: the code is empty`},
	} {
		_, err := parseRuns(strings.NewReader(tc.text), "runs.tsv")
		require.Error(t, err, tc.text)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestTheRecordedRunsParse: the repository's own record of make bench
// runs is one make bench reads and adds to, every row with both sides of
// the ratio.
func TestTheRecordedRunsParse(t *testing.T) {
	runs, err := readRuns("runs.tsv")
	require.NoError(t, err)
	require.NotEmpty(t, runs)
	for _, r := range runs {
		assert.Regexp(t, `^\d{4}-\d{2}-\d{2}$`, r.Date)
		assert.Regexp(t, `^([0-9a-f]{7,}(-dirty)?|unknown)$`, r.Code)
		assert.Positive(t, r.ratio(), "%s: both sides of the ratio", r.Code)
	}
}

// TestThisRunsRowFromWhatItMeasured: this run's row takes its figures from
// the benchmarks make bench names, at this machine's GOMAXPROCS, and from
// the stress and the sweep.
func TestThisRunsRowFromWhatItMeasured(t *testing.T) {
	text := "cpu: Oxide Virtual Turin-like Processor  \n" +
		"BenchmarkSeedParallel/abort-reuse/fixed   \t 100\t 18000 seeds/s\n" +
		"BenchmarkSeedParallel/abort-reuse/fixed-2   \t 100\t 35000 seeds/s\n" +
		"BenchmarkYieldSwitch/pull-4   \t 1000\t 61.45 ns/op\t 61.45 ns/switch\n" +
		"BenchmarkYieldSwitch/pull-sweep-4   \t 1000\t 55.0 ns/op\t 55.0 ns/switch\n" +
		"BenchmarkSeed/abort-reuse/fixed \t 100\t 1000 ns/op\t 342 steps/seed\n" +
		"BenchmarkSeed/abort-reuse/legacy \t 100\t 1000 ns/op\t 334 steps/seed\n" +
		"BenchmarkDecision/calm-4 \t 100\t 10.0 ns/op\n" +
		"BenchmarkDecision/chaos-4 \t 100\t 41.0 ns/op\n" +
		"BenchmarkRawSwitch/pull-4 \t 100\t 35.0 ns/op\t 35.0 ns/switch\n"
	b, env, err := parseBench(strings.NewReader(text))
	require.NoError(t, err)
	stress := &stressSummary{Variants: []stressVariant{{ExecsPerSec: 54.4}}}
	got := thisRun("2026-12-07", "bba1080", env, 4, b, stress, &sweepSummary{SeedsPerSec: 30757.44})
	// To a tenth, as runs.tsv keeps it: 61.45 shown as 61 today would be
	// 61.5, shown as 62, in every document after.
	assert.Equal(t, run{Date: "2026-12-07", Code: "bba1080", CPU: "Oxide Virtual Turin-like Processor", Procs: 4,
		RealPerSec: 54.4, SweepPerSec: 30757.4, BothCores: 35000, SwitchNs: 61.5}, got)
	assert.Equal(t, seedCost{decisions: 334, calmNs: 10, chaosNs: 41, coroutineSwitchNs: 35}, costOfASeed(b, 4))
	assert.Equal(t, "unknown", thisRun("d", "c", map[string]string{}, 2, b, stress, &sweepSummary{}).CPU)
}

// TestEveryRunAndWhatAThousandfoldWouldTake: the runs set out one a row,
// this one last, then CPU by CPU the ratio's range and how much cheaper a
// seed would have to be, and for how long the simulator's own targets
// held.
func TestEveryRunAndWhatAThousandfoldWouldTake(t *testing.T) {
	var out strings.Builder
	b := map[string]*result{
		"BenchmarkSeed/abort-reuse/legacy": {values: map[string][]float64{"steps/seed": {340}}},
		"BenchmarkDecision/calm-2":         {values: map[string][]float64{"ns/op": {11}}},
		"BenchmarkDecision/chaos-2":        {values: map[string][]float64{"ns/op": {42}}},
		"BenchmarkRawSwitch/pull-2":        {values: map[string][]float64{"ns/switch": {36}}},
	}
	write(&out, b, map[string]string{}, &stressSummary{}, &sweepSummary{}, nil, twoCPUs, 2, "off")
	doc := out.String()
	assert.Contains(t, doc, "| 2026-11-30 | aaaaaaa | AMD EPYC | 2 | 250 | 25000 | 100× | 20000 | 120 |")
	assert.Contains(t, doc, "| 2026-12-03 | ddddddd-dirty | Oxide | 2 | 60 | 30000 | 500× | 37000 | 65 |")
	assert.Contains(t, doc, "| AMD EPYC | 2 | 200 – 250 | 25000 – 30000 | 100× – 150× | 6.7 – 10.0 |")
	assert.Contains(t, doc, "| Oxide | 2 | 50 – 60 | 25000 – 30000 | 495× – 500× | 2.0 – 2.0 |")
	assert.Contains(t, doc, "Over every run the real side ranged 5.0 times (50 to 250 a second),\nthe sweep 1.2 times (25000 to 30000 seeds a second).")
	assert.Contains(t, doc, "On this run a seed 2.0 times cheaper would have met the target.")
	assert.Contains(t, doc, "At the fastest start rate seen, 250 a second (aaaaaaa, AMD EPYC), a thousandfold is 250000 seeds a second")
	assert.Contains(t, doc, "on its 2 cores: 8.0 µs of CPU a seed, 24 ns for each of a legacy seed's 340 scheduling decisions")
	assert.Contains(t, doc, "a decision alone cost 11 ns (`calm`) to 42 ns\n(`chaos`) and a bare coroutine switch 36 ns")
	assert.Contains(t, doc, "Of the targets the table follows, both-core seeds a second met 20,000 on every one of the 3 runs since the run of aaaaaaa (2026-11-30), which missed it at 19999.6; "+
		"the task switch met 100 ns on every one of the 3 runs since the run of aaaaaaa (2026-11-30), which missed it at 120.")
	every := strings.Index(doc, "## Every `make bench` run")
	require.NotEqual(t, -1, every)
	assert.Less(t, every, strings.Index(doc, "## What each change bought"))
	assert.NotContains(t, doc, "%!", "a format's verbs and arguments agree")
	assert.NotContains(t, doc, "\n\n\n", "no two blank lines")

	met := []run{{Date: "d", Code: "e", CPU: "Fast", Procs: 2, RealPerSec: 20, SweepPerSec: 30000}}
	out.Reset()
	write(&out, b, map[string]string{}, &stressSummary{}, &sweepSummary{}, nil, met, 2, "off")
	assert.Contains(t, out.String(), "| Fast | 1 | 20 – 20 | 30000 – 30000 | 1500× – 1500× | met on every run |")
	assert.NotContains(t, out.String(), "On this run a seed")
	assert.NotContains(t, out.String(), "Of the targets the table follows", "nothing measured, nothing said")
	assert.NotContains(t, out.String(), "\n\n\n", "no two blank lines")

	out.Reset()
	write(&out, b, map[string]string{}, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	assert.NotContains(t, out.String(), "## Every `make bench` run", "no runs, no section")
}

func TestSinceLastMiss(t *testing.T) {
	sw := func(r run) float64 { return r.SwitchNs }
	under := func(v float64) bool { return v < 100 }
	at := func(ns ...float64) []run {
		var rs []run
		for i, v := range ns {
			rs = append(rs, run{Code: fmt.Sprint(i), Date: "d", SwitchNs: v})
		}
		return rs
	}
	assert.Equal(t, "on every one of the 2 runs that measured it", sinceLastMiss(at(90, 0, 95), sw, under))
	assert.Equal(t, "on none of the runs", sinceLastMiss(at(120, 130), sw, under))
	assert.Equal(t, "last on the run of 1 (d), not on the runs after it", sinceLastMiss(at(120, 90, 130), sw, under))
	assert.Equal(t, "on every one of the 1 runs since the run of 1 (d), which missed it at 130", sinceLastMiss(at(90, 130, 0, 80), sw, under))
	assert.Equal(t, "", sinceLastMiss(at(0, 0), sw, under))
}

// TestTheHostsNoiseIsTheWidestSpreadOfARun: the machine's line says how far
// one benchmark's counts spread about their median on this run, the widest
// of those with three counts or more, rather than what another host did.
func TestTheHostsNoiseIsTheWidestSpreadOfARun(t *testing.T) {
	text := "cpu: Some CPU\n"
	for _, v := range []string{"100", "110", "130"} { // (130 − 100) ÷ 110: 27%
		text += "BenchmarkA-2 \t 10\t " + v + " ns/op\n"
	}
	for _, v := range []string{"0.3", "0.8", "0.5", "0.5"} { // 100%, but of half a nanosecond: alignment, not the host
		text += "BenchmarkB-2 \t 10\t " + v + " ns/op\n"
	}
	text += "BenchmarkC-2 \t 10\t 10 ns/op\nBenchmarkC-2 \t 10\t 90 ns/op\n" // two counts: no spread to speak of
	b, env, err := parseBench(strings.NewReader(text))
	require.NoError(t, err)
	var out strings.Builder
	write(&out, b, env, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	assert.Contains(t, out.String(), "On this run the counts of one benchmark spread by as much as 27% of their median (`BenchmarkA-2`),")

	out.Reset()
	write(&out, map[string]*result{}, env, &stressSummary{}, &sweepSummary{}, nil, nil, 2, "off")
	assert.NotContains(t, out.String(), "spread by as much as", "no counts, nothing said")
}
