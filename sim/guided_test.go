package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// observe runs program under st and returns the result and its choices.
func observe(opts sim.Options, st sim.Strategy, program func(task.Runtime) error) (sim.Result, []sim.Choice) {
	var cs []sim.Choice
	opts.Strategy = sim.Observe(st, func(c sim.Choice) { cs = append(cs, c) })
	return sim.Run(opts, program), cs
}

func firstFailure(t *testing.T, st sim.Strategy, program func(task.Runtime) error) sim.Result {
	t.Helper()
	for seed := uint64(0); seed < 200; seed++ {
		if res := sim.Run(sim.Options{Seed: seed, Strategy: st}, program); res.Err != nil {
			return res
		}
	}
	t.Fatalf("%s found no failure in 200 seeds", st)
	return sim.Result{}
}

func TestGuidedFollowsAFullScheduleExactly(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos(), sim.Starve("worker")} {
		want := sim.Run(sim.Options{Seed: 11, Strategy: st}, busy)
		require.NoError(t, want.Err, st.String())
		got := sim.Run(sim.Options{Strategy: sim.Guided(want.Schedule)}, busy)
		require.NoError(t, got.Err, st.String())
		assert.Equal(t, want.TraceHash, got.TraceHash, "%s: Guided gives the same run as the schedule's", st)
		assert.Equal(t, want.Schedule.String(), got.Schedule.String(), st.String())
		replayed := sim.Run(sim.Options{Strategy: sim.Replay(want.Schedule)}, busy)
		assert.Equal(t, replayed.TraceHash, got.TraceHash, "%s: Guided and Replay agree", st)
	}

	failed := firstFailure(t, sim.Random(), lostUpdate)
	got := sim.Run(sim.Options{Strategy: sim.Guided(failed.Schedule)}, lostUpdate)
	require.Error(t, got.Err)
	assert.Equal(t, failed.Err.Error(), got.Err.Error())
	assert.Equal(t, failed.TraceHash, got.TraceHash)
}

func TestGuidedSurvivesAnEditedSchedule(t *testing.T) {
	orig := sim.Run(sim.Options{Seed: 5, Strategy: sim.Chaos()}, busy)
	require.NoError(t, orig.Err)
	steps := orig.Schedule.Steps()
	var edited []sim.Step
	for i, s := range steps {
		switch {
		case i%7 == 3:
			continue // dropped
		case i%11 == 5:
			edited = append(edited, sim.Step{Task: 99}) // no such task
		case i%13 == 2:
			edited = append(edited, sim.Step{Task: -1, Wait: true, Until: time.Nanosecond}) // already past
		}
		edited = append(edited, s)
	}
	edited = edited[:len(edited)/2] // and cut short
	sch := sim.NewSchedule(edited, orig.Schedule.Tasks, nil)

	// Replay refuses it; Guided runs it to the end, and what it ran replays.
	strict := sim.Run(sim.Options{Strategy: sim.Replay(sch)}, busy)
	var mm *sim.ScheduleMismatchError
	require.ErrorAs(t, strict.Err, &mm)

	got := sim.Run(sim.Options{Strategy: sim.Guided(sch)}, busy)
	require.NoError(t, got.Err)
	again := sim.Run(sim.Options{Strategy: sim.Replay(got.Schedule)}, busy)
	require.NoError(t, again.Err)
	assert.Equal(t, got.TraceHash, again.TraceHash, "a Guided run's own schedule replays strictly")

	// A task whose name changed is not run under its old ID.
	renamed := sim.NewSchedule(steps, []string{"main", "someone-else"}, nil)
	got = sim.Run(sim.Options{Strategy: sim.Guided(renamed)}, busy)
	require.NoError(t, got.Err)
}

func TestGuidedPastTheScheduleIsCalm(t *testing.T) {
	res, cs := observe(sim.Options{}, sim.Guided(sim.NewSchedule(nil, nil, nil)), lostUpdate)
	require.NoError(t, res.Err, "with no preemption there is no lost update")
	assert.Zero(t, sim.Preemptions(cs))
	assert.Zero(t, sim.Waits(cs))
	assert.Equal(t, "0*3 1*3 2*3 0", stepsLine(res.Schedule))

	res, cs = observe(sim.Options{}, sim.Guided(sim.NewSchedule(nil, nil, nil)), busy)
	require.NoError(t, res.Err)
	assert.Zero(t, sim.Preemptions(cs))
	assert.Zero(t, sim.Waits(cs))
}

