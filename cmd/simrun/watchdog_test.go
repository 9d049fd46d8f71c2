package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// The hang scenario's seed spinSeed loops without a scheduling point, and
// its seed blockSeed waits on a real channel, until the test that armed
// them lets them go; every other seed yields a few times and ends. Seed
// turnSeed spins as spinSeed does in the schedules where the worker passes
// its yield before main passes its first, which the calm one does not.
const (
	spinSeed  = 5
	blockSeed = 30
	turnSeed  = 60
)

var hangGate struct {
	mu      sync.Mutex
	release chan struct{}
	stuck   sync.WaitGroup // runs stuck in the gate
}

// armHang makes the hang seeds hang until the test ends, and waits at its
// end until they have let go: no goroutine and no spinning core outlives
// the test.
func armHang(t *testing.T) {
	t.Helper()
	release := make(chan struct{})
	hangGate.mu.Lock()
	hangGate.release = release
	hangGate.mu.Unlock()
	t.Cleanup(func() {
		hangGate.mu.Lock()
		close(release)
		hangGate.release = nil
		hangGate.mu.Unlock()
		hangGate.stuck.Wait()
	})
}

// enterGate returns the channel a hang seed waits on, or false when no test
// has armed them; the caller calls hangGate.stuck.Done when it lets go.
func enterGate() (chan struct{}, bool) {
	hangGate.mu.Lock()
	defer hangGate.mu.Unlock()
	if hangGate.release == nil {
		return nil, false
	}
	hangGate.stuck.Add(1)
	return hangGate.release, true
}

//go:noinline
func spinWithoutYielding(released *atomic.Bool) int {
	n := 0
	for !released.Load() {
		n++
	}
	return n
}

//go:noinline
func blockOnRealChannel(release chan struct{}) { <-release }

func init() {
	scenario.Register(&scenario.Scenario{Name: "test-hang", Summary: "a scenario two seeds of which hang: one spins, one blocks on a real channel", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			mainGoesOn := false
			x.RT.Go("worker", func() {
				x.RT.Yield("worker")
				outOfTurn := x.Opts.Seed == turnSeed && !mainGoesOn
				if x.Opts.Seed != spinSeed && x.Opts.Seed != blockSeed && !outOfTurn {
					return
				}
				release, armed := enterGate()
				if !armed {
					return
				}
				defer hangGate.stuck.Done()
				switch x.Opts.Seed {
				case spinSeed, turnSeed:
					var released atomic.Bool
					go func() { <-release; released.Store(true) }()
					spinWithoutYielding(&released)
				case blockSeed:
					blockOnRealChannel(release)
				}
			})
			for range 3 {
				x.RT.Yield("main")
				mainGoesOn = true
			}
			return nil
		}})
}

func TestRunReportsATaskThatSpinsWithoutASchedulingPointAsAHang(t *testing.T) {
	armHang(t)
	dir := t.TempDir()
	code, out, _ := simrun(t, "run", "-scenario", "test-hang", "-seed", "5", "-seed-timeout", "100ms", "-out", dir)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "test-hang seed 5, strategy random, fixed engine: HANG")
	assert.Contains(t, out, "a task runs in github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding without reaching a scheduling point")
	assert.Contains(t, out, "github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding(", "the stuck task's stack")
	assert.Contains(t, out, "run again: simrun run -scenario test-hang -seed 5 -strategy random")
	stacks := filepath.Join(dir, "test-hang-fixed-seed5.stacks.txt")
	assert.Contains(t, out, "every goroutine's stack: "+stacks)
	dump, err := os.ReadFile(stacks)
	require.NoError(t, err)
	assert.Contains(t, string(dump), "github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding(")
	assert.NoFileExists(t, filepath.Join(dir, "test-hang-fixed-seed5.schedule"), "a run that did not end has no schedule")
}

