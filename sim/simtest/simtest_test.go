package simtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/simprog"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/sim/simtest"
	"github.com/llmdst/llmdst/task"
)

// tellers is the lost update of sim's example, with the race's window as a
// situation; with a lock around read and write it is fixed.
func tellers(locked bool) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		balance := 100
		mu := rt.NewMutex("ledger")
		g := task.NewGroup(rt, "tellers")
		for _, name := range []string{"deposit", "withdraw"} {
			g.Go(name, func() {
				if locked {
					mu.Lock()
					defer mu.Unlock()
				}
				b := balance
				rt.Yield("teller.after-read")
				if balance != b {
					task.Reach(rt, "teller.raced")
				}
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
}

// fakeT is a test that Check can fail without failing the real one: it
// keeps what Check says. Check never calls Fatal, whose Goexit would lose
// the Summary: the methods it may call are those below.
type fakeT struct {
	testing.TB
	name         string
	mu           sync.Mutex
	logs, errors []string
}

func (f *fakeT) Helper()      {}
func (f *fakeT) Name() string { return f.name }
func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
func (f *fakeT) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }
func (f *fakeT) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errors) > 0
}

// check runs Check under a fakeT named name.
func check(t *testing.T, name string, cfg simtest.Config, program func(rt task.Runtime) error) (simtest.Summary, *fakeT) {
	t.Helper()
	ft := &fakeT{TB: t, name: name}
	if cfg.OutDir == "" {
		cfg.OutDir = "-" // not the system's temporary directory
	}
	return simtest.Check(ft, cfg, program), ft
}

// lowestFailing is the first seed from 0 that fails when seed s runs under
// strategies[s % len], found by sim.Run alone.
func lowestFailing(t *testing.T, strategies []string, program func(rt task.Runtime) error) uint64 {
	for seed := uint64(0); seed < 10_000; seed++ {
		st, err := sim.ParseStrategy(strategies[seed%uint64(len(strategies))])
		require.NoError(t, err)
		if sim.Run(sim.Options{Seed: seed, Strategy: st}, program).Err != nil {
			return seed
		}
	}
	t.Fatal("no seed failed")
	return 0
}

