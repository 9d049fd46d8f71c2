package engine

import (
	"errors"
	"strconv"
	"time"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/task"
)

// Errors a caller can test with errors.Is.
var (
	// ErrDuplicateRequestID: AddRequest of an id whose request is still live
	// in the frontend.
	ErrDuplicateRequestID = errors.New("engine: duplicate request id")
	// ErrEngineDead: the engine core failed; every request in flight ends
	// with it, and every later call fails fast with it.
	ErrEngineDead = errors.New("engine: the engine core is dead")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("engine: the engine is closed")
	// ErrInvalidRequest: AddRequest was given something it cannot run.
	ErrInvalidRequest = errors.New("engine: invalid request")
	// ErrInvalidConfig: New was given a configuration it cannot run; the
	// error's sentence names the field.
	ErrInvalidConfig = errors.New("engine: invalid configuration")
	// ErrResumed: PauseGeneration's pause was overtaken by a
	// ResumeGeneration before it took effect; the engine runs.
	ErrResumed = errors.New("engine: resumed before the pause took effect")
	// ErrAsleep: ResumeGeneration found the executor asleep (Sleep) and
	// resumed nothing: the WakeUp that wakes the last of it resumes.
	ErrAsleep = errors.New("engine: the executor is asleep; WakeUp resumes the engine")
)

// configError is a refused configuration: its sentence is the field's, and
// it is an ErrInvalidConfig.
type configError struct{ err error }

func (e *configError) Error() string        { return e.err.Error() }
func (e *configError) Unwrap() error        { return e.err }
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

// NoStepTime as Config.StepTime makes the model's steps take no time: a
// zero-latency model, for benchmarks. StepTime 0 is the 1ms default, as
// every zero field of Config is a default.
const NoStepTime time.Duration = -1

