package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/triage"
)

func init() {
	register(&command{name: "sweep", summary: "run a scenario over many seeds and report the failure rate", run: cmdSweep})
}

// failingSeedsMax bounds the failing seeds a summary lists.
const failingSeedsMax = 1000

// sweepResult is what a sweep found, mergeable across shards.
type sweepResult struct {
	Scenario   string   `json:"scenario"`
	Strategy   string   `json:"strategy"`
	Engine     string   `json:"engine"`
	StepsMax   int64    `json:"steps_max,omitempty"`  // -steps-max; 0: the simulator's default
	Failpoints []string `json:"failpoints,omitempty"` // -failpoint, in order
	Config     []string `json:"config,omitempty"`     // -config, one per key, sorted by key
	SeedRange  string   `json:"seed_range"`
	Requested  string   `json:"requested_seed_range,omitempty"` // set when the sweep stopped early
	Stopped    string   `json:"stopped,omitempty"`              // why it stopped early
	Seeds      uint64   `json:"seeds"`
	Failures   uint64   `json:"failures"`
	// Refused are the seeds that ran nothing: the engine refused the
	// configuration each drew with the -config settings (refusedBySettings).
	// They count in Seeds but in no rate.
	Refused      uint64      `json:"refused_by_settings,omitempty"`
	Rate         float64     `json:"rate"`
	CI95         [2]float64  `json:"ci95"`
	UpperBound   float64     `json:"upper_bound"` // the rule of three when nothing failed, as the text says; else ci95's upper end
	FirstFailure *uint64     `json:"first_failure"`
	FailingSeeds []uint64    `json:"failing_seeds"`
	Truncated    bool        `json:"failing_seeds_truncated,omitempty"`
	StepLimited  uint64      `json:"step_limited"`
	SeedsPerSec  float64     `json:"seeds_per_sec"`
	Seconds      float64     `json:"elapsed_seconds"`
	Workers      int         `json:"workers"`
	Steps        uint64      `json:"steps"`
	Modes        []sweepMode `json:"modes"`
	// Targets are the situations the sweep was to reach (the scenario's,
	// or -targets), and Reached the seeds that reached each situation:
	// every target, and every other situation some seed reached.
	Targets       []string          `json:"targets,omitempty"`
	Reached       map[string]uint64 `json:"reached,omitempty"`
	ReachedFirst  map[string]uint64 `json:"reached_first_seed,omitempty"` // the lowest seed that reached each situation reached
	Determinism   uint64            `json:"determinism_checked"`
	Nondetermined []uint64          `json:"nondeterministic_seeds,omitempty"`
	Shard         string            `json:"shard,omitempty"`
	FirstFailSecs *float64          `json:"first_failure_after_seconds,omitempty"`
	Replay        string            `json:"replay,omitempty"`
	Error         string            `json:"first_error,omitempty"`
}

// tested is how many seeds tested the engine: the seeds run, less those
// the settings refused; the rates are of these.
func (r *sweepResult) tested() uint64 { return r.Seeds - r.Refused }

type sweepMode struct {
	Signature string     `json:"signature"`
	Count     uint64     `json:"count"`
	Rate      float64    `json:"rate"`
	CI95      [2]float64 `json:"ci95"`
	FirstSeed uint64     `json:"first_seed"`
	Error     string     `json:"error"`
	Replay    string     `json:"replay,omitempty"`

	hang *sim.HangError // the first seed hung: there is no schedule to write
}

