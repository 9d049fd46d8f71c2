package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
)

// TestMultiLoRAPassesOnTheFixedEngine: the engine as it is passes
// multi-lora under chaos, its default, and under a starved engine core.
// (That requests wait for a LoRA slot is
// TestEveryScenarioReachesItsTargets'.)
func TestMultiLoRAPassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.MultiLoRA, "chaos", "starve:engine-core")
}

// TestMultiLoRACatchesAPrefixCacheThatIgnoresLoRA plants
// core/prefix-cache-ignores-lora: the prefix cache keys blocks by their
// tokens alone, and a request of one adapter takes the system prompt's
// blocks another adapter computed; it samples garbage, every seed of the
// first 2,000.
func TestMultiLoRACatchesAPrefixCacheThatIgnoresLoRA(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.MultiLoRA, "chaos", withFailpoint("core/prefix-cache-ignores-lora=return"), props.ModelTokens)
	assert.Greater(t, n, int(pauseSeeds())*9/10, "the planted bug was caught on too few seeds")
}

// TestMultiLoRACatchesALimitThatForgetsRunning plants
// core/lora-limit-forgets-running: the scheduler counts toward max_loras
// only the adapters it admits in a step, and a step's batch asks for more
// adapters than the slots (62% of the first 2,000 seeds).
func TestMultiLoRACatchesALimitThatForgetsRunning(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.MultiLoRA, "chaos", withFailpoint("core/lora-limit-forgets-running=return"), props.LoRASlotsSuffice)
	assert.Greater(t, n, int(pauseSeeds())/3, "the planted bug was caught on too few seeds")
}

// TestTheStoryTellsALoRAWait: multi-lora's seed 1 adds requests with
// adapters and holds one back for a slot; its story says so.
func TestTheStoryTellsALoRAWait(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.MultiLoRA, 1),
		"adds c0#1/0 (internal id 0_c0-00000001) with LoRA adapter adapter-3 (id 3)",
		"holds c0#1/0 back: no LoRA slot for its adapter 3, the step's batch uses all 1 for other adapters; requests behind it may go first")
}