// TestCheckFindsShrinksAndSavesTheLostUpdate: the lowest failing seed is
// reported with its error, the command that runs it again and the end of
// its shrunk run's trace, and saved; the saved schedule runs first from
// then on, passing once the bug is fixed and failing again if it comes
// back.
func TestCheckFindsShrinksAndSavesTheLostUpdate(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	cfg := simtest.Config{Dir: dir, OutDir: out, Seeds: 500}
	sum, ft := check(t, "TestTellers", cfg, tellers(false))
	require.True(t, ft.failed(), "the lost update was not found")
	require.Len(t, ft.errors, 1)
	f := sum.Failure
	require.NotNil(t, f)

	// The strategies: the defaults, with a starve of each task the program
	// starts; the seed: the lowest that fails under them.
	assert.Equal(t, []string{"random", "pct:3", "chaos", "starve:main", "starve:deposit", "starve:withdraw"}, sum.Strategies)
	assert.Equal(t, lowestFailing(t, sum.Strategies, tellers(false)), f.Seed)
	assert.Equal(t, sum.Strategies[f.Seed%uint64(len(sum.Strategies))], f.Strategy)
	assert.Equal(t, "balance N, want N", f.Signature)
	assert.Empty(t, f.SavedFrom)

	require.True(t, f.Shrunk, "not shrunk: %v", f.ShrinkErr)
	assert.LessOrEqual(t, f.Shrink.After.Preemptions, f.Shrink.Before.Preemptions)
	assert.LessOrEqual(t, f.Shrink.After.Preemptions, 1, "a lost update needs one preemption")

	// The file is the shrunk schedule, and fails when replayed strictly.
	require.Equal(t, filepath.Join(dir, "TestTellers", fmt.Sprintf("seed-%d-%s.schedule", f.Seed, strings.ReplaceAll(f.Strategy, ":", "_"))), f.File)
	text, err := os.ReadFile(f.File)
	require.NoError(t, err)
	saved, err := sim.ParseSchedule(string(text))
	require.NoError(t, err)
	for k, v := range map[string]string{simtest.MetaTest: "TestTellers", simtest.MetaCommand: "go test -run '^TestTellers$' github.com/llmdst/llmdst/sim/simtest",
		"seed": strconv.FormatUint(f.Seed, 10), "strategy": f.Strategy, "signature": f.Signature} {
		got, ok := saved.Get(k)
		assert.True(t, ok && got == v, "meta %s: %q, want %q", k, got, v)
	}
	again := sim.Run(sim.Options{Seed: f.Seed, Strategy: sim.Replay(saved)}, tellers(false))
	assert.Equal(t, f.Signature, sim.Signature(again.Err), "the shrunk run fails the same way: %v", again.Err)

	// The shrunk run, drawn and traced outside testdata.
	base := filepath.Join(out, "simtest-TestTellers", fmt.Sprintf("seed-%d-%s", f.Seed, strings.ReplaceAll(f.Strategy, ":", "_")))
	require.Equal(t, base+".html", f.Timeline, "%v", f.OutErr)
	require.Equal(t, base+".perfetto.json", f.Perfetto)
	page, err := os.ReadFile(f.Timeline)
	require.NoError(t, err)
	for _, want := range []string{`id="lane-deposit"`, `id="lane-withdraw"`, "balance ", "LLMDST_SIM_SEED="} {
		assert.Contains(t, string(page), want)
	}
	trace, err := os.ReadFile(f.Perfetto)
	require.NoError(t, err)
	assert.True(t, json.Valid(trace))
	assert.Contains(t, string(trace), `"withdraw`)

	report := ft.errors[0]
	assert.Contains(t, report, fmt.Sprintf("simtest: seed %d failed (strategy %s, %d decisions), the lowest failing seed of seeds 0-499:", f.Seed, f.Strategy, f.Steps))
	assert.Contains(t, report, "\n    balance ")
	assert.Contains(t, report, "saved: "+f.File)
	assert.Contains(t, report, "the shrunk run:\n")
	assert.Contains(t, report, "teller.after-read", "the trace's end names the scheduling points")
	assert.Contains(t, report, "\ntimeline: "+f.Timeline+" (a browser)\nperfetto: "+f.Perfetto+" (ui.perfetto.dev)\n")
	assert.Contains(t, report, fmt.Sprintf("again: LLMDST_SIM_SEED=%d LLMDST_SIM_STRATEGY=%s go test -run '^TestTellers$' github.com/llmdst/llmdst/sim/simtest", f.Seed, f.Strategy))

	// Fixed: the saved schedule runs first, and passes, and so do the seeds.
	sum, ft = check(t, "TestTellers", cfg, tellers(true))
	assert.False(t, ft.failed(), "%v", ft.errors)
	assert.Equal(t, 1, sum.Saved)
	assert.Equal(t, 500, sum.Seeds)
	require.Len(t, ft.logs, 1)
	assert.Contains(t, ft.logs[0], "simtest: seeds 0-499 passed (failures 0/500 = 0% [≤ 0.6%, rule of three]); strategies random pct:3 chaos starve:main starve:deposit starve:withdraw; 1 saved schedule(s) first; in ")

	// Broken again: the saved schedule fails before any seed runs.
	sum, ft = check(t, "TestTellers", cfg, tellers(false))
	require.True(t, ft.failed())
	require.NotNil(t, sum.Failure)
	assert.Equal(t, f.File, sum.Failure.SavedFrom)
	assert.Zero(t, sum.Seeds)
	assert.Contains(t, ft.errors[0], "simtest: the saved schedule "+f.File+fmt.Sprintf(" (seed %d, strategy %s) fails again", f.Seed, f.Strategy))
	assert.Contains(t, ft.errors[0], "again: go test -run '^TestTellers$' github.com/llmdst/llmdst/sim/simtest")
}

