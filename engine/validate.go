package engine

import (
	"fmt"
	"slices"

	"github.com/llmdst/llmdst/core"
)

// invalid is an error that wraps ErrInvalidRequest, saying what was wrong
// as format and args say it.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}

// validate checks a request before anything is registered; every error
// wraps ErrInvalidRequest and says what was wrong and what was expected.
func (e *AsyncLLM) validate(id string, prompt []int, p Params) error {
	var loraErr error
	if p.LoRA != nil {
		loraErr = e.validateLoRA(p.LoRA)
	}
	negStop := slices.IndexFunc(p.StopTokenIDs, func(t int) bool { return t < 0 })
	// The core masks and wraps sampled tokens within core.VocabSize, and
	// the tokenizer has no text past it: a stop token id beyond it could
	// never be sampled, and vLLM refuses one too.
	bigStop := slices.IndexFunc(p.StopTokenIDs, func(t int) bool { return t >= core.VocabSize })
	// The sampling parameters are judged before the prompt, as vLLM judges
	// its SamplingParams when they are made, before the request reaches
	// the input processor.
	switch {
	case id == "":
		return invalid("the request id must not be empty")
	case p.MaxTokens < 1:
		return invalid("MaxTokens must be ≥ 1, got %d", p.MaxTokens)
	case p.MinTokens < 0:
		return invalid("MinTokens must be ≥ 0, got %d", p.MinTokens)
	case p.MinTokens > p.MaxTokens:
		return invalid("MinTokens (%d) must not exceed MaxTokens (%d)", p.MinTokens, p.MaxTokens)
	case p.N < 0 || p.N > MaxN:
		return invalid("N (sequences to generate) must be between 1 and %d, or 0 for 1, got %d", MaxN, p.N)
	case p.Output > FinalOnly:
		return invalid("unknown output kind %d: want Cumulative, Delta or FinalOnly", p.Output)
	case negStop >= 0:
		return invalid("stop token ids must be ≥ 0, got %d", p.StopTokenIDs[negStop])
	case bigStop >= 0:
		return invalid("stop token id %d is out of the vocabulary: ids run from 0 to %d", p.StopTokenIDs[bigStop], core.VocabSize-1)
	case slices.Contains(p.Stop, ""):
		return invalid("stop strings must not be empty")
	case p.Priority != 0 && e.ccfg.SchedulingPolicy != PolicyPriority:
		// vLLM's input processor: "Got priority X but Priority scheduling
		// is not enabled."
		return invalid("Priority %d needs the priority scheduling policy, but the engine's SchedulingPolicy is %s: set Config.SchedulingPolicy to PolicyPriority, or leave Priority 0",
			p.Priority, e.ccfg.SchedulingPolicy)
	case p.DataParallelRank != nil && (*p.DataParallelRank < 0 || *p.DataParallelRank >= len(e.cores)):
		// vLLM's input processor: "data_parallel_rank X is out of range
		// [0, N)."
		return invalid("DataParallelRank %d is out of range [0, %d): the engine has %d data-parallel core(s) (Config.DataParallelSize)", *p.DataParallelRank, len(e.cores), len(e.cores))
	case loraErr != nil:
		return loraErr
	case p.LoRA != nil && p.LoRA.LoadInplace:
		// vLLM keeps a request's LoRARequest and reloads an adapter whose
		// request says load_inplace at every step it runs.
		return invalid("LoRA adapter %q of a request says LoadInplace, which is AddLoRA's: a request that carried it would reload the adapter at every step", p.LoRA.Name)
	case len(prompt) == 0:
		return invalid("the prompt must not be empty")
	case len(prompt) >= e.ccfg.MaxModelLen:
		return invalid("the prompt is %d tokens, which leaves no room in the model length of %d", len(prompt), e.ccfg.MaxModelLen)
	case p.MinTokens > e.ccfg.MaxModelLen-len(prompt):
		return invalid("MinTokens %d cannot be reached: the model length of %d leaves %d tokens after the prompt's %d",
			p.MinTokens, e.ccfg.MaxModelLen, e.ccfg.MaxModelLen-len(prompt), len(prompt))
	}
	// MaxTokens is clipped before the sum: a MaxTokens near the int limit
	// ("up to the model length") would overflow it and pass.
	total := min(len(prompt)+min(p.MaxTokens, e.ccfg.MaxModelLen), e.ccfg.MaxModelLen)
	// The null block holds no request: the cache of NumBlocks has one
	// block fewer to give.
	if need := e.ccfg.BlocksFor(total); need > e.ccfg.UsableBlocks() {
		return invalid("the request needs %d KV blocks of %d tokens for %d tokens (prompt and MaxTokens), but the cache has only %d usable (%d blocks, one of them vLLM's null block)",
			need, e.ccfg.BlockSize, total, e.ccfg.UsableBlocks(), e.ccfg.NumBlocks)
	}
	return nil
}