func cmdSweep(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sf specFlags
	sf.register(fs)
	fs.Lookup("scenario").Usage = "the scenario to run (see simrun list); several, one after another, as a comma-separated list, or all of them as `all`"
	var wf sweepFlags
	wf.register(fs, "seeds to run", "print one JSON summary object instead of text, one a scenario")
	sf.timeout = &wf.seedTimeout
	shardFlag := fs.String("shard", "", "run only shard `I/N` of the seeds (contiguous parts), for a CI matrix; add the results up with simrun merge")
	junit := fs.String("junit", "", "write a JUnit XML report to `FILE`: one test case per failing seed, with its replay command; a suite a scenario")
	out := fs.String("out", "out", "directory for the schedule files of failing seeds")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the sweep to `FILE`, for go tool pprof")
	memProfile := fs.String("memprofile", "", "write a heap profile to `FILE` as the sweep ends, for go tool pprof: what it still holds (inuse_space) and what it allocated (alloc_space)")
	var rf reachFlags
	rf.register(fs)
	var stopAfter wholeNumber
	fs.Var(&stopAfter, "stop-after", "stop taking seeds once `N` failures are seen; the result covers the seeds that ran, the first ones of -seeds (0: never); of each scenario")
	if _, err := parseFlags(fs, args, 0); err != nil {
		return helpOK(err)
	}
	names, err := scenarioList(sf.scenario)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return usagef("-cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return usagef("-memprofile: %v", err)
		}
		defer func() {
			runtime.GC() // what the sweep still holds, not what it last threw away
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				fmt.Fprintf(stderr, "simrun sweep: -memprofile: %v\n", err)
			}
			f.Close()
		}()
	}
	specs, skipped, err := scenarioSpecs("sweep", &sf, names, stderr, func(sp *spec) error {
		if _, ok := sp.strategy.(replayFile); ok && len(names) > 1 {
			return usagef("-strategy replay:FILE replays one scenario's schedule: give -scenario one name, not %s", sf.scenario)
		}
		return nil
	})
	if err != nil {
		return err
	}
	multi := len(names) > 1
	seeds, err := parseSeeds(wf.seeds)
	if err != nil {
		return err
	}
	if *shardFlag != "" {
		i, n, err := parseShard(*shardFlag)
		if err != nil {
			return err
		}
		seeds = seeds.shard(i, n)
		if seeds.n == 0 {
			return usagef("-shard %s of %s holds no seed: use fewer shards", *shardFlag, wf.seeds)
		}
	}
	if err := specs[0].checkReplaySeeds(seeds, "-seeds"); err != nil {
		return err
	}
	det, err := wf.check()
	if err != nil {
		return err
	}
	// With several scenarios, -min-reached holds each to its own targets;
	// one that names none has nothing to reach, unless none names any.
	targets := make([]props.SituationSet, len(specs))
	var some props.SituationSet
	for i, sp := range specs {
		some |= sp.scenario.Targets
		if multi {
			targets[i], err = (&reachFlags{targets: rf.targets}).targetSet(sp.scenario.Targets, sp.scenario.Name)
		} else {
			targets[i], err = rf.targetSet(sp.scenario.Targets, sp.scenario.Name)
		}
		if err != nil {
			return err
		}
		sp.seedTimeout = wf.seedTimeout
	}
	if rf.min > 0 && rf.targets == "" && some == 0 {
		return usagef("-min-reached %d: scenarios %s name no target situations; name them with -targets", rf.min, sf.scenario)
	}
	undo, err := outputDirs(append([]outPlace{outDir("-out", *out)}, fileDir("-junit", *junit)...)...)
	if err != nil {
		return err
	}
	defer undo()
	// Ctrl-C (or SIGTERM) stops taking seeds, as -for does, so that what
	// the sweep found is reported rather than lost; a second one kills.
	var interrupted *signalStop
	var results []sweepResult
	var suites []triage.JUnitSuite
	var cut string // why the scenarios after results did not run
	start := time.Now()
	cmdOf := func(name string) string {
		if multi {
			return "sweep -scenario " + name
		}
		return "sweep"
	}
	for i, sp := range specs {
		cmd := cmdOf(sp.scenario.Name)
		st := &sweepState{modes: map[string]*modeTally{}, workers: wf.jobs, stopAfter: uint64(stopAfter), targets: targets[i], refusals: true}
		st.budget = wf.budget
		if wf.budget > 0 && multi {
			st.budget, st.budgetOf = budgetShare(wf.budget, start, len(specs)-i), wf.budget
		}
		if interrupted == nil {
			interrupted = stopOnSignal(st)
		} else if interrupted.watch(st); interrupted.happened() {
			cut = "interrupted"
			break // the scenarios not yet run are not reported as run
		}
		unit := "seeds"
		if multi {
			unit = "seeds of " + sp.scenario.Name
		}
		bar := wf.progress(stderr, seeds.n, unit)
		sw := sweepInto(st, sp, seeds, det, bar)
		if bar != nil {
			bar.Finish()
		}
		res := sw.summary(sp, *shardFlag)
		sw.printWarnings(stderr, cmd)
		// Schedule files and replay commands for the first failing seed of
		// every mode.
		if err := writeModeSchedules(sp, &res, *out); err != nil {
			interrupted.release()
			return err
		}
		printHangs(stderr, cmd, res.Modes)
		if *junit != "" {
			suites = append(suites, triage.JUnitSuite{Name: "simrun sweep " + res.Scenario, Cases: sweepJUnitCases(sp, &res, sw, uint64(rf.min))})
		}
		if wf.json {
			if err := writeJSON(stdout, res); err != nil {
				interrupted.release()
				return err
			}
		} else {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			printSweep(stdout, sp, &res)
		}
		results = append(results, res)
		if sw.hung && i+1 < len(specs) {
			// Its worker is left behind, spinning or blocked: a sweep
			// that went on would measure the next scenarios beside it.
			cut = fmt.Sprintf("a seed of %s hung", sp.scenario.Name)
			break
		}
	}
	interrupted.release()
	if *junit != "" {
		if err := writeFile(*junit, func(w io.Writer) error { return triage.WriteJUnitSuites(w, suites) }); err != nil {
			return err
		}
	}
	if multi && !wf.json {
		ran := make([]string, len(specs))
		for i, sp := range specs {
			ran[i] = sp.scenario.Name
		}
		printSweepTotal(stdout, ran, skipped, results, cut, time.Since(start))
	}
	failed := false
	for _, res := range results {
		failed = failed || res.Failures > 0 || len(res.Nondetermined) > 0
	}
	if failed {
		return errFailed
	}
	var short error
	for _, res := range results {
		if err := checkReached(stderr, cmdOf(res.Scenario), &res, uint64(rf.min)); err != nil && short == nil {
			short = err
		}
	}
	if short != nil {
		return short
	}
	if interrupted.happened() {
		if len(results) < len(specs) {
			return fmt.Errorf("interrupted after %d of %d scenarios, before any failure", len(results), len(specs))
		}
		if last := results[len(results)-1]; last.Stopped != "" {
			return fmt.Errorf("interrupted after %d of %d seeds, before any failure", last.Seeds, seeds.n)
		}
	}
	return nil
}

