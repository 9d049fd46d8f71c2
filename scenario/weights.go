package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// WeightSync is an RL trainer that sends the engine its new weights in
// batches, with vLLM's weight-transfer calls — start_weight_update,
// update_weights a batch at a time, finish_weight_update with the new
// version — between rollouts or in the middle of them, while clients
// stream.
//
//	client-0…  (2 or 3)  stream requests as pause-resume's clients do:
//	                     each from a pool of two ids of its own, Delta,
//	                     Cumulative and FinalOnly, now and then two
//	                     sequences or a long MaxTokens, a quarter of them
//	                     aborted after a few outputs
//	syncer               2 to 4 updates, each after a drawn gap: one in
//	                     two in flight, with no pause (vLLM's async RL),
//	                     the others after a PauseGeneration of mode abort,
//	                     wait or keep, resumed after the finish; one in
//	                     four colocated instead, after a Sleep of level 1
//	                     or 2, between WakeUp("weights") and
//	                     WakeUp("kv_cache"), and then half the time a
//	                     StartWeightUpdate tried before the weights are
//	                     awake, which must be refused with ErrAsleep.
//	                     StartWeightUpdate, 1 to 3 batches of
//	                     UpdateWeights up to two steps apart,
//	                     FinishWeightUpdate("v<n>"); alone, WeightVersion
//	                     must then be "v<n>"
//	trainer              in a third of the runs, pause-resume's trainer
//	                     beside it, a second controller whose resumes
//	                     come in the middle of the updates
//
// Every request a client adds must end with a finished output (or with
// ErrEngineDead when a failpoint of the options kills the model), never
// with an abort neither its client nor a pause asked for. Prefix caching
// is on, over a system prompt every request shares; half of the runs
// schedule asynchronously, a third are under KV pressure. The window is
// the update's: requests are held (the target, update-with-requests) and
// no step may run until the finish (no-step-during-a-weight-update),
// whatever resumes come between (resume-during-an-update). Every draw is
// x.Rand's.
var WeightSync = &Scenario{
	Name:            "weight-sync",
	Summary:         "an RL loop that sends the engine new weights in batches, paused or in flight, while clients stream and a second controller resumes",
	DefaultStrategy: "chaos",
	Run:             weightSync,
	Targets:         props.SetOf(props.UpdateWithRequests),
}

func init() { Register(WeightSync) }

// syncStep is one weight update of the syncer's plan.
type syncStep struct {
	gap     int                  // steps before it
	pause   *engine.PauseOptions // pause before it, resume after; nil: in flight
	sleep   *engine.SleepOptions // colocated: sleep before it, wake in stages around it
	early   bool                 // colocated: try StartWeightUpdate with the weights asleep
	batches []int                // the steps before each batch
}

func weightSync(x *Run) error {
	cfg, scripts := drawRLEngine(x)
	plan := drawSyncPlan(x)
	return x.streamBesideATrainer(cfg, scripts, "syncer", func(p *pauseRun, alone bool) error { return p.syncer(plan, alone) })
}

// drawSyncPlan draws a syncer's 2 to 4 updates.
func drawSyncPlan(x *Run) []syncStep {
	r := x.Rand
	plan := make([]syncStep, 2+r.Intn(3))
	for i := range plan {
		s := syncStep{gap: r.Intn(10), batches: make([]int, 1+r.Intn(3))}
		for b := range s.batches {
			s.batches[b] = r.Intn(3)
		}
		switch mode := engine.PauseMode(r.Intn(3)); r.Intn(4) {
		case 0:
			s.sleep = &engine.SleepOptions{Level: 1 + r.Intn(2), Mode: mode}
			s.early = r.Intn(2) == 0
		case 1:
			s.pause = &engine.PauseOptions{Mode: mode, KeepCache: r.Intn(2) == 0}
		}
		plan[i] = s
	}
	return plan
}

// syncer plays the syncer's plan, naming each update's version after its
// round.
func (p *pauseRun) syncer(plan []syncStep, alone bool) error {
	n := 0
	return playRounds(p.x, plan, func(s syncStep) int { return s.gap },
		func(s syncStep) (bool, error) {
			n++
			return p.syncWeights(s, fmt.Sprintf("v%d", n), alone)
		},
		func(i int, s syncStep) string {
			switch {
			case s.sleep != nil:
				return fmt.Sprintf("update %d (colocated, sleep level %d, %s)", i, s.sleep.Level, s.sleep.Mode)
			case s.pause != nil:
				return fmt.Sprintf("update %d (paused, %s, keep cache %t)", i, s.pause.Mode, s.pause.KeepCache)
			}
			return fmt.Sprintf("update %d (in flight)", i)
		})
}

