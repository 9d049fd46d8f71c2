package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

func init() {
	register(&command{name: "explore", summary: "run one seed under every schedule within a bound of departures from the calm one", run: cmdExplore})
}

// exploreJSON is what explore -json prints.
type exploreJSON struct {
	Scenario   string   `json:"scenario"`
	Seed       uint64   `json:"seed"`
	Strategy   string   `json:"strategy"`
	Engine     string   `json:"engine"`
	Config     []string `json:"config,omitempty"` // -config, sorted by key
	Failpoints []string `json:"failpoints,omitempty"`
	Delays     int      `json:"delays"` // -1: no bound
	Workers    int      `json:"workers"`
	// Shard is -shard I/N: the walk ran the schedules whose first
	// departure is at a draw numbered I-1 modulo N; "" for the whole.
	Shard string `json:"shard,omitempty"`
	// Seeds are the seeds -seeds asked for ("" for -seed), Walks the walks
	// made, one a seed, Seed the last walked: the failing one, if any.
	Seeds string `json:"seeds,omitempty"`
	Walks int    `json:"walks"`
	// Schedules are the schedules run, each a fresh run of a seed.
	Schedules int `json:"schedules"`
	// Complete is set when every schedule within the bound ran and passed.
	Complete bool `json:"complete"`
	// Stopped says why the walk ended before its end: "max-runs",
	// "for" (the -for budget ran out) or "interrupted".
	Stopped         string   `json:"stopped,omitempty"`
	DeepestDraws    int      `json:"deepest_draws"`
	Seconds         float64  `json:"elapsed_seconds"`
	SchedulesPerSec float64  `json:"schedules_per_sec"`
	Failed          bool     `json:"failed"`
	Failure         *runJSON `json:"failure,omitempty"` // the first failing schedule, as run -json prints a run
	Error           string   `json:"error,omitempty"`   // a run that drew differently from the one it followed
}

