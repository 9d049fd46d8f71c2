package sim_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestSignatureNamesTheFailureModeWithoutItsNumbers: runs that fail the
// same way in different numbers share a signature; different ways do not.
func TestSignatureNamesTheFailureModeWithoutItsNumbers(t *testing.T) {
	assert.Equal(t, "", sim.Signature(nil))
	assert.Equal(t, "balance N, want N", sim.Signature(fmt.Errorf("balance 110, want 100\nmore")))
	assert.Equal(t, sim.Signature(errors.New("balance 90, want 100")), sim.Signature(errors.New("balance 110, want 100")))
	assert.Equal(t, "step limit", sim.Signature(fmt.Errorf("run: %w", &sim.StepLimitError{Steps: 5})))
	assert.Equal(t, "nondeterministic", sim.Signature(&sim.NondeterminismError{Seed: 3}))
	assert.Equal(t, "replay diverged", sim.Signature(errors.Join(errors.New("x"), &sim.ScheduleMismatchError{})))
	assert.Equal(t, "ledger short", sim.Signature(fmt.Errorf("run: %w", errors.Join(errors.New("other 1"), ownMode{}))), "an error that names its own mode")

	// From real runs: a deadlock names who waits where; a panic, the task.
	dead := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		q := task.NewQueue[int](rt, task.QueueName("jobs"))
		rt.Go("worker", func() { q.Get() })
		q.Get()
		return nil
	})
	assert.Equal(t, "deadlock: main@jobs.get worker@jobs.get", sim.Signature(dead.Err), dead.Err)
	for _, i := range []int{3, 4} {
		res := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g")
			g.Go("indexer", func() { panic(fmt.Sprintf("index %d out of range", i)) })
			g.Wait()
			return nil
		})
		assert.Equal(t, "panic in indexer: index N out of range", sim.Signature(res.Err), res.Err)
	}
	exited := sim.Run(sim.Options{Seed: 1}, func(rt task.Runtime) error {
		g := task.NewGroup(rt, "g")
		g.Go("quitter", func() { runtime.Goexit() })
		g.Wait()
		return nil
	})
	assert.Equal(t, "goexit in quitter", sim.Signature(exited.Err), exited.Err)
}

// ownMode is an error that names its own failure mode.
type ownMode struct{}

func (ownMode) Error() string     { return "ledger short by 10 after 3 transfers" }
func (ownMode) Signature() string { return "ledger short" }
