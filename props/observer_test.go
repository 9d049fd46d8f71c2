package props_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// abortAndReuse drives e as the founding case does: a request aborted
// once it has a token, its id reused at once, from n clients each with ids
// of its own.
func abortAndReuse(rt task.Runtime, e *engine.AsyncLLM, n int) error {
	g := task.NewGroup(rt, "clients")
	errs := make([]error, n)
	for i := range n {
		g.Go("client", func() {
			id := fmt.Sprintf("r%d", i)
			r, err := e.AddRequest(id, "hello", engine.Params{MaxTokens: 1000, Output: engine.Delta})
			if err == nil {
				_, err = r.Next()
			}
			if err != nil {
				errs[i] = err
				return
			}
			e.Abort(id)
			for _, err := r.Next(); err == nil; _, err = r.Next() {
			}
			again, err := e.AddRequest(id, "hello", engine.Params{MaxTokens: 3, Output: engine.Delta})
			if err == nil {
				for _, err = again.Next(); err == nil; _, err = again.Next() {
				}
			}
			if !errors.Is(err, io.EOF) {
				errs[i] = err
			}
		})
	}
	g.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestObserverHandsTheSituationsOnToTheRun: the situations the checker
// reaches through Observer are the ones the simulated run lists, each
// once, in the order first reached.
func TestObserverHandsTheSituationsOnToTheRun(t *testing.T) {
	some := 0
	for seed := uint64(1); seed <= 60; seed++ {
		var c *props.Checker
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos(), HangAfter: hangAfter}, func(rt task.Runtime) error {
			c = props.NewChecker(core.ToyModel{})
			c.SetModelLen(core.DefaultMaxModelLen)
			e, err := engine.New(engine.Config{Runtime: rt, Observer: c.Observer(rt)})
			if err != nil {
				return err
			}
			err = abortAndReuse(rt, e, 2)
			e.Close()
			c.CheckKV(e)
			return err
		})
		require.NoError(t, res.Err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		var want []string
		for s := range c.Reached().All() {
			want = append(want, s.String())
		}
		assert.ElementsMatch(t, want, res.Reached, "seed %d", seed)
		if len(want) > 0 {
			some++
		}
	}
	assert.Positive(t, some, "no seed reached a situation: the test shows nothing")
}

// TestObserverOnGoroutines: on the real runtime the engine's goroutines
// call the observer at once; it takes their events one at a time, and the
// checker holds its properties over them (run with -race).
func TestObserverOnGoroutines(t *testing.T) {
	rt := task.Real()
	for round := range 20 {
		c := props.NewChecker(core.ToyModel{})
		c.SetModelLen(core.DefaultMaxModelLen)
		e, err := engine.New(engine.Config{Runtime: rt, Observer: c.Observer(rt)})
		require.NoError(t, err)
		err = abortAndReuse(rt, e, 8)
		e.Close()
		c.CheckKV(e)
		require.NoError(t, err, "round %d", round)
		require.NoError(t, c.Finish(), "round %d", round)
	}
}
