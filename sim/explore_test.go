package sim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/simprog"
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
	assert.Equal(t, 1, res.Departures(), "draws %v", res.Draws)
	assert.Equal(t, 2, sim.ExploreResult{Draws: []int{0, 2, 0, 0, 1, 0}}.Departures())
	for delays, want := range map[int]string{0: "within 2 departures", 1: "within 1 departure", 3: "within 3 departures", -1: "with no bound on departures"} {
		assert.Equal(t, want, sim.ExploreOptions{Delays: delays}.Bound())
	}
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

// calm answers every draw with 0.
type calm struct{}

func (calm) Intn(int) int { return 0 }

// TestExploreStarvesUnderStarve: ordering alone never makes the
// parcel of simprog.Courier stale, however far it departs; under Starve, a window
// may open at any decision, and one longer than the sender's sleep is two
// departures (opening it, and a length past the shortest). The failure
// found replays.
func TestExploreStarvesUnderStarve(t *testing.T) {
	res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: -1}, simprog.Courier)
	require.NoError(t, err)
	assert.True(t, res.Complete, "random orders tasks and withholds none: %v", res.Failed)

	ordered, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: 1}, simprog.Courier)
	require.NoError(t, err)
	starve := sim.Options{Strategy: sim.Starve("receiver")}
	res, err = sim.Explore(context.Background(), sim.ExploreOptions{Options: starve, Delays: 1}, simprog.Courier)
	require.NoError(t, err)
	assert.True(t, res.Complete, "within one departure a window is the shortest, %v: %v", sim.StarveWindowMin, res.Failed)
	// One departure is an order, as under Random, or a window opened at
	// one of the calm run's decisions: one schedule each, not one for
	// every answer that would open it when sampled.
	picks := 0
	sim.Run(sim.Options{Strategy: sim.Observe(sim.Random(), func(sim.Choice) { picks++ }), Chooser: calm{}}, simprog.Courier)
	assert.Equal(t, ordered.Runs+picks, res.Runs, "%d orders within one departure, %d decisions to open a window at", ordered.Runs, picks)

	res, err = sim.Explore(context.Background(), sim.ExploreOptions{Options: starve, Delays: 2}, simprog.Courier)
	require.NoError(t, err)
	require.NotNil(t, res.Failed)
	require.ErrorContains(t, res.Failed.Err, "a parcel")
	assert.Equal(t, 2, res.Departures(), "draws %v", res.Draws)
	assert.Equal(t, "starve:receiver", res.Failed.Strategy, "the failure is run again under the strategy explored")
	again := sim.Run(sim.Options{Strategy: sim.Replay(res.Failed.Schedule)}, simprog.Courier)
	require.ErrorContains(t, again.Err, "a parcel")
	assert.Equal(t, res.Failed.TraceHash, again.TraceHash)
	// The draws, as simrun prints and reads them, are the schedule too:
	// followed under the strategy explored, they run it again.
	draws, err := sim.ParseDraws(res.Draws.String())
	require.NoError(t, err)
	followed := sim.Run(sim.Options{Strategy: starve.Strategy, Chooser: sim.FollowDraws(draws)}, simprog.Courier)
	require.ErrorContains(t, followed.Err, "a parcel")
	assert.Equal(t, res.Failed.TraceHash, followed.TraceHash, "draws %s", res.Draws)
	assert.Empty(t, followed.Warnings, "every answer was given")

	// Answers the run could not give are warned of: one past a draw's
	// last, given as its last, and one at a draw the run never made.
	calm := sim.Run(sim.Options{Strategy: starve.Strategy, Chooser: sim.FollowDraws(nil)}, simprog.Courier)
	require.Positive(t, calm.Steps)
	past, err := sim.ParseDraws(fmt.Sprintf("1:1000000,%d:1", calm.Steps*10))
	require.NoError(t, err)
	unfollowed := sim.Run(sim.Options{Strategy: starve.Strategy, Chooser: sim.FollowDraws(past)}, simprog.Courier)
	require.Len(t, unfollowed.Warnings, 2, "%q", unfollowed.Warnings)
	assert.Regexp(t, `^sim: draws: draw 1 had \d+ answers, so 1:1000000 was answered \d+, its last$`, unfollowed.Warnings[0])
	assert.Regexp(t, fmt.Sprintf(`^sim: draws: the run made \d+ draws, so the answer %d:1 and any after it were never given`, calm.Steps*10), unfollowed.Warnings[1])

	// Chaos may starve either task, and the receiver is not the first.
	chaos := sim.ExploreOptions{Options: sim.Options{Strategy: sim.Chaos()}, Delays: 2}
	res, err = sim.Explore(context.Background(), chaos, simprog.Courier)
	require.NoError(t, err)
	assert.True(t, res.Complete, "%v", res.Failed)
	chaos.Delays = 3
	res, err = sim.Explore(context.Background(), chaos, simprog.Courier)
	require.NoError(t, err)
	require.NotNil(t, res.Failed)
	require.ErrorContains(t, res.Failed.Err, "a parcel")
	// Chaos samples a window at odds of 1 in 16, and a walk opens one with
	// a single answer: FollowDraws answers as the walk did.
	followed = sim.Run(sim.Options{Strategy: chaos.Strategy, Chooser: sim.FollowDraws(res.Draws)}, simprog.Courier)
	require.ErrorContains(t, followed.Err, "a parcel")
	assert.Equal(t, res.Failed.TraceHash, followed.TraceHash, "draws %s", res.Draws)
}

