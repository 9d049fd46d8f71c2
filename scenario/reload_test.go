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

// TestLiveReloadCatchesAResetThatClearsNothing plants
// core/reset-clears-nothing, vllm-omni's #6739: a reset reports success
// and changes nothing, after the weights changed. The model stamps KV with
// the weights it was written under, so a client running across the reset,
// or one whose prompt hits the shared system prompt cached before it,
// samples from stale KV: ModelTokens catches it, and nothing else, on
// every seed whose clients still stream at a reset — all but one in the
// first 2,000 (seed 822, whose draft tokens end its requests before the
// first reset).
func TestLiveReloadCatchesAResetThatClearsNothing(t *testing.T) {
	seeds := pauseSeeds()
	counts, first := sweepFailures(t, scenario.LiveReload, "chaos", seeds, withFailpoint("core/reset-clears-nothing=return"))
	assert.Len(t, counts, 1, "first failing seeds: %v", first)
	assert.GreaterOrEqual(t, counts[props.ModelTokens], int(seeds)-int(seeds)/500, "first failing seeds: %v", first)
}
