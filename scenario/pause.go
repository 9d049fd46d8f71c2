package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/task"
)

// PauseResume is the loop vLLM's pause_generation exists for, an RL
// trainer's weight updates between rollouts:
//
//	client-0…  (2 or 3)  stream requests one after another, each from a
//	                     pool of two ids of the client's own, so that ids
//	                     are reused as soon as a request ends; Delta,
//	                     Cumulative and FinalOnly outputs, now and then two
//	                     sequences (parallel sampling) or a long MaxTokens,
//	                     a quarter of them aborted (Abort or Cancel) after
//	                     reading a few outputs
//	trainer              2 to 4 times: after a drawn gap, PauseGeneration,
//	                     of mode abort, wait or keep and with KeepCache
//	                     drawn; IsPaused must say so; a weight update of a
//	                     few steps; ResumeGeneration; IsPaused must not
//	trainer-2            in a third of the runs, a second controller with
//	                     a plan of its own, as vLLM's API servers or
//	                     data-parallel ranks each pause the engine: pauses
//	                     overlap, one's resume may overtake the other's
//	                     pause (ErrResumed), and neither may thaw what the
//	                     other's keep froze; IsPaused is checked by a
//	                     trainer alone
//
// Every request a client adds must end with a finished output, or with
// ErrEngineDead when a failpoint of the options kills the model; one that
// ends with reason abort the client did not ask for must have been in
// flight when an abort pause began. A request added during a pause waits
// for the resume; the trainer resumes every pause it takes, so nothing
// waits for ever. The engine runs the founding test's step time, half of
// the runs with prefix caching over a system prompt every request shares
// (so that a pause that clears the cache has something to clear), a third
// under KV pressure, which preempts, and a third with async scheduling;
// every draw is x.Rand's. The checker's properties hold throughout,
// PausedRunsNothing and PauseReturnsAfterItsOutputs among them: with
// engine/pause-reply-overtakes armed (vLLM's reply order and its 20 ms
// sleep) an output handler starved past the sleep (starve:output-handler)
// lets PauseGeneration return before the outputs the core made ahead of
// the pause — under abort, the final outputs of the requests it ended —
// reach their collectors, which the latter catches in 99.3% of the first
// 2,000 seeds; chaos's withholdings are too short for it (none). With
// core/pause-last-mode-wins armed (vLLM's: a pause sets its own mode's
// state) a second trainer's wait lets the first's frozen requests step,
// which PausedRunsNothing catches in 1.9% of them.
var PauseResume = &Scenario{
	Name:            "pause-resume",
	Summary:         "an RL weight-update loop: clients stream while a trainer pauses generation (abort, wait, keep) and resumes it",
	DefaultStrategy: "chaos",
	Run:             pauseResume,
	Targets: props.SetOf(props.PauseWithRequests, props.PauseWhilePaused, props.ResumeBeforePauseTookEffect,
		props.AddWhilePaused),
}

func init() { Register(PauseResume) }

// pauseRequest is one request of a pause-resume client's script.
type pauseRequest struct {
	id     string
	prompt string
	params engine.Params
	abort  int  // outputs to read before aborting it; -1: never
	cancel bool // abort it by Cancel, not Abort(id)
	rest   int  // steps of the engine to sleep after it ended
}

// pauseStep is one weight update of the trainer's plan.
type pauseStep struct {
	gap    int // steps to sleep before pausing
	opts   engine.PauseOptions
	update int // steps the weight update takes
}

// pauseRun is a pause-resume run's shared state: how many abort pauses the
// trainer began, and how many of them returned, so that a client can tell
// an abort it did not ask for from a bug.
type pauseRun struct {
	x                       *Run
	e                       *engine.AsyncLLM
	abortsBegun, abortsDone atomic.Int64
}

