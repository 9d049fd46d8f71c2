package props_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// lateAbortRun finishes "a" on a stop string, whose abort to the core the
// failpoint engine/abort-after-add holds back until the next ADD; the core
// finishes "a" on its own meanwhile. Then "a" is reused: on the legacy
// engine the held-back abort, routed by the external id, kills the new
// incarnation in the core (vLLM #23697, #29355). The new incarnation is
// then cancelled by its caller, which would hide that it was lost.
func lateAbortRun(t *testing.T, legacy bool) error {
	t.Helper()
	const step = 200_000 // ns
	var err error
	res := sim.Run(sim.Options{Seed: 1, Strategy: sim.Random(), HangAfter: hangAfter}, func(rt task.Runtime) error {
		c := props.NewChecker(core.ToyModel{})
		faults := rttest.Armed(t, "engine/abort-after-add=1*return")
		e, eerr := engine.New(engine.Config{Runtime: rt, Observer: c.Observe, StepTime: step, Faults: faults, LegacyIDRouting: legacy})
		if eerr != nil {
			return eerr
		}
		first := core.Tokens(core.ToyModel{}, core.Tokenizer{}.Encode("hello"), 1)[0]
		r, aerr := e.AddRequest("a", "hello", engine.Params{MaxTokens: 2, Output: engine.Delta, Stop: []string{core.Tokenizer{}.Piece(first)}})
		if aerr != nil {
			return aerr
		}
		out, nerr := r.Next()
		if nerr != nil || !out.Finished || out.FinishReason != engine.FinishStop {
			return errors.Join(nerr, errors.New("the first incarnation did not finish on its stop string"))
		}
		rt.Sleep(20 * step) // the core runs it to MaxTokens, its abort still held back
		again, aerr := e.AddRequest("a", "hello", engine.Params{MaxTokens: 50, Output: engine.Delta})
		if aerr != nil {
			return aerr
		}
		rt.Sleep(20 * step)
		again.Cancel()
		e.Close()
		c.CheckKV(e)
		err = c.Finish()
		return nil
	})
	require.NoError(t, res.Err)
	return err
}

func TestAPredecessorsLateAbortIsCaughtThoughTheVictimIsCancelled(t *testing.T) {
	v := requireViolation(t, lateAbortRun(t, true), props.ReuseFinishesNormally)
	assert.Contains(t, v.Detail, `the core aborted "a" (incarnation 2`)
	assert.NoError(t, lateAbortRun(t, false), "the fixed engine routes the late abort to the incarnation it was for")
}
