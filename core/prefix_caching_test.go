package core_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
)

// seq returns the tokens from..from+n−1.
func seq(from, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = from + i
	}
	return p
}

// sampled returns the tokens a request samples: core.Sampled for its
// sequence's and adapter's key.
func sampled(r *core.Request, n int) []int {
	m := core.ToyModel{}
	key := core.LoRAKey(core.SequenceKey(m.Prepare(r.Prompt), r.Index), r.LoRA)
	out := make([]int, n)
	for i := range out {
		out[i] = core.SampleAt(m, key, i, &r.Params, core.EOSTokenID)
	}
	return out
}

// stepChecked runs one step and checks the block pool's invariants.
func stepChecked(t *testing.T, s *core.Scheduler) *core.SchedulerOutput {
	t.Helper()
	so := s.Schedule()
	s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	require.NoError(t, s.CheckBlocks())
	return so
}

// drainAll steps until the scheduler is empty.
func drainAll(t *testing.T, s *core.Scheduler) {
	t.Helper()
	for steps := 0; s.HasRequests(); steps++ {
		require.Less(t, steps, 10000, "the scheduler does not converge")
		stepChecked(t, s)
	}
}

// scheduledTokens returns what so schedules for r, or −1.
func scheduledTokens(so *core.SchedulerOutput, r *core.Request) int {
	for _, sc := range so.Scheduled {
		if sc.Req == r {
			return sc.NumTokens
		}
	}
	return -1
}

// TestPrefixHitIsCappedShortOfTheLastToken checks vLLM's
// max_cache_hit_length: a request finds at most (NumTokens−1)/BlockSize
// full blocks cached, so that its last token is computed to sample from;
// a prompt of exactly k full blocks hits k−1.
func TestPrefixHitIsCappedShortOfTheLastToken(t *testing.T) {
	tests := []struct{ prompt, hit int }{
		{3, 0}, {4, 0}, {5, 4}, {8, 4}, {9, 8}, {12, 8}, {13, 12},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.prompt), func(t *testing.T) {
			s := newSched(core.Config{BlockSize: 4, EnablePrefixCaching: true})
			a := req("a", seq(1, tt.prompt), core.SamplingParams{MaxTokens: 1})
			require.NoError(t, s.AddRequest(a))
			drainAll(t, s)
			b := req("b", seq(1, tt.prompt), core.SamplingParams{MaxTokens: 3})
			require.NoError(t, s.AddRequest(b))
			so := stepChecked(t, s)
			assert.Equal(t, tt.prompt-tt.hit, scheduledTokens(so, b), "b computes what it did not find cached")
			st := s.Stats()
			assert.Equal(t, int64(2*tt.prompt), st.PrefixCacheQueries)
			assert.Equal(t, int64(tt.hit), st.PrefixCacheHits)
			drainAll(t, s)
			assert.Equal(t, sampled(b, 3), b.Output)
		})
	}
}

// TestPrefixCachingOffFindsNothing checks that without caching the same
// prompt is computed again and nothing is counted.
func TestPrefixCachingOffFindsNothing(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4})
	require.NoError(t, s.AddRequest(req("a", seq(1, 9), core.SamplingParams{MaxTokens: 1})))
	drainAll(t, s)
	b := req("b", seq(1, 9), core.SamplingParams{MaxTokens: 1})
	require.NoError(t, s.AddRequest(b))
	so := stepChecked(t, s)
	assert.Equal(t, 9, scheduledTokens(so, b))
	assert.Zero(t, s.Stats().PrefixCacheQueries)
}

// TestFreeingFreesTheTailFirst checks that a finished request's blocks go
// to the free queue last block first, so that its tail, least likely to
// be shared, is evicted first.
func TestFreeingFreesTheTailFirst(t *testing.T) {
	s := newSched(core.Config{BlockSize: 2, NumBlocks: 6})
	r := req("a", seq(1, 5), core.SamplingParams{MaxTokens: 1})
	require.NoError(t, s.AddRequest(r))
	so := s.Schedule()
	require.Equal(t, []int32{1, 2, 3}, r.BlockTable())
	s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	require.Equal(t, core.StatusFinishedLength, r.Status)
	assert.Equal(t, []int32{4, 5, 3, 2, 1}, s.FreeQueue(), "the untouched blocks, then a's from its last")
}