// TestExploreWorkersSplitTheSchedulesAndAgree: on any number of workers,
// an exploration that ends complete runs the same schedules, and one that
// fails reports the same failure, the first in depth-first order.
func TestExploreWorkersSplitTheSchedulesAndAgree(t *testing.T) {
	var mu sync.Mutex
	texts := map[string]bool{}
	locked := func(rt task.Runtime) error {
		seen := map[string]bool{}
		err := writers(seen)(rt)
		mu.Lock()
		defer mu.Unlock()
		for text := range seen {
			texts[text] = true
		}
		return err
	}
	starve := sim.Options{Strategy: sim.Starve("receiver")}
	chaos := sim.Options{Strategy: sim.Chaos()}
	for _, tc := range []struct {
		name string
		opts sim.ExploreOptions
		main func(rt task.Runtime) error
	}{
		{"writers", sim.ExploreOptions{Delays: -1}, locked},
		{"locked incrementers", sim.ExploreOptions{Delays: 3}, increments(true, "inc-a", "inc-b", "inc-c")},
		{"lost update", sim.ExploreOptions{Delays: 2}, lostUpdate},
		{"courier starved", sim.ExploreOptions{Options: starve, Delays: 3}, simprog.Courier},
		{"courier under chaos", sim.ExploreOptions{Options: chaos, Delays: 3}, simprog.Courier},
	} {
		one, err := sim.Explore(context.Background(), tc.opts, tc.main)
		require.NoError(t, err, tc.name)
		for _, workers := range []int{2, 3, 5} {
			clear(texts)
			opts := tc.opts
			opts.Workers = workers
			res, err := sim.Explore(context.Background(), opts, tc.main)
			require.NoError(t, err, tc.name)
			require.Equal(t, one.Complete, res.Complete, "%s on %d workers", tc.name, workers)
			if one.Complete {
				assert.Equal(t, one.Runs, res.Runs, "%s on %d workers", tc.name, workers)
				assert.Equal(t, one.Deepest, res.Deepest, "%s on %d workers", tc.name, workers)
				continue
			}
			require.NotNil(t, res.Failed, "%s on %d workers", tc.name, workers)
			assert.Equal(t, one.Draws, res.Draws, "%s on %d workers", tc.name, workers)
			assert.Equal(t, one.Failed.TraceHash, res.Failed.TraceHash, "%s on %d workers", tc.name, workers)
			assert.Equal(t, one.Failed.Err.Error(), res.Failed.Err.Error(), "%s on %d workers", tc.name, workers)
		}
		if tc.name == "writers" {
			assert.Len(t, texts, 20, "five workers leave every text between them")
		}
	}

	var calls atomic.Int64
	opts := sim.ExploreOptions{Delays: -1, MaxRuns: 7, Workers: 3, OnRun: func() { calls.Add(1) }}
	res, err := sim.Explore(context.Background(), opts, increments(true, "inc-a", "inc-b", "inc-c"))
	require.NoError(t, err)
	assert.Equal(t, 7, res.Runs, "MaxRuns bounds the runs of every worker together")
	assert.Equal(t, int64(7), calls.Load(), "OnRun is called once for each run counted")
	assert.False(t, res.Complete)

	_, err = sim.Explore(context.Background(), sim.ExploreOptions{Workers: -1}, lostUpdate)
	assert.EqualError(t, err, "sim: Explore: Workers must be ≥ 0, got -1")
}

