package core

import (
	"errors"
	"fmt"

	"github.com/llmdst/llmdst/failpoints"
)

// The refusals of a weight update's calls, with vLLM's worker's words
// where it has them.
var (
	// ErrWeightUpdateActive refuses a start while an update is open.
	ErrWeightUpdateActive = errors.New("start_weight_update called while a weight update is already active")
	// ErrNoWeightUpdate refuses a batch or a finish with no update open.
	ErrNoWeightUpdate = errors.New("no weight update is active: start_weight_update must come first")
	// ErrWeightsAsleep refuses a weight update's call while the executor's
	// weights sleep: it would write into released memory.
	ErrWeightsAsleep = errors.New("the executor's weights are asleep: wake them up first")
)

// The names of a weight update's calls in its events (Event.Text).
const (
	WeightUpdateStart  = "start"
	WeightUpdateBatch  = "update"
	WeightUpdateFinish = "finish"
)

var weightPhase = map[InputKind]string{InputStartWeightUpdate: WeightUpdateStart, InputUpdateWeights: WeightUpdateBatch, InputFinishWeightUpdate: WeightUpdateFinish}

// weightUpdate takes a call of a weight update, vLLM's
// start_weight_update, update_weights and finish_weight_update, between
// steps. vLLM runs them on the workers and leaves scheduling alone, so
// that unless a pause came first the core steps between them over
// weights half replaced; here the start holds scheduling and the finish
// lets it go (Scheduler.Hold), a hold no resume and no wake-up lifts. A
// step in flight under AsyncScheduling sampled before the start and ends
// as it would have. Requests keep coming and aborting meanwhile.
//
// Refused, the reply's Err says why: a start while an update is open, a
// batch or a finish with none, any call while the weights sleep (vLLM's
// #57853: the worker writes into released memory and dies).
func (c *EngineCore) weightUpdate(in Input) {
	ev := Event{Kind: EventWeightUpdate, Call: in.Call, Text: weightPhase[in.Kind]}
	var err error
	switch {
	case in.Kind == InputStartWeightUpdate && c.updating:
		err = ErrWeightUpdateActive
	case in.Kind != InputStartWeightUpdate && !c.updating:
		err = ErrNoWeightUpdate
	case c.asleep&SleepWeights != 0:
		if c.faults.Fires(failpoints.CoreUpdateWhileAsleep) {
			ev.Finished, ev.Held = true, c.written
			c.emit(ev)
			panic(fmt.Sprintf("segmentation fault: %s of a weight update wrote into the executor's weights, which are asleep", ev.Text))
		}
		err, ev.Held = ErrWeightsAsleep, int(c.asleep)
	}
	if err != nil {
		c.refuse(in, ev, err)
		return
	}
	switch in.Kind {
	case InputStartWeightUpdate:
		c.updating, c.written = true, 0
		c.hold(true)
	case InputUpdateWeights:
		c.written++
	case InputFinishWeightUpdate:
		c.updating = false
		c.hold(false)
	}
	ev.Finished, ev.Held = true, c.written
	c.emit(ev)
	c.reply(in)
}

// refuse tells ev, refused for err, and replies to in with it: a weight
// update's call or a LoRA load the core cannot take.
func (c *EngineCore) refuse(in Input, ev Event, err error) {
	ev.Err = err
	c.emit(ev)
	r := c.answer(in)
	r.Err = err
	c.send(in, r)
}

// hold holds scheduling for a weight update, or lets it go.
// core/update-keeps-scheduling plants vLLM's behaviour, no hold at all;
// core/update-holds-by-pausing a hold that is the pause state, which a
// resume lifts and the finish lifts for a pause taken before it.
func (c *EngineCore) hold(on bool) {
	switch {
	case c.faults.Fires(failpoints.CoreUpdateKeepsScheduling):
	case c.faults.Fires(failpoints.CoreUpdateHoldsByPausing):
		st := Unpaused
		if on {
			st = PausedAll
		}
		c.sched.SetPauseState(st)
	default:
		c.sched.Hold(on)
	}
}
