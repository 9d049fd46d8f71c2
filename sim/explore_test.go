package sim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// writers is two tasks writing their letter three times each, with a yield
// between writes; the text they leave is recorded in seen, which is outside
// the run and does not steer it.
func writers(seen map[string]bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		var b strings.Builder
		g := task.NewGroup(rt, "writers")
		for _, letter := range []string{"a", "b"} {
			g.Go("writer-"+letter, func() {
				for range 3 {
					b.WriteString(letter)
					rt.Yield("after-write")
				}
			})
		}
		g.Wait()
		seen[b.String()] = true
		return nil
	}
}

// TestExploreRunsEveryInterleaving: two tasks of three writes each can
// leave C(6,3) = 20 texts. Explore without a bound leaves every one of
// them and says it is complete; bounded, it leaves fewer; 0 is the
// default bound, 2.
func TestExploreRunsEveryInterleaving(t *testing.T) {
	for _, tc := range []struct {
		delays int
		texts  int // -1: more than 1 and fewer than 20
	}{{-1, 20}, {1, -1}, {2, -1}} {
		seen := map[string]bool{}
		res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: tc.delays}, writers(seen))
		require.NoError(t, err)
		assert.True(t, res.Complete, "delays %d", tc.delays)
		assert.Nil(t, res.Failed)
		if tc.texts >= 0 {
			assert.Len(t, seen, tc.texts, "delays %d: %v", tc.delays, seen)
		} else {
			assert.Greater(t, len(seen), 1, "delays %d", tc.delays)
			assert.Less(t, len(seen), 20, "delays %d", tc.delays)
		}
		assert.GreaterOrEqual(t, res.Runs, len(seen), "delays %d", tc.delays)
	}
	one, two, byDefault := map[string]bool{}, map[string]bool{}, map[string]bool{}
	_, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: 1}, writers(one))
	require.NoError(t, err)
	res2, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: 2}, writers(two))
	require.NoError(t, err)
	res0, err := sim.Explore(context.Background(), sim.ExploreOptions{}, writers(byDefault))
	require.NoError(t, err)
	assert.Equal(t, res2.Runs, res0.Runs, "Delays 0 is DefaultExploreDelays, %d", sim.DefaultExploreDelays)
	assert.Equal(t, two, byDefault)
	assert.True(t, one["aaabbb"], "the calm schedule runs the first writer to its end: %v", one)
	assert.Greater(t, len(two), len(one), "a larger bound reaches more")
	for text := range one {
		assert.True(t, two[text], "%q, reached within 1 departure, is missing within 2", text)
	}
}

// TestExploreFindsTheLostUpdateAndProvesTheLock: one departure from the
// calm schedule loses an update, and Explore finds it with a schedule that
// replays; with the lock, every schedule passes, and Explore says so.
func TestExploreFindsTheLostUpdateAndProvesTheLock(t *testing.T) {
	res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: 1}, lostUpdate)
	require.NoError(t, err)
	require.NotNil(t, res.Failed)
	assert.False(t, res.Complete)
	require.ErrorContains(t, res.Failed.Err, "lost update")
	departs := 0
	for _, v := range res.Draws {
		if v != 0 {
			departs++
		}
	}
	assert.Equal(t, 1, departs, "draws %v", res.Draws)
	require.NotNil(t, res.Failed.Schedule, "the failing run is run again with the caller's options, recorded")
	again := sim.Run(sim.Options{Strategy: sim.Replay(res.Failed.Schedule)}, lostUpdate)
	require.ErrorContains(t, again.Err, "lost update")
	assert.Equal(t, res.Failed.TraceHash, again.TraceHash)

	for _, tc := range []struct {
		delays int
		names  []string
	}{{-1, []string{"inc-a", "inc-b"}}, {3, []string{"inc-a", "inc-b", "inc-c"}}} {
		res, err = sim.Explore(context.Background(), sim.ExploreOptions{Delays: tc.delays}, increments(true, tc.names...))
		require.NoError(t, err)
		assert.Nil(t, res.Failed, "%d tasks, delays %d", len(tc.names), tc.delays)
		assert.True(t, res.Complete, "%d tasks, delays %d", len(tc.names), tc.delays)
		assert.Greater(t, res.Runs, 100, "%d tasks, delays %d", len(tc.names), tc.delays)
	}
}

