package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asyncBug is abort-reuse with vLLM's #42492 planted: under async
// scheduling a step's output goes to whichever request holds its id.
// Ordering alone never shows it; a starved output handler does, at two
// departures from the calm schedule.
var asyncBug = []string{"-scenario", "abort-reuse", "-legacy", "-config", "async-scheduling=on", "-failpoint", "core/async-output-by-id=return"}

func TestExploreProvesABoundThenFindsTheFailureBeyondIt(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := simrun(t, append([]string{"explore", "-delays", "1", "-out", dir}, asyncBug...)...)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	assert.Contains(t, out, "within 1 departure: every schedule passed: 184 schedules")
	assert.Contains(t, out, "strategy starve:output-handler", "the scenario's default strategy is explored")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a walk that passed writes nothing")

	code, out, errOut = simrun(t, append([]string{"explore", "-delays", "2", "-out", dir}, asyncBug...)...)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, out, "within 2 departures: FAIL after")
	assert.Contains(t, out, "the failing schedule departs twice from the calm one (draws 24:2,25:5): FAIL after")
	files, err := filepath.Glob(filepath.Join(dir, "abort-reuse-legacy-*-seed1-explored.schedule"))
	require.NoError(t, err)
	require.Len(t, files, 1, "the schedule goes under -out, tagged with the settings and -explored")
	file := files[0]
	assert.Contains(t, out, "replay: simrun replay "+file)
	sch, err := readSchedule(file)
	require.NoError(t, err)
	bound, _ := sch.Get("explored")
	assert.Equal(t, "within 2 departures", bound, "the file says a walk found it, not the seed's own draws")

	code, replayed, _ := simrun(t, "replay", file)
	require.Equal(t, 1, code, replayed)
	assert.Contains(t, replayed, "(the same as recorded)")

	// Shrunk, it stays a walk's: beside the seed's own files, not over them.
	code, out, errOut = simrun(t, "shrink", "-out", dir, file)
	require.Equal(t, 1, code, "the shrunk run fails: %s%s", out, errOut)
	shrunk := strings.TrimSuffix(file, ".schedule") + ".shrunk.schedule"
	assert.Contains(t, out, "shrunk schedule: "+shrunk)
	ssch, err := readSchedule(shrunk)
	require.NoError(t, err)
	bound, _ = ssch.Get("explored")
	assert.Equal(t, "within 2 departures", bound)

	// The same failure, whatever the number of workers, and -json says
	// it all in one object.
	code, out, _ = simrun(t, append([]string{"explore", "-delays", "2", "-j", "1", "-json", "-out", dir}, asyncBug...)...)
	require.Equal(t, 1, code, out)
	var j exploreJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.True(t, j.Failed)
	assert.False(t, j.Complete)
	assert.Equal(t, 2, j.Delays)
	assert.Equal(t, 1, j.Workers)
	require.NotNil(t, j.Failure)
	assert.Equal(t, "simrun replay "+file, j.Failure.Replay)
	hash, _ := sch.Get("trace-hash")
	assert.Equal(t, hash, j.Failure.TraceHash)
	assert.Contains(t, j.Failure.Reached, "reuse-before-the-core-aborted")
}

func TestExploreOfTheFixedEngineIsCompleteOnAnyNumberOfWorkers(t *testing.T) {
	var runs []int
	for _, jobs := range []string{"1", "2", "3"} {
		code, out, errOut := simrun(t, "explore", "-scenario", "abort-reuse", "-delays", "1", "-j", jobs, "-json")
		require.Equal(t, 0, code, "%s%s", out, errOut)
		var j exploreJSON
		require.NoError(t, json.Unmarshal([]byte(out), &j), out)
		assert.True(t, j.Complete, out)
		assert.False(t, j.Failed, out)
		assert.Empty(t, j.Stopped, out)
		assert.Equal(t, "fixed", j.Engine)
		assert.Equal(t, "starve:output-handler", j.Strategy)
		runs = append(runs, j.Schedules)
	}
	assert.Equal(t, []int{184, 184, 184}, runs)
}

