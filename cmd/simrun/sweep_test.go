package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// sweepJSON runs sweep -json with args and returns its exit code and result.
func sweepJSON(t *testing.T, args ...string) (int, sweepResult) {
	t.Helper()
	code, out, errOut := simrun(t, append([]string{"sweep", "-json", "-out", t.TempDir()}, args...)...)
	var r sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), "exit %d: %s", code, errOut)
	return code, r
}

// requirePrefix checks that a sweep that stopped early ran the first seeds
// of what it was asked, and says so.
func requirePrefix(t *testing.T, r sweepResult, asked string) {
	t.Helper()
	want, err := parseSeeds(asked)
	require.NoError(t, err)
	require.Positive(t, r.Seeds)
	require.Less(t, r.Seeds, want.n, "stopped early")
	assert.Equal(t, asked, r.Requested)
	assert.Equal(t, want.slice(0, r.Seeds).String(), r.SeedRange, "the seeds that ran are the first ones asked for")
}

func TestSweepStopAfterRunsAPrefixThatReplaysTheSame(t *testing.T) {
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-100000", "-stop-after", "3", "-j", "2")
	require.Equal(t, 1, code)
	requirePrefix(t, r, "1-100000")
	assert.Contains(t, r.Stopped, "3 failure(s) seen")
	assert.GreaterOrEqual(t, r.Failures, uint64(3))
	for _, seed := range r.FailingSeeds {
		assert.LessOrEqual(t, seed, r.Seeds, "failing seeds lie in the prefix")
	}

	// The prefix, swept whole, is the same result: what stopped the sweep
	// left nothing out of the seeds it reports.
	code, whole := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", r.SeedRange, "-j", "1")
	require.Equal(t, 1, code)
	assert.Empty(t, whole.Stopped)
	assert.Empty(t, whole.Requested)
	assert.Equal(t, r.Seeds, whole.Seeds)
	assert.Equal(t, r.Failures, whole.Failures)
	assert.Equal(t, r.FailingSeeds, whole.FailingSeeds)
	assert.Equal(t, r.Steps, whole.Steps)
}

func TestSweepStopAfterOverAListOfSeeds(t *testing.T) {
	asked := "5,10-20,100-300,1000-2000"
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", asked, "-stop-after", "1", "-j", "2")
	require.Equal(t, 1, code)
	requirePrefix(t, r, asked)
	require.NotNil(t, r.FirstFailure)
	assert.Equal(t, uint64(5), *r.FirstFailure, "legacy seed 5 fails")
}

func TestSweepForStopsAtTheBudget(t *testing.T) {
	const asked = "1-100000000" // more than any machine runs in a test
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-seeds", asked, "-for", "1ms", "-j", "2")
	require.Equal(t, 0, code)
	requirePrefix(t, r, asked)
	assert.Equal(t, "the 1ms budget (-for) ran out", r.Stopped)
	assert.Zero(t, r.Failures)
	assert.Positive(t, r.SeedsPerSec)

	_, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", asked, "-for", "1ms", "-quiet", "-out", t.TempDir())
	assert.Contains(t, out, " of "+asked+"\n")
	assert.Contains(t, out, "stopped early: the 1ms budget (-for) ran out; the result covers only the seeds that ran")
}

func TestSweepStopAfterOvershootsByAtMostASeedAWorker(t *testing.T) {
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-1000", "-stop-after", "1", "-j", "1")
	require.Equal(t, 1, code)
	assert.Equal(t, "1", r.SeedRange, "legacy seed 1 fails, and one worker takes no other")
	// With two workers the other may finish a seed or a few (how many
	// depends on timing) before it sees the stop; the result is still
	// the first seeds asked for.
	code, r = sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-1000", "-stop-after", "1", "-j", "2")
	require.Equal(t, 1, code)
	requirePrefix(t, r, "1-1000")
	require.NotNil(t, r.FirstFailure)
	assert.Equal(t, uint64(1), *r.FirstFailure)
}

func TestSweepThatRanEverySeedDidNotStopEarly(t *testing.T) {
	// Seed 1 fails and stops the sweep, but it was the only seed.
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1", "-stop-after", "1", "-j", "1")
	require.Equal(t, 1, code)
	assert.Equal(t, uint64(1), r.Seeds)
	assert.Equal(t, "1", r.SeedRange)
	assert.Empty(t, r.Stopped)
	assert.Empty(t, r.Requested)
}

