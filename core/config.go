package core

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/llmdst/llmdst/failpoints"
)

// Defaults behave like a small real engine, so that real-runtime tests are
// not racy by accident.
const (
	DefaultMaxNumSeqs          = 256
	DefaultMaxNumBatchedTokens = 8192
	DefaultBlockSize           = 16
	DefaultMaxModelLen         = 131072
	DefaultNumBlocks           = 2*DefaultMaxModelLen/DefaultBlockSize + 1 // two sequences of the model length, and vLLM's null block
	DefaultStepTime            = time.Millisecond
	// DefaultKVOffloadTrackerSize is how many hashes host memory's store
	// threshold counts sightings of by default, vLLM's max_tracker_size.
	DefaultKVOffloadTrackerSize = 64_000
	// MaxModelLenMax bounds MaxModelLen: token counts derived from it (a
	// prompt and its MaxTokens, twice it and a block for the default
	// cache) must not overflow an int on any platform.
	MaxModelLenMax = 1 << 29
	// NumBlocksMax bounds NumBlocks: block tables hold int32 block ids.
	// The default cache of the longest MaxModelLen, 2^30+1 blocks of one
	// token, is within it.
	NumBlocksMax = math.MaxInt32
)

// Config bounds the core. A zero field takes its default.
type Config struct {
	// MaxNumSeqs is the most requests running at once; 0 means 256.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step; 0 means 8192.
	// It must be at least MaxNumSeqs, as vLLM requires: every running
	// request needs a token of the step.
	MaxNumBatchedTokens int
	// BlockSize is the number of tokens in a KV block; 0 means 16.
	BlockSize int
	// NumBlocks is the number of KV blocks in the cache, vLLM's
	// num_gpu_blocks. As in vLLM's BlockPool, one of them is the null
	// block, a placeholder never handed to a request, so requests hold at
	// most NumBlocks−1 (UsableBlocks) and NumBlocks must be ≥ 2. 0 means
	// enough for two sequences of the model length and the null block
	// (16385 blocks of 16 tokens).
	NumBlocks int
	// MaxModelLen is the longest sequence, prompt and output, in tokens;
	// 0 means 131072.
	MaxModelLen int
	// SchedulingPolicy orders the waiting queue and picks the running
	// request to preempt, vLLM's --scheduling-policy; the zero value is
	// PolicyFCFS.
	SchedulingPolicy SchedulingPolicy
	// EnablePrefixCaching is vLLM's --enable-prefix-caching: full KV
	// blocks are kept, by the hash of their prefix, after the request that
	// computed them frees them, and a request that starts (or restarts
	// after preemption) with the same prefix takes them instead of
	// computing it again. vLLM v1 turns it on by default; here it is off
	// by default, so that every recorded seed's trace stands.
	EnablePrefixCaching bool
	// AsyncScheduling is vLLM's --async-scheduling: the core schedules a
	// step while the model still runs the one before it, so that the CPU's
	// work hides behind the GPU's. Up to two steps are in flight (vLLM's
	// batch queue); a request in both samples in the second from a token
	// the scheduler has not seen yet (a placeholder, Request.Placeholders),
	// and a request that stops in the first has computed one token more,
	// which is dropped. Aborts and adds reach the core between the two.
	// Off by default, so that every recorded seed's trace stands.
	AsyncScheduling bool
	// ReserveFullSequence is vLLM's --scheduler-reserve-full-isl: a
	// waiting request is admitted only when the blocks of its whole
	// sequence so far (prompt and output, up to MaxModelLen), less its
	// prefix cache hits, are free, not only those of the step's chunk, so
	// that chunked prefill does not admit a long prompt it then has to
	// preempt for. vLLM turns it on by default (since its #37307); here it
	// is off by default, so that every recorded seed's trace stands.
	ReserveFullSequence bool
	// MaxLoRAs is how many LoRA adapters one step's batch may use, vLLM's
	// --max-loras: the executor's LoRA slots. 0 means LoRA is off, which
	// the frontend enforces (a request with an adapter is refused). The
	// scheduler keeps a waiting request of a new adapter waiting while
	// the step's batch already uses MaxLoRAs adapters, and admits the
	// requests behind it; a batch of more is the model's death, as vLLM's
	// worker raises for it.
	MaxLoRAs int
	// MaxCPULoRAs is how many LoRA adapters the executor keeps loaded,
	// vLLM's --max-cpu-loras: a cache, least recently used first out,
	// that a step loads its batch's adapters into and AddLoRA loads
	// into; pinned adapters (EngineCore's InputPinLoRA) never leave it
	// but by a removal. 0 means MaxLoRAs, as vLLM's default; otherwise it
	// must be at least MaxLoRAs.
	MaxCPULoRAs int
	// KVOffloadBlocks is how many KV blocks host memory keeps, vLLM's
	// --kv-offloading-size with --kv-offloading-backend native, in blocks:
	// a request gives its full blocks to it as it gives them back, and a
	// later request whose prompt continues past its prefix-cache hit with
	// blocks it holds loads them back, asynchronously, instead of
	// computing them (offload.go). 0 means off; it needs
	// EnablePrefixCaching, whose hashes find the blocks.
	KVOffloadBlocks int
	// KVOffloadPolicy is how host memory chooses the blocks it puts out
	// to make room: OffloadLRU, the default, or OffloadARC, vLLM's
	// eviction_policy "lru" and "arc". Without KVOffloadBlocks it has no
	// effect, as vLLM's without its offloading connector.
	KVOffloadPolicy KVOffloadPolicy
	// KVLoadFailurePolicy is what becomes of a request whose load from
	// host memory failed (failpoint core/kv-load-fails: the connector
	// reports its last block in invalid_block_ids), vLLM's
	// kv_load_failure_policy: LoadFailureFail, the default, ends it with
	// an error; LoadFailureRecompute keeps the blocks loaded before the
	// failed one, caches them, and computes from there.
	KVLoadFailurePolicy KVLoadFailurePolicy
	// KVOffloadStoreThreshold stores a block to host memory only once the
	// lookups of waiting requests have seen it this many times, vLLM's
	// store_threshold (kv_connector_extra_config): a one-off prompt's
	// blocks take no room there. Below 2 every block is stored, as
	// vLLM's. The counts are kept for KVOffloadTrackerSize hashes at most,
	// the least recently seen forgotten first; 0 means
	// DefaultKVOffloadTrackerSize (vLLM's max_tracker_size). Without
	// KVOffloadBlocks neither has an effect.
	KVOffloadStoreThreshold int
	KVOffloadTrackerSize    int
	// KVOffloadMaxRecomputePendingTokens bounds the wait for blocks a
	// preempted request's store still copies to host memory (vLLM's
	// HIT_PENDING), as vLLM's max_recompute_pending_tokens
	// (kv_connector_extra_config, its PR #57959): when the blocks of a
	// lookup's hit from the first pending one on hold at most this many
	// tokens, the hit is cut before that block, the request loads what
	// lies before it and computes the rest. 0, the default, always waits.
	// It never bounds a request's wait for its own store.
	KVOffloadMaxRecomputePendingTokens int
	// StepTime is how long executing the model takes per step, on the
	// runtime's clock; 0 means 1ms and a negative value means none.
	StepTime time.Duration
	// Model samples tokens; nil means ToyModel{}.
	Model Model
	// NumSpeculativeTokens turns on speculative decoding, vLLM's
	// speculative_config num_speculative_tokens: after each step that
	// samples a request's token, a draft model proposes its next tokens,
	// up to this many, and the next step computes them with it; the
	// model's tokens verify them, the agreeing prefix and one token more
	// are kept, and the request's computed tokens roll back past the
	// rejected ones (Scheduler.UpdateFromOutput). 0 means off. With
	// AsyncScheduling the model proposes the drafts as it samples and the
	// scheduler gives each request's next step placeholders for them
	// (spec.go).
	NumSpeculativeTokens int
	// Draft proposes the draft tokens; nil means DraftModel{Target: Model,
	// MissOdds: DefaultDraftMissOdds}, and a DraftModel without a Target
	// drafts for Model. Without NumSpeculativeTokens it has no effect.
	Draft Model
	// EOSTokenID is the end-of-sequence token; the toy vocabulary's is 0.
	EOSTokenID int
	// DataParallelRank and DataParallelSize place the core among the
	// data-parallel engine cores of one frontend, vLLM's
	// --data-parallel-size: the core stamps its rank on its events
	// (Event.Engine) and numbers its frames apart from the others'.
	// Size 0 means 1; the rank must be below the size.
	DataParallelRank, DataParallelSize int32
	// Observer, if set, receives the core's events on the engine-core task.
	Observer func(Event)
	// Faults are the failpoints the core evaluates; nil means the
	// process-wide set (GO_FAILPOINTS, failpoints.Enable).
	Faults *failpoints.Set
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = DefaultMaxModelLen
	}
	// NumBlocks is derived only from valid fields, so that Validate
	// reports a bad BlockSize or MaxModelLen as itself.
	if c.NumBlocks == 0 && c.BlockSize >= 1 && c.MaxModelLen >= 2 && c.MaxModelLen <= MaxModelLenMax {
		c.NumBlocks = 2*c.BlocksFor(c.MaxModelLen) + 1
	}
	if c.MaxCPULoRAs == 0 {
		c.MaxCPULoRAs = c.MaxLoRAs
	}
	if c.DataParallelSize == 0 {
		c.DataParallelSize = 1
	}
	if c.StepTime == 0 {
		c.StepTime = DefaultStepTime
	} else if c.StepTime < 0 {
		c.StepTime = 0
	}
	if c.Model == nil {
		c.Model = ToyModel{}
	}
	if c.Draft == nil && c.NumSpeculativeTokens > 0 {
		c.Draft = DraftModel{Target: c.Model, MissOdds: DefaultDraftMissOdds}
	}
	if d, ok := c.Draft.(DraftModel); ok && d.Target == nil {
		d.Target = c.Model
		c.Draft = d
	}
	return c
}

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("core: MaxNumSeqs must be ≥ 1, got %d", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens < 1:
		return fmt.Errorf("core: MaxNumBatchedTokens must be ≥ 1, got %d", c.MaxNumBatchedTokens)
	case c.MaxNumBatchedTokens < c.MaxNumSeqs:
		return fmt.Errorf("core: MaxNumBatchedTokens (%d) must be ≥ MaxNumSeqs (%d): each running request takes a token of a step's budget", c.MaxNumBatchedTokens, c.MaxNumSeqs)
	case c.BlockSize < 1:
		return fmt.Errorf("core: BlockSize must be ≥ 1, got %d", c.BlockSize)
	case c.MaxModelLen < 2:
		return fmt.Errorf("core: MaxModelLen must be ≥ 2, got %d", c.MaxModelLen)
	case c.MaxModelLen > MaxModelLenMax:
		return fmt.Errorf("core: MaxModelLen must be ≤ %d, got %d", MaxModelLenMax, c.MaxModelLen)
	case c.NumBlocks < 2: // after the fields a zero NumBlocks derives from
		return fmt.Errorf("core: NumBlocks must be ≥ 2, got %d: one block is vLLM's null block, which holds no request", c.NumBlocks)
	case c.NumBlocks > NumBlocksMax:
		return fmt.Errorf("core: NumBlocks must be ≤ %d, got %d: block tables hold 32-bit block ids", NumBlocksMax, c.NumBlocks)
	case c.MaxLoRAs < 0:
		return fmt.Errorf("core: MaxLoRAs must be ≥ 0 (0: LoRA off), got %d", c.MaxLoRAs)
	case c.MaxCPULoRAs != 0 && c.MaxCPULoRAs < c.MaxLoRAs:
		// vLLM's LoRAConfig: "max_cpu_loras must be >= max_loras".
		return fmt.Errorf("core: MaxCPULoRAs (%d) must be ≥ MaxLoRAs (%d), or 0 for MaxLoRAs", c.MaxCPULoRAs, c.MaxLoRAs)
	case c.MaxCPULoRAs != 0 && c.MaxLoRAs == 0:
		return fmt.Errorf("core: MaxCPULoRAs is %d but LoRA is off (MaxLoRAs 0)", c.MaxCPULoRAs)
	case c.KVOffloadBlocks < 0:
		return fmt.Errorf("core: KVOffloadBlocks must be ≥ 0 (0: offloading off), got %d", c.KVOffloadBlocks)
	case c.KVOffloadBlocks > 0 && !c.EnablePrefixCaching:
		return fmt.Errorf("core: KVOffloadBlocks is %d but prefix caching is off: offloaded blocks are found by the prefix cache's hashes", c.KVOffloadBlocks)
	case c.KVOffloadStoreThreshold < 0:
		return fmt.Errorf("core: KVOffloadStoreThreshold must be ≥ 0 (below 2: every block stored), got %d", c.KVOffloadStoreThreshold)
	case c.KVOffloadTrackerSize < 0:
		return fmt.Errorf("core: KVOffloadTrackerSize must be ≥ 0 (0: %d), got %d", DefaultKVOffloadTrackerSize, c.KVOffloadTrackerSize)
	case c.KVOffloadMaxRecomputePendingTokens < 0:
		return fmt.Errorf("core: KVOffloadMaxRecomputePendingTokens must be ≥ 0 (0: always wait for a pending store), got %d", c.KVOffloadMaxRecomputePendingTokens)
	case c.KVLoadFailurePolicy > LoadFailureRecompute:
		return fmt.Errorf("core: unknown KVLoadFailurePolicy %d: want LoadFailureFail or LoadFailureRecompute", c.KVLoadFailurePolicy)
	case c.KVOffloadPolicy > OffloadARC:
		return fmt.Errorf("core: unknown KVOffloadPolicy %d: want OffloadLRU or OffloadARC", c.KVOffloadPolicy)
	case c.SchedulingPolicy > PolicyPriority:
		return fmt.Errorf("core: unknown SchedulingPolicy %d: want PolicyFCFS or PolicyPriority", c.SchedulingPolicy)
	case c.NumSpeculativeTokens < 0:
		return fmt.Errorf("core: NumSpeculativeTokens must be ≥ 0 (0: speculative decoding off), got %d", c.NumSpeculativeTokens)
	case c.DataParallelSize < 1:
		return fmt.Errorf("core: DataParallelSize must be ≥ 1 (0: 1), got %d", c.DataParallelSize)
	case c.DataParallelRank < 0 || c.DataParallelRank >= c.DataParallelSize:
		return fmt.Errorf("core: DataParallelRank %d is out of range [0, %d)", c.DataParallelRank, c.DataParallelSize)
	}
	return nil
}

