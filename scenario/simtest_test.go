package scenario_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/sim/simtest"
	"github.com/llmdst/llmdst/task"
)

// foundingProgram is abort-reuse as a program of one's own would be
// written for simtest: its workload drawn from the run's seed.
func foundingProgram(legacy bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		seed, _ := sim.Seed(rt)
		program, _ := scenario.AbortReuse.Program(scenario.Options{Legacy: legacy, Seed: seed})
		return program(rt)
	}
}

// TestSimtestFindsTheFoundingRaceAndProvesItsFix: pointed at the founding
// race, simtest's defaults (every strategy, the starving of each task the
// program starts) find the legacy engine's stale frame, shrunk; over the
// same seeds the fixed engine passes having opened the race's window.
func TestSimtestFindsTheFoundingRaceAndProvesItsFix(t *testing.T) {
	window := props.StaleFrameAfterReuse.String()
	cfg := simtest.Config{Dir: t.TempDir(), OutDir: t.TempDir(), Seeds: 300, Targets: []string{window},
		Highlight: scenario.IsStaleDelivery}

	sum, err := simtest.Run("TestFoundingRace", cfg, foundingProgram(true))
	require.Error(t, err)
	f := sum.Failure
	require.NotNil(t, f)
	assert.Contains(t, sum.Strategies, "starve:output-handler", "the task the race needs starved is one of the defaults")
	assert.Equal(t, props.NoStaleDelivery+" (in output-handler after frontend.lock)", f.Signature, "%v", f.Err)
	require.True(t, f.Shrunk, "%v", f.ShrinkErr)
	assert.LessOrEqual(t, f.Shrink.After.Preemptions+f.Shrink.After.Waits, f.Shrink.Before.Preemptions+f.Shrink.Before.Waits)
	assert.FileExists(t, f.File)
	assert.Contains(t, err.Error(), "again: LLMDST_SIM_SEED=")
	page, rerr := os.ReadFile(f.Timeline)
	require.NoError(t, rerr, "%v", f.OutErr)
	assert.Contains(t, string(page), `id="stale-flow-`, "the stale frame is drawn in red")

	cfg.Dir = "-"
	sum, err = simtest.Run("TestFoundingRace", cfg, foundingProgram(false))
	require.NoError(t, err)
	assert.Equal(t, 300, sum.Seeds)
	assert.Positive(t, sum.Reached[window])
	t.Log(sum.Log)
}
