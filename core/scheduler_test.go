package core_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
)

func newSched(cfg core.Config) *core.Scheduler {
	return core.NewScheduler(cfg.WithDefaults())
}

func req(id string, prompt []int, p core.SamplingParams) *core.Request {
	return &core.Request{InternalID: id, ExternalID: id, Prompt: prompt, Params: p}
}

// run steps the scheduler until it is empty and returns each request's
// tokens, the number of steps and the frames.
func run(t *testing.T, s *core.Scheduler, m core.Model, stepsMax int) (map[string][]int, int, []core.Frame) {
	t.Helper()
	got := map[string][]int{}
	var all []core.Frame
	steps := 0
	for s.HasRequests() {
		steps++
		require.LessOrEqual(t, steps, stepsMax, "the scheduler does not converge")
		so := s.Schedule()
		frames := s.UpdateFromOutput(so, s.Sample(so, m))
		for _, f := range frames {
			got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
		}
		all = append(all, frames...)
	}
	return got, steps, all
}

func TestSchedulerRunsRequestsToTheirLength(t *testing.T) {
	s := newSched(core.Config{})
	require.NoError(t, s.AddRequest(req("a", []int{1, 2, 3}, core.SamplingParams{MaxTokens: 5})))
	require.NoError(t, s.AddRequest(req("b", []int{4}, core.SamplingParams{MaxTokens: 2})))
	got, steps, frames := run(t, s, core.ToyModel{}, 100)
	assert.Equal(t, core.Tokens(core.ToyModel{}, []int{1, 2, 3}, 5), got["a"])
	assert.Equal(t, core.Tokens(core.ToyModel{}, []int{4}, 2), got["b"])
	assert.Equal(t, 5, steps, "both run in one batch, one token a step")
	lastA := frames[len(frames)-1]
	assert.True(t, lastA.Finished)
	assert.Equal(t, core.FinishLength, lastA.Reason)
}

func TestSchedulerRejectsALiveDuplicate(t *testing.T) {
	s := newSched(core.Config{})
	require.NoError(t, s.AddRequest(req("a", []int{1}, core.SamplingParams{MaxTokens: 5})))
	err := s.AddRequest(req("a", []int{1}, core.SamplingParams{MaxTokens: 5}))
	assert.ErrorContains(t, err, `duplicate request id "a"`)
}

func TestChunkedPrefillSplitsALongPromptOverSteps(t *testing.T) {
	s := newSched(core.Config{MaxNumSeqs: 8, MaxNumBatchedTokens: 8})
	prompt := make([]int, 20)
	for i := range prompt {
		prompt[i] = i + 1
	}
	require.NoError(t, s.AddRequest(req("long", prompt, core.SamplingParams{MaxTokens: 2})))
	var chunks []int
	for s.HasRequests() {
		so := s.Schedule()
		require.Len(t, so.Scheduled, 1)
		chunks = append(chunks, so.Scheduled[0].NumTokens)
		assert.LessOrEqual(t, so.TotalTokens, 8)
		s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	}
	assert.Equal(t, []int{8, 8, 4, 1}, chunks, "20 prompt tokens in chunks of 8, then one decode step")
}

func TestMaxNumSeqsBoundsTheRunningBatch(t *testing.T) {
	s := newSched(core.Config{MaxNumSeqs: 2})
	for i := 0; i < 5; i++ {
		require.NoError(t, s.AddRequest(req(fmt.Sprint(i), []int{i + 1}, core.SamplingParams{MaxTokens: 3})))
	}
	so := s.Schedule()
	assert.Len(t, so.Scheduled, 2)
	assert.Equal(t, core.SchedulerStats{Running: 2, Waiting: 3, KVUsedBlocks: 2, KVNumBlocks: s.Stats().KVNumBlocks}, s.Stats())
	first := s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	got, _, _ := run(t, s, core.ToyModel{}, 100)
	for _, f := range first {
		got[f.InternalID] = append(f.NewTokens, got[f.InternalID]...)
	}
	for i := 0; i < 5; i++ {
		assert.Len(t, got[fmt.Sprint(i)], 3, "FCFS admits everyone eventually")
	}
}

