package engine_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// newEngine starts an engine on rt. Unless cfg has an observer of its own,
// a checker follows the engine's events, on either runtime, and the test
// fails if it saw a property violated: every engine test holds the
// properties the scenarios hold, on goroutines too, and at its end the
// closed engine's KV blocks are all accounted for (Checker.CheckKV). On the
// real runtime the engine is closed when the test ends, if the body did
// not close it; under the simulator the body defers Close, since the run
// ends with the body.
func newEngine(t *testing.T, rt task.Runtime, cfg engine.Config) *engine.AsyncLLM {
	t.Helper()
	cfg.Runtime = rt
	var c *props.Checker
	if cfg.Observer == nil {
		c = props.NewChecker(cfg.Model)
		c.SetEngine(cfg)
		cfg.Observer = c.Observer(rt)
	}
	e, err := engine.New(cfg)
	require.NoError(t, err)
	if c != nil {
		t.Cleanup(func() {
			if task.IsReal(rt) {
				e.Close()
			}
			c.CheckKV(e)
			if err := c.Finish(); err != nil {
				t.Errorf("the checker following the engine (real runtime: %v): %v", task.IsReal(rt), err)
			}
		})
	}
	return e
}

// checkedRun runs body on an engine of cfg under the simulator's strategy
// st (nil: the simulator's default), a checker following the engine's events after cfg's own observer,
// if any; it closes the engine and checks its KV blocks, and returns the
// checker and the run's error.
func checkedRun(t *testing.T, seed uint64, st sim.Strategy, cfg engine.Config, body func(rt task.Runtime, e *engine.AsyncLLM)) (*props.Checker, error) {
	t.Helper()
	c := props.NewChecker(nil)
	c.SetEngine(cfg)
	res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error {
		cfg := cfg
		obs, also := c.Observer(rt), cfg.Observer
		cfg.Runtime, cfg.Observer = rt, func(ev engine.Event) {
			if also != nil {
				also(ev)
			}
			obs(ev)
		}
		e, err := engine.New(cfg)
		require.NoError(t, err)
		body(rt, e)
		require.NoError(t, e.Close())
		c.CheckKV(e)
		return nil
	})
	return c, res.Err
}

func add(t *testing.T, e *engine.AsyncLLM, id, prompt string, p engine.Params) *engine.Request {
	t.Helper()
	r, err := e.AddRequest(id, prompt, p)
	require.NoError(t, err, "AddRequest(%q)", id)
	return r
}

// drain reads r to its end and returns every output.
func drain(t *testing.T, r *engine.Request) []engine.Output {
	t.Helper()
	outs, err := readAll(r)
	require.NoError(t, err, "Next of %q", r.ID())
	return outs
}

// readAll reads r to its end, or to an error.
func readAll(r *engine.Request) ([]engine.Output, error) {
	var outs []engine.Output
	for {
		o, err := r.Next()
		if errors.Is(err, io.EOF) {
			return outs, nil
		}
		if err != nil {
			return outs, err
		}
		outs = append(outs, o)
	}
}

// tokensOf returns the tokens a request received: the concatenation of its
// deltas, or the tokens of its last output.
func tokensOf(kind engine.OutputKind, outs []engine.Output) []int {
	if len(outs) == 0 {
		return nil
	}
	if kind != engine.Delta {
		return outs[len(outs)-1].TokenIDs
	}
	var all []int
	for _, o := range outs {
		all = append(all, o.TokenIDs...)
	}
	return all
}

func textOf(kind engine.OutputKind, outs []engine.Output) string {
	if len(outs) == 0 {
		return ""
	}
	if kind != engine.Delta {
		return outs[len(outs)-1].Text
	}
	s := ""
	for _, o := range outs {
		s += o.Text
	}
	return s
}

// want returns the model's first n tokens for prompt.
func want(prompt string, n int) []int {
	return core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode(prompt), n)
}

func last(outs []engine.Output) engine.Output {
	if len(outs) == 0 {
		return engine.Output{}
	}
	return outs[len(outs)-1]
}

var allKinds = []engine.OutputKind{engine.Cumulative, engine.Delta, engine.FinalOnly}

// readSlowly reads r to its end, sleeping five engine steps after each
// output, and returns every output: a Delta consumer slower than the
// engine.
func readSlowly(t *testing.T, rt task.Runtime, r *engine.Request) []engine.Output {
	t.Helper()
	var outs []engine.Output
	for {
		out, err := r.Next()
		if errors.Is(err, io.EOF) {
			return outs
		}
		require.NoError(t, err)
		outs = append(outs, out)
		rt.Sleep(5 * time.Millisecond) // five engine steps per read
	}
}

// addAbortRace runs one seed, under sim.Random, of a caller adding request
// "x" with p while another aborts it as soon as the frontend holds it. It
// returns the run, the frontend's aborts and the core's adds and aborts in
// order, and every output x got.
func addAbortRace(seed uint64, p engine.Params) (sim.Result, []engine.Event, []engine.Output) {
	var events []engine.Event
	var outs []engine.Output
	res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Random()}, func(rt task.Runtime) error {
		e, err := engine.New(engine.Config{Runtime: rt, Observer: func(ev engine.Event) {
			if ev.Kind == core.EventCoreAdd || ev.Kind == core.EventCoreAbort || ev.Kind == core.EventAbort {
				events = append(events, ev)
			}
		}})
		if err != nil {
			return err
		}
		defer e.Close()
		g := task.NewGroup(rt, "callers")
		var r *engine.Request
		g.Go("adder", func() {
			r, err = e.AddRequest("x", "hello", p)
		})
		g.Go("aborter", func() {
			for !e.HasUnfinishedRequests() {
				rt.Yield("aborter.poll")
			}
			e.Abort("x")
		})
		g.Wait()
		if err != nil {
			return err
		}
		for {
			o, err := r.Next()
			if err != nil {
				break
			}
			outs = append(outs, o)
		}
		return e.WaitIdle(context.Background())
	})
	return res, events, outs
}

// streamClients starts clients goroutines, each streaming a request of n
// tokens over a prompt of its own and asserting that it got the model's
// tokens (label names the run in a failure); wait on the group for them.
func streamClients(t *testing.T, e *engine.AsyncLLM, clients, n int, label string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			id := string(rune('a' + c))
			prompt := pauseLong + " " + id
			r := add(t, e, id, prompt, engine.Params{MaxTokens: n, IgnoreEOS: true, Output: engine.Delta})
			outs := drain(t, r)
			assert.Equal(t, want(prompt, n), tokensOf(engine.Delta, outs), "%s client %s", label, id)
		})
	}
	return &wg
}

// whileStreaming streams clients as streamClients does and runs each
// controller on a goroutine of its own, round after round (its argument
// the round's number, from 0), at least once and until every client's
// request ended.
func whileStreaming(t *testing.T, e *engine.AsyncLLM, clients, n int, label string, controllers ...func(round int)) {
	streaming := streamClients(t, e, clients, n, label)
	var done atomic.Bool
	var wg sync.WaitGroup
	for _, ctl := range controllers {
		wg.Go(func() {
			for i := 0; i == 0 || !done.Load(); i++ {
				ctl(i)
			}
		})
	}
	streaming.Wait()
	done.Store(true)
	wg.Wait()
}