func TestSweepFlagsRefuseBadValues(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-for -1s", "-for must be ≥ 0 (0 means no budget), got -1s"},
		{"-for soon", `invalid value "soon" for flag -for`},
		{"-j 100000", "-j must be at most 1024 (each run takes a core; more workers than cores add nothing), got 100000"},
		{"-j 0", "-j must be ≥ 1, got 0"},
		{"-stop-after -1", `invalid value "-1" for flag -stop-after: want a whole number ≥ 0`},
		{"-stop-after 1.5", `invalid value "1.5" for flag -stop-after: want a whole number ≥ 0`},
		{"-stop-after 18446744073709551616", `invalid value "18446744073709551616" for flag -stop-after: want a whole number from 0 to 18446744073709551615`},
	} {
		var flag, value string
		_, err := fmt.Sscan(c.args, &flag, &value)
		require.NoError(t, err)
		code, _, errOut := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-10", flag, value)
		assert.Equal(t, 2, code, c.args)
		assert.Contains(t, errOut, c.want, c.args)
	}
}

func TestMergeSaysWhichShardStoppedEarly(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, args := range [][]string{
		{"-shard", "1/2", "-stop-after", "1"},
		{"-shard", "2/2"},
	} {
		_, out, errOut := simrun(t, append([]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-200", "-j", "1", "-json", "-out", dir}, args...)...)
		file := filepath.Join(dir, fmt.Sprintf("shard%d.json", i+1))
		require.NoError(t, os.WriteFile(file, []byte(out), 0o644), errOut)
		files = append(files, file)
	}
	code, out, errOut := simrun(t, append([]string{"merge", "-json"}, files...)...)
	require.Equal(t, 1, code, errOut)
	var m mergeResult
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, "1-200", m.Requested)
	assert.Equal(t, "shard 1/2: 1 failure(s) seen (-stop-after)", m.Stopped)
	shard1, err := readSweepJSON(files[0])
	require.NoError(t, err)
	require.Len(t, shard1, 1)
	first := shard1[0]
	require.Less(t, first.Seeds, uint64(100))
	assert.Equal(t, seedSet{spans: []span{{1, first.Seeds}, {101, 200}}}.String(), m.SeedRange, "the first seeds of shard 1, all of shard 2")
	assert.Equal(t, first.Seeds+100, m.Seeds)
}

// TestSweepJSONUpperBoundAgreesWithTheText: with no failure the text gives
// the rule of three, and so does upper_bound; with failures it is the
// Wilson interval's upper end.
func TestSweepJSONUpperBoundAgreesWithTheText(t *testing.T) {
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-seeds", "1-60")
	require.Equal(t, 0, code)
	assert.Equal(t, 0.05, r.UpperBound, "3/60")
	_, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-60", "-out", t.TempDir())
	assert.Contains(t, out, "0/60 = 0% [≤ 5.0%, rule of three]")

	code, r = sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-60")
	require.Equal(t, 1, code)
	assert.Equal(t, r.CI95[1], r.UpperBound)
}

// TestSweepJUnitSaysHowManyFailingSeedsItLeftOut: past 1,000 failing
// seeds the report has no case per seed, and one case says so.
func TestSweepJUnitSaysHowManyFailingSeedsItLeftOut(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "sweep.xml")
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-1400", "-junit", junit)
	require.Equal(t, 1, code)
	require.Greater(t, r.Failures, uint64(failingSeedsMax))
	doc := readJUnit(t, junit)
	require.Len(t, doc.Suites, 1)
	cases := doc.Suites[0].Cases
	require.Equal(t, 1+failingSeedsMax+1, len(cases), "the summary, a case per listed seed, and the rest")
	left := r.Failures - failingSeedsMax
	last := cases[len(cases)-1]
	assert.Equal(t, fmt.Sprintf("%d more failing seeds", left), last.Name)
	require.NotNil(t, last.Failure)
	assert.Contains(t, last.Failure.Message, fmt.Sprintf("%d more seeds failed, from seed ", left))
	assert.Contains(t, last.Failure.Message, "this report lists the first 1000 failing seeds, a case each")
	assert.Equal(t, 1+failingSeedsMax+1, doc.Suites[0].Failures)
}

