package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
)

// TestColocatePassesOnTheFixedEngine: the engine as it is passes colocate
// under chaos, its default, and under a starved output handler. (That the
// runs reach a partial wake-up with requests waiting is
// TestEveryScenarioReachesItsTargets'.)
func TestColocatePassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.Colocate, "chaos", "starve:output-handler")
}

// TestColocateCatchesAPartialWakeThatResumes plants
// core/partial-wake-resumes, vLLM's #44395: WakeUp("weights") resumes
// scheduling with the KV cache still released, and the requests that
// waited through the sleep step into it. AsleepRunsNothing catches it as
// the step begins, before the core dies of the illegal memory access
// (86% of the first 2,000 seeds, every run whose staged wake-up found
// requests waiting).
func TestColocateCatchesAPartialWakeThatResumes(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.Colocate, "chaos", withFailpoint("core/partial-wake-resumes=return"), props.AsleepRunsNothing)
	assert.Greater(t, n, int(pauseSeeds())/2, "the planted bug was caught on too few seeds")
}

// TestColocateCatchesAResumeWhileAsleep plants core/resume-while-asleep,
// vLLM's behaviour: the trainer's resume, beside the sleeper, resumes an
// engine whose executor sleeps. It needs the trainer, a third of the
// runs, and its resume to fall in the sleep (22% of the first 2,000).
func TestColocateCatchesAResumeWhileAsleep(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.Colocate, "chaos", withFailpoint("core/resume-while-asleep=return"), props.AsleepRunsNothing)
	assert.Greater(t, n, int(pauseSeeds())/10, "the planted bug was caught on too few seeds")
}

// TestColocateCatchesASleepThatKeepsThePrefixCache plants
// core/sleep-keeps-prefix-cache, vLLM's #17103: a sleep releases the KV
// cache and leaves the prefix cache naming its blocks. After the wake-up a
// request over the shared system prompt hits them, and a request a keep
// froze goes on from its own: both attend KV that is gone, and ModelTokens
// catches their tokens (91% of the first 2,000 seeds).
func TestColocateCatchesASleepThatKeepsThePrefixCache(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.Colocate, "chaos", withFailpoint("core/sleep-keeps-prefix-cache=return"), props.ModelTokens)
	assert.Greater(t, n, int(pauseSeeds())/2, "the planted bug was caught on too few seeds")
}

// TestTheStoryTellsASleepAsASleep: the core takes a sleep as a pause
// first; colocate's seed 2 story names it a sleep from the start, with
// its level, and its return as Sleep's.
func TestTheStoryTellsASleepAsASleep(t *testing.T) {
	told := storyOf(t, scenario.Colocate, 2)
	assertToldInOrder(t, told,
		"takes sleep 6 (level 1, wait), a pause first",
		"sleep 6's pause (wait) takes effect: no step until the wake-up",
		"sleep 6 (level 1) takes effect: the executor releases its weights,kv_cache",
		"Sleep (sleep 6) returns")
	assert.NotContains(t, told, "pause 6")
}