// TestExploreWalksEachStrategyBeforeTheSeeds: with Explore, the first seed
// runs under every schedule within the bound, once per strategy that can
// be walked; a walk's failure is reported, shrunk and saved as a seed's,
// and runs first from then on.
func TestExploreWalksEachStrategyBeforeTheSeeds(t *testing.T) {
	dir := t.TempDir()
	cfg := simtest.Config{Dir: dir, Seeds: 50, Explore: 3, Strategies: []string{"random", "pct:3", "starve:receiver"}}
	sum, ft := check(t, "TestCourier", cfg, simprog.Courier)
	require.True(t, ft.failed(), "the starved receiver was not found")
	f := sum.Failure
	require.NotNil(t, f)
	assert.True(t, f.Explored)
	assert.Equal(t, "starve:receiver", f.Strategy)
	assert.Zero(t, sum.Seeds, "a walk's failure ends the check before the seeds")
	require.Len(t, sum.Walks, 2, "pct's draws cannot be walked: %v", sum.Walks)
	assert.Equal(t, simtest.Walk{Strategy: "random", Runs: sum.Walks[0].Runs, Complete: true}, sum.Walks[0], "ordering alone never starves the receiver")
	assert.False(t, sum.Walks[1].Complete)
	assert.Equal(t, "starve:receiver", sum.Walks[1].Strategy)
	assert.Contains(t, f.Err.Error(), "a parcel")
	assert.Equal(t, filepath.Join(dir, "TestCourier", "seed-0-starve_receiver-explored.schedule"), f.File, "%v", f.SaveErr)
	report := ft.errors[0]
	assert.Contains(t, report, fmt.Sprintf("simtest: seed 0 failed (%d decisions) under a schedule within 3 departures of strategy starve:receiver's calm one, after %d schedules of it:", f.Steps, sum.Walks[1].Runs))
	assert.Contains(t, report, "again: go test -run '^TestCourier$' github.com/llmdst/llmdst/sim/simtest", "the test runs the saved schedule first")

	sum, ft = check(t, "TestCourier", cfg, simprog.Courier)
	require.True(t, ft.failed())
	assert.Equal(t, f.File, sum.Failure.SavedFrom)
	assert.Empty(t, sum.Walks, "the saved schedule fails before any walk")

	// A bound the failure lies beyond: every walk complete, then the seeds.
	cfg.Dir, cfg.Explore = "-", 1
	sum, ft = check(t, "TestCourier", cfg, simprog.Courier)
	if ft.failed() {
		assert.False(t, sum.Failure.Explored, "within 1 departure a window is the shortest")
	}
	require.Len(t, sum.Walks, 2)
	for _, w := range sum.Walks {
		assert.True(t, w.Complete, "%+v", w)
		res, err := sim.Explore(context.Background(), sim.ExploreOptions{Options: sim.Options{Strategy: mustStrategy(t, w.Strategy)}, Delays: 1}, simprog.Courier)
		require.NoError(t, err)
		assert.Equal(t, res.Runs, w.Runs, "%s: the walk is sim.Explore's", w.Strategy)
	}

	// Locked tellers: every walk complete and the seeds pass, as the log says.
	sum, ft = check(t, "TestTellers", simtest.Config{Dir: "-", Seeds: 20, Explore: 2, ExploreRunsMax: 40, Strategies: []string{"random", "starve:deposit"}}, tellers(true))
	require.False(t, ft.failed(), "%v", ft.errors)
	require.Len(t, ft.logs, 1)
	assert.Equal(t, 20, sum.Seeds)
	assert.Regexp(t, `; seed 0 first under every schedule within 2 departures: random all \d+, starve:deposit cut at 40 \(ExploreRunsMax\); in `, ft.logs[0])
}

func mustStrategy(t *testing.T, name string) sim.Strategy {
	t.Helper()
	st, err := sim.ParseStrategy(name)
	require.NoError(t, err)
	return st
}

// TestTheFailureReportedDoesNotDependOnTheWorkers: one worker or four,
// the same lowest failing seed and the same shrunk schedule.
func TestTheFailureReportedDoesNotDependOnTheWorkers(t *testing.T) {
	var got []string
	for _, w := range []int{1, 4} {
		sum, ft := check(t, "TestTellers", simtest.Config{Dir: "-", Workers: w, Seeds: 300, Strategies: []string{"random", "pct:2"}}, tellers(false))
		require.True(t, ft.failed())
		require.NotNil(t, sum.Failure)
		assert.Empty(t, sum.Failure.File, "Dir - saves nothing")
		got = append(got, fmt.Sprintf("%d %s %s", sum.Failure.Seed, sum.Failure.Strategy, sum.Failure.Schedule))
	}
	assert.Equal(t, got[0], got[1])
}

