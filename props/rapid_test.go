package props_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// hangAfter bounds the wall time of every simulated run of these tests: a
// task that stops reaching scheduling points fails the test binary at once,
// with the stuck task, instead of when go test's timeout ends it.
const hangAfter = time.Minute

// handle is the model's view of one AddRequest.
type handle struct {
	r        *engine.Request
	id       string
	prompt   string
	params   engine.Params
	aborted  bool // this client aborted or cancelled it
	received []int
	closed   bool // its final output was read
}

// engineModel is the sequential model the engine is checked against. It
// knows what a caller can know: what it added, read and aborted. Where the
// engine's progress decides the outcome (did a request finish before the
// abort took effect?) the model accepts every outcome a correct engine may
// give, and nothing else.
type engineModel struct {
	e       *engine.AsyncLLM
	handles []*handle
	ids     []string
	prompts []string
}

func (m *engineModel) open(id string) []*handle {
	var hs []*handle
	for _, h := range m.handles {
		if h.id == id && !h.closed && !h.aborted {
			hs = append(hs, h)
		}
	}
	return hs
}

func (m *engineModel) add(t *rapid.T) {
	id := rapid.SampledFrom(m.ids).Draw(t, "id")
	prompt := rapid.SampledFrom(m.prompts).Draw(t, "prompt")
	p := engine.Params{MaxTokens: rapid.IntRange(1, 6).Draw(t, "max"), Output: engine.OutputKind(rapid.IntRange(0, 2).Draw(t, "kind"))}
	r, err := m.e.AddRequest(id, prompt, p)
	if errors.Is(err, engine.ErrDuplicateRequestID) {
		// Allowed only while an earlier incarnation of id may still be live.
		if len(m.open(id)) == 0 {
			t.Fatalf("AddRequest(%q) refused as a duplicate, but every earlier incarnation was read to its end or aborted", id)
		}
		return
	}
	if err != nil {
		t.Fatalf("AddRequest(%q): %v", id, err)
	}
	m.handles = append(m.handles, &handle{r: r, id: id, prompt: prompt, params: p})
}

func (m *engineModel) live() []*handle {
	var hs []*handle
	for _, h := range m.handles {
		if !h.closed {
			hs = append(hs, h)
		}
	}
	return hs
}

// read takes one output of a request and checks it against the model.
func (m *engineModel) read(t *rapid.T) {
	hs := m.live()
	if len(hs) == 0 {
		t.Skip("nothing to read")
	}
	h := rapid.SampledFrom(hs).Draw(t, "handle")
	m.next(t, h)
}

func (m *engineModel) next(t *rapid.T, h *handle) {
	out, err := h.r.Next()
	if errors.Is(err, io.EOF) {
		t.Fatalf("%s (incarnation %d): io.EOF before a finished output", h.id, h.r.Incarnation())
	}
	if err != nil {
		t.Fatalf("%s: Next: %v", h.id, err)
	}
	if h.params.Output == engine.Delta {
		h.received = append(h.received, out.TokenIDs...)
	} else {
		h.received = slices.Clone(out.TokenIDs)
	}
	want := core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode(h.prompt), h.params.MaxTokens)
	if len(h.received) > len(want) || !slices.Equal(h.received, want[:len(h.received)]) {
		t.Fatalf("%s (incarnation %d) received %v, not a prefix of the model's %v", h.id, h.r.Incarnation(), h.received, want)
	}
	if h.params.Output == engine.FinalOnly && !out.Finished {
		t.Fatalf("%s: a FinalOnly request returned an unfinished output", h.id)
	}
	if !out.Finished {
		return
	}
	h.closed = true
	switch {
	case out.FinishReason == engine.FinishLength && len(h.received) == h.params.MaxTokens:
	case out.FinishReason == engine.FinishAbort && h.aborted:
	default:
		t.Fatalf("%s (incarnation %d) finished with %q and %d of %d tokens (aborted by the caller: %v)",
			h.id, h.r.Incarnation(), out.FinishReason, len(h.received), h.params.MaxTokens, h.aborted)
	}
	if _, err := h.r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: Next after the finished output returned %v, want io.EOF", h.id, err)
	}
}

func (m *engineModel) abort(t *rapid.T) {
	targets := rapid.SliceOfNDistinct(rapid.SampledFrom(m.ids), 1, len(m.ids), rapid.ID[string]).Draw(t, "targets")
	for _, h := range m.handles {
		if !h.closed && slices.Contains(targets, h.id) {
			h.aborted = true
		}
	}
	m.e.Abort(targets...)
}

func (m *engineModel) cancel(t *rapid.T) {
	hs := m.live()
	if len(hs) == 0 {
		t.Skip("nothing to cancel")
	}
	h := rapid.SampledFrom(hs).Draw(t, "handle")
	h.aborted = true
	h.r.Cancel()
}

func (m *engineModel) waitIdle(t *rapid.T) {
	if err := m.e.WaitIdle(context.Background()); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

// check is the invariant after every action: HasUnfinishedRequests is
// false whenever every request was read to its end.
func (m *engineModel) check(t *rapid.T) {
	if len(m.live()) == 0 && m.e.HasUnfinishedRequests() {
		t.Fatalf("every request was read to its end, but HasUnfinishedRequests is true")
	}
}

// TestEngineAgainstASequentialModel is a rapid state machine: actions on
// the engine are drawn, and so is the schedule, which runs under the
// simulator with rapid as its chooser; every output is checked against the
// sequential model, and the event stream against every property.
func TestEngineAgainstASequentialModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		res := sim.Run(sim.Options{Chooser: props.RapidChooser(t, "schedule"), Strategy: sim.Chaos(), HangAfter: hangAfter}, func(rt task.Runtime) error {
			c := props.NewChecker(core.ToyModel{})
			c.SetModelLen(core.DefaultMaxModelLen) // the engines run the default
			e, err := engine.New(engine.Config{Runtime: rt, Observer: c.Observe, StepTime: 200 * 1000})
			if err != nil {
				return err
			}
			m := &engineModel{e: e, ids: []string{"a", "b"}, prompts: []string{"hello", "the quick brown fox"}}
			t.Repeat(map[string]func(*rapid.T){
				"add":      m.add,
				"read":     m.read,
				"abort":    m.abort,
				"cancel":   m.cancel,
				"waitIdle": m.waitIdle,
				"":         m.check,
			})
			for _, h := range m.live() {
				for !h.closed {
					m.next(t, h)
				}
			}
			e.Close()
			c.CheckKV(e)
			return c.Finish()
		})
		if res.Err != nil {
			t.Fatalf("%v", res.Err)
		}
	})
}

