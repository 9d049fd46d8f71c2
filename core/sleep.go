package core

import (
	"strings"

	"github.com/llmdst/llmdst/failpoints"
)

// SleepTags are the executor's memory that a sleep releases and a wake-up
// restores, vLLM's sleep tags.
type SleepTags uint8

const (
	// SleepWeights is the model's weights, "weights": offloaded at level
	// 1, discarded at level 2.
	SleepWeights SleepTags = 1 << iota
	// SleepKVCache is the KV cache, "kv_cache": discarded at either level.
	SleepKVCache
	// SleepAll is what a sleep of level 1 or 2 releases, and a wake-up
	// without tags restores.
	SleepAll = SleepWeights | SleepKVCache
)

// String names the tags as vLLM does, joined by commas; "none" for none.
func (t SleepTags) String() string {
	var names []string
	if t&SleepWeights != 0 {
		names = append(names, "weights")
	}
	if t&SleepKVCache != 0 {
		names = append(names, "kv_cache")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// sleep releases the executor's memory once sleep in took effect, vLLM's
// model_executor.sleep: its pause cleared the cache, so no request holds a
// KV block, and whatever the blocks held is gone. A sleep while asleep
// changes nothing (vLLM's executor warns and returns).
func (c *EngineCore) sleep(in Input) {
	if c.asleep == 0 {
		c.asleep = SleepAll
		c.sched.discardKV()
	}
	c.emit(Event{Kind: EventSleep, Call: in.Call, Held: int(c.asleep), Text: in.Mode.String(), Index: int(in.Level)})
}

// wakeUp restores in.Tags of the executor's memory, vLLM's wake_up, and
// resumes scheduling once none of it sleeps: a staged wake-up that
// restores the weights first keeps the engine paused until the KV cache
// is back. Tags that are awake already are left as they are. A KV cache
// restored holds nothing it held before the sleep (discardKV).
// core/partial-wake-resumes plants vLLM's #44395, a wake-up that resumes
// scheduling with memory still asleep.
func (c *EngineCore) wakeUp(in Input) {
	woken := in.Tags & c.asleep
	c.asleep &^= woken
	resumes := c.asleep == 0 || c.faults.Fires(failpoints.CorePartialWakeResumes)
	c.emit(Event{Kind: EventWakeUp, Call: in.Call, Held: int(c.asleep), Text: woken.String(), Finished: resumes})
	if resumes {
		c.resume(in)
	}
	c.reply(in)
}