// scenarioSpecs makes the spec of each scenario of names, with sf's
// settings. Every scenario's settings are checked before any runs: one
// that a scenario refuses is bad input, not a failure found an hour in.
// Among several, a scenario whose configuration or requests the -config
// settings make the engine refuse is skipped, and said to be (cmd names
// the command), and returned among skipped; if every one is, that is bad
// input. check judges each spec as it is made.
func scenarioSpecs(cmd string, sf *specFlags, names []string, stderr io.Writer, check func(*spec) error) (specs []*spec, skipped []string, err error) {
	for _, name := range names {
		f := *sf
		f.scenario = name
		sp, err := f.spec()
		if refused := (*configRefused)(nil); errors.As(err, &refused) && len(names) > 1 {
			fmt.Fprintf(stderr, "simrun %s: skipping %s: %v\n", cmd, name, err)
			skipped = append(skipped, name)
			continue
		}
		if err == nil {
			err = check(sp)
		}
		if err != nil {
			return nil, nil, err
		}
		specs = append(specs, sp)
	}
	if len(specs) == 0 {
		return nil, nil, usagef("-config %s: every scenario of -scenario %s refuses these settings", strings.Join(sf.config, " -config "), sf.scenario)
	}
	return specs, skipped, nil
}

// budgetShare is a scenario's share of a budget (-for) of several
// scenarios begun at start, left of them counting it: the budget left,
// shared by the scenarios left, so that one that ran out of seeds early
// leaves its share to the others.
func budgetShare(budget time.Duration, start time.Time, left int) time.Duration {
	return max((budget-time.Since(start))/time.Duration(left), time.Millisecond).Round(time.Millisecond)
}

// scenarioList reads sweep's -scenario: one name, several separated by
// commas, or all.
func scenarioList(v string) ([]string, error) {
	if v == "" {
		return nil, usagef("-scenario is required: want one of %s, several separated by commas, or all", strings.Join(scenario.Names(), ", "))
	}
	if v == "all" {
		return scenario.Names(), nil
	}
	var names []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, usagef("-scenario %q names an empty scenario: separate names with single commas", v)
		}
		if _, err := scenario.Lookup(name); err != nil {
			return nil, &usageError{err.Error()}
		}
		if slices.Contains(names, name) {
			return nil, usagef("-scenario %q names %s twice", v, name)
		}
		names = append(names, name)
	}
	return names, nil
}

