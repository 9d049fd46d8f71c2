package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/llmdst/llmdst/core"
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
// policy, a quarter with draft tokens, an eighth with host memory (KV
// offloading, drawHostMemory).
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
	drawSpec(x, &cfg)
	drawHostMemory(x, &cfg)
	return cfg
}

// LoRAReload is an RL loop that trains a LoRA adapter, the policy, and
// sends the engine its new weights in place between rollouts or in the
// middle of them, vLLM's add_lora with load_inplace:
//
//	client-0…  (2 or 3)  stream requests as pause-resume's clients do,
//	                     three in four with the policy adapter, the others
//	                     with a reference adapter or the base model
//	trainer              2 to 4 times, after a drawn gap: the policy's new
//	                     weights loaded in place (AddLoRA with
//	                     LoadInplace), two in three in flight, with
//	                     requests of it running (vLLM's policy switch in
//	                     the middle of a request), the others after a
//	                     PauseGeneration of a drawn mode and before its
//	                     resume
//
// Every request must end with a finished output (or one its client or an
// abort pause asked for), every token of the revision of the weights that
// sampled it (token-i-is-the-models-token-i follows the revisions). Prefix
// caching is on over a system prompt every request shares, so that the
// cache holds the policy's blocks of the old weights when a request of
// the new ones is admitted; one or two slots, async half, KV pressure a
// third, a quarter under the priority policy, a quarter with draft tokens
// and an eighth with host memory (drawLoRAEngine). The window is the
// reload's: requests of the policy in the core as its weights change
// (lora-reload-with-requests, the target). Every other draw is x.Rand's.
var LoRAReload = &Scenario{
	Name:            "lora-reload",
	Summary:         "an RL loop that loads its LoRA policy's new weights in place, paused or in flight, while clients stream over a shared system prompt",
	DefaultStrategy: "chaos",
	Run:             loraReload,
	Targets:         props.SetOf(props.LoRAReloadWithRequests),
}

func init() { Register(LoRAReload) }

// The adapters of lora-reload: the policy the trainer updates, and a
// reference it never does.
var (
	loraPolicy    = engine.LoRARequest{Name: "policy", ID: 1}
	loraReference = engine.LoRARequest{Name: "reference", ID: 2}
)

// policyStep is one load of the trainer's plan.
type policyStep struct {
	gap   int                  // steps before it
	pause *engine.PauseOptions // pause before it, resume after; nil: in flight
}

func loraReload(x *Run) error {
	cfg, scripts := drawPolicyClients(x)
	plan := drawPolicyPlan(x)
	return x.streamBeside(cfg, scripts, []controller{{"trainer", func(p *pauseRun) error { return p.policyTrainer(plan, true) }}})
}

// drawPolicyClients draws lora-reload's engine, one or two slots, and its
// two or three clients, three requests in four of the policy.
func drawPolicyClients(x *Run) (engine.Config, [][]pauseRequest) {
	r := x.Rand
	cfg := drawLoRAEngine(x)
	cfg.MaxLoRAs = min(cfg.MaxLoRAs, 2)
	scripts := make([][]pauseRequest, 2+r.Intn(2))
	for c := range scripts {
		scripts[c] = drawPauseScript(x, c, swarmSystemPrompt)
		for i := range scripts[c] {
			q := &scripts[c][i].params
			switch r.Intn(8) {
			case 0:
			case 1:
				q.LoRA = &loraReference
			default:
				q.LoRA = &loraPolicy
			}
			if cfg.SchedulingPolicy == engine.PolicyPriority {
				q.Priority = r.Intn(3) - 1
			}
		}
	}
	return cfg, scripts
}

// drawPolicyPlan draws the policy trainer's 2 to 4 loads.
func drawPolicyPlan(x *Run) []policyStep {
	r := x.Rand
	plan := make([]policyStep, 2+r.Intn(3))
	for i := range plan {
		plan[i].gap = r.Intn(12)
		if r.Intn(3) == 0 {
			plan[i].pause = &engine.PauseOptions{Mode: engine.PauseMode(r.Intn(3)), KeepCache: r.Intn(2) == 0}
		}
	}
	return plan
}

// policyTrainer plays the policy trainer's plan.
func (p *pauseRun) policyTrainer(plan []policyStep, alone bool) error {
	return playRounds(p.x, plan, func(s policyStep) int { return s.gap },
		func(s policyStep) (bool, error) { return p.reloadPolicy(s, alone) },
		func(i int, s policyStep) string { return fmt.Sprintf("reload %d", i) })
}

