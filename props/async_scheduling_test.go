package props_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
)

// TestAsyncSchedulingPassesTheCheckerOnTheRealRuntime: async scheduling on
// goroutines, with a short step, and clients that reuse their ids at once
// after a request ran to its end, was aborted, was cancelled or finished
// on a stop string — which the frontend finds and aborts in the core while
// the core computes the request's next step — some asking for two
// sequences: no property breaks and every request ends. Under make test it
// runs with the race detector.
//
// The same abort-and-add-again with the planted bug core/async-output-by-id
// (vLLM #42492), on the legacy engine, whose core knows a request by the
// caller's id: the new request takes the token of the old one's step in
// flight, which the checker catches; and when the new request's first
// step is a chunk of its prompt, which samples nothing, the core dies on
// its count of output placeholders. The fixed engine, with the bug
// planted, passes: its core never sees an id again.
func TestAsyncSchedulingPassesTheCheckerOnTheRealRuntime(t *testing.T) {
	c, w := asyncSchedulingWorkload(t)
	require.NoError(t, c.Finish())
	assert.Empty(t, c.Violations())
	s := c.Summary()
	assert.Equal(t, 32, s.Requests)
	assert.Equal(t, 32, s.Finished, "every request finished")
	assert.Equal(t, 28, s.Reused, "every round but a client's first reuses its id")
	assert.Equal(t, w.aborted, s.Aborted, "aborted and cancelled, as their callers saw (a request of two sequences by its first)")
	assert.Positive(t, w.aborted)
	assert.Positive(t, w.stopsAbortedInCore, "a request the frontend stopped on a stop string was still running in the core")
	assert.Zero(t, w.st.KVUsedBlocks, "nothing holds a block once the core is idle")

	// The planted bug, where the core reuses ids: a stale token, which
	// the checker catches; with chunked prefill, a dead core.
	c, got := asyncReuseWorkload(t, true, true, false)
	var v *props.Violation
	require.ErrorAs(t, c.Finish(), &v, "the planted bug goes unseen")
	assert.True(t, slices.ContainsFunc(c.Violations(), func(v *props.Violation) bool {
		return v.Property == props.ModelTokens && strings.Contains(v.Detail, "emitted by the core: token 0 is")
	}), "the new request's first token is not its own: %v", c.Violations())
	assert.False(t, got.own, "the caller got the old request's token")
	t.Logf("legacy engine, bug planted: a stale token after %d attempt(s)", got.attempts)

	c, got = asyncReuseWorkload(t, true, true, true)
	require.ErrorIs(t, got.err, engine.ErrEngineDead)
	assert.ErrorContains(t, got.err, "no output placeholder left")
	assert.ErrorContains(t, c.Dead(), "no output placeholder left")
	t.Logf("legacy engine, bug planted, chunked prefill: the core died after %d attempt(s)", got.attempts)

	// The fixed engine with the bug planted: nothing to see.
	for _, chunked := range []bool{false, true} {
		c, got = asyncReuseWorkload(t, false, true, chunked)
		require.NoError(t, got.err, "chunked=%v", chunked)
		assert.True(t, got.own, "chunked=%v: the new request got its own tokens", chunked)
		require.NoError(t, c.Finish(), "chunked=%v", chunked)
		assert.NoError(t, c.Dead(), "chunked=%v", chunked)
		assert.Equal(t, 1, got.attempts, "chunked=%v: one attempt, nothing to try again for", chunked)
	}
}

// asyncStop returns a stop string that the model's tokens for prompt spell
// first at token j ≥ 2: a request with it stops after j+1 tokens.
func asyncStop(t *testing.T, prompt string) string {
	t.Helper()
	tok := core.Tokenizer{}
	ts := core.Tokens(core.ToyModel{}, tok.Encode(prompt), 20)
	text := tok.Decode(ts)
	for j := 2; j < len(ts); j++ {
		if s := tok.Piece(ts[j]); strings.Index(text, s) == len(tok.Decode(ts[:j])) {
			return s
		}
	}
	t.Fatalf("no stop string for %q", prompt)
	return ""
}