func TestPreemptionRecomputesTheNewestRunningRequest(t *testing.T) {
	// Two requests of 2 prompt tokens each grow to 8 tokens: 2 blocks of 4
	// each, but the cache has 3 usable (4, less the null block).
	s := newSched(core.Config{BlockSize: 4, NumBlocks: 4})
	require.NoError(t, s.AddRequest(req("old", []int{1, 2}, core.SamplingParams{MaxTokens: 6})))
	require.NoError(t, s.AddRequest(req("new", []int{3, 4}, core.SamplingParams{MaxTokens: 6})))
	var preempted []string
	got := map[string][]int{}
	for steps := 0; s.HasRequests(); steps++ {
		require.Less(t, steps, 100)
		so := s.Schedule()
		for _, r := range so.Preempted {
			preempted = append(preempted, r.InternalID)
			assert.Equal(t, core.StatusPreempted, r.Status)
			assert.Zero(t, r.NumComputed, "recompute starts over")
			assert.Zero(t, r.Blocks)
		}
		for _, f := range s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{})) {
			got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
		}
	}
	require.NotEmpty(t, preempted)
	assert.Equal(t, "new", preempted[0], "the newest running request is preempted")
	assert.Equal(t, core.Tokens(core.ToyModel{}, []int{1, 2}, 6), got["old"])
	assert.Equal(t, core.Tokens(core.ToyModel{}, []int{3, 4}, 6), got["new"], "recompute yields the same tokens")
	assert.Equal(t, int64(len(preempted)), s.Stats().Preemptions)
	assert.Equal(t, 0, s.Stats().KVUsedBlocks, "every block is freed")
}

func TestFinishRequestsIsIdempotentAndFreesBlocks(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, NumBlocks: 10})
	require.NoError(t, s.AddRequest(req("a", []int{1, 2, 3, 4, 5}, core.SamplingParams{MaxTokens: 100})))
	so := s.Schedule()
	s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	assert.Equal(t, 2, s.Stats().KVUsedBlocks)
	done := s.FinishRequests([]string{"a", "a", "unknown"}, core.StatusFinishedAborted)
	require.Len(t, done, 1)
	assert.Equal(t, core.StatusFinishedAborted, done[0].Status)
	assert.False(t, s.HasRequests())
	assert.Equal(t, 0, s.Stats().KVUsedBlocks)
}

// TestTheNullBlockHoldsNoRequest: a cache of N blocks gives requests N−1,
// as vLLM's BlockPool keeps block 0 as its null block. With 8 blocks of 4
// tokens, a request that computes 27 tokens (7 blocks) runs alone to its
// end without a preemption and then holds every usable block; one that
// would compute 31 (8 blocks) preempts itself with nothing else running
// and is ended as one that can never be scheduled.
func TestTheNullBlockHoldsNoRequest(t *testing.T) {
	cfg := core.Config{BlockSize: 4, NumBlocks: 8}.WithDefaults()
	require.NoError(t, cfg.Validate())
	assert.Equal(t, 7, cfg.UsableBlocks())

	s := core.NewScheduler(cfg)
	prompt := []int{1, 2, 3, 4}
	require.NoError(t, s.AddRequest(req("fits", prompt, core.SamplingParams{MaxTokens: 24, IgnoreEOS: true})))
	peak := 0
	got := map[string][]int{}
	for steps := 0; s.HasRequests(); steps++ {
		require.Less(t, steps, 100)
		so := s.Schedule()
		require.Empty(t, so.Preempted, "7 blocks fit in a cache of 8")
		peak = max(peak, s.Stats().KVUsedBlocks)
		for _, f := range s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{})) {
			got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
		}
	}
	assert.Equal(t, core.Tokens(core.ToyModel{}, prompt, 24), got["fits"])
	assert.Equal(t, 7, peak, "every usable block, and not the null block")
	assert.Equal(t, 8, s.Stats().KVNumBlocks, "the whole cache, the null block included")

	s = core.NewScheduler(cfg)
	require.NoError(t, s.AddRequest(req("huge", prompt, core.SamplingParams{MaxTokens: 28, IgnoreEOS: true})))
	for steps := 0; ; steps++ {
		require.Less(t, steps, 100, "the request that cannot fit is never found")
		so := s.Schedule()
		if len(so.Scheduled) == 0 {
			require.Len(t, so.Preempted, 1)
			// 4 prompt tokens and 24 of its 25 outputs computed: seven
			// full blocks, and the 29th token asks for an eighth.
			assert.Len(t, so.Preempted[0].Output, 25)
			break
		}
		s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	}
	r, ok := s.RejectUnschedulable()
	require.True(t, ok)
	assert.Equal(t, "huge", r.InternalID)
	assert.Equal(t, core.StatusFinishedError, r.Status)
	assert.Zero(t, s.Stats().KVUsedBlocks)
}

