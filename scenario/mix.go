package scenario

import (
	"math/bits"

	"github.com/llmdst/llmdst/props"
)

// ControlMix is an RL loop's control calls all at once, from the
// controllers of the scenarios that each race one of them: the calls of
// different subsystems of a trainer (a rollout manager, a weight syncer,
// an adapter trainer) meet at the engine, as they do when each is driven
// by its own loop.
//
//	client-0…  (2 or 3)  lora-reload's clients: pause-resume's scripts,
//	                     three requests in four with the policy adapter,
//	                     the others with a reference adapter or the base
//	                     model
//	trainer              pause-resume's: pauses of a drawn mode and
//	                     their resumes
//	syncer               weight-sync's: weight updates in batches, in
//	                     flight, paused or colocated between a staged
//	                     wake-up's halves
//	reloader             live-reload's: resets of the prefix cache, most
//	                     preempting the running requests
//	policy-trainer       lora-reload's: the policy's new weights loaded
//	                     in place, in flight or paused
//	adapter-operator     2 to 5 calls, the first a pin: AddLoRA and
//	                     PinLoRA of the policy, so that its requests
//	                     never wait for the reference's slot; ListLoRAs,
//	                     which must hold the pin and at most the cache;
//	                     RemoveLoRA of the policy, which must find it
//	                     loaded if pinned; AddLoRA of an evaluation
//	                     adapter, one more than a cache of two holds
//
// Each controller is there three runs in four, at least two of them, and
// none alone: another's resume may overtake its pause (ErrResumed), the
// syncer's sleep refuse its load or its resume (ErrAsleep), and each
// takes those as the answers they are. Every request must end with a
// finished output (or one its client or an abort pause asked for), every
// token of the adapter and revision that sampled it; no step may run
// during a weight update or while asleep, or use more adapters than the
// slots (the pinned ones counted). The engine is lora-reload's: one or two slots, prefix caching
// over a system prompt every request shares, async half, KV pressure a
// third, a quarter under the priority policy, a quarter with draft tokens
// and an eighth with host memory (drawLoRAEngine). The windows are each
// scenario's, now with the others' calls in them: the targets are
// requests held by a weight update while an adapter loads
// (lora-load-during-an-update) and a reset with a step in flight. Every
// plan is drawn before anything runs.
var ControlMix = &Scenario{
	Name:            "control-mix",
	Summary:         "an RL loop's pauses, weight updates, prefix-cache resets, adapter reloads and pins all at once, from five controllers, while clients stream",
	DefaultStrategy: "chaos",
	Run:             controlMix,
	Targets:         props.SetOf(props.LoRALoadDuringAnUpdate, props.ResetWithStepInFlight),
}

func init() { Register(ControlMix) }

func controlMix(x *Run) error {
	r := x.Rand
	cfg, scripts := drawPolicyClients(x)
	present := 0 // a bit a controller
	for i := range 5 {
		if r.Intn(4) != 0 {
			present |= 1 << i
		}
	}
	for bits.OnesCount(uint(present)) < 2 {
		present |= 1 << r.Intn(5)
	}
	var controllers []controller
	if present&1 != 0 {
		plan := drawPausePlan(x)
		controllers = append(controllers, controller{"trainer", func(p *pauseRun) error { return p.trainer(plan, false) }})
	}
	if present&2 != 0 {
		plan := drawSyncPlan(x)
		controllers = append(controllers, controller{"syncer", func(p *pauseRun) error { return p.syncer(plan, false) }})
	}
	if present&4 != 0 {
		plan := drawReloadPlan(x)
		controllers = append(controllers, controller{"reloader", func(p *pauseRun) error { return reload(x, p.e, plan) }})
	}
	if present&8 != 0 {
		plan := drawPolicyPlan(x)
		controllers = append(controllers, controller{"policy-trainer", func(p *pauseRun) error { return p.policyTrainer(plan, false) }})
	}
	if present&16 != 0 {
		plan := drawOperatorPlan(x)
		cache := x.engineConfig(cfg).CPULoRAs() // -config may change it
		controllers = append(controllers, controller{"adapter-operator", func(p *pauseRun) error { return p.adapterOperator(plan, cache) }})
	}
	return x.streamBeside(cfg, scripts, controllers)
}