func TestExploreStoppedAtMaxRunsSaysItIsNotComplete(t *testing.T) {
	code, out, _ := simrun(t, "explore", "-scenario", "abort-reuse", "-legacy", "-delays", "3", "-max-runs", "50")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "stopped at -max-runs: 50 schedules")
	assert.Contains(t, out, "NOT complete")

	code, out, _ = simrun(t, "explore", "-scenario", "abort-reuse", "-legacy", "-delays", "3", "-max-runs", "50", "-json")
	require.Equal(t, 0, code, out)
	var j exploreJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.Equal(t, 50, j.Schedules)
	assert.False(t, j.Complete)
	assert.Equal(t, "max-runs", j.Stopped)

	// A budget of wall time stops a walk too, far short of the 1,100,372
	// schedules of this one, and a failure found within it is reported.
	code, out, _ = simrun(t, "explore", "-scenario", "abort-reuse", "-delays", "3", "-for", "300ms", "-json")
	require.Equal(t, 0, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.False(t, j.Complete)
	assert.Equal(t, "for", j.Stopped)
	assert.Positive(t, j.Schedules)
	assert.Less(t, j.Schedules, 1_100_372)
	code, out, _ = simrun(t, "explore", "-scenario", "abort-reuse", "-delays", "3", "-for", "300ms")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "the 300ms budget (-for) ran out: ")
	assert.Contains(t, out, "NOT complete")
	code, out, _ = simrun(t, append([]string{"explore", "-delays", "2", "-for", "10m", "-out", t.TempDir()}, asyncBug...)...)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "within 2 departures: FAIL after")
}

func TestExploreRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	code, _, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code)
	recorded := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-delays", "0"}, "-delays must be at least 1, or -1 for no bound, got 0"},
		{[]string{"-delays", "-2"}, "-delays must be at least 1, or -1 for no bound, got -2"},
		{[]string{"-max-runs", "-1"}, "-max-runs must be ≥ 0 (0 means no bound), got -1"},
		{[]string{"-for", "-1s"}, "-for must be ≥ 0 (0 means no budget), got -1s"},
		{[]string{"-j", "0"}, "-j must be from 1 to 1024, got 0"},
		{[]string{"-strategy", "pct:3:100"}, "Explore cannot walk pct:3:100: its draws are priorities of 2^30 answers each"},
		{[]string{"-legacy", "-strategy", "replay:" + recorded}, "a replay draws nothing; explore random, chaos or starve:PREFIX, or run simrun replay"},
		{[]string{"-scenario", "nope"}, `unknown scenario "nope"`},
	} {
		args := append([]string{"explore", "-scenario", "abort-reuse"}, tc.args...)
		code, out, errOut := simrun(t, args...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, out)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}

// TestExploreWalksEachSeedUntilOneFails: -seeds walks one seed after
// another, each as -seed walks it alone, and stops at the first that
// fails: swarm draws each seed's workload, and with a planted bug in the
// prefix cache seed 5 is the first to fail, in its calm schedule.
func TestExploreWalksEachSeedUntilOneFails(t *testing.T) {
	total := 0
	for _, seed := range []string{"1", "2", "3"} {
		code, out, _ := simrun(t, "explore", "-scenario", "swarm", "-seed", seed, "-delays", "1", "-json")
		require.Equal(t, 0, code, out)
		var j exploreJSON
		require.NoError(t, json.Unmarshal([]byte(out), &j), out)
		assert.Equal(t, 1, j.Walks)
		total += j.Schedules
	}
	code, out, _ := simrun(t, "explore", "-scenario", "swarm", "-seeds", "1-3", "-delays", "1", "-json")
	require.Equal(t, 0, code, out)
	var j exploreJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.Equal(t, "1-3", j.Seeds)
	assert.Equal(t, 3, j.Walks)
	assert.Equal(t, total, j.Schedules, "the walks of the seeds one by one")
	assert.True(t, j.Complete)

	dir := t.TempDir()
	bug := []string{"explore", "-scenario", "swarm", "-seeds", "1-60", "-delays", "1", "-failpoint", "core/kv-keep-evicted-hash=return", "-config", "prefix-caching=on", "-out", dir}
	code, out, errOut := simrun(t, bug...)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, out, "swarm seeds 1-60, strategy chaos, fixed engine, config prefix-caching=on, failpoints core/kv-keep-evicted-hash=return, within 1 departure: FAIL after 5 seeds, ")
	assert.Contains(t, out, "seed 5's failing schedule is the calm one itself: FAIL after")
	files, err := filepath.Glob(filepath.Join(dir, "swarm-fixed-*-seed5-explored.schedule"))
	require.NoError(t, err)
	assert.Len(t, files, 1)

	code, out, _ = simrun(t, append(bug, "-json")...)
	require.Equal(t, 1, code, out)
	j = exploreJSON{}
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.Equal(t, uint64(5), j.Seed)
	assert.Equal(t, 5, j.Walks)
	assert.True(t, j.Failed)

	code, _, errOut = simrun(t, "explore", "-scenario", "swarm", "-seed", "2", "-seeds", "1-3")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "-seed and -seeds do not go together")
}

