package engine_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// Parallel sampling (Params.N, vLLM's n): a request of N > 1 sequences runs
// in the core as N child requests "INDEX_PARENT", each sampling with a key
// of its own (core.SequenceKey), and returns them in Output.Completions.

// seqWant returns the first n tokens that sequence index of a request for
// prompt with params p samples: the model's at the sequence's own key.
func seqWant(prompt string, index, n int, p engine.Params) []int {
	if n == 0 {
		return nil // as a sequence that received nothing has it
	}
	sp := p.Sampling()
	m := core.ToyModel{}
	key := core.SequenceKey(m.Prepare(core.Tokenizer{}.Encode(prompt)), index)
	out := make([]int, n)
	for pos := range out {
		out[pos] = core.SampleAt(m, key, pos, &sp, core.EOSTokenID)
	}
	return out
}

// childID is the internal id the core knows sequence index of a request by.
func childID(index int, parent string) string { return fmt.Sprintf("%d_%s", index, parent) }

// foldCompletions checks the shape of every output of a request of n
// sequences and returns what its caller has of each sequence at the end:
// the concatenation of its Delta completions, or its latest completion.
// Every output names the request, leaves the top-level tokens, text and
// reasons empty, carries at least one completion, sorted by Index, none of
// a sequence that finished in an earlier output; only the last output is
// finished, and by then every sequence is. FinalOnly returns one output
// holding every sequence.
func foldCompletions(t *testing.T, id, prompt string, n int, kind engine.OutputKind, outs []engine.Output) []engine.Completion {
	t.Helper()
	require.NotEmpty(t, outs, "%q returned no output", id)
	promptLen := len(core.Tokenizer{}.Encode(prompt))
	seqs := make([]engine.Completion, n)
	for i := range seqs {
		seqs[i].Index = i
	}
	for i, o := range outs {
		where := fmt.Sprintf("output %d of %d of %q (%s, N=%d)", i+1, len(outs), id, kind, n)
		assert.Equal(t, id, o.RequestID, where)
		assert.Equal(t, promptLen, o.PromptTokens, where)
		assert.Empty(t, o.TokenIDs, "%s: a request of N > 1 leaves the top-level tokens empty", where)
		assert.Empty(t, o.Text, "%s: a request of N > 1 leaves the top-level text empty", where)
		assert.Empty(t, o.FinishReason, "%s: a request of N > 1 leaves the top-level finish reason empty", where)
		assert.Empty(t, o.StopReason, where)
		assert.Equal(t, i == len(outs)-1, o.Finished, "%s: only the last output is finished", where)
		require.NotEmpty(t, o.Completions, "%s: an output with no sequence in it", where)
		for j, c := range o.Completions {
			require.True(t, c.Index >= 0 && c.Index < n, "%s: completion of sequence %d", where, c.Index)
			if j > 0 {
				require.Less(t, o.Completions[j-1].Index, c.Index, "%s: completions sorted by Index, each once", where)
			}
			s := &seqs[c.Index]
			require.Empty(t, s.FinishReason, "%s: sequence %d returned again after it finished with %q", where, c.Index, s.FinishReason)
			if kind == engine.Delta {
				s.TokenIDs = append(s.TokenIDs, c.TokenIDs...)
				s.Text += c.Text
			} else {
				require.True(t, len(c.TokenIDs) >= len(s.TokenIDs) && slices.Equal(c.TokenIDs[:len(s.TokenIDs)], s.TokenIDs),
					"%s: sequence %d's tokens %v do not extend its previous %v", where, c.Index, c.TokenIDs, s.TokenIDs)
				s.TokenIDs, s.Text = slices.Clone(c.TokenIDs), c.Text
			}
			s.FinishReason, s.StopReason = c.FinishReason, c.StopReason
		}
	}
	for i, s := range seqs {
		assert.NotEmpty(t, s.FinishReason, "sequence %d of %q never finished", i, id)
	}
	if kind == engine.FinalOnly {
		assert.Len(t, outs, 1, "a FinalOnly request returns one output")
		assert.Len(t, outs[0].Completions, n, "the FinalOnly output carries every sequence")
	}
	return seqs
}

// recorder keeps the engine events a test looks at; it is safe for the
// real runtime, and holds its lock across no scheduling point.
type recorder struct {
	mu     sync.Mutex
	events []engine.Event
}

func (r *recorder) observe(ev engine.Event) {
	switch ev.Kind {
	case core.EventAdd, core.EventAbort, core.EventFinish, core.EventCoreAdd, core.EventCoreAbort, core.EventFrameDelivered:
		ev.Tokens = slices.Clone(ev.Tokens)
		ev.Prompt, ev.Params = nil, nil
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	}
}

