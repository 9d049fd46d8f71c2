package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
)

func TestShrinkReducesPreemptionsAndTheShrunkFileReplaysTheFailure(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir, "-json")
	require.Equal(t, 1, code, "a shrunk failure exits 1: %s", errOut)
	var j shrinkJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	require.NotNil(t, j.Before)
	require.NotNil(t, j.After)
	assert.Less(t, j.After.Preemptions, j.Before.Preemptions)
	assert.LessOrEqual(t, j.After.Waits, j.Before.Waits)
	assert.Less(t, j.After.Decisions, j.Before.Decisions)
	assert.LessOrEqual(t, j.Runs, sim.DefaultShrinkRunsMax)
	assert.Equal(t, "no-cross-incarnation-delivery (in output-handler after frontend.lock)", j.Signature)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.shrunk.schedule")
	assert.Equal(t, file, j.Schedule)
	assert.Equal(t, "simrun replay "+file, j.Replay)
	assert.Contains(t, errOut, "run ", "progress goes to stderr")

	data, err := os.ReadFile(file)
	require.NoError(t, err)
	sch, err := sim.ParseSchedule(string(data))
	require.NoError(t, err)
	from, _ := sch.Get("shrunk-from")
	assert.Equal(t, "simrun run -scenario abort-reuse -seed 1 -strategy starve:output-handler -legacy", from)
	assert.Equal(t, j.After.Decisions, sch.Len())

	code, out, _ = simrun(t, "replay", file)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "trace hash "+j.TraceHash+" (the same as recorded)")
	assert.Contains(t, out, firstLine(j.Error))
}

func TestShrinkOfARecordedScheduleFileTellsTheStory(t *testing.T) {
	dir := t.TempDir()
	code, _, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "4", "-legacy", "-out", dir)
	require.Equal(t, 1, code)
	recorded := filepath.Join(dir, "abort-reuse-legacy-seed4.schedule")
	tr := filepath.Join(dir, "shrunk.jsonl")
	page := filepath.Join(dir, "shrunk.html")
	code, out, _ := simrun(t, "shrink", "-out", dir, "-story", "-trace", tr, "-html", page, "-quiet", "-tries", "300", recorded)
	require.Equal(t, 1, code, out)
	shrunk := filepath.Join(dir, "abort-reuse-legacy-seed4.shrunk.schedule")
	for _, want := range []string{"before: ", "after: ", "preemptions", "shrunk schedule: " + shrunk,
		"replay: simrun replay ", "withholds", "(guided)", "adds abort-a#4", "STALE: a previous incarnation's token",
		"timeline: " + page} {
		assert.Contains(t, out, want)
	}
	info, err := os.Stat(tr)
	require.NoError(t, err)
	assert.Positive(t, info.Size())
	// The page draws the shrunk run, with the guided strategy's notes, and
	// offers the shrunk schedule's replay.
	html, err := os.ReadFile(page)
	require.NoError(t, err)
	for _, want := range []string{`id="lane-output-handler"`, `id="stale-flow-`, "simrun replay " + shrunk} {
		assert.Contains(t, string(html), want)
	}
	data, err := os.ReadFile(filepath.Join(dir, "abort-reuse-legacy-seed4.shrunk.schedule"))
	require.NoError(t, err)
	assert.Contains(t, string(data), `meta "shrunk-from" "`+recorded+`"`)
}

func TestShrinkStopsAtTries(t *testing.T) {
	code, out, _ := simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", t.TempDir(), "-tries", "4", "-quiet")
	require.Equal(t, 1, code)
	assert.Contains(t, out, "(4 runs)")
	assert.Contains(t, out, "stopped at -tries 4")
}

func TestShrinkOfAPassingSeed(t *testing.T) {
	code, out, _ := simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "1", "-out", t.TempDir())
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "no failure to shrink")
}

func TestShrinkBadInput(t *testing.T) {
	dir := t.TempDir()
	code, _, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	// Pretend the code changed: the schedule now belongs to another scenario.
	stale := filepath.Join(dir, "stale.schedule")
	require.NoError(t, os.WriteFile(stale, []byte(strings.Replace(string(data), `meta "scenario" "abort-reuse"`, `meta "scenario" "swarm"`, 1)), 0o644))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"shrink", stale}, "no longer matches the code"},
		{[]string{"shrink", "-scenario", "abort-reuse", file}, "-scenario does not go with a schedule file"},
		{[]string{"shrink", "-failpoint", "core/stall-mid-step=return(400)", file}, "-failpoint does not go with a schedule file"},
		{[]string{"shrink", "/no/such.schedule"}, "cannot read the schedule"},
		{[]string{"shrink", file, "other"}, `unexpected argument "other"`},
		{[]string{"shrink", "-scenario", "abort-reuse", "-tries", "0"}, "-tries must be ≥ 1"},
		{[]string{"shrink", "-scenario", "abort-reuse", "-deadline", "0s"}, "-deadline must be a positive duration"},
		{[]string{"shrink"}, "-scenario is required"},
	}
	for _, c := range cases {
		code, _, errOut := simrun(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
}

// TestShrinkToReachASituation: -reach shrinks a passing run of the fixed
// engine to the simplest interleaving that still opens the founding race's
// window and still passes; the file replays it, and the story shows the
// window opening. A failing run shrinks to one that still fails the same
// way and still reaches it.
func TestShrinkToReachASituation(t *testing.T) {
	target := props.StaleFrameAfterReuse.String()
	dir := t.TempDir()
	code, out, errOut := simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "1", "-reach", target, "-out", dir, "-json", "-quiet")
	require.Equal(t, 0, code, "a shrunk run that passes exits 0: %s", errOut)
	var j shrinkJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.False(t, j.Failed)
	assert.Empty(t, j.Signature)
	assert.Equal(t, target, j.Reaches)
	assert.Less(t, j.After.Preemptions, j.Before.Preemptions)
	file := filepath.Join(dir, "abort-reuse-fixed-seed1.reach-"+target+".schedule")
	assert.Equal(t, file, j.Schedule)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), `meta "reaches" "`+target+`"`)

	code, out, _ = simrun(t, "replay", "-story", file)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "trace hash "+j.TraceHash+" (the same as recorded)")
	assert.Contains(t, lineWith(t, out, "  reached: "), target)
	assert.Contains(t, out, "reaches "+target+": ")

	code, out, _ = simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-reach", target, "-out", dir, "-quiet")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "legacy engine: reaches "+target+", FAIL, no-cross-incarnation-delivery")
	assert.Contains(t, out, "property no-cross-incarnation-delivery violated")
}

func TestShrinkToReachWhatTheRunDidNotReach(t *testing.T) {
	code, out, _ := simrun(t, "shrink", "-scenario", "abort-reuse-wait-idle", "-seed", "1", "-reach", props.StaleFrameAfterReuse.String(), "-out", t.TempDir(), "-quiet")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, ": ok after ")
	assert.Contains(t, out, "it did not reach stale-frame-after-reuse, nothing to shrink")

	// A failing run that did not reach the situation is still a failure,
	// in text and in JSON alike.
	for _, format := range [][]string{nil, {"-json"}} {
		code, out, _ = simrun(t, append([]string{"shrink", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-reach", "preempted", "-out", t.TempDir(), "-quiet"}, format...)...)
		assert.Equal(t, 1, code, out)
	}

	code, _, errOut := simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "1", "-reach", "stale", "-out", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `-reach: no situation "stale"`)
}