// TestExploreReportsAHungScheduleAndRunRunsItAgain: a schedule of the walk
// that never ends is reported as run reports a hang, with the stuck task,
// a stacks file, and the draws that run -draws follows to run it again.
func TestExploreReportsAHungScheduleAndRunRunsItAgain(t *testing.T) {
	armHang(t)
	dir := t.TempDir()
	code, out, errOut := simrun(t, "explore", "-scenario", "test-hang", "-seed", "60", "-delays", "1", "-seed-timeout", "200ms", "-out", dir)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, out, "test-hang seed 60, strategy random, fixed engine, within 1 departure: HANG after ")
	assert.Contains(t, out, "hang: seed 60 (strategy random, draws ")
	assert.Contains(t, out, "a task runs in github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding without reaching a scheduling point")
	stacks := filepath.Join(dir, "test-hang-fixed-seed60-explored.stacks.txt")
	assert.Contains(t, out, "every goroutine's stack: "+stacks)
	assert.FileExists(t, stacks)
	require.NoError(t, os.Remove(stacks)) // run -draws writes its own: an explored schedule's
	_, cmd, ok := strings.Cut(out, "run again: simrun ")
	require.True(t, ok, out)
	cmd, _, _ = strings.Cut(cmd, "\n")
	args := strings.Fields(cmd)
	require.Equal(t, []string{"run", "-scenario", "test-hang", "-seed", "60", "-strategy", "random", "-draws"}, args[:len(args)-1])
	draws := args[len(args)-1]

	code, again, _ := simrun(t, append(args, "-seed-timeout", "200ms", "-out", dir)...)
	require.Equal(t, 1, code, again)
	assert.Contains(t, again, "test-hang seed 60, strategy random, draws "+draws+", fixed engine: HANG")
	assert.Contains(t, again, "hang: seed 60 (draws "+draws+") had not ended")
	assert.Contains(t, again, "a task runs in github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding without reaching a scheduling point")
	assert.Contains(t, again, "run again: simrun "+cmd)
	assert.FileExists(t, stacks, "named as an explored schedule's, not the seed's own")
	code, calm, _ := simrun(t, "run", "-scenario", "test-hang", "-seed", "60", "-strategy", "random", "-draws", "calm", "-seed-timeout", "200ms", "-out", dir)
	assert.Equal(t, 0, code, "the calm schedule passes: %s", calm)

	code, out, _ = simrun(t, "explore", "-scenario", "test-hang", "-seed", "60", "-delays", "1", "-seed-timeout", "200ms", "-out", dir, "-json")
	require.Equal(t, 1, code, out)
	var j exploreJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	assert.True(t, j.Failed)
	assert.False(t, j.Complete)
	require.NotNil(t, j.Failure)
	assert.Equal(t, "hang in github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding", j.Failure.Signature)
	assert.Equal(t, "simrun "+cmd, j.Failure.Replay)
	assert.Equal(t, draws, j.Failure.Draws)
}

