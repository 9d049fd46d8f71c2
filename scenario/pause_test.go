package scenario_test

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// sweepFailures runs seeds 1 to seeds of s under the strategy named, with
// the options opts gives each seed, one worker a core, as simrun sweep
// does; it returns the failures by the property they violated ("" for a
// failure that names none), and the first failing seed of each.
func sweepFailures(t *testing.T, s *scenario.Scenario, strategy string, seeds uint64, opts func(seed uint64) scenario.Options) (map[string]int, map[string]uint64) {
	t.Helper()
	st, err := sim.ParseStrategy(strategy)
	require.NoError(t, err)
	var mu sync.Mutex
	counts, first := map[string]int{}, map[string]uint64{}
	next := make(chan uint64)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			pool := sim.NewPool()
			defer pool.Close()
			for seed := range next {
				prog, out := s.Program(opts(seed))
				res := sim.Run(sim.Options{Seed: seed, Strategy: st, NoRecord: true, NoHash: true, Pool: pool}, prog)
				err := out.Err(res.Err)
				if err == nil {
					continue
				}
				name := ""
				var v *props.Violation
				if errors.As(err, &v) {
					name = v.Property
				}
				mu.Lock()
				counts[name]++
				if f, ok := first[name]; !ok || seed < f {
					first[name] = seed
				}
				mu.Unlock()
			}
		})
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		next <- seed
	}
	close(next)
	wg.Wait()
	return counts, first
}

func pauseSeeds() uint64 {
	if testing.Short() || raceEnabled {
		return 300
	}
	return 2000
}

// TestPauseResumePassesOnTheFixedEngine: the engine as it is passes
// pause-resume under chaos, its default, and under a starved output
// handler, which holds the outputs a pause made back from their
// collectors.
func TestPauseResumePassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.PauseResume, "chaos", "starve:output-handler")
}

// assertPasses sweeps s on the engine as it is under each strategy and
// asserts that no seed fails.
func assertPasses(t *testing.T, s *scenario.Scenario, strategies ...string) {
	t.Helper()
	for _, strategy := range strategies {
		counts, first := sweepFailures(t, s, strategy, pauseSeeds(), func(seed uint64) scenario.Options {
			return scenario.Options{Seed: seed}
		})
		assert.Empty(t, counts, "%s: failures by property, first seeds %v (replay: simrun run -scenario %s -seed N -strategy %s)", strategy, first, s.Name, strategy)
	}
}

// TestPauseResumeCatchesTheReplyOvertakingItsOutputs plants vLLM's order,
// engine/pause-reply-overtakes: the pause's reply overtakes the outputs
// the core put before it, and PauseGeneration sleeps 20 ms for them. An
// output handler starved for longer leaves them undelivered when
// PauseGeneration returns, which PauseReturnsAfterItsOutputs catches (in
// 99.3% of the first 2,000 seeds, as every run pauses two to four times);
// chaos never withholds it that long, and finds nothing.
func TestPauseResumeCatchesTheReplyOvertakingItsOutputs(t *testing.T) {
	planted := withFailpoint("engine/pause-reply-overtakes=return")
	assertCaughtOnlyAs(t, scenario.PauseResume, "starve:output-handler", planted, props.PauseReturnsAfterItsOutputs)
	counts, first := sweepFailures(t, scenario.PauseResume, "chaos", pauseSeeds(), planted)
	assert.Empty(t, counts, "chaos: failures by property, first seeds %v", first)
}

// TestPauseResumeCatchesALaterPauseThawingAKeep plants vLLM's
// core/pause-last-mode-wins: a pause while paused sets its own mode's
// state, so one trainer's wait after the other's keep lets the frozen
// requests step before anyone resumed, which PausedRunsNothing catches
// (in 1.9% of the first 2,000 seeds: only runs with two trainers overlap
// their pauses). The engine keeps the stricter state, and fails none.
func TestPauseResumeCatchesALaterPauseThawingAKeep(t *testing.T) {
	assertCaughtOnlyAs(t, scenario.PauseResume, "chaos", withFailpoint("core/pause-last-mode-wins=return"), props.PausedRunsNothing)
}

// TestPauseResumeCatchesATokenDroppedAfterAClearingKeep plants vLLM's
// #42043, core/reset-discards-unconditionally: under async scheduling the
// reset of a keep pause that clears the cache marks every frozen request
// to drop its next output, though none is in flight, so each drops the
// first token it samples after the resume. ModelTokens catches the tokens
// one place early; a request that the lost token leaves with nothing to
// schedule kills the core instead ("none could be scheduled"), a failure
// that names no property. The engine drops only what was in flight.
func TestPauseResumeCatchesATokenDroppedAfterAClearingKeep(t *testing.T) {
	n := assertCaughtAsOrByDeath(t, scenario.PauseResume, "core/reset-discards-unconditionally=return", props.ModelTokens)
	assert.Positive(t, n, "no seed caught the planted bug")
}

// assertCaughtAsOrByDeath sweeps s under chaos with the failpoint terms fp
// armed and asserts that every failure is property's, or the core's death
// (a failure that names no property), the rarer of the two; it returns the
// failures property named.
func assertCaughtAsOrByDeath(t *testing.T, s *scenario.Scenario, fp, property string) int {
	t.Helper()
	return assertCaughtAsOrByDeathIn(t, s, pauseSeeds(), fp, property)
}

// assertCaughtAsOrByDeathIn is assertCaughtAsOrByDeath over the first
// seeds seeds.
func assertCaughtAsOrByDeathIn(t *testing.T, s *scenario.Scenario, seeds uint64, fp, property string) int {
	t.Helper()
	counts, first := sweepFailures(t, s, "chaos", seeds, withFailpoint(fp))
	for p, n := range counts {
		if p != "" {
			assert.Equal(t, property, p, "%d failure(s) of another kind, first seed %d", n, first[p])
		}
	}
	assert.Less(t, counts[""], counts[property], "the core's death is the rarer outcome: %v", counts)
	return counts[property]
}

// withFailpoint gives each seed the failpoint terms fp.
func withFailpoint(fp string) func(uint64) scenario.Options {
	return func(seed uint64) scenario.Options {
		return scenario.Options{Seed: seed, Failpoints: []string{fp}}
	}
}

// assertCaughtOnlyAs sweeps s under strategy with opts and asserts that
// some seeds fail on property, and every one of them on it or on one of
// also; it returns how many failed on property.
func assertCaughtOnlyAs(t *testing.T, s *scenario.Scenario, strategy string, opts func(uint64) scenario.Options, property string, also ...string) int {
	t.Helper()
	counts, first := sweepFailures(t, s, strategy, pauseSeeds(), opts)
	assert.Positive(t, counts[property], "%s: no seed caught the planted bug: %v", strategy, counts)
	for p, n := range counts {
		assert.Contains(t, append([]string{property}, also...), p, "%s: %d failure(s) of another kind, first seed %d", strategy, n, first[p])
	}
	return counts[property]
}

// TestAnAbortThatLeavesTheRequestRunningIsCaught plants
// core/abort-leaves-request-running: the core takes a client's abort and
// reports it, but the request runs on for nobody. abort-reuse's core emits
// the aborted incarnation's frames after its abort in every seed, and no
// other property fails first.
func TestAnAbortThatLeavesTheRequestRunningIsCaught(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.AbortReuse, "starve:output-handler", withFailpoint("core/abort-leaves-request-running=return"), props.AbortReachesItsCore)
	assert.Equal(t, int(pauseSeeds()), n, "every seed aborts a request the core holds")
}
