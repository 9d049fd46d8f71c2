package failpoints

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
)

// fullPrefix makes a catalogue name a full failpoint name, as failpoint-ctl
// names them: the package path and the name.
const fullPrefix = "github.com/llmdst/llmdst/"

// Point is a named place in the engine where a fault can be injected.
type Point struct {
	// Name is the short name: "core/stall-before-abort".
	Name string
	// Doc says what happens when it fires.
	Doc string
	// Terms says which terms it accepts and what its value means.
	Terms string

	// Bug marks a failpoint that plants a bug rather than a fault the
	// engine must survive: armed, the engine is wrong on purpose, for a
	// checker to catch. All and Names leave bugs out, so that a run that
	// draws faults from the catalogue never draws one; Bugs lists them.
	Bug bool

	// checkValue says what is wrong with a return term's value, by Terms;
	// nil takes any value.
	checkValue func(v string) error

	armed atomic.Bool // armed in the process-wide set
}

// FullName is the name in pingcap's registry and in GO_FAILPOINTS.
func (p *Point) FullName() string { return fullPrefix + p.Name }

var catalogue = map[string]*Point{}

func register(p *Point) *Point {
	if _, dup := catalogue[p.Name]; dup {
		panic("failpoints: duplicate failpoint " + p.Name)
	}
	catalogue[p.Name] = p
	return p
}

const delayTerms = "return(MICROSECONDS) or return(\"DURATION\") — the delay, on the runtime's clock; return alone means 1ms"