// TestAStarvePrefixThatMatchesNoTaskIsReported: a misspelt prefix starves
// nothing, and its seeds would pass as seeds that found nothing; run and
// sweep say so on standard error, once per distinct warning.
func TestAStarvePrefixThatMatchesNoTaskIsReported(t *testing.T) {
	code, _, stderr := simrun(t, "run", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-strategy", "starve:output-handlr", "-out", t.TempDir())
	require.Equal(t, 0, code)
	assert.Contains(t, stderr, `simrun run: warning: sim: strategy starve:output-handlr starved nothing: no task of the run has a name starting with "output-handlr"`)

	code, stdout, stderr := simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-40", "-quiet", "-strategy", "starve:output-handlr", "-out", t.TempDir())
	require.Equal(t, 0, code, stdout)
	assert.Contains(t, stderr, "simrun sweep: warning, in 40 of 40 seeds (first seed 1): sim: strategy starve:output-handlr starved nothing")
	assert.Equal(t, 1, strings.Count(stderr, "warning"), "one line per distinct warning")

	_, _, stderr = simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-40", "-quiet", "-out", t.TempDir())
	assert.NotContains(t, stderr, "warning", "the scenario's own starve prefix matches")
}

// TestWarningsThatDifferInTheirNumbersAreOneKind: with steps of no time,
// every abort-reuse seed warns that some of its starvation windows ended
// at their cap, each with its own counts; the sweep tells that once, in
// the first seed's words, with the seeds that gave it.
func TestWarningsThatDifferInTheirNumbersAreOneKind(t *testing.T) {
	code, stdout, stderr := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-6", "-quiet", "-config", "step-time=none", "-out", t.TempDir())
	require.Equal(t, 0, code, stdout)
	assert.Equal(t, 1, strings.Count(stderr, "warning"), "one line for the kind: %s", stderr)
	assert.Regexp(t, `simrun sweep: warning, in 6 of 6 seeds \(first seed 1\): sim: strategy starve:output-handler: \d+ of its \d+ starvation windows ended at their cap`, stderr)
	_, _, one := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-config", "step-time=none", "-out", t.TempDir())
	first := strings.TrimPrefix(strings.TrimSpace(one), "simrun run: warning: ")
	require.NotEqual(t, strings.TrimSpace(one), first, "seed 1 alone warns: %s", one)
	assert.Contains(t, stderr, first, "in seed 1's words")
}

// TestPrintedCommandsCarryGOFailpoints: GO_FAILPOINTS adds its failpoints
// to every run, so the commands printed to show a failing seed again carry
// it; without it they would show another run.
func TestPrintedCommandsCarryGOFailpoints(t *testing.T) {
	env := `github.com/llmdst/llmdst/core/stall-mid-step=return("1ms")`
	t.Setenv("GO_FAILPOINTS", env)
	prefix := "GO_FAILPOINTS='" + env + "' simrun "
	code, stdout, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-20", "-quiet", "-out", t.TempDir())
	require.Equal(t, 1, code, stdout)
	assert.Contains(t, stdout, "replay: "+prefix+"replay ")
	assert.Contains(t, stdout, "or run: "+prefix+"run -scenario abort-reuse ")

	replay := between(stdout, "replay: GO_FAILPOINTS='"+env+"' simrun replay ", "\n")
	require.NotEmpty(t, replay)
	code, stdout, _ = simrun(t, "replay", replay)
	assert.Equal(t, 1, code, "replayed under the same GO_FAILPOINTS, the run fails as recorded")
	assert.Contains(t, stdout, "(the same as recorded)")

	t.Setenv("GO_FAILPOINTS", "")
	code, _, stderr := simrun(t, "replay", replay)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "the schedule was recorded with GO_FAILPOINTS '"+env+"', not unset: set it as it was")
	_, stdout, _ = simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-20", "-quiet", "-out", t.TempDir())
	assert.NotContains(t, stdout, "GO_FAILPOINTS")
}