// Config configures an engine. The zero value is a small real engine on the
// real runtime.
type Config struct {
	// Runtime runs the engine's tasks; nil means task.Real().
	Runtime task.Runtime
	// LegacyIDRouting routes by the caller's request id with no internal
	// ids: the pre-fix engine of the founding race, kept so that the harness
	// can show that it finds the race. Never the default.
	LegacyIDRouting bool

	// MaxNumSeqs is the most requests running at once; 0 means 256.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step; 0 means 8192.
	// It must be at least MaxNumSeqs.
	MaxNumBatchedTokens int
	// BlockSize is the number of tokens in a KV block; 0 means 16.
	BlockSize int
	// NumBlocks is the number of KV blocks, vLLM's num_gpu_blocks; one
	// is vLLM's null block, which holds no request, so requests get
	// NumBlocks−1 and it must be ≥ 2. 0 means enough for two sequences of
	// the model length and the null block.
	NumBlocks int
	// MaxModelLen is the longest sequence in tokens; 0 means 131072, and
	// it can be at most core.MaxModelLenMax (2^29).
	MaxModelLen int
	// SchedulingPolicy is vLLM's --scheduling-policy: PolicyFCFS, the
	// zero value, or PolicyPriority, which serves requests by
	// Params.Priority and preempts the least urgent running request.
	SchedulingPolicy SchedulingPolicy
	// EnablePrefixCaching is vLLM's --enable-prefix-caching: requests
	// that share a prefix of full KV blocks with one computed before take
	// its blocks instead of computing it again; see
	// core.Config.EnablePrefixCaching. vLLM v1 turns it on by default;
	// here it is off by default.
	EnablePrefixCaching bool
	// AsyncScheduling is vLLM's --async-scheduling: the core schedules a
	// step while the model runs the one before it, so adds and aborts
	// reach it with a step in flight, and a request that stops computes
	// one token more, which is dropped; see core.Config.AsyncScheduling.
	// Off by default.
	AsyncScheduling bool
	// ReserveFullSequence is vLLM's --scheduler-reserve-full-isl: a
	// waiting request is admitted only when its whole sequence fits in the
	// free KV blocks, not only the step's chunk of its prompt; see
	// core.Config.ReserveFullSequence. vLLM turns it on by default; here
	// it is off by default.
	ReserveFullSequence bool
	// EnableLoRA is vLLM's --enable-lora: a request may run with a LoRA
	// adapter (Params.LoRA), which changes the tokens it samples and the
	// KV it writes. Off by default, and a request with an adapter is then
	// refused.
	EnableLoRA bool
	// MaxLoRAs is vLLM's --max-loras: the most LoRA adapters one step's
	// batch may use, the executor's LoRA slots. A waiting request of
	// another adapter waits while they are all taken, and requests behind
	// it may go first. 0 means 1, vLLM's default; it needs EnableLoRA.
	MaxLoRAs int
	// MaxCPULoRAs is vLLM's --max-cpu-loras: the most LoRA adapters the
	// executor keeps loaded, a cache whose least recently used adapter
	// goes to make room, unless pinned (AsyncLLM.PinLoRA). 0 means
	// MaxLoRAs, vLLM's default; it needs EnableLoRA and must be at least
	// the slots.
	MaxCPULoRAs int
	// KVOffloadBlocks is vLLM's --kv-offloading-size (with
	// --kv-offloading-backend native), in KV blocks: host memory keeps
	// the full blocks requests give back, and a request whose prompt
	// continues past its prefix-cache hit with blocks it holds loads
	// them back, asynchronously, instead of computing them; the request
	// waits for the load, and one aborted meanwhile keeps its blocks until
	// the load lands. A reset of the prefix cache or a sleep drops them.
	// 0 means off; it needs EnablePrefixCaching. See
	// core.Config.KVOffloadBlocks.
	KVOffloadBlocks int
	// KVOffloadPolicy is how host memory chooses the blocks it puts out
	// to make room, vLLM's eviction_policy of its CPU offloading
	// (kv_connector_extra_config): OffloadLRU, the default, least
	// recently used first, or OffloadARC, its adaptive replacement cache.
	// Without KVOffloadBlocks it has no effect. See core.KVOffloadPolicy.
	KVOffloadPolicy KVOffloadPolicy
	// KVOffloadStoreThreshold is vLLM's store_threshold of its CPU
	// offloading (kv_connector_extra_config): a block is stored to host
	// memory only once the lookups of waiting requests have seen it this
	// many times, so that a prompt seen once takes no room there; below 2
	// every block is stored. KVOffloadTrackerSize is how many hashes it
	// counts at most, vLLM's max_tracker_size (0: 64,000). Without
	// KVOffloadBlocks neither has an effect. See
	// core.Config.KVOffloadStoreThreshold.
	KVOffloadStoreThreshold int
	KVOffloadTrackerSize    int
	// KVOffloadMaxRecomputePendingTokens is vLLM's
	// max_recompute_pending_tokens (kv_connector_extra_config): a lookup
	// whose hit ends with at most this many tokens of blocks a preempted
	// request's store still copies to host memory computes them rather
	// than wait for the copy; 0, the default, waits. See
	// core.Config.KVOffloadMaxRecomputePendingTokens.
	KVOffloadMaxRecomputePendingTokens int
	// KVLoadFailurePolicy is vLLM's kv_load_failure_policy
	// (kv_transfer_config): a request whose load from host memory failed
	// (failpoint core/kv-load-fails) ends with an error
	// (LoadFailureFail, the default) or computes the failed blocks again
	// (LoadFailureRecompute). See core.Config.KVLoadFailurePolicy.
	KVLoadFailurePolicy KVLoadFailurePolicy
	// StepTime is the model's latency per step on the runtime's clock; 0
	// means 1ms, a negative value (NoStepTime) means none (benchmarks).
	StepTime time.Duration
	// Model samples tokens; nil means core.ToyModel{}.
	Model core.Model
	// NumSpeculativeTokens is vLLM's speculative decoding with a draft
	// model (speculative_config num_speculative_tokens): after each step
	// that samples a request's token, Draft proposes its next tokens, up
	// to this many; the next step computes them, the model verifies them,
	// and the agreeing ones and one token more are kept, so that a
	// request's tokens are the same as without and come several a step
	// when the drafts agree. 0 means off; with AsyncScheduling too. Draft
	// nil means core.DraftModel{Target: Model, MissOdds: 4}. See
	// core.Config.NumSpeculativeTokens.
	NumSpeculativeTokens int
	Draft                core.Model

	// OutputChunkSize is how many frames the output handler processes
	// before it yields; 0 means 128 (vLLM's VLLM_V1_OUTPUT_PROC_CHUNK_SIZE).
	OutputChunkSize int
	// StreamInterval is how many new tokens a Delta output waits for,
	// vLLM's --stream-interval; 0 or 1 means an output for every token. As
	// in vLLM the first token and the finish go out at once, an output
	// then carries every token held back (an abort's final output too),
	// and only Delta outputs are held back: vLLM's check never holds back
	// a Cumulative one.
	StreamInterval int
	// DataParallelSize is vLLM's --data-parallel-size: that many engine
	// cores behind this one frontend, each a task of its own
	// ("engine-core-dpN") with its own scheduler, KV cache of NumBlocks,
	// prefix cache, host memory and LoRA slots, as vLLM runs the ranks of
	// a dense model: independently (an MoE model's ranks step together in
	// waves, which this engine does not model). A request goes to the core
	// its Params.DataParallelRank names, or else to the least loaded one,
	// by vLLM's internal load balancer (dp.go); its aborts go to that
	// core. A utility call (a pause, a reset, a weight update, a LoRA
	// load…) goes to every core and returns once each replied, with their
	// answers combined. 0 or 1 means one core; at most
	// MaxDataParallelSize.
	DataParallelSize int
	// Observer, if set, receives every event of the engine, in the task
	// where it happened, sometimes with the frontend's lock held: it must
	// not call back into the engine.
	Observer func(Event)
	// Faults are the failpoints the engine evaluates; nil means the
	// process-wide set (GO_FAILPOINTS, failpoints.Enable). Under the
	// simulator give each run a set of its own (failpoints.NewSet).
	Faults *failpoints.Set
}

