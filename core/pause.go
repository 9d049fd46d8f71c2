package core

import (
	"fmt"
	"slices"

	"github.com/llmdst/llmdst/failpoints"
)

// PauseMode is what a pause does with the requests the core holds, vLLM's
// PauseMode: "abort" (its default), "wait" or "keep".
type PauseMode uint8

const (
	// PauseAbort aborts every request the core holds, each with a final
	// frame of reason abort, and holds back the requests added later.
	PauseAbort PauseMode = iota
	// PauseWait lets the running requests run to their ends and holds back
	// the waiting ones and those added later.
	PauseWait
	// PauseKeep freezes everything where it is: no step runs until the
	// resume, after which the requests go on.
	PauseKeep
)

var pauseModeNames = [...]string{"abort", "wait", "keep"}

func (m PauseMode) String() string {
	if int(m) < len(pauseModeNames) {
		return pauseModeNames[m]
	}
	return fmt.Sprintf("pause-mode(%d)", uint8(m))
}

// Valid reports whether m is one of the three modes.
func (m PauseMode) Valid() bool { return int(m) < len(pauseModeNames) }

// PauseState is what a paused scheduler leaves alone, vLLM's PauseState.
type PauseState uint8

const (
	// Unpaused schedules as usual.
	Unpaused PauseState = iota
	// PausedNew schedules the running requests only: the waiting ones,
	// new or preempted, wait for the resume.
	PausedNew
	// PausedAll schedules nothing.
	PausedAll
)

var pauseStateNames = [...]string{"unpaused", "paused-new", "paused-all"}

func (st PauseState) String() string {
	if int(st) < len(pauseStateNames) {
		return pauseStateNames[st]
	}
	return fmt.Sprintf("pause-state(%d)", uint8(st))
}

// SetPauseState sets what Schedule leaves alone from its next call on,
// unless a hold leaves everything alone (Hold).
func (s *Scheduler) SetPauseState(st PauseState) {
	s.asked = st
	s.pause = st
	if s.held {
		s.pause = PausedAll
	}
}

// PauseState returns the pause state set, whatever a hold does.
func (s *Scheduler) PauseState() PauseState { return s.asked }

// Hold makes Schedule leave everything alone, whatever the pause state,
// until Hold(false): a weight update's hold, which no resume lifts.
func (s *Scheduler) Hold(on bool) {
	s.held = on
	s.SetPauseState(s.asked)
}

// ResetPrefixCache drops every hash of the prefix cache, so that no later
// request finds a block cached before it, vLLM's reset_prefix_cache. With
// resetRunning it first preempts every running request, newest first, so
// that they compute again from their first tokens and hold no block; it
// returns them, oldest first, as the waiting queue then has them under
// PolicyFCFS. It fails, changing nothing, while a request holds blocks:
// reset those first.
//
// With AsyncScheduling a step of a preempted request may be in flight: the
// token it samples was sampled for the sequence the request now computes
// again, and is dropped when it comes back (vLLM's
// discard_latest_async_tokens, as many as the request's placeholders,
// vllm#42117). The request's placeholders and the tokens the model holds
// for it go with the preemption, so that it samples those positions again.
// core/reset-keeps-stale-token plants keeping those tokens,
// core/reset-discards-unconditionally vLLM's #42043, a drop with nothing in
// flight, and core/reset-clears-nothing a reset that reports success and
// leaves the KV of the old weights in use and in the cache.
//
// A reset that succeeds stands for the weight update a trainer follows it
// with: the KV written before it is stale (kv.go).
func (s *Scheduler) ResetPrefixCache(resetRunning bool) ([]*Request, bool) {
	if s.cfg.Faults.Fires(failpoints.CoreResetClearsNothing) {
		s.discardKV() // the bug: the weights changed, the cache did not
		return nil, true
	}
	if !resetRunning && len(s.running) > 0 {
		return nil, false
	}
	preempted := make([]*Request, len(s.running))
	for i := len(s.running) - 1; i >= 0; i-- {
		r := s.running[i]
		s.preempt(r, nil) // between steps: the next reports its store
		if !s.cfg.Faults.Fires(failpoints.CoreResetKeepsStaleToken) {
			r.discard += r.Placeholders
		}
		if r.discard == 0 && s.cfg.AsyncScheduling && s.cfg.Faults.Fires(failpoints.CoreResetDiscardsUnconditionally) {
			r.discard = 1 // the bug: its next output is dropped, in flight or not
		}
		r.Placeholders, r.sampled = 0, r.sampled[:0]
		preempted[i] = r
	}
	loading := 0 // blocks the KV loads and stores in flight hold, which a reset that may preempt abandons
	if resetRunning && s.offload != nil {
		for _, r := range s.waiting {
			if r.kvLoad == kvLoaded {
				s.unload(r) // its KV landed: it computes again too
			}
		}
		loading = s.abandonTransfers()
	}
	if s.cfg.UsableBlocks()-s.pool.numFree != loading {
		// Waiting requests hold no blocks, but with KV offloading those
		// whose KV loads, or landed (unless they were just let go), and
		// ended requests hold theirs while their stores are in flight.
		return preempted, false
	}
	s.pool.resetCache()
	if !s.cfg.Faults.Fires(failpoints.CoreResetKeepsOffloadedKV) {
		s.DropOffloaded() // vLLM's reset_connector=True
	}
	s.discardKV()
	return preempted, true
}