// reloadPolicy loads the policy's new weights in place, after a pause
// when the step says so and before its resume. Beside other controllers
// a resume of theirs may overtake the pause (ErrResumed), a sleep of
// theirs refuse the load (ErrAsleep) and the resume (ErrAsleep: their
// wake-up resumes): the answers they are. It reports whether the engine
// was found dead.
func (p *pauseRun) reloadPolicy(s policyStep, alone bool) (dead bool, err error) {
	e, ctx := p.e, context.Background()
	var errs roundErrs
	if s.pause != nil {
		dead, err := p.pause(s.pause.Mode, alone, func() error { return e.PauseGeneration(ctx, *s.pause) })
		if dead || errs.dead("PauseGeneration", err) {
			return true, errs.join()
		}
	}
	reload := loraPolicy
	reload.LoadInplace = true
	// Whatever the pause and the load found, a pause is resumed, so that
	// no request waits for ever.
	asleep := func(err error) error {
		if !alone && errors.Is(err, engine.ErrAsleep) {
			return nil
		}
		return err
	}
	dead = errs.dead("AddLoRA", asleep(e.AddLoRA(ctx, reload)))
	if s.pause != nil && errs.dead("ResumeGeneration", asleep(e.ResumeGeneration(ctx))) {
		dead = true
	}
	return dead, errs.join()
}

// operatorStep is one call of the adapter operator's plan.
type operatorStep struct {
	gap int        // steps before it
	op  operatorOp // what it does
}

type operatorOp uint8

const (
	opPin    operatorOp = iota // load the policy and pin it
	opList                     // list the adapters loaded
	opRemove                   // remove the policy
	opLoad                     // load the evaluation adapter, which no request uses
)

// loraEval is the adapter operator's evaluation adapter: loaded beside
// the policy and the reference, it is one more than a cache of two holds,
// and puts out the least recently used one that is not pinned.
var loraEval = engine.LoRARequest{Name: "eval", ID: 3}

// drawOperatorPlan draws the adapter operator's 2 to 5 calls, the first a
// pin.
func drawOperatorPlan(x *Run) []operatorStep {
	r := x.Rand
	plan := make([]operatorStep, 2+r.Intn(4))
	for i := range plan {
		plan[i] = operatorStep{gap: r.Intn(10), op: operatorOp(r.Intn(4))}
	}
	plan[0].op = opPin
	return plan
}

// adapterOperator plays the operator's plan on an engine that keeps cache
// adapters loaded: it pins the policy so that its requests never wait for
// the reference's slot (AddLoRA, then PinLoRA), lists the adapters
// loaded, removes the policy and loads an evaluation adapter, which puts
// another out of a full cache. A pin refused for want of a slot, or because a
// load of another adapter unloaded the policy between the two calls, is
// an answer, as a load refused while another controller's sleep holds
// the weights (with one slot the engine refuses every pin). A pinned
// adapter must stay loaded: listed, and found by its removal.
func (p *pauseRun) adapterOperator(plan []operatorStep, cache int) error {
	e, ctx := p.e, context.Background()
	pinned := false
	return playRounds(p.x, plan, func(s operatorStep) int { return s.gap },
		func(s operatorStep) (bool, error) {
			var errs roundErrs
			switch s.op {
			case opPin:
				switch err := e.AddLoRA(ctx, loraPolicy); {
				case errors.Is(err, engine.ErrAsleep): // another controller's sleep
					return false, nil
				case errs.dead("AddLoRA", err):
					return true, nil
				case err != nil:
					return false, errs.join()
				}
				ok, err := e.PinLoRA(ctx, loraPolicy.ID)
				switch {
				case errors.Is(err, core.ErrLoRAPinSlot), errors.Is(err, core.ErrLoRANotLoaded):
				case errs.dead("PinLoRA", err):
					return true, nil
				case ok:
					pinned = true
				}
			case opList:
				loaded, err := e.ListLoRAs(ctx)
				if errs.dead("ListLoRAs", err) {
					return true, nil
				}
				if len(loaded) > cache {
					errs = append(errs, fmt.Errorf("ListLoRAs returned %v, more than the %d adapters the executor keeps", loaded, cache))
				}
				if pinned && !slices.Contains(loaded, loraPolicy.ID) {
					errs = append(errs, fmt.Errorf("ListLoRAs returned %v without the pinned policy (id %d)", loaded, loraPolicy.ID))
				}
			case opRemove:
				removed, err := e.RemoveLoRA(ctx, loraPolicy.ID)
				if errs.dead("RemoveLoRA", err) {
					return true, nil
				}
				if pinned && !removed {
					errs = append(errs, errors.New("RemoveLoRA found the pinned policy not loaded"))
				}
				pinned = false
			case opLoad:
				if err := e.AddLoRA(ctx, loraEval); !errors.Is(err, engine.ErrAsleep) && errs.dead("AddLoRA", err) {
					return true, nil
				}
			}
			return false, errs.join()
		},
		func(i int, s operatorStep) string {
			return fmt.Sprintf("%s %d", [...]string{"pin", "list", "remove", "load"}[s.op], i)
		})
}