// SchedulingPolicy is how the scheduler orders the requests that wait and
// chooses the running request to preempt when KV blocks run out, as vLLM's
// SchedulingPolicy.
type SchedulingPolicy uint8

const (
	// PolicyFCFS serves requests in order of arrival, puts a preempted
	// request back at the front of the waiting queue, and preempts the
	// newest running request: vLLM's "fcfs", the default and the zero
	// value.
	PolicyFCFS SchedulingPolicy = iota
	// PolicyPriority serves waiting requests by Request.Priority, lower
	// first, then by arrival, and preempts the running request that comes
	// last in that order: vLLM's "priority". Arrival is (Incarnation,
	// Index), so that the order is total.
	PolicyPriority
)

// String returns the policy's name as vLLM's --scheduling-policy takes it.
func (p SchedulingPolicy) String() string {
	switch p {
	case PolicyFCFS:
		return "fcfs"
	case PolicyPriority:
		return "priority"
	}
	return "SchedulingPolicy(" + strconv.Itoa(int(p)) + ")"
}

// BlocksFor returns the KV blocks that n tokens occupy. It does not
// overflow for any BlockSize: (n+BlockSize−1)/BlockSize did, and a default
// cache derived from a huge BlockSize came out below 1.
func (c Config) BlocksFor(n int) int {
	if n <= 0 {
		return 0
	}
	return (n-1)/c.BlockSize + 1
}

// UsableBlocks returns the KV blocks requests can hold: NumBlocks less
// vLLM's null block, the placeholder its BlockPool takes out of the free
// queue at start and never hands to a request. It is at least 1 in a
// valid Config.
func (c Config) UsableBlocks() int { return c.NumBlocks - 1 }