// printSweepTotal ends the text of a sweep of several scenarios: which
// failed, of how many seeds, and which passed.
func printSweepTotal(w io.Writer, names, skipped []string, results []sweepResult, cut string, elapsed time.Duration) {
	var seeds uint64
	var failed, passed []string
	for _, r := range results {
		seeds += r.Seeds
		if r.Failures > 0 || len(r.Nondetermined) > 0 {
			failed = append(failed, fmt.Sprintf("%s (%d of %d seeds)", r.Scenario, r.Failures, r.Seeds))
		} else {
			passed = append(passed, r.Scenario)
		}
	}
	fmt.Fprintf(w, "\nsweep of %d scenarios: %d seeds in %.2fs\n", len(names)+len(skipped), seeds, elapsed.Seconds())
	if len(failed) > 0 {
		fmt.Fprintf(w, "  failed: %s\n", strings.Join(failed, ", "))
	}
	if len(passed) > 0 {
		fmt.Fprintf(w, "  passed: %s\n", strings.Join(passed, ", "))
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "  skipped (the -config settings do not suit them): %s\n", strings.Join(skipped, ", "))
	}
	if n := len(names) - len(results); n > 0 {
		fmt.Fprintf(w, "  not run (%s): %s\n", cut, strings.Join(names[len(results):], ", "))
	}
}

// signalStop stops a sweep at the first SIGINT or SIGTERM.
type signalStop struct {
	c    chan os.Signal
	done chan struct{}
	seen atomic.Bool
	mu   sync.Mutex
	st   *sweepState // the sweep a signal stops
}

// stopOnSignal stops st's workers taking seeds at the first SIGINT or
// SIGTERM, until release.
func stopOnSignal(st *sweepState) *signalStop {
	s := &signalStop{c: make(chan os.Signal, 1), done: make(chan struct{}), st: st}
	signal.Notify(s.c, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer close(s.done)
		if _, ok := <-s.c; ok {
			signal.Stop(s.c) // a second signal kills, as usual
			s.mu.Lock()
			s.seen.Store(true)
			st := s.st
			s.mu.Unlock()
			st.stop("interrupted")
		}
	}()
	return s
}

// watch makes a signal stop st from now on, in place of the sweep before
// it; st is stopped at once if a signal came already.
func (s *signalStop) watch(st *sweepState) {
	s.mu.Lock()
	s.st = st
	seen := s.seen.Load()
	s.mu.Unlock()
	if seen {
		st.stop("interrupted")
	}
}

// release stops listening for signals.
func (s *signalStop) release() {
	signal.Stop(s.c)
	close(s.c)
	<-s.done
}

// happened reports whether a signal stopped the sweep.
func (s *signalStop) happened() bool { return s.seen.Load() }

// jobsMax bounds -j. Each run is single-threaded and CPU-bound, so workers
// past the machine's cores add memory (a pool of goroutines each) and no
// speed; the bound is a fixed number, the same on every machine, and far
// above any core count a sweep runs on. Past it -j is refused rather than
// cut down: the worker count is part of the result, and -j 100000 is
// more likely a typo than a wish.
const jobsMax = 1024

// sweepFlags are the flags sweep and compare share: which seeds, on how
// many workers and in what budget, what share of them runs twice, and how
// the tally is shown.
type sweepFlags struct {
	seeds, det  string
	jobs        int
	budget      time.Duration
	seedTimeout time.Duration
	json, quiet bool
}

func (f *sweepFlags) register(fs *flag.FlagSet, seedsDoc, jsonDoc string) {
	fs.StringVar(&f.seeds, "seeds", "1-1000", seedsDoc+": a range A-B, a seed, or a list such as 1,5,9-12")
	fs.IntVar(&f.jobs, "j", min(runtime.GOMAXPROCS(0), jobsMax), fmt.Sprintf("runs in parallel (one per core), at most %d", jobsMax))
	fs.BoolVar(&f.json, "json", false, jsonDoc)
	fs.StringVar(&f.det, "check-determinism", "1%", "share of seeds run twice to check that their trace hashes agree, spread evenly over the seed numbers (1% runs seeds 100, 200, … twice; 0 none)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar, even on a terminal")
	registerSeedTimeout(fs, &f.seedTimeout)
	fs.DurationVar(&f.budget, "for", 0, "stop taking seeds once `DURATION` of wall time is spent (a CI budget): the result covers the seeds that ran, the first ones of -seeds (0: no budget)")
}

// check validates -j and -for and returns the share of seeds
// -check-determinism asks for.
func (f *sweepFlags) check() (checkShare, error) {
	if f.jobs < 1 {
		return 0, usagef("-j must be ≥ 1, got %d", f.jobs)
	}
	if f.jobs > jobsMax {
		return 0, usagef("-j must be at most %d (each run takes a core; more workers than cores add nothing), got %d", jobsMax, f.jobs)
	}
	if f.budget < 0 {
		return 0, usagef("-for must be ≥ 0 (0 means no budget), got %v", f.budget)
	}
	return parseCheckShare(f.det)
}

