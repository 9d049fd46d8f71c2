package scenario_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
)

// TestWeightSyncPassesOnTheFixedEngine: the engine as it is passes
// weight-sync under chaos, its default, and under a starved engine core.
// (That the runs start updates with requests held is
// TestEveryScenarioReachesItsTargets'.)
func TestWeightSyncPassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.WeightSync, "chaos", "starve:engine-core")
}

// TestWeightSyncCatchesAnUpdateThatKeepsScheduling plants vLLM's
// behaviour, core/update-keeps-scheduling: a weight update holds nothing
// back, and an update in flight (half of them) steps between its batches
// over weights half replaced (85% of the first 2,000 seeds).
func TestWeightSyncCatchesAnUpdateThatKeepsScheduling(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.WeightSync, "chaos", withFailpoint("core/update-keeps-scheduling=return"), props.UpdateRunsNothing)
	assert.Greater(t, n, int(pauseSeeds())/2, "the planted bug was caught on too few seeds")
}

// TestWeightSyncCatchesAnUpdateThatHoldsByPausing plants
// core/update-holds-by-pausing: the update's hold is the pause state. Its
// finish undoes the pause or sleep the syncer took before it, whose frozen
// requests step before the resume (PausedRunsNothing, 80% of the first
// 2,000 seeds); the trainer's resume in the middle of an update lifts it
// (UpdateRunsNothing, 9%). Nothing else fails.
func TestWeightSyncCatchesAnUpdateThatHoldsByPausing(t *testing.T) {
	counts, first := sweepFailures(t, scenario.WeightSync, "chaos", pauseSeeds(), withFailpoint("core/update-holds-by-pausing=return"))
	assert.Greater(t, counts[props.PausedRunsNothing], int(pauseSeeds())/2, "a finish that unpauses: %v", counts)
	assert.Positive(t, counts[props.UpdateRunsNothing], "a resume that lifts the hold: %v", counts)
	for p, n := range counts {
		assert.Contains(t, []string{props.PausedRunsNothing, props.UpdateRunsNothing}, p, "%d failure(s) of another kind, first seed %d", n, first[p])
	}
}

// TestWeightSyncCatchesAnUpdateWhileAsleep plants vLLM's #57853,
// core/update-while-asleep: the syncer's StartWeightUpdate before its
// WakeUp("weights") writes into the released weights instead of being
// refused (31% of the first 2,000 seeds: a colocated round, a quarter of
// them, that tries it, half of those).
func TestWeightSyncCatchesAnUpdateWhileAsleep(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.WeightSync, "chaos", withFailpoint("core/update-while-asleep=return"), props.WeightsWrittenAwake)
	assert.Greater(t, n, int(pauseSeeds())/10, "the planted bug was caught on too few seeds")
}

// TestTheStoryTellsAWeightUpdate: weight-sync's seed 6 starts an update
// with requests held, writes a batch, takes the trainer's resume in the
// middle of it and finishes it; its story tells each call in that order, and that the
// resume schedules again only once the update finished.
func TestTheStoryTellsAWeightUpdate(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.WeightSync, 6),
		"starts a weight update (call 4): no step until its finish",
		"reaches "+props.UpdateWithRequests.String(),
		"writes batch 1 of the new weights (call 5)",
		"takes resume 6: it schedules again once the weight update finishes",
		"finishes the weight update (call 7) after 1 batch(es): its hold on scheduling ends")
}

// assertToldInOrder asserts that the story told holds each line, in order.
func assertToldInOrder(t *testing.T, told string, lines ...string) {
	t.Helper()
	at := -1
	for _, line := range lines {
		i := strings.Index(told, line)
		require.Greater(t, i, at, "%q, in order:\n%s", line, told)
		at = i
	}
}