// of returns the recorded events of kind whose internal id keep accepts.
func (r *recorder) of(kind core.EventKind, keep func(ev engine.Event) bool) []engine.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []engine.Event
	for _, ev := range r.events {
		if ev.Kind == kind && keep(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// internalIDs maps the internal ids of the events of kind to their Index.
func (r *recorder) internalIDs(kind core.EventKind, keep func(ev engine.Event) bool) map[string]int {
	m := map[string]int{}
	for _, ev := range r.of(kind, keep) {
		m[ev.InternalID] = ev.Index
	}
	return m
}

// deliveredAll reports whether every one of n sequences of incarnation inc
// has had a token delivered.
func (r *recorder) deliveredAll(inc uint64, n int) bool {
	got := map[int]bool{}
	for _, ev := range r.of(core.EventFrameDelivered, func(ev engine.Event) bool { return ev.Incarnation == inc && len(ev.Tokens) > 0 }) {
		got[ev.Index] = true
	}
	return len(got) == n
}

// waitDelivered waits until every sequence of r has produced a token.
func waitDelivered(rt task.Runtime, rec *recorder, r *engine.Request, n int) {
	for !rec.deliveredAll(r.Incarnation(), n) {
		rt.Sleep(time.Millisecond)
	}
}

func allIDs(engine.Event) bool { return true }

func ofParent(parent string) func(engine.Event) bool {
	return func(ev engine.Event) bool { return strings.HasSuffix(ev.InternalID, "_"+parent) }
}

// TestParallelSamplingGivesEachSequenceItsOwnTokens: N=3 to MaxTokens, in
// each output kind. Sequence i has the model's tokens at key
// SequenceKey(Prepare(prompt), i) — sequence 0 those of a request of one
// sequence — and the text that decodes them; the sequences differ; each
// ends with reason length and MaxTokens tokens.
func TestParallelSamplingGivesEachSequenceItsOwnTokens(t *testing.T) {
	const n, maxTokens, prompt = 3, 12, "the quick brown fox"
	for _, kind := range allKinds {
		t.Run(kind.String(), func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				e := newEngine(t, rt, engine.Config{})
				defer e.Close()
				p := engine.Params{MaxTokens: maxTokens, N: n, Output: kind}
				outs := drain(t, add(t, e, "p", prompt, p))
				for i, o := range outs {
					for _, c := range o.Completions {
						assert.Equal(t, core.Tokenizer{}.Decode(c.TokenIDs), c.Text, "output %d, sequence %d: the text is its tokens' (no stop strings)", i, c.Index)
						if kind != engine.Delta {
							assert.Equal(t, seqWant(prompt, c.Index, len(c.TokenIDs), p), c.TokenIDs, "output %d, sequence %d", i, c.Index)
						}
					}
				}
				seqs := foldCompletions(t, "p", prompt, n, kind, outs)
				for i, s := range seqs {
					w := seqWant(prompt, i, maxTokens, p)
					assert.Equal(t, w, s.TokenIDs, "sequence %d", i)
					assert.Equal(t, core.Tokenizer{}.Decode(w), s.Text, "sequence %d", i)
					assert.Equal(t, engine.FinishLength, s.FinishReason, "sequence %d", i)
					assert.Empty(t, s.StopReason, "sequence %d", i)
				}
				assert.Equal(t, want(prompt, maxTokens), seqs[0].TokenIDs, "sequence 0 samples as a request of one sequence")
				for i := range seqs {
					for j := i + 1; j < n; j++ {
						assert.NotEqual(t, seqs[i].TokenIDs, seqs[j].TokenIDs, "sequences %d and %d", i, j)
					}
				}
				one := engine.Params{MaxTokens: 1, N: n, Output: kind}
				for i, s := range foldCompletions(t, "q", prompt, n, kind, drain(t, add(t, e, "q", prompt, one))) {
					assert.Equal(t, seqWant(prompt, i, 1, one), s.TokenIDs, "MaxTokens 1, sequence %d", i)
				}
				assert.False(t, e.HasUnfinishedRequests())
				require.NoError(t, e.WaitIdle(context.Background()))
			})
		})
	}
}

// TestParallelSamplingSlowConsumerGetsMergedCompletions: a consumer that
// reads only once the request has finished (WaitIdle: every batch was
// handled) finds one output holding every sequence, merged per Index — a
// Delta sequence's tokens and text appended, a Cumulative one's latest —
// with every token right.
func TestParallelSamplingSlowConsumerGetsMergedCompletions(t *testing.T) {
	const n, maxTokens, prompt = 3, 20, "hello there"
	for _, kind := range allKinds {
		t.Run(kind.String(), func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				e := newEngine(t, rt, engine.Config{})
				defer e.Close()
				p := engine.Params{MaxTokens: maxTokens, N: n, Output: kind}
				r := add(t, e, "slow", prompt, p)
				require.NoError(t, e.WaitIdle(context.Background()))
				assert.False(t, e.HasUnfinishedRequests(), "every sequence finished before anyone read")
				outs := drain(t, r)
				require.Len(t, outs, 1, "everything was merged into the one slot")
				seqs := foldCompletions(t, "slow", prompt, n, kind, outs)
				for i, s := range seqs {
					w := seqWant(prompt, i, maxTokens, p)
					assert.Equal(t, w, s.TokenIDs, "sequence %d", i)
					assert.Equal(t, core.Tokenizer{}.Decode(w), s.Text, "sequence %d", i)
					assert.Equal(t, engine.FinishLength, s.FinishReason, "sequence %d", i)
				}
			})
		})
	}
}

// TestParallelSamplingSlowDeltaReader: a Delta reader slower than the engine
// gets fewer outputs than tokens, and nothing of any sequence is lost.
func TestParallelSamplingSlowDeltaReader(t *testing.T) {
	const n, maxTokens, prompt = 3, 30, "hello"
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{})
		defer e.Close()
		p := engine.Params{MaxTokens: maxTokens, N: n, Output: engine.Delta}
		outs := readSlowly(t, rt, add(t, e, "slow", prompt, p))
		assert.Less(t, len(outs), n*maxTokens, "a slow consumer gets merged deltas")
		for i, s := range foldCompletions(t, "slow", prompt, n, engine.Delta, outs) {
			assert.Equal(t, seqWant(prompt, i, maxTokens, p), s.TokenIDs, "sequence %d", i)
			assert.Equal(t, core.Tokenizer{}.Decode(s.TokenIDs), s.Text, "sequence %d", i)
			assert.Equal(t, engine.FinishLength, s.FinishReason, "sequence %d", i)
		}
	})
}