func TestRunReportsATaskBlockedOutsideTheSimulatorAsAHang(t *testing.T) {
	armHang(t)
	dir := t.TempDir()
	code, out, _ := simrun(t, "run", "-scenario", "test-hang", "-seed", "30", "-seed-timeout", "100ms", "-out", dir, "-json")
	require.Equal(t, 1, code, out)
	var j runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.True(t, j.Failed)
	assert.Equal(t, "hang blocked in github.com/llmdst/llmdst/cmd/simrun.blockOnRealChannel", j.Signature)
	assert.Contains(t, j.Error, "[chan receive] on something the simulator cannot see")
	assert.Equal(t, "simrun run -scenario test-hang -seed 30 -strategy random", j.Replay)
}

func TestRunUnderTheWatchdogIsTheRunWithout(t *testing.T) {
	var hashes []string
	for _, timeout := range []string{"0", "1m"} {
		code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "7", "-seed-timeout", timeout, "-json")
		require.Equal(t, 0, code, out)
		var j runJSON
		require.NoError(t, json.Unmarshal([]byte(out), &j))
		hashes = append(hashes, j.TraceHash)
	}
	assert.Equal(t, hashes[0], hashes[1])
}

func TestSweepStopsAtAHungSeedAndReportsIt(t *testing.T) {
	armHang(t)
	dir := t.TempDir()
	// One worker: it takes no seed past the one that hangs.
	code, out, errOut := simrun(t, "sweep", "-scenario", "test-hang", "-seeds", "1-20", "-j", "1", "-seed-timeout", "500ms",
		"-out", dir, "-quiet", "-check-determinism", "0")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "seeds 1-5 of 1-20\n  stopped early: seed 5 hung (-seed-timeout 500ms)")
	assert.Contains(t, out, "first failing seed: 5")
	assert.Contains(t, out, "hang in github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding\n      first seed 5: simrun run -scenario test-hang -seed 5 -strategy random")
	assert.Contains(t, errOut, "simrun sweep: hang: seed 5 had not ended after ")
	assert.Contains(t, errOut, "github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding(", "the stuck task's stack")
	assert.FileExists(t, filepath.Join(dir, "test-hang-fixed-seed5.stacks.txt"))

	// Two: the other goes on until the hang is seen, and what it ran counts.
	code, out, _ = simrun(t, "sweep", "-scenario", "test-hang", "-seeds", "1-20", "-j", "2", "-seed-timeout", "500ms", "-out", dir, "-json", "-check-determinism", "0")
	require.Equal(t, 1, code, out)
	var r sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, []uint64{5}, r.FailingSeeds, "one seed hung; the others that ran passed")
	assert.GreaterOrEqual(t, r.Seeds, uint64(5), "the seeds taken before the hang ran")
	require.Len(t, r.Modes, 1)
	assert.Equal(t, "hang in github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding", r.Modes[0].Signature)
}

// TestASweepOfScenariosStopsAtAHang: the hung worker is left behind, so
// the scenarios after the one that hung are not run, and the text says so.
func TestASweepOfScenariosStopsAtAHang(t *testing.T) {
	armHang(t)
	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse,test-hang,swarm", "-seeds", "1-20", "-j", "1", "-seed-timeout", "500ms",
		"-out", t.TempDir(), "-quiet", "-check-determinism", "0")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "sweep test-hang: ")
	assert.NotContains(t, out, "sweep swarm: ")
	assert.Contains(t, out, "  failed: test-hang (1 of 5 seeds)\n  passed: abort-reuse\n  not run (a seed of test-hang hung): swarm\n")
}