// sweepRunning is sent to by runs of test-running, when it has room. A
// test drains it before it starts its sweep, so that what it then receives
// comes from that sweep's runs, whichever tests ran before (-count,
// -shuffle): a signal sent before the sweep's handler is in place would
// kill the test process.
var sweepRunning = make(chan struct{}, 1)

// legacyRunning is sent to by runs of test-running on the legacy engine,
// when it has room.
var legacyRunning = make(chan struct{}, 1)

func init() {
	scenario.Register(&scenario.Scenario{Name: "test-running", Summary: "a scenario whose runs say that a sweep is under way", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			select {
			case sweepRunning <- struct{}{}:
			default:
			}
			if x.Opts.Legacy { // slow, so that a sweep of it is still running
				select {
				case legacyRunning <- struct{}{}:
				default:
				}
				time.Sleep(time.Millisecond)
			}
			x.RT.Yield("main")
			return nil
		}})
	scenario.Register(&scenario.Scenario{Name: "test-running-failing", Summary: "a scenario whose runs fail and say that a sweep is under way", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			select {
			case sweepRunning <- struct{}{}:
			default:
			}
			x.RT.Yield("main")
			return errors.New("every run of test-running-failing fails")
		}})
}

// interrupt runs simrun with args on a goroutine, waits until running
// says one of its runs began — its signal handler is then in place, where
// a SIGINT before it would kill this process — sends this process SIGINT,
// and returns what simrun returned. running is drained first: what an
// earlier test's runs sent does not count.
func interrupt(t *testing.T, running chan struct{}, args ...string) (code int, out, errOut string) {
	select {
	case <-running:
	default:
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		code, out, errOut = simrun(t, args...)
	}()
	<-running
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	<-done
	return code, out, errOut
}

// firstSeeds writes the first n seeds of the range asked for as a report
// does: "1-7", or "1" when one ran.
func firstSeeds(t *testing.T, asked string, n uint64) string {
	t.Helper()
	seeds, err := parseSeeds(asked)
	require.NoError(t, err)
	return seeds.slice(0, n).String()
}

// TestSweepInterruptReportsTheSeedsThatRan sends this process SIGINT while
// a long sweep runs: it stops taking seeds and reports those that ran.
func TestSweepInterruptReportsTheSeedsThatRan(t *testing.T) {
	code, out, errOut := interrupt(t, sweepRunning, "sweep", "-scenario", "test-running", "-seeds", "1-1000000000", "-for", "2m", "-quiet", "-json",
		"-out", t.TempDir(), "-check-determinism", "0")
	assert.Equal(t, 2, code, "an interrupted sweep that found nothing has not passed: %s", errOut)
	assert.Contains(t, errOut, "simrun sweep: interrupted after ")
	assert.Contains(t, errOut, "of 1000000000 seeds, before any failure")
	var r sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), "the result is printed: %s", out)
	assert.Equal(t, "interrupted", r.Stopped)
	assert.Equal(t, "1-1000000000", r.Requested)
	assert.Positive(t, r.Seeds)
	assert.Equal(t, firstSeeds(t, r.Requested, r.Seeds), r.SeedRange, "the seeds that ran are the first ones asked for")
}

// TestAnInterruptedSweepThatFoundFailuresReportsThem: what an interrupted
// sweep found is reported, and its exit code is that of a failure.
func TestAnInterruptedSweepThatFoundFailuresReportsThem(t *testing.T) {
	code, out, errOut := interrupt(t, sweepRunning, "sweep", "-scenario", "test-running-failing", "-seeds", "1-1000000000", "-for", "2m", "-quiet", "-json",
		"-out", t.TempDir(), "-check-determinism", "0")
	assert.Equal(t, 1, code, "failures were found: %s", errOut)
	var r sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &r), "the result is printed: %s", out)
	assert.Equal(t, "interrupted", r.Stopped)
	assert.Positive(t, r.Failures)
	assert.Equal(t, r.Seeds, r.Failures, "every run of it fails")
	require.NotNil(t, r.FirstFailure)
	assert.Equal(t, uint64(1), *r.FirstFailure)
}

