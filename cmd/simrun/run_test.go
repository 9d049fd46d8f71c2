package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
)

// failAfter is a write that gives up after n bytes, as one does when the
// disk fills or the file size limit is reached.
func failAfter(n int) func(w io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, strings.Repeat("x", n)); err != nil {
			return err
		}
		return errors.New("file too large")
	}
}

func TestAFailedWriteLeavesNoPartialFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pf")
	file := filepath.Join(dir, "a.json")
	err := writeFile(file, failAfter(100))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "file too large")
	assert.NoFileExists(t, file, "a failed write leaves no truncated file")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nor a temporary file")

	// A failed write does not clobber the file an earlier run wrote.
	require.NoError(t, writeFile(file, func(w io.Writer) error {
		_, err := io.WriteString(w, "{}")
		return err
	}))
	require.Error(t, writeFile(file, failAfter(100)))
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "{}", string(data))
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1)
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
}

func TestAWriteGoesThroughALinkAndIntoADeviceOrPipeAsItIs(t *testing.T) {
	dir := t.TempDir()
	say := func(text string) func(w io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, text); return err }
	}

	// A link is kept, and the file it names gets what was written.
	target := filepath.Join(dir, "target.txt")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	link := filepath.Join(dir, "link.txt")
	require.NoError(t, os.Symlink("target.txt", link))
	require.NoError(t, writeFile(link, say("new")))
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link is still a link")
	data, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "new", string(data))

	// A link that names nothing yet makes what it names.
	dangling := filepath.Join(dir, "dangling.txt")
	require.NoError(t, os.Symlink("made.txt", dangling))
	require.NoError(t, writeFile(dangling, say("made")))
	data, err = os.ReadFile(filepath.Join(dir, "made.txt"))
	require.NoError(t, err)
	assert.Equal(t, "made", string(data))

	// A named pipe stays a pipe, and its reader gets the bytes.
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	read := make(chan string)
	go func() {
		data, _ := os.ReadFile(fifo)
		read <- string(data)
	}()
	require.NoError(t, writeFile(fifo, say("piped")))
	assert.Equal(t, "piped", <-read)
	fi, err = os.Lstat(fifo)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeNamedPipe, "the pipe is not replaced by a file")

	// A device is written, not replaced.
	require.NoError(t, writeFile(os.DevNull, say("gone")))
	fi, err = os.Lstat(os.DevNull)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeDevice, "%s is still a device", os.DevNull)

	// A directory is refused, and left as it was.
	err = writeFile(dir, say("x"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it is a directory")
	assert.DirExists(t, dir)
}

// TestAWriteToTheStandardOutputGoesThroughItsStream: a file flag naming
// the standard output by any name (/dev/stdout, or the file a shell
// redirected it to with >>) is written through the stream, after what it
// holds, where replacing the file would lose the earlier contents and the
// run's own output.
func TestAWriteToTheStandardOutputGoesThroughItsStream(t *testing.T) {
	file := filepath.Join(t.TempDir(), "log.txt")
	require.NoError(t, os.WriteFile(file, []byte("earlier\n"), 0o644))
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer f.Close()
	before, err := os.Stat(file)
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = f
	defer func() { os.Stdout = stdout }()
	_, err = io.WriteString(os.Stdout, "the run's line\n")
	require.NoError(t, err)
	for _, name := range []string{file, "/proc/self/fd/" + fmt.Sprint(f.Fd())} {
		require.NoError(t, writeFile(name, func(w io.Writer) error {
			_, err := io.WriteString(w, "written as "+filepath.Base(name)+"\n")
			return err
		}))
	}
	os.Stdout = stdout
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, "earlier\nthe run's line\nwritten as log.txt\nwritten as "+fmt.Sprint(f.Fd())+"\n", string(data))
	after, err := os.Stat(file)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the file was not replaced")
}