// TestACompareOfScenariosStopsAtAHang: as a sweep of several, the
// scenarios after the one whose seed hung are not compared.
func TestACompareOfScenariosStopsAtAHang(t *testing.T) {
	armHang(t)
	code, out, _ := simrun(t, "compare", "-scenario", "abort-reuse,test-hang,swarm", "-seeds", "1-20", "-j", "1", "-a", "", "-b", "-strategy chaos",
		"-seed-timeout", "500ms", "-out", t.TempDir(), "-quiet", "-check-determinism", "0")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "compare: variant A ((no flags)): seed 5 hung; no comparison is made until it ends")
	assert.NotContains(t, out, "compare swarm over")
	assert.Contains(t, out, "  no failures in either: abort-reuse\n  stopped short: test-hang (a seed hung)\n  not run (a seed of test-hang hung): swarm\n")
}

func TestShrinkOfAHangSaysThereIsNothingToShrink(t *testing.T) {
	armHang(t)
	code, out, _ := simrun(t, "shrink", "-scenario", "test-hang", "-seed", "5", "-seed-timeout", "100ms", "-out", t.TempDir(), "-quiet")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "HANG, nothing to shrink")
	assert.Contains(t, out, "github.com/llmdst/llmdst/cmd/simrun.spinWithoutYielding")
}

func TestCompareMakesNoComparisonPastAHang(t *testing.T) {
	armHang(t)
	code, out, _ := simrun(t, "compare", "-scenario", "test-hang", "-seeds", "1-10", "-a", "", "-b", "-legacy", "-seed-timeout", "500ms",
		"-out", t.TempDir(), "-quiet", "-check-determinism", "0")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "compare: variant A ((no flags)): seed 5 hung; no comparison is made until it ends")
	assert.NotContains(t, out, "variant B", "B does not run once A hung")
	assert.NotContains(t, out, "Fisher")

	// A stops every run at its first decision, before the spin: B hangs.
	dir := t.TempDir()
	code, out, _ = simrun(t, "compare", "-scenario", "test-hang", "-seeds", "1-10", "-a", "-steps-max 1", "-b", "", "-seed-timeout", "500ms",
		"-out", dir, "-quiet", "-check-determinism", "0")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "compare: variant B ((no flags)): seed 5 hung; no comparison is made until it ends")
	assert.FileExists(t, filepath.Join(dir, "b", "test-hang-fixed-seed5.stacks.txt"))
}

func TestSeedTimeoutMustNotBeNegative(t *testing.T) {
	for _, cmd := range [][]string{
		{"run", "-scenario", "abort-reuse"},
		{"sweep", "-scenario", "abort-reuse", "-seeds", "1"},
		{"shrink", "-scenario", "abort-reuse"},
		{"compare", "-scenario", "abort-reuse", "-seeds", "1"},
	} {
		code, _, errOut := simrun(t, append(cmd, "-seed-timeout", "-1s")...)
		assert.Equal(t, 2, code, cmd)
		assert.Contains(t, errOut, `invalid value "-1s" for flag -seed-timeout: want a duration ≥ 0 (0 means no timeout), got -1s`, cmd)
	}
}

func TestWatchdogReportsOnlyTheSeedThatDoesNotEnd(t *testing.T) {
	w := startWatchdog(100*time.Millisecond, 2)
	defer w.stop()
	w.own(0)
	// Slot 0 runs short seeds, one after another, for longer than the
	// timeout in all; slot 1 starts a seed and never ends it.
	stuck := w.begin(1, 99)
	deadline := time.Now().Add(400 * time.Millisecond)
	for seed := uint64(1); time.Now().Before(deadline); seed++ {
		token := w.begin(0, seed)
		time.Sleep(time.Millisecond)
		require.True(t, w.end(0, token), "seed %d ended in time", seed)
	}
	select {
	case h := <-w.hung:
		assert.Equal(t, uint64(99), h.Seed)
		assert.GreaterOrEqual(t, h.After, 100*time.Millisecond)
	default:
		t.Fatal("the seed that never ended was not reported")
	}
	assert.False(t, w.end(1, stuck), "a seed reported as hung is given up")
	select {
	case h := <-w.hung:
		t.Fatalf("a second report, of seed %d", h.Seed)
	default:
	}
}

