package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// reuseAfterAbort is the founding case returning an error instead of
// failing a test, so that a sweep can count failures. With waitIdle it
// waits for the core before reusing the id: the honest precondition.
func reuseAfterAbort(legacy, waitIdle bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		e, err := engine.New(engine.Config{Runtime: rt, LegacyIDRouting: legacy})
		if err != nil {
			return err
		}
		defer e.Close()
		p := engine.Params{MaxTokens: 100000, Output: engine.Delta}
		a, _ := e.AddRequest("abort-a", "hello", p)
		_, _ = e.AddRequest("abort-b", "hello", p)
		keep, _ := e.AddRequest("survivor", "hello", engine.Params{MaxTokens: 5, Output: engine.Delta})
		if _, err := a.Next(); err != nil {
			return err
		}
		e.Abort("abort-a", "abort-b")
		for {
			if _, err := keep.Next(); errors.Is(err, io.EOF) {
				break
			}
		}
		if waitIdle {
			if err := e.WaitIdle(context.Background()); err != nil {
				return err
			}
		}
		r, err := e.AddRequest("abort-a", "hello", engine.Params{MaxTokens: 3, Output: engine.Delta})
		if err != nil {
			return err
		}
		var got []int
		for {
			out, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			got = append(got, out.TokenIDs...)
		}
		if fmt.Sprint(got) != fmt.Sprint(want("hello", 3)) {
			return fmt.Errorf("reused abort-a got %d tokens %v, want %v", len(got), got, want("hello", 3))
		}
		return nil
	}
}

// TestLegacyRoutingHasTheFoundingRace: the legacy engine, routing by
// external id, delivers a previous incarnation's token under a starved
// output handler; the fixed engine never does; and the legacy engine is
// safe when the caller waits for the core first.
func TestLegacyRoutingHasTheFoundingRace(t *testing.T) {
	count := func(legacy, waitIdle bool) (fails int, first error) {
		for seed := uint64(0); seed < 50; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Starve("output-handler")}, reuseAfterAbort(legacy, waitIdle))
			if res.Err != nil {
				fails++
				if first == nil {
					first = res.Err
				}
			}
		}
		return fails, first
	}
	fails, first := count(true, false)
	require.Positive(t, fails, "the legacy engine must show the race")
	assert.ErrorContains(t, first, "reused abort-a got")
	fails, first = count(false, false)
	assert.Zero(t, fails, "the fixed engine: %v", first)
	fails, first = count(true, true)
	assert.Zero(t, fails, "WaitIdle before reuse makes even the legacy engine safe: %v", first)
}