// TestTheSeedTheReportNamesRunsAlone: LLMDST_SIM_SEED and
// LLMDST_SIM_STRATEGY run that seed, and no saved schedule.
func TestTheSeedTheReportNamesRunsAlone(t *testing.T) {
	dir := t.TempDir()
	sum, _ := check(t, "TestTellers", simtest.Config{Dir: dir, Seeds: 500}, tellers(false))
	f := sum.Failure
	require.NotNil(t, f)

	// The seed alone: the strategies are found from the first seed's run
	// as in the sweep, so the seed runs under the same one.
	strategies := sum.Strategies
	t.Setenv(simtest.SeedEnv, strconv.FormatUint(f.Seed, 10))
	sum, _ = check(t, "TestTellers", simtest.Config{Dir: dir}, tellers(false))
	assert.Equal(t, strategies, sum.Strategies)
	require.NotNil(t, sum.Failure)
	assert.Equal(t, f.Strategy, sum.Failure.Strategy)

	t.Setenv(simtest.StrategyEnv, f.Strategy)
	sum, ft := check(t, "TestTellers", simtest.Config{Dir: dir}, tellers(false))
	require.True(t, ft.failed())
	assert.Equal(t, 0, sum.Saved)
	assert.Equal(t, []string{f.Strategy}, sum.Strategies)
	require.NotNil(t, sum.Failure)
	assert.Equal(t, f.Seed, sum.Failure.Seed)
	assert.Equal(t, f.Err.Error(), sum.Failure.Err.Error())
	assert.Contains(t, ft.errors[0], fmt.Sprintf("the lowest failing seed of seed %d (LLMDST_SIM_SEED)", f.Seed))
}

// TestTheDrawsOfAWalkRunAlone: the draws of the schedule a walk found
// failing (as a hang in a walk names them too) run that schedule alone,
// with the seed and the strategy, and the command it gives runs it again;
// draws are of one seed and of a strategy a walk can take.
func TestTheDrawsOfAWalkRunAlone(t *testing.T) {
	// Seed 2's own draws under starve:receiver do not starve it long
	// enough; a walk of it finds the schedules that do.
	cfg := simtest.Config{Dir: "-", FirstSeed: 2, Seeds: 1, Explore: 3, Strategies: []string{"starve:receiver"}}
	sum, _ := check(t, "TestCourier", cfg, simprog.Courier)
	f := sum.Failure
	require.NotNil(t, f)
	require.True(t, f.Explored)
	require.NotNil(t, f.Draws)
	assert.LessOrEqual(t, f.Draws.Departures(), 3)

	t.Setenv(simtest.SeedEnv, "2")
	t.Setenv(simtest.StrategyEnv, f.Strategy)
	alone, ft := check(t, "TestCourier", simtest.Config{Dir: "-"}, simprog.Courier)
	require.False(t, ft.failed(), "seed 2 passes on its own draws: %v", alone.Failure)

	t.Setenv(simtest.DrawsEnv, f.Draws.String())
	alone, ft = check(t, "TestCourier", simtest.Config{Dir: "-"}, simprog.Courier)
	require.True(t, ft.failed())
	require.NotNil(t, alone.Failure)
	assert.Equal(t, f.Signature, alone.Failure.Signature)
	assert.Equal(t, f.Draws.String(), alone.Failure.Draws.String())
	assert.Equal(t, fmt.Sprintf("LLMDST_SIM_SEED=%d LLMDST_SIM_STRATEGY=starve:receiver LLMDST_SIM_DRAWS=%s go test -run '^TestCourier$' github.com/llmdst/llmdst/sim/simtest", f.Seed, f.Draws), alone.Failure.Command)

	for draws, want := range map[string]string{
		"3:0": `simtest: LLMDST_SIM_DRAWS="3:0": draws "3:0": in "3:0", the answer must be a whole number ≥ 1`,
		"2:1": `simtest: LLMDST_SIM_DRAWS with strategy "pct:3": sim: Explore cannot walk pct:3`,
	} {
		t.Setenv(simtest.DrawsEnv, draws)
		t.Setenv(simtest.StrategyEnv, map[string]string{"3:0": "random", "2:1": "pct:3"}[draws])
		_, ft = check(t, "TestCourier", simtest.Config{Dir: "-"}, simprog.Courier)
		require.True(t, ft.failed(), draws)
		assert.True(t, strings.HasPrefix(ft.errors[0], want), "%q", ft.errors[0])
	}
}