func TestCompareJSONAndJUnitPastAHang(t *testing.T) {
	armHang(t)
	dir := t.TempDir()
	junit := filepath.Join(dir, "compare.xml")
	code, out, _ := simrun(t, "compare", "-scenario", "test-hang", "-seeds", "1-10", "-a", "", "-b", "-legacy", "-seed-timeout", "500ms",
		"-out", dir, "-quiet", "-check-determinism", "0", "-json", "-junit", junit)
	require.Equal(t, 1, code, out)
	var j struct {
		Hung      string          `json:"hung"`
		Stopped   string          `json:"stopped"`
		Verdict   string          `json:"verdict"`
		Requested string          `json:"requested_seed_range"`
		A         *sweepResult    `json:"a"`
		B         json.RawMessage `json:"b"`
		P         *float64        `json:"p_value"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &j), "-json prints JSON when a seed hangs: %s", out)
	assert.Equal(t, "A", j.Hung)
	assert.Contains(t, j.Stopped, "seed 5 hung")
	assert.Contains(t, j.Verdict, "no comparison")
	assert.Equal(t, "1-10", j.Requested)
	require.NotNil(t, j.A)
	assert.Equal(t, []uint64{5}, j.A.FailingSeeds)
	require.Len(t, j.A.Modes, 1)
	assert.Equal(t, "simrun run -scenario test-hang -seed 5 -strategy random", j.A.Modes[0].Replay)
	assert.Nil(t, j.B, "B did not run")
	assert.Nil(t, j.P, "no p-value: nothing was compared")

	doc := readJUnit(t, junit)
	require.Len(t, doc.Suites, 1)
	require.Len(t, doc.Suites[0].Cases, 1, "one case: variant A, which hung")
	c := doc.Suites[0].Cases[0]
	require.NotNil(t, c.Failure)
	assert.Contains(t, c.Failure.Message, "hang: seed 5 had not ended")
	assert.Contains(t, c.Out, "simrun run -scenario test-hang -seed 5 -strategy random")

	// A stops every run at its first decision, before the spin: B hangs,
	// and both sweeps are given.
	code, out, _ = simrun(t, "compare", "-scenario", "test-hang", "-seeds", "1-10", "-a", "-steps-max 1", "-b", "", "-seed-timeout", "500ms",
		"-out", t.TempDir(), "-quiet", "-check-determinism", "0", "-json")
	require.Equal(t, 1, code, out)
	var jb struct {
		Hung string       `json:"hung"`
		A    *sweepResult `json:"a"`
		B    *sweepResult `json:"b"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &jb), out)
	assert.Equal(t, "B", jb.Hung)
	require.NotNil(t, jb.A)
	require.NotNil(t, jb.B)
	assert.Equal(t, uint64(10), jb.A.Seeds, "A ran every seed")
	assert.Equal(t, []uint64{5}, jb.B.FailingSeeds)
}

// livelockArmed makes test-livelock's tasks take turns for ever; unarmed,
// as under the tests that run every scenario, it ends at once.
var livelockArmed atomic.Bool

func init() {
	scenario.Register(&scenario.Scenario{Name: "test-livelock", Summary: "a scenario whose two tasks take turns for ever, slowly, when a test arms it", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			if !livelockArmed.Load() {
				return nil
			}
			for _, name := range []string{"a", "b"} {
				x.RT.Go(name, func() {
					for {
						// 20µs of wall time a turn: 20,000 decisions take
						// about half a second, far past -seed-timeout.
						for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
						}
						x.RT.Yield(name)
					}
				})
			}
			task.NewQueue[struct{}](x.RT).Get()
			return nil
		}})
}

