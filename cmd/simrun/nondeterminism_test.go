package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/task"
)

// wobbleRuns makes the wobble scenario differ from one run to the next, as
// a program reading wall time or ranging over a map would.
var wobbleRuns atomic.Uint64

// reachRuns makes the test-wobble-reach scenario reach a situation on
// every other run, on the same schedule: what the trace hash leaves out.
var reachRuns atomic.Uint64

func init() {
	scenario.Register(&scenario.Scenario{Name: "test-wobble", Summary: "a scenario no seed of which runs the same twice", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			for range 1 + wobbleRuns.Add(1)%3 {
				x.RT.Yield("wobble")
			}
			return nil
		}})
	scenario.Register(&scenario.Scenario{Name: "test-wobble-reach", Summary: "a scenario that reaches a situation on every other run", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			x.RT.Yield("steady")
			if reachRuns.Add(1)%2 == 0 {
				task.Reach(x.RT, "every-other-run")
			}
			return nil
		}})
}

// TestASweepCatchesSituationsReachedNondeterministically: the same
// schedule, the same trace hash, and a situation reached in one run of a
// seed and not in the other: the sweep's determinism check names the
// seeds, and run -check-determinism says what differed.
func TestASweepCatchesSituationsReachedNondeterministically(t *testing.T) {
	dir := t.TempDir()
	// One worker: the two runs of a seed follow each other, so that the
	// counter the scenario keeps between runs alternates within a seed.
	code, out, _ := simrun(t, "sweep", "-scenario", "test-wobble-reach", "-seeds", "1-4", "-j", "1", "-check-determinism", "100%", "-out", dir, "-quiet")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "determinism: 4 seeds run twice, 4 ran differently: [1 2 3 4]")

	code, out, _ = simrun(t, "run", "-scenario", "test-wobble-reach", "-seed", "1", "-check-determinism", "-out", dir)
	require.Equal(t, 1, code, out)
	assert.Regexp(t, `seed 1 is not deterministic: the same schedule and trace hash [0-9a-f]{16}, but the situations reached differ: (\[every-other-run\], then none|none, then \[every-other-run\])`, out)
}

// TestNondeterministicSeedsAreReproducedByRunningThemTwice: a schedule replays
// one run and cannot show that two runs differ, so the command sweep gives
// for a nondeterministic seed runs it twice again, and that command fails.
func TestNondeterministicSeedsAreReproducedByRunningThemTwice(t *testing.T) {
	dir := t.TempDir()
	code, out, _ := simrun(t, "sweep", "-scenario", "test-wobble", "-seeds", "1-6", "-check-determinism", "100%", "-out", dir, "-quiet")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "ran differently")
	m := regexp.MustCompile(`nondeterministic\n\s+first seed \d+: (simrun run .*)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	assert.True(t, strings.HasSuffix(m[1], " -check-determinism"), m[1])
	assert.NotContains(t, m[1], "simrun replay")

	args, err := splitCommand(strings.TrimPrefix(m[1], "simrun "))
	require.NoError(t, err)
	page := filepath.Join(dir, "run.html")
	code, out, _ = simrun(t, append(args, "-out", dir, "-html", page)...)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "is not deterministic")
	assert.Regexp(t, `replay: simrun run -scenario test-wobble -seed \d+ .*-check-determinism`, out)
	html, err := os.ReadFile(page)
	require.NoError(t, err)
	assert.Contains(t, string(html), "-check-determinism", "the timeline's header gives the same command")

	code, out, _ = simrun(t, append(args[:len(args)-1], "-out", dir)...) // without -check-determinism
	assert.Equal(t, 0, code, "one run alone passes: %s", out)
}
