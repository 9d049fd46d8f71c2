package core_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/internal/rttest"
)

// specRun runs one request of prompt 1…9 to its end with k draft tokens
// a step, drawn by a draft model that misses one token in miss, and
// returns it, the frames' token counts and the scheduler's counts.
func specRun(t *testing.T, cfg core.Config, k int, miss uint64, p core.SamplingParams) (*core.Request, []int, core.SpecDecodingStats) {
	t.Helper()
	cfg.NumSpeculativeTokens = k
	cfg.Draft = core.DraftModel{Target: core.ToyModel{}, MissOdds: miss}
	s := core.NewScheduler(cfg.WithDefaults())
	r := &core.Request{InternalID: "a", ExternalID: "a", Prompt: seq(1, 9), Params: p}
	require.NoError(t, s.AddRequest(r))
	var sizes []int
	for step := 0; !r.Status.Finished(); step++ {
		require.Less(t, step, 100, "the request never ended")
		so := s.Schedule()
		for _, f := range s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{})) {
			sizes = append(sizes, len(f.NewTokens))
		}
		require.NoError(t, s.CheckBlocks(), "step %d", step)
	}
	return r, sizes, s.Stats().SpecDecoding
}

// TestSpeculativeDecodingKeepsTheModelsTokens: a request decoded with
// draft tokens samples the model's tokens, the same as without them; a
// step keeps the drafts the model agrees with, from the first, and the
// model's token after them, so the more drafts agree, the fewer steps. A
// draft model that misses every token leaves one token a step, as without;
// one that never misses, k+1.
func TestSpeculativeDecodingKeepsTheModelsTokens(t *testing.T) {
	p := core.SamplingParams{MaxTokens: 20, IgnoreEOS: true}
	want := core.Sampled(core.ToyModel{}, seq(1, 9), 20, &p, core.EOSTokenID)
	for _, tc := range []struct {
		name  string
		k     int
		miss  uint64
		steps int
	}{
		{"off", 0, 0, 20},
		{"every draft wrong", 3, 1, 20},
		{"every draft right", 3, math.MaxUint64, 1 + 5}, // the prefill's token, then 4+4+4+4+3
		{"one in four wrong", 3, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sizes, st := specRun(t, core.Config{BlockSize: 4, EnablePrefixCaching: true}, tc.k, tc.miss, p)
			assert.Equal(t, want, r.Output, "the model's tokens")
			assert.Equal(t, core.StatusFinishedLength, r.Status)
			if tc.steps > 0 {
				assert.Len(t, sizes, tc.steps, "steps with tokens: %v", sizes)
			}
			if tc.k == 0 {
				assert.Zero(t, st.Drafts)
				return
			}
			assert.Equal(t, int64(len(sizes)-1), st.Drafts, "every step after the first verified a draft")
			// Each step keeps its accepted drafts and one token more, but
			// the last, which MaxTokens may cut short after its drafts
			// were counted accepted, as vLLM counts them.
			kept := int64(len(want) - len(sizes))
			assert.GreaterOrEqual(t, st.AcceptedTokens, kept)
			assert.LessOrEqual(t, st.AcceptedTokens, kept+int64(tc.k))
			var perPos int64
			for i, n := range st.AcceptedPerPos {
				perPos += n
				if i > 0 {
					assert.LessOrEqual(t, n, st.AcceptedPerPos[i-1], "a draft's token is accepted only after those before it")
				}
			}
			assert.Equal(t, st.AcceptedTokens, perPos)
			switch tc.miss {
			case 1:
				assert.Zero(t, st.AcceptedTokens)
			case math.MaxUint64:
				assert.Equal(t, st.DraftTokens, st.AcceptedTokens)
			default:
				assert.Positive(t, st.AcceptedTokens)
				assert.Less(t, st.AcceptedTokens, st.DraftTokens)
			}
		})
	}
}

// TestSpeculativeDecodingStopsWhereTheModelStops: a step that keeps
// several tokens takes them one by one, each checked for a stop, and drops
// what follows one, as vLLM's _update_request_with_output: a stop token
// among them ends the request there, MaxTokens cuts the last step short,
// and the model length bounds the drafts a step computes.
func TestSpeculativeDecodingStopsWhereTheModelStops(t *testing.T) {
	model := core.Sampled(core.ToyModel{}, seq(1, 9), 40, &core.SamplingParams{MaxTokens: 40, IgnoreEOS: true}, core.EOSTokenID)
	never := uint64(math.MaxUint64)

	stop := core.SamplingParams{MaxTokens: 20, IgnoreEOS: true, StopTokenIDs: []int{model[3]}}
	r, sizes, _ := specRun(t, core.Config{BlockSize: 4}, 4, never, stop)
	assert.Equal(t, model[:4], r.Output, "the stop token, the second of the step's tokens, ends it")
	assert.Equal(t, core.StatusFinishedStopped, r.Status)
	assert.Equal(t, model[3], r.StopReason)
	assert.Equal(t, []int{1, 3}, sizes, "the step's tokens after the stop token are dropped")

	r, sizes, _ = specRun(t, core.Config{BlockSize: 4}, 4, never, core.SamplingParams{MaxTokens: 7, IgnoreEOS: true})
	assert.Equal(t, model[:7], r.Output)
	assert.Equal(t, []int{1, 5, 1}, sizes, "MaxTokens cuts the second verification's five tokens to one")

	r, _, _ = specRun(t, core.Config{BlockSize: 4, MaxModelLen: 15}, 4, never, core.SamplingParams{MaxTokens: 20, IgnoreEOS: true})
	assert.Equal(t, model[:6], r.Output, "the model length leaves room for 6 tokens after the prompt")
	assert.Equal(t, core.StatusFinishedLength, r.Status)
}

// TestSpeculativeDecodingIsRefusedWithAsyncScheduling: the engine does not
// model draft tokens with async scheduling, and says so.
func TestSpeculativeDecodingIsRefusedWithAsyncScheduling(t *testing.T) {
	err := core.Config{NumSpeculativeTokens: 2, AsyncScheduling: true}.WithDefaults().Validate()
	assert.ErrorContains(t, err, "NumSpeculativeTokens (2) with AsyncScheduling is not modelled")
	err = core.Config{NumSpeculativeTokens: -1}.WithDefaults().Validate()
	assert.ErrorContains(t, err, "NumSpeculativeTokens must be ≥ 0")
}

// TestSpeculativeDecodingTakingTokensAtOnceGoesPastTheStop plants
// core/spec-takes-tokens-at-once: a step's kept tokens appended together
// and only the last checked for a stop. The stop token, the second of a
// step's five tokens, no longer ends the request, and MaxTokens is
// passed by the step that reaches it.
func TestSpeculativeDecodingTakingTokensAtOnceGoesPastTheStop(t *testing.T) {
	model := core.Sampled(core.ToyModel{}, seq(1, 9), 40, &core.SamplingParams{MaxTokens: 40, IgnoreEOS: true}, core.EOSTokenID)
	cfg := core.Config{BlockSize: 4, Faults: rttest.Armed(t, "core/spec-takes-tokens-at-once=return")}
	never := uint64(math.MaxUint64)

	r, sizes, _ := specRun(t, cfg, 4, never, core.SamplingParams{MaxTokens: 9, IgnoreEOS: true, StopTokenIDs: []int{model[3]}})
	assert.Equal(t, model[:11], r.Output, "past the stop token at 3, and past MaxTokens 9: 1+5+5 tokens")
	assert.Equal(t, []int{1, 5, 5}, sizes)
	assert.Equal(t, core.StatusFinishedLength, r.Status)
}