// progress returns a progress bar over n runs on a terminal, nil otherwise
// or when asked for quiet or JSON. Under a budget it counts runs without a
// total: how many fit is not known.
func (f *sweepFlags) progress(stderr io.Writer, n uint64, unit string) *progressbar.ProgressBar {
	if f.quiet || f.json || !isTerminal(stderr) {
		return nil
	}
	total := int64(n)
	if f.budget > 0 {
		total = -1
	}
	return newBar(stderr, total, unit)
}

// sweepState is the tally of a sweep in progress.
type sweepState struct {
	mu        sync.Mutex
	start     time.Time
	firstFail time.Duration // wall time until a failure was first seen; 0 if none
	failing   []uint64
	modes     map[string]*modeTally
	nondet    []uint64
	limited   uint64
	checked   uint64
	steps     atomic.Uint64
	workers   int
	elapsed   time.Duration
	firstErrs map[uint64]error
	// refusals makes a seed whose drawn configuration the settings made
	// invalid (refusedBySettings) a warning that tests nothing, counted in
	// refused, as a sweep tells it; compare keeps it a failure of its
	// variant, named by the engine's sentence, so that its seeds stay
	// paired.
	refusals bool
	refused  uint64
	sigs     map[uint64]string // failing seed → signature, kept for compare's paired tables; nil in a sweep
	warnings map[string]*warnTally
	reached  reachTally         // seeds that reached each situation
	targets  props.SituationSet // the situations to reach

	// A sweep may stop taking seeds early: after budget of wall time, or
	// once stopAfter failures are seen (zero: never). The seeds that ran
	// are then the first ones asked for: every seed taken is run to its
	// end.
	budget    time.Duration
	budgetOf  time.Duration // the whole -for, when budget is a scenario's share of it
	stopAfter uint64
	halt      atomic.Bool
	stopped   string  // why the sweep stopped early; "" when it ran every seed
	hung      bool    // a seed hung (-seed-timeout), which stopped the sweep
	requested seedSet // the seeds asked for
	ran       seedSet // the seeds that ran
}

// warnTally counts the seeds whose run gave a warning (sim.Result.Warnings):
// what the strategy could not do as asked, a misspelt starve prefix most
// often, which would otherwise pass as seeds that found nothing. Warnings
// that differ in their numbers alone (how many starvation windows a cap
// cut short) are one kind, told once in the first seed's words.
type warnTally struct {
	count     uint64
	firstSeed uint64
	text      string // the first seed's warning
}

// printWarnings writes a sweep's warnings to w, in the order of the seed
// that first gave each.
func (st *sweepState) printWarnings(w io.Writer, cmd string) {
	kinds := sortedKeys(st.warnings) // ties of first seed in the order of the kind
	sort.SliceStable(kinds, func(i, j int) bool { return st.warnings[kinds[i]].firstSeed < st.warnings[kinds[j]].firstSeed })
	for _, kind := range kinds {
		t := st.warnings[kind]
		fmt.Fprintf(w, "simrun %s: warning, in %d of %d seeds (first seed %d): %s\n", cmd, t.count, st.ran.n, t.firstSeed, t.text)
	}
}

type modeTally struct {
	count     uint64
	firstSeed uint64
	err       error
}