// TestTargetsNeverReachedFailTheSweep: seeds that pass without reaching a
// target prove nothing of it, and Check says so; reached, it counts them.
func TestTargetsNeverReachedFailTheSweep(t *testing.T) {
	sum, ft := check(t, "TestLocked", simtest.Config{Dir: "-", Seeds: 200, Targets: []string{"teller.raced"}}, tellers(true))
	assert.Nil(t, sum.Failure)
	assert.Zero(t, sum.Reached["teller.raced"])
	require.Len(t, ft.errors, 1)
	assert.Equal(t, `simtest: no seed of 200 reached "teller.raced": the seeds that passed never went where the targets are, so they prove nothing of them (more seeds, or other strategies)`, ft.errors[0])

	reaches := func(rt task.Runtime) error {
		if seed, _ := sim.Seed(rt); seed%4 == 0 {
			task.Reach(rt, "quarter")
		}
		return nil
	}
	sum, ft = check(t, "TestQuarter", simtest.Config{Dir: "-", Seeds: 200, Targets: []string{"quarter"}}, reaches)
	assert.Empty(t, ft.errors)
	assert.Equal(t, 50, sum.Reached["quarter"])
	require.Len(t, ft.logs, 1)
	assert.Contains(t, ft.logs[0], `; "quarter" reached by 50; in `)
}

// TestARunThatDiffersFromItselfIsCaught: a program that keeps state
// between runs cannot be replayed, and the first seed's double run says so.
func TestARunThatDiffersFromItselfIsCaught(t *testing.T) {
	var runs atomic.Int64
	leaky := func(rt task.Runtime) error {
		if runs.Add(1)%2 == 0 {
			rt.Yield("sometimes")
		}
		return nil
	}
	// One worker: with two, another seed's run can take a count between
	// seed 0's two runs, and both see the same parity.
	sum, ft := check(t, "TestLeaky", simtest.Config{Dir: "-", Seeds: 10, Workers: 1, Strategies: []string{"random"}}, leaky)
	require.True(t, ft.failed())
	require.NotNil(t, sum.Failure)
	assert.Equal(t, uint64(0), sum.Failure.Seed)
	assert.Equal(t, "nondeterministic", sum.Failure.Signature)
	assert.Nil(t, sum.Failure.Schedule)
}

// TestFirstSeedEnvMovesTheSeedsNotTheStrategies: LLMDST_SIM_FIRST_SEED
// makes the seeds start at it, so a seed only there fails; the default
// strategies are still drawn from Config.FirstSeed's runs, and the
// failure's command runs the seed alone as it ran.
func TestFirstSeedEnvMovesTheSeedsNotTheStrategies(t *testing.T) {
	// Seeds from 1000 fail; each seed starts a task named for its parity,
	// so which seed the default strategies were drawn from shows in them.
	program := func(rt task.Runtime) error {
		seed, _ := sim.Seed(rt)
		g := task.NewGroup(rt, "g")
		g.Go([]string{"even", "odd"}[seed%2], func() { rt.Yield("work") })
		g.Wait()
		if seed >= 1000 {
			return fmt.Errorf("seed %d is too large", seed)
		}
		return nil
	}
	cfg := simtest.Config{Dir: "-", Seeds: 20, FirstSeed: 2}
	sum, ft := check(t, "TestFirst", cfg, program)
	require.False(t, ft.failed(), ft.errors)
	assert.Contains(t, sum.Log, "seeds 2-21")
	assert.Contains(t, sum.Strategies, "starve:even")
	assert.NotContains(t, sum.Strategies, "starve:odd")

	t.Setenv(simtest.FirstSeedEnv, "1001")
	moved, ft := check(t, "TestFirst", cfg, program)
	require.True(t, ft.failed())
	require.NotNil(t, moved.Failure)
	assert.Equal(t, uint64(1001), moved.Failure.Seed, "the lowest seed of 1001-1020 fails")
	assert.Equal(t, sum.Strategies, moved.Strategies, "the strategies are Config.FirstSeed's")
	assert.Contains(t, ft.errors[0], "LLMDST_SIM_SEED=1001 LLMDST_SIM_STRATEGY="+moved.Failure.Strategy)

	// The seed alone, as the command runs it, with the variable still
	// set: it runs the one seed, under the strategy it failed under.
	t.Setenv(simtest.SeedEnv, "1001")
	t.Setenv(simtest.StrategyEnv, moved.Failure.Strategy)
	alone, ft := check(t, "TestFirst", cfg, program)
	require.True(t, ft.failed())
	require.NotNil(t, alone.Failure)
	assert.Equal(t, 1, alone.Seeds)
	assert.Equal(t, moved.Failure.Signature, alone.Failure.Signature)
}

