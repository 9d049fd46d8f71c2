package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/engine"
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

// withModelLen is a sweep's options with the engine's model length n and
// failpoints armed.
func withModelLen(n int, failpoints ...string) func(uint64) scenario.Options {
	return func(seed uint64) scenario.Options {
		return scenario.Options{Seed: seed, Failpoints: failpoints, Engine: func(c *engine.Config) { c.MaxModelLen = n }}
	}
}

// TestMultiLoRAKeepsTheSlotOfARequestPassedOver: at a model length of 16
// tokens a running request's optimistic tokens (async scheduling, drafts)
// reach the length before a rejected draft takes them back, and a step
// passes it over (vLLM's num_new_tokens 0). The engine keeps its adapter's
// slot and passes; core/lora-slot-left-when-passed-over, vLLM's
// scheduled_loras, gives the slot to a waiting request of another adapter,
// and the next step asks for two adapters of one slot (1.6% of the first
// 2,000 seeds; found by a hunt at a model length of 24).
func TestMultiLoRAKeepsTheSlotOfARequestPassedOver(t *testing.T) {
	counts, first := sweepFailures(t, scenario.MultiLoRA, "chaos", pauseSeeds(), withModelLen(16))
	assert.Empty(t, counts, "failures by property, first seeds %v", first)
	n := assertCaughtOnlyAs(t, scenario.MultiLoRA, "chaos", withModelLen(16, "core/lora-slot-left-when-passed-over=return"), props.LoRASlotsSuffice)
	assert.Positive(t, n)
}

// TestTheStoryTellsALoRAWait: multi-lora's seed 1 adds requests with
// adapters and holds one back for a slot; its story says so.
func TestTheStoryTellsALoRAWait(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.MultiLoRA, 1),
		"adds c0#1/0 (internal id 0_c0-00000001) with LoRA adapter adapter-3 (id 3)",
		"holds c0#1/0 back: no LoRA slot for its adapter 3, all 1 taken by other adapters' running requests or pins; requests behind it may go first")
}

// TestLoRAReloadPassesOnTheFixedEngine: the engine as it is passes
// lora-reload under chaos, its default, and under a starved engine core:
// every token is the revision's that sampled it.
func TestLoRAReloadPassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.LoRAReload, "chaos", "starve:engine-core")
}

// TestLoRAReloadCatchesAPrefixCacheKeyedByTheAdapterAlone plants vLLM's
// keys, core/lora-reload-keeps-prefix-cache: a request of the policy
// admitted after a reload takes the system prompt's blocks the old
// weights computed (90% of the first 2,000 seeds).
func TestLoRAReloadCatchesAPrefixCacheKeyedByTheAdapterAlone(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.LoRAReload, "chaos", withFailpoint("core/lora-reload-keeps-prefix-cache=return"), props.ModelTokens)
	assert.Greater(t, n, int(pauseSeeds())/2, "the planted bug was caught on too few seeds")
}

// TestTheStoryTellsALoRAReload: lora-reload's seed 1 loads the policy's
// new weights with requests of it in the core; its story says so.
func TestTheStoryTellsALoRAReload(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.LoRAReload, 1),
		"loads LoRA adapter 1's new weights in place (call 2): revision 1, which its requests sample with from the next step on",
		"reaches "+props.LoRAReloadWithRequests.String(),
		"loads LoRA adapter 1's new weights in place (call 4): revision 2")
}
