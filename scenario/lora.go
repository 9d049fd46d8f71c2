package scenario

import (
	"strconv"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// MultiLoRA is a service of many LoRA adapters on one base model, vLLM's
// --enable-lora with --max-loras: more adapters are asked for than the
// executor has slots, so the scheduler keeps a request of an adapter that
// has none waiting and admits the requests behind it.
//
//	client-0…  (3 to 5)  tenants, streaming requests one after another as
//	                     pause-resume's clients do (ids reused as soon as
//	                     a request ends, Delta, Cumulative and FinalOnly,
//	                     now and then two sequences or a long MaxTokens, a
//	                     quarter aborted after a few outputs), each
//	                     request with one of the adapters, of which there
//	                     are one or two more than the slots, or, one in
//	                     four, with the base model
//
// Every request must end with a finished output and the tokens of its own
// adapter (token-i-is-the-models-token-i: an adapter changes every token,
// core.LoRAKey), and no step may use more adapters than the slots
// (a-step-uses-at-most-max-loras-adapters). The slots are 1 to 3; prefix
// caching is on, over a system prompt every request shares, so that the
// cache holds the same tokens computed by several adapters, which must not
// be shared; a third of the runs are under KV pressure, half schedule
// asynchronously, a quarter under the priority policy with drawn
// priorities. The window is the slot's: a request waits for one
// (lora-waited-for-a-slot, the target) while others stream. Every draw is
// x.Rand's.
var MultiLoRA = &Scenario{
	Name:            "multi-lora",
	Summary:         "tenants of more LoRA adapters than the executor has slots stream over a shared system prompt, with prefix caching",
	DefaultStrategy: "chaos",
	Run:             multiLoRA,
	Targets:         props.SetOf(props.LoRAWaitedForASlot),
}

func init() { Register(MultiLoRA) }

func multiLoRA(x *Run) error {
	r := x.Rand
	cfg := drawLoRAEngine(x)
	adapters := cfg.MaxLoRAs + 1 + r.Intn(2)
	scripts := make([][]pauseRequest, 3+r.Intn(3))
	for c := range scripts {
		scripts[c] = drawPauseScript(x, c, swarmSystemPrompt)
		for i := range scripts[c] {
			q := &scripts[c][i].params
			if r.Intn(4) > 0 {
				id := 1 + r.Intn(adapters)
				q.LoRA = &engine.LoRARequest{Name: "adapter-" + strconv.Itoa(id), ID: id}
			}
			if cfg.SchedulingPolicy == engine.PolicyPriority {
				q.Priority = r.Intn(3) - 1
			}
		}
	}
	return x.streamBeside(cfg, scripts, nil)
}

// drawLoRAEngine draws multi-lora's engine: LoRA on with 1 to 3 slots,
// prefix caching over blocks of 4 tokens, a third of the runs under KV
// pressure, half with async scheduling, a quarter under the priority
// policy.
func drawLoRAEngine(x *Run) engine.Config {
	r := x.Rand
	cfg := engine.Config{StepTime: FoundingStepTime, EnableLoRA: true, MaxLoRAs: 1 + r.Intn(3), EnablePrefixCaching: true, BlockSize: 4}
	if r.Intn(3) == 0 {
		cfg.NumBlocks = 24 // as pause-resume's: the longest request fits alone
	}
	if r.Intn(2) == 0 {
		cfg.AsyncScheduling = true
	}
	if r.Intn(4) == 0 {
		cfg.SchedulingPolicy = engine.PolicyPriority
	}
	return cfg
}
