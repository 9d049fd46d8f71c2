// Package engine is the frontend of vLLM's v1 serving engine, modelled in
// Go: AsyncLLM with its output processor and per-request collectors, talking
// over queues to the engine core of package core.
//
// Every request gets an internal id per incarnation (the caller's id plus a
// unique suffix, as vLLM ≥ 0.14 assigns): the core, the output queue and the
// output processor key on it, so a frame of an aborted incarnation can never
// reach a later request that reuses the id — it is dropped and counted.
// Config.LegacyIDRouting routes by the caller's id instead, which is the
// engine of the founding race report, kept so that the harness can show it
// finds that race.
//
// A request with Params.N > 1 is vLLM's parallel sampling: the frontend
// holds one state per sequence, each a child request in the core with the
// internal id "INDEX_ID" of the request's internal id ID, all feeding the
// request's one collector; Abort and Cancel abort every sequence that has
// not ended, and the outputs carry the sequences in Output.Completions.
//
// Config.SchedulingPolicy PolicyPriority is vLLM's --scheduling-policy
// priority: the core serves waiting requests by Params.Priority, lower
// first, then in order of arrival, and when KV blocks run out preempts the
// running request that comes last in that order; every sequence of a
// request has the request's priority. Under the default, PolicyFCFS, a
// Priority other than 0 is refused with ErrInvalidRequest, as vLLM refuses
// it.
//
// PauseGeneration and ResumeGeneration are vLLM's pause_generation and
// resume_generation, for a weight update between batches of rollouts: the
// core stops scheduling after aborting the requests in flight
// (PauseAbort, vLLM's default), letting the running ones finish
// (PauseWait), or freezing them where they are (PauseKeep), and resets the
// prefix cache unless PauseOptions.KeepCache. PauseGeneration returns once
// the pause took effect, with every output the core made before that in its
// request's collector. Requests added while paused are accepted and run
// after the resume. IsPaused asks the core. ResetPrefixCache is vLLM's
// reset_prefix_cache, for a weight update without a pause: refused while
// requests run, unless it may preempt them first (resetRunning), in which
// case the tokens their steps in flight sampled before it are dropped and
// sampled again. Sleep, WakeUp and IsSleeping are vLLM's sleep, wake_up and
// is_sleeping, for a trainer that shares the GPU: a pause that at level 1
// or 2 also releases the executor's weights and KV cache, and a wake-up,
// whole or staged by tag, that resumes once nothing sleeps;
// ResumeGeneration refuses a sleeping engine (ErrAsleep).
// StartWeightUpdate, UpdateWeights and FinishWeightUpdate are vLLM's
// start_weight_update, update_weights and finish_weight_update, for a
// trainer that sends new weights in batches: from the start to the finish
// the core runs no step, paused or not, whatever resumes come between
// (vLLM leaves that to a pause before it); the calls are refused while the
// weights sleep (ErrAsleep). WeightVersion is the version the last finish
// named, vLLM's get_weight_version. With Config.EnableLoRA a request may
// run with a LoRA adapter (Params.LoRA, vLLM's lora_request), which changes
// its tokens and its KV; a step runs at most Config.MaxLoRAs adapters, and
// a waiting request of another adapter waits for a slot while the requests
// behind it go first, as vLLM's scheduler does; Stats says which adapters
// run and wait (vllm:lora_requests_info). AddLoRA is vLLM's add_lora: with
// LoadInplace an adapter's new weights replace the old for every request
// of it from the next step on, and the prefix cache keeps each revision's
// blocks apart, where vLLM leaves that to a reset. The executor keeps
// Config.MaxCPULoRAs adapters loaded; ListLoRAs, RemoveLoRA and PinLoRA are
// vLLM's list_loras, remove_lora and pin_lora, a pinned adapter holding a
// slot of its own that the scheduler counts in every step.
//
// Config.KVOffloadBlocks is vLLM's native KV offloading (with prefix
// caching): host memory keeps the full blocks requests give back, and a
// request whose prompt continues past its prefix-cache hit with blocks
// there waits while they load back, its blocks given to it at once; the
// copy lands a step or two later. A request aborted meanwhile keeps its
// blocks until the copy lands, as vLLM's scheduler does. The store is
// asynchronous too, step by step as vLLM's connector stores: the blocks a
// step fills start their copy to host memory, a load finds them once
// their request ended and its copies landed, and a request that ends
// keeps its blocks until its last copies land (vLLM's delayed free until
// finished_sending); its id is the core's until then, as it is while its
// load is in flight;
// WaitIdle waits for both. A pause or a sleep takes effect once the copies
// in flight landed; a reset of the prefix cache drops what host memory
// holds (vLLM's reset_connector), is refused while a copy holds blocks
// and, when it may preempt, abandons the copies in flight, whose loading
// requests then compute again. core.EventKVLoad and core.EventKVLoaded
// tell the loads, core.EventKVStore and core.EventKVStored the stores, and
// core.EventKVStoreWait a step's blocks that wait for room in host memory
// (all or none of them is stored, as vLLM's prepare_store, and none put
// out that a store copies in, a load in flight reads or the store passes
// over). Config.KVOffloadPolicy chooses what goes to make room: least
// recently used first (vLLM's "lru"), or vLLM's adaptive replacement
// cache ("arc"). Config.KVOffloadStoreThreshold is vLLM's
// store_threshold: a block is stored only once the lookups of waiting
// requests have seen it that many times.
// Config.KVOffloadMaxRecomputePendingTokens is vLLM's
// max_recompute_pending_tokens: a lookup whose hit ends with a few tokens
// of a preempted request's store still in flight computes them again
// rather than wait for the store (HIT_PENDING).
//
// Config.NumSpeculativeTokens is vLLM's speculative decoding with a draft
// model: after each step that samples a request's token, Config.Draft
// proposes its next tokens, the next step computes them, and the model's
// tokens verify them; the agreeing ones and one token more are kept, each
// checked for a stop, so that a request's tokens are the same as without
// and a frame may carry several. A stop string that completes inside a
// frame's tokens ends the tokens there too, as vLLM's open #47616 would
// (vLLM's behaviour is engine/keeps-tokens-past-stop-string). With
// AsyncScheduling the model proposes the drafts as it samples, and the
// scheduler gives each request's next step placeholders for them, as
// vLLM's AsyncScheduler. Stats.SpecDecoding counts the drafts, under
// vLLM's vllm:spec_decode_* metrics.
//
// Config.DataParallelSize is vLLM's --data-parallel-size for a dense
// model: several engine cores behind this frontend, each a task of its
// own with its own scheduler and caches, putting their outputs on one
// queue. A request goes to the core Params.DataParallelRank names, or to
// the least loaded, by vLLM's internal load balancer (the greater of the
// sequences routed there and not ended and the requests it runs and keeps
// waiting); its aborts go to the core that holds it. A utility call goes
// to every core, the calls of several callers in one order, and returns
// once each replied, their answers combined (paused or asleep if any core
// is, a reset if every core reset); a weight update that one core refuses
// is finished on those that started it, and a sleep overtaken on some
// cores wakes those it put to sleep. Stats sums the cores and keeps each
// one's in Stats.Cores, whose metrics are labelled engine="N"; one core's
// death is the engine's, and the live cores are shut down. An MoE model's ranks, which step together in
// waves, are not modelled.
//
// If the core dies (a model that panics, an executor past its slots),
// every request it held ends with ErrEngineDead, its cause in its words,
// and every later call fails fast with it; CheckHealth, vLLM's
// check_health, says so to a server's health probe.
//
// The caller's duties:
//
//  1. Build the engine with New from inside a task of the Runtime it runs on
//     (task.Real() by default, or a simulated one).
//  2. Read every request to its end: Next until the Finished output, after
//     which Next returns io.EOF; or range over Generate; or Cancel it.
//  3. Reuse a request id freely once its request ended or was aborted; use
//     WaitIdle, not HasUnfinishedRequests, to know that the core is quiescent.
//  4. Close the engine: it aborts what is left, stops every task, and may be
//     called again. A test may then call CheckKV: every KV block the core
//     handed out must have come back (props.Checker.CheckKV records it as
//     a property). The core also checks it as it runs: whenever it holds
//     no request it must hold no block, and it reports one that outlived
//     its request to the Observer (core.EventKVLeak).
//
// Usage:
//
//	e, err := engine.New(engine.Config{})
//	if err != nil { ... }
//	defer e.Close()
//	for out, err := range e.Generate(ctx, "req-1", "hello", engine.Params{MaxTokens: 8, Output: engine.Delta}) {
//		if err != nil { ... }
//		fmt.Print(out.Text)
//	}
package engine