func TestAFileFlagThatNamesADirectoryOrTheStandardOutputIsRefusedBeforeAnythingRuns(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		flag string
		want string
	}{
		{[]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-50", "-quiet", "-out", dir, "-junit", dir}, "-junit", "it is a directory"},
		{[]string{"run", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-out", dir, "-html", dir}, "-html", "it is a directory"},
		{[]string{"run", "-scenario", "abort-reuse", "-seed", "1", "-trace", "-"}, "-trace", "not the standard output"},
		{[]string{"compare", "-scenario", "abort-reuse", "-seeds", "1-5", "-a", "-legacy", "-b", "", "-quiet", "-out", dir, "-junit", "-"}, "-junit", "not the standard output"},
		{[]string{"shrink", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-quiet", "-out", dir, "-trace", dir}, "-trace", "it is a directory"},
		{[]string{"stress", "-p", "2", "-rounds", "1", "-quiet", "-junit", dir, "--", "false"}, "-junit", "it is a directory"},
	} {
		code, out, errOut := simrun(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		assert.Empty(t, out, "%v: nothing ran", c.args)
		assert.Contains(t, errOut, "simrun "+c.args[0]+": "+c.flag+" ", "%v: the message names the flag", c.args)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing was written")

	// -schedule-out - still means: write none.
	code, out, errOut := simrun(t, "run", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-out", dir, "-schedule-out", "-")
	assert.Equal(t, 1, code, "%s%s", out, errOut)
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "-schedule-out - writes no schedule")
}

func TestReplayOffersOnlyTheFlagsItHonours(t *testing.T) {
	code, _, errOut := simrun(t, "replay", "-h")
	require.Equal(t, 0, code)
	for _, f := range []string{"-trace", "-story", "-json", "-html"} {
		assert.Regexp(t, `(?m)^  `+f+`\b`, errOut, "replay -h documents %s", f)
	}
	for _, f := range []string{"-out", "-schedule-out"} {
		assert.NotRegexp(t, `(?m)^  `+f+`\b`, errOut, "replay never writes a schedule, so -h does not offer %s", f)
	}

	dir := t.TempDir()
	code, _, _ = simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	for _, f := range []string{"-out", "-schedule-out"} {
		code, _, errOut = simrun(t, "replay", f, filepath.Join(dir, "x"), file)
		assert.Equal(t, 2, code, f)
		assert.Contains(t, errOut, "flag provided but not defined: "+f)
	}
}

// recordSeed1 records the legacy engine's failure of abort-reuse seed 1 in
// dir and returns its schedule file and its contents.
func recordSeed1(t *testing.T, dir string) (string, string) {
	t.Helper()
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir)
	require.Equal(t, 1, code, out)
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	return file, string(data)
}

func TestRunReplayRefusesAScheduleRecordedWithOtherFlags(t *testing.T) {
	dir := t.TempDir()
	file, _ := recordSeed1(t, dir)
	replay := "replay:" + file
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-scenario", "abort-reuse-wait-idle", "-legacy", "-seed", "1"}, "recorded with scenario abort-reuse, not abort-reuse-wait-idle"},
		{[]string{"-scenario", "abort-reuse", "-seed", "1"}, "recorded with the legacy engine, not the fixed one"},
		{[]string{"-scenario", "abort-reuse", "-legacy", "-seed", "2"}, "recorded with seed 1, not 2: give -seed 1"},
		{[]string{"-scenario", "abort-reuse", "-legacy", "-seed", "1", "-failpoint", "core/stall-mid-step=return(400)"},
			"recorded with no failpoints, not -failpoint core/stall-mid-step=return(400)"},
	}
	for _, c := range cases {
		args := append([]string{"run", "-out", dir, "-strategy", replay}, c.args...)
		code, out, errOut := simrun(t, args...)
		assert.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
		assert.Contains(t, errOut, "or run simrun replay "+file, "%v", c.args)
		assert.Empty(t, out, "%v: no FAIL for a replay that could not match", c.args)
	}
}

func TestRunReplayOfAScheduleThatNoLongerMatches(t *testing.T) {
	dir := t.TempDir()
	file, data := recordSeed1(t, dir)
	// Pretend the code changed: the schedule, flags and all, now belongs to
	// the other scenario.
	stale := filepath.Join(dir, "stale.schedule")
	require.NoError(t, os.WriteFile(stale, []byte(strings.Replace(data, `meta "scenario" "abort-reuse"`, `meta "scenario" "abort-reuse-wait-idle"`, 1)), 0o644))
	code, out, errOut := simrun(t, "run", "-out", dir, "-scenario", "abort-reuse-wait-idle", "-legacy", "-seed", "1", "-strategy", "replay:"+stale)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, errOut, stale+" no longer matches the code")
	assert.NotContains(t, out, "FAIL")

	// The schedule that does match replays to the same failure, and is not
	// rewritten by the run that replays it.
	code, out, _ = simrun(t, "run", "-out", dir, "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-strategy", "replay:"+file)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "property no-cross-incarnation-delivery violated")
	again, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, data, string(again), "the replayed file is left as it was")
}

func TestTheCommandPrintedForAReplayRunsIt(t *testing.T) {
	dir := t.TempDir()
	file, _ := recordSeed1(t, dir)
	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1", "-quiet",
		"-out", filepath.Join(dir, "sweep"), "-strategy", "replay:"+file)
	require.Equal(t, 1, code, out)
	want := "simrun run -scenario abort-reuse -seed 1 -strategy replay:" + file + " -legacy"
	require.Contains(t, out, "or run: "+want)

	argv, err := splitCommand(want)
	require.NoError(t, err)
	code, out, errOut := simrun(t, append(argv[1:], "-out", filepath.Join(dir, "again"))...)
	assert.Equal(t, 1, code, "the printed command replays the failure: %s%s", out, errOut)
	assert.Contains(t, out, "strategy replay:"+file)
	assert.Contains(t, out, "property no-cross-incarnation-delivery violated")
}

