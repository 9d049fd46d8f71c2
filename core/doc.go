// Package core is the engine core of vLLM's v1 serving engine, modelled in
// Go: a continuous-batching Scheduler with chunked prefill, paged KV blocks
// and preemption by recompute, first-come-first-served or by priority
// (SchedulingPolicy), stop checks, a deterministic Model and a toy
// Tokenizer, and the busy loop that feeds them from queues (EngineCore).
//
// KV blocks have identity, as in vLLM's BlockPool: a null block, a free
// queue in vLLM's order, reference counts and block tables, and with
// Config.EnablePrefixCaching vLLM's automatic prefix caching (full blocks
// kept by the chained hash of their prefix and taken by the next request
// that starts with it). The model reads the KV it is given: each step
// writes its tokens' KV digests into the request's blocks and a request
// samples from what they hold, so a block-management bug shows as wrong
// tokens, as on a GPU.
//
// The Scheduler, the KV accounting and the stop checks are plain methods on
// plain structs with no concurrency; EngineCore is the one task ("engine-core")
// that drives them: block when idle, drain ADD and ABORT, step, push outputs.
// Several data-parallel cores (Config.DataParallelRank and
// DataParallelSize) are each such a task, "engine-core-dpN", stamping their
// rank on their events and numbering their frames apart, and may share one
// output queue (ShareOutput).
// With Config.AsyncScheduling it is vLLM's step_with_batch_queue: it
// schedules a step while the model runs the one before, so ADD and ABORT
// arrive with a step in flight, and a step's output is applied to the
// requests that step scheduled, never to one that took an id since.
// InputPause and InputResume are vLLM's pause_scheduler and
// resume_scheduler: the core sets the Scheduler's PauseState (PausedNew:
// the waiting queue is held back; PausedAll: everything) and replies to the
// pause when it next goes idle, as vLLM's idle callbacks do.
// InputResetPrefixCache is vLLM's reset_prefix_cache, taken between two
// steps: under AsyncScheduling the requests it preempts may have a step in
// flight, whose tokens the scheduler drops when it comes back. The model
// takes a reset that succeeds as the weight update a trainer follows it
// with: KV written before it is stale, and a request that reads it samples
// wrong tokens. InputSleep and InputWakeUp are vLLM's sleep and wake_up: a
// pause that at level 1 or 2 releases the executor's memory (SleepTags)
// once it took effect, and a wake-up that resumes once none of it sleeps;
// a step with memory asleep kills the core, as a forward pass into
// released memory kills a GPU's. InputStartWeightUpdate,
// InputUpdateWeights and InputFinishWeightUpdate are vLLM's
// weight-transfer calls: the start holds scheduling (Scheduler.Hold, apart
// from the pause state, so that no resume lifts it) until the finish, and
// each is refused, with the reply's Err, while the weights sleep. A
// request's LoRA adapter (Request.LoRA) changes its tokens (LoRAKey) and
// the KV it writes, which the prefix cache keeps apart from every other
// adapter's; Config.MaxLoRAs bounds the adapters of a step's batch, as
// vLLM's scheduled_loras does, and a batch of more kills the core, as
// vLLM's worker raises for it. The executor keeps Config.MaxCPULoRAs
// adapters loaded, least recently used out first; a pinned one
// (InputPinLoRA) never leaves but by InputRemoveLoRA and holds a slot the
// scheduler counts in every step. With Config.KVOffloadBlocks the blocks
// requests give back go to host memory, and a request whose prompt
// continues with them waits while they load back, asynchronously, the
// core landing each load at a step boundary (offload.go, EventKVLoad,
// EventKVLoaded); a request's blocks are stored the same way as its steps
// fill them, all of a step's or none, an ended request's held until its
// last copy lands (EventKVStore, EventKVStored, EventKVStoreWait).
// Everything concurrent goes through package task, so the same code runs on
// goroutines and under the simulator.
//
// The caller's duties (package engine does all of this):
//
//  1. Build an EngineCore with NewEngineCore and start its Run as a task
//     named "engine-core" ("engine-core-dpN" for the core of rank N of
//     several).
//  2. Put an InputAdd for every request and an InputAbort for every abort on
//     its input queue, and mirror every abort onto its aborts queue, as
//     vLLM's input thread does, so that an abort during a step wins.
//  3. Take Outputs from its output queue until the queue closes; an Outputs
//     with Dead set means the core failed and will do nothing more; its
//     Reply answers a utility call (InputPause, InputResume, InputIsPaused,
//     InputResetPrefixCache, InputSleep, InputWakeUp, and the weight
//     update's three).
//  4. Put an InputShutdown to stop it: the core aborts every request it holds,
//     emitting an abort frame for each, and closes the output queue.
//
// Usage:
//
//	s := core.NewScheduler(core.Config{}.WithDefaults())
//	s.AddRequest(&core.Request{InternalID: "r-1", Prompt: []int{5, 6}, Params: core.SamplingParams{MaxTokens: 2}})
//	for s.HasRequests() {
//		so := s.Schedule()
//		frames := s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
//		_ = frames
//	}
package core