// TestParallelSamplingAlongsideOtherRequests: requests of one and of
// several sequences, with the same prompt and running together, each get
// their own tokens; sequence 0 of each equals the request of one sequence.
func TestParallelSamplingAlongsideOtherRequests(t *testing.T) {
	const prompt, maxTokens = "hello", 10
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{})
		defer e.Close()
		type req struct {
			r *engine.Request
			p engine.Params
		}
		var reqs []req
		for i, n := range []int{1, 3, 0, 2, 4} {
			p := engine.Params{MaxTokens: maxTokens, N: n, Output: allKinds[i%3]}
			reqs = append(reqs, req{add(t, e, fmt.Sprintf("r%d", i), prompt, p), p})
		}
		for _, q := range reqs {
			outs := drain(t, q.r)
			if q.p.N <= 1 {
				for _, o := range outs {
					assert.Nil(t, o.Completions, q.r.ID())
				}
				assert.Equal(t, want(prompt, maxTokens), tokensOf(q.p.Output, outs), q.r.ID())
				continue
			}
			for i, s := range foldCompletions(t, q.r.ID(), prompt, q.p.N, q.p.Output, outs) {
				assert.Equal(t, seqWant(prompt, i, maxTokens, q.p), s.TokenIDs, "%s sequence %d", q.r.ID(), i)
			}
		}
	})
}

// TestParallelSamplingUnderPreemption: a KV cache too small for every
// sequence at once preempts some; each still gets exactly its tokens. The
// cache has 12 usable blocks (13, the null block aside).
func TestParallelSamplingUnderPreemption(t *testing.T) {
	const maxTokens = 20
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{BlockSize: 4, NumBlocks: 13})
		defer e.Close()
		prompts := []string{"one", "two words", "three more words"}
		var reqs []*engine.Request
		for i, prompt := range prompts {
			reqs = append(reqs, add(t, e, fmt.Sprintf("r%d", i), prompt, engine.Params{MaxTokens: maxTokens, N: 3, Output: engine.Delta}))
		}
		for i, r := range reqs {
			for j, s := range foldCompletions(t, r.ID(), prompts[i], 3, engine.Delta, drain(t, r)) {
				assert.Equal(t, seqWant(prompts[i], j, maxTokens, engine.Params{MaxTokens: maxTokens}), s.TokenIDs, "r%d sequence %d", i, j)
			}
		}
		assert.Positive(t, e.Stats().Preemptions, "the cache was meant to run out")
	})
}

// TestParallelSamplingInternalIDs: Request.InternalID is the parent's id;
// the frontend registers, and the core admits, one child per sequence,
// "INDEX_PARENT" with Event.Index INDEX; every frame reaches the sequence
// that produced it; a request of one sequence keeps its plain id.
func TestParallelSamplingInternalIDs(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		rec := &recorder{}
		e := newEngine(t, rt, engine.Config{Observer: rec.observe})
		defer e.Close()
		r := add(t, e, "x", "hello", engine.Params{MaxTokens: 4, N: 3, Output: engine.Delta})
		one := add(t, e, "y", "hello", engine.Params{MaxTokens: 4, N: 1})
		parent := r.InternalID()
		assert.True(t, strings.HasPrefix(parent, "x-"), "the parent's internal id %q is made as a request's of one sequence", parent)
		drain(t, r)
		drain(t, one)
		require.NoError(t, e.WaitIdle(context.Background()))

		x := func(ev engine.Event) bool { return ev.RequestID == "x" }
		wantIDs := map[string]int{childID(0, parent): 0, childID(1, parent): 1, childID(2, parent): 2}
		assert.Equal(t, wantIDs, rec.internalIDs(core.EventCoreAdd, x), "the core admits one child per sequence")
		assert.Equal(t, wantIDs, rec.internalIDs(core.EventAdd, x), "the frontend registers one child per sequence")
		assert.Len(t, rec.of(core.EventCoreAdd, x), 3, "each child is added once")
		perSeq := map[int]int{}
		for _, ev := range rec.of(core.EventFrameDelivered, x) {
			assert.Equal(t, childID(ev.Index, parent), ev.InternalID, "frame %d", ev.Frame)
			assert.Equal(t, ev.Index, ev.CollectorIndex, "frame %d of %s went to sequence %d", ev.Frame, ev.InternalID, ev.CollectorIndex)
			assert.Equal(t, ev.Incarnation, ev.Collector, "frame %d", ev.Frame)
			assert.Equal(t, r.Incarnation(), ev.Incarnation, "frame %d", ev.Frame)
			perSeq[ev.Index] += len(ev.Tokens)
		}
		assert.Equal(t, map[int]int{0: 4, 1: 4, 2: 4}, perSeq, "tokens delivered per sequence")
		finishes := rec.of(core.EventFinish, x)
		require.Len(t, finishes, 3, "each sequence ends once")
		for _, ev := range finishes {
			assert.Equal(t, engine.FinishLength, ev.Reason, ev.InternalID)
			assert.Equal(t, childID(ev.Index, parent), ev.InternalID)
			assert.Equal(t, seqWant("hello", ev.Index, 4, engine.Params{MaxTokens: 4}), ev.Tokens, ev.InternalID)
		}

		y := func(ev engine.Event) bool { return ev.RequestID == "y" }
		assert.Equal(t, map[string]int{one.InternalID(): 0}, rec.internalIDs(core.EventCoreAdd, y), "a request of one sequence keeps its id")
	})
}

