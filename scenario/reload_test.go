package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
)

// TestLiveReloadPassesOnTheFixedEngine: the engine as it is passes
// live-reload under chaos, its default, and under a starved output
// handler. (That the runs reach a reset with a step in flight is
// TestEveryScenarioReachesItsTargets'.)
func TestLiveReloadPassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.LiveReload, "chaos", "starve:output-handler")
}

// TestLiveReloadCatchesAStaleTokenKept plants core/reset-keeps-stale-token:
// a reset clears the preempted requests' placeholders but keeps the tokens
// their steps in flight sampled before it. Each lands on top of the
// recomputed sequence, which samples that position again: ModelTokens
// catches the token twice (in 48% of the first 4,000 seeds, nearly every
// run with async scheduling); a stale token that finds no placeholder
// left kills the core on vLLM's assertion instead, a failure that names
// no property.
func TestLiveReloadCatchesAStaleTokenKept(t *testing.T) {
	n := assertCaughtAsOrByDeath(t, scenario.LiveReload, "core/reset-keeps-stale-token=return", props.ModelTokens)
	assert.Greater(t, n, int(pauseSeeds())/4, "the planted bug was caught on too few seeds")
}