// TestRunFollowsTheDrawsOfAnExploredFailure: the draws of the schedule
// explore found failing run it again, to the same trace hash as the
// schedule file it wrote; what run -draws cannot follow is refused.
func TestRunFollowsTheDrawsOfAnExploredFailure(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := simrun(t, append([]string{"explore", "-delays", "2", "-j", "1", "-json", "-out", dir}, asyncBug...)...)
	require.Equal(t, 1, code, out)
	var j exploreJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j), out)
	require.NotNil(t, j.Failure)
	draws := j.Failure.Draws
	require.NotEmpty(t, draws, "explore says the failing schedule's draws")

	code, out, _ = simrun(t, append([]string{"run", "-seed", "1", "-draws", draws, "-json", "-out", dir}, asyncBug...)...)
	require.Equal(t, 1, code, out)
	var r runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, j.Failure.TraceHash, r.TraceHash, "draws %s", draws)
	assert.Equal(t, draws, r.Draws)
	assert.True(t, strings.HasSuffix(r.Schedule, "-seed1-explored.schedule"), "an explored schedule's file, not the seed's: %s", r.Schedule)
	code, replayed, _ := simrun(t, "replay", r.Schedule)
	require.Equal(t, 1, code, replayed)
	assert.Contains(t, replayed, "(the same as recorded)")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-draws", "3"}, `-draws: draws "3": "3" is not N:V`},
		{[]string{"-draws", "2:0"}, "the answer must be a whole number ≥ 1"},
		{[]string{"-draws", "2:1", "-check-determinism"}, "-draws and -check-determinism do not go together"},
		{[]string{"-draws", "2:1", "-strategy", "pct:3:100"}, "-draws: cannot walk pct:3:100"},
	} {
		code, out, errOut := simrun(t, append([]string{"run", "-scenario", "abort-reuse"}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, out)
		assert.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}

// TestExploreShardsMergeIntoTheWholeWalk: explore -shard I/N jobs split a
// walk, and merge adds their -json up to it: the same schedules, complete
// only with every shard, and the whole walk's failure, whichever shard
// found it; shards of different walks are refused.
func TestExploreShardsMergeIntoTheWholeWalk(t *testing.T) {
	dir := t.TempDir()
	explore := func(file string, args ...string) int {
		code, out, errOut := simrun(t, append([]string{"explore", "-json", "-quiet", "-out", dir}, args...)...)
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(out), 0o644), errOut)
		return code
	}
	path := func(files ...string) []string {
		for i, f := range files {
			files[i] = filepath.Join(dir, f)
		}
		return files
	}
	fixed := []string{"-scenario", "abort-reuse", "-delays", "2"}
	require.Equal(t, 0, explore("whole.json", fixed...))
	var whole exploreJSON
	data, err := os.ReadFile(filepath.Join(dir, "whole.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &whole))
	for i := range 3 {
		shard := []string{"-shard", []string{"1/3", "2/3", "3/3"}[i], "-j", []string{"1", "2", "1"}[i]}
		require.Equal(t, 0, explore(fmt.Sprintf("s%d.json", i+1), append(fixed, shard...)...))
	}
	code, out, _ := simrun(t, append([]string{"merge", "-json"}, path("s1.json", "s2.json", "s3.json")...)...)
	require.Equal(t, 0, code, out)
	var m exploreMerge
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	assert.True(t, m.Complete)
	assert.Equal(t, whole.Schedules, m.Schedules, "the shards run the whole walk's schedules between them")
	assert.Equal(t, whole.DeepestDraws, m.DeepestDraws)
	assert.Equal(t, []string{"1/3", "2/3", "3/3"}, m.Shards)

	code, out, _ = simrun(t, append([]string{"merge"}, path("s1.json", "s3.json")...)...)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "within 2 departures: none failed, NOT complete: ")
	assert.Contains(t, out, "missing shards: 2/3 — their schedules did not run")

	for i, shard := range []string{"1/2", "2/2"} {
		require.Equal(t, 1, explore(fmt.Sprintf("f%d.json", i+1), append([]string{"-delays", "2", "-shard", shard}, asyncBug...)...))
	}
	code, out, _ = simrun(t, append([]string{"merge", "-json"}, path("f1.json", "f2.json")...)...)
	require.Equal(t, 1, code, out)
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	assert.False(t, m.Complete)
	require.NotNil(t, m.Failure)
	assert.Equal(t, "24:2,25:5", m.Failure.Draws, "the whole walk's failure, the first in depth-first order")
	schedule := strings.TrimPrefix(m.Failure.Replay, "simrun replay ")
	assert.Contains(t, schedule, "-seed1-explored-shard"+strings.Replace(m.FailedShard, "/", "of", 1)+".schedule", "each shard's file its own")
	assert.FileExists(t, schedule)

	require.Equal(t, 0, explore("d1.json", "-scenario", "abort-reuse", "-delays", "1", "-shard", "2/3"))
	for _, tc := range []struct {
		files []string
		want  string
	}{
		{path("s1.json", "d1.json"), "delays 1 against 2; shards must come from one walk"},
		{path("s1.json", "s1.json"), "are both shard 1/3"},
		{path("s1.json", "f1.json"), "cannot merge"},
		{path("whole.json"), "is a whole walk, not an explore -shard I/N"},
	} {
		code, _, errOut := simrun(t, append([]string{"merge"}, tc.files...)...)
		assert.Equal(t, 2, code, "%v", tc.files)
		assert.Contains(t, errOut, tc.want, "%v", tc.files)
	}
	for _, shard := range []string{"0/3", "4/3", "x"} {
		code, _, errOut := simrun(t, "explore", "-scenario", "abort-reuse", "-shard", shard)
		assert.Equal(t, 2, code, shard)
		assert.Contains(t, errOut, "-shard", shard)
	}
}