// TestResumedRequestHitsItsOwnBlocks checks that a preempted request,
// computed again from its first token, finds its own full blocks, which
// stayed cached when they were freed, and ends with the right tokens.
func TestResumedRequestHitsItsOwnBlocks(t *testing.T) {
	s := newSched(core.Config{BlockSize: 2, NumBlocks: 12, EnablePrefixCaching: true})
	a := req("a", seq(1, 4), core.SamplingParams{MaxTokens: 10})
	b := req("b", seq(50, 4), core.SamplingParams{MaxTokens: 10})
	require.NoError(t, s.AddRequest(a))
	require.NoError(t, s.AddRequest(b))
	resumed := -1
	for steps := 0; s.HasRequests(); steps++ {
		require.Less(t, steps, 100)
		wasPreempted := b.Status == core.StatusPreempted
		so := stepChecked(t, s)
		if n := scheduledTokens(so, b); wasPreempted && n >= 0 && resumed < 0 {
			resumed = b.NumTokens() - 1 - n // computed before this step, by hits
		}
	}
	require.Positive(t, b.Preemptions, "b was preempted")
	assert.Positive(t, resumed, "b resumed after its cached blocks")
	st := s.Stats()
	assert.GreaterOrEqual(t, st.PrefixCachePreemptedHits, int64(resumed), "every lookup of b after its preemption found at least what it resumed with")
	assert.Zero(t, st.PrefixCacheHits, "a and b share nothing")
	assert.Equal(t, sampled(a, 10), a.Output)
	assert.Equal(t, sampled(b, 10), b.Output)
}

// TestParallelSamplingChildrenShareThePrompt checks that the sequences of
// a parallel-sampling request, admitted in the same step, find the
// prompt's full blocks that the first of them is computing in that step,
// as vLLM caches blocks when it allocates them.
func TestParallelSamplingChildrenShareThePrompt(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, EnablePrefixCaching: true})
	prompt := seq(7, 10)
	var rs []*core.Request
	for i := range 4 {
		r := req(fmt.Sprintf("%d_x", i), prompt, core.SamplingParams{MaxTokens: 5})
		r.Index = i
		rs = append(rs, r)
		require.NoError(t, s.AddRequest(r))
	}
	so := stepChecked(t, s)
	assert.Equal(t, 10, scheduledTokens(so, rs[0]))
	for _, r := range rs[1:] {
		assert.Equal(t, 2, scheduledTokens(so, r), "8 of its 10 prompt tokens were cached by its sibling in the same step")
	}
	assert.Equal(t, 4, s.BlockRef(rs[0].BlockTable()[0]), "the first and its 3 siblings hold its first block")
	drainAll(t, s)
	for _, r := range rs {
		assert.Equal(t, sampled(r, 5), r.Output, "sequence %d", r.Index)
	}
	assert.Equal(t, int64(24), s.Stats().PrefixCacheHits)
}

// TestNewRequestHitsAnAbortedOnesBlocks checks that a request with the
// prompt of one aborted after its prefill finds its blocks.
func TestNewRequestHitsAnAbortedOnesBlocks(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, EnablePrefixCaching: true})
	a := req("a", seq(3, 9), core.SamplingParams{MaxTokens: 5})
	require.NoError(t, s.AddRequest(a))
	stepChecked(t, s)
	require.Len(t, s.FinishRequests([]string{"a"}, core.StatusFinishedAborted), 1)
	require.NoError(t, s.CheckBlocks())
	b := req("b", seq(3, 9), core.SamplingParams{MaxTokens: 5})
	require.NoError(t, s.AddRequest(b))
	so := stepChecked(t, s)
	assert.Equal(t, 1, scheduledTokens(so, b))
	drainAll(t, s)
	assert.Equal(t, sampled(b, 5), b.Output)
}

// TestKVKeepEvictedHashGivesWrongTokens checks the planted bug: with
// core/kv-keep-evicted-hash armed, a request hits a cached block that was
// evicted and overwritten, reads another request's KV and samples wrong
// tokens; disarmed, it gets the right ones.
func TestKVKeepEvictedHashGivesWrongTokens(t *testing.T) {
	for _, armed := range []bool{false, true} {
		t.Run(map[bool]string{false: "disarmed", true: "armed"}[armed], func(t *testing.T) {
			cfg := core.Config{BlockSize: 4, NumBlocks: 5, EnablePrefixCaching: true}
			if armed {
				cfg.Faults = rttest.Armed(t, failpoints.CoreKVKeepEvictedHash.Name+"=return")
			}
			s := newSched(cfg)
			drain := func() { // the armed pool fails CheckBlocks
				for s.HasRequests() {
					so := s.Schedule()
					s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
				}
			}
			// a caches blocks 1 and 2; c, needing three blocks, takes the
			// untouched 3 and 4 and then a's second block, 2.
			require.NoError(t, s.AddRequest(req("a", seq(1, 8), core.SamplingParams{MaxTokens: 1})))
			drain()
			require.NoError(t, s.AddRequest(req("c", seq(100, 12), core.SamplingParams{MaxTokens: 1})))
			drain()
			d := req("d", seq(1, 9), core.SamplingParams{MaxTokens: 6})
			require.NoError(t, s.AddRequest(d))
			so := s.Schedule()
			s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
			if !armed {
				assert.Equal(t, 5, scheduledTokens(so, d), "only a's first block is still cached")
				drainAll(t, s)
				assert.Equal(t, sampled(d, 6), d.Output)
				return
			}
			assert.Equal(t, 1, scheduledTokens(so, d), "d hits a's second block through the hash left behind")
			assert.Error(t, s.CheckBlocks(), "the map names a block under a hash it no longer has")
			drain()
			require.Len(t, d.Output, 6)
			assert.NotEqual(t, sampled(d, 6), d.Output, "d read c's KV")
		})
	}
}