func TestAbortDuringAStepWins(t *testing.T) {
	s := newSched(core.Config{})
	require.NoError(t, s.AddRequest(req("a", []int{1}, core.SamplingParams{MaxTokens: 10})))
	require.NoError(t, s.AddRequest(req("b", []int{2}, core.SamplingParams{MaxTokens: 10})))
	so := s.Schedule()
	sampled := s.Sample(so, core.ToyModel{})
	s.FinishRequests([]string{"a"}, core.StatusFinishedAborted) // arrives while the model runs
	frames := s.UpdateFromOutput(so, sampled)
	require.Len(t, frames, 1)
	assert.Equal(t, "b", frames[0].InternalID, "an aborted request gets no token from the step it was aborted in")
}

func TestCheckStopOrder(t *testing.T) {
	m := core.ToyModel{}
	prompt := []int{7, 8, 9}
	ts := core.Tokens(m, prompt, 10)
	cases := []struct {
		name   string
		p      core.SamplingParams
		tokens int
		reason core.FinishReason
		stop   int
	}{
		{"length", core.SamplingParams{MaxTokens: 4}, 4, core.FinishLength, -1},
		{"stop token", core.SamplingParams{MaxTokens: 10, StopTokenIDs: []int{ts[2]}}, 3, core.FinishStop, ts[2]},
		{"stop token at max tokens is a stop", core.SamplingParams{MaxTokens: 3, StopTokenIDs: []int{ts[2]}}, 3, core.FinishStop, ts[2]},
		{"min tokens hold a stop token back", core.SamplingParams{MaxTokens: 5, MinTokens: 4, StopTokenIDs: []int{ts[2]}}, 5, core.FinishLength, -1},
	}
	for _, c := range cases {
		s := newSched(core.Config{})
		require.NoError(t, s.AddRequest(req("r", prompt, c.p)))
		got, _, frames := run(t, s, m, 100)
		assert.Len(t, got["r"], c.tokens, c.name)
		f := frames[len(frames)-1]
		assert.Equal(t, c.reason, f.Reason, c.name)
		assert.Equal(t, c.stop, f.StopReason, c.name)
	}
}

func TestModelLengthCapsASequence(t *testing.T) {
	s := newSched(core.Config{MaxModelLen: 6})
	require.NoError(t, s.AddRequest(req("r", []int{1, 2, 3, 4}, core.SamplingParams{MaxTokens: 100})))
	got, _, frames := run(t, s, core.ToyModel{}, 100)
	assert.Len(t, got["r"], 2, "prompt 4 + 2 reaches the model length 6")
	assert.Equal(t, core.FinishLength, frames[len(frames)-1].Reason)
}

func TestToyModelIsTheDocumentedFunction(t *testing.T) {
	m := core.ToyModel{}
	key := m.Prepare([]int{1, 2})
	a, b := m.TokenAt(key, 0), m.TokenAt(key, 0)
	assert.Equal(t, a, b)
	assert.NotEqual(t, m.Prepare([]int{1, 2}), m.Prepare([]int{2, 1}))
	for i := 0; i < 1000; i++ {
		tok := m.TokenAt(key, i)
		require.True(t, tok >= 1 && tok < core.VocabSize, "token %d out of the vocabulary", tok)
	}
	// Pinned values: the model must not change silently, since golden traces
	// and fail files depend on it.
	assert.Equal(t, []int{240, 387, 315, 383, 41}, core.Tokens(m, core.Tokenizer{}.Encode("hello world"), 5))
	eos := 0
	for i := 0; i < 10000; i++ {
		if (core.ToyModel{EOSOdds: 100}).TokenAt(key, i) == core.EOSTokenID {
			eos++
		}
	}
	assert.InDelta(t, 100, eos, 40, "about one in EOSOdds tokens is EOS")
}