// TestAReplayKeepsTheFileItReplays: sweep and compare, replaying a
// schedule into the directory that holds it, write their failing seed's
// schedule where the file is: they leave it as it was, its meta saying how
// the run was first found, not that it was replayed from itself.
func TestAReplayKeepsTheFileItReplays(t *testing.T) {
	dir := t.TempDir()
	file, data := recordSeed1(t, dir)
	replay := "replay:" + file
	// compare writes variant A's schedules to OUT/a: the file is put there.
	out := t.TempDir()
	inA := filepath.Join(out, "a", filepath.Base(file))
	require.NoError(t, os.Mkdir(filepath.Dir(inA), 0o755))
	require.NoError(t, os.WriteFile(inA, []byte(data), 0o644))
	variant := "-legacy -strategy replay:" + inA
	for _, c := range []struct {
		args []string
		file string
	}{
		{[]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1", "-quiet", "-strategy", replay, "-out", dir}, file},
		{[]string{"run", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-strategy", replay, "-out", dir}, file},
		{[]string{"compare", "-scenario", "abort-reuse", "-seeds", "1", "-a", variant, "-b", variant, "-quiet", "-out", out}, inA},
	} {
		code, stdout, errOut := simrun(t, c.args...)
		require.Equal(t, 1, code, "%v: %s%s", c.args, stdout, errOut)
		assert.Contains(t, stdout, c.file, "%v: the replay offered is the file", c.args)
		got, err := os.ReadFile(c.file)
		require.NoError(t, err)
		assert.Equal(t, data, string(got), "%v: the replayed file is as it was", c.args)
	}
}

func TestAReplayRunsOnlyOnTheSeedItWasRecordedWith(t *testing.T) {
	dir := t.TempDir()
	file, _ := recordSeed1(t, dir)
	replay := "replay:" + file
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"shrink", "-scenario", "abort-reuse", "-legacy", "-seed", "2", "-quiet"}, "recorded with seed 1, not 2: give -seed 1"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-3", "-quiet"}, "recorded with seed 1, not -seeds 1-3: give -seeds 1"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "2", "-quiet"}, "recorded with seed 1, not -seeds 2: give -seeds 1"},
		{[]string{"compare", "-scenario", "abort-reuse", "-seeds", "1-3", "-a", "-legacy -strategy " + replay, "-b", "", "-quiet"},
			"variant A: -strategy " + replay + ": the schedule was recorded with seed 1, not -seeds 1-3"},
	} {
		args := append(c.args, "-out", filepath.Join(dir, "out"), "-strategy", replay)
		if c.args[0] == "compare" {
			args = append(c.args, "-out", filepath.Join(dir, "out"))
		}
		code, out, errOut := simrun(t, args...)
		assert.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
		assert.Contains(t, errOut, "or run simrun replay "+file, "%v", c.args)
		assert.Empty(t, out, "%v: nothing ran", c.args)
	}

	// On its own seed a replay shrinks as any failing run does.
	code, out, errOut := simrun(t, "shrink", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-quiet", "-strategy", replay,
		"-out", filepath.Join(dir, "out"), "-tries", "50")
	assert.Equal(t, 1, code, "%s%s", out, errOut)
	assert.Contains(t, out, "FAIL, no-cross-incarnation-delivery")
}

func TestAnOutputDirectoryThatCannotBeMadeIsRefusedBeforeAnythingRuns(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	bad := filepath.Join(file, "out") // under a regular file: no directory can be made there
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"run", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-out", bad}, "-out"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-50", "-quiet", "-out", bad}, "-out"},
		{[]string{"sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-50", "-quiet", "-json", "-out", dir, "-junit", filepath.Join(bad, "j.xml")}, "-junit"},
		{[]string{"compare", "-scenario", "abort-reuse", "-seeds", "1-50", "-a", "-legacy", "-b", "", "-quiet", "-out", bad}, "-out"},
		{[]string{"compare", "-scenario", "abort-reuse", "-seeds", "1-50", "-a", "-legacy", "-b", "", "-quiet", "-out", dir, "-junit", filepath.Join(bad, "j.xml")}, "-junit"},
		{[]string{"shrink", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-quiet", "-out", bad}, "-out"},
		{[]string{"shrink", "-scenario", "abort-reuse", "-legacy", "-seed", "1", "-quiet", "-out", dir, "-html", filepath.Join(bad, "t.html")}, "-html"},
		{[]string{"stress", "-p", "2", "-rounds", "1", "-quiet", "-junit", filepath.Join(bad, "j.xml"), "--", "false"}, "-junit"},
	} {
		code, out, errOut := simrun(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s%s", c.args, out, errOut)
		assert.Empty(t, out, "%v: nothing ran", c.args)
		assert.Contains(t, errOut, "simrun "+c.args[0]+": "+c.flag+" ", "%v: the message names the flag", c.args)
		assert.Contains(t, errOut, "not a directory", "%v", c.args)
	}

	// A directory that can be made, but that a passing run does not need,
	// is not left behind.
	fresh := filepath.Join(dir, "fresh", "out")
	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-20", "-quiet", "-out", fresh)
	require.Equal(t, 0, code, out)
	assert.NoDirExists(t, filepath.Join(dir, "fresh"))
	code, out, _ = simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-20", "-quiet", "-out", fresh)
	require.Equal(t, 1, code, out)
	assert.FileExists(t, filepath.Join(fresh, "abort-reuse-legacy-seed1.schedule"))

	// compare makes OUT/a, and OUT with it, then OUT/b: a compare that
	// wrote nothing leaves none of the three.
	fresh = filepath.Join(dir, "fresh-compare", "out")
	code, out, _ = simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-5", "-a", "", "-b", "", "-quiet", "-out", fresh)
	require.Equal(t, 0, code, out)
	assert.NoDirExists(t, filepath.Join(dir, "fresh-compare"))
}

// TestPCTEstimatesTheRunsLengthFromRandomRuns: pct:D's change points fall
// among the first K decisions. simrun takes K from the median length of
// seeds 1-16 under random, so that they fall within the runs, and names
// the strategy pct:D:K, so that a seed runs the same alone and in a sweep.
func TestPCTEstimatesTheRunsLengthFromRandomRuns(t *testing.T) {
	sp, err := (&specFlags{scenario: "abort-reuse", strategy: "pct:3"}).spec()
	require.NoError(t, err)
	var steps []int64
	for seed := uint64(1); seed <= 16; seed++ {
		steps = append(steps, sp.runSeed(seed, sim.Options{Strategy: sim.Random()}).res.Steps)
	}
	slices.Sort(steps)
	want := fmt.Sprintf("pct:3:%d", steps[8])
	assert.Equal(t, want, sp.strategyOrDefault().String())

	// The change points now fall within the runs: both of them, in
	// nearly every run, where K = 1000 leaves most runs with none.
	passed := func(st sim.Strategy) (both int) {
		for seed := uint64(1); seed <= 50; seed++ {
			o := sp.runSeed(seed, sim.Options{Strategy: st, Trace: true})
			n := 0
			for _, ev := range o.res.Trace.Events {
				if ev.Kind == sim.EvStrategy && strings.Contains(ev.Text, "change point") {
					n++
				}
			}
			if n == 2 {
				both++
			}
		}
		return both
	}
	assert.GreaterOrEqual(t, passed(sp.strategyOrDefault()), 45)
	assert.LessOrEqual(t, passed(sim.PCT(3)), 10)

	// A seed of a sweep runs alone with the strategy its sweep names.
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-strategy", "pct:3", "-seeds", "100-120")
	require.Equal(t, 0, code)
	assert.Equal(t, want, r.Strategy)
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-strategy", "pct:3", "-seed", "110", "-out", t.TempDir())
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "strategy "+want+",")
	// Given, K is kept.
	sp, err = (&specFlags{scenario: "abort-reuse", strategy: "pct:3:77"}).spec()
	require.NoError(t, err)
	assert.Equal(t, "pct:3:77", sp.strategyOrDefault().String())
}