// abortHow are the ways a caller ends a running request: Abort of its id,
// Cancel of its handle.
var abortHow = []string{"Abort", "Cancel"}

// TestParallelSamplingAbortEndsEverySequence: Abort(id) and Request.Cancel
// of a running N=3 request end every sequence with reason abort and its
// tokens so far, in a finished last output; the frontend forgets the
// request at once; WaitIdle returns; and the core was told to abort every
// child.
func TestParallelSamplingAbortEndsEverySequence(t *testing.T) {
	const n, prompt = 3, "hello"
	for _, how := range abortHow {
		for _, kind := range allKinds {
			t.Run(how+"/"+kind.String(), func(t *testing.T) {
				rttest.Both(t, func(t *testing.T, rt task.Runtime) {
					rec := &recorder{}
					e := newEngine(t, rt, engine.Config{Observer: rec.observe})
					defer e.Close()
					p := engine.Params{MaxTokens: 100000, N: n, Output: kind}
					r := add(t, e, "x", prompt, p)
					waitDelivered(rt, rec, r, n)
					if how == "Abort" {
						e.Abort("x")
					} else {
						r.Cancel()
					}
					assert.False(t, e.HasUnfinishedRequests(), "%s forgets every sequence at once", how)
					outs := drain(t, r)
					for i, s := range foldCompletions(t, "x", prompt, n, kind, outs) {
						assert.Equal(t, engine.FinishAbort, s.FinishReason, "sequence %d", i)
						require.NotEmpty(t, s.TokenIDs, "sequence %d keeps its tokens so far", i)
						assert.Equal(t, seqWant(prompt, i, len(s.TokenIDs), p), s.TokenIDs, "sequence %d", i)
						assert.Equal(t, core.Tokenizer{}.Decode(s.TokenIDs), s.Text, "sequence %d: an aborted sequence's text is whole", i)
					}
					e.Abort("x") // a no-op now
					r.Cancel()   // and so is this
					require.NoError(t, e.WaitIdle(context.Background()))
					assert.False(t, e.HasUnfinishedRequests())

					parent := r.InternalID()
					coreAborts := rec.internalIDs(core.EventCoreAbort, allIDs)
					for i := 0; i < n; i++ {
						assert.Contains(t, coreAborts, childID(i, parent), "the core was told to abort sequence %d", i)
					}
					assert.NotContains(t, coreAborts, parent, "the core knows no request by the parent's id")
					aborts := rec.internalIDs(core.EventAbort, ofParent(parent))
					assert.Equal(t, map[string]int{childID(0, parent): 0, childID(1, parent): 1, childID(2, parent): 2}, aborts)
				})
			})
		}
	}
}

// TestParallelSamplingFinalOnlyAbortGivesOneOutput: a FinalOnly request of
// N=3, its reader already waiting in Next, is aborted: the reader gets one
// output — finished, naming the request, with every sequence — never an
// empty unfinished one first.
func TestParallelSamplingFinalOnlyAbortGivesOneOutput(t *testing.T) {
	const n = 3
	for _, how := range abortHow {
		t.Run(how, func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				rec := &recorder{}
				e := newEngine(t, rt, engine.Config{Observer: rec.observe})
				defer e.Close()
				r := add(t, e, "x", "hello", engine.Params{MaxTokens: 100000, N: n, Output: engine.FinalOnly})
				var outs []engine.Output
				g := task.NewGroup(rt, "reader")
				g.Go("reader", func() { outs = drain(t, r) })
				waitDelivered(rt, rec, r, n)
				rt.Sleep(time.Millisecond) // the reader waits in Next
				if how == "Abort" {
					e.Abort("x")
				} else {
					r.Cancel()
				}
				g.Wait()
				require.Len(t, outs, 1, "a FinalOnly request returns exactly one output; got %+v", outs)
				assert.True(t, outs[0].Finished)
				assert.Equal(t, "x", outs[0].RequestID)
				assert.Equal(t, 1, outs[0].PromptTokens)
				require.Len(t, outs[0].Completions, n)
				for i, c := range outs[0].Completions {
					assert.Equal(t, i, c.Index)
					assert.Equal(t, engine.FinishAbort, c.FinishReason)
				}
			})
		})
	}
}

// TestParallelSamplingCloseEndsEverySequence: Close with an N=3 request
// live ends every sequence with reason abort in a finished last output.
func TestParallelSamplingCloseEndsEverySequence(t *testing.T) {
	const n, prompt = 3, "hello"
	for _, kind := range allKinds {
		t.Run(kind.String(), func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				rec := &recorder{}
				e := newEngine(t, rt, engine.Config{Observer: rec.observe})
				p := engine.Params{MaxTokens: 100000, N: n, Output: kind}
				r := add(t, e, "x", prompt, p)
				waitDelivered(rt, rec, r, n)
				require.NoError(t, e.Close())
				assert.False(t, e.HasUnfinishedRequests())
				for i, s := range foldCompletions(t, "x", prompt, n, kind, drain(t, r)) {
					assert.Equal(t, engine.FinishAbort, s.FinishReason, "sequence %d", i)
					assert.Equal(t, seqWant(prompt, i, len(s.TokenIDs), p), s.TokenIDs, "sequence %d", i)
				}
				finishes := rec.of(core.EventFinish, ofParent(r.InternalID()))
				assert.Len(t, finishes, n, "each sequence ends once")
				assert.ErrorIs(t, e.WaitIdle(context.Background()), engine.ErrClosed)
			})
		})
	}
}

