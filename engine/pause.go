package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/task"
)

// PauseMode is what PauseGeneration does with the requests in flight,
// vLLM's PauseMode.
type PauseMode = core.PauseMode

// The pause modes.
const (
	// PauseAbort, vLLM's default, aborts every request in flight: each
	// ends with a final output of reason abort and the tokens it had.
	PauseAbort = core.PauseAbort
	// PauseWait lets the running requests finish; the waiting ones wait.
	PauseWait = core.PauseWait
	// PauseKeep freezes every request until the resume.
	PauseKeep = core.PauseKeep
)

// PauseOptions are PauseGeneration's arguments. The zero value is vLLM's
// default: abort, and clear the cache.
type PauseOptions struct {
	Mode PauseMode
	// KeepCache keeps the prefix cache, and the KV of the requests
	// PauseKeep freezes, for a faster resume: vLLM's clear_cache=False.
	// Without it the cache is reset once the pause took effect, and the
	// requests PauseKeep froze compute their tokens again after the resume
	// (the same tokens: they are preempted, not restarted).
	KeepCache bool
}

// pauseSettle is what vLLM's pause_generation sleeps after the core's reply,
// so that the outputs the core put before it are processed first.
const pauseSettle = 20 * time.Millisecond

// PauseGeneration pauses the engine for, say, a weight update, as vLLM's
// pause_generation: the core stops scheduling, after doing with the
// requests in flight what o.Mode says. It returns once the pause took
// effect — nothing of the engine runs a step until ResumeGeneration — and
// every output the core made before that is in its request's collector:
// under PauseAbort each request in flight has its final abort output,
// under PauseWait each running request its last. Requests added while the
// engine is paused are accepted, and wait for the resume; so does WaitIdle.
// A pause while paused pauses again (PauseAbort aborts what waits), and
// never lets run what a PauseKeep before it froze.
//
// A ResumeGeneration (another caller's) that the core takes before the
// pause took effect overtakes it: PauseGeneration returns ErrResumed, and
// the engine runs (vLLM's caller waits on until the engine next goes idle,
// which under steady load it need not).
//
// When ctx is done first it returns ctx's error; the pause still takes
// effect, as vLLM's does when its caller stops awaiting it. A ctx done
// before the call sends nothing. It fails with
// ErrClosed or the engine-dead error when the engine is, and with an error
// naming the mode when o.Mode is none of the three.
func (e *AsyncLLM) PauseGeneration(ctx context.Context, o PauseOptions) error {
	if !o.Mode.Valid() {
		return fmt.Errorf("engine: pause mode %d is not one of abort (0), wait (1), keep (2)", uint8(o.Mode))
	}
	in := core.Input{Kind: core.InputPause, Mode: o.Mode, ClearCache: !o.KeepCache}
	overtakes := e.cfg.Faults.Fires(failpoints.EnginePauseReplyOvertakes)
	if overtakes {
		in.Direct = e.deliver
	}
	call, r, err := e.call(ctx, in)
	if err != nil {
		return err
	}
	if r.Resumed {
		return ErrResumed
	}
	if overtakes {
		e.rt.Sleep(pauseSettle)
	}
	e.emit(Event{Kind: core.EventPaused, Call: call})
	return nil
}

// ResumeGeneration resumes a paused engine, vLLM's resume_generation: the
// requests the pause held back run. Resuming an engine that is not paused
// does nothing. A pause that has not taken effect yet (a PauseWait waiting
// for its running requests) never will: its PauseGeneration returns
// ErrResumed.
//
// While the executor sleeps (Sleep) it resumes nothing and returns
// ErrAsleep: a step would run on memory the sleep released (vLLM resumes,
// and its next forward pass is an illegal memory access). The WakeUp that
// wakes the last of it resumes.
func (e *AsyncLLM) ResumeGeneration(ctx context.Context) error {
	_, r, err := e.call(ctx, core.Input{Kind: core.InputResume})
	if err == nil && r.Asleep {
		return ErrAsleep
	}
	return err
}

// IsPaused reports whether the engine is paused, vLLM's is_paused: true from
// the moment the core takes a pause, before it took effect, until it takes
// a resume.
func (e *AsyncLLM) IsPaused(ctx context.Context) (bool, error) {
	_, r, err := e.call(ctx, core.Input{Kind: core.InputIsPaused})
	return r.Paused, err
}