// The catalogue.
var (
	CoreStallBeforeAbort = register(&Point{Name: "core/stall-before-abort",
		Doc:   "the engine core stalls before it processes an abort, so that the aborted request keeps running meanwhile",
		Terms: delayTerms, checkValue: checkDelay})
	CoreStallMidStep = register(&Point{Name: "core/stall-mid-step",
		Doc:   "the engine core stalls in the middle of a step, after the model ran and before it processes aborts and updates requests",
		Terms: delayTerms, checkValue: checkDelay})
	OutputHandlerStall = register(&Point{Name: "engine/output-handler-stall",
		Doc:   "the output handler stalls before it processes a batch of the core's outputs",
		Terms: delayTerms, checkValue: checkDelay})
	ModelPanic = register(&Point{Name: "core/model-panic",
		Doc:   "the model panics during a step: the engine dies, every request in flight ends with ErrEngineDead and later calls fail fast",
		Terms: "panic, or return (the value is the panic's message)"})
	CoreOutputLate = register(&Point{Name: "core/output-late",
		Doc:   "a batch of the core's outputs is delivered late: the core holds it before putting it on the output queue",
		Terms: delayTerms, checkValue: checkDelay})
	AbortAfterAdd = register(&Point{Name: "engine/abort-after-add",
		Doc:   "the core's input queue delivers an ABORT after a later ADD: the frontend holds the abort until it sends its next request (the reordering that leaks requests when ids are reused)",
		Terms: "return", checkValue: checkNoValue})
	ClientAbandon = register(&Point{Name: "engine/client-abandon",
		Doc:   "a client abandons a Generate stream without reading it and without cancelling it: the request runs on unread",
		Terms: "return", checkValue: checkNoValue})

	// Bugs.

	CoreKVKeepEvictedHash = register(&Point{Name: "core/kv-keep-evicted-hash", Bug: true,
		Doc:   "a bug: when the prefix cache evicts a cached KV block to hand it out for new content, the block's hash stays in the cache's map, so a later request with that prefix hits a block whose content was overwritten and samples wrong tokens (Config.EnablePrefixCaching only)",
		Terms: "return", checkValue: checkNoValue})
	CoreKVKeepUnwrittenHash = register(&Point{Name: "core/kv-keep-unwritten-hash", Bug: true,
		Doc:   "a bug, vLLM's open #43569: a request scheduled in a step and then taken back as the victim of a later one keeps in the prefix cache the hashes its blocks got when they were allocated for that step, which never wrote them; a later request whose prompt continues its sequence hits a block that holds nothing (Config.EnablePrefixCaching and PolicyPriority only)",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLeakOnAbort = register(&Point{Name: "core/kv-leak-on-abort", Bug: true,
		Doc:   "a bug: the core lets go of a request a client aborted without giving its KV blocks back, so they stay held by no request and the cache shrinks with every abort until nothing more can be admitted — the leak of vLLM's #46283 and vllm-ascend's #16662, where an aborted request's blocks wait for a signal that never comes (the core reports it as it goes empty, core.EventKVLeak, and engine.AsyncLLM.CheckKV after Close)",
		Terms: "return", checkValue: checkNoValue})
	CoreAbortLeavesRequestRunning = register(&Point{Name: "core/abort-leaves-request-running", Bug: true,
		Doc:   "a bug, the class of vLLM's #23697 (a request left running in the core that the frontend no longer knows, after its abort): the core takes a client's abort of a request it holds and reports it, but does not finish it, so the request runs on to its end for nobody, its steps and KV blocks spent on output every collector drops",
		Terms: "return", checkValue: checkNoValue})
	CoreAsyncOutputByID = register(&Point{Name: "core/async-output-by-id", Bug: true,
		Doc:   "a bug, vLLM's #42492 (fixed by #42523): with async scheduling the scheduler applies a step's output to whichever request holds the scheduled request's id when the output comes back, so a request aborted with a step in flight and added again under the same id takes the old one's token as its first, its own tokens one place late; when it has no placeholder yet (its step in flight is a chunk of its prompt), its count of output placeholders goes below zero and the core dies on vLLM's assertion (Config.AsyncScheduling with ids reused in the core: legacy id routing)",
		Terms: "return", checkValue: checkNoValue})
	CorePauseLastModeWins = register(&Point{Name: "core/pause-last-mode-wins", Bug: true,
		Doc:   "a bug, vLLM's behaviour: a pause while paused sets the scheduler's pause state to its own mode's, so a wait after a keep lets the requests the keep froze step again before anyone resumed — the keep's caller, mid weight update, was promised none would (the engine keeps the stricter state)",
		Terms: "return", checkValue: checkNoValue})
	CoreResetDiscardsUnconditionally = register(&Point{Name: "core/reset-discards-unconditionally", Bug: true,
		Doc:   "a bug, vLLM's #42043 (fixed by #42117): a reset of the prefix cache that preempts the running requests marks each to drop its next output, whether or not a step of it is in flight, where only a token sampled before the reset is stale; after a keep pause that clears the cache the engine is idle, nothing is in flight, and each frozen request drops the first token it samples after the resume, its later tokens one place early (Config.AsyncScheduling only)",
		Terms: "return", checkValue: checkNoValue})
	CoreResetClearsNothing = register(&Point{Name: "core/reset-clears-nothing", Bug: true,
		Doc:   "a bug, vllm-omni's #6739 (its reset a stub) and the stale KV of lmdeploy's #4917: a reset of the prefix cache reports success and changes nothing, neither preempting the running requests nor dropping a hash, after the weights it follows changed; the running requests go on from KV the old weights computed, and a later request with a cached prefix hits it, both sampling from stale KV (the model stamps KV with the weights it was written under; Config.EnablePrefixCaching for the hits)",
		Terms: "return", checkValue: checkNoValue})
	CorePartialWakeResumes = register(&Point{Name: "core/partial-wake-resumes", Bug: true,
		Doc:   "a bug, vLLM's #44395 (fixed by #44483): a wake-up resumes scheduling even when it leaves some of the executor's memory asleep, so that after WakeUp(\"weights\") of a staged wake-up — the KV cache still released — the requests that waited through the sleep run a forward pass into released memory, an illegal memory access that kills the core",
		Terms: "return", checkValue: checkNoValue})
	CoreResumeWhileAsleep = register(&Point{Name: "core/resume-while-asleep", Bug: true,
		Doc:   "a bug, vLLM's behaviour: a resume resumes scheduling while the executor sleeps (resume_scheduler sets the state it is given), so a request that waits through a sleep runs a forward pass into released memory, an illegal memory access that kills the core; the engine refuses such a resume (ResumeGeneration returns ErrAsleep) and lets the wake-up resume",
		Terms: "return", checkValue: checkNoValue})
	CoreSleepKeepsPrefixCache = register(&Point{Name: "core/sleep-keeps-prefix-cache", Bug: true,
		Doc:   "a bug, vLLM's #17103 and #16234 (fixed for online serving by #22726) and vllm-omni's #6442: a sleep of level 1 or 2 releases the KV cache without resetting the prefix cache, so after the wake-up a request whose prompt starts with a cached prefix attends KV that is gone, and under PauseKeep the frozen requests go on from it; both sample meaningless tokens",
		Terms: "return", checkValue: checkNoValue})
	CoreResetKeepsStaleToken = register(&Point{Name: "core/reset-keeps-stale-token", Bug: true,
		Doc:   "a bug: a reset of the prefix cache that preempts the running requests clears their output placeholders but keeps the tokens of their steps in flight, which were sampled before it; each comes back on top of the request's recomputed sequence, which samples that position again, so the request gets a token twice and the rest one place late — the redundant token vLLM's discard_latest_async_tokens exists to drop (Config.AsyncScheduling only)",
		Terms: "return", checkValue: checkNoValue})
	EnginePauseReplyOvertakes = register(&Point{Name: "engine/pause-reply-overtakes", Bug: true,
		Doc:   "a bug, vLLM's order: the core's reply to a pause reaches PauseGeneration ahead of the outputs the core put before it, as vLLM's client resolves a utility call on the thread that reads the core's socket, and PauseGeneration then sleeps 20 ms, as vLLM's pause_generation does so that those outputs come first; an output handler descheduled for longer leaves a request the pause aborted without its final output when PauseGeneration returns",
		Terms: "return", checkValue: checkNoValue})
	EngineDPAbortMisrouted = register(&Point{Name: "engine/dp-abort-misrouted", Bug: true,
		Doc:   "a bug: an abort is routed as a new request would be, to the core the load balancer chooses now, not to the core that holds the request, as a frontend that forgets where it sent each request does; the request's own core never hears of it and runs it to its end for nobody, its blocks held meanwhile, and the other core drops an abort of an id it never held (Config.DataParallelSize > 1 only)",
		Terms: "return", checkValue: checkNoValue})
	EngineDPCallsSplit = register(&Point{Name: "engine/dp-calls-split", Bug: true,
		Doc:   "a bug, vLLM's data-parallel client (call_utility_async gathers the engines' replies and returns the first): a utility call goes to the cores one after another with nothing ordering two callers' calls, and nothing mends a split outcome; a resume that overtakes a sleep on one core but not another leaves that core asleep while Sleep says the engine runs, and a weight update one core refuses stays open on the others, its caller told it failed: requests on those cores wait for ever (Config.DataParallelSize > 1 only)",
		Terms: "return", checkValue: checkNoValue})
	CoreSpecTakesTokensAtOnce = register(&Point{Name: "core/spec-takes-tokens-at-once", Bug: true,
		Doc:   "a bug, the class of sglang's #31599 and ArcticInference's #161: the tokens a step keeps with speculative decoding (Config.NumSpeculativeTokens) are appended at once and only the last is checked for a stop, so a stop token among them, or MaxTokens reached before the last, lets the tokens after it through: the request goes on past its end; vLLM's _update_request_with_output checks each token, as the engine does",
		Terms: "return", checkValue: checkNoValue})
	CoreSpecPlaceholdersOutliveTheirWindow = register(&Point{Name: "core/spec-placeholders-outlive-their-window", Bug: true,
		Doc:   "a bug, vLLM's before its #46899 (its issue #37159): with speculative decoding and async scheduling (Config.NumSpeculativeTokens, Config.AsyncScheduling) a running request keeps the draft placeholders a step gave it when the next step passes it over (its token budget spent, a pause, a step that schedules nothing), and when it is scheduled again they reach the model, whose worker holds drafts only for the requests of its last step: token -1 at the model's input, a device-side assert, the engine dead",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadFails = register(&Point{Name: "core/kv-load-fails",
		Doc:   "a fault: with KV offloading (Config.KVOffloadBlocks), a load from host memory lands with its last block's KV not the one host memory held, and the connector reports that block in invalid_block_ids; by Config.KVLoadFailurePolicy the request ends with an error (vLLM's kv_load_failure_policy fail, the default) or keeps the blocks before it and computes from there (recompute); host memory then forgets the failed block, as vLLM's tiers mark their lookup verdict for it a miss (its #49328), so that a request left with nothing loaded, which looks up again, computes it rather than load it again (core/kv-load-failed-block-kept). vLLM's native CPU connector asserts its jobs succeed, and its worker dies (its #39732, #52838): the engine models the recovery its other connectors report to",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadCachesInvalidBlocks = register(&Point{Name: "core/kv-load-caches-invalid-blocks", Bug: true,
		Doc:   "a bug, the class of vLLM's #53298 (invalid blocks left in the prefix cache for new requests to reuse): with Config.KVLoadFailurePolicy recompute, a load whose last block failed (core/kv-load-fails) caches every block it brought, the failed one too, so a request that finds it in the GPU's prefix cache before its owner computes it again reads KV that is not its prompt's",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadedWaitsBehindBlocked = register(&Point{Name: "core/kv-loaded-waits-behind-blocked", Bug: true,
		Doc:   "a bug, the class of vLLM's #45387 (a permanent deadlock under KV pressure with a KV-offloading connector: no request running, requests waiting, the cache full) and of its open #57841: with KV offloading (Config.KVOffloadBlocks), a request whose KV landed from host memory is not admitted first but waits at its place in the queue, behind a request that could not be admitted, as any other does; it holds the blocks of its whole prompt, which the one ahead of it may need, and with nothing running nothing gives any back: every step schedules nothing. The engine's guard ends the spin: a step that schedules nothing, with nothing running, in flight or landing, kills the core",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadFailedBlockKept = register(&Point{Name: "core/kv-load-failed-block-kept", Bug: true,
		Doc:   "a bug, vLLM's before its #49328 (its #49176: a failed load livelocks the request): host memory keeps a block whose load failed (core/kv-load-fails) and goes on offering it to lookups; under Config.KVLoadFailurePolicy recompute a request whose load of the prompt's first block failed gives its blocks back, looks up again, and loads the block again, and with a connector that fails every load (core/kv-load-fails=return) it does so for ever, never ending",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadRetryLeavesCoreIdle = register(&Point{Name: "core/kv-load-retry-leaves-core-idle", Bug: true,
		Doc:   "a bug, local-inference-lab/vllm's #191 (a recompute after a failed KV load does not wake an idle engine): under Config.KVLoadFailurePolicy recompute, when the copies that land are only loads that failed (core/kv-load-fails) and sent their requests back to compute, the core keeps the stall it took while they were in flight and waits for an input, its requests waiting meanwhile: they go on only when another request or call arrives, and never when none does",
		Terms: "return", checkValue: checkNoValue})
	CoreMaxNumSeqsCountsDeferred = register(&Point{Name: "core/max-num-seqs-counts-deferred", Bug: true,
		Doc:   "a bug, the class of vLLM's #53130 (the scheduler stops admitting for good once its running requests and those deferred in skipped_waiting reach max_num_seqs; its open #54348 would mend it): with KV offloading (Config.KVOffloadBlocks), the waiting requests whose KV loads from host memory or has landed count toward Config.MaxNumSeqs beside the running ones, and the admission loop stops before it reaches them: once they are as many as the cap with nothing running, no step admits anything again, the landed requests among them neither. The engine's guard against a step of nothing kills the core",
		Terms: "return", checkValue: checkNoValue})
	CoreKVStoreForgottenOnPreempt = register(&Point{Name: "core/kv-store-forgotten-on-preempt", Bug: true,
		Doc:   "a bug, the class of vLLM's #49829 (HIT_PENDING has no deadline) and #46019 (store jobs never reported): with KV offloading (Config.KVOffloadBlocks), the last copy of a preempted request's store lands and host memory is never told it completed, so its blocks stay on their way for ever: the request waits for its own store to be admitted again, and so does every request that would load those blocks — for ever",
		Terms: "return", checkValue: checkNoValue})
	CoreSpecRejectsBeforeDiscard = register(&Point{Name: "core/spec-rejects-before-discard", Bug: true,
		Doc:   "a bug, vLLM's before its #46066: with speculative decoding and async scheduling (Config.NumSpeculativeTokens, Config.AsyncScheduling), the output of a step in flight when a reset of the prefix cache preempted its request takes the step's rejected drafts off the request as it is now — its computed tokens and output placeholders, which count its steps since it was admitted again — before it is dropped: the placeholders fall short of the steps in flight, and the request's next output finds none left (vLLM's assert), the engine dead",
		Terms: "return", checkValue: checkNoValue})
	CoreDiscardCountsFrames = register(&Point{Name: "core/discard-counts-frames", Bug: true,
		Doc:   "a bug, vLLM's (its open #49620 would mend it): with speculative decoding and async scheduling (Config.NumSpeculativeTokens, Config.AsyncScheduling), a reset of the prefix cache marks a preempted request's output placeholders to drop — a step in flight counts its token and its drafts — and each output that comes back drops one: after the stale step, as many of the request's later outputs as the step had drafts are dropped too, their tokens lost to the scheduler while the model goes on from them",
		Terms: "return", checkValue: checkNoValue})
	EngineKeepsTokensPastStopString = register(&Point{Name: "engine/keeps-tokens-past-stop-string", Bug: true,
		Doc:   "a bug, vLLM's behaviour (its open #47616 would mend it): with several tokens a step (Config.NumSpeculativeTokens), a stop string that completes in the text of a token before the step's last cuts the text there but leaves the step's later tokens in the output's TokenIDs: the caller gets tokens past the request's end, which its text does not show",
		Terms: "return", checkValue: checkNoValue})
	CoreUpdateKeepsScheduling = register(&Point{Name: "core/update-keeps-scheduling", Bug: true,
		Doc:   "a bug, vLLM's behaviour: a weight update (start_weight_update, update_weights, finish_weight_update) holds nothing back, so when no pause came before it the core steps between its calls, each forward pass over weights half replaced — the race vime's #168 hangs in and NeMo RL's keep pause is there to close; the engine holds scheduling from the start to the finish",
		Terms: "return", checkValue: checkNoValue})
	CoreUpdateHoldsByPausing = register(&Point{Name: "core/update-holds-by-pausing", Bug: true,
		Doc:   "a bug: a weight update holds scheduling by setting the scheduler's pause state, and its finish unpauses, so a resume from another controller in the middle of the update lets the core step over weights half replaced, and the finish undoes a pause its caller took before it, whose requests then step before anyone resumed",
		Terms: "return", checkValue: checkNoValue})
	CoreUpdateWhileAsleep = register(&Point{Name: "core/update-while-asleep", Bug: true,
		Doc:   "a bug, vLLM's #57853: a weight update while the executor's weights sleep writes into released memory and kills the core, where it should be refused; the engine refuses it (the call returns ErrAsleep) until WakeUp(\"weights\")",
		Terms: "return", checkValue: checkNoValue})
	CorePrefixCacheIgnoresLoRA = register(&Point{Name: "core/prefix-cache-ignores-lora", Bug: true,
		Doc:   "a bug, the one vLLM's block hashes exist to prevent (they take the adapter's name among their extra keys): the prefix cache keys a block by its tokens alone, so a request of one LoRA adapter takes the blocks of a prompt another adapter, or the base model, computed, and attends KV its own weights never wrote; it samples meaningless tokens (Config.EnablePrefixCaching with LoRA only)",
		Terms: "return", checkValue: checkNoValue})
	CoreLoRALimitForgetsRunning = register(&Point{Name: "core/lora-limit-forgets-running", Bug: true,
		Doc:   "a bug: the scheduler counts toward max_loras only the adapters of the waiting requests it admits in a step, not those of the running requests it scheduled first, as vLLM's scheduled_loras does, so a step's batch can ask for more adapters than the executor has slots; vLLM's worker then raises \"Number of requested LoRAs … is greater than the number of GPU LoRA slots\" and the core dies",
		Terms: "return", checkValue: checkNoValue})
	CoreLoRASlotLeftWhenPassedOver = register(&Point{Name: "core/lora-slot-left-when-passed-over", Bug: true,
		Doc:   "a bug, vLLM's behaviour: scheduled_loras counts the running requests the step scheduled, so one it passes over (num_new_tokens 0: at max_model_len behind the optimistic tokens of async scheduling and speculative decoding, which a rejected draft takes back) leaves its adapter's slot to a waiting request of another adapter, and at the next step, both running, the batch asks for more adapters than max_loras (vLLM's scheduler asserts len(scheduled_loras) <= max_loras) and the core dies; the engine keeps a passed-over request's slot, but for one whose end is in flight",
		Terms: "return", checkValue: checkNoValue})
	CoreLoRAReloadKeepsPrefixCache = register(&Point{Name: "core/lora-reload-keeps-prefix-cache", Bug: true,
		Doc:   "a bug, vLLM's behaviour: the prefix cache keys an adapter's blocks by the adapter alone, not by the revision of its weights, so after add_lora with load_inplace a new request of it takes blocks the old weights computed and goes on from KV of the old policy (vLLM's RFC #48297 asks callers to reset the prefix cache after such an update); the engine keys them with the revision",
		Terms: "return", checkValue: checkNoValue})
	CoreLoRAPinIgnoresSlots = register(&Point{Name: "core/lora-pin-ignores-slots", Bug: true,
		Doc:   "a bug, vLLM's behaviour: pin_lora pins any loaded adapter into an executor slot at once and the scheduler does not count pinned adapters toward max_loras, so a step whose batch needs the slots a pin holds finds every one it could take pinned, and the worker raises \"All items are pinned, cannot remove oldest from the cache\" (pinning an adapter while another runs with max_loras 1 kills the engine); the engine counts a pin's slot in every step and refuses a pin that would take a slot a running request uses or the last one",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadFreesOnAbort = register(&Point{Name: "core/kv-load-frees-on-abort", Bug: true,
		Doc:   "a bug: a request aborted while its KV loads from host memory (Config.KVOffloadBlocks) gives its blocks back at once, and the copy still writes them when it lands, over the KV of whichever request took them; vLLM's scheduler keeps an aborted request's blocks until the load lands (finished_recving), as the engine does",
		Terms: "return", checkValue: checkNoValue})
	CoreKVStoreFreesEarly = register(&Point{Name: "core/kv-store-frees-early", Bug: true,
		Doc:   "a bug: a request that ends while its blocks are being stored to host memory (Config.KVOffloadBlocks) gives them back at once, and the store reads them when it lands, whoever took them since, keeping their KV under the ended request's hashes for a later load to bring back; vLLM's connector asks the scheduler to delay the free until the store lands (request_finished, finished_sending), as the engine does",
		Terms: "return", checkValue: checkNoValue})
	CoreKVEvictWhileLoading = register(&Point{Name: "core/kv-evict-while-loading", Bug: true,
		Doc:   "a bug: host memory (Config.KVOffloadBlocks), short of room for the blocks a step filled, puts out blocks a load in flight still reads, and a store's copy into their slots overwrites the KV the load then brings back; vLLM's prepare_store puts out only blocks whose ref_cnt is 0, held from prepare_load to complete_load, as the engine does",
		Terms: "return", checkValue: checkNoValue})
	CoreKVLoadForgottenOnAbort = register(&Point{Name: "core/kv-load-forgotten-on-abort", Bug: true,
		Doc:   "a bug: a KV load from host memory (Config.KVOffloadBlocks) whose request was aborted before it landed gives the request's blocks back when it lands, but host memory is never told it landed (vLLM's complete_load, at finished_recving): its blocks stay read by a load, so host memory never puts them out, and every later request whose prompt continues with them waits for that load, for ever — the wait of vLLM's #49829, where a request whose prefix reaches a block whose write never completes is deferred every step until its client gives up; vLLM's connector completes every load that lands, its request live or not, as the engine does",
		Terms: "return", checkValue: checkNoValue})
	CoreResetKeepsOffloadedKV = register(&Point{Name: "core/reset-keeps-offloaded-kv", Bug: true,
		Doc:   "a bug, vLLM's default: reset_prefix_cache leaves the KV offloaded to host memory (reset_connector=False), computed by the weights before the update the reset stands for, and a later request whose prompt continues with it loads it and samples from stale KV; the engine drops it with the prefix cache, as reset_connector=True does",
		Terms: "return", checkValue: checkNoValue})
)

// Lookup returns the failpoint, fault or bug, with the short or full name.
func Lookup(name string) (*Point, error) {
	p, err := lookup(name)
	if err != nil {
		return nil, fmt.Errorf("failpoints: %w", err)
	}
	return p, nil
}

// lookup is Lookup, its error without the package's name, for a caller
// that says where the name came from first.
func lookup(name string) (*Point, error) {
	if p, ok := catalogue[strings.TrimPrefix(name, fullPrefix)]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("unknown failpoint %q: want one of %s", name, strings.Join(append(Names(), names(true)...), ", "))
}

// All returns the faults of the catalogue, sorted by name: every failpoint
// but the bugs.
func All() []*Point { return points(false) }

// Bugs returns the failpoints that plant bugs, sorted by name.
func Bugs() []*Point { return points(true) }

func points(bug bool) []*Point {
	var ps []*Point
	for _, n := range names(bug) {
		ps = append(ps, catalogue[n])
	}
	return ps
}

// Names returns the short names of the faults, sorted: every failpoint but
// the bugs.
func Names() []string { return names(false) }

func names(bug bool) []string {
	var ns []string
	for n, p := range catalogue {
		if p.Bug == bug {
			ns = append(ns, n)
		}
	}
	sort.Strings(ns)
	return ns
}