// drawRLEngine draws the engine and the clients of the RL loops that
// stream over a shared system prompt (live-reload, colocate): prefix
// caching on, a third of the runs under KV pressure, half with async
// scheduling, a quarter with draft tokens, an eighth with host memory (KV
// offloading, drawHostMemory).
func drawRLEngine(x *Run) (engine.Config, [][]pauseRequest) {
	r := x.Rand
	cfg := engine.Config{StepTime: FoundingStepTime, EnablePrefixCaching: true, BlockSize: 4}
	if r.Intn(3) == 0 {
		cfg.NumBlocks = 24 // as pause-resume's: the longest request fits alone
	}
	if r.Intn(2) == 0 {
		cfg.AsyncScheduling = true
	}
	drawSpec(x, &cfg) // a reset's stale steps carry drafts
	drawHostMemory(x, &cfg)
	return cfg, drawPauseClients(x, swarmSystemPrompt)
}

func pauseResume(x *Run) error {
	r := x.Rand
	cfg := engine.Config{StepTime: FoundingStepTime}
	system := ""
	if r.Intn(2) == 0 {
		cfg.EnablePrefixCaching, cfg.BlockSize = true, 4
		system = swarmSystemPrompt
	}
	if r.Intn(3) == 0 {
		// 23 usable blocks of 4 tokens: the longest request (a 22-token
		// prompt and 40 tokens) fits alone, two or three of them do not.
		cfg.BlockSize, cfg.NumBlocks = 4, 24
	}
	if r.Intn(3) == 0 {
		cfg.AsyncScheduling = true
	}
	// Every script and the trainer's plan are drawn before anything runs,
	// so that the workload does not depend on the interleaving.
	scripts := drawPauseClients(x, system)
	plans := [][]pauseStep{drawPausePlan(x)}
	if r.Intn(3) == 0 {
		plans = append(plans, drawPausePlan(x))
	}
	var controllers []controller
	for i, plan := range plans {
		name := "trainer"
		if i > 0 {
			name += "-" + strconv.Itoa(i+1)
		}
		controllers = append(controllers, controller{name, func(p *pauseRun) error { return p.trainer(plan, len(plans) == 1) }})
	}
	return x.streamBeside(cfg, scripts, controllers)
}

// controller is a task that drives the engine beside the clients: a
// trainer, a reloader.
type controller struct {
	name string
	run  func(p *pauseRun) error
}

// streamBeside starts an engine of cfg and runs the clients' scripts, each
// a task, beside the controllers; it returns their errors joined. The
// engine's death is one unless a failpoint that kills the model is armed:
// ErrEngineDead is a clear error, but only such a failpoint may cause it.
func (x *Run) streamBeside(cfg engine.Config, scripts [][]pauseRequest, controllers []controller) error {
	e, err := x.NewEngine(cfg)
	if err != nil {
		return err
	}
	p := &pauseRun{x: x, e: e}
	g := task.NewGroup(x.RT, "clients")
	errs := make([]error, len(scripts)+len(controllers))
	for c, script := range scripts {
		g.Go("client-"+strconv.Itoa(c), func() { errs[c] = p.client(script) })
	}
	for i, ctl := range controllers {
		g.Go(ctl.name, func() { errs[len(scripts)+i] = ctl.run(p) })
	}
	g.Wait()
	if died := x.Checker.Dead(); died != nil && !x.engineConfig(cfg).Faults.Armed(failpoints.ModelPanic) {
		errs = append(errs, fmt.Errorf("the engine died, and no failpoint kills the model: %w", died))
	}
	return errors.Join(errs...)
}

// streamBesideATrainer runs the clients' scripts beside ctl, the
// controller named name, and in a third of the runs pause-resume's trainer
// beside it, drawn now, after everything ctl draws: a second controller,
// whose pauses and resumes come at any moment. ctl is told whether it is
// alone.
func (x *Run) streamBesideATrainer(cfg engine.Config, scripts [][]pauseRequest, name string, ctl func(p *pauseRun, alone bool) error) error {
	var trainer []pauseStep
	if x.Rand.Intn(3) == 0 {
		trainer = drawPausePlan(x)
	}
	alone := trainer == nil
	controllers := []controller{{name, func(p *pauseRun) error { return ctl(p, alone) }}}
	if !alone {
		controllers = append(controllers, controller{"trainer", func(p *pauseRun) error { return p.trainer(trainer, false) }})
	}
	return x.streamBeside(cfg, scripts, controllers)
}

