package core

import (
	"errors"
	"fmt"
	"slices"

	"github.com/llmdst/llmdst/failpoints"
)

// The refusals of a LoRA pin, with vLLM's words where it has them.
var (
	// ErrLoRANotLoaded refuses a pin of an adapter the executor has not
	// loaded (vLLM's "Pinning failed. LoRA … is not registered."): a
	// load (AddLoRA) or a request of it loads it, and a later load of
	// others may unload it again.
	ErrLoRANotLoaded = errors.New("the adapter is not loaded: AddLoRA, or a request of it, loads it")
	// ErrLoRAPinSlot refuses a pin that would take a LoRA slot a running
	// request of another adapter uses, or the last slot pins would leave
	// to the other adapters, whose requests would then wait for ever.
	// vLLM pins either, and dies at the next step that needs the slot.
	ErrLoRAPinSlot = errors.New("no LoRA slot is free for it")
	// errAllPinned is vLLM's LRU cache's, when a load finds every adapter
	// loaded pinned: only a planted bug gets there.
	errAllPinned = errors.New("All items are pinned, cannot remove oldest from the cache.")
)

// loadLoRA takes an InputLoadLoRA between steps, vLLM's add_lora: the
// adapter is loaded, and with LoadInplace its new weights replace the old
// from the next step on (a step in flight under AsyncScheduling sampled
// before it); without, nothing a request sees changes. Refused while the
// weights sleep, as a weight update is: the load would write into
// released memory.
func (c *EngineCore) loadLoRA(in Input) {
	ev := Event{Kind: EventLoRALoad, Call: in.Call, LoRA: int(in.LoRA), Step: c.step}
	if c.asleep&SleepWeights != 0 {
		c.refuse(in, ev, ErrWeightsAsleep)
		return
	}
	if c.lora != nil && !c.lora.load(int(in.LoRA), c.sched.PinnedLoRAs(), c.cfg.MaxCPULoRAs) {
		c.refuse(in, ev, errAllPinned)
		return
	}
	if in.LoadInplace {
		ev.Finished, ev.Held = true, int(c.sched.ReloadLoRA(int(in.LoRA)))
	}
	c.emit(ev)
	c.reply(in)
}

// pinLoRA takes an InputPinLoRA, vLLM's pin_lora: a loaded adapter stays
// loaded and holds an executor slot of its own until it is removed. The
// slot must be free now and must not be the last: with
// core/lora-pin-ignores-slots armed, as in vLLM, any loaded adapter is
// pinned and the scheduler does not count the slot.
func (c *EngineCore) pinLoRA(in Input) {
	a := int(in.LoRA)
	ev := Event{Kind: EventLoRAPin, Call: in.Call, LoRA: a, Step: c.step}
	if c.lora == nil || !slices.Contains(c.lora.cache, a) {
		c.refuse(in, ev, ErrLoRANotLoaded)
		return
	}
	if pinned := c.sched.PinnedLoRAs(); !slices.Contains(pinned, a) && !c.faults.Fires(failpoints.CoreLoRAPinIgnoresSlots) {
		switch n := len(c.sched.RunningLoRAs(append(slices.Clone(pinned), a))); {
		case len(pinned)+1 >= c.cfg.MaxLoRAs:
			c.refuse(in, ev, fmt.Errorf("%w: it would pin %d of the %d slots and leave none to the other adapters", ErrLoRAPinSlot, len(pinned)+1, c.cfg.MaxLoRAs))
			return
		case n > c.cfg.MaxLoRAs:
			c.refuse(in, ev, fmt.Errorf("%w: with the pins and the running requests' adapters it would need %d of the %d slots; pin it once one is free", ErrLoRAPinSlot, n, c.cfg.MaxLoRAs))
			return
		}
	}
	c.sched.PinLoRA(a)
	ev.Finished, ev.Held = true, len(c.sched.PinnedLoRAs())
	c.emit(ev)
	r := c.answer(in)
	r.Done = true
	c.send(in, r)
}

// removeLoRA takes an InputRemoveLoRA, vLLM's remove_lora: the adapter is
// unloaded and unpinned; a request of it loads it again at its next step.
func (c *EngineCore) removeLoRA(in Input) {
	a := int(in.LoRA)
	ev := Event{Kind: EventLoRARemove, Call: in.Call, LoRA: a, Step: c.step}
	if c.lora != nil {
		if i := slices.Index(c.lora.cache, a); i >= 0 {
			c.lora.cache = slices.Delete(c.lora.cache, i, i+1)
			ev.Finished = true
		}
	}
	c.sched.UnpinLoRA(a)
	c.emit(ev)
	r := c.answer(in)
	r.Done = ev.Finished
	c.send(in, r)
}

// listLoRAs takes an InputListLoRAs, vLLM's list_loras: the adapters
// loaded, in increasing order.
func (c *EngineCore) listLoRAs(in Input) {
	r := c.answer(in)
	if c.lora != nil {
		r.LoRAs = slices.Sorted(slices.Values(c.lora.cache))
	}
	c.send(in, r)
}

// withLoRA adds adapter l to the set ls, unless it is there or is 0, the
// base model.
func withLoRA(ls []int, l int) []int {
	if l == 0 || slices.Contains(ls, l) {
		return ls
	}
	return append(ls, l)
}

// load loads adapter a into the cache of at most capacity adapters, or
// makes it the most recently used, unloading the least recently used one
// not pinned when the cache is full; it reports false when every adapter
// loaded is pinned.
func (l *coreLoRA) load(a int, pinned []int, capacity int) bool {
	if i := slices.Index(l.cache, a); i >= 0 {
		l.cache = append(slices.Delete(l.cache, i, i+1), a)
		return true
	}
	if len(l.cache) >= capacity {
		i := slices.IndexFunc(l.cache, func(b int) bool { return !slices.Contains(pinned, b) })
		if i < 0 {
			return false
		}
		l.cache = slices.Delete(l.cache, i, i+1)
	}
	l.cache = append(l.cache, a)
	return true
}