func (c Config) coreConfig() core.Config {
	return core.Config{
		MaxNumSeqs: c.MaxNumSeqs, MaxNumBatchedTokens: c.MaxNumBatchedTokens, BlockSize: c.BlockSize,
		NumBlocks: c.NumBlocks, MaxModelLen: c.MaxModelLen, SchedulingPolicy: c.SchedulingPolicy,
		EnablePrefixCaching: c.EnablePrefixCaching, AsyncScheduling: c.AsyncScheduling, ReserveFullSequence: c.ReserveFullSequence, MaxLoRAs: c.LoRASlots(), MaxCPULoRAs: c.CPULoRAs(),
		KVOffloadBlocks: c.KVOffloadBlocks, KVOffloadPolicy: c.KVOffloadPolicy,
		KVOffloadStoreThreshold: c.KVOffloadStoreThreshold, KVOffloadTrackerSize: c.KVOffloadTrackerSize,
		KVOffloadMaxRecomputePendingTokens: c.KVOffloadMaxRecomputePendingTokens, KVLoadFailurePolicy: c.KVLoadFailurePolicy, StepTime: c.StepTime, Model: c.Model,
		NumSpeculativeTokens: c.NumSpeculativeTokens, Draft: c.Draft, DataParallelSize: int32(max(c.DataParallelSize, 1)),
		EOSTokenID: core.EOSTokenID, Observer: c.Observer, Faults: c.Faults,
	}.WithDefaults()
}

// LoRASlots is how many LoRA adapters a step may use under c: 0 with
// LoRA off, MaxLoRAs or its default with it on.
func (c Config) LoRASlots() int {
	if !c.EnableLoRA {
		return 0
	}
	if c.MaxLoRAs == 0 {
		return DefaultMaxLoRAs
	}
	return c.MaxLoRAs
}

// CPULoRAs is how many LoRA adapters the executor keeps loaded under c: 0
// with LoRA off, MaxCPULoRAs or its default, the slots, with it on.
func (c Config) CPULoRAs() int {
	if !c.EnableLoRA || c.MaxCPULoRAs == 0 {
		return c.LoRASlots()
	}
	return c.MaxCPULoRAs
}

