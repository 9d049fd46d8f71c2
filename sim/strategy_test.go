package sim_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestPCTIsNotHeldForeverByALockPollingLoop: a task that polls a flag
// under a mutex passes a scheduling point at every Lock without blocking,
// as a loop around a Queue's TryGet does. PCT lowers a task only at a
// Yield or a change point, so once the change points are behind the run
// such a loop held the run until the step limit, in a program that ends
// in a few steps under Random.
func TestPCTIsNotHeldForeverByALockPollingLoop(t *testing.T) {
	program := func(rt task.Runtime) error {
		mu := rt.NewMutex("flag")
		for i := 0; i < 20; i++ { // the change points pass here
			mu.Lock()
			mu.Unlock()
		}
		ready := false
		g := task.NewGroup(rt, "g")
		g.Go("poller", func() {
			for {
				mu.Lock()
				r := ready
				mu.Unlock()
				if r {
					return
				}
			}
		})
		g.Go("setter", func() {
			mu.Lock()
			ready = true
			mu.Unlock()
		})
		g.Wait()
		return nil
	}
	for _, st := range []sim.Strategy{sim.Random(), sim.PCTSteps(3, 10), sim.PCTSteps(1, 10)} {
		for seed := uint64(0); seed < 100; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st, StepsMax: 1_000_000}, program)
			require.NoError(t, res.Err, "%s seed %d", st, seed)
		}
	}
}

// backAndForth fails only when a1 < b1 < a2 < b2: a is preempted, then b
// is preempted in turn so that a goes on first — a bug of depth 3. Its
// scheduling points are uncontended locks, where PCT lowers no task, so
// only PCT's change points can reorder it.
func backAndForth(rt task.Runtime) error {
	x, r, bad := 0, 0, false
	ma, mb := rt.NewMutex("a"), rt.NewMutex("b")
	g := task.NewGroup(rt, "g")
	g.Go("a", func() {
		ma.Lock()
		x = 1 // a1
		ma.Unlock()
		ma.Lock()
		r = x // a2
		ma.Unlock()
	})
	g.Go("b", func() {
		mb.Lock()
		if x == 1 { // b1
			x = 2
		}
		mb.Unlock()
		mb.Lock()
		bad = r == 2 // b2
		mb.Unlock()
	})
	g.Wait()
	if bad {
		return errors.New("a read b's write, and b saw it")
	}
	return nil
}

// TestPCTFindsADepth3BugAsOftenAsItPromises: PCT finds a bug of depth d
// in a run of n tasks and k steps with probability at least 1/(n·k^(d−1)).
// That needs the priorities the change points give to be in no particular
// order in time: this bug needs the task lowered first (a) to go on before
// the task lowered second (b).
func TestPCTFindsADepth3BugAsOftenAsItPromises(t *testing.T) {
	const seeds, n, k = 3000, 3, 12
	calm := sim.Run(sim.Options{Strategy: sim.Guided(sim.NewSchedule(nil, nil, nil))}, backAndForth)
	require.NoError(t, calm.Err)
	require.LessOrEqual(t, calm.Steps, int64(k), "k is the run's length")
	fails := 0
	for seed := uint64(0); seed < seeds; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.PCTSteps(3, k)}, backAndForth)
		if res.Err != nil {
			require.EqualError(t, res.Err, "a read b's write, and b saw it")
			fails++
		}
	}
	assert.GreaterOrEqual(t, fails, seeds/(n*k*k), "pct:3:%d found the depth-3 bug in %d of %d seeds", k, fails, seeds)
}

// TestStarveWindowsEndWhileOthersSpin: virtual time moves only when no
// task may run, so while a task spins at scheduling points, waiting for the
// withheld one, the clock stands still. A window must end all the same, or
// the victim is starved for good and a program that ends in a few steps
// under Random runs into the step limit.
func TestStarveWindowsEndWhileOthersSpin(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Chaos(), sim.Starve("setter"), sim.StarveUpTo("setter", sim.StarveWindowLimit)} {
		for seed := uint64(0); seed < 200; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: st, StepsMax: 1_000_000}, spinUntilSet)
			require.NoError(t, res.Err, "%s seed %d: the setter was withheld for good", st, seed)
		}
	}
}

// spinUntilSet is a program whose "spinner" task yields in a loop until
// its "setter" task has run: it ends as soon as the setter gets a turn.
func spinUntilSet(rt task.Runtime) error {
	done := false
	g := task.NewGroup(rt, "g")
	g.Go("spinner", func() {
		for !done {
			rt.Yield("spin")
		}
	})
	g.Go("setter", func() { done = true })
	g.Wait()
	return nil
}