// sweepInto runs the seeds on st.workers goroutines, into the tally st
// (compare keeps each failing seed's signature in it). Each run is
// single-threaded and independent, so the sweep scales with cores; the
// tally does not depend on which worker ran which seed.
func sweepInto(st *sweepState, sp *spec, seeds seedSet, det checkShare, bar *progressbar.ProgressBar) *sweepState {
	if uint64(st.workers) > seeds.n { // a worker without a seed is not one
		st.workers = int(max(seeds.n, 1))
	}
	workers := st.workers
	strategy := sp.strategyOrDefault()
	// Workers take seeds one at a time, in order: a seed costs tens of
	// microseconds, so the shared counter is no cost, and a sweep that
	// stops early overshoots by at most a seed a worker.
	var next atomic.Uint64
	var wd *watchdog
	if sp.seedTimeout > 0 {
		wd = startWatchdog(sp.seedTimeout, workers)
		defer wd.stop()
	}
	exited := make(chan struct{}, workers)
	start := time.Now()
	st.start = start
	for w := 0; w < workers; w++ {
		go func() {
			pool := sim.NewPool() // this worker's runs reuse their goroutines
			defer pool.Close()
			if wd != nil {
				wd.own(w)
			}
			for !st.halt.Load() {
				i := next.Add(1) - 1
				if i >= seeds.n {
					break
				}
				seed := seeds.at(i)
				check := det.checks(seed)
				var token uint64
				if wd != nil {
					token = wd.begin(w, seed)
				}
				opts := sim.Options{Strategy: strategy, NoRecord: true, NoHash: true, CheckDeterminism: check, Pool: pool, Progress: wd.progress(w)}
				o := sp.runSeed(seed, opts)
				if st.refusals && o.failed() && sp.refusedBySettings(seed, &o, opts) { // its second run watched too
					o.res.Warnings = append(o.res.Warnings, sp.refusalWarning(o.err))
					o.err, o.refused = nil, true
				}
				if wd != nil && !wd.end(w, token) {
					return // reported as hung, and counted, by the watchdog
				}
				st.steps.Add(uint64(o.res.Steps))
				st.record(seed, &o, check)
				if bar != nil {
					bar.Add64(1)
				}
				if st.budget > 0 && time.Since(start) >= st.budget {
					st.stop(st.budgetWords())
				}
			}
			exited <- struct{}{}
		}()
	}
	var hung <-chan *sim.HangError
	if wd != nil {
		hung = wd.hung
	}
	// A hung worker cannot be stopped: its goroutine is left behind, and
	// the sweep stops, the hang counted as the failure of its seed.
	for alive := workers; alive > 0; alive-- {
		select {
		case <-exited:
		case h := <-hung:
			st.hung = true
			o := sp.hung(h, strategy)
			st.record(h.Seed, &o, false)
			st.stop(fmt.Sprintf("seed %d hung (-seed-timeout %v)", h.Seed, sp.seedTimeout))
		}
	}
	st.elapsed = time.Since(start)
	st.requested, st.ran = seeds, seeds
	if done := next.Load(); done < seeds.n {
		st.ran = seeds.slice(0, done)
	} else {
		st.stopped = "" // it stopped, but with every seed run
	}
	sort.Slice(st.failing, func(i, j int) bool { return st.failing[i] < st.failing[j] })
	sort.Slice(st.nondet, func(i, j int) bool { return st.nondet[i] < st.nondet[j] })
	return st
}

