package scenario

import (
	"fmt"
	"maps"
	"slices"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
)

// ParallelAbortReuse is the founding test with parallel sampling, as vLLM's
// test_abort runs some of its requests with n=3: every request asks for
// several sequences, so that each runs in the core as one child request per
// sequence ("0_ID", "1_ID", …):
//
//	abort-a  (N 3, Delta, MaxTokens 100000), survivor (N 3, Cumulative, 8),
//	abort-b  (N 2, FinalOnly, 100000), on a model of 200µs a step;
//	partial := get_output(abort-a);         CHECK_FALSE(partial.finished)
//	abort({abort-a, abort-b})
//	final_a, final_b: finished, every sequence's reason "abort"
//	CHECK(each sequence of Drain(survivor) == its 8 tokens)
//	CHECK_FALSE(has_unfinished_requests())
//	reused := add_request(abort-a, N 3, MaxTokens 3, Delta)
//	CHECK(each sequence of Drain(reused) == its 3 tokens)
//
// On the legacy engine the children of the old and the new abort-a share
// their ids, so a starved output handler delivers an old child's token to
// the new one, as in the founding race; and an abort of the old parent that
// reaches the core late kills the new children.
var ParallelAbortReuse = &Scenario{
	Name:            "parallel-abort-reuse",
	Summary:         "the founding race with parallel sampling (N sequences a request, vLLM's n=3 in test_abort)",
	DefaultStrategy: "starve:output-handler",
	Run:             parallelAbortReuse,
	Targets:         props.SetOf(props.StaleFrameAfterReuse),
}

func init() { Register(ParallelAbortReuse) }

func parallelAbortReuse(x *Run) error {
	cfg := engine.Config{StepTime: FoundingStepTime}
	e, err := x.NewEngine(cfg)
	if err != nil {
		return err
	}
	room := x.room(cfg, "hello") // as in abort-reuse
	aborted, early := abortEnds(room, 100000)
	a, err := e.AddRequest("abort-a", "hello", engine.Params{MaxTokens: 100000, Output: engine.Delta, N: 3})
	if err != nil {
		return err
	}
	survivor, err := e.AddRequest("survivor", "hello", engine.Params{MaxTokens: 8, Output: engine.Cumulative, N: 3})
	if err != nil {
		return err
	}
	b, err := e.AddRequest("abort-b", "hello", engine.Params{MaxTokens: 100000, Output: engine.FinalOnly, N: 2})
	if err != nil {
		return err
	}

	partial, err := a.Next()
	if err != nil {
		return err
	}
	// A sequence the model length ends may end before the abort; every
	// other ends by it.
	ended := map[int]engine.FinishReason{}
	noteEnds(ended, partial)
	if i := endedOtherwise(ended, early); i >= 0 || partial.Finished && len(ended) != 3 {
		return fmt.Errorf("CHECK_FALSE(partial.finished) failed: abort-a finished on its own (sequences %v)", ended)
	}
	e.Abort("abort-a", "abort-b")
	// The abort ends every sequence at once, under the frontend's lock:
	// the last output carries them all (merged, for abort-a's Delta), but
	// those that ended before it.
	for _, r := range []*engine.Request{a, b} {
		n := 3
		if r == b {
			n, ended = 2, map[int]engine.FinishReason{}
		} else if partial.Finished {
			continue // the model length ended every sequence before the abort
		}
		before := maps.Clone(ended)
		last, err := x.readAll(r, func(out engine.Output) { noteEnds(ended, out) })
		if err != nil {
			return fmt.Errorf("get_output(%s) after abort: %w", r.ID(), err)
		}
		if !last.Finished || last.RequestID != r.ID() {
			return fmt.Errorf("CHECK(final.finished) failed for %s: finished=%v, request id %q", r.ID(), last.Finished, last.RequestID)
		}
		// The final output ends every sequence not ended before it, once.
		for _, c := range last.Completions {
			if _, was := before[c.Index]; was || c.FinishReason == "" {
				return fmt.Errorf("CHECK(the final output of %s ends each sequence not ended before it) failed: sequence %d, %q", r.ID(), c.Index, c.FinishReason)
			}
		}
		if len(ended) != n || len(last.Completions) != n-len(before) {
			return fmt.Errorf("CHECK(%d sequences in the final output of %s) failed: %d, %d ended before it", n-len(before), r.ID(), len(last.Completions), len(before))
		}
		if i := endedOtherwise(ended, aborted); i >= 0 {
			return fmt.Errorf("CHECK(final.finish_reason == \"abort\") failed for %s sequence %d: %q", r.ID(), i, ended[i])
		}
	}
	if err := x.checkSeqs(survivor, engine.Cumulative, 3, min(8, room)); err != nil {
		return err
	}
	if e.HasUnfinishedRequests() {
		return fmt.Errorf("CHECK_FALSE(engine.has_unfinished_requests()) failed")
	}

	reused, err := e.AddRequest("abort-a", "hello", engine.Params{MaxTokens: 3, Output: engine.Delta, N: 3})
	if err != nil {
		return fmt.Errorf("reusing abort-a: %w", err)
	}
	return x.checkSeqs(reused, engine.Delta, 3, min(3, room))
}

// noteEnds notes the end of each sequence out ends.
func noteEnds(ended map[int]engine.FinishReason, out engine.Output) {
	for _, c := range out.Completions {
		if c.FinishReason != "" {
			ended[c.Index] = c.FinishReason
		}
	}
}

// endedOtherwise returns the lowest sequence of those ended whose end ok
// does not take, or -1.
func endedOtherwise(ended map[int]engine.FinishReason, ok func(engine.FinishReason) bool) int {
	low := -1
	for i, r := range ended {
		if !ok(r) && (low < 0 || i < low) {
			low = i
		}
	}
	return low
}

// checkSeqs drains a request of n sequences and checks that each has
// exactly its model's first k tokens.
func (x *Run) checkSeqs(r *engine.Request, kind engine.OutputKind, n, k int) error {
	seqs, _, err := x.drainSeqs(r, kind)
	if err != nil {
		return err
	}
	if len(seqs) != n {
		return fmt.Errorf("CHECK(%d sequences of %s) failed: %d", n, r.ID(), len(seqs))
	}
	for i, got := range seqs {
		if w := wantSeq("hello", i, k); !slices.Equal(got, w) {
			return fmt.Errorf("CHECK(Drain(engine, %s) sequence %d == %d) failed: %d tokens %v, want %v", r.ID(), i, k, len(got), got, w)
		}
	}
	return nil
}

// drainSeqs is drain for a request of several sequences, of output kind
// kind: the tokens each received, Delta outputs concatenated, the latest
// of the others.
func (x *Run) drainSeqs(r *engine.Request, kind engine.OutputKind) (seqs [][]int, last engine.Output, err error) {
	last, err = x.readAll(r, func(out engine.Output) {
		for _, c := range out.Completions {
			for len(seqs) <= c.Index {
				seqs = append(seqs, nil)
			}
			if kind == engine.Delta {
				seqs[c.Index] = append(seqs[c.Index], c.TokenIDs...)
			} else {
				seqs[c.Index] = c.TokenIDs
			}
		}
	})
	return seqs, last, err
}

// wantSeq returns the model's first n tokens of sequence index for prompt.
func wantSeq(prompt string, index, n int) []int {
	m := core.ToyModel{}
	return core.TokensFor(m, core.SequenceKey(m.Prepare(core.Tokenizer{}.Encode(prompt)), index), n)
}