// roundErrs gathers a controller round's errors, each named by its call,
// and tells the engine's death apart from them: a failpoint killed the
// model, and the calls fail fast, as they should.
type roundErrs []error

// dead reports whether err is the engine's death; any other error is
// kept, named what.
func (errs *roundErrs) dead(what string, err error) bool {
	if errors.Is(err, engine.ErrEngineDead) {
		return true
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %w", what, err))
	}
	return false
}

func (errs roundErrs) join() error { return errors.Join(errs...) }

// syncWeights is one round: pause or sleep, update, resume or wake. Every
// pause and sleep is followed by its resume or wake-up, and every update
// started by its finish, whatever went wrong, so that no request waits for
// ever. It reports whether the engine was found dead.
func (p *pauseRun) syncWeights(s syncStep, version string, alone bool) (dead bool, err error) {
	e, ctx := p.e, context.Background()
	var errs roundErrs
	switch {
	case s.sleep != nil:
		dead, err = p.pause(s.sleep.Mode, alone, func() error { return e.Sleep(ctx, *s.sleep) })
		if dead || errs.dead("Sleep", err) {
			return true, errs.join()
		}
		if s.early {
			switch err := e.StartWeightUpdate(ctx); {
			case errors.Is(err, engine.ErrAsleep): // refused, as it must be
			case err == nil:
				// The weights were awake: beside the trainer, whose resume
				// overtook the sleep, they may be; alone, never.
				if alone {
					errs = append(errs, errors.New("StartWeightUpdate with the weights asleep returned no error, not ErrAsleep"))
				}
				if errs.dead("FinishWeightUpdate", e.FinishWeightUpdate(ctx, "")) {
					return true, errs.join()
				}
			case errs.dead("StartWeightUpdate with the weights asleep", err):
				return true, errs.join()
			}
		}
		if errs.dead("WakeUp(weights)", e.WakeUp(ctx, engine.WakeWeights)) {
			return true, errs.join()
		}
	case s.pause != nil:
		dead, err = p.pause(s.pause.Mode, alone, func() error { return e.PauseGeneration(ctx, *s.pause) })
		if dead || errs.dead("PauseGeneration", err) {
			return true, errs.join()
		}
	}
	before := len(errs)
	if p.weightUpdate(&errs, s.batches, version) {
		return true, errs.join()
	}
	updated := len(errs) == before // every call of the update succeeded
	if got := e.WeightVersion(); alone && updated && got != version {
		errs = append(errs, fmt.Errorf("WeightVersion after FinishWeightUpdate(%q) returned %q", version, got))
	}
	switch {
	case s.sleep != nil:
		if errs.dead("WakeUp(kv_cache)", e.WakeUp(ctx, engine.WakeKVCache)) {
			return true, errs.join()
		}
	case s.pause != nil:
		if errs.dead("ResumeGeneration", e.ResumeGeneration(ctx)) {
			return true, errs.join()
		}
	}
	return false, errs.join()
}

// weightUpdate runs a weight update: start, the batches, each after its
// steps, and the finish naming version, keeping their errors in errs. A
// batch refused still ends with the finish; a start refused makes
// nothing more. It reports whether the engine was found dead.
func (p *pauseRun) weightUpdate(errs *roundErrs, batches []int, version string) (dead bool) {
	e, ctx := p.e, context.Background()
	if err := e.StartWeightUpdate(ctx); errs.dead("StartWeightUpdate", err) {
		return true
	} else if err != nil {
		return false // refused: there is nothing to finish
	}
	for i, steps := range batches {
		p.x.RT.Sleep(time.Duration(steps) * FoundingStepTime)
		if errs.dead(fmt.Sprintf("UpdateWeights (batch %d)", i+1), e.UpdateWeights(ctx)) {
			return true
		}
	}
	return errs.dead("FinishWeightUpdate", e.FinishWeightUpdate(ctx, version))
}