// discardKV makes the KV written so far unreadable (kv.go): a reset, as
// the weight update it follows, and a sleep, which releases the memory.
// KV written from now on is stamped apart from what was written before,
// and every request reads all its blocks again at its next step.
func (s *Scheduler) discardKV() {
	s.kvStamp = splitmix64(s.kvStamp) | 1
	s.kvEpoch++
}

// pause takes a pause: under PauseAbort it ends every request the core
// holds, each with a final frame, then it sets the scheduler's pause state
// — never one that schedules more than the state it finds — and waits,
// with the pauses before it, for the core to go idle.
func (c *EngineCore) pause(in Input) {
	c.emit(Event{Kind: EventPause, Call: in.Call, Text: in.Mode.String()})
	if in.Mode == PauseAbort {
		var frames []Frame
		for _, r := range c.sched.FinishAll(StatusFinishedAborted) {
			frames = append(frames, c.sched.FinalFrame(r, FinishAbort))
		}
		c.put(frames) // publishes the counts too
	}
	st := PausedNew
	if in.Mode == PauseKeep {
		st = PausedAll
	}
	// A pause while paused never lets run what the pause before froze: a
	// caller whose PauseKeep took effect was promised no step until a
	// resume. vLLM sets the state it is given, so that a wait after a keep
	// steps the frozen requests; core/pause-last-mode-wins plants that.
	if cur := c.sched.PauseState(); cur > st && !c.faults.Fires(failpoints.CorePauseLastModeWins) {
		st = cur
	}
	c.sched.SetPauseState(st)
	c.pauses = append(c.pauses, in)
}

// completePauses replies to the pauses waiting for the core to go idle, as
// vLLM's idle callbacks do, first resetting the prefix cache if one of them
// asked: the running requests a PauseKeep froze are preempted, to compute
// again after the resume.
func (c *EngineCore) completePauses() {
	if len(c.pauses) == 0 || c.sched.HeldWork() || c.sched.TransfersInFlight() > 0 {
		// A weight update's hold is no pause's effect: a wait pause
		// waits for the requests the hold froze to run to their ends.
		// A KV load in flight still writes the KV cache, and a store
		// reads it: a pause takes effect once they landed.
		return
	}
	if slices.ContainsFunc(c.pauses, func(in Input) bool { return in.ClearCache }) {
		preempted, _ := c.sched.ResetPrefixCache(true) // idle: nothing is in flight
		c.tellPreempted(preempted)
		c.syncHeld()
	}
	for _, in := range c.pauses {
		c.emit(Event{Kind: EventPauseDone, Call: in.Call, Text: in.Mode.String()})
		if in.Kind == InputSleep && in.Level >= 1 {
			c.sleep(in)
		}
		c.reply(in)
	}
	c.dropPauses()
}

// tellPreempted tells the observer of the requests a reset of the prefix
// cache preempted, given oldest first, as they were preempted: newest
// first, as a step's preemptions are told, each with the outputs of its
// steps in flight that the core will drop.
func (c *EngineCore) tellPreempted(preempted []*Request) {
	for _, r := range slices.Backward(preempted) {
		c.emit(Event{Kind: EventPreempt, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: r.discard})
	}
}

// resetPrefixCache answers a reset of the prefix cache, vLLM's
// reset_prefix_cache: between steps, with a step in flight under
// AsyncScheduling, whose outputs for the requests it preempts are dropped
// (Scheduler.ResetPrefixCache).
func (c *EngineCore) resetPrefixCache(in Input) {
	preempted, ok := c.sched.ResetPrefixCache(in.ResetRunning)
	c.tellPreempted(preempted)
	c.syncHeld()
	c.emit(Event{Kind: EventCacheReset, Call: in.Call, Held: len(preempted), Finished: ok})
	r := c.answer(in)
	r.Reset = ok
	c.send(in, r)
}

// dropPauses forgets the pauses answered.
func (c *EngineCore) dropPauses() {
	clear(c.pauses) // let their reply hooks go
	c.pauses = c.pauses[:0]
}

// overtakePauses replies to the pauses that have not taken effect, a
// resume having come first: they never will, and their callers must not
// wait for the core to go idle, which under steady load it need not.
func (c *EngineCore) overtakePauses() {
	for _, in := range c.pauses {
		c.send(in, Reply{Call: in.Call, Resumed: true})
	}
	c.dropPauses()
}

// reply answers a utility call: on the output queue, after every frame
// put before it, or at once to in.Direct.
func (c *EngineCore) reply(in Input) { c.send(in, c.answer(in)) }

// answer is the reply to in that every call gets: the pause state and the
// sleep; a call with more to say adds it.
func (c *EngineCore) answer(in Input) Reply {
	return Reply{Call: in.Call, Paused: c.sched.PauseState() != Unpaused, Asleep: c.asleep != 0}
}

// resume resumes scheduling: the pauses that have not taken effect never
// will.
func (c *EngineCore) resume(in Input) {
	c.sched.SetPauseState(Unpaused)
	c.emit(Event{Kind: EventResume, Call: in.Call})
	c.overtakePauses()
}

// send puts r, the reply to in, on the output queue, or hands it to
// in.Direct.
func (c *EngineCore) send(in Input, r Reply) {
	r.Engine = int(c.cfg.DataParallelRank)
	if in.Direct != nil {
		in.Direct(r)
		return
	}
	c.batches.Add(1)
	c.out.Put(&Outputs{Reply: &r, Step: c.step})
}