func (st *sweepState) record(seed uint64, o *outcome, checked bool) {
	var sig string
	if o.failed() { // outside the lock: the other workers' records wait on it
		sig = signature(o.err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if checked {
		st.checked++
	}
	if o.refused { // it tested nothing: its warning alone is told
		st.refused++
		st.warn(seed, o.res.Warnings)
		return
	}
	st.reached.add(seed, o.reached())
	st.warn(seed, o.res.Warnings)
	if !o.failed() {
		return
	}
	if sig == sigNondeterministic {
		st.nondet = append(st.nondet, seed)
	}
	if o.res.StepLimited() {
		st.limited++
	}
	if len(st.failing) == 0 {
		st.firstFail = time.Since(st.start)
	}
	st.failing = append(st.failing, seed)
	if st.stopAfter > 0 && uint64(len(st.failing)) == st.stopAfter {
		st.stopLocked(fmt.Sprintf("%d failure(s) seen (-stop-after)", st.stopAfter))
	}
	if st.sigs != nil {
		st.sigs[seed] = sig
	}
	m := st.modes[sig]
	if m == nil {
		m = &modeTally{firstSeed: seed, err: o.err}
		st.modes[sig] = m
	}
	m.count++
	if seed < m.firstSeed {
		m.firstSeed, m.err = seed, o.err
	}
}

// warn tallies the warnings of seed's run; st.mu is held.
func (st *sweepState) warn(seed uint64, warnings []string) {
	for _, text := range warnings {
		if st.warnings == nil {
			st.warnings = map[string]*warnTally{}
		}
		kind := sim.MaskDigits(text)
		t := st.warnings[kind]
		if t == nil {
			t = &warnTally{firstSeed: seed, text: text}
			st.warnings[kind] = t
		}
		t.count++
		if seed < t.firstSeed {
			t.firstSeed, t.text = seed, text
		}
	}
}

// budgetWords says that the budget ran out, and whose share it was.
func (st *sweepState) budgetWords() string { return budgetRanOut(st.budget, st.budgetOf) }

// budgetRanOut says that budget ran out: -for, or, when of is set, a
// scenario's share of of (budgetShare).
func budgetRanOut(budget, of time.Duration) string {
	if of > 0 {
		return fmt.Sprintf("its %v share of the %v budget (-for) ran out", budget, of)
	}
	return fmt.Sprintf("the %v budget (-for) ran out", budget)
}

// stop makes the workers take no more seeds, for the reason given first.
func (st *sweepState) stop(why string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.stopLocked(why)
}

func (st *sweepState) stopLocked(why string) {
	if st.stopped == "" {
		st.stopped = why
	}
	st.halt.Store(true)
}

func (st *sweepState) summary(sp *spec, shard string) sweepResult {
	r := sweepResult{
		Scenario: sp.scenario.Name, Strategy: sp.strategyOrDefault().String(), Engine: sp.engineName(),
		StepsMax: sp.stepsMax, Failpoints: sp.failpoints, Config: sp.configStrings(),
		SeedRange: st.ran.String(), Seeds: st.ran.n, Stopped: st.stopped, Failures: uint64(len(st.failing)), Refused: st.refused, StepLimited: st.limited,
		Seconds: st.elapsed.Seconds(), Workers: st.workers, Steps: st.steps.Load(), Determinism: st.checked,
		Nondetermined: st.nondet, Shard: shard, FailingSeeds: st.failing,
	}
	if st.stopped != "" {
		r.Requested = st.requested.String()
	}
	if r.FailingSeeds == nil {
		r.FailingSeeds = []uint64{}
	}
	st.reached.summarize(&r, st.targets)
	if len(r.FailingSeeds) > failingSeedsMax {
		r.FailingSeeds, r.Truncated = r.FailingSeeds[:failingSeedsMax], true
	}
	if r.Seconds > 0 {
		r.SeedsPerSec = float64(r.Seeds) / r.Seconds
	}
	rate := triage.Rate{K: int(r.Failures), N: int(r.tested())}
	r.Rate = rate.P()
	r.CI95[0], r.CI95[1] = rate.CI95()
	r.UpperBound = rate.UpperBound()
	if len(st.failing) > 0 {
		f := st.failing[0]
		r.FirstFailure = &f
		secs := st.firstFail.Seconds()
		r.FirstFailSecs = &secs
	}
	for _, sig := range sortedKeys(st.modes) {
		m := st.modes[sig]
		mr := triage.Rate{K: int(m.count), N: int(r.tested())}
		sm := sweepMode{Signature: sig, Count: m.count, Rate: mr.P(), FirstSeed: m.firstSeed, Error: firstLine(m.err.Error())}
		errors.As(m.err, &sm.hang)
		sm.CI95[0], sm.CI95[1] = mr.CI95()
		r.Modes = append(r.Modes, sm)
		if r.FirstFailure != nil && m.firstSeed == *r.FirstFailure {
			r.Error = m.err.Error()
		}
	}
	sortModes(r.Modes)
	if r.Modes == nil {
		r.Modes = []sweepMode{}
	}
	return r
}

// printHangs writes the whole error of each mode whose first seed hung, with
// the stack of the task that held the baton: the summary gives its first
// line only.
func printHangs(w io.Writer, cmd string, modes []sweepMode) {
	for _, m := range modes {
		if m.hang != nil {
			fmt.Fprintf(w, "simrun %s: %s\n", cmd, m.hang.Error())
		}
	}
}

// sortModes orders modes by count, most first, then by first seed.
func sortModes(ms []sweepMode) {
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].Count != ms[j].Count {
			return ms[i].Count > ms[j].Count
		}
		return ms[i].FirstSeed < ms[j].FirstSeed
	})
}