// TestParallelSamplingGenerateCancelled: Generate of an N=3 request with a
// context already cancelled yields only the context's error; cancelled
// while it streams, it ends with the context's error after outputs of the
// model's tokens — and a FinalOnly request, which had nothing to give,
// yields nothing else. Either way nothing is left running.
func TestParallelSamplingGenerateCancelled(t *testing.T) {
	const n, prompt = 3, "hello"
	t.Run("before", func(t *testing.T) {
		rttest.Both(t, func(t *testing.T, rt task.Runtime) {
			rec := &recorder{}
			e := newEngine(t, rt, engine.Config{Observer: rec.observe})
			defer e.Close()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var outs []engine.Output
			var errs []error
			for out, err := range e.Generate(ctx, "g", prompt, engine.Params{MaxTokens: 100000, N: n, Output: engine.Delta}) {
				if err != nil {
					errs = append(errs, err)
					continue
				}
				outs = append(outs, out)
			}
			assert.Empty(t, outs)
			require.Len(t, errs, 1)
			assert.ErrorIs(t, errs[0], context.Canceled)
			assert.False(t, e.HasUnfinishedRequests())
			require.NoError(t, e.WaitIdle(context.Background()))
			adds := rec.internalIDs(core.EventCoreAdd, func(ev engine.Event) bool { return ev.RequestID == "g" })
			require.Len(t, adds, n)
			coreAborts := rec.internalIDs(core.EventCoreAbort, allIDs)
			for id := range adds {
				assert.Contains(t, coreAborts, id, "the core was told to abort %s", id)
			}
		})
	})
	t.Run("while-streaming/delta", func(t *testing.T) {
		rttest.Both(t, func(t *testing.T, rt task.Runtime) {
			e := newEngine(t, rt, engine.Config{})
			defer e.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p := engine.Params{MaxTokens: 100000, N: n, Output: engine.Delta}
			got := make([][]int, n)
			total := 0
			var last error
			for out, err := range e.Generate(ctx, "g", prompt, p) {
				if err != nil {
					last = err
					break
				}
				assert.False(t, out.Finished)
				for _, c := range out.Completions {
					assert.Empty(t, c.FinishReason, "sequence %d finished before the cancel", c.Index)
					got[c.Index] = append(got[c.Index], c.TokenIDs...)
					total += len(c.TokenIDs)
				}
				if total >= 3 {
					cancel()
				}
			}
			assert.ErrorIs(t, last, context.Canceled)
			for i, g := range got {
				assert.Equal(t, seqWant(prompt, i, len(g), p), g, "sequence %d", i)
			}
			assert.False(t, e.HasUnfinishedRequests())
			require.NoError(t, e.WaitIdle(context.Background()))
		})
	})
	t.Run("while-streaming/final-only", func(t *testing.T) {
		rttest.Both(t, func(t *testing.T, rt task.Runtime) {
			rec := &recorder{}
			e := newEngine(t, rt, engine.Config{Observer: rec.observe})
			defer e.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g := task.NewGroup(rt, "canceller")
			g.Go("canceller", func() {
				for len(rec.of(core.EventFrameDelivered, func(ev engine.Event) bool { return ev.RequestID == "g" })) < 3*n {
					rt.Sleep(time.Millisecond)
				}
				cancel()
			})
			var outs []engine.Output
			var errs []error
			for out, err := range e.Generate(ctx, "g", prompt, engine.Params{MaxTokens: 100000, N: n, Output: engine.FinalOnly}) {
				if err != nil {
					errs = append(errs, err)
					continue
				}
				outs = append(outs, out)
			}
			g.Wait()
			assert.Empty(t, outs, "a cancelled FinalOnly request yields nothing but the error")
			require.Len(t, errs, 1)
			assert.ErrorIs(t, errs[0], context.Canceled)
			assert.False(t, e.HasUnfinishedRequests())
			require.NoError(t, e.WaitIdle(context.Background()))
		})
	})
}

// stopCase is a prompt's N=2 request with a stop string that the text of
// sequence stopped reaches after stopAt tokens and the other's first
// otherLen tokens do not contain.
type stopCase struct {
	prompt   string
	stop     string
	stopped  int
	stopAt   int    // tokens of the stopped sequence when the stop string completes
	text     string // the stopped sequence's text, cut before the stop string
	otherLen int
}

// findStop finds a stop string of words tokens from sequence stopped's
// text for prompt, completing after at least 3 of its tokens, that the
// first otherLen tokens of the other sequence of two never spell.
func findStop(prompt string, stopped, words, maxStopAt, otherLen int) stopCase {
	tok := core.Tokenizer{}
	p := engine.Params{MaxTokens: otherLen}
	mine := seqWant(prompt, stopped, maxStopAt, p)
	other := tok.Decode(seqWant(prompt, 1-stopped, otherLen, p))
	for j := 2; j+words <= len(mine); j++ {
		stop := tok.Decode(mine[j : j+words])
		if strings.Contains(other, stop) {
			continue
		}
		for k := 1; k <= len(mine); k++ {
			if text := tok.Decode(mine[:k]); strings.Contains(text, stop) {
				if k < 3 {
					break
				}
				return stopCase{prompt: prompt, stop: stop, stopped: stopped, stopAt: k, text: text[:strings.Index(text, stop)], otherLen: otherLen}
			}
		}
	}
	panic(fmt.Sprintf("no stop string for %q", prompt))
}

