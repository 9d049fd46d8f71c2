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
//
// With Config.AsyncScheduling the step after a request's step is
// scheduled before that step's output is applied, so the scheduler knows
// neither the drafts nor how many of them the model kept: it gives the
// request's next step NumSpeculativeTokens draft placeholders (reqSpec's
// slots, vLLM's spec_token_ids of -1s) and counts, as placeholders of
// output, the step's token and its drafts (vLLM's AsyncScheduler). The
// model — a GPU worker — proposes the drafts as it samples (reqSpec's
// drafts, proposed at the step it numbers proposedAt) and puts them in the
// placeholders' place at the request's next step, which it computes from
// where the request's kept tokens really end: the scheduler counted every
// draft as computed, and the worker takes back those it rejected and the
// scheduler has not yet heard of (reqSpec's rejected), as vLLM's runner
// corrects its positions from its last step's acceptances. The worker holds
// only its last step's drafts: a request that was not in that step gets
// none, and placeholders left to it from an older step would reach the
// model's input as token -1 — a GPU's device-side assert (vLLM's #37159),
// the engine dead. So a running request the scheduler passes over loses
// its placeholders (vLLM's #46899); core/spec-placeholders-outlive-their-
// window plants keeping them.

// reqSpec is a request's speculative decoding: drafts, the draft tokens
// proposed for its next step (vLLM's spec_token_ids); accepted, from a
// step's Sample to its UpdateFromOutput, the tokens the model sampled
// after the drafts it agreed with, one a draft; cut, how many of a step's
// kept tokens a stop before them dropped, until the core tells of it
// (EventTokensCut).
//
// With Config.AsyncScheduling, slots is how many draft placeholders the
// scheduler gives r's next step; drafts are the worker's, proposed at its
// step numbered proposedAt (specCounts' samples); rejected counts the drafts
// the worker rejected in r's steps that the scheduler has not applied, by
// which the next step's start, counted with every draft kept, is past
// where r's KV really ends; and accepted is a step's kept tokens only
// while UpdateFromOutput applies them.
type reqSpec struct {
	drafts, accepted []int
	cut              int
	slots, rejected  int
	proposedAt       uint64
	placedAt         uint64 // the Schedule (specCounts' schedules) that gave it slots
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
// with Config.NumSpeculativeTokens, and with Config.AsyncScheduling the
// numbers of the worker's last step (samples: Sample calls) and of the
// scheduler's (schedules).
type specCounts struct {
	st                 SpecDecodingStats
	samples, schedules uint64
	dropped            []*Request // Scheduler.DraftsDropped
}

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