// TestAnUnscheduledVictimLeavesNoUnwrittenBlockCached is vLLM's open bug
// #43569: the scheduler caches a block's hash when it allocates, before
// the step writes the block. Under PolicyPriority a running request v
// scheduled earlier in the step is taken back as the victim of a later one
// r, which then preempts itself too: nobody is scheduled, and v's block
// that this step was to fill is free with its hash, never written. A
// request whose prompt continues v's output (a next turn of a chat) hits
// it and reads KV that is not there. The scheduler rolls the hashes of
// blocks the step has not written back when it takes a request's share
// back; core/kv-keep-unwritten-hash plants the bug again.
func TestAnUnscheduledVictimLeavesNoUnwrittenBlockCached(t *testing.T) {
	for _, armed := range []bool{false, true} {
		t.Run(map[bool]string{false: "rolled back", true: "kept, as vLLM does"}[armed], func(t *testing.T) {
			cfg := core.Config{BlockSize: 4, NumBlocks: 8, MaxNumSeqs: 4, MaxNumBatchedTokens: 16,
				EnablePrefixCaching: true, SchedulingPolicy: core.PolicyPriority}
			if armed {
				cfg.Faults = rttest.Armed(t, failpoints.CoreKVKeepUnwrittenHash.Name+"=return")
			}
			s := newSched(cfg)
			v := req("v", seq(1, 6), core.SamplingParams{MaxTokens: 5})
			v.Priority = 1
			require.NoError(t, s.AddRequest(v))
			stepChecked(t, s) // v's prompt, and its first token
			r := req("r", seq(100, 40), core.SamplingParams{MaxTokens: 1})
			require.NoError(t, s.AddRequest(r))
			stepChecked(t, s) // v's second token; r's first chunk
			require.Equal(t, 8, v.NumTokens())
			// v computes its 8th token, which fills its second block; r
			// needs more blocks than v frees, and is its own victim.
			so := stepChecked(t, s)
			require.Empty(t, so.Scheduled, "nothing runs this step")
			require.Len(t, so.Preempted, 2)
			require.Len(t, s.FinishRequests([]string{"r"}, core.StatusFinishedAborted), 1)

			// The next turn: v's 8 tokens, then 3 more.
			u := req("u", append(slices.Concat(v.Prompt, v.Output), 7, 8, 9), core.SamplingParams{MaxTokens: 5})
			u.Priority = -1
			require.NoError(t, s.AddRequest(u))
			drainAll(t, s)
			if armed {
				assert.NotEqual(t, sampled(u, 5), u.Output, "u read a block that was never written")
				return
			}
			assert.Equal(t, sampled(u, 5), u.Output)
			assert.Equal(t, sampled(v, 5), v.Output)
		})
	}
}

// TestEveryLookupIsCounted checks vLLM's PrefixCacheStats: a waiting
// request's prefix is looked up, and counted, at every step that tries to
// admit it, not only at the one that does. b waits for a's blocks for
// three steps and is admitted at the fourth: four lookups of its 8
// tokens, and a's one.
func TestEveryLookupIsCounted(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, NumBlocks: 4, EnablePrefixCaching: true})
	a := req("a", seq(1, 8), core.SamplingParams{MaxTokens: 3})
	b := req("b", seq(50, 8), core.SamplingParams{MaxTokens: 1})
	require.NoError(t, s.AddRequest(a))
	require.NoError(t, s.AddRequest(b))
	admitted := 0
	for steps := 1; s.HasRequests(); steps++ {
		require.Less(t, steps, 20)
		if so := stepChecked(t, s); admitted == 0 && scheduledTokens(so, b) > 0 {
			admitted = steps
		}
	}
	require.Equal(t, 4, admitted, "b waits for a to end")
	st := s.Stats()
	assert.Equal(t, int64(8+4*8), st.PrefixCacheQueries)
	assert.Zero(t, st.PrefixCacheHits)
}
