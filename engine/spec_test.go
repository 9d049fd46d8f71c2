package engine_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestSpeculativeDecodingGivesTheSameOutputs: with draft tokens every
// caller gets what it gets without — the tokens, the text, the finish
// reason, the stop string or token — in every output kind, with stop
// tokens and strings, MinTokens,
// parallel sampling, chunked prefill and preemption, over 20 seeds of
// Chaos and Random, half of them with async scheduling; and steps do
// carry several tokens.
func TestSpeculativeDecodingGivesTheSameOutputs(t *testing.T) {
	jobs, _, textD, _, textC, _ := sameOutputJobs(t)
	var multis int
	var accepted, drafts int64
	for seed := uint64(1); seed <= 20; seed++ {
		st := sim.Chaos()
		if seed%2 == 0 {
			st = sim.Random()
		}
		plain := jobsWorkload(t, engine.Config{}, seed, st, jobs)
		// Every other seed with async scheduling: the model proposes the
		// drafts and the scheduler gives their placeholders.
		async := seed%4 >= 2
		spec := jobsWorkload(t, engine.Config{NumSpeculativeTokens: 3, AsyncScheduling: async}, seed, st, jobs)
		for _, j := range jobs {
			assert.Equal(t, plain.results[j.id], spec.results[j.id], "seed %d: %s", seed, j.id)
			assert.Empty(t, spec.results[j.id].Err, "seed %d: %s", seed, j.id)
		}
		assert.Equal(t, want("hello", 6), spec.results["stop-d"].Tokens[0], "seed %d: the stop string is in the sixth token", seed)
		assert.Equal(t, textD, spec.results["stop-d"].Text[0], "seed %d", seed)
		assert.Equal(t, textC, spec.results["stop-c"].Text[0], "seed %d", seed)
		assert.Equal(t, want("the quick brown fox", 5), spec.results["stop-token"].Tokens[0], "seed %d: the stop token is the fifth", seed)
		assert.Zero(t, plain.multis)
		multis += spec.multis
		accepted += spec.stats.SpecDecoding.AcceptedTokens
		drafts += spec.stats.SpecDecoding.DraftTokens
		if t.Failed() {
			t.Fatalf("seed %d (async scheduling %v): see above", seed, async)
		}
	}
	assert.Positive(t, multis, "frames carried several tokens")
	assert.Positive(t, accepted)
	assert.Less(t, accepted, drafts, "the default draft model misses some")
	t.Logf("over 20 seeds: %d frames of several tokens, %d of %d draft tokens accepted", multis, accepted, drafts)
}

// TestSpeculativeDecodingIsCounted: the engine counts the drafts it
// verified, their tokens and those accepted, by position, under vLLM's
// metric names; without draft tokens there are none.
func TestSpeculativeDecodingIsCounted(t *testing.T) {
	jobs := []asyncJob{{"a", "hello", engine.Params{MaxTokens: 9, IgnoreEOS: true}}}
	never := core.DraftModel{Target: core.ToyModel{}, MissOdds: math.MaxUint64}
	var b strings.Builder
	for _, async := range []bool{false, true} {
		w := jobsWorkload(t, engine.Config{NumSpeculativeTokens: 2, Draft: never, AsyncScheduling: async}, 1, sim.Random(), jobs)
		assert.Equal(t, want("hello", 9), w.results["a"].Tokens[0])
		// The prefill samples the first token; each later step keeps its
		// two drafts and one more: 3+3+2, the last cut short by
		// MaxTokens. With async scheduling a step scheduled past the end
		// is dropped, its drafts not counted.
		assert.Equal(t, engine.SpecDecodingStats{Drafts: 3, DraftTokens: 6, AcceptedTokens: 6, AcceptedPerPos: []int64{3, 3}}, w.stats.SpecDecoding, "async scheduling %v", async)
		b.Reset()
		require.NoError(t, w.stats.WritePrometheus(&b))
		assert.Contains(t, b.String(), "vllm:spec_decode_num_drafts_total 3\nvllm:spec_decode_num_draft_tokens_total 6\nvllm:spec_decode_num_accepted_tokens_total 6\n")
		assert.Contains(t, b.String(), `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3`+"\n"+`vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 3`+"\n")
	}

	w := jobsWorkload(t, engine.Config{}, 1, sim.Random(), jobs)
	assert.Zero(t, w.stats.SpecDecoding)
	b.Reset()
	require.NoError(t, w.stats.WritePrometheus(&b))
	assert.NotContains(t, b.String(), "spec_decode")
}

// TestSpeculativeDecodingConfigIsChecked: a negative count is refused
// with what was wrong.
func TestSpeculativeDecodingConfigIsChecked(t *testing.T) {
	_, err := engine.New(engine.Config{NumSpeculativeTokens: -1})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	assert.ErrorContains(t, err, "engine: NumSpeculativeTokens must be ≥ 0 (0: speculative decoding off), got -1")
}