// DefaultMaxLoRAs is Config.MaxLoRAs's default, vLLM's --max-loras.
const DefaultMaxLoRAs = 1

// Event is one thing the engine did; see core.Event.
type Event = core.Event

// FinishReason is why a request ended: "length", "stop", "abort" or "error".
type FinishReason = core.FinishReason

// Finish reasons.
const (
	FinishLength = core.FinishLength
	FinishStop   = core.FinishStop
	FinishAbort  = core.FinishAbort
	FinishError  = core.FinishError
)

// SchedulingPolicy is how the core orders waiting requests and chooses
// whom to preempt; see core.SchedulingPolicy.
type SchedulingPolicy = core.SchedulingPolicy

// KVOffloadPolicy is how host memory chooses the blocks it puts out; see
// core.KVOffloadPolicy.
type KVOffloadPolicy = core.KVOffloadPolicy

// The host-memory policies, vLLM's eviction_policy "lru" and "arc".
const (
	OffloadLRU = core.OffloadLRU
	OffloadARC = core.OffloadARC
)

// KVLoadFailurePolicy is what becomes of a request whose load from host
// memory failed; see core.KVLoadFailurePolicy.
type KVLoadFailurePolicy = core.KVLoadFailurePolicy

// The load-failure policies, vLLM's kv_load_failure_policy "fail" and
// "recompute".
const (
	LoadFailureFail      = core.LoadFailureFail
	LoadFailureRecompute = core.LoadFailureRecompute
)

// Scheduling policies.
const (
	// PolicyFCFS: first come, first served; the newest running request is
	// preempted. The default.
	PolicyFCFS = core.PolicyFCFS
	// PolicyPriority: by Params.Priority, lower first, then by arrival;
	// the running request last in that order is preempted.
	PolicyPriority = core.PolicyPriority
)

// OutputKind says what each output of a request carries, as vLLM's
// RequestOutputKind.
type OutputKind uint8

const (
	// Cumulative: every output has every token and all the text so far.
	// vLLM's default, and the zero value.
	Cumulative OutputKind = iota
	// Delta: every output has only what is new since the last one.
	Delta
	// FinalOnly: one output, when the request finishes.
	FinalOnly
)

func (k OutputKind) String() string {
	switch k {
	case Cumulative:
		return "cumulative"
	case Delta:
		return "delta"
	case FinalOnly:
		return "final-only"
	}
	return "OutputKind(" + strconv.Itoa(int(k)) + ")"
}

// Params are a request's sampling parameters.
type Params struct {
	// MaxTokens is the most tokens to generate; it must be ≥ 1.
	MaxTokens int
	// MinTokens is the fewest tokens before EOS or a stop token may end the
	// request; 0 means none. Below it they are not sampled at all, as vLLM's
	// min-tokens logits processor masks them (core.SampleAt).
	MinTokens int
	// Output is what each output carries; the zero value is Cumulative.
	Output OutputKind
	// StopTokenIDs end the request when sampled (checked in the core).
	StopTokenIDs []int
	// Stop strings end the request when they appear in the text (checked in
	// the frontend's detokenizer, which then aborts the request in the
	// core); the text is cut before the stop string.
	Stop []string
	// IgnoreEOS keeps generating past the end-of-sequence token.
	IgnoreEOS bool
	// N is how many sequences to generate from the prompt, vLLM's n
	// (parallel sampling); 0 means 1, and at most MaxN. With N > 1 the
	// request runs in the core as N requests, one per sequence, with the
	// internal ids "0_ID" … "N-1_ID" of its internal id ID, each sampling
	// its own tokens (core.SequenceKey); its outputs carry them in
	// Output.Completions, and it finishes when every sequence has.
	N int
	// LoRA is the LoRA adapter the request runs with, vLLM's
	// lora_request; nil means the base model. It needs Config.EnableLoRA.
	// Every sequence of the request runs with it.
	LoRA *LoRARequest
	// Priority is the request's place under Config.SchedulingPolicy
	// PolicyPriority, vLLM's priority: a lower value is scheduled first
	// and preempted last; requests of equal priority go in order of
	// arrival, and every sequence of a request has its priority. It must
	// be 0 under PolicyFCFS, as vLLM refuses a priority it would not
	// honour.
	Priority int
	// DataParallelRank, when set, is the data-parallel core the request
	// runs on (vLLM's data_parallel_rank), from 0 to
	// Config.DataParallelSize−1; nil lets the load balancer choose. Every
	// sequence of a request with N > 1 goes where it says; without it
	// each is balanced on its own, as vLLM adds each as a request.
	DataParallelRank *int
}