// drawPauseClients draws two or three clients' scripts over prompts that
// start with system.
func drawPauseClients(x *Run, system string) [][]pauseRequest {
	scripts := make([][]pauseRequest, 2+x.Rand.Intn(2))
	for c := range scripts {
		scripts[c] = drawPauseScript(x, c, system)
	}
	return scripts
}

// drawPausePlan draws a trainer's weight updates.
func drawPausePlan(x *Run) []pauseStep {
	r := x.Rand
	plan := make([]pauseStep, 2+r.Intn(3))
	for i := range plan {
		plan[i] = pauseStep{gap: r.Intn(12), opts: engine.PauseOptions{Mode: engine.PauseMode(r.Intn(3)), KeepCache: r.Intn(2) == 0}, update: 1 + r.Intn(5)}
	}
	return plan
}

// drawPauseScript draws client c's requests.
func drawPauseScript(x *Run, c int, system string) []pauseRequest {
	r := x.Rand
	script := make([]pauseRequest, 3+r.Intn(4))
	for i := range script {
		q := pauseRequest{
			id:     string(rune('a'+c)) + strconv.Itoa(r.Intn(2)),
			prompt: system + swarmPrompts[r.Intn(len(swarmPrompts))],
			params: engine.Params{MaxTokens: 2 + r.Intn(14), Output: engine.OutputKind(r.Intn(3))},
			abort:  -1,
			rest:   r.Intn(3),
		}
		if r.Intn(4) == 0 {
			q.params.MaxTokens = 20 + r.Intn(21) // in flight for a while: a pause meets it
		}
		if r.Intn(5) == 0 {
			q.params.N = 2
		}
		if r.Intn(4) == 0 {
			q.abort, q.cancel = r.Intn(4), r.Intn(2) == 0
		}
		script[i] = q
	}
	return script
}

// client plays a script: each request must end with a finished output.
func (p *pauseRun) client(script []pauseRequest) error {
	x, e := p.x, p.e
	for i, q := range script {
		if x.Failed() {
			return nil
		}
		// An abort pause that returned before the request was added did
		// not abort it: it took effect before.
		done := p.abortsDone.Load()
		r, err := e.AddRequest(q.id, q.prompt, q.params)
		switch {
		case errors.Is(err, engine.ErrEngineDead):
			return nil // a failpoint killed the model: later calls fail fast, as they should
		case refusedByOptions(x, err):
			continue
		case err != nil:
			return fmt.Errorf("request %d: AddRequest(%s): %w", i, q.id, err)
		}
		finished, abortSeen := false, false
		take := func(out engine.Output) {
			finished = finished || out.Finished
			abortSeen = abortSeen || out.FinishReason == engine.FinishAbort
			for _, c := range out.Completions {
				abortSeen = abortSeen || c.FinishReason == engine.FinishAbort
			}
		}
		asked := false
		for k := 0; k < q.abort && !finished; k++ {
			out, err := r.Next()
			if errors.Is(err, engine.ErrEngineDead) {
				return nil // the request ended with the clear error it should
			}
			if err != nil {
				return fmt.Errorf("request %d: %s: %w", i, q.id, err)
			}
			take(out)
		}
		if q.abort >= 0 && !finished {
			asked = true
			if q.cancel {
				r.Cancel()
			} else {
				e.Abort(q.id)
			}
		}
		_, err = x.readAll(r, take)
		if errors.Is(err, errStopped) || errors.Is(err, engine.ErrEngineDead) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("request %d: %s: %w", i, q.id, err)
		}
		if !finished {
			return fmt.Errorf("request %d: %s (incarnation %d) ended without a finished output", i, q.id, r.Incarnation())
		}
		if abortSeen && !asked && p.abortsBegun.Load() <= done {
			return fmt.Errorf("request %d: %s (incarnation %d) ended with reason abort, which neither its client nor a pause asked for", i, q.id, r.Incarnation())
		}
		if q.rest > 0 {
			x.RT.Sleep(time.Duration(q.rest) * FoundingStepTime)
		}
	}
	return nil
}