// TestExploreShardsAddUpToTheWhole: the shards of a walk, each on any
// number of workers, run between them every schedule of the whole walk
// once: their runs add up to its, each is complete when it is, and the
// first of their failures in depth-first order is its failure.
func TestExploreShardsAddUpToTheWhole(t *testing.T) {
	starve := sim.Options{Strategy: sim.Starve("receiver")}
	for _, tc := range []struct {
		name string
		opts sim.ExploreOptions
		main func(rt task.Runtime) error
	}{
		{"locked incrementers", sim.ExploreOptions{Delays: 3}, increments(true, "inc-a", "inc-b", "inc-c")},
		{"lost update", sim.ExploreOptions{Delays: 2}, lostUpdate},
		{"courier starved", sim.ExploreOptions{Options: starve, Delays: 3}, simprog.Courier},
	} {
		whole, err := sim.Explore(context.Background(), tc.opts, tc.main)
		require.NoError(t, err, tc.name)
		for _, shards := range []int{2, 3, 7} {
			for _, workers := range []int{1, 2} {
				runs, complete := 0, true
				var first sim.Draws
				for shard := range shards {
					opts := tc.opts
					opts.Shard, opts.Shards, opts.Workers = shard, shards, workers
					res, err := sim.Explore(context.Background(), opts, tc.main)
					require.NoError(t, err, tc.name)
					runs += res.Runs
					complete = complete && res.Complete
					if res.Failed != nil && (first == nil || slices.Compare(res.Draws, first) < 0) {
						first = res.Draws
					}
				}
				what := fmt.Sprintf("%s in %d shards on %d workers", tc.name, shards, workers)
				require.Equal(t, whole.Complete, complete, what)
				if whole.Complete {
					assert.Equal(t, whole.Runs, runs, what)
					continue
				}
				assert.Equal(t, whole.Draws, first, what)
			}
		}
	}
	for _, opts := range []sim.ExploreOptions{{Shards: -1}, {Shard: 2, Shards: 2}, {Shard: -1, Shards: 3}, {Shard: 1}} {
		_, err := sim.Explore(context.Background(), opts, lostUpdate)
		assert.ErrorContains(t, err, "sim: Explore: Shard", "%+v", opts)
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

	// A failure found before ctx is done is kept, with ctx's error.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	res, err = sim.Explore(ctx, sim.ExploreOptions{Delays: -1}, func(rt task.Runtime) error {
		err := lostUpdate(rt)
		if err != nil {
			cancel()
		}
		return err
	})
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, res.Failed)
	assert.ErrorContains(t, res.Failed.Err, "lost update")
}

func TestExploreRefusesWhatItCannotHonour(t *testing.T) {
	for _, tc := range []struct {
		opts sim.Options
		want string
	}{
		{sim.Options{Strategy: sim.PCT(3)}, "sim: Explore cannot walk pct:3: its draws are priorities of 2^30 answers each; explore random, chaos or starve:PREFIX"},
		{sim.Options{Strategy: sim.Observe(sim.Replay(&sim.Schedule{}), func(sim.Choice) {})}, "sim: Explore cannot walk replay: it draws nothing, so there is one schedule, the one replayed; explore random, chaos or starve:PREFIX"},
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

// TestDrawsAreWrittenAsTheirDepartures: a schedule of a walk is hundreds of
// draws and a few departures, so they are written as N:V, and read back;
// what cannot be a schedule is refused, saying why.
func TestDrawsAreWrittenAsTheirDepartures(t *testing.T) {
	for text, d := range map[string]sim.Draws{
		"calm":        nil,
		"2:2,5:1":     {0, 2, 0, 0, 1, 0},
		"1:3":         {3},
		"300:1,301:4": append(make(sim.Draws, 299), 1, 4),
	} {
		assert.Equal(t, text, d.String())
		back, err := sim.ParseDraws(text)
		require.NoError(t, err, text)
		assert.Equal(t, d.String(), back.String(), text)
		assert.Equal(t, d.Departures(), back.Departures(), text)
	}
	empty, err := sim.ParseDraws("")
	require.NoError(t, err)
	assert.Equal(t, 0, empty.Departures())
	for text, want := range map[string]string{
		"5":             `"5" is not N:V`,
		"0:1":           "the draw's number must be a whole number from 1",
		"x:1":           "the draw's number must be a whole number from 1",
		"99999999999:1": "the draw's number must be a whole number from 1",
		"3:0":           "the answer must be a whole number ≥ 1",
		"3:-2":          "the answer must be a whole number ≥ 1",
		"4:1,2:1":       "draw 2 comes after draw 4: give the draws in increasing order, each once",
		"4:1,4:2":       "draw 4 comes after draw 4",
	} {
		_, err := sim.ParseDraws(text)
		assert.ErrorContains(t, err, want, text)
	}
}
