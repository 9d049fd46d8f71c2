package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// TestSwarmCatchesTokensPastAStopString plants vLLM's behaviour before its
// #47616, engine/keeps-tokens-past-stop-string: in the runs where swarm
// draws draft tokens (a quarter), a stop string that completes inside a
// step's several tokens leaves the later ones in the caller's tokens,
// which its text does not show (2.9% of the first 20,000 seeds, seed 31
// first), and only deltas-concatenate sees it.
func TestSwarmCatchesTokensPastAStopString(t *testing.T) {
	assertCaughtOnlyAs(t, scenario.Swarm, "chaos", withFailpoint("engine/keeps-tokens-past-stop-string=return"), props.DeltasConcatenate)
}

// TestSwarmCatchesTokensTakenAtOnce plants core/spec-takes-tokens-at-once:
// a step's kept tokens appended together and only the last checked for a
// stop, so that a request goes on past its stop token or its MaxTokens.
// ends-where-the-model-stops catches it (11.7% of swarm's first 20,000
// seeds; 16.8% in all, a reused id's request by reused-id-finishes-normally
// first, a rare one by deltas-concatenate).
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

// TestSwarmCatchesDraftPlaceholdersThatOutliveTheirWindow plants vLLM's
// behaviour before its #46899, core/spec-placeholders-outlive-their-window:
// in the runs where swarm draws draft tokens with async scheduling, a
// request passed over by a step keeps its draft placeholders, and its next
// step gives the model drafts it does not have — the engine dies, as a
// GPU's device-side assert kills vLLM's (its #37159). Swarm's first 20,000
// seeds: 0.4% (seed 110 first); fixed, seed 110 passes, its story telling
// where the placeholders went.
func TestSwarmCatchesDraftPlaceholdersThatOutliveTheirWindow(t *testing.T) {
	const seed = 110
	prog, out := scenario.Swarm.Program(scenario.Options{Seed: seed, Failpoints: []string{"core/spec-placeholders-outlive-their-window=return"}})
	res := sim.Run(sim.Options{Seed: seed, Strategy: defaultStrategy(t, scenario.Swarm)}, prog)
	err := out.Err(res.Err)
	require.Error(t, err)
	assert.ErrorContains(t, err, "the engine died, and no failpoint kills the model")
	assert.ErrorContains(t, err, "reached the model's input: request \"0_b-00000003\" (incarnation 3) was scheduled 2 draft placeholder(s) the worker has no drafts for")

	assertToldInOrder(t, storyOf(t, scenario.Swarm, seed),
		"passes over b#5/1, which had 2 draft placeholder(s): the model holds drafts only for its last step's requests, and they go",
		"reaches draft-placeholders-dropped")
}

// TestLiveReloadCatchesADiscardThatCountsFrames plants
// core/discard-counts-frames, vLLM's behaviour that its open #49620 would
// mend: a reset marks a request's placeholders to drop, a step's token and
// drafts each, and each output that comes back drops one, so that outputs
// of the request admitted again are lost while the model goes on from
// them. live-reload draws draft tokens in a quarter of its runs, async
// scheduling in half: 12.0% of its first 2,000 seeds fail, by wrong
// tokens or, rarer, the core's death or a livelock (seeds 644, 1098 and
// 1356 reach the simulator's step limit, ten seconds each: the test
// sweeps the first 600).
func TestLiveReloadCatchesADiscardThatCountsFrames(t *testing.T) {
	assertCaughtAsOrByDeathIn(t, scenario.LiveReload, min(pauseSeeds(), 600), "core/discard-counts-frames=return", props.ModelTokens)
}

// TestLiveReloadCatchesRejectionsTakenBeforeTheDiscard plants
// core/spec-rejects-before-discard, vLLM's before its #46066: a stale
// step's rejected drafts taken off the request admitted again, its computed
// tokens and placeholders. 8.6% of live-reload's first 2,000 seeds fail,
// by wrong tokens or, rarer, the core's death when an output finds no
// placeholder left.
func TestLiveReloadCatchesRejectionsTakenBeforeTheDiscard(t *testing.T) {
	assertCaughtAsOrByDeath(t, scenario.LiveReload, "core/spec-rejects-before-discard=return", props.ModelTokens)
}
