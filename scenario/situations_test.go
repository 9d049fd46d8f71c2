package scenario_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// reachedBy runs a seed of s under its default strategy and returns what it
// reached and its error.
func reachedBy(t *testing.T, s *scenario.Scenario, legacy bool, seed uint64) (props.SituationSet, error) {
	t.Helper()
	return reachedWith(t, s, scenario.Options{Legacy: legacy, Seed: seed})
}

// reachedWith runs s with opts under its default strategy and returns
// what the run reached and how it ended. A run that goes a minute without
// a scheduling decision (a task that spins without one) fails the test
// with its stack rather than hang it.
func reachedWith(t *testing.T, s *scenario.Scenario, opts scenario.Options) (props.SituationSet, error) {
	t.Helper()
	prog, out := s.Program(opts)
	res := sim.Run(sim.Options{Seed: opts.Seed, Strategy: defaultStrategy(t, s), NoRecord: true, NoHash: true, HangAfter: time.Minute}, prog)
	err := out.Err(res.Err)
	return out.Checker.Reached(), err
}

func situationSeeds() uint64 {
	if testing.Short() || raceEnabled {
		return 150
	}
	return 600
}

// TestTheFixedEnginePassesWhereTheLegacyEngineFails: on abort-reuse the
// legacy engine fails on exactly the seeds that reached the founding
// race's window, and the fixed engine reaches that window on the same
// seeds and passes: its clean sweep went where the race is.
func TestTheFixedEnginePassesWhereTheLegacyEngineFails(t *testing.T) {
	for _, s := range []*scenario.Scenario{scenario.AbortReuse, scenario.ParallelAbortReuse} {
		window := 0
		for seed := uint64(1); seed <= situationSeeds(); seed++ {
			legacy, lerr := reachedBy(t, s, true, seed)
			fixed, ferr := reachedBy(t, s, false, seed)
			require.NoError(t, ferr, "%s seed %d", s.Name, seed)
			in := legacy.Has(props.StaleFrameAfterReuse)
			assert.Equal(t, in, lerr != nil, "%s seed %d: the legacy engine failed (%v) where it reached %s", s.Name, seed, lerr, legacy)
			assert.Equal(t, in, fixed.Has(props.StaleFrameAfterReuse), "%s seed %d: legacy reached %s, fixed %s", s.Name, seed, legacy, fixed)
			if in {
				window++
			}
		}
		// The window opens on most seeds under starve:output-handler
		// (83% and 91% of 2,000).
		assert.Greater(t, window, int(situationSeeds())/2, "%s reached the window on %d of %d seeds", s.Name, window, situationSeeds())
	}
}

// TestEveryLegacyFailureOpenedAReuseWindow: whatever the scenario, a seed
// the legacy engine fails reached one of the reuse windows — the
// situations are where its bugs are, not decoration.
func TestEveryLegacyFailureOpenedAReuseWindow(t *testing.T) {
	for _, s := range []*scenario.Scenario{scenario.Swarm, scenario.PauseResume, scenario.LiveReload, scenario.Colocate, scenario.WeightSync, scenario.MultiLoRA, scenario.LoRAReload} {
		failed := 0
		for seed := uint64(1); seed <= situationSeeds(); seed++ {
			set, err := reachedBy(t, s, true, seed)
			if err == nil {
				continue
			}
			failed++
			assert.NotZero(t, set&props.ReuseWindows, "%s seed %d failed (%v) but reached only %s", s.Name, seed, err, set)
		}
		assert.NotZero(t, failed, "the legacy engine passed %d seeds of %s", situationSeeds(), s.Name)
	}
}

// TestEveryScenarioReachesItsTargets: under its default strategy each
// scenario reaches every target it names, on the fixed engine, within a
// few hundred seeds; a scenario that stops reaching one has stopped
// testing its race.
func TestEveryScenarioReachesItsTargets(t *testing.T) {
	for _, s := range scenario.All() {
		var got props.SituationSet
		for seed := uint64(1); seed <= situationSeeds() && got&s.Targets != s.Targets; seed++ {
			set, err := reachedBy(t, s, false, seed)
			require.NoError(t, err, "%s seed %d", s.Name, seed)
			got |= set
		}
		assert.Equal(t, s.Targets, got&s.Targets, "%s reached %s of its targets %s", s.Name, got&s.Targets, s.Targets)
	}
	// Waiting for the core before reusing the id closes the founding
	// race's window: the scenario that does so names no target and never
	// reaches it.
	assert.Zero(t, scenario.AbortReuseWaitIdle.Targets)
	for seed := uint64(1); seed <= 100; seed++ {
		set, err := reachedBy(t, scenario.AbortReuseWaitIdle, true, seed)
		require.NoError(t, err)
		assert.Zero(t, set&props.ReuseWindows, "seed %d reached %s", seed, set)
	}
}

// TestTheStoryTellsWhereTheWindowOpened: the fixed engine's story of a seed
// that reached the founding race's window says so once, after the id came
// back, where the legacy engine's story tells the stale delivery; a run
// that waited for the core tells no window.
func TestTheStoryTellsWhereTheWindowOpened(t *testing.T) {
	story := func(s *scenario.Scenario, seed uint64) string { return storyOf(t, s, seed) }
	window := "reaches " + props.StaleFrameAfterReuse.String() + ": "
	told := story(scenario.AbortReuse, 1)
	require.Equal(t, 1, strings.Count(told, window), told)
	reuse := strings.Index(told, "adds abort-a#4")
	require.Positive(t, reuse, told)
	assert.Greater(t, strings.Index(told, window), reuse, "the window opens after the id came back:\n%s", told)
	assert.Contains(t, told, props.StaleFrameAfterReuse.Doc())
	assert.NotContains(t, told, "reaches "+props.StaleFrameDropped.String(), "a drop has its own line")

	waited := story(scenario.AbortReuseWaitIdle, 1)
	assert.NotContains(t, waited, "reaches ", waited)
}

// storyOf is the story of seed of s on the fixed engine under its default
// strategy, which must pass.
func storyOf(t *testing.T, s *scenario.Scenario, seed uint64) string {
	t.Helper()
	res, err := run(t, s, false, seed, defaultStrategy(t, s), true)
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, scenario.WriteStory(&b, res.Trace))
	return b.String()
}

// TestTheRunListsWhatTheCheckerReached: a scenario passes each situation
// its checker reaches on to the run (task.Reach), so sim.Result.Reached
// holds the same set, in the order first reached, and the run is the same
// run (its hash does not depend on it: the golden hashes hold).
func TestTheRunListsWhatTheCheckerReached(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		prog, out := scenario.Swarm.Program(scenario.Options{Seed: seed})
		res := sim.Run(sim.Options{Seed: seed, Strategy: defaultStrategy(t, scenario.Swarm)}, prog)
		require.NoError(t, out.Err(res.Err), "seed %d", seed)
		var set props.SituationSet
		for _, name := range res.Reached {
			s, err := props.ParseSituation(name)
			require.NoError(t, err)
			require.False(t, set.Has(s), "seed %d: %s listed twice", seed, name)
			set = set.With(s)
		}
		assert.Equal(t, out.Checker.Reached(), set, "seed %d", seed)
	}
}