// TestAStopStringInsideAStepsTokensEndsTheTokensThere: a stop string
// found in the text of a token inside a step's several tokens ends the
// request, its text before the string and its tokens at the token that
// completed it, as vLLM's open #47616 would trim them; under
// engine/keeps-tokens-past-stop-string, vLLM's behaviour without it, the
// step's later tokens stay in TokenIDs.
func TestAStopStringInsideAStepsTokensEndsTheTokensThere(t *testing.T) {
	stop, before := stopAt(t, "hello", 2)
	never := core.DraftModel{Target: core.ToyModel{}, MissOdds: math.MaxUint64}
	jobs := []asyncJob{{"a", "hello", engine.Params{MaxTokens: 30, IgnoreEOS: true, Output: engine.Delta, Stop: []string{stop}}}}
	for _, bug := range []bool{false, true} {
		cfg := engine.Config{NumSpeculativeTokens: 4, Draft: never}
		if bug {
			cfg.Faults = rttest.Armed(t, "engine/keeps-tokens-past-stop-string=return")
		}
		w := jobsWorkload(t, cfg, 1, sim.Random(), jobs)
		got := w.results["a"]
		assert.Equal(t, before, got.Text[0])
		assert.Equal(t, engine.FinishStop, got.Reason[0])
		assert.Equal(t, stop, got.StopReason[0])
		if bug {
			assert.Equal(t, want("hello", 6), got.Tokens[0], "the first step's token, then all the second's five")
			assert.Empty(t, w.cut)
		} else {
			assert.Equal(t, want("hello", 3), got.Tokens[0], "the stop string is in the third token, the second step's second")
			assert.Equal(t, map[string]int{"stop-string": 3}, w.cut, "the frontend tells the three it dropped")
		}
	}
}

// TestAStepsTokensFindTheStopStringOneTokenAStepFinds: when a step's
// several tokens complete two stop strings, the one whose token comes
// first ends the request, as it does one token a step, though the other
// starts earlier in the text: a draft model does not change the output.
func TestAStepsTokensFindTheStopStringOneTokenAStepFinds(t *testing.T) {
	tok := core.Tokenizer{}
	ts := want("hello", 6)
	word := func(i int) string { return strings.TrimPrefix(tok.Piece(ts[i]), " ") }
	long, short := word(1)+" "+word(2)+" "+word(3), word(2) // ending in the fourth token and in the third
	text := tok.Decode(ts)
	require.Equal(t, strings.Index(text, long)+len(word(1))+1, strings.Index(text, short), "the short stop string is first seen inside the long one: %q", text)
	jobs := []asyncJob{{"a", "hello", engine.Params{MaxTokens: 30, IgnoreEOS: true, Stop: []string{long, short}}}}
	never := core.DraftModel{Target: core.ToyModel{}, MissOdds: math.MaxUint64}
	for _, cfg := range []engine.Config{{}, {NumSpeculativeTokens: 4, Draft: never}} {
		w := jobsWorkload(t, cfg, 1, sim.Random(), jobs)
		got := w.results["a"]
		assert.Equal(t, short, got.StopReason[0], "drafts %d", cfg.NumSpeculativeTokens)
		assert.Equal(t, text[:strings.Index(text, short)], got.Text[0], "drafts %d", cfg.NumSpeculativeTokens)
		assert.Equal(t, want("hello", 3), got.Tokens[0], "drafts %d", cfg.NumSpeculativeTokens)
		if cfg.NumSpeculativeTokens > 0 {
			assert.Positive(t, w.multis, "the second step carried tokens 2 to 6")
		}
	}
}

// TestACutDeltaOutputHasNoRoomOverTheCoresTokens: a Delta output cut at a
// stop string inside a step's tokens ends where its tokens end, so that a
// caller appending to it copies rather than writes over the tokens past
// the stop, which the core still holds (it may still be running the
// request: its abort is on the way).
func TestACutDeltaOutputHasNoRoomOverTheCoresTokens(t *testing.T) {
	stop, _ := stopAt(t, "hello", 2)
	never := core.DraftModel{Target: core.ToyModel{}, MissOdds: math.MaxUint64}
	e, err := engine.New(engine.Config{Runtime: task.Real(), NumSpeculativeTokens: 4, Draft: never})
	require.NoError(t, err)
	defer e.Close()
	r, err := e.AddRequest("a", "hello", engine.Params{MaxTokens: 30, IgnoreEOS: true, Output: engine.Delta, Stop: []string{stop}})
	require.NoError(t, err)
	outs, err := readAll(r)
	require.NoError(t, err)
	got := last(outs).TokenIDs
	require.Equal(t, want("hello", 3)[len(want("hello", 3))-len(got):], got, "the stop string is in the third token")
	assert.Equal(t, len(got), cap(got))
}