func TestPreemptionsCountsSwitchesAwayFromATaskThatCouldGoOn(t *testing.T) {
	// inc-a reads, and at its yield inc-b runs instead: one preemption.
	sch, err := sim.ParseSchedule("llmdst-schedule v1\ntask 0 \"main\"\ntask 1 \"inc-a\"\ntask 2 \"inc-b\"\nsteps 10\n0*3 1 2*3 1*2 0\nend\n")
	require.NoError(t, err)
	res, cs := observe(sim.Options{}, sim.Replay(sch), lostUpdate)
	require.ErrorContains(t, res.Err, "lost update")
	require.Len(t, cs, 10)
	assert.Equal(t, 1, sim.Preemptions(cs))
	assert.Zero(t, sim.Waits(cs))
	assert.True(t, cs[4].Preempts(), "step 5 switches from inc-a at its yield to inc-b: %v", cs[4])
	assert.Equal(t, sim.Choice{Step: sim.Step{Task: 2}, At: 1, CanContinue: true}, cs[4])
	assert.False(t, cs[3].Preempts(), "main blocked in Wait: running inc-a is no preemption")

	// A wait withholds; it is counted apart.
	res, cs = observe(sim.Options{Seed: 1}, sim.Starve("worker"), busy)
	require.NoError(t, res.Err)
	assert.Positive(t, sim.Waits(cs))
	assert.Equal(t, res.Steps, int64(len(cs)))
}

func stepsLine(s *sim.Schedule) string {
	text := s.String()
	_, body, _ := strings.Cut(text, "steps ")
	_, body, _ = strings.Cut(body, "\n")
	return strings.TrimSuffix(strings.TrimSpace(body), "\nend")
}

// shrinkTest is a ShrinkTest for program: it fails when the run fails with
// the error want.
func shrinkTest(program func(task.Runtime) error, want error) sim.ShrinkTest {
	return func(opts sim.Options) (sim.Result, bool) {
		res := sim.Run(opts, program)
		return res, res.Err != nil && res.Err.Error() == want.Error()
	}
}

func TestShrinkLostUpdateToOnePreemption(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(2), sim.Chaos()} {
		failed := firstFailure(t, st, lostUpdate)
		shrunk, stats, err := sim.Shrink(context.Background(), failed.Schedule, shrinkTest(lostUpdate, failed.Err), sim.ShrinkOptions{})
		require.NoError(t, err, st.String())
		assert.Equal(t, 1, stats.After.Preemptions, "%s: a lost update needs one preemption", st)
		assert.Zero(t, stats.After.Waits, st.String())
		assert.GreaterOrEqual(t, stats.Before.Preemptions, stats.After.Preemptions)
		assert.False(t, stats.Exhausted || stats.Cancelled)

		again, cs := observe(sim.Options{}, sim.Replay(shrunk), lostUpdate)
		require.Error(t, again.Err, "%s: the shrunk schedule replays strictly", st)
		assert.Equal(t, failed.Err.Error(), again.Err.Error())
		assert.Equal(t, 1, sim.Preemptions(cs))
	}
}

// lateWorker fails when the worker has not run within a millisecond: only
// a worker starved while the clock moves on makes it fail.
func lateWorker(rt task.Runtime) error {
	done := false
	g := task.NewGroup(rt, "g")
	for i := 0; i < 3; i++ {
		g.Go(fmt.Sprintf("busy-%d", i), func() {
			for j := 0; j < 5; j++ {
				rt.Yield("busy.work")
			}
		})
	}
	g.Go("worker", func() { done = true })
	rt.Sleep(time.Millisecond)
	if !done {
		return errors.New("the worker did not run within 1ms")
	}
	g.Wait()
	return nil
}

func TestShrinkStarvationToOneWait(t *testing.T) {
	failed := firstFailure(t, sim.Starve("worker"), lateWorker)
	_, cs := observe(sim.Options{}, sim.Replay(failed.Schedule), lateWorker)
	require.Positive(t, sim.Waits(cs))
	shrunk, stats, err := sim.Shrink(context.Background(), failed.Schedule, shrinkTest(lateWorker, failed.Err), sim.ShrinkOptions{})
	require.NoError(t, err)
	assert.Equal(t, sim.Interleaving{Decisions: stats.After.Decisions, Preemptions: 0, Waits: 1}, stats.After, "one wait is the whole starvation")
	again := sim.Run(sim.Options{Strategy: sim.Replay(shrunk)}, lateWorker)
	assert.EqualError(t, again.Err, failed.Err.Error())
}

