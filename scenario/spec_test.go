package scenario_test

import (
	"testing"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
)

// TestSwarmCatchesTokensPastAStopString plants vLLM's behaviour before its
// #47616, engine/keeps-tokens-past-stop-string: in the runs where swarm
// draws draft tokens (a sixth), a stop string that completes inside a
// step's several tokens leaves the later ones in the caller's tokens,
// which its text does not show (1.9% of the first 20,000 seeds, seed 31
// first), and only deltas-concatenate sees it.
func TestSwarmCatchesTokensPastAStopString(t *testing.T) {
	assertCaughtOnlyAs(t, scenario.Swarm, "chaos", withFailpoint("engine/keeps-tokens-past-stop-string=return"), props.DeltasConcatenate)
}

// TestSwarmCatchesTokensTakenAtOnce plants core/spec-takes-tokens-at-once:
// a step's kept tokens appended together and only the last checked for a
// stop, so that a request goes on past its stop token or its MaxTokens.
// ends-where-the-model-stops catches it (7.9% of swarm's first 20,000
// seeds; 11.2% in all, a reused id's request by reused-id-finishes-normally
// first, a rare one by deltas-concatenate; without that property, 7.1%).
func TestSwarmCatchesTokensTakenAtOnce(t *testing.T) {
	assertCaughtOnlyAs(t, scenario.Swarm, "chaos", withFailpoint("core/spec-takes-tokens-at-once=return"), props.EndsWhereTheModelStops, props.ReuseFinishesNormally, props.DeltasConcatenate)
}

// TestTheStoryTellsTokensCutAtAStop: in swarm's seed 6, which draws draft
// tokens, a step gives c more tokens than its MaxTokens leaves, and the
// story says the core dropped them there.
func TestTheStoryTellsTokensCutAtAStop(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.Swarm, 6),
		"drops 3 token(s) of the step's several for c#3, past its length limit: it ends there",
		"reaches tokens-cut-at-a-stop")
}