// runSwarmReached runs the swarm scenario with its workload and its
// schedule drawn by rapid, and returns the situations the run reached. The
// seed of swarm's side streams, which choose its configuration (priority,
// prefix caching, async scheduling, chat, pausing), is drawn too: left at
// 0, every run would test one configuration. It shrinks to that one.
func runSwarmReached(t *rapid.T, legacy bool, strategy sim.Strategy) (props.SituationSet, error) {
	side := rapid.Uint64().Draw(t, "side-streams")
	prog, out := scenario.Swarm.Program(scenario.Options{Legacy: legacy, Seed: side, Source: props.RapidChooser(t, "workload")})
	res := sim.Run(sim.Options{Chooser: props.RapidChooser(t, "schedule"), Strategy: strategy, HangAfter: hangAfter}, prog)
	return out.Checker.Reached(), out.Err(res.Err)
}

// TestReusedIDsNeverSeeAnotherIncarnationsTokens is the invariant the
// project exists for, over drawn workloads and drawn schedules: no frame
// reaches an incarnation that did not produce it, and every reused id's
// new request finishes normally. The runs must also have gone where the
// legacy engine fails: some of them reached a reuse window (46 to 60 of
// the 300 runs of the three strategies, in four runs of the test; 22 with
// swarm's configuration left at its seed 0; that none of 300 would reach
// one happens less than once in 10^10).
func TestReusedIDsNeverSeeAnotherIncarnationsTokens(t *testing.T) {
	windows := props.ReuseWindows
	runs, reached := 0, 0
	for _, st := range []sim.Strategy{sim.Random(), sim.Chaos(), sim.Starve("output-handler")} {
		t.Run(st.String(), rapid.MakeCheck(func(t *rapid.T) {
			set, err := runSwarmReached(t, false, st)
			if err != nil {
				t.Fatalf("%v", err)
			}
			runs++
			if set&windows != 0 {
				reached++
			}
		}))
	}
	t.Logf("%d of %d runs reached %s", reached, runs, windows)
	if runs >= 300 { // rapid's default of 100 checks a strategy, or more
		assert.Positive(t, reached, "none of %d runs reached %s: the check proved nothing of the race", runs, windows)
	}
}

// TestDeterminism: the same seed gives the same trace hash, whatever the
// strategy and the scenario.
func TestDeterminism(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		name := rapid.SampledFrom([]string{"random", "pct:3", "chaos", "starve:output-handler", "starve:client"}).Draw(t, "strategy")
		sc := rapid.SampledFrom(scenario.All()).Draw(t, "scenario")
		legacy := rapid.Bool().Draw(t, "legacy")
		st, err := sim.ParseStrategy(name)
		require.NoError(t, err)
		prog, _ := sc.Program(scenario.Options{Legacy: legacy, Seed: seed})
		res := sim.Run(sim.Options{Seed: seed, Strategy: st, CheckDeterminism: true, HangAfter: hangAfter}, prog)
		var nd *sim.NondeterminismError
		if errors.As(res.Err, &nd) {
			t.Fatalf("%v", nd)
		}
	})
}

// TestRapidShrinksTheLegacyRace points rapid at the legacy engine: it must
// find the founding race with a drawn schedule and shrink it to a
// counterexample with fewer scheduling decisions than the first it found.
func TestRapidShrinksTheLegacyRace(t *testing.T) {
	// The failure is there on purpose: no fail file for it.
	rttest.SetFlag(t, "rapid.nofailfile", "true")
	var steps []int64
	var last error
	tb := &rttest.FailTB{T: t}
	rttest.CheckCatching(tb, func(rt *rapid.T) {
		prog, out := scenario.AbortReuse.Program(scenario.Options{Legacy: true})
		res := sim.Run(sim.Options{Chooser: props.RapidChooser(rt, "schedule"), Strategy: sim.Starve("output-handler"), HangAfter: hangAfter}, prog)
		if err := out.Err(res.Err); err != nil {
			steps = append(steps, res.Steps)
			last = err
			rt.Fatalf("%v", err)
		}
	})
	require.True(t, tb.Failed(), "rapid found no failure in the legacy engine")
	require.NotEmpty(t, steps)
	require.Error(t, last)
	// Either of the legacy engine's id-reuse bugs: a stale token (the
	// founding race) or a new incarnation killed by its predecessor's
	// late abort, which then never ends (vLLM #23697).
	msgs := strings.Join(tb.Msgs, "\n")
	assert.True(t, strings.Contains(msgs, props.NoStaleDelivery) || strings.Contains(msgs, props.EndsExactlyOnce), msgs)
	first, shrunk := steps[0], steps[len(steps)-1]
	assert.Less(t, shrunk, first, "rapid shrank the schedule: %d decisions at first, %d after shrinking", first, shrunk)
	t.Logf("rapid's counterexample: %d decisions at first, %d after shrinking", first, shrunk)
}