// TestComparePCTRunsOneStepEstimateForBothVariants: pct:D's K comes from
// the runs of a spec, and a variant with a failpoint or another engine
// runs longer or shorter: compare gives both variants A's K, so that the
// strategy is not a second difference between them.
func TestComparePCTRunsOneStepEstimateForBothVariants(t *testing.T) {
	const fp = "core/stall-mid-step=return(2000)"
	spA, err := (&specFlags{scenario: "abort-reuse", strategy: "pct:3", failpoints: repeated{fp}}).spec()
	require.NoError(t, err)
	spB, err := (&specFlags{scenario: "abort-reuse", strategy: "pct:3"}).spec()
	require.NoError(t, err)
	require.NotEqual(t, spA.strategyOrDefault().String(), spB.strategyOrDefault().String(), "the failpoint changes the runs' length")

	var r compareResult
	code, out, errOut := simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-20", "-strategy", "pct:3", "-a", "-failpoint "+fp, "-b", "",
		"-quiet", "-json", "-out", t.TempDir())
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, spA.strategyOrDefault().String(), r.A.Strategy)
	assert.Equal(t, r.A.Strategy, r.B.Strategy)

	// B takes A's estimate without making its own; one of another depth or
	// scenario is no estimate for it.
	known := &pctEstimate{scenario: "abort-reuse", depth: 3, steps: 12345}
	sp, err := (&specFlags{scenario: "abort-reuse", strategy: "pct:3", pct: known}).spec()
	require.NoError(t, err)
	assert.Equal(t, "pct:3:12345", sp.strategyOrDefault().String())
	for _, f := range []specFlags{
		{scenario: "abort-reuse", strategy: "pct:2", pct: known},
		{scenario: "swarm", strategy: "pct:3", pct: known},
	} {
		sp, err := f.spec()
		require.NoError(t, err)
		assert.NotEqual(t, int64(12345), sp.pctSteps, "%s %s", f.scenario, f.strategy)
		assert.Positive(t, sp.pctSteps)
	}

	// A K given is each variant's own.
	code, out, errOut = simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-20", "-a", "-strategy pct:3:50", "-b", "-strategy pct:3:70",
		"-quiet", "-json", "-out", t.TempDir())
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, "pct:3:50", r.A.Strategy)
	assert.Equal(t, "pct:3:70", r.B.Strategy)
}