// TestALivelockThatOutlastsTheTimeoutIsAStepLimitNotAHang: a seed that goes
// on deciding is left to the step limit, however long it runs past
// -seed-timeout; the watchdog once named such a seed a hang "without
// reaching a scheduling point" (a kv-offload livelock under a failing
// connector ran a minute to its step limit and was).
func TestALivelockThatOutlastsTheTimeoutIsAStepLimitNotAHang(t *testing.T) {
	livelockArmed.Store(true)
	t.Cleanup(func() { livelockArmed.Store(false) })
	dir := t.TempDir()
	start := time.Now()
	code, out, _ := simrun(t, "run", "-scenario", "test-livelock", "-seed", "1", "-seed-timeout", "100ms", "-steps-max", "20000", "-json", "-out", dir)
	require.Equal(t, 1, code, out)
	var j runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Equal(t, "step limit", j.Signature, j.Error)
	require.Greater(t, time.Since(start), 300*time.Millisecond, "the run must outlast the timeout, or the test tests nothing")

	code, out, _ = simrun(t, "sweep", "-scenario", "test-livelock", "-seeds", "1-2", "-seed-timeout", "100ms", "-steps-max", "20000", "-json", "-check-determinism", "0", "-out", dir)
	require.Equal(t, 1, code, out)
	var r sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Modes, 1, out)
	assert.Equal(t, "step limit", r.Modes[0].Signature)
	assert.Equal(t, []uint64{1, 2}, r.FailingSeeds)
}

// TestWatchdogTakesAPauseOfTheProcessForNoHang: a seed that decided
// nothing while the whole process was stopped (a tick late by a minute,
// where they come every period) is no hang, and one that then goes on
// deciding nothing for the timeout is.
func TestWatchdogTakesAPauseOfTheProcessForNoHang(t *testing.T) {
	const period, timeout = 10 * time.Millisecond, 40 * time.Millisecond
	w := &watchdog{timeout: timeout, slots: make([]watchSlot, 1), hung: make(chan *sim.HangError, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	ticks := make(chan time.Time)
	go w.loop(period, ticks)
	defer w.stop()
	w.own(0)
	w.begin(0, 7)
	t0 := time.Now()
	// A tick is judged before the next is taken: each send returns once
	// the one before it has been.
	ticks <- t0 // the seed is first seen running
	ticks <- t0.Add(period)
	ticks <- t0.Add(period + time.Minute) // the process was stopped a minute
	ticks <- t0.Add(2*period + time.Minute)
	ticks <- t0.Add(3*period + time.Minute)
	select {
	case h := <-w.hung:
		t.Fatalf("a pause of the process was named a hang: %v", h)
	default:
	}
	for d := 4 * period; d <= 6*period; d += period {
		ticks <- t0.Add(d + time.Minute)
	}
	select {
	case h := <-w.hung:
		assert.Equal(t, uint64(7), h.Seed)
		assert.GreaterOrEqual(t, h.Idle, timeout, "idle from the end of the pause")
		assert.Less(t, h.Idle, time.Minute, "the pause is not counted")
	case <-time.After(10 * time.Second):
		t.Fatal("a seed that decided nothing for the timeout after the pause was not named a hang")
	}
}

// TestTheRunsThatMakeASpecTakeTheCommandsSeedTimeout: pct:D's estimate of
// the runs' length runs seeds 1 to 16 before the command runs any, and
// test-hang's seed 5 spins there; it is named a hang after the command's
// -seed-timeout, not the default's.
func TestTheRunsThatMakeASpecTakeTheCommandsSeedTimeout(t *testing.T) {
	armHang(t)
	timeout := 100 * time.Millisecond
	_, err := (&specFlags{scenario: "test-hang", strategy: "pct:2", timeout: &timeout}).spec()
	require.ErrorContains(t, err, "pct: estimating the runs' length, seed 5 hung under random")
	var h *sim.HangError
	require.ErrorAs(t, err, &h)
	assert.GreaterOrEqual(t, h.Idle, timeout)
	assert.Less(t, h.Idle, seedTimeoutDefault, "the estimate waited out the default, not -seed-timeout")
}
