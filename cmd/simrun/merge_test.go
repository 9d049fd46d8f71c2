package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sweepShards runs sweep -json once over seeds and once per shard, and
// returns the whole and the shard files.
func sweepShards(t *testing.T, dir, seeds string, engineFlags ...string) (sweepResult, []string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	args := append([]string{"sweep", "-scenario", "abort-reuse", "-seeds", seeds, "-json", "-j", "2", "-out", dir}, engineFlags...)
	_, out, errOut := simrun(t, args...)
	var whole sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &whole), errOut)
	var files []string
	for i, shard := range []string{"1/3", "2/3", "3/3"} {
		_, out, errOut := simrun(t, append(args, "-shard", shard)...)
		file := filepath.Join(dir, "shard"+string(rune('1'+i))+".json")
		require.NoError(t, os.WriteFile(file, []byte(out), 0o644), errOut)
		files = append(files, file)
	}
	return whole, files
}

func TestMergeOfThreeShardsEqualsOneSweep(t *testing.T) {
	dir := t.TempDir()
	whole, files := sweepShards(t, dir, "1-150", "-legacy")
	require.Positive(t, whole.Failures)

	code, out, errOut := simrun(t, append([]string{"merge", "-json"}, files...)...)
	require.Equal(t, 1, code, errOut)
	var m mergeResult
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, whole.Scenario, m.Scenario)
	assert.Equal(t, whole.Strategy, m.Strategy)
	assert.Equal(t, whole.Engine, m.Engine)
	assert.Equal(t, "1-150", m.SeedRange)
	assert.Equal(t, whole.Seeds, m.Seeds)
	assert.Equal(t, whole.Failures, m.Failures)
	assert.Equal(t, whole.Rate, m.Rate)
	assert.Equal(t, whole.CI95, m.CI95)
	assert.Equal(t, whole.FailingSeeds, m.FailingSeeds)
	assert.Equal(t, whole.FirstFailure, m.FirstFailure)
	assert.Equal(t, whole.Error, m.Error)
	assert.Equal(t, whole.Steps, m.Steps)
	assert.Equal(t, whole.Determinism, m.Determinism)
	assert.Equal(t, whole.Targets, m.Targets)
	assert.Equal(t, whole.Reached, m.Reached, "the seeds that reached each situation add up")
	assert.Equal(t, whole.ReachedFirst, m.ReachedFirst, "the first seed to reach each is the lowest of the shards'")
	require.Len(t, m.Modes, len(whole.Modes))
	for i, w := range whole.Modes {
		got := m.Modes[i]
		assert.Equal(t, w.Signature, got.Signature)
		assert.Equal(t, w.Count, got.Count)
		assert.Equal(t, w.FirstSeed, got.FirstSeed)
		assert.Equal(t, w.CI95, got.CI95)
		assert.Equal(t, w.Replay, got.Replay)
	}
	assert.Equal(t, []string{"1/3", "2/3", "3/3"}, m.Shards)
	assert.Empty(t, m.MissingShards)
	assert.Positive(t, m.SeedsPerSecSum)

	code, out, _ = simrun(t, append([]string{"merge"}, files...)...)
	require.Equal(t, 1, code)
	assert.Contains(t, out, "merge of 3 shard(s): 1/3, 2/3, 3/3")
	assert.Contains(t, out, "seeds 1-150")
	assert.Contains(t, out, "seeds/s summed over shards")

	code, out, _ = simrun(t, "merge", files[0], files[2])
	require.Equal(t, 1, code)
	assert.Contains(t, out, "missing shards: 2/3")
	assert.Contains(t, out, "seeds 1-50,101-150")
}

func TestMergeOfPassingShardsIsExitZero(t *testing.T) {
	_, files := sweepShards(t, t.TempDir(), "1-60")
	code, out, _ := simrun(t, append([]string{"merge"}, files...)...)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "failures: 0/60 = 0% [≤ 5.0%, rule of three]")
	_, out, _ = simrun(t, append([]string{"merge", "-json"}, files...)...)
	var m mergeResult
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, 0.05, m.UpperBound, "3/60, as the text says")
}

