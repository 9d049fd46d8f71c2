package core

// loadLoRA takes an InputLoadLoRA between steps, vLLM's add_lora: with
// LoadInplace the adapter's new weights replace the old from the next
// step on (a step in flight under AsyncScheduling sampled before it);
// without, nothing a request sees changes. Refused while the weights
// sleep, as a weight update is: the load would write into released
// memory.
func (c *EngineCore) loadLoRA(in Input) {
	ev := Event{Kind: EventLoRALoad, Call: in.Call, LoRA: int(in.LoRA), Step: c.step}
	if c.asleep&SleepWeights != 0 {
		c.refuse(in, ev, ErrWeightsAsleep)
		return
	}
	if in.LoadInplace {
		ev.Finished, ev.Held = true, int(c.sched.ReloadLoRA(int(in.LoRA)))
	}
	c.emit(ev)
	c.reply(in)
}
