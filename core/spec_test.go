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
	pl := &pipeline{s: s}
	for step := 0; !r.Status.Finished() || pl.so != nil; step++ {
		require.Less(t, step, 100, "the request never ended")
		var frames []core.Frame
		if cfg.AsyncScheduling {
			frames = pl.step()
		} else {
			so := s.Schedule()
			if len(so.Scheduled) == 0 {
				s.RejectUnschedulable() // as the core does after a step of nothing
			}
			frames = s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
		}
		for _, f := range frames {
			sizes = append(sizes, len(f.NewTokens))
		}
		require.NoError(t, s.CheckBlocks(), "step %d", step)
	}
	return r, sizes, s.Stats().SpecDecoding
}

// inBothModes runs f as a subtest with cfg as it is and with
// AsyncScheduling: speculative decoding takes the same tokens either way.
func inBothModes(t *testing.T, cfg core.Config, f func(t *testing.T, cfg core.Config)) {
	t.Helper()
	for _, async := range []bool{false, true} {
		cfg.AsyncScheduling = async
		t.Run(map[bool]string{false: "sync", true: "async"}[async], func(t *testing.T) { f(t, cfg) })
	}
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
			inBothModes(t, core.Config{BlockSize: 4, EnablePrefixCaching: true}, func(t *testing.T, cfg core.Config) {
				r, sizes, st := specRun(t, cfg, tc.k, tc.miss, p)
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
	inBothModes(t, core.Config{BlockSize: 4}, func(t *testing.T, cfg core.Config) {

		stop := core.SamplingParams{MaxTokens: 20, IgnoreEOS: true, StopTokenIDs: []int{model[3]}}
		r, sizes, _ := specRun(t, cfg, 4, never, stop)
		assert.Equal(t, model[:4], r.Output, "the stop token, the second of the step's tokens, ends it")
		assert.Equal(t, core.StatusFinishedStopped, r.Status)
		assert.Equal(t, model[3], r.StopReason)
		assert.Equal(t, []int{1, 3}, sizes, "the step's tokens after the stop token are dropped")

		r, sizes, _ = specRun(t, cfg, 4, never, core.SamplingParams{MaxTokens: 7, IgnoreEOS: true})
		assert.Equal(t, model[:7], r.Output)
		assert.Equal(t, []int{1, 5, 1}, sizes, "MaxTokens cuts the second verification's five tokens to one")

		r, _, _ = specRun(t, withModelLen(cfg, 15), 4, never, core.SamplingParams{MaxTokens: 20, IgnoreEOS: true})
		assert.Equal(t, model[:6], r.Output, "the model length leaves room for 6 tokens after the prompt")
		assert.Equal(t, core.StatusFinishedLength, r.Status)
	})
}

// TestADraftThatDoesNotFitIsNoReasonToReject: a request alone in a
// cache of 12 slots, whose prompt of 9 and 3 tokens more fit, asks room
// for its 3 drafts too: past the cache it preempts itself. It was then
// rejected as unschedulable; admitted again it computes its sequence
// alone, which fits, and ends with the model's tokens.
func TestADraftThatDoesNotFitIsNoReasonToReject(t *testing.T) {
	p := core.SamplingParams{MaxTokens: 3, IgnoreEOS: true}
	inBothModes(t, core.Config{BlockSize: 4, NumBlocks: 4}, func(t *testing.T, cfg core.Config) {
		r, _, _ := specRun(t, cfg, 3, 1, p)
		assert.Equal(t, core.StatusFinishedLength, r.Status)
		assert.Equal(t, core.Sampled(core.ToyModel{}, seq(1, 9), 3, &p, core.EOSTokenID), r.Output)
		assert.Positive(t, r.Preemptions, "the drafts did not fit")
	})
}

func withModelLen(cfg core.Config, n int) core.Config {
	cfg.MaxModelLen = n
	return cfg
}

// TestSpeculativeDecodingIsChecked: a negative number of draft tokens is
// refused, saying what was wrong.
func TestSpeculativeDecodingIsChecked(t *testing.T) {
	err := core.Config{NumSpeculativeTokens: -1}.WithDefaults().Validate()
	assert.ErrorContains(t, err, "NumSpeculativeTokens must be ≥ 0")
	assert.NoError(t, core.Config{NumSpeculativeTokens: 2, AsyncScheduling: true}.WithDefaults().Validate())
}

// TestAsyncSpeculativeDecodingDropsThePlaceholdersOfARequestPassedOver:
// with async scheduling a step gives its requests draft placeholders for
// their next step, which the model fills with the drafts it proposed as it
// sampled them. Under a budget of three tokens, x's token and two drafts
// take every step after the first, and r is passed over until x ends; the
// model holds drafts only for its last step's requests, so r's next step
// computes one token and no draft. Under
// core/spec-placeholders-outlive-their-window r keeps its placeholders,
// and that step gives the model two drafts it does not have: token -1 at
// its input (vLLM's #37159), whose panic kills the engine core.
func TestAsyncSpeculativeDecodingDropsThePlaceholdersOfARequestPassedOver(t *testing.T) {
	run := func(t *testing.T, cfg core.Config) (*core.Request, *pipeline) {
		cfg.AsyncScheduling, cfg.BlockSize, cfg.MaxNumBatchedTokens = true, 4, 3
		cfg.NumSpeculativeTokens, cfg.Draft = 2, core.DraftModel{Target: core.ToyModel{}, MissOdds: math.MaxUint64}
		s := core.NewScheduler(cfg.WithDefaults())
		x := &core.Request{InternalID: "x", ExternalID: "x", Prompt: []int{1}, Params: core.SamplingParams{MaxTokens: 7, IgnoreEOS: true}}
		r := &core.Request{InternalID: "r", ExternalID: "r", Prompt: []int{2, 3}, Params: core.SamplingParams{MaxTokens: 10, IgnoreEOS: true}}
		require.NoError(t, s.AddRequest(x))
		require.NoError(t, s.AddRequest(r))
		p := &pipeline{s: s}
		p.step() // both prompts, each sampling its first token
		require.Len(t, p.so.Scheduled, 2)
		for range 3 {
			// x's token and drafts, the last step scheduled in case the
			// one before it keeps too few: r passed over.
			p.step()
			require.Len(t, p.so.Scheduled, 1)
			require.Equal(t, x, p.so.Scheduled[0].Req)
			require.Equal(t, 2, p.so.Scheduled[0].Drafts)
		}
		require.True(t, x.Status.Finished())
		require.Len(t, x.Output, 7, "one token, then two steps of three")
		return r, p
	}
	t.Run("fixed", func(t *testing.T) {
		r, p := run(t, core.Config{})
		p.step()
		require.Len(t, p.so.Scheduled, 1)
		assert.Equal(t, r, p.so.Scheduled[0].Req)
		assert.Equal(t, 0, p.so.Scheduled[0].Drafts, "no drafts: the model has none for it")
		assert.Equal(t, 1, p.so.Scheduled[0].NumTokens)
		p.step()
		assert.Equal(t, 2, p.so.Scheduled[0].Drafts, "placeholders again, after a step with it")
		p.drain(t)
		assert.Equal(t, core.Sampled(core.ToyModel{}, []int{2, 3}, 10, &r.Params, core.EOSTokenID), r.Output)
	})
	t.Run("bug", func(t *testing.T) {
		defer func() {
			assert.Equal(t, `core: draft token -1 reached the model's input: request "r" (incarnation 0) was scheduled 2 draft placeholder(s) the worker has no drafts for, as it was not in the step before (a device-side assert)`, recover())
		}()
		_, p := run(t, core.Config{Faults: rttest.Armed(t, "core/spec-placeholders-outlive-their-window=return")})
		p.step()
		t.Error("the step that passed r over ran, and r's next step did not reach the model")
	})
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

// TestAResetWithDraftsInFlightDropsTheStaleStepAlone: with async
// scheduling and draft tokens, a reset of the prefix cache preempts r
// while its step of a token and two drafts is in flight; that step's
// output is stale when it comes back, and three output placeholders are
// marked to drop with it. The engine drops that step alone, its token and
// drafts together, and r, admitted again, ends with the model's tokens.
// core/discard-counts-frames drops one output a placeholder — vLLM's, its
// open #49620 — so that r's next two outputs are lost while the model goes
// on from them: its tokens are not the model's. Under
// core/spec-rejects-before-discard (vLLM's before #46066) the stale step's
// two rejected drafts are taken off r as admitted again, whose next output
// then finds no placeholder left.
func TestAResetWithDraftsInFlightDropsTheStaleStepAlone(t *testing.T) {
	run := func(t *testing.T, fp string, miss uint64) *core.Request {
		cfg := core.Config{AsyncScheduling: true, BlockSize: 4, NumSpeculativeTokens: 2, Draft: core.DraftModel{Target: core.ToyModel{}, MissOdds: miss}}
		if fp != "" {
			cfg.Faults = rttest.Armed(t, fp+"=return")
		}
		s := core.NewScheduler(cfg.WithDefaults())
		r := &core.Request{InternalID: "r", ExternalID: "r", Prompt: seq(1, 9), Params: core.SamplingParams{MaxTokens: 12, IgnoreEOS: true}}
		require.NoError(t, s.AddRequest(r))
		p := &pipeline{s: s}
		p.step() // the prefill
		p.step() // a token and two drafts, in flight
		require.Equal(t, 2, p.so.Scheduled[0].Drafts)
		_, ok := s.ResetPrefixCache(true)
		require.True(t, ok)
		require.Equal(t, 3, r.Discard(), "the step's token and drafts")
		p.drain(t)
		assert.Equal(t, core.StatusFinishedLength, r.Status)
		return r
	}
	want := core.Sampled(core.ToyModel{}, seq(1, 9), 12, &core.SamplingParams{MaxTokens: 12, IgnoreEOS: true}, core.EOSTokenID)
	for _, miss := range []uint64{1, math.MaxUint64} {
		assert.Equal(t, want, run(t, "", miss).Output, "drafts missed one in %d", miss)
		assert.NotEqual(t, want, run(t, "core/discard-counts-frames", miss).Output, "drafts missed one in %d", miss)
	}
	assert.Equal(t, want, run(t, "core/spec-rejects-before-discard", math.MaxUint64).Output, "no draft rejected: nothing taken off")
	assert.PanicsWithValue(t, `core: request "r" (incarnation 0) got an output of a step that did not schedule it: no output placeholder left`,
		func() { run(t, "core/spec-rejects-before-discard", 1) })
}