// call sends the core a utility call and waits for its reply, as vLLM's
// call_utility_async: on the input queue, in order with the ADDs and
// aborts before it. It returns the call's number.
func (e *AsyncLLM) call(ctx context.Context, in core.Input) (uint64, core.Reply, error) {
	call, p, err := e.callOn(ctx, in, e.ranks())
	if err == nil {
		e.split(call, p, false)
	}
	return call, p.r, err
}

// callOn is call on the cores of ranks to (nil: the one core). It returns
// the replies gathered; their Reply is the zero value on an error.
func (e *AsyncLLM) callOn(ctx context.Context, in core.Input, to []int) (uint64, *pendingReply, error) {
	p := &pendingReply{kind: in.Kind, want: max(len(to), 1)}
	if err := e.usable(); err != nil {
		return 0, p, err
	}
	if err := ctx.Err(); err != nil {
		return 0, p, err
	}
	in.Call = e.calls.Add(1)
	e.progMu.Lock()
	if e.replies == nil {
		e.replies = make(map[uint64]*pendingReply)
	}
	e.replies[in.Call] = p
	e.idleWaiters.Add(1)
	e.progMu.Unlock()
	if !e.broadcast(in, to) {
		e.progMu.Lock()
		delete(e.replies, in.Call)
		e.idleWaiters.Add(-1)
		e.progMu.Unlock()
		p.r = core.Reply{}
		return 0, p, e.usableOr(ErrClosed)
	}
	e.progMu.Lock()
	err := task.WaitContext(e.rt, ctx, e.progMu, e.progCond, "engine.utility-call", func() bool {
		return p.n == p.want || e.stopped.Load()
	})
	delete(e.replies, in.Call)
	e.idleWaiters.Add(-1)
	e.progMu.Unlock()
	if p.n == p.want { // the reply wins over a ctx done at the same moment
		return in.Call, p, nil
	}
	p.r = core.Reply{} // some cores' replies, not the call's
	if err != nil {
		return in.Call, p, err
	}
	return in.Call, p, e.usableOr(ErrClosed)
}

// deliver hands a core's reply to the call awaiting it, which returns
// once every core replied; a call whose caller stopped waiting has none.
func (e *AsyncLLM) deliver(r core.Reply) {
	e.progMu.Lock()
	if p := e.replies[r.Call]; p != nil {
		p.add(r)
	}
	e.progCond.Broadcast()
	e.progMu.Unlock()
}

// CheckHealth is vLLM's check_health, what an API server's /health asks:
// nil while the engine serves, the engine-dead error, its cause in its
// words, once the core died, ErrClosed once closed. Like vLLM's, it asks
// nothing of the core: a death shows here once the output handler has
// taken the core's last output, when every request it held has ended with
// the same error.
func (e *AsyncLLM) CheckHealth() error { return e.usableOr(nil) }

// usable returns ErrClosed or the engine-dead error when the engine is
// either.
func (e *AsyncLLM) usable() error {
	if !e.stopped.Load() {
		return nil
	}
	return e.usableOr(nil)
}

// usableOr returns the engine-dead error or ErrClosed, or otherwise err.
func (e *AsyncLLM) usableOr(err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if u := e.unusableLocked(); u != nil {
		return u
	}
	return err
}

// ResetPrefixCache resets the prefix cache, vLLM's reset_prefix_cache, as
// after a weight update: no request scheduled later finds a block cached
// before it. It reports whether the cache was reset. Without resetRunning
// the reset is refused, false with no error, while a running request holds
// KV blocks, as vLLM's is; with it (vLLM's reset_running_requests) the
// core first preempts every running request, which computes its tokens
// again when it is next scheduled — the same tokens: it is preempted, not
// restarted — and the reset always happens. Under async scheduling a token
// that a step in flight sampled for a request it preempts is dropped when
// the step comes back (vLLM's discard_latest_async_tokens), and sampled
// again.
//
// The core takes it in order with the ADDs and aborts before it, between
// two steps; a paused engine takes it too. It fails with ErrClosed or the
// engine-dead error when the engine is, and with ctx's error when ctx is
// done first (the reset may still happen).
func (e *AsyncLLM) ResetPrefixCache(ctx context.Context, resetRunning bool) (bool, error) {
	_, r, err := e.call(ctx, core.Input{Kind: core.InputResetPrefixCache, ResetRunning: resetRunning})
	return r.Reset, err
}