// TestParallelSamplingStopStringStopsOneSequence: a stop string that only
// sequence 1's text holds finishes sequence 1 with reason stop, its text
// cut before the stop string and the stop string as its StopReason; the
// core is told to abort that child only; sequence 0 runs to MaxTokens with
// its whole text.
func TestParallelSamplingStopStringStopsOneSequence(t *testing.T) {
	const maxTokens = 30
	sc := findStop("hello", 1, 1, maxTokens, maxTokens)
	for _, kind := range allKinds {
		t.Run(kind.String(), func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				rec := &recorder{}
				e := newEngine(t, rt, engine.Config{Observer: rec.observe})
				defer e.Close()
				p := engine.Params{MaxTokens: maxTokens, N: 2, Output: kind, Stop: []string{"no such words here", sc.stop}}
				r := add(t, e, "s", sc.prompt, p)
				outs := drain(t, r)
				for i, o := range outs[:len(outs)-1] {
					for _, c := range o.Completions {
						if c.FinishReason == "" {
							assert.NotContains(t, c.Text, sc.stop, "output %d, sequence %d: no partial output shows the stop string", i, c.Index)
						}
					}
				}
				seqs := foldCompletions(t, "s", sc.prompt, 2, kind, outs)
				stopped, other := seqs[sc.stopped], seqs[1-sc.stopped]
				assert.Equal(t, engine.FinishStop, stopped.FinishReason)
				assert.Equal(t, sc.stop, stopped.StopReason)
				assert.Equal(t, seqWant(sc.prompt, sc.stopped, sc.stopAt, p), stopped.TokenIDs, "the stopped sequence's tokens up to the stop string")
				assert.Equal(t, sc.text, stopped.Text, "the text is cut before the stop string")
				assert.Equal(t, engine.FinishLength, other.FinishReason)
				assert.Empty(t, other.StopReason)
				assert.Equal(t, seqWant(sc.prompt, 1-sc.stopped, maxTokens, p), other.TokenIDs)
				assert.Equal(t, core.Tokenizer{}.Decode(other.TokenIDs), other.Text)

				require.NoError(t, e.WaitIdle(context.Background()))
				parent := r.InternalID()
				coreAborts := rec.internalIDs(core.EventCoreAbort, allIDs)
				assert.Contains(t, coreAborts, childID(sc.stopped, parent), "the core was told to abort the stopped sequence")
				assert.NotContains(t, coreAborts, childID(1-sc.stopped, parent), "the core was told to abort the sequence that ran on")
				assert.Empty(t, rec.of(core.EventAbort, ofParent(parent)), "nobody aborted the request")
			})
		})
	}
}

// TestParallelSamplingIDStaysLiveUntilEverySequenceEnds: once a stop
// string finished one sequence, the other still runs: the id is still
// live, Abort then ends only the running sequence, and the finished one
// keeps its reason stop.
func TestParallelSamplingIDStaysLiveUntilEverySequenceEnds(t *testing.T) {
	const long = 100000
	sc := findStop("hello", 1, 3, 40, long) // three words the other never spells
	for _, kind := range []engine.OutputKind{engine.Delta, engine.Cumulative} {
		t.Run(kind.String(), func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				rec := &recorder{}
				e := newEngine(t, rt, engine.Config{Observer: rec.observe})
				defer e.Close()
				p := engine.Params{MaxTokens: long, N: 2, Output: kind, Stop: []string{sc.stop}}
				r := add(t, e, "s", sc.prompt, p)
				var outs []engine.Output
				for stopSeen := false; !stopSeen; {
					out, err := r.Next()
					require.NoError(t, err)
					require.False(t, out.Finished)
					outs = append(outs, out)
					for _, c := range out.Completions {
						stopSeen = stopSeen || c.FinishReason != ""
					}
				}
				assert.True(t, e.HasUnfinishedRequests())
				_, err := e.AddRequest("s", sc.prompt, engine.Params{MaxTokens: 1})
				require.ErrorIs(t, err, engine.ErrDuplicateRequestID, "the id is live while a sequence runs")
				e.Abort("s")
				assert.False(t, e.HasUnfinishedRequests())
				outs = append(outs, drain(t, r)...)
				seqs := foldCompletions(t, "s", sc.prompt, 2, kind, outs)
				assert.Equal(t, engine.FinishStop, seqs[sc.stopped].FinishReason)
				assert.Equal(t, sc.stop, seqs[sc.stopped].StopReason)
				assert.Equal(t, sc.text, seqs[sc.stopped].Text)
				assert.Equal(t, engine.FinishAbort, seqs[1-sc.stopped].FinishReason)
				assert.Equal(t, seqWant(sc.prompt, 1-sc.stopped, len(seqs[1-sc.stopped].TokenIDs), p), seqs[1-sc.stopped].TokenIDs)

				require.NoError(t, e.WaitIdle(context.Background()))
				parent := r.InternalID()
				aborts := rec.internalIDs(core.EventAbort, ofParent(parent))
				assert.Equal(t, map[string]int{childID(1-sc.stopped, parent): 1 - sc.stopped}, aborts, "Abort ends only the sequence still running")
				finishes := rec.of(core.EventFinish, ofParent(parent))
				assert.Len(t, finishes, 2, "each sequence ends once")
				again := add(t, e, "s", sc.prompt, engine.Params{MaxTokens: 3, N: 2, Output: engine.Delta})
				for i, s := range foldCompletions(t, "s", sc.prompt, 2, engine.Delta, drain(t, again)) {
					assert.Equal(t, seqWant(sc.prompt, i, 3, p), s.TokenIDs, "reused, sequence %d", i)
				}
			})
		})
	}
}

