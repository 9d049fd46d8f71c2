package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// Colocate is the colocated RL loop of verl, OpenRLHF and TRL, where the
// trainer and the engine share the GPU: between rollouts the trainer puts
// the engine to sleep, vLLM's sleep, trains, and wakes it in stages — the
// weights first, to take the new ones, then the KV cache — while clients
// go on adding requests, which wait through it.
//
//	client-0…  (2 or 3)  stream requests as pause-resume's clients do:
//	                     each from a pool of two ids of its own, Delta,
//	                     Cumulative and FinalOnly, now and then two
//	                     sequences or a long MaxTokens, a quarter of them
//	                     aborted after a few outputs
//	sleeper              2 to 4 times: after a drawn gap, Sleep of level 1
//	                     or 2 (one time in five level 0, a pause only) and
//	                     of mode abort, wait or keep; IsSleeping must say
//	                     so; training of a few steps; then two times in
//	                     three a staged wake-up — WakeUp("weights"), a
//	                     weight update of a few steps, WakeUp("kv_cache")
//	                     — and otherwise WakeUp(); IsSleeping must not
//	trainer              in a third of the runs, pause-resume's trainer
//	                     beside it, as a second controller: its resume
//	                     may find the executor asleep (ErrAsleep), and the
//	                     sleeper's wake-up resume its pause
//
// Every request a client adds must end with a finished output (or with
// ErrEngineDead when a failpoint of the options kills the model), never
// with an abort neither its client nor a pause asked for. Prefix caching is
// on, over a system prompt every request shares, so that a sleep has a
// cache to reset; half of the runs schedule asynchronously, a third are
// under KV pressure. The window is between the two wake-ups: requests
// wait, the KV cache is not back (the target, partial-wake-with-requests),
// and no step may run (an-asleep-engine-runs-no-step). Every draw is
// x.Rand's.
var Colocate = &Scenario{
	Name:            "colocate",
	Summary:         "a colocated RL loop: the trainer puts the engine to sleep, trains, and wakes it in stages while clients stream",
	DefaultStrategy: "chaos",
	Run:             colocate,
	Targets:         props.SetOf(props.PartialWakeWithRequests),
}

func init() { Register(Colocate) }

// sleepStep is one round of the sleeper's plan.
type sleepStep struct {
	gap    int // steps before the sleep
	opts   engine.SleepOptions
	train  int  // steps the training takes
	staged bool // wake the weights, update them, then the KV cache
	update int  // steps the weight update takes, when staged
}

func colocate(x *Run) error {
	r := x.Rand
	cfg, scripts := drawRLEngine(x)
	plan := make([]sleepStep, 2+r.Intn(3))
	for i := range plan {
		s := sleepStep{gap: r.Intn(10), opts: engine.SleepOptions{Level: 1 + r.Intn(2), Mode: engine.PauseMode(r.Intn(3))},
			train: 1 + r.Intn(5), staged: r.Intn(3) != 0, update: 1 + r.Intn(3)}
		if r.Intn(5) == 0 {
			s.opts.Level = 0
		}
		plan[i] = s
	}
	return x.streamBesideATrainer(cfg, scripts, "sleeper", func(p *pauseRun, alone bool) error { return p.sleeper(plan, alone) })
}

// sleeper plays the sleeper's plan. Every sleep is followed by its
// wake-up, whatever it found, so that no request waits for ever. Alone it
// checks IsSleeping; beside the trainer it takes the trainer's resume
// overtaking its sleep (ErrResumed) as the answer it is.
func (p *pauseRun) sleeper(plan []sleepStep, alone bool) error {
	return playRounds(p.x, plan, func(s sleepStep) int { return s.gap },
		func(s sleepStep) (bool, error) { return p.sleepWake(s, alone) },
		func(i int, s sleepStep) string {
			return fmt.Sprintf("sleep %d (level %d, %s, staged %t)", i, s.opts.Level, s.opts.Mode, s.staged)
		})
}

// sleepWake is one round: sleep, check, train, wake (in stages or at
// once), check. It reports whether the engine was found dead.
func (p *pauseRun) sleepWake(s sleepStep, alone bool) (dead bool, err error) {
	x, e, ctx := p.x, p.e, context.Background()
	dead, serr := p.pause(s.opts.Mode, alone, func() error { return e.Sleep(ctx, s.opts) })
	if dead {
		return true, nil
	}
	if serr != nil {
		serr = fmt.Errorf("Sleep: %w", serr)
	} else if sleeping, err := p.sleeping(alone); errors.Is(err, engine.ErrEngineDead) {
		return true, nil
	} else if err != nil || (alone && !sleeping) {
		serr = fmt.Errorf("IsSleeping after Sleep returned: %t, %v", sleeping, err)
	}
	x.RT.Sleep(time.Duration(s.train) * FoundingStepTime) // the training
	wakes := [][]string{nil}
	if s.staged {
		wakes = [][]string{{engine.WakeWeights}, {engine.WakeKVCache}}
	}
	for k, tags := range wakes {
		if k > 0 {
			x.RT.Sleep(time.Duration(s.update) * FoundingStepTime) // the weight update
		}
		if err := e.WakeUp(ctx, tags...); errors.Is(err, engine.ErrEngineDead) {
			return true, serr
		} else if err != nil {
			return false, errors.Join(serr, fmt.Errorf("WakeUp(%v): %w", tags, err))
		}
	}
	if serr != nil || !alone {
		return false, serr
	}
	sleeping, err := p.sleeping(alone)
	if errors.Is(err, engine.ErrEngineDead) {
		return true, nil
	}
	if err != nil || sleeping {
		return false, fmt.Errorf("IsSleeping after WakeUp returned: %t, %v", sleeping, err)
	}
	return false, nil
}

// sleeping asks IsSleeping, when the answer means something: beside the
// trainer, whose pauses and resumes come at any moment, it does not.
func (p *pauseRun) sleeping(alone bool) (bool, error) {
	if !alone {
		return false, nil
	}
	return p.e.IsSleeping(context.Background())
}