func TestExploreStopsAtMaxRuns(t *testing.T) {
	res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: -1, MaxRuns: 5}, writers(map[string]bool{}))
	require.NoError(t, err)
	assert.Equal(t, 5, res.Runs)
	assert.False(t, res.Complete, "20 texts cannot come from 5 runs")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = sim.Explore(ctx, sim.ExploreOptions{Delays: -1}, writers(map[string]bool{}))
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, res.Runs)
}

func TestExploreRefusesWhatItCannotHonour(t *testing.T) {
	for _, tc := range []struct {
		opts sim.Options
		want string
	}{
		{sim.Options{Strategy: sim.PCT(3)}, "sim: Explore runs its own schedules: Options.Strategy must be nil, not pct:3"},
		{sim.Options{Chooser: sim.NewPCGChooser(1, sim.StreamStrategy)}, "sim: Explore draws its own schedules: Options.Chooser must be nil"},
		{sim.Options{CheckDeterminism: true}, "sim: Explore checks each run against the one it was derived from: Options.CheckDeterminism must be false"},
	} {
		res, err := sim.Explore(context.Background(), sim.ExploreOptions{Options: tc.opts}, lostUpdate)
		assert.EqualError(t, err, tc.want)
		assert.Zero(t, res.Runs)
	}
}

// TestExploreSaysWhenARunDependsOnMoreThanItsDraws: a program that starts
// fewer tasks each run (state kept between runs) is caught when a run
// cannot draw as the one it follows did.
func TestExploreSaysWhenARunDependsOnMoreThanItsDraws(t *testing.T) {
	tasks := 4
	leaky := func(rt task.Runtime) error {
		g := task.NewGroup(rt, "leaky")
		for range tasks {
			g.Go("worker", func() { rt.Yield("work") })
		}
		tasks = max(tasks-1, 1)
		g.Wait()
		return nil
	}
	_, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: -1}, leaky)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "main depends on something besides the seed and the draws")
}

// ExampleExplore proves a fix rather than sampling it: the tellers' lost
// update takes one departure from the calm schedule, and Explore finds it
// in the first few schedules; under a lock, every schedule of the two
// tellers passes, and Explore says it ran them all.
func ExampleExplore() {
	tellers := func(locked bool) func(rt task.Runtime) error {
		return func(rt task.Runtime) error {
			balance := 100
			mu := rt.NewMutex("account")
			g := task.NewGroup(rt, "tellers")
			for _, delta := range []int{+10, -10} {
				g.Go("teller", func() {
					if locked {
						mu.Lock()
						defer mu.Unlock()
					}
					b := balance
					rt.Yield("teller.after-read")
					balance = b + delta
				})
			}
			g.Wait()
			if balance != 100 {
				return fmt.Errorf("balance %d, want 100", balance)
			}
			return nil
		}
	}
	res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: 2}, tellers(false))
	fmt.Println(err, res.Failed.Err, "after", res.Runs, "schedules")
	res, err = sim.Explore(context.Background(), sim.ExploreOptions{Delays: -1}, tellers(true))
	fmt.Println(err, res.Failed, "complete:", res.Complete, res.Runs > 1)
	// Output:
	// <nil> balance 110, want 100 after 5 schedules
	// <nil> <nil> complete: true true
}

// BenchmarkExplore: schedules a second when Explore runs every schedule of
// three locked incrementers within three departures.
func BenchmarkExplore(b *testing.B) {
	program := increments(true, "inc-a", "inc-b", "inc-c")
	runs := 0
	for b.Loop() {
		res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: 3}, program)
		if err != nil || !res.Complete {
			b.Fatal(err, res.Failed)
		}
		runs += res.Runs
	}
	b.ReportMetric(float64(runs)/b.Elapsed().Seconds(), "schedules/s")
}