// TestRunPrintsTheEnginesMetrics: run -metrics prints each engine's
// metrics as the run closed it, host memory's among them, in text and in
// JSON, and the run is the same one: its trace hash is unchanged. A
// replay prints them too.
func TestRunPrintsTheEnginesMetrics(t *testing.T) {
	dir := t.TempDir()
	args := []string{"run", "-scenario", "kv-offload", "-seed", "52", "-out", dir}
	code, plain, _ := simrun(t, args...)
	require.Equal(t, 0, code, plain)
	assert.NotContains(t, plain, "metrics of engine")
	code, out, _ := simrun(t, append(args, "-metrics")...)
	require.Equal(t, 0, code, out)
	assert.Equal(t, between(plain, "trace hash ", "\n"), between(out, "trace hash ", "\n"), "-metrics reads the counters after the run: the same run")
	assert.Contains(t, out, "  metrics of engine 1 of 1:\n    vllm:num_requests_running 0\n")
	assert.Regexp(t, `(?m)^    vllm:kv_offload_block_eviction_total\{policy="arc"\} [1-9][0-9]*$`, out, "seed 52 draws ARC, and puts blocks out")
	assert.Regexp(t, `(?m)^    vllm:external_prefix_cache_hits_total [1-9][0-9]*$`, out, "seed 52 loads KV back")

	code, js, _ := simrun(t, append(args, "-metrics", "-json")...)
	require.Equal(t, 0, code, js)
	var j struct {
		TraceHash string `json:"trace_hash"`
		Metrics   [][]struct {
			Name  string  `json:"name"`
			Value float64 `json:"value"`
		} `json:"metrics"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &j))
	assert.Equal(t, between(plain, "trace hash ", "\n"), j.TraceHash)
	require.Len(t, j.Metrics, 1)
	var evicted float64
	for _, m := range j.Metrics[0] {
		if m.Name == `vllm:kv_offload_block_eviction_total{policy="arc"}` {
			evicted = m.Value
		}
	}
	assert.Contains(t, out, fmt.Sprintf(`vllm:kv_offload_block_eviction_total{policy="arc"} %g`+"\n", evicted))
	assert.Positive(t, evicted)

	sched := filepath.Join(dir, "x.schedule")
	code, _, _ = simrun(t, append(args, "-schedule-out", sched)...)
	require.Equal(t, 0, code)
	code, rep, _ := simrun(t, "replay", "-metrics", sched)
	require.Equal(t, 0, code, rep)
	assert.Contains(t, rep, fmt.Sprintf(`vllm:kv_offload_block_eviction_total{policy="arc"} %g`+"\n", evicted), "a replay is the same run, with the same counts")
}
