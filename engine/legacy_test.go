package engine_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// TestLegacyRoutingHasTheFoundingRace: the legacy engine, routing by
// external id, fails the founding test under a starved output handler; the
// fixed engine never does; and the legacy engine passes when the caller
// waits for the core first.
func TestLegacyRoutingHasTheFoundingRace(t *testing.T) {
	count := func(s *scenario.Scenario, legacy bool) (fails int, first error) {
		for seed := uint64(0); seed < 50; seed++ {
			prog, out := s.Program(scenario.Options{Legacy: legacy, Seed: seed})
			res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Starve("output-handler")}, prog)
			if err := out.Err(res.Err); err != nil {
				fails++
				if first == nil {
					first = err
				}
			}
		}
		return fails, first
	}
	fails, first := count(scenario.AbortReuse, true)
	require.Positive(t, fails, "the legacy engine must show the race")
	assert.ErrorContains(t, first, "no-cross-incarnation-delivery")
	fails, first = count(scenario.AbortReuse, false)
	assert.Zero(t, fails, "the fixed engine: %v", first)
	fails, first = count(scenario.AbortReuseWaitIdle, true)
	assert.Zero(t, fails, "WaitIdle before reuse makes even the legacy engine safe: %v", first)
}
