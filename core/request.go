package core

import (
	"math"
	"slices"
	"strconv"
)

// Status is where a request is in the core.
type Status uint8

const (
	StatusWaiting Status = iota
	StatusRunning
	StatusPreempted // back in the waiting queue, its KV blocks freed
	StatusFinishedStopped
	StatusFinishedLength
	StatusFinishedAborted
	StatusFinishedError
)

var statusNames = [...]string{"waiting", "running", "preempted", "finished_stopped", "finished_length_capped", "finished_aborted", "finished_error"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Finished reports whether s is a final status.
func (s Status) Finished() bool { return s >= StatusFinishedStopped }

// FinishReason is why a request ended, as vLLM names it.
type FinishReason string

const (
	FinishNone   FinishReason = ""
	FinishLength FinishReason = "length"
	FinishStop   FinishReason = "stop"
	FinishAbort  FinishReason = "abort"
	FinishError  FinishReason = "error"
)

// Reason maps a final status to its finish reason.
func (s Status) Reason() FinishReason {
	switch s {
	case StatusFinishedStopped:
		return FinishStop
	case StatusFinishedLength:
		return FinishLength
	case StatusFinishedAborted:
		return FinishAbort
	case StatusFinishedError:
		return FinishError
	}
	return FinishNone
}

// SamplingParams are the parts of vLLM's SamplingParams the core checks.
type SamplingParams struct {
	MaxTokens    int   // ≥ 1
	MinTokens    int   // EOS and stop tokens do not stop a request below this
	StopTokenIDs []int // a sampled token in this set stops the request
	IgnoreEOS    bool
}

// StopsOn reports whether sampling token t stops a request with these
// parameters once it has MinTokens tokens: eos unless ignored, or one of
// its stop tokens.
func (p *SamplingParams) StopsOn(t, eos int) bool {
	return (t == eos && !p.IgnoreEOS) || slices.Contains(p.StopTokenIDs, t)
}

// Request is a request as the core holds it: one incarnation of a
// caller's request id.
type Request struct {
	// InternalID is the key of the request in the core and the output
	// queue: the external id plus a unique suffix, or the external id itself
	// in legacy routing.
	InternalID string
	// ExternalID is the caller's request id.
	ExternalID string
	// Incarnation numbers the AddRequest call that made this request, for
	// provenance only: it is carried by every frame, never used to route.
	Incarnation uint64
	// Index is which of the N sequences of a parallel-sampling request
	// this is (vLLM's child request "INDEX_PARENT"), 0 for a request of one
	// sequence. Each sequence samples with a key of its own (SequenceKey).
	Index int
	// Priority places the request under PolicyPriority: a lower value is
	// served first and preempted last, as vLLM's priority; every sequence
	// of a request has its request's. Under PolicyFCFS it is not read.
	Priority int
	// LoRA is the LoRA adapter the request runs with, vLLM's
	// lora_int_id: 0 for the base model. Every sequence of a request has
	// its request's. The adapter changes the tokens it samples (LoRAKey)
	// and the KV it writes, so its KV is cached apart from every other
	// adapter's; a step runs at most Config.MaxLoRAs adapters.
	LoRA   int
	Prompt []int
	Params SamplingParams

	Output      []int // sampled tokens
	NumComputed int   // tokens whose KV is computed
	Status      Status
	// loraWaited is set while r waits in the queue after the scheduler
	// first held it back for a LoRA slot, so that it is told once;
	// cacheKeys is what of its adapter the prefix cache's keys of its
	// blocks take (cacheSalt); storeWaits is set, with KV offloading,
	// while blocks r filled wait for room in host memory, and loadHeld
	// while the scheduler holds r back before its lookup of host memory
	// (why: a load in flight of blocks it would load, or too many loads
	// in flight), so that each is told once. They and kvLoad share
	// Status's word.
	loraWaited  bool
	cacheKeys   cacheKeys
	storeWaits  bool
	loadHeld    loadStart
	kvLoad      kvLoadState // with KV offloading, where r is in a load of its KV (offload.go)
	StopReason  int         // the stop token that ended it, or -1
	Blocks      int         // KV blocks held: len(BlockTable())
	Preemptions int
	// Placeholders counts, with Config.AsyncScheduling, the tokens that
	// steps scheduled and not yet applied will sample for the request:
	// vLLM's num_output_placeholders. A step is scheduled while the one
	// before it runs; NumComputed counts the tokens both compute, and the
	// request's next step computes its placeholder too. It stays 0 without
	// AsyncScheduling.
	Placeholders int

	key uint64 // the model's summary of the prompt, with its adapter's
	// loraSalt tells the KV r's adapter wrote, at the revision of its
	// weights r was admitted under, and its cache keys, from the base
	// model's and every other adapter's or revision's (kv.go): 0 for the
	// base model. Set as r is admitted (Scheduler.saltLoRA).
	loraSalt uint64

	// table is the request's block table: the ids of the KV blocks it
	// holds, in order of position, vLLM's req_to_blocks.
	table []int32
	// hashes are the digests of the prefixes that end each full block of
	// its known tokens, prompt and output: vLLM's request.block_hashes,
	// the keys of the prefix cache and what the model expects its full
	// blocks to hold. tail is the digest of its first hashed tokens, its
	// whole known sequence once the scheduler has seen it.
	hashes []uint64
	tail   uint64
	hashed int
	// cachedBlocks is how many of its blocks, from the first, are in the
	// prefix cache: vLLM's num_cached_block.
	cachedBlocks int
	// kvChecked is the scheduler's kvEpoch+1 when the request last read
	// every block it holds; 0 means it must read them all at its next step
	// (it was admitted, and holds blocks it did not write).
	kvChecked uint64
	// kvGarbage is nonzero when what the request read at its last step was
	// not its own sequence: the digest of what it read, which it samples
	// with instead of its key.
	kvGarbage uint64
	// kvLast is the digest r's sequence expects up to position kvLastAt−1,
	// the last it wrote: where its next step's writes chain from. Not
	// stamped (kv.go): a request preempted before a reset may chain from
	// it after.
	kvLast   uint64
	kvLastAt int
	// sampled are, with Config.AsyncScheduling, the tokens the model
	// sampled for the request in steps whose outputs the scheduler has not
	// applied yet, oldest first: what a GPU keeps of its last step for the
	// next, which the scheduler only knows as placeholders.
	sampled []int
	// spec is r's speculative decoding, with Config.NumSpeculativeTokens
	// (spec.go), made at its first draft; nil without.
	spec *reqSpec
	// discard counts the outputs of steps in flight that Placeholders no
	// longer counts: steps a reset of the prefix cache preempted the
	// request under (Scheduler.ResetPrefixCache), whose tokens were
	// sampled for a sequence it now computes again. They are dropped when
	// they come back, vLLM's discard_latest_async_tokens. It stays 0
	// without AsyncScheduling, as Placeholders does.
	discard int

	// Room for a short request's table and hashes, so that they cost no
	// allocation of their own.
	tableRoom   [8]int32
	hashesRoom  [8]uint64
	sampledRoom [2]int
}

// BlockTable returns the ids of the KV blocks the request holds, in order
// of position; it is the scheduler's and must not be changed.
func (r *Request) BlockTable() []int32 { return r.table }

// tokenAt returns the token at position p of the sequence as the model
// knows it: the known sequence, then the tokens sampled and not yet
// applied, then the draft tokens.
func (r *Request) tokenAt(p int) int {
	if p < len(r.Prompt) {
		return r.Prompt[p]
	}
	if p -= len(r.Prompt); p < len(r.Output) {
		return r.Output[p]
	}
	if p -= len(r.Output); p < len(r.sampled) {
		return r.sampled[p]
	}
	return r.spec.drafts[p-len(r.sampled)]
}

// endsInFlight reports, under AsyncScheduling, whether a step in flight
// samples r's last token (MaxTokens) whatever it keeps of its drafts: vLLM
// schedules r no step that could only be dropped.
func (r *Request) endsInFlight() bool { return r.endsInFlightAt(math.MaxInt) }

// endsInFlightAt reports, under AsyncScheduling, whether the steps in
// flight end r whatever they keep of its drafts: at MaxTokens, or at the
// model length maxModelLen.
func (r *Request) endsInFlightAt(maxModelLen int) bool {
	// (NumComputed+1) − (Placeholders−1): the tokens known once the steps
	// in flight land, should every draft among them be rejected.
	return r.Placeholders > 0 && r.NumComputed+2-r.Placeholders >= min(len(r.Prompt)+r.Params.MaxTokens, maxModelLen)
}

// NumTokens is the length of the sequence: prompt and output.
func (r *Request) NumTokens() int { return len(r.Prompt) + len(r.Output) }

// cacheKeys is what of a request's adapter the prefix cache's keys of its
// blocks take: the adapter and the revision of its weights, unless a
// planted bug leaves one out.
type cacheKeys uint8

const (
	keysByRevision     cacheKeys = iota // the engine's
	keysIgnoreLoRA                      // core/prefix-cache-ignores-lora
	keysIgnoreRevision                  // core/lora-reload-keeps-prefix-cache, vLLM's
)

// cacheSalt is what r mixes into the prefix cache's keys of its blocks:
// its loraSalt, or less under a planted bug; 0 for the base model.
func (r *Request) cacheSalt() uint64 {
	switch r.cacheKeys {
	case keysIgnoreLoRA:
		return 0
	case keysIgnoreRevision:
		return loraSalt(r.LoRA, 0)
	}
	return r.loraSalt
}