func TestTokenizer(t *testing.T) {
	tok := core.Tokenizer{}
	ids := tok.Encode("The quick  brown fox")
	assert.Len(t, ids, 4)
	assert.Equal(t, " the", tok.Piece(ids[0]), "known words map to themselves, lowercased")
	assert.Equal(t, ids, tok.Encode("the quick brown fox"))
	assert.Equal(t, "", tok.Piece(core.EOSTokenID))
	assert.Equal(t, "", tok.Piece(-1))
	text := tok.Decode(core.Tokens(core.ToyModel{}, ids, 20))
	words := strings.Fields(text)
	assert.Len(t, words, 20, "generated text reads as words: %q", text)
	assert.Empty(t, tok.Encode("   "))
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	c := core.Config{}.WithDefaults()
	assert.Equal(t, 256, c.MaxNumSeqs)
	assert.Equal(t, 8192, c.MaxNumBatchedTokens)
	assert.Equal(t, 16, c.BlockSize)
	assert.Equal(t, 131072, c.MaxModelLen)
	assert.Equal(t, 16385, c.NumBlocks, "two sequences of 8192 blocks, and the null block")
	assert.Equal(t, core.DefaultNumBlocks, c.NumBlocks)
	assert.Equal(t, core.DefaultStepTime, c.StepTime)
	assert.Zero(t, core.Config{StepTime: -1}.WithDefaults().StepTime)
	// Two sequences of 10 tokens take 3 blocks of 4 each: the default is
	// 2×3 blocks and the null block, not the 5 that 20 tokens would fill.
	assert.Equal(t, 7, core.Config{MaxModelLen: 10, BlockSize: 4}.WithDefaults().NumBlocks)
	// A huge BlockSize overflowed the derivation, and the error named the
	// NumBlocks the caller never set.
	huge := core.Config{BlockSize: math.MaxInt}.WithDefaults()
	assert.Equal(t, 3, huge.NumBlocks)
	require.NoError(t, huge.Validate())
	require.NoError(t, c.Validate())
	require.NoError(t, core.Config{MaxNumSeqs: 6, MaxNumBatchedTokens: 6}.WithDefaults().Validate(), "a budget of one token a running request")
	c.BlockSize = -1
	assert.ErrorContains(t, c.Validate(), "BlockSize must be ≥ 1, got -1")
}

// TestConfigErrorsNameTheFieldTheCallerSet: NumBlocks is derived from
// MaxModelLen and BlockSize, so a bad one of those is reported as itself,
// not as the NumBlocks the caller never set.
func TestConfigErrorsNameTheFieldTheCallerSet(t *testing.T) {
	for _, c := range []struct {
		cfg  core.Config
		want string
	}{
		{core.Config{MaxModelLen: -100}, "core: MaxModelLen must be ≥ 2, got -100"},
		{core.Config{MaxModelLen: 1}, "core: MaxModelLen must be ≥ 2, got 1"},
		{core.Config{BlockSize: -4}, "core: BlockSize must be ≥ 1, got -4"},
		{core.Config{BlockSize: -4, MaxModelLen: -100}, "core: BlockSize must be ≥ 1, got -4"},
		{core.Config{NumBlocks: -3}, "core: NumBlocks must be ≥ 2, got -3: one block is vLLM's null block, which holds no request"},
		{core.Config{NumBlocks: 1}, "core: NumBlocks must be ≥ 2, got 1: one block is vLLM's null block, which holds no request"},
		{core.Config{NumBlocks: -3, MaxModelLen: -100}, "core: MaxModelLen must be ≥ 2, got -100"},
		// 2*MaxModelLen, the default cache, overflowed and the error
		// named NumBlocks.
		{core.Config{MaxModelLen: math.MaxInt/2 + 1}, fmt.Sprintf("core: MaxModelLen must be ≤ 536870912, got %d", math.MaxInt/2+1)},
		{core.Config{MaxModelLen: core.MaxModelLenMax + 1}, "core: MaxModelLen must be ≤ 536870912, got 536870913"},
		// vLLM refuses a step budget smaller than the batch: the default
		// MaxNumSeqs counts against a budget set alone.
		{core.Config{MaxNumBatchedTokens: 8}, "core: MaxNumBatchedTokens (8) must be ≥ MaxNumSeqs (256): each running request takes a token of a step's budget"},
		{core.Config{MaxNumSeqs: 5, MaxNumBatchedTokens: 4}, "core: MaxNumBatchedTokens (4) must be ≥ MaxNumSeqs (5): each running request takes a token of a step's budget"},
	} {
		assert.EqualError(t, c.cfg.WithDefaults().Validate(), c.want, "%+v", c.cfg)
	}
	if math.MaxInt > core.NumBlocksMax { // an int wider than a block id
		tooMany := core.NumBlocksMax
		tooMany++
		assert.EqualError(t, core.Config{NumBlocks: tooMany}.WithDefaults().Validate(),
			"core: NumBlocks must be ≤ 2147483647, got 2147483648: block tables hold 32-bit block ids")
	}
}

