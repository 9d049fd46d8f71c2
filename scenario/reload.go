package scenario

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// LiveReload is an RL trainer that updates the weights without pausing
// generation, as asynchronous RL loops do between rollouts: after each
// update it resets the prefix cache, vLLM's
// reset_prefix_cache(reset_running_requests=True), so that no request goes
// on from KV computed with the old weights. The requests running at that
// moment are preempted and compute their tokens again.
//
//	client-0…  (2 or 3)  stream requests as pause-resume's clients do:
//	                     each from a pool of two ids of its own, Delta,
//	                     Cumulative and FinalOnly, now and then two
//	                     sequences or a long MaxTokens, a quarter of them
//	                     aborted after a few outputs
//	reloader             3 to 6 times: after a drawn gap, a weight update
//	                     of a few steps, then ResetPrefixCache — with
//	                     resetRunning three times in four, which must
//	                     reset the cache, and otherwise without, which
//	                     the core refuses while a request runs
//
// Every request a client adds must end with a finished output (or with
// ErrEngineDead when a failpoint of the options kills the model), never
// with an abort its client did not ask for. Prefix caching is on, over a
// system prompt every request shares; half of the runs schedule
// asynchronously, where a reset often meets a step in flight whose tokens
// were sampled before it (the target, reset-with-a-step-in-flight): the
// core drops them and samples those positions again, and the checker's
// ModelTokens holds each request to the model's tokens, once each. A third
// of the runs are under KV pressure, which preempts too. Every draw is
// x.Rand's.
var LiveReload = &Scenario{
	Name:            "live-reload",
	Summary:         "an RL loop that updates weights without pausing: the trainer resets the prefix cache, preempting the running requests, while clients stream",
	DefaultStrategy: "chaos",
	Run:             liveReload,
	Targets:         props.SetOf(props.ResetWithStepInFlight),
}

func init() { Register(LiveReload) }

// reloadStep is one weight update of the reloader's plan.
type reloadStep struct {
	wait         int // steps before the reset: a gap, then the update
	resetRunning bool
}

func liveReload(x *Run) error {
	cfg, scripts := drawRLEngine(x)
	plan := drawReloadPlan(x)
	return x.streamBeside(cfg, scripts, []controller{{"reloader", func(p *pauseRun) error { return reload(x, p.e, plan) }}})
}

// drawReloadPlan draws a reloader's 3 to 6 updates and resets.
func drawReloadPlan(x *Run) []reloadStep {
	r := x.Rand
	plan := make([]reloadStep, 3+r.Intn(4))
	for i := range plan {
		gap, update := r.Intn(10), 1+r.Intn(3)
		plan[i] = reloadStep{wait: gap + update, resetRunning: r.Intn(4) != 0}
	}
	return plan
}

// reload plays the reloader's plan: each weight update, then a reset of
// the prefix cache, which must happen when it preempts the running
// requests.
func reload(x *Run, e *engine.AsyncLLM, plan []reloadStep) error {
	return playRounds(x, plan, func(s reloadStep) int { return s.wait },
		func(s reloadStep) (bool, error) {
			ok, err := e.ResetPrefixCache(context.Background(), s.resetRunning)
			switch {
			case errors.Is(err, engine.ErrEngineDead):
				return true, nil
			case err != nil:
				return false, fmt.Errorf("ResetPrefixCache: %w", err)
			case s.resetRunning && !ok:
				return false, errors.New("ResetPrefixCache with resetRunning refused to reset the cache")
			}
			return false, nil
		},
		func(i int, s reloadStep) string { return fmt.Sprintf("reset %d (reset running %t)", i, s.resetRunning) })
}