func printSweep(w io.Writer, sp *spec, r *sweepResult) {
	fmt.Fprintf(w, "sweep %s: strategy %s, %s, seeds %s", r.Scenario, r.Strategy, engineWords(r.Engine, r.Config, sp.armed(r.Failpoints)), r.SeedRange)
	if r.Requested != "" {
		fmt.Fprintf(w, " of %s", r.Requested)
	}
	if r.Shard != "" {
		fmt.Fprintf(w, " (shard %s)", r.Shard)
	}
	fmt.Fprintln(w)
	if r.Stopped != "" {
		fmt.Fprintf(w, "  stopped early: %s; the result covers only the seeds that ran\n", r.Stopped)
	}
	fmt.Fprintf(w, "  %d seeds in %.2fs: %.0f seeds/s with %d worker(s), %.0f steps a seed\n",
		r.Seeds, r.Seconds, r.SeedsPerSec, r.Workers, float64(r.Steps)/float64(max(r.Seeds, 1)))
	rate := triage.Rate{K: int(r.Failures), N: int(r.tested())}
	if r.Refused > 0 {
		fmt.Fprintf(w, "  %d of them ran nothing: the engine refused the configuration each drew with the -config settings (the warning above); the rates leave them out\n", r.Refused)
	}
	fmt.Fprintf(w, "  failures: %s\n", rate)
	if r.StepLimited > 0 {
		fmt.Fprintf(w, "  of which %d hit the step limit (a livelock or an overlong run, not a property failure)\n", r.StepLimited)
	}
	if r.FirstFailure != nil {
		fmt.Fprintf(w, "  first failing seed: %d", *r.FirstFailure)
		if r.FirstFailSecs != nil {
			fmt.Fprintf(w, " (a failure was first seen after %v)", time.Duration(*r.FirstFailSecs*float64(time.Second)).Round(time.Microsecond))
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    %s\n", indent(firstLine(r.Error), "    "))
		fmt.Fprintf(w, "    replay: %s\n", r.Replay)
		if run := sp.runCommand(*r.FirstFailure, r.Strategy); run != r.Replay {
			fmt.Fprintf(w, "    or run: %s\n", run)
		}
	}
	if len(r.Modes) > 0 {
		fmt.Fprintf(w, "  failure modes (%d):\n", len(r.Modes))
		for _, m := range r.Modes {
			mr := triage.Rate{K: int(m.Count), N: int(r.tested())}
			fmt.Fprintf(w, "    %s  %s\n      first seed %d: %s\n", mr, m.Signature, m.FirstSeed, m.Replay)
		}
	}
	printReached(w, r)
	if r.Determinism > 0 {
		if len(r.Nondetermined) == 0 {
			fmt.Fprintf(w, "  determinism: %d seeds run twice, the same trace hash, situations and outcome both times\n", r.Determinism)
		} else {
			fmt.Fprintf(w, "  determinism: %d seeds run twice, %d ran differently: %v\n", r.Determinism, len(r.Nondetermined), r.Nondetermined)
		}
	}
}

// sweepJUnitCases are a sweep's JUnit cases: the sweep, a case per failing
// seed, and what fell short of its targets.
func sweepJUnitCases(sp *spec, r *sweepResult, st *sweepState, minReached uint64) []triage.JUnitCase {
	var cases []triage.JUnitCase
	for _, seed := range r.FailingSeeds {
		name := fmt.Sprintf("seed %d", seed)
		failure := "failed"
		out := sp.runCommand(seed, r.Strategy)
		for _, m := range r.Modes {
			if m.FirstSeed == seed {
				failure = m.Error
				out = m.Replay + "\n" + out
			}
		}
		cases = append(cases, triage.JUnitCase{Name: name, Classname: "simrun." + r.Scenario, Failure: failure, Output: "replay: " + out})
	}
	summary := triage.JUnitCase{Name: fmt.Sprintf("sweep %s", r.SeedRange), Classname: "simrun." + r.Scenario,
		Time:   time.Duration(r.Seconds * float64(time.Second)),
		Output: fmt.Sprintf("%d seeds, %d failures, strategy %s, %s", r.Seeds, r.Failures, r.Strategy, engineWords(r.Engine, r.Config, r.Failpoints))}
	if r.Failures > 0 {
		summary.Failure = fmt.Sprintf("%d of %d seeds failed", r.Failures, r.Seeds)
	}
	// A case per failing seed is bounded as the JSON list is: a sweep of a
	// broken build fails on most of a million seeds. One more case says
	// how many were left out, so that the report does not pass them over.
	if left := r.Failures - uint64(len(r.FailingSeeds)); left > 0 {
		rest := st.failing[len(r.FailingSeeds):]
		cases = append(cases, triage.JUnitCase{Name: fmt.Sprintf("%d more failing seeds", left), Classname: "simrun." + r.Scenario,
			Failure: fmt.Sprintf("%d more seeds failed, from seed %d to seed %d: this report lists the first %d failing seeds, a case each",
				left, rest[0], rest[len(rest)-1], len(r.FailingSeeds)),
			Output: "sweep a narrower -seeds range to list them"})
	}
	// A target too few seeds reached fails the sweep (-min-reached): a
	// case says so, so that the report does not pass it over either.
	cases = append(cases, reachCases(r, minReached, "", "simrun."+r.Scenario)...)
	return append([]triage.JUnitCase{summary}, cases...)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