// TestCompareInterruptReportsTheSweepsAsFarAsTheyWent interrupts compare
// while A runs and while B runs: the variant running stops, and what each
// ran is reported, with no comparison.
func TestCompareInterruptReportsTheSweepsAsFarAsTheyWent(t *testing.T) {
	for _, c := range []struct {
		name, a, b, stopped string
		bRan                bool
	}{
		{"during A", "-legacy", "", "variant A (-legacy) interrupted after ", false},
		{"during B", "", "-legacy", "variant B (-legacy) interrupted after ", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			junit := filepath.Join(t.TempDir(), "compare.xml")
			// Interrupted once the legacy variant's sweep is under way.
			code, out, errOut := interrupt(t, legacyRunning, "compare", "-scenario", "test-running", "-seeds", "1-20000", "-a", c.a, "-b", c.b,
				"-quiet", "-json", "-junit", junit, "-out", t.TempDir(), "-check-determinism", "0")
			assert.Equal(t, 2, code, "an interrupted comparison that found nothing has not passed: %s", errOut)
			assert.Contains(t, errOut, "simrun compare: "+c.stopped)
			assert.Contains(t, errOut, "of 20000 seeds; no comparison is made, before any failure")
			var j compareHangJSON
			require.NoError(t, json.Unmarshal([]byte(out), &j), "the result is printed: %s", out)
			assert.Equal(t, "no comparison: interrupted", j.Verdict)
			assert.Contains(t, j.Stopped, c.stopped)
			assert.Empty(t, j.Hung)
			assert.Equal(t, "1-20000", j.Requested)
			require.NotNil(t, j.A)
			last := j.A
			if c.bRan {
				require.NotNil(t, j.B)
				assert.Equal(t, uint64(20000), j.A.Seeds, "A ran every seed before B began")
				last = j.B
			} else {
				assert.Nil(t, j.B, "B does not run once A was interrupted")
			}
			assert.Equal(t, "interrupted", last.Stopped)
			assert.Less(t, last.Seeds, uint64(20000))
			assert.Equal(t, firstSeeds(t, j.Requested, last.Seeds), j.SeedRange, "the seeds the interrupted variant ran are the first ones")
			x, err := os.ReadFile(junit)
			require.NoError(t, err)
			assert.Contains(t, string(x), c.stopped, "the JUnit report fails the interrupted variant")
		})
	}
}