// TestParallelSamplingIDReuse: the id of an N=3 request can be reused at
// once after it finished, was aborted or was cancelled — without reading
// the aborted one's final output first — and the new request, of three
// sequences or of one, gets only its own tokens.
func TestParallelSamplingIDReuse(t *testing.T) {
	const n, prompt = 3, "hello"
	for _, end := range []string{"finished", "aborted", "cancelled"} {
		t.Run(end, func(t *testing.T) {
			rttest.Both(t, func(t *testing.T, rt task.Runtime) {
				rec := &recorder{}
				e := newEngine(t, rt, engine.Config{Observer: rec.observe})
				defer e.Close()
				p := engine.Params{MaxTokens: 100000, N: n, Output: engine.Delta}
				if end == "finished" {
					p.MaxTokens = 5
				}
				old := add(t, e, "x", prompt, p)
				switch end {
				case "finished":
					drain(t, old)
				case "aborted":
					waitDelivered(rt, rec, old, n)
					e.Abort("x")
				case "cancelled":
					waitDelivered(rt, rec, old, n)
					old.Cancel()
				}
				q := engine.Params{MaxTokens: 6, N: n, Output: engine.Delta}
				fresh := add(t, e, "x", prompt, q)
				assert.NotEqual(t, old.InternalID(), fresh.InternalID())
				old.Cancel() // a stale handle must not touch the new incarnation
				for i, s := range foldCompletions(t, "x", prompt, n, engine.Delta, drain(t, fresh)) {
					assert.Equal(t, seqWant(prompt, i, 6, q), s.TokenIDs, "the reused id's sequence %d", i)
					assert.Equal(t, engine.FinishLength, s.FinishReason, "the reused id's sequence %d", i)
				}
				single := drain(t, add(t, e, "x", prompt, engine.Params{MaxTokens: 4, Output: engine.Delta}))
				assert.Equal(t, want(prompt, 4), tokensOf(engine.Delta, single), "reused by a request of one sequence")
				assert.Equal(t, engine.FinishLength, last(single).FinishReason)
				for _, o := range single {
					assert.Nil(t, o.Completions)
				}
				if end != "finished" {
					for i, s := range foldCompletions(t, "x", prompt, n, engine.Delta, drain(t, old)) {
						assert.Equal(t, engine.FinishAbort, s.FinishReason, "the old sequence %d", i)
						assert.Equal(t, seqWant(prompt, i, len(s.TokenIDs), p), s.TokenIDs, "the old sequence %d", i)
					}
				}
				require.NoError(t, e.WaitIdle(context.Background()))
				for _, ev := range rec.of(core.EventFrameDelivered, allIDs) {
					assert.Equal(t, ev.Incarnation, ev.Collector, "frame %d of %s", ev.Frame, ev.InternalID)
					assert.Equal(t, ev.Index, ev.CollectorIndex, "frame %d of %s", ev.Frame, ev.InternalID)
				}
			})
		})
	}
}

// TestParallelSamplingAbortBeforeTheAddsAreSent: an Abort between
// AddRequest's registering an N=3 request and its sending the ADDs ends
// every sequence, and for each child the core processes an ABORT after its
// ADD: a child whose every abort came before its ADD would run on for
// nobody. (The eager aborts queue may deliver a copy of the abort first;
// the input queue's copy must still follow the ADD.)
func TestParallelSamplingAbortBeforeTheAddsAreSent(t *testing.T) {
	const n = 3
	raced := 0
	for seed := uint64(1); seed <= 200; seed++ {
		res, events, outs := addAbortRace(seed, engine.Params{MaxTokens: 50, N: n, Output: engine.Delta})
		require.NoError(t, res.Err, "seed %d", seed)
		for i, s := range foldCompletions(t, "x", "hello", n, engine.Delta, outs) {
			assert.Equal(t, engine.FinishAbort, s.FinishReason, "seed %d: sequence %d", seed, i)
		}
		for i, ev := range events {
			switch ev.Kind {
			case core.EventAbort:
				if !sawCoreAdd(events[:i], ev.InternalID) {
					raced++
				}
			case core.EventCoreAdd:
				abortedAfter := slices.ContainsFunc(events[i+1:], func(x engine.Event) bool {
					return x.Kind == core.EventCoreAbort && x.InternalID == ev.InternalID
				})
				assert.True(t, abortedAfter, "seed %d: the core added %s and was never told to abort it after that; events%s", seed, ev.InternalID, kinds(events))
			}
		}
		if t.Failed() {
			return
		}
	}
	assert.Positive(t, raced, "some seed aborts a sequence before its ADD reaches the core")
}