func cmdExplore(args []string, stdout, stderr io.Writer) error {
	fs, sf, of, seed := seedCommand("explore", stderr, "the seed `N` whose workload is explored")
	seedsFlag := fs.String("seeds", "", "walk each of these seeds in turn instead of -seed, as -seeds A-B or a list such as 1,5,9-12, until one fails: for scenarios that draw their workload from the seed (swarm, pause-resume, live-reload, colocate, weight-sync, multi-lora, lora-reload, control-mix, kv-offload)")
	delays := fs.Int("delays", sim.DefaultExploreDelays, "the most draws of a schedule other than the calm one: a task other than the one that would go on, a starvation window opened, a window longer than the shortest (-1: no bound)")
	maxRuns := fs.Int("max-runs", 0, "stop a seed's walk after `N` schedules, not complete (0: no bound)")
	budget := fs.Duration("for", 0, "stop the walk once `DURATION` of wall time is spent (a CI budget), not complete; what ran is reported (0: no budget)")
	jobs := fs.Int("j", min(runtime.GOMAXPROCS(0), jobsMax), fmt.Sprintf("workers (one per core), at most %d", jobsMax))
	quiet := fs.Bool("quiet", false, "no progress bar, even on a terminal, and no line saying what runs")
	shardFlag := fs.String("shard", "", "run only shard `I/N` of the schedules, those whose first departure is at a draw numbered I-1 modulo N, for a CI matrix; simrun merge adds the shards' -json up to the whole walk")
	var timeout time.Duration
	registerSeedTimeout(fs, &timeout)
	sf.timeout = &timeout
	fs.Lookup("scenario").Usage = "the scenario to walk (see simrun list); several, one after another, as a comma-separated list, or all of them as `all`"
	fs.Lookup("for").Usage = "stop the walk once `DURATION` of wall time is spent (a CI budget), not complete; what ran is reported (0: no budget); with several scenarios, each an equal share of what the ones before it left"
	if _, err := parseFlags(fs, args, 0); err != nil {
		return helpOK(err)
	}
	switch {
	case *delays == 0 || *delays < -1:
		return usagef("-delays must be at least 1, or -1 for no bound, got %d: 0 would run the calm schedule alone", *delays)
	case *maxRuns < 0:
		return usagef("-max-runs must be ≥ 0 (0 means no bound), got %d", *maxRuns)
	case *budget < 0:
		return usagef("-for must be ≥ 0 (0 means no budget), got %v", *budget)
	case *jobs < 1 || *jobs > jobsMax:
		return usagef("-j must be from 1 to %d, got %d", jobsMax, *jobs)
	case *seedsFlag != "" && flagGiven(fs, "seed"):
		return usagef("-seed and -seeds do not go together: -seeds 5 walks seed 5 alone")
	}
	seeds := seedSet{spans: []span{{*seed, *seed}}, n: 1}
	if *seedsFlag != "" {
		var err error
		if seeds, err = parseSeeds(*seedsFlag); err != nil {
			return err
		}
	}
	names, err := scenarioList(sf.scenario)
	if err != nil {
		return err
	}
	multi := len(names) > 1
	if multi && *shardFlag != "" {
		return usagef("-shard %s splits the walk of one scenario's seed: give -scenario one name, not %s", *shardFlag, sf.scenario)
	}
	specs, skipped, err := scenarioSpecs("explore", sf, names, stderr, func(sp *spec) error {
		if _, ok := sp.strategy.(replayFile); ok {
			return usagef("-strategy %s: explore walks the draws of a strategy, and a replay draws nothing; explore random, chaos or starve:PREFIX, or run simrun replay", sp.strategy)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w := walk{delays: *delays, maxRuns: *maxRuns, jobs: *jobs, shardFlag: *shardFlag, quiet: *quiet, timeout: timeout, budget: *budget}
	if *shardFlag != "" {
		if w.shard, w.shards, err = parseShard(*shardFlag); err != nil {
			return err
		}
		if w.shards > jobsMax {
			return usagef("-shard %s: at most %d shards", *shardFlag, jobsMax)
		}
	}
	for _, sp := range specs {
		if _, err := w.options(sp); err != nil {
			return err
		}
	}
	if err := of.check(); err != nil {
		return err
	}
	undo, err := outputDirs(of.dirs(true)...)
	if err != nil {
		return err
	}
	defer undo()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var walks []exploreJSON
	var worst error
	cut := ""
	for i, sp := range specs {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if *budget > 0 {
			share := *budget
			if multi {
				share, w.budgetOf = budgetShare(*budget, start, len(specs)-i), *budget
			}
			w.budget = share
			wctx, cancel = context.WithTimeout(ctx, share)
		}
		if multi && i > 0 && !of.json {
			fmt.Fprintln(stdout)
		}
		j, err := w.run(wctx, sp, seeds, of, stdout, stderr)
		cancel()
		walks = append(walks, j)
		switch {
		case errors.Is(err, errFailed):
			worst = errFailed
		case err != nil:
			return err
		}
		if j.Stopped == "interrupted" {
			cut = "interrupted"
			break
		}
		if errors.Is(err, errHung) && i+1 < len(specs) {
			// Its goroutine is left behind, spinning or blocked: walks
			// that went on would run beside it.
			cut = fmt.Sprintf("a schedule of %s hung", sp.scenario.Name)
			break
		}
	}
	if multi && !of.json {
		ran := make([]string, len(specs))
		for i, sp := range specs {
			ran[i] = sp.scenario.Name
		}
		printExploreTotal(stdout, ran, skipped, walks, cut, time.Since(start))
	}
	return worst
}

// errHung is a walk's schedule that did not end: a failure (exit 1) whose
// goroutine is left behind.
var errHung = fmt.Errorf("%w: a schedule hung", errFailed)

// walk is how explore walks each scenario's seeds: its flags.
type walk struct {
	delays, maxRuns, jobs int
	shardFlag             string
	shard, shards         uint64
	quiet                 bool
	timeout               time.Duration
	// budget is the -for a scenario's walk has, and budgetOf the whole
	// -for when budget is a scenario's share of it.
	budget, budgetOf time.Duration
}

// options are the explore options of a walk of sp, or the usage error of
// a bound they cannot run.
func (w *walk) options(sp *spec) (sim.ExploreOptions, error) {
	opts := sim.ExploreOptions{
		Options: sim.Options{Strategy: sp.strategyOrDefault(), StepsMax: sp.stepsMax, HangAfter: w.timeout},
		Delays:  w.delays, MaxRuns: w.maxRuns, Workers: w.jobs,
		// A hang is reported as run and sweep report one; its goroutine
		// is left behind, and simrun exits.
		ReturnHang: true,
	}
	if w.shards > 1 {
		opts.Shard, opts.Shards = int(w.shard-1), int(w.shards)
	}
	if err := opts.Check(); err != nil {
		return opts, &usageError{err.Error()}
	}
	return opts, nil
}

// run walks sp's seeds in turn, until one fails or ends otherwise than
// complete for a reason other than -max-runs, and reports the walk. It
// returns errFailed when a schedule failed, hung or drew differently.
func (w *walk) run(ctx context.Context, sp *spec, seeds seedSet, of *outputFlags, stdout, stderr io.Writer) (exploreJSON, error) {
	opts, err := w.options(sp)
	if err != nil {
		return exploreJSON{}, err
	}
	strategy := opts.Strategy
	bound := opts.Bound()
	if !w.quiet {
		fmt.Fprintf(stderr, "simrun explore: running every schedule %s on %d workers\n", bound, w.jobs)
	}
	var bar *progressbar.ProgressBar
	if !w.quiet && !of.json && isTerminal(stderr) {
		bar = newBar(stderr, -1, "schedules")
		opts.OnRun = func() { bar.Add64(1) }
	}
	start := time.Now()
	var res sim.ExploreResult
	j := exploreJSON{Scenario: sp.scenario.Name, Seed: seeds.at(0), Strategy: strategy.String(), Engine: sp.engineName(), Config: sp.configStrings(), Failpoints: sp.failpoints,
		Delays: w.delays, Workers: w.jobs, Shard: w.shardFlag, Complete: true}
	if seeds.n > 1 {
		j.Seeds = seeds.String()
	}
	cut := 0 // walks stopped at -max-runs
	for i := uint64(0); i < seeds.n; i++ {
		s := seeds.at(i)
		j.Seed = s
		opts.Seed = s
		main := func(rt task.Runtime) error {
			prog, _ := sp.scenario.Program(sp.options(s))
			return prog(rt)
		}
		res, err = sim.Explore(ctx, opts, main)
		j.Walks++
		j.Schedules += res.Runs
		j.DeepestDraws = max(j.DeepestDraws, res.Deepest)
		j.Complete = j.Complete && res.Complete
		if errors.Is(err, context.Canceled) {
			j.Stopped, err = "interrupted", nil
			break
		}
		if errors.Is(err, context.DeadlineExceeded) {
			j.Stopped, err = "for", nil
			break
		}
		if err != nil || res.Failed != nil {
			break
		}
		if !res.Complete {
			cut++
		}
	}
	elapsed := time.Since(start)
	if bar != nil {
		bar.Finish()
	}
	if j.Stopped == "" && cut > 0 {
		j.Stopped = "max-runs"
	}
	j.Seconds, j.SchedulesPerSec = elapsed.Seconds(), float64(j.Schedules)/max(elapsed.Seconds(), 1e-9)
	what := fmt.Sprintf("seed %d", seeds.at(0))
	if seeds.n > 1 {
		what = "seeds " + seeds.String()
	}
	if w.shardFlag != "" {
		bound += ", shard " + w.shardFlag
	}
	head := fmt.Sprintf("%s %s, strategy %s, %s, %s: ", sp.scenario.Name, what, strategy, sp.engineWords(), bound)
	tally := fmt.Sprintf("%d schedules, %v on %d workers", j.Schedules, elapsed.Round(time.Millisecond), w.jobs)
	if seeds.n > 1 {
		tally = fmt.Sprintf("%d seeds, %s", j.Walks, tally)
	}
	var hang *sim.HangError
	if errors.As(err, &hang) {
		j.Failed = true
		if err := exploreHang(sp, &j, hang, of, head+"HANG after "+tally, stdout); !errors.Is(err, errFailed) {
			return j, err
		}
		return j, errHung
	}
	if err != nil {
		// A run drew differently from the one it followed: the code
		// under test depends on more than the seed and the schedule.
		j.Failed, j.Error = true, err.Error()
		if of.json {
			if err := writeJSON(stdout, j); err != nil {
				return j, err
			}
			return j, errFailed
		}
		fmt.Fprintf(stdout, "%sNONDETERMINISTIC in seed %d after %s\n  %s\n", head, j.Seed, tally, indent(err.Error(), "  "))
		return j, errFailed
	}
	if res.Failed == nil {
		j.Complete = j.Complete && j.Stopped == ""
		if of.json {
			return j, writeJSON(stdout, j)
		}
		switch j.Stopped {
		case "":
			fmt.Fprintf(stdout, "%severy schedule passed: %s, the longest %d draws\n", head, tally, j.DeepestDraws)
		case "max-runs":
			where := ""
			if seeds.n > 1 {
				where = fmt.Sprintf(" in %d of %d walks", cut, j.Walks)
			}
			fmt.Fprintf(stdout, "%sstopped at -max-runs%s: %s, none failed; NOT complete, so this says nothing of the schedules not run\n", head, where, tally)
		case "for":
			fmt.Fprintf(stdout, "%s%s: %s, none failed; NOT complete, so this says nothing of the schedules not run\n", head, budgetRanOut(w.budget, w.budgetOf), tally)
		default:
			fmt.Fprintf(stdout, "%sinterrupted: %s, none failed; NOT complete\n", head, tally)
		}
		return j, nil
	}
	// Replayed, the failing schedule runs as run and replay run a seed:
	// with the checker's outcome, the situations reached and the artifacts.
	o := sp.run(j.Seed, sim.Options{Strategy: sim.Replay(res.Failed.Schedule), Trace: of.tracing()})
	o.strategy = strategy.String()
	o.fileSuffix = exploredSuffix(w.shardFlag)
	// The strategy's draws did not make this schedule, Explore's walk
	// did: simrun run of the seed and strategy runs another.
	o.meta = []sim.Meta{{Key: "explored", Value: bound}}
	if !o.failed() {
		return j, fmt.Errorf("the schedule that failed passed when replayed (%v): the run depends on more than its seed and schedule", res.Failed.Err)
	}
	schedFile, err := writeArtifacts(sp, &o, of, nil)
	if err != nil {
		return j, err
	}
	j.Failed, j.Complete = true, false
	if of.json {
		f := o.json(sp, schedFile, nil)
		f.Draws = res.Draws.String()
		j.Failure = &f
		if err := writeJSON(stdout, j); err != nil {
			return j, err
		}
		return j, errFailed
	}
	fmt.Fprintf(stdout, "%sFAIL after %s\n", head, tally)
	which := "the failing schedule"
	if seeds.n > 1 {
		which = fmt.Sprintf("seed %d's failing schedule", j.Seed)
	}
	if d := res.Departures(); d == 0 {
		fmt.Fprintf(stdout, "  %s is the calm one itself: ", which)
	} else {
		fmt.Fprintf(stdout, "  %s departs %s from the calm one (draws %s): ", which, times(d), res.Draws)
	}
	if err := printOutcome(sp, &o, of, nil, schedFile, stdout); err != nil {
		return j, err
	}
	return j, errFailed
}

// printExploreTotal ends the text of a walk of several scenarios: the
// schedules of all, and the scenarios that failed, were walked to the end,
// stopped short, were skipped and were not walked.
func printExploreTotal(w io.Writer, names, skipped []string, walks []exploreJSON, cut string, elapsed time.Duration) {
	var schedules int
	var failed, complete, short []string
	for _, j := range walks {
		schedules += j.Schedules
		switch {
		case j.Failed:
			failed = append(failed, j.Scenario)
		case j.Complete:
			complete = append(complete, j.Scenario)
		default:
			short = append(short, fmt.Sprintf("%s (%s)", j.Scenario, j.Stopped))
		}
	}
	fmt.Fprintf(w, "\nexplore of %d scenarios: %d schedules in %.2fs\n", len(names)+len(skipped), schedules, elapsed.Seconds())
	for _, l := range []struct {
		what  string
		names []string
	}{{"failed", failed}, {"every schedule passed", complete}, {"NOT complete", short}, {"skipped (their settings refused)", skipped}, {"not walked (" + cut + ")", names[len(walks):]}} {
		if len(l.names) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", l.what, strings.Join(l.names, ", "))
		}
	}
}

// exploreHang reports a schedule of the walk that did not end: there is no
// schedule file to give, since the run never ended, but its draws, with the
// seed and the strategy, are a run -draws that runs it again. Its stacks go
// beside the schedules, named as an explored schedule is.
func exploreHang(sp *spec, j *exploreJSON, h *sim.HangError, of *outputFlags, line string, stdout io.Writer) error {
	again := *sp
	again.draws = h.Draws
	cmd := again.runCommand(h.Seed, h.Strategy)
	if err := writeStacksTo(sp.seedFile(of.out, h.Seed, exploredSuffix(j.Shard)+".stacks.txt"), h); err != nil {
		return err
	}
	if of.json {
		j.Failed, j.Complete = true, false
		f := again.hangJSON(h.Seed, h.Strategy, h, cmd)
		j.Failure = &f
		if err := writeJSON(stdout, j); err != nil {
			return err
		}
		return errFailed
	}
	fmt.Fprintf(stdout, "%s\n  %s\n  run again: %s\n", line, indent(h.Error(), "  "), cmd)
	return errFailed
}

// exploredSuffix ends the names of the files of a walk's schedule:
// -explored, and the shard, -explored-shard2of3, so that the shards of a
// walk run into one directory keep their own.
func exploredSuffix(shard string) string {
	if shard == "" {
		return "-explored"
	}
	return "-explored-shard" + strings.Replace(shard, "/", "of", 1)
}

// times says n times in words.
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return strconv.Itoa(n) + " times"
}