// TestASweepOfADivergedReplaySaysSo: a sweep that replays a schedule the
// run leaves reports the divergence, not what the cut-short run then broke.
func TestASweepOfADivergedReplaySaysSo(t *testing.T) {
	dir := t.TempDir()
	sched := filepath.Join(dir, "seed1.schedule")
	code, out, errOut := simrun(t, "run", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-out", dir, "-schedule-out", sched)
	require.Equal(t, 1, code, "%s%s", out, errOut)
	b, err := os.ReadFile(sched)
	require.NoError(t, err)
	// The third decision runs the output handler in place of the core,
	// which the replay cannot follow for long.
	text := strings.Replace(string(b), "\n0*2 1 0*5 ", "\n0*2 2 0*5 ", 1)
	require.NotEqual(t, string(b), text, "the schedule's decisions are as expected: %s", b)
	require.NoError(t, os.WriteFile(sched, []byte(text), 0o644))

	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1", "-strategy", "replay:"+sched)
	require.Equal(t, 1, code)
	require.Len(t, r.Modes, 1)
	assert.Equal(t, "replay diverged", r.Modes[0].Signature)
	assert.True(t, strings.HasPrefix(r.Error, "sim: replay diverged at step "), "the divergence comes first: %s", r.Error)
	assert.NotContains(t, r.Error, "never ended", "the requests the cut-short run left are not its failures")
}

func TestASweepStartsNoMoreWorkersThanSeeds(t *testing.T) {
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-seeds", "1-3", "-j", "8")
	require.Equal(t, 0, code)
	assert.Equal(t, 3, r.Workers)
	assert.Equal(t, uint64(3), r.Seeds)
}

// TestSignatureMasksRequestNamesAndNumbers: one check failing for other
// requests and numbers is one failure mode; another check is another.
func TestSignatureMasksRequestNamesAndNumbers(t *testing.T) {
	died := func(id string, inc int) error {
		return fmt.Errorf("the engine died, and no failpoint kills the model: engine core: core: request %q (incarnation %d) got an output of a step that did not schedule it: no output placeholder left", id, inc)
	}
	want := `the engine died, and no failpoint kills the model: engine core: core: request "ID" (incarnation N) got an output of a step that did not schedule it: no output placeholder left`
	assert.Equal(t, want, signature(died("b", 6)))
	assert.Equal(t, want, signature(died("1_a", 12)))
	assert.NotEqual(t, want, signature(errors.New(`core: model core.ToyModel returned token -1 at output position 3 of request "b"; a token id must be ≥ 0`)))
}

// TestSignatureDropsTheCoreRank: a check failing in one data-parallel core
// fails as it does in another, and as on one core; the rank of a name that
// is not the engine's own stays.
func TestSignatureDropsTheCoreRank(t *testing.T) {
	violation := func(task, point string) error {
		return &props.Violation{Property: props.ReuseFinishesNormally, Detail: "the core aborted \"b\"", Task: task, Point: point}
	}
	one := signature(violation("engine-core", "core-aborts.lock"))
	assert.Equal(t, "reused-id-finishes-normally (in engine-core after core-aborts.lock)", one)
	assert.Equal(t, one, signature(violation("engine-core-dp1", "core-aborts-dp1.lock")))
	assert.Equal(t, one, signature(violation("engine-core-dp12", "core-aborts-dp12.lock")))
	assert.NotEqual(t, one, signature(violation("engine-core-dp1", "core-input-dp1.lock")))
	assert.Equal(t, "deadlock: engine-core@core-input.recv client-dp1@x",
		signature(&sim.DeadlockError{Blocked: []sim.BlockedTask{{Name: "engine-core-dp0", Point: "core-input-dp0.recv"}, {Name: "client-dp1", Point: "x"}}}))
}

// TestASweepOnSeveralCoresCountsAModeOnce: a sweep whose seeds fail the
// same check on core 0 and on core 1 counts them as one failure mode, and
// the seeds' errors still say which core.
func TestASweepOnSeveralCoresCountsAModeOnce(t *testing.T) {
	args := []string{"-scenario", "kv-offload", "-legacy", "-strategy", "chaos", "-config", "data-parallel-size=2"}
	code, r := sweepJSON(t, append(args, "-seeds", "1-300")...)
	require.Equal(t, 1, code)
	const sig = "reused-id-finishes-normally (in engine-core after core-aborts.lock)"
	count := map[string]uint64{}
	for _, m := range r.Modes {
		assert.NotContains(t, m.Signature, "-dp")
		count[m.Signature] = m.Count
	}
	cores := map[string]uint64{}
	for _, seed := range r.FailingSeeds {
		code, out, errOut := simrun(t, append([]string{"run", "-json", "-out", t.TempDir(), "-seed", fmt.Sprint(seed)}, args...)...)
		require.Equal(t, 1, code, errOut)
		var j runJSON
		require.NoError(t, json.Unmarshal([]byte(out), &j))
		if j.Signature == sig {
			cores[regexp.MustCompile(`engine-core-dp[0-9]+`).FindString(j.Error)]++
		}
	}
	assert.Positive(t, cores["engine-core-dp0"], "%v", cores)
	assert.Positive(t, cores["engine-core-dp1"], "%v", cores)
	assert.Equal(t, cores["engine-core-dp0"]+cores["engine-core-dp1"], count[sig], "%v", cores)
}

// TestASweepWritesItsProfiles: -cpuprofile and -memprofile write the
// sweep's CPU profile and, as it ends, its heap profile, each in pprof's
// gzipped form; a file that cannot be made is bad input.
func TestASweepWritesItsProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	code, stdout, stderr := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-50", "-quiet", "-out", dir, "-cpuprofile", cpu, "-memprofile", mem)
	require.Equal(t, 0, code, stdout+stderr)
	for _, f := range []string{cpu, mem} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Greater(t, len(data), 2, f)
		assert.Equal(t, []byte{0x1f, 0x8b}, data[:2], "%s: a gzipped profile", f)
	}
	code, _, stderr = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1", "-quiet", "-out", dir, "-memprofile", filepath.Join(dir, "none", "mem.prof"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "-memprofile: open ")
}