// TestParallelSamplingValidation: N below 0 or above MaxN is refused with
// ErrInvalidRequest naming N; N=MaxN is accepted; N=0 and N=1 are a
// request of one sequence, exactly as before: no Completions, the
// top-level fields filled in, the plain internal id.
func TestParallelSamplingValidation(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		rec := &recorder{}
		e := newEngine(t, rt, engine.Config{Observer: rec.observe})
		defer e.Close()
		namesN := regexp.MustCompile(`\bN\b`)
		for _, n := range []int{-1, -1000, engine.MaxN + 1, 1 << 40} {
			_, err := e.AddRequest("bad", "hello", engine.Params{MaxTokens: 1, N: n})
			require.ErrorIs(t, err, engine.ErrInvalidRequest, "N=%d", n)
			assert.Regexp(t, namesN, err.Error(), "N=%d: the error names N", n)
			assert.Contains(t, err.Error(), fmt.Sprintf("got %d", n))
			assert.Contains(t, err.Error(), fmt.Sprint(engine.MaxN), "the error says the limit")
		}
		assert.False(t, e.HasUnfinishedRequests(), "a refused request leaves nothing behind")
		assert.Empty(t, rec.of(core.EventAdd, allIDs))

		for _, kind := range allKinds {
			var byN [2][]engine.Output
			for _, n := range []int{0, 1} {
				id := fmt.Sprintf("one-%s-%d", kind, n)
				r := add(t, e, id, "the quick brown fox", engine.Params{MaxTokens: 8, N: n, Output: kind})
				outs := drain(t, r)
				byN[n] = outs
				for i, o := range outs {
					assert.Nil(t, o.Completions, "%s output %d", id, i)
					assert.Equal(t, i == len(outs)-1, o.Finished, "%s output %d", id, i)
				}
				assert.Equal(t, want("the quick brown fox", 8), tokensOf(kind, outs), id)
				assert.Equal(t, core.Tokenizer{}.Decode(want("the quick brown fox", 8)), textOf(kind, outs), id)
				assert.Equal(t, engine.FinishLength, last(outs).FinishReason, id)
				adds := rec.internalIDs(core.EventCoreAdd, func(ev engine.Event) bool { return ev.RequestID == id })
				assert.Equal(t, map[string]int{r.InternalID(): 0}, adds, "%s: one request, by its plain internal id", id)
			}
			assert.Equal(t, tokensOf(kind, byN[0]), tokensOf(kind, byN[1]), "N=0 and N=1 are the same request")
			if kind == engine.FinalOnly && len(byN[0]) == 1 && len(byN[1]) == 1 {
				o0, o1 := byN[0][0], byN[1][0]
				o0.RequestID, o1.RequestID = "", ""
				assert.Equal(t, o0, o1, "N=0 and N=1 give the same output")
			}
		}
	})
}

// TestParallelSamplingMaxN: a request of MaxN sequences is accepted and
// gives every one of them its own tokens.
func TestParallelSamplingMaxN(t *testing.T) {
	e := newEngine(t, task.Real(), engine.Config{StepTime: engine.NoStepTime})
	defer e.Close()
	p := engine.Params{MaxTokens: 2, N: engine.MaxN, Output: engine.FinalOnly}
	outs := drain(t, add(t, e, "max", "hello", p))
	seqs := foldCompletions(t, "max", "hello", engine.MaxN, engine.FinalOnly, outs)
	for i, s := range seqs {
		if !assert.Equal(t, seqWant("hello", i, 2, p), s.TokenIDs, "sequence %d", i) {
			break
		}
	}
	assert.False(t, e.HasUnfinishedRequests())
	require.NoError(t, e.WaitIdle(context.Background()))
}

// TestParallelSamplingGenerateWalkAway: a consumer of Generate that stops
// reading an N=3 request early aborts every sequence of it.
func TestParallelSamplingGenerateWalkAway(t *testing.T) {
	const n = 3
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		rec := &recorder{}
		e := newEngine(t, rt, engine.Config{Observer: rec.observe})
		defer e.Close()
		p := engine.Params{MaxTokens: 100000, N: n, Output: engine.Delta}
		for out, err := range e.Generate(context.Background(), "w", "hello", p) {
			require.NoError(t, err)
			require.NotEmpty(t, out.Completions)
			c := out.Completions[0]
			assert.Equal(t, seqWant("hello", c.Index, len(c.TokenIDs), p), c.TokenIDs)
			break
		}
		assert.False(t, e.HasUnfinishedRequests(), "walking away aborts every sequence")
		require.NoError(t, e.WaitIdle(context.Background()))
		adds := rec.internalIDs(core.EventCoreAdd, func(ev engine.Event) bool { return ev.RequestID == "w" })
		require.Len(t, adds, n)
		coreAborts := rec.internalIDs(core.EventCoreAbort, allIDs)
		for id := range adds {
			assert.Contains(t, coreAborts, id, "the core was told to abort %s", id)
		}
		assert.Len(t, rec.of(core.EventFinish, func(ev engine.Event) bool { return ev.RequestID == "w" }), n, "each sequence ends once")
	})
}

// TestParallelSamplingEngineDeath: when the model fails, every sequence of
// an N=3 request ends with the engine-dead error, which its reader gets.
func TestParallelSamplingEngineDeath(t *testing.T) {
	const n = 3
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		rec := &recorder{}
		e := newEngine(t, rt, engine.Config{Model: panicModel{}, Observer: rec.observe})
		defer e.Close()
		r := add(t, e, "d", "hello", engine.Params{MaxTokens: 10, N: n, Output: engine.Delta})
		var err error
		for err == nil {
			var out engine.Output
			out, err = r.Next()
			if err == nil {
				assert.False(t, out.Finished, "a sequence reached MaxTokens past the model's failure")
			}
		}
		assert.ErrorIs(t, err, engine.ErrEngineDead)
		_, again := r.Next()
		assert.ErrorIs(t, again, engine.ErrEngineDead, "the error is sticky")
		assert.False(t, e.HasUnfinishedRequests())
		finishes := rec.of(core.EventFinish, ofParent(r.InternalID()))
		require.Len(t, finishes, n, "each sequence ends once")
		for _, ev := range finishes {
			assert.Equal(t, engine.FinishError, ev.Reason, ev.InternalID)
		}
	})
}