// TestBadConfigurationSaysWhatWasWrong: nothing runs, and the message
// names the field or variable and the value.
func TestBadConfigurationSaysWhatWasWrong(t *testing.T) {
	ok := func(rt task.Runtime) error { return nil }
	for _, tc := range []struct {
		cfg     simtest.Config
		env     [2]string
		program func(rt task.Runtime) error
		want    string
	}{
		{cfg: simtest.Config{Seeds: -1}, program: ok, want: "simtest: Config.Seeds is -1: it is a count of seeds, 0 for the default"},
		{cfg: simtest.Config{Workers: -2}, program: ok, want: "simtest: Config.Workers is -2: it is a count of workers, 0 for GOMAXPROCS"},
		{cfg: simtest.Config{Strategies: []string{"random", "bogus"}}, program: ok, want: `simtest: strategy "bogus": `},
		{cfg: simtest.Config{Strategies: []string{}}, program: ok, want: "simtest: Config.Strategies is empty: name one at least, or leave it nil for the defaults"},
		{cfg: simtest.Config{Options: sim.Options{Chooser: sim.NewPCGChooser(1, 2)}}, program: ok, want: "simtest: Config.Options.Chooser is set"},
		{cfg: simtest.Config{FirstSeed: ^uint64(0), Seeds: 2}, program: ok, want: "simtest: Config.FirstSeed (or LLMDST_SIM_FIRST_SEED) 18446744073709551615 and 2 seeds run past the largest seed"},
		{env: [2]string{simtest.FirstSeedEnv, "-3"}, program: ok, want: `simtest: LLMDST_SIM_FIRST_SEED="-3": not a seed (an unsigned integer)`},
		{cfg: simtest.Config{Seeds: 5}, env: [2]string{simtest.FirstSeedEnv, "18446744073709551614"}, program: ok, want: "simtest: Config.FirstSeed (or LLMDST_SIM_FIRST_SEED) 18446744073709551614 and 5 seeds run past the largest seed"},
		{program: nil, want: "simtest: the program is nil"},
		{env: [2]string{simtest.SeedEnv, "x"}, program: ok, want: `simtest: LLMDST_SIM_SEED="x": not a seed (an unsigned integer)`},
		{env: [2]string{simtest.SeedsEnv, "0"}, program: ok, want: `simtest: LLMDST_SIM_SEEDS="0": not a count of seeds (a positive integer)`},
		{env: [2]string{simtest.StrategyEnv, "pct:0"}, program: ok, want: `simtest: strategy "pct:0": `},
		{env: [2]string{simtest.DrawsEnv, "2:1"}, program: ok, want: `simtest: LLMDST_SIM_DRAWS="2:1" needs LLMDST_SIM_SEED: draws are a schedule of one seed`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if tc.env[0] != "" {
				t.Setenv(tc.env[0], tc.env[1])
			}
			sum, ft := check(t, "TestBad", tc.cfg, tc.program)
			require.True(t, ft.failed())
			require.Len(t, ft.errors, 1)
			assert.True(t, strings.HasPrefix(ft.errors[0], tc.want), "%q", ft.errors[0])
			assert.Zero(t, sum.Seeds)
		})
	}
}

// TestSavedScheduleThatIsNotOneIsAnError: a file in the test's directory
// that does not parse fails the test and says which file.
func TestSavedScheduleThatIsNotOneIsAnError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "TestX"), 0o755))
	bad := filepath.Join(dir, "TestX", "seed-1-random.schedule")
	require.NoError(t, os.WriteFile(bad, []byte("not a schedule\n"), 0o644))
	_, ft := check(t, "TestX", simtest.Config{Dir: dir, Seeds: 1}, func(rt task.Runtime) error { return nil })
	require.True(t, ft.failed())
	assert.Contains(t, ft.errors[0], "simtest: saved schedule "+bad+": ")
	assert.Contains(t, ft.errors[0], "(remove the file if it is not one)")
}

// TestAFailureThatCannotBeSavedSaysWhy: the report says the schedule was
// not saved, and why, and still shows the failure.
func TestAFailureThatCannotBeSavedSaysWhy(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	sum, ft := check(t, "TestTellers", simtest.Config{Dir: notDir, Seeds: 100}, tellers(false))
	require.NotNil(t, sum.Failure)
	assert.Error(t, sum.Failure.SaveErr)
	assert.Empty(t, sum.Failure.File)
	require.Len(t, ft.errors, 1)
	assert.Contains(t, ft.errors[0], "\nnot saved: ")
	assert.Contains(t, ft.errors[0], "balance ")
}