// finishOfFirst returns how a request's first sequence finished, as its
// outputs tell.
func finishOfFirst(outs []engine.Output) engine.FinishReason {
	for _, o := range outs {
		if o.FinishReason != "" {
			return o.FinishReason
		}
		for _, c := range o.Completions {
			if c.Index == 0 && c.FinishReason != "" {
				return c.FinishReason
			}
		}
	}
	return ""
}

type asyncWorkloadResult struct {
	st                 engine.Stats
	stopsAbortedInCore int
	aborted            int
}

// asyncSchedulingWorkload runs four clients of eight rounds each on an
// engine with async scheduling and a 50µs step, the checker on every
// event, and returns the checker, the engine's stats once the core is
// idle, how many core aborts found a request that had finished on a stop
// string still held, and how many requests' callers saw their first
// sequence aborted.
func asyncSchedulingWorkload(t *testing.T) (*props.Checker, asyncWorkloadResult) {
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen)
	locked := c.Locked()
	var mu sync.Mutex
	stopped := map[uint64]bool{} // incarnations that finished on a stop string
	var coreAborts []uint64      // incarnations the core held when it aborted them
	var aborted atomic.Int32     // requests whose callers saw the first sequence aborted
	observe := func(ev core.Event) {
		locked(ev)
		if ev.Kind == core.EventCoreAbort && ev.Incarnation != 0 {
			mu.Lock()
			coreAborts = append(coreAborts, ev.Incarnation)
			mu.Unlock()
		}
	}
	e, err := engine.New(engine.Config{Observer: observe, StepTime: 50 * time.Microsecond, AsyncScheduling: true})
	require.NoError(t, err)
	questions := []string{"what is the sea", "why is the sun hot", "how far is the moon from the earth"}
	stops := make([]string, len(questions))
	for i, q := range questions {
		stops[i] = asyncStop(t, q)
	}
	kinds := []engine.OutputKind{engine.Cumulative, engine.Delta, engine.FinalOnly}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for client := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint("client-", client)
			fail := func(round int, format string, args ...any) {
				errs <- fmt.Errorf("%s round %d: %s", id, round, fmt.Sprintf(format, args...))
			}
			for round := range 8 {
				q := (client + round) % len(questions)
				// Rounds 0-3 ask for one sequence, 4-7 for two; a round's
				// id is reused at once by the next.
				p := engine.Params{MaxTokens: 4 + 3*(round%4), Output: kinds[(client+round)%len(kinds)], N: 1 + round/4}
				if round%4 == 3 {
					p.MaxTokens, p.Stop = 200, []string{stops[q]}
				}
				r, err := e.AddRequest(id, questions[q], p)
				if err != nil {
					fail(round, "%v", err)
					return
				}
				var outs []engine.Output
				switch round % 4 {
				case 1:
					if p.Output != engine.FinalOnly { // which has one output, the last
						first, err := r.Next()
						if err != nil {
							fail(round, "%v", err)
							return
						}
						outs = append(outs, first) // the last, if the request ran to its end meanwhile
					}
					e.Abort(id)
				case 2:
					r.Cancel()
				}
				rest, err := drainAll(r)
				if err != nil {
					fail(round, "%v", err)
					return
				}
				outs = append(outs, rest...)
				if len(outs) == 0 {
					fail(round, "no output")
					return
				}
				last := outs[len(outs)-1]
				if finishOfFirst(outs) == engine.FinishAbort {
					aborted.Add(1)
				}
				switch {
				case !last.Finished:
					fail(round, "no finished output")
					return
				case round == 3 && (last.FinishReason != engine.FinishStop || last.StopReason != stops[q]):
					fail(round, "finished with %q (%q), not on its stop string %q", last.FinishReason, last.StopReason, stops[q])
					return
				case round%4 == 3:
					mu.Lock()
					stopped[r.Incarnation()] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NoError(t, e.WaitIdle(context.Background()))
	w := asyncWorkloadResult{st: e.Stats(), aborted: int(aborted.Load())}
	require.NoError(t, e.Close())
	mu.Lock()
	for _, inc := range coreAborts {
		if stopped[inc] {
			w.stopsAbortedInCore++
		}
	}
	mu.Unlock()
	return c, w
}

type asyncReuseResult struct {
	err      error // what the new request ended with
	own      bool  // it got its own tokens, all of them
	attempts int
}

// asyncReuseWorkload aborts "x1" while it streams and adds "x1" again at once,
// with a prompt of 24 tokens, while the core has a step of the old request
// in flight; with chunked, a step's budget is 8 tokens, so that the new
// request's first step is a chunk of its prompt. It is on the legacy engine
// when legacy is set, with core/async-output-by-id planted when bug is.
//
// The step is 2ms, and the caller waits a quarter of one after the output
// it reacts to, so that the core is in the middle of the model's step when
// the abort and the add come: they reach it between two steps in flight,
// which is where the bug lives. On the legacy engine, a machine too slow
// for that shows other races of its routing by the caller's id instead:
// the abort's second copy kills the new request in the core (a timeout
// then ends it), or a frame of the old request still on its way is
// delivered to the new one. So with the bug on the legacy engine it tries
// again, up to five times, until the bug shows — the core emits a token
// that is not the new request's own (the checker sees it), or, with
// chunked, the engine dies; otherwise it tries once. It returns the
// checker, once the engine is closed, and what the last new request got.
func asyncReuseWorkload(t *testing.T, legacy, bug, chunked bool) (*props.Checker, asyncReuseResult) {
	const step = 2 * time.Millisecond
	c := props.NewChecker(core.ToyModel{})
	c.SetModelLen(core.DefaultMaxModelLen)
	var mu sync.Mutex // c's, so that the caller can look at it between attempts
	cfg := engine.Config{StepTime: step, AsyncScheduling: true, LegacyIDRouting: legacy, Observer: func(ev core.Event) {
		mu.Lock()
		c.Observe(ev)
		mu.Unlock()
	}}
	if chunked {
		cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = 8, 4
	}
	if bug {
		cfg.Faults = rttest.Armed(t, failpoints.CoreAsyncOutputByID.Name+"=return")
	}
	e, err := engine.New(cfg)
	require.NoError(t, err)
	const prompt = "the of and to in is it you that he was for on are with as his they be at one have this from"
	own := core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode(prompt), 4)
	require.NotContains(t, core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode("hello"), 100), own[0],
		"test bug: a token of the old request would pass for the new one's first")
	retry := legacy && bug
	staleEmitted := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(c.Violations(), func(v *props.Violation) bool {
			return v.Property == props.ModelTokens && strings.Contains(v.Detail, "emitted by the core")
		})
	}
	var res asyncReuseResult
	for {
		res.attempts++
		res.err, res.own = nil, false
		// An id of its own for each attempt: a miss leaves nothing, stale
		// abort or misplaced output, to the next.
		id := fmt.Sprint("x", res.attempts)
		old, err := e.AddRequest(id, "hello", engine.Params{MaxTokens: 1000, Output: engine.Delta})
		require.NoError(t, err)
		// A stale abort may kill old in the legacy core: nothing would come.
		timer := time.AfterFunc(time.Second, old.Cancel)
		streaming := true
		for i := 0; i < 2 && streaming; i++ {
			o, err := old.Next()
			require.NoError(t, err)
			streaming = !o.Finished
		}
		timer.Stop()
		if !streaming {
			require.True(t, retry && res.attempts < 5, "attempt %d: the old request did not stream", res.attempts)
			continue
		}
		time.Sleep(step / 4)
		e.Abort(id)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var got []int
		for o, err := range e.Generate(ctx, id, prompt, engine.Params{MaxTokens: 4, Output: engine.Delta}) {
			if err != nil {
				res.err = err
				break
			}
			got = append(got, o.TokenIDs...)
		}
		cancel()
		res.own = res.err == nil && slices.Equal(got, own)
		showed := errors.Is(res.err, engine.ErrEngineDead)
		if !chunked {
			showed = staleEmitted()
		}
		if showed || !retry || res.attempts == 5 {
			break
		}
	}
	require.NoError(t, e.Close())
	return c, res
}
