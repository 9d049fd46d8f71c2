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