func TestMergeKeepsTruncatedListsHonest(t *testing.T) {
	a := sweepResult{Scenario: "s", Strategy: "x", Engine: "fixed", SeedRange: "1-10", Seeds: 10, Failures: 4, FailingSeeds: []uint64{2, 3}, Truncated: true, Shard: "1/2"}
	b := sweepResult{Scenario: "s", Strategy: "x", Engine: "fixed", SeedRange: "11-20", Seeds: 10, Failures: 1, FailingSeeds: []uint64{12}, Shard: "2/2"}
	m, err := mergeSweeps([]sweepResult{b, a}, []string{"b.json", "a.json"})
	require.NoError(t, err)
	assert.Equal(t, []uint64{2, 3}, m.FailingSeeds, "a's list stops at 3: seeds above it may be missing")
	assert.True(t, m.Truncated)
	assert.Equal(t, uint64(5), m.Failures)
	assert.Equal(t, "1-20", m.SeedRange)
}

func TestMergeBadInputIsExitTwo(t *testing.T) {
	dir := t.TempDir()
	_, legacy := sweepShards(t, filepath.Join(dir, "l"), "1-30", "-legacy")
	_, fixed := sweepShards(t, filepath.Join(dir, "f"), "1-30")
	truncated := filepath.Join(dir, "truncated.json")
	data, err := os.ReadFile(legacy[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(truncated, data[:len(data)/2], 0o644))
	other := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"hello": "world"}`), 0o644))
	cases := []struct {
		args []string
		want string
	}{
		{nil, "want the JSON files of the shards to merge"},
		{[]string{"/no/such.json"}, "cannot read a shard"},
		{[]string{truncated}, "is not the output of simrun sweep -json: unexpected EOF"},
		{[]string{other}, "is not the output of simrun sweep -json: it has no scenario"},
		{[]string{legacy[0], fixed[1]}, "it has engine fixed, not legacy; shards must come from one sweep — the same scenario, strategy, engine, steps-max, failpoints, config and targets"},
		{[]string{legacy[0], legacy[1], legacy[0]}, "overlapping shards: " + legacy[0] + " and " + legacy[0] + " are both shard 1/3 of seeds 1-10"},
	}
	for _, c := range cases {
		code, _, errOut := simrun(t, append([]string{"merge"}, c.args...)...)
		assert.Equal(t, 2, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}

	// Shards of different splits that share seeds.
	var r sweepResult
	require.NoError(t, json.Unmarshal(data, &r))
	r.Shard, r.SeedRange, r.Seeds = "1/2", "1-15", 15
	wide := filepath.Join(dir, "wide.json")
	out, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(wide, out, 0o644))
	code, _, errOut := simrun(t, "merge", legacy[1], wide)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "overlapping shards: "+legacy[1]+" (11-20) and "+wide+" (1-15) both ran seed 11")
}

// shardJSON runs sweep -json over one shard and writes its output to a file.
func shardJSON(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	_, out, errOut := simrun(t, append([]string{"sweep", "-scenario", "abort-reuse", "-json", "-j", "2", "-out", dir}, args...)...)
	file := filepath.Join(dir, name+".json")
	require.NoError(t, os.WriteFile(file, []byte(out), 0o644), errOut)
	return file
}

func TestMergeKeepsFailpointsAndStepsMax(t *testing.T) {
	dir := t.TempDir()
	fp := []string{"-failpoint", "core/model-panic=panic", "-steps-max", "100000"}
	a := shardJSON(t, dir, "a", append([]string{"-seeds", "1-20", "-shard", "1/2"}, fp...)...)
	b := shardJSON(t, dir, "b", append([]string{"-seeds", "1-20", "-shard", "2/2"}, fp...)...)
	code, out, errOut := simrun(t, "merge", a, b)
	require.Equal(t, 1, code, errOut)
	runCmd := between(out, "or run: ", "\n")
	assert.Equal(t, "simrun run -scenario abort-reuse -seed 1 -strategy starve:output-handler -steps-max 100000 -failpoint core/model-panic=panic", runCmd)
	argv, err := splitCommand(runCmd)
	require.NoError(t, err)
	code, out, _ = simrun(t, append(argv[1:], "-out", dir)...)
	assert.Equal(t, 1, code, "the run merge prints fails as the shards did: %s", out)

	// Shards of sweeps with other failpoints or another step limit are
	// not one sweep.
	noFault := shardJSON(t, dir, "nofault", "-seeds", "1-20", "-shard", "2/2", "-steps-max", "100000")
	otherLimit := shardJSON(t, dir, "limit", append([]string{"-seeds", "1-20", "-shard", "2/2"}, fp[:2]...)...)
	for _, c := range []struct{ file, want string }{
		{noFault, "cannot merge " + noFault + " with " + a + ": it has failpoints none, not core/model-panic=panic; shards must come from one sweep"},
		{otherLimit, "cannot merge " + otherLimit + " with " + a + ": it has steps-max 0 (the default), not 100000; shards must come from one sweep"},
	} {
		code, _, errOut := simrun(t, "merge", a, c.file)
		assert.Equal(t, 2, code, errOut)
		assert.Contains(t, errOut, c.want)
	}
}

// TestMergeShardsOfDifferentListsWithTheSameIndex: shard 1/2 of 1-100 and
// shard 1/2 of 101-200 share a name but no seed.
func TestMergeShardsOfDifferentListsWithTheSameIndex(t *testing.T) {
	dir := t.TempDir()
	a := shardJSON(t, dir, "a", "-legacy", "-seeds", "1-100", "-shard", "1/2")
	b := shardJSON(t, dir, "b", "-legacy", "-seeds", "101-200", "-shard", "1/2")
	code, out, errOut := simrun(t, "merge", "-json", a, b)
	require.Equal(t, 1, code, errOut)
	var m mergeResult
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, "1-50,101-150", m.SeedRange)
	assert.Equal(t, uint64(100), m.Seeds)

	code, _, errOut = simrun(t, "merge", a, a)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "overlapping shards: "+a+" and "+a+" are both shard 1/2 of seeds 1-50")
}

// TestMergeNamesShardsOfTheSameNameApart: shard 1/2 of one seed list and
// shard 1/2 of another do not overlap and merge, and the listing says
// which is which instead of "1/2, 1/2".
func TestMergeNamesShardsOfTheSameNameApart(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, seeds := range []string{"1-20", "101-120"} {
		_, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", seeds, "-shard", "1/2", "-json", "-out", dir)
		file := filepath.Join(dir, string(rune('a'+i))+".json")
		require.NoError(t, os.WriteFile(file, []byte(out), 0o644), errOut)
		files = append(files, file)
	}
	code, out, errOut := simrun(t, append([]string{"merge"}, files...)...)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "merge of 2 shard(s): 1/2 (seeds 1-10), 1/2 (seeds 101-110)\n")
}

func TestMergeOfOneShardOfManyListsAFewMissingAndCountsTheRest(t *testing.T) {
	// A sweep split a million ways, and one shard given: the merge names
	// the first missing shards and counts the others, where it used to
	// build a name for each of them (and, split 10^12 ways, never ended).
	missing, count := missingShards([]string{"3/1000000"})
	assert.Len(t, missing, missingShardsMax)
	assert.Equal(t, []string{"1/1000000", "2/1000000", "4/1000000"}, missing[:3])
	assert.Equal(t, uint64(999999), count)

	missing, count = missingShards([]string{"1/3", "3/3"})
	assert.Equal(t, []string{"2/3"}, missing)
	assert.Equal(t, uint64(1), count)

	dir := t.TempDir()
	file := filepath.Join(dir, "last.json")
	code, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-10", "-shard", "1000000000000/1000000000000",
		"-json", "-quiet", "-out", dir)
	require.Equal(t, 0, code, errOut)
	require.NoError(t, os.WriteFile(file, []byte(out), 0o644))
	code, out, errOut = simrun(t, "merge", file)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "missing shards: 1/1000000000000, 2/1000000000000, ")
	assert.Contains(t, out, " and 999999999899 more — the result covers only the seeds given")
	code, out, _ = simrun(t, "merge", "-json", file)
	require.Equal(t, 0, code)
	var m mergeResult
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Len(t, m.MissingShards, missingShardsMax)
	assert.Equal(t, uint64(999999999999), m.MissingCount)
}
