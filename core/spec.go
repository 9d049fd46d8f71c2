package core

import "sync/atomic"

// Speculative decoding is vLLM's (speculative_config, with a draft model):
// after a step samples a running request's token, a draft model proposes
// its next Config.NumSpeculativeTokens tokens (Scheduler.propose, vLLM's
// update_draft_token_ids); the next step computes them after the
// request's sequence, as many as its token budget and the model length
// leave room for, writing their KV; the model's tokens at their positions
// verify them (Scheduler.Sample): the drafts that agree with the model,
// from the first, are kept, and with them the model's token after the
// last of those, so that a step yields one to NumSpeculativeTokens+1
// tokens, each the model's own — greedy verification, where a request's
// tokens are the same with speculative decoding or without. The
// request's computed tokens then roll back past the rejected drafts, as
// vLLM's num_computed_tokens −= num_rejected; their KV stays in its slots
// past what the request computed, for its next step to overwrite
// (kv.go's kvRollback). The tokens a step keeps are taken one by one,
// each checked for a stop, and those after a stop are dropped, as vLLM's
// _update_request_with_output does. The prefix cache caches a request's
// blocks only up to its known tokens, never a draft's. A preempted
// request's drafts are dropped.

// reqSpec is a request's speculative decoding: drafts, the draft tokens
// proposed for its next step (vLLM's spec_token_ids); accepted, from a
// step's Sample to its UpdateFromOutput, the tokens the model sampled
// after the drafts it agreed with, one a draft; cut, how many of a step's
// kept tokens a stop before them dropped, until the core tells of it
// (EventTokensCut).
type reqSpec struct {
	drafts, accepted []int
	cut              int
}

// SpecDecodingStats are speculative decoding's counts, vLLM's
// SpecDecodingStats: the drafts verified, their tokens, the tokens
// accepted, and of those, how many at each position of a draft.
type SpecDecodingStats struct {
	Drafts         int64
	DraftTokens    int64
	AcceptedTokens int64
	// AcceptedPerPos[i] counts the drafts whose token i was accepted:
	// NumSpeculativeTokens entries. Scheduler.Stats gives the scheduler's
	// own, which its next step changes: copy it to keep it.
	AcceptedPerPos []int64
}

// specCounts are the scheduler's speculative decoding counts, made only
// with Config.NumSpeculativeTokens.
type specCounts struct{ st SpecDecodingStats }

func newSpecCounts(k int) *specCounts {
	return &specCounts{st: SpecDecodingStats{AcceptedPerPos: make([]int64, k)}}
}

// observe counts the verification of a draft of n tokens, accepted of
// them accepted.
func (c *specCounts) observe(n, accepted int) {
	c.st.Drafts++
	c.st.DraftTokens += int64(n)
	c.st.AcceptedTokens += int64(accepted)
	for i := range accepted {
		c.st.AcceptedPerPos[i]++
	}
}

// stats returns the counts; AcceptedPerPos is the scheduler's own, valid
// until its next step.
func (c *specCounts) stats() SpecDecodingStats { return c.st }

// Add adds o's counts to s's, as the counts of several cores add up.
func (s *SpecDecodingStats) Add(o SpecDecodingStats) {
	s.Drafts += o.Drafts
	s.DraftTokens += o.DraftTokens
	s.AcceptedTokens += o.AcceptedTokens
	if len(s.AcceptedPerPos) < len(o.AcceptedPerPos) {
		s.AcceptedPerPos = append(s.AcceptedPerPos, make([]int64, len(o.AcceptedPerPos)-len(s.AcceptedPerPos))...)
	}
	for i, n := range o.AcceptedPerPos {
		s.AcceptedPerPos[i] += n
	}
}

// specPublished are speculative decoding's counts as of the core's last
// change, for the frontend's: any task may read them.
type specPublished struct {
	drafts, draftTokens, accepted atomic.Int64
	perPos                        []atomic.Int64
}

func newSpecPublished(k int) *specPublished {
	return &specPublished{perPos: make([]atomic.Int64, k)}
}

func (p *specPublished) publish(st SpecDecodingStats) {
	publish(&p.drafts, st.Drafts)
	publish(&p.draftTokens, st.DraftTokens)
	publish(&p.accepted, st.AcceptedTokens)
	for i, n := range st.AcceptedPerPos {
		publish(&p.perPos[i], n)
	}
}

// load returns the counts published; zero without speculative decoding
// (p nil).
func (p *specPublished) load() SpecDecodingStats {
	if p == nil {
		return SpecDecodingStats{}
	}
	st := SpecDecodingStats{Drafts: p.drafts.Load(), DraftTokens: p.draftTokens.Load(), AcceptedTokens: p.accepted.Load(),
		AcceptedPerPos: make([]int64, len(p.perPos))}
	for i := range p.perPos {
		st.AcceptedPerPos[i] = p.perPos[i].Load()
	}
	return st
}