// TestSampleAtMasksStopsBelowMinTokens: below MinTokens neither EOS (unless
// ignored) nor a stop token is sampled; the next token id that stops nothing
// takes its place, wrapping at the vocabulary's end.
func TestSampleAtMasksStopsBelowMinTokens(t *testing.T) {
	m := core.ToyModel{EOSOdds: 3}
	key := m.Prepare([]int{7})
	eosAt := -1
	for i := 0; i < 50 && eosAt < 0; i++ {
		if m.TokenAt(key, i) == core.EOSTokenID {
			eosAt = i
		}
	}
	require.GreaterOrEqual(t, eosAt, 0)
	p := core.SamplingParams{MaxTokens: 60, MinTokens: eosAt + 1}
	assert.Equal(t, 1, core.SampleAt(m, key, eosAt, &p, core.EOSTokenID), "EOS gives way to token 1")
	p.StopTokenIDs = []int{1, 2}
	assert.Equal(t, 3, core.SampleAt(m, key, eosAt, &p, core.EOSTokenID), "and so do the stop tokens after it")
	p.IgnoreEOS = true
	assert.Equal(t, core.EOSTokenID, core.SampleAt(m, key, eosAt, &p, core.EOSTokenID), "an ignored EOS stops nothing")
	p = core.SamplingParams{MaxTokens: 60, MinTokens: eosAt}
	assert.Equal(t, core.EOSTokenID, core.SampleAt(m, key, eosAt, &p, core.EOSTokenID), "from MinTokens on, the model's own token")

	last := core.VocabSize - 1
	p = core.SamplingParams{MaxTokens: 2, MinTokens: 2, StopTokenIDs: []int{last}, IgnoreEOS: true}
	assert.Equal(t, 0, core.SampleAt(fixedModel(last), 0, 0, &p, core.EOSTokenID), "past the last id, the first")
	p.IgnoreEOS = false
	assert.Equal(t, 1, core.SampleAt(fixedModel(last), 0, 0, &p, core.EOSTokenID))
	all := make([]int, core.VocabSize)
	for i := range all {
		all[i] = i
	}
	p.StopTokenIDs = all
	assert.Equal(t, last, core.SampleAt(fixedModel(last), 0, 0, &p, core.EOSTokenID), "with every id a stop, nothing can take the model's place")
}

// fixedModel always samples the same token.
type fixedModel int

func (fixedModel) Prepare([]int) uint64            { return 0 }
func (m fixedModel) TokenAt(key uint64, i int) int { return int(m) }

// TestReserveFullSequenceAdmitsOnlyWhatCanFinishItsPrompt: vLLM's
// scheduler_reserve_full_isl (full_sequence_must_fit in allocate_slots) has
// a waiting request admitted only when the blocks of its whole sequence,
// less its prefix cache hits, are free. B's 32-token prompt needs 8 blocks
// while A holds 1 of the 8 usable: B waits until A ends, and nothing is
// preempted. Without it, B is admitted on its first chunk, and the two
// preempt each other for blocks.
func TestReserveFullSequenceAdmitsOnlyWhatCanFinishItsPrompt(t *testing.T) {
	long := make([]int, 32)
	for i := range long {
		long[i] = 7 + i
	}
	for _, reserve := range []bool{true, false} {
		s := newSched(core.Config{BlockSize: 4, NumBlocks: 9, MaxNumBatchedTokens: 8, MaxNumSeqs: 2, ReserveFullSequence: reserve})
		a := req("A", []int{1, 2, 3, 4}, core.SamplingParams{MaxTokens: 12, IgnoreEOS: true})
		b := req("B", long, core.SamplingParams{MaxTokens: 1, IgnoreEOS: true})
		require.NoError(t, s.AddRequest(a))
		require.NoError(t, s.AddRequest(b))
		so := s.Schedule()
		var ids []string
		for _, sc := range so.Scheduled {
			ids = append(ids, sc.Req.InternalID)
		}
		s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
		run(t, s, core.ToyModel{}, 200)
		if reserve {
			assert.Equal(t, []string{"A"}, ids, "B's whole prompt (8 blocks) does not fit in the 7 free")
			assert.Zero(t, s.Stats().Preemptions, "B is admitted once A has ended")
		} else {
			assert.Equal(t, []string{"A", "B"}, ids, "B's first chunk fits")
			assert.Positive(t, s.Stats().Preemptions)
		}
		assert.Len(t, a.Output, 12, "reserve %v", reserve)
		assert.Len(t, b.Output, 1, "reserve %v", reserve)
	}
}