// spin loops without a scheduling point: the task keeps the baton.
//
//go:noinline
func spin(n *int) {
	for {
		*n++
	}
}

// TestAHangPanicsWithTheSeedAndStrategyToRunAgain: a seed that never gives
// the baton back ends the test binary (nothing can stop the stuck
// goroutine), naming the seed and the strategy that LLMDST_SIM_SEED and
// LLMDST_SIM_STRATEGY run again, and where the task is stuck.
func TestAHangPanicsWithTheSeedAndStrategyToRunAgain(t *testing.T) {
	if os.Getenv("SIMTEST_HANG_CHILD") != "" {
		simtest.Check(t, simtest.Config{Dir: "-", OutDir: "-", Strategies: []string{"chaos", "pct:2"}, Seeds: 10, FirstSeed: 5, Workers: 1,
			Options: sim.Options{HangAfter: 200 * time.Millisecond}}, func(rt task.Runtime) error {
			if seed, _ := sim.Seed(rt); seed == 8 {
				n := 0
				spin(&n)
			}
			return nil
		})
		t.Fatal("Check returned from a hang")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAHangPanicsWithTheSeedAndStrategyToRunAgain$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SIMTEST_HANG_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Contains(t, string(out), "panic: hang: seed 8 (strategy chaos) had not ended after ")
	assert.Contains(t, string(out), "simtest_test.spin without reaching a scheduling point")
}

// TestTheDefaultsStarveATaskOnlySomeRunsStart: the task names come from a
// run of the first seed under each of random, pct:3 and chaos, so a task
// that only some interleavings start is starved too.
func TestTheDefaultsStarveATaskOnlySomeRunsStart(t *testing.T) {
	program := func(rt task.Runtime) error {
		ran := false
		g := task.NewGroup(rt, "g")
		g.Go("early", func() { ran = true })
		rt.Yield("main.after-start")
		if !ran {
			g.Go("rare", func() {})
		}
		g.Wait()
		return nil
	}
	starts := func(seed uint64, st sim.Strategy) bool {
		res := sim.Run(sim.Options{Seed: seed, Strategy: st}, program)
		require.NoError(t, res.Err)
		return slices.Contains(res.Schedule.Tasks, "rare")
	}
	for seed := uint64(0); seed < 100; seed++ {
		if starts(seed, sim.Random()) || !starts(seed, sim.PCT(3)) && !starts(seed, sim.Chaos()) {
			continue
		}
		sum, ft := check(t, "TestRare", simtest.Config{Dir: "-", FirstSeed: seed, Seeds: 10}, program)
		require.Empty(t, ft.errors)
		assert.Contains(t, sum.Strategies, "starve:rare", "seed %d: random does not start it, another strategy does", seed)
		return
	}
	t.Fatal("no first seed where random does not start the rare task and another strategy does")
}

// TestTheDefaultsStarveTasksWhateverTheirNames: a task named with a colon
// ("worker:0", which reads like a window of 0) or with nothing is no bad
// configuration: the defaults starve each named one by a strategy that
// reads back as that name, and skip the unnamed.
func TestTheDefaultsStarveTasksWhateverTheirNames(t *testing.T) {
	program := func(rt task.Runtime) error {
		g := task.NewGroup(rt, "pool")
		mu := rt.NewMutex("total")
		total := 0
		for _, name := range []string{"worker:0", "x:1h", ""} {
			g.Go(name, func() {
				mu.Lock()
				total++
				mu.Unlock()
			})
		}
		g.Wait()
		if total != 3 {
			return fmt.Errorf("total %d, want 3", total)
		}
		return nil
	}
	sum, ft := check(t, "TestNames", simtest.Config{Dir: "-", Seeds: 10}, program)
	require.Empty(t, ft.errors)
	for _, name := range []string{"worker:0", "x:1h"} {
		st := sim.Starve(name).String()
		require.Contains(t, sum.Strategies, st)
		parsed, err := sim.ParseStrategy(st)
		require.NoError(t, err)
		assert.Equal(t, st, parsed.String(), "%q reads back as the strategy of %q", st, name)
	}
	for _, st := range sum.Strategies {
		assert.NotEqual(t, "starve:", st)
	}
}
