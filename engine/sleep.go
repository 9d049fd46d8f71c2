package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/llmdst/llmdst/core"
)

// SleepOptions are Sleep's arguments, vLLM's sleep(level, mode). The zero
// value pauses only, aborting what is in flight.
type SleepOptions struct {
	// Level 0 pauses scheduling and changes no memory; 1 offloads the
	// weights and discards the KV cache; 2 discards both. At 1 and 2 the
	// prefix cache is reset and the requests PauseKeep freezes compute
	// again after the wake-up.
	Level int
	// Mode is what becomes of the requests in flight, as PauseGeneration's.
	Mode PauseMode
}

// The tags of WakeUp, vLLM's.
const (
	// WakeWeights restores the weights.
	WakeWeights = "weights"
	// WakeKVCache restores the KV cache, which holds nothing it held
	// before the sleep.
	WakeKVCache = "kv_cache"
	// WakeScheduling resumes scheduling after a sleep of level 0.
	WakeScheduling = "scheduling"
)

// Sleep puts the engine to sleep, vLLM's sleep, as a colocated RL trainer
// does to lend the GPU's memory to training: a pause of o.Mode, and at
// level 1 or 2, once the pause took effect, the executor releases its
// memory. It returns then, as PauseGeneration does: nothing of the engine
// steps, and every output the core made before is in its request's
// collector. Requests added meanwhile are accepted and wait for the
// wake-up. A sleep while asleep pauses again and releases nothing more.
//
// A ResumeGeneration or WakeUp the core takes before the pause took effect
// overtakes it: Sleep returns ErrResumed and releases nothing. With
// several cores, one that it overtook on some but not on others is woken
// on those, so that every core runs. It fails
// with ErrClosed or the engine-dead error when the engine is, with ctx's
// error when ctx is done first (the sleep still happens), and with an
// error naming the level or mode when either is out of range.
func (e *AsyncLLM) Sleep(ctx context.Context, o SleepOptions) error {
	if o.Level < 0 || o.Level > 2 {
		return fmt.Errorf("engine: sleep level %d is not 0 (pause only), 1 (offload the weights, discard the KV cache) or 2 (discard both)", o.Level)
	}
	if !o.Mode.Valid() {
		return fmt.Errorf("engine: pause mode %d is not one of abort (0), wait (1), keep (2)", uint8(o.Mode))
	}
	call, p, err := e.callOn(ctx, core.Input{Kind: core.InputSleep, Level: uint8(o.Level), Mode: o.Mode}, e.ranks())
	if err != nil {
		return err
	}
	if p.r.Resumed {
		mended := e.mendsSplit(p)
		e.split(call, p, mended)
		if mended {
			// A resume overtook the sleep on some cores, not on these,
			// which refuse it while asleep: the engine would run on some
			// cores while the others hold their requests until a wake-up
			// nobody told to come. Wake them, as the sleep's ErrResumed
			// says the engine runs.
			e.callOn(context.WithoutCancel(ctx), core.Input{Kind: core.InputWakeUp, Tags: core.SleepAll}, p.took)
		}
		return ErrResumed
	}
	e.emit(Event{Kind: core.EventPaused, Call: call, Text: "Sleep"})
	e.recordSleep(true, o.Level)
	return nil
}

// recordSleep sets the sleep gauges, as vLLM's record_sleep_state does
// when sleep or wake_up returns.
func (e *AsyncLLM) recordSleep(sleeping bool, level int) {
	var v int64
	if sleeping {
		v = int64(level) + 1
	}
	e.sleep.Store(v)
}

// WakeUp wakes the engine, vLLM's wake_up: it restores the executor's
// memory the tags name — WakeWeights, WakeKVCache; none restores both —
// and resumes scheduling once none of it sleeps. A staged wake-up,
// WakeUp(WakeWeights), a weight update, then WakeUp(WakeKVCache), keeps
// the engine paused until the second: a step needs its KV cache. After a
// sleep of level 0, WakeUp() or WakeUp(WakeScheduling) resumes, and like
// vLLM's wake_up it resumes a PauseGeneration's pause too. Tags that are
// awake already are left as they are.
//
// It fails with an error naming a tag it does not know, with ErrClosed or
// the engine-dead error when the engine is, and with ctx's error when ctx
// is done first (the wake-up may still happen).
func (e *AsyncLLM) WakeUp(ctx context.Context, tags ...string) error {
	wake := core.SleepAll
	if len(tags) > 0 {
		wake = 0
		for _, t := range tags {
			switch t {
			case WakeWeights:
				wake |= core.SleepWeights
			case WakeKVCache:
				wake |= core.SleepKVCache
			case WakeScheduling:
			default:
				return fmt.Errorf("engine: wake-up tag %q is not one of %s", t, strings.Join([]string{WakeWeights, WakeKVCache, WakeScheduling}, ", "))
			}
		}
	}
	_, _, err := e.call(ctx, core.Input{Kind: core.InputWakeUp, Tags: wake})
	if err == nil {
		e.recordSleep(false, 0)
	}
	return err
}

// IsSleeping reports whether the engine sleeps, vLLM's is_sleeping: it is
// paused (a sleep of level 0 is a pause), or some of the executor's memory
// is asleep.
func (e *AsyncLLM) IsSleeping(ctx context.Context) (bool, error) {
	_, r, err := e.call(ctx, core.Input{Kind: core.InputIsPaused})
	return r.Paused || r.Asleep, err
}