// LoRARequest names a LoRA adapter, vLLM's LoRARequest: Name is how it is
// shown, ID (vLLM's lora_int_id, from 1 to 2^31−1) is what the engine
// knows it by.
// The model's adapter ID changes every token a prompt samples, and the
// prefix cache keeps each adapter's KV apart.
type LoRARequest struct {
	Name string
	ID   int
	// LoadInplace is AddLoRA's: the adapter's new weights replace the
	// ones loaded (vLLM's load_inplace). A request's adapter must not
	// carry it.
	LoadInplace bool
}

// MaxN is the most sequences one request may ask for (Params.N).
const MaxN = 1024

// LoRAID is the id of p's LoRA adapter: 0 for the base model.
func (p Params) LoRAID() int {
	if p.LoRA == nil {
		return 0
	}
	return p.LoRA.ID
}

// sequences is how many sequences p asks for.
func (p Params) sequences() int { return max(p.N, 1) }

// Sampling returns the parameters the core samples and stops by.
func (p Params) Sampling() core.SamplingParams {
	return core.SamplingParams{MaxTokens: p.MaxTokens, MinTokens: p.MinTokens, StopTokenIDs: p.StopTokenIDs, IgnoreEOS: p.IgnoreEOS}
}

// Output is what a request produced so far, or since its last output.
type Output struct {
	// RequestID is the caller's id.
	RequestID string
	// TokenIDs are the generated tokens: all so far, or the new ones for
	// Delta. A Delta output's may share memory with the engine, which goes
	// on generating beside it: read it, or copy it before changing it.
	TokenIDs []int
	// Text is the detokenized text of TokenIDs, cut before a stop string,
	// and without the stop token that finished the request (EOS or one of
	// StopTokenIDs: its id is in TokenIDs, as in vLLM); while a request
	// runs with stop strings, the last few characters that could start one
	// are held back.
	Text string
	// Finished is set on the last output of a request.
	Finished bool
	// FinishReason is why it finished, on the last output.
	FinishReason FinishReason
	// StopReason is the stop string or the stop token id (in decimal) that
	// ended it, if one did.
	StopReason string
	// PromptTokens is the length of the prompt in tokens.
	PromptTokens int
	// Completions are the sequences of a request with N > 1 that this
	// output carries, in order of Index, as vLLM's RequestOutput.outputs:
	// each is what TokenIDs, Text, FinishReason and StopReason are for a
	// request of one sequence, which leaves those fields empty. A streamed
	// output carries the sequences that moved since the last one; the
	// FinalOnly output, every sequence. Finished is set when every
	// sequence has finished. Nil for a request of one sequence.
	Completions []Completion
}

// Completion is one sequence of a parallel-sampling request's output
// (vLLM's CompletionOutput).
type Completion struct {
	// Index is which sequence, from 0 to N−1.
	Index int
	// TokenIDs, Text, FinishReason and StopReason are as in Output, for
	// this sequence; FinishReason is set once it finished.
	TokenIDs     []int
	Text         string
	FinishReason FinishReason
	StopReason   string
}

// aborted reports whether o ended its request, or one of its sequences,
// with reason abort.
func (o *Output) aborted() bool {
	if o.FinishReason == FinishAbort {
		return true
	}
	for i := range o.Completions {
		if o.Completions[i].FinishReason == FinishAbort {
			return true
		}
	}
	return false
}