func TestShrinkStopsAtItsBounds(t *testing.T) {
	failed := firstFailure(t, sim.Chaos(), lateWorker)
	test := shrinkTest(lateWorker, failed.Err)
	var progress []sim.ShrinkStats
	shrunk, stats, err := sim.Shrink(context.Background(), failed.Schedule, test, sim.ShrinkOptions{RunsMax: 3, Progress: func(s sim.ShrinkStats) { progress = append(progress, s) }})
	require.NoError(t, err)
	assert.Equal(t, 3, stats.Runs)
	assert.True(t, stats.Exhausted)
	for _, p := range progress {
		assert.LessOrEqual(t, p.Runs, 3)
	}
	again := sim.Run(sim.Options{Strategy: sim.Replay(shrunk)}, lateWorker)
	assert.EqualError(t, again.Err, failed.Err.Error(), "what a bounded shrink returns still fails")

	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, stats, err = sim.Shrink(ctx, failed.Schedule, func(o sim.Options) (sim.Result, bool) {
		if calls++; calls == 2 {
			cancel()
		}
		return test(o)
	}, sim.ShrinkOptions{})
	require.NoError(t, err)
	assert.True(t, stats.Cancelled)
	assert.Equal(t, 2, stats.Runs)
}

func TestShrinkOfAScheduleThatNoLongerFails(t *testing.T) {
	failed := firstFailure(t, sim.Random(), lostUpdate)
	fixed := increments(true, "inc-a", "inc-b")
	_, _, err := sim.Shrink(context.Background(), failed.Schedule, shrinkTest(fixed, failed.Err), sim.ShrinkOptions{})
	assert.ErrorIs(t, err, sim.ErrShrinkNoFailure)
}

func TestGuidedExplainsItsWaitsAndPreemptionsInTheTrace(t *testing.T) {
	failed := firstFailure(t, sim.Starve("worker"), lateWorker)
	res := sim.Run(sim.Options{Strategy: sim.Guided(failed.Schedule), Trace: true}, lateWorker)
	var notes []string
	for _, e := range res.Trace.Events {
		if e.Kind == sim.EvStrategy {
			notes = append(notes, e.Text)
		}
	}
	require.NotEmpty(t, notes)
	assert.Contains(t, strings.Join(notes, "\n"), `guided: withhold task 4 "worker" for `)
	assert.Equal(t, failed.TraceHash, res.TraceHash, "notes stay out of the hash")
}

// ExampleShrink shrinks a lost update found by PCT to the one preemption
// it needs, and replays the shrunk schedule.
func ExampleShrink() {
	program := func(rt task.Runtime) error {
		balance := 100
		g := task.NewGroup(rt, "tellers")
		for _, name := range []string{"deposit", "withdraw"} {
			g.Go(name, func() {
				b := balance
				rt.Yield("teller.after-read")
				if name == "deposit" {
					balance = b + 10
				} else {
					balance = b - 10
				}
			})
		}
		g.Wait()
		if balance != 100 {
			return fmt.Errorf("balance %d, want 100", balance)
		}
		return nil
	}
	var failed sim.Result
	for seed := uint64(0); failed.Err == nil; seed++ {
		failed = sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, program)
	}
	test := func(opts sim.Options) (sim.Result, bool) {
		res := sim.Run(opts, program)
		return res, res.Err != nil && res.Err.Error() == failed.Err.Error()
	}
	shrunk, stats, err := sim.Shrink(context.Background(), failed.Schedule, test, sim.ShrinkOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("shrunk to:", stats.After.Preemptions, "preemption,", stats.After.Waits, "waits")
	again := sim.Run(sim.Options{Strategy: sim.Replay(shrunk)}, program)
	fmt.Println("replays the same failure:", again.Err != nil && again.Err.Error() == failed.Err.Error())
	// Output:
	// shrunk to: 1 preemption, 0 waits
	// replays the same failure: true
}