// trainer pauses and resumes generation as its plan says. Every pause is
// followed by its resume, whatever it found, so that no request waits for
// ever. A trainer alone checks IsPaused; beside another it takes the
// other's resume overtaking its pause (ErrResumed) as the answer it is.
func (p *pauseRun) trainer(plan []pauseStep, alone bool) error {
	return playRounds(p.x, plan, func(s pauseStep) int { return s.gap },
		func(s pauseStep) (bool, error) { return p.update(s, alone) },
		func(i int, s pauseStep) string {
			return fmt.Sprintf("pause %d (%s, keep cache %t)", i, s.opts.Mode, s.opts.KeepCache)
		})
}

// playRounds plays a controller's plan (a trainer's, a sleeper's, a
// reloader's): before each round it sleeps the round's gap, in steps of
// the engine. It stops when the run failed, at a round's error, named by
// name, or when a round found the engine dead: a failpoint killed the
// model, and the calls fail fast, as they should.
func playRounds[S any](x *Run, plan []S, gap func(S) int, round func(S) (dead bool, err error), name func(int, S) string) error {
	for i, s := range plan {
		if x.Failed() {
			return nil
		}
		x.RT.Sleep(time.Duration(gap(s)) * FoundingStepTime)
		dead, err := round(s)
		if err != nil {
			return fmt.Errorf("%s: %w", name(i, s), err)
		}
		if dead {
			return nil
		}
	}
	return nil
}

// pause makes call, a pause of mode (PauseGeneration, Sleep), counting
// the abort pauses begun and returned for the clients. It reports whether
// the engine was found dead; beside another controller, whose resume may
// overtake the pause (ErrResumed), that is the answer it is, not an error.
func (p *pauseRun) pause(mode engine.PauseMode, alone bool, call func() error) (dead bool, err error) {
	abort := mode == engine.PauseAbort
	if abort {
		p.abortsBegun.Add(1)
	}
	err = call()
	if abort {
		p.abortsDone.Add(1)
	}
	switch {
	case errors.Is(err, engine.ErrEngineDead):
		return true, nil
	case !alone && errors.Is(err, engine.ErrResumed):
		return false, nil // the other controller resumed first
	}
	return false, err
}

// update is one weight update: pause, check, sleep, resume, check. It
// reports whether the engine was found dead.
func (p *pauseRun) update(s pauseStep, alone bool) (dead bool, err error) {
	x, e, ctx := p.x, p.e, context.Background()
	dead, perr := p.pause(s.opts.Mode, alone, func() error { return e.PauseGeneration(ctx, s.opts) })
	if dead {
		return true, nil
	}
	if perr != nil {
		perr = fmt.Errorf("PauseGeneration: %w", perr)
	} else if !alone {
		// The other trainer may resume at any moment: IsPaused says
		// nothing of this one's pause.
	} else if paused, err := e.IsPaused(ctx); errors.Is(err, engine.ErrEngineDead) {
		return true, nil
	} else if err != nil || !paused {
		perr = fmt.Errorf("IsPaused after PauseGeneration returned: %t, %v", paused, err)
	}
	x.RT.Sleep(time.Duration(s.update) * FoundingStepTime) // the weight update
	if err := e.ResumeGeneration(ctx); errors.Is(err, engine.ErrEngineDead) {
		return true, perr
	} else if errors.Is(err, engine.ErrAsleep) && !alone {
		// A sleeper beside it put the executor to sleep: its wake-up
		// resumes.
	} else if err != nil {
		return false, errors.Join(perr, fmt.Errorf("ResumeGeneration: %w", err))
	}
	if perr != nil || !alone {
		return false, perr
	}
	paused, err := e.IsPaused(ctx)
	if errors.Is(err, engine.ErrEngineDead) {
		return true, nil
	}
	if err != nil || paused {
		return false, fmt.Errorf("IsPaused after ResumeGeneration returned: %t, %v", paused, err)
	}
	return false, nil
}
