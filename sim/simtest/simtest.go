package simtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmdst/llmdst/internal/shell"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
	"github.com/llmdst/llmdst/timeline"
	"github.com/llmdst/llmdst/triage"
)

// The environment a failure's command sets, and a nightly job may.
const (
	// SeedEnv runs the one seed it names, and not the saved schedules.
	SeedEnv = "LLMDST_SIM_SEED"
	// SeedsEnv sets how many seeds run, over Config.Seeds.
	SeedsEnv = "LLMDST_SIM_SEEDS"
	// FirstSeedEnv sets the seed the seeds start at, over
	// Config.FirstSeed: a nightly job that sets it from the date sweeps
	// seeds no earlier night swept. The default strategies are still those
	// of Config.FirstSeed's runs, so a failing seed's command, which names
	// its seed and strategy, runs it alone as it ran.
	FirstSeedEnv = "LLMDST_SIM_FIRST_SEED"
	// StrategyEnv runs every seed under the one strategy it names, in
	// simrun's -strategy syntax.
	StrategyEnv = "LLMDST_SIM_STRATEGY"
	// DrawsEnv, with SeedEnv, has the seed's run follow these draws
	// (sim.Draws, as a walk of Config.Explore and a hang in one name
	// them: "24:2,25:5") in place of its strategy's draws from the seed:
	// the schedule the walk ran.
	DrawsEnv = "LLMDST_SIM_DRAWS"
	// OutEnv is where failing runs are drawn when Config.OutDir is "".
	OutEnv = "LLMDST_SIM_OUT"
)

// The keys of a saved schedule's meta that name its test and the command
// that runs the test (with "seed", "strategy" and "signature").
const (
	MetaTest    = "test"
	MetaCommand = "command"
)

// Defaults.
const (
	DefaultSeeds      = 1000
	DefaultShortSeeds = 100 // with go test -short
	// DefaultStarved is how many of the program's task names the default
	// strategies starve, each a strategy of its own.
	DefaultStarved = 6
	// DefaultDeterminismEvery: one seed in this many runs twice.
	DefaultDeterminismEvery = 100
	DefaultShrinkTime       = 30 * time.Second
	// DefaultExploreRunsMax bounds each walk of Config.Explore.
	DefaultExploreRunsMax = 100_000
	DefaultHangAfter      = time.Minute
	// DefaultDir is where failing schedules are saved, under the package
	// of the test, as rapid and go test -fuzz keep theirs.
	DefaultDir = "testdata/simtest"
	// TraceLines is how much of the failing run's trace a report shows.
	TraceLines = 40
)

// Config says what Check runs. Its zero value is a sweep of the defaults.
type Config struct {
	// Seeds is how many seeds run, from FirstSeed on: 0 means
	// DefaultSeeds, or DefaultShortSeeds with go test -short. SeedsEnv
	// overrides it.
	Seeds     int
	FirstSeed uint64
	// Strategies are what the seeds take turns at, in simrun's -strategy
	// syntax ("random", "pct:3", "chaos", "starve:PREFIX"): seed s runs
	// under Strategies[s % len(Strategies)]. Nil means random, pct:3,
	// chaos and a starve:NAME for each of the first DefaultStarved task
	// names that runs of FirstSeed under those three start ("main"
	// included: a starved caller is how many races show).
	Strategies []string
	// Targets are situations (task.Reach) that some seed must reach. A
	// sweep that passes proves something of a race only if it went where
	// the race is: Check fails when a target was never reached.
	Targets []string
	// Options are every run's: StepsMax, Debug, HangAfter (0 means
	// DefaultHangAfter here) and the rest. Check sets Seed, Strategy,
	// NoRecord, NoHash, CheckDeterminism, Trace and Pool itself, and
	// Repanic is not honoured; a Chooser is refused (rapid with
	// props.RapidChooser draws schedules from a test case).
	Options sim.Options
	// Workers run seeds side by side: 0 means GOMAXPROCS. What Check
	// reports does not depend on it: a failure is the lowest failing seed.
	Workers int
	// DeterminismEvery runs the first seed and one seed in this many twice
	// and compares the runs (sim.Options.CheckDeterminism): a program that
	// reads the wall clock, iterates a map into a decision or keeps state
	// between runs cannot be replayed. 0 means DefaultDeterminismEvery, a
	// negative value never.
	DeterminismEvery int
	// ShrinkRunsMax bounds the runs that shrink a failing schedule: 0
	// means sim.DefaultShrinkRunsMax, a negative value no shrinking.
	// ShrinkTime bounds them in wall time: 0 means DefaultShrinkTime.
	ShrinkRunsMax int
	ShrinkTime    time.Duration
	// OutDir is where the failing run is drawn as a timeline page and
	// written as a Perfetto trace, under simtest-TEST: not under testdata,
	// as they are not to be committed. "" means $LLMDST_SIM_OUT, or the
	// system's temporary directory; "-" writes neither.
	OutDir string
	// Highlight picks the annotations (sim.Note) the timeline draws in
	// red, as timeline.Options.Highlight; nil highlights none.
	Highlight func(sim.Annotation) bool
	// Explore, above 0, has FirstSeed run first under every schedule
	// within that many departures from the calm one (sim.Explore), once
	// for each of Strategies whose draws can be walked (random, chaos,
	// starve:NAME; not pct), on the workers: for a program small enough,
	// every interleaving within the bound instead of a sample of them. A
	// failing schedule is reported as a seed is, shrunk, saved and drawn,
	// and the seeds do not run. ExploreRunsMax bounds each walk (0 means
	// DefaultExploreRunsMax); Summary.Walks and the log say which walks
	// were complete. SeedEnv, which runs one seed, skips the walks.
	Explore        int
	ExploreRunsMax int
	// Dir holds the failing schedules, one directory per test: a failure
	// is saved there, and every Check runs the schedules saved for its
	// test before any seed, so that an interleaving found once stays a
	// test until it passes (commit them, as rapid's fail files). ""
	// means DefaultDir; "-" neither saves nor reads.
	Dir string
}

// Summary is what Check ran and found.
type Summary struct {
	// Seeds is how many seeds ran (after a failure, the workers stop at
	// different seeds: the count depends on them, the failure does not);
	// Saved how many saved schedules ran before them.
	Seeds, Saved int
	// Strategies are those the seeds took turns at.
	Strategies []string
	// Reached counts the seeds that reached each situation (task.Reach).
	Reached map[string]int
	// Walks are the walks of Config.Explore, one per strategy walked.
	Walks []Walk
	// Failure is the failure Check reported, nil when it reported none.
	Failure *Failure
	// Log is the line Check logs when the seeds ran without a failure:
	// which seeds, strategies, saved schedules, targets reached, how long.
	Log string
}

// Walk is one walk of Config.Explore: the schedules of FirstSeed within
// the bound under one strategy.
type Walk struct {
	Strategy string
	// Runs are the schedules run; Complete is set when they were every one
	// within the bound and all passed.
	Runs     int
	Complete bool
}

// Failure is a failing run, as Check reports it.
type Failure struct {
	// Seed and Strategy are the run's; Err its error, Signature its
	// failure mode (sim.Signature), Steps its decisions.
	Seed      uint64
	Strategy  string
	Err       error
	Signature string
	Steps     int64
	// SavedFrom is the saved schedule that failed again, "" for a seed.
	SavedFrom string
	// Explored is set when a walk of Config.Explore found the failure: its
	// schedule is the walk's, not the seed's own under Strategy. Draws
	// are then the walk's schedule, as they are DrawsEnv's when it ran;
	// nil otherwise.
	Explored bool
	Draws    sim.Draws
	// Schedule is the failing run's, shrunk when Shrunk is set, nil when
	// the failure could not be recorded (a run that differs from itself).
	Schedule *sim.Schedule
	Shrunk   bool
	Shrink   sim.ShrinkStats
	// ShrinkErr is why the schedule was not shrunk, nil when it was or
	// shrinking is off.
	ShrinkErr error
	// File is where Schedule was saved, "" when it was not; SaveErr why
	// saving it failed.
	File    string
	SaveErr error
	// Timeline and Perfetto are the failing run drawn (timeline.Write)
	// and as a Perfetto trace, under Config.OutDir; "" when not written,
	// OutErr saying why when writing failed.
	Timeline, Perfetto string
	OutErr             error
	// Command runs the failing seed again.
	Command string

	// The run of Schedule again with its trace kept (view): its error,
	// its last TraceLines events as text, and how many came before them.
	viewErr error
	tail    string
	cut     int
}

// tag names f's files after the seed: its strategy, and "-explored" when a
// walk found it, so that its files are not taken for the seed's own.
func (f *Failure) tag() string {
	if f.Explored {
		return f.Strategy + "-explored"
	}
	return f.Strategy
}

// which names the run Schedule is, for the report.
func (f *Failure) which() string {
	if f.Shrunk {
		return "shrunk"
	}
	return "failing"
}

// Check runs program under the simulator over many seeds, as a part of t,
// and fails t (t.Error: it returns, and Summary.Failure says what failed)
// with the lowest failing seed: its error, the command that
// runs it again, its schedule shrunk to the fewest preemptions that still
// fail the same way (saved to Config.Dir, and run first from then on) and
// the end of that run's trace. Without a failure it fails t when a target
// was never reached, and logs what ran. Bad configuration fails t before
// anything runs, saying what was wrong.
//
// The program must build all its state afresh (sim's duties, see package
// sim): Check runs it many times, some seeds twice to check that.
func Check(t testing.TB, cfg Config, program func(rt task.Runtime) error) Summary {
	t.Helper()
	sum, err := run(t.Name(), cfg, program, callerPackage(t.Name()))
	if sum.Log != "" {
		t.Logf("%s", sum.Log)
	}
	if err != nil {
		t.Errorf("%s", err)
	}
	return sum
}

// Run is Check outside a test, under the name of the test it stands for
// (the saved schedules' directory, the command): its error is the text
// Check fails a test with, nil when Check would pass.
func Run(name string, cfg Config, program func(rt task.Runtime) error) (Summary, error) {
	return run(name, cfg, program, callerPackage(name))
}

func run(name string, cfg Config, program func(rt task.Runtime) error, pkg string) (Summary, error) {
	c, err := newChecker(name, cfg, program, pkg)
	if err != nil {
		return Summary{}, fmt.Errorf("simtest: %v", err)
	}
	start := time.Now()
	f, err := c.runSaved()
	if err == nil && f == nil {
		f, err = c.explore()
	}
	if err != nil {
		return c.sum, fmt.Errorf("simtest: %v", err)
	}
	if f == nil {
		f = c.runSeeds()
	}
	if f != nil {
		c.sum.Failure = f
		c.view(f)
		return c.sum, errors.New(c.report(f))
	}
	c.sum.Log = fmt.Sprintf("simtest: %s; in %v", c.describe(), time.Since(start).Round(time.Millisecond))
	var missed []string
	if c.seed == nil { // one seed need not reach them
		for _, target := range c.cfg.Targets {
			if c.sum.Reached[target] == 0 {
				missed = append(missed, strconv.Quote(target))
			}
		}
	}
	if len(missed) > 0 {
		return c.sum, fmt.Errorf("simtest: no seed of %d reached %s: the seeds that passed never went where the targets are, so they prove nothing of them (more seeds, or other strategies)", c.sum.Seeds, strings.Join(missed, ", "))
	}
	return c.sum, nil
}

// checker is one Check.
type checker struct {
	name    string
	pkg     string
	cfg     Config
	program func(rt task.Runtime) error
	seed    *uint64   // SeedEnv's
	draws   sim.Draws // DrawsEnv's, nil without it
	first   uint64    // Config.FirstSeed, before FirstSeedEnv and SeedEnv
	strats  []sim.Strategy
	dir     string // this test's saved schedules, "" for none
	out     string // where failing runs are drawn, "" for nowhere
	sum     Summary
}

// seedFromEnv reads a seed from the variable name: ok is false when it is
// not set, and an error says so when it holds no seed.
func seedFromEnv(name string) (seed uint64, ok bool, err error) {
	v, ok := os.LookupEnv(name)
	if !ok {
		return 0, false, nil
	}
	seed, err = strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s=%q: not a seed (an unsigned integer)", name, v)
	}
	return seed, true, nil
}

func newChecker(name string, cfg Config, program func(rt task.Runtime) error, pkg string) (*checker, error) {
	c := &checker{name: name, pkg: pkg, cfg: cfg, program: program, first: cfg.FirstSeed}
	if program == nil {
		return nil, errors.New("the program is nil")
	}
	if cfg.Options.Chooser != nil {
		return nil, errors.New("Config.Options.Chooser is set: Check draws each seed's decisions from the seed (for a chooser of your own, run sim.Run under rapid with props.RapidChooser)")
	}
	if cfg.Seeds < 0 {
		return nil, fmt.Errorf("Config.Seeds is %d: it is a count of seeds, 0 for the default", cfg.Seeds)
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("Config.Workers is %d: it is a count of workers, 0 for GOMAXPROCS", cfg.Workers)
	}
	if cfg.Explore < 0 {
		return nil, fmt.Errorf("Config.Explore is %d: it is a count of departures, 0 for no walk", cfg.Explore)
	}
	if cfg.ExploreRunsMax < 0 {
		return nil, fmt.Errorf("Config.ExploreRunsMax is %d: it is a count of schedules, 0 for the default", cfg.ExploreRunsMax)
	}
	if c.cfg.ExploreRunsMax == 0 {
		c.cfg.ExploreRunsMax = DefaultExploreRunsMax
	}
	if c.cfg.Seeds == 0 {
		c.cfg.Seeds = DefaultSeeds
		if testing.Testing() && testing.Short() {
			c.cfg.Seeds = DefaultShortSeeds
		}
	}
	if v, ok := os.LookupEnv(SeedsEnv); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s=%q: not a count of seeds (a positive integer)", SeedsEnv, v)
		}
		c.cfg.Seeds = n
	}
	if s, ok, err := seedFromEnv(FirstSeedEnv); err != nil {
		return nil, err
	} else if ok {
		c.cfg.FirstSeed = s
	}
	if s, ok, err := seedFromEnv(SeedEnv); err != nil {
		return nil, err
	} else if ok {
		c.seed = &s
		c.cfg.FirstSeed, c.cfg.Seeds = s, 1
	}
	if c.cfg.Seeds > 0 && c.cfg.FirstSeed+uint64(c.cfg.Seeds-1) < c.cfg.FirstSeed {
		return nil, fmt.Errorf("Config.FirstSeed (or %s) %d and %d seeds run past the largest seed", FirstSeedEnv, c.cfg.FirstSeed, c.cfg.Seeds)
	}
	if v, ok := os.LookupEnv(StrategyEnv); ok {
		c.cfg.Strategies = []string{v}
	}
	if v, ok := os.LookupEnv(DrawsEnv); ok {
		if c.seed == nil {
			return nil, fmt.Errorf("%s=%q needs %s: draws are a schedule of one seed", DrawsEnv, v, SeedEnv)
		}
		d, err := sim.ParseDraws(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %v", DrawsEnv, v, err)
		}
		c.draws = d
	}
	if c.cfg.Workers == 0 {
		c.cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if c.cfg.DeterminismEvery == 0 {
		c.cfg.DeterminismEvery = DefaultDeterminismEvery
	}
	if c.cfg.ShrinkTime <= 0 {
		c.cfg.ShrinkTime = DefaultShrinkTime
	}
	if c.cfg.Options.HangAfter == 0 {
		c.cfg.Options.HangAfter = DefaultHangAfter
	}
	c.cfg.Options.Repanic, c.cfg.Options.Pool, c.cfg.Options.Trace = false, nil, false
	switch cfg.Dir {
	case "-":
	case "":
		c.dir = filepath.Join(DefaultDir, fileName(name))
	default:
		c.dir = filepath.Join(cfg.Dir, fileName(name))
	}
	switch c.out = cfg.OutDir; c.out {
	case "-":
		c.out = ""
	case "":
		if c.out = os.Getenv(OutEnv); c.out == "" {
			c.out = os.TempDir()
		}
	}
	if c.cfg.Strategies == nil {
		c.cfg.Strategies = c.defaultStrategies()
	}
	if len(c.cfg.Strategies) == 0 {
		return nil, errors.New("Config.Strategies is empty: name one at least, or leave it nil for the defaults")
	}
	for _, s := range c.cfg.Strategies {
		st, err := sim.ParseStrategy(s)
		if err != nil {
			return nil, fmt.Errorf("strategy %q: %v", s, err)
		}
		if c.draws != nil {
			if err := (sim.ExploreOptions{Options: sim.Options{Strategy: st}}).Check(); err != nil {
				return nil, fmt.Errorf("%s with strategy %q: %v", DrawsEnv, s, err)
			}
		}
		c.strats = append(c.strats, st)
	}
	c.sum.Strategies = slices.Clone(c.cfg.Strategies)
	c.sum.Reached = map[string]int{}
	return c, nil
}

// defaultStrategies are random, pct:3, chaos and the starving of each of
// the first DefaultStarved task names the program starts, in the order
// first started over three runs of Config.FirstSeed, one under each of
// the others (a task some interleavings start and others do not is found
// more often): the same runs whatever seed SeedEnv names, so that a seed
// runs under the same strategy alone as in the sweep.
func (c *checker) defaultStrategies() []string {
	out := []string{"random", "pct:3", "chaos"}
	var names []string
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()} {
		res := c.run(c.first, st, func(o *sim.Options) { o.NoHash = true })
		if res.Schedule == nil {
			continue
		}
		for _, n := range res.Schedule.Tasks {
			if !slices.Contains(names, n) && len(names) < DefaultStarved {
				names = append(names, n)
			}
		}
	}
	for _, n := range names {
		if n == "" {
			continue // no prefix to starve by: chaos starves every task
		}
		out = append(out, sim.Starve(n).String()) // reads back whatever colons n holds
	}
	return out
}

// run runs the program once with the configured options, seed and
// strategy, adjusted by set.
func (c *checker) run(seed uint64, st sim.Strategy, set func(o *sim.Options)) sim.Result {
	o := c.cfg.Options
	o.Seed, o.Strategy = seed, st
	if set != nil {
		set(&o)
	}
	return sim.Run(o, c.program)
}

func (c *checker) strategyOf(seed uint64) (sim.Strategy, string) {
	i := seed % uint64(len(c.strats))
	return c.strats[i], c.cfg.Strategies[i]
}

// runSaved runs the schedules saved for the test, in the order of their
// names, and returns the first that fails again.
func (c *checker) runSaved() (*Failure, error) {
	if c.dir == "" || c.seed != nil {
		return nil, nil
	}
	files, err := filepath.Glob(filepath.Join(c.dir, "*.schedule"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		s, err := sim.ParseSchedule(string(text))
		if err != nil {
			return nil, fmt.Errorf("saved schedule %s: %v (remove the file if it is not one)", file, err)
		}
		v, _ := s.Get("seed")
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("saved schedule %s: its seed %q is not a seed (an unsigned integer)", file, v)
		}
		strategy, _ := s.Get("strategy")
		c.sum.Saved++
		// Guided, not Replay: the code has changed since, and a run that
		// leaves the schedule goes on with calm decisions rather than
		// stopping at the first difference.
		res := c.run(seed, sim.Guided(s), nil)
		if res.Err != nil {
			return &Failure{Seed: seed, Strategy: strategy, Err: res.Err, Signature: sim.Signature(res.Err), Steps: res.Steps,
				SavedFrom: file, Schedule: s, Command: c.command(nil)}, nil
		}
	}
	return nil, nil
}

// runSeeds runs the seeds on the workers and returns the lowest failing
// one, shrunk and saved.
func (c *checker) runSeeds() *Failure {
	first, n := c.cfg.FirstSeed, uint64(c.cfg.Seeds)
	var next atomic.Uint64
	var lowest atomic.Uint64 // the lowest failing seed's offset + 1; 0: none
	var mu sync.Mutex
	var failed *sim.Result
	ran := 0
	workers := min(c.cfg.Workers, c.cfg.Seeds)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			pool := sim.NewPool()
			defer pool.Close()
			reached := map[string]int{}
			count := 0
			for {
				i := next.Add(1) - 1
				if i >= n {
					break
				}
				if l := lowest.Load(); l != 0 && i >= l-1 {
					break
				}
				seed := first + i
				st, _ := c.strategyOf(seed)
				twice := c.cfg.DeterminismEvery > 0 && i%uint64(c.cfg.DeterminismEvery) == 0
				res := c.run(seed, st, func(o *sim.Options) {
					o.NoRecord, o.NoHash, o.Pool = true, !twice, pool
					o.CheckDeterminism = twice
					c.follow(o)
				})
				count++
				for _, r := range res.Reached {
					reached[r]++
				}
				if res.Err == nil {
					continue
				}
				mu.Lock()
				if l := lowest.Load(); l == 0 || i+1 < l {
					lowest.Store(i + 1)
					failed = &res
				}
				mu.Unlock()
			}
			mu.Lock()
			ran += count
			for r, k := range reached {
				c.sum.Reached[r] += k
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	c.sum.Seeds = ran
	if failed == nil {
		return nil
	}
	return c.failure(*failed)
}

// failure records, shrinks and saves a seed's failure found with neither
// record nor hash.
func (c *checker) failure(found sim.Result) *Failure {
	seed := found.Seed
	st, name := c.strategyOf(seed)
	f := &Failure{Seed: seed, Strategy: name, Draws: c.draws, Err: found.Err, Signature: sim.Signature(found.Err), Steps: found.Steps}
	f.Command = c.command(f)
	var nd *sim.NondeterminismError
	if errors.As(found.Err, &nd) {
		return f // no run of it would be the run that failed
	}
	res := c.run(seed, st, c.follow)
	if sim.Signature(res.Err) != f.Signature {
		f.Err = fmt.Errorf("%w\n(and when run again to record its schedule it ended otherwise, with %v: the program is not deterministic)", found.Err, res.Err)
		return f
	}
	c.keep(f, res)
	return f
}

// explore makes the walks of Config.Explore, one strategy after another,
// and returns the first failure, shrunk and saved.
func (c *checker) explore() (*Failure, error) {
	if c.cfg.Explore == 0 || c.seed != nil {
		return nil, nil
	}
	seed := c.cfg.FirstSeed
	for i, st := range c.strats {
		opts := sim.ExploreOptions{Options: c.cfg.Options, Delays: c.cfg.Explore, MaxRuns: c.cfg.ExploreRunsMax, Workers: c.cfg.Workers}
		opts.Seed, opts.Strategy = seed, st
		opts.NoRecord, opts.CheckDeterminism = false, false // a walk checks its runs itself
		if opts.Check() != nil {
			continue // pct: its draws are priorities, not a walk's
		}
		res, err := sim.Explore(context.Background(), opts, c.program)
		name := c.cfg.Strategies[i]
		c.sum.Walks = append(c.sum.Walks, Walk{Strategy: name, Runs: res.Runs, Complete: res.Complete})
		if err != nil {
			return nil, fmt.Errorf("exploring seed %d under %s: %v", seed, name, err)
		}
		if res.Failed != nil {
			r := *res.Failed
			// Its command is the test's, which runs the saved schedule
			// first; Draws run it alone (DrawsEnv).
			f := &Failure{Seed: seed, Strategy: name, Explored: true, Draws: res.Draws, Err: r.Err, Signature: sim.Signature(r.Err), Steps: r.Steps, Command: c.command(nil)}
			c.keep(f, r)
			return f, nil
		}
	}
	return nil, nil
}

// keep sets f's schedule from res, its recorded run, shrunk unless
// shrinking is off, and saves it as seed-N-TAG.schedule (f.tag).
func (c *checker) keep(f *Failure, res sim.Result) {
	seed := f.Seed
	f.Schedule = res.Schedule
	if c.cfg.ShrinkRunsMax >= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShrinkTime)
		defer cancel()
		test := func(o sim.Options) (sim.Result, bool) {
			r := c.run(seed, o.Strategy, func(run *sim.Options) {
				if o.StepsMax != 0 {
					run.StepsMax = o.StepsMax
				}
			})
			return r, sim.Signature(r.Err) == f.Signature
		}
		opts := sim.ShrinkOptions{RunsMax: c.cfg.ShrinkRunsMax}
		if res.StepLimited() {
			opts.StepsMax = res.Steps // the failure is the limit: keep it where it was
		}
		shrunk, stats, err := sim.Shrink(ctx, res.Schedule, test, opts)
		if err != nil {
			f.ShrinkErr = err
		} else {
			f.Schedule, f.Shrunk, f.Shrink = shrunk, true, stats
		}
	}
	f.Schedule.Set(MetaTest, c.name)
	f.Schedule.Set(MetaCommand, c.command(nil))
	f.Schedule.Set("seed", strconv.FormatUint(seed, 10))
	f.Schedule.Set("strategy", f.Strategy)
	f.Schedule.Set("signature", f.Signature)
	if c.dir != "" {
		file := filepath.Join(c.dir, fmt.Sprintf("seed-%d-%s.schedule", seed, fileName(f.tag())))
		f.SaveErr = os.MkdirAll(c.dir, 0o755)
		if f.SaveErr == nil {
			f.SaveErr = os.WriteFile(file, []byte(f.Schedule.String()), 0o644)
		}
		if f.SaveErr == nil {
			f.File = file
		}
	}
}

// report is the text a failure fails the test with.
func (c *checker) report(f *Failure) string {
	var b strings.Builder
	switch {
	case f.SavedFrom != "":
		fmt.Fprintf(&b, "simtest: the saved schedule %s (seed %d, strategy %s) fails again after %d decisions:\n", f.SavedFrom, f.Seed, f.Strategy, f.Steps)
	case f.Explored:
		w := c.sum.Walks[len(c.sum.Walks)-1]
		fmt.Fprintf(&b, "simtest: seed %d failed (%d decisions) under a schedule %s of strategy %s's calm one, after %d schedules of it:\n", f.Seed, f.Steps, c.bound(), f.Strategy, w.Runs)
	default:
		fmt.Fprintf(&b, "simtest: seed %d failed (strategy %s, %d decisions), the lowest failing seed of %s:\n", f.Seed, f.Strategy, f.Steps, c.seeds())
	}
	fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(f.Err.Error(), "\n", "\n    "))
	if f.ShrinkErr != nil {
		fmt.Fprintf(&b, "not shrunk: %v\n", f.ShrinkErr)
	}
	if f.Shrunk {
		fmt.Fprintf(&b, "shrunk from %d preemptions and %d waits to %d and %d, %d decisions (%d runs)\n",
			f.Shrink.Before.Preemptions, f.Shrink.Before.Waits, f.Shrink.After.Preemptions, f.Shrink.After.Waits, f.Shrink.After.Decisions, f.Shrink.Runs)
	}
	switch {
	case f.SaveErr != nil:
		fmt.Fprintf(&b, "not saved: %v\n", f.SaveErr)
	case f.File != "":
		fmt.Fprintf(&b, "saved: %s; every run of %s runs it first from now on (commit it; remove it once it passes, or keep it as a regression test)\n", f.File, c.name)
	case f.SavedFrom != "":
		fmt.Fprintf(&b, "it stays first in every run of %s until it passes\n", c.name)
	}
	if f.Shrunk && f.viewErr != nil && f.viewErr.Error() != f.Err.Error() {
		fmt.Fprintf(&b, "the shrunk run fails the same way:\n    %s\n", strings.ReplaceAll(f.viewErr.Error(), "\n", "\n    "))
	}
	switch {
	case f.tail == "":
	case f.cut > 0:
		fmt.Fprintf(&b, "the last %d events of the %s run (%d before them):\n%s", TraceLines, f.which(), f.cut, f.tail)
	default:
		fmt.Fprintf(&b, "the %s run:\n%s", f.which(), f.tail)
	}
	switch {
	case f.OutErr != nil:
		fmt.Fprintf(&b, "no timeline: %v\n", f.OutErr)
	case f.Timeline != "":
		fmt.Fprintf(&b, "timeline: %s (a browser)\nperfetto: %s (ui.perfetto.dev)\n", f.Timeline, f.Perfetto)
	}
	fmt.Fprintf(&b, "again: %s", f.Command)
	return b.String()
}

// writeViews writes the traced run of f as a timeline page and as a
// Perfetto trace, under c.out.
func (c *checker) writeViews(f *Failure, res sim.Result) (html, perfetto string, err error) {
	dir := filepath.Join(c.out, "simtest-"+fileName(c.name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	base := filepath.Join(dir, fmt.Sprintf("seed-%d-%s", f.Seed, fileName(f.tag())))
	opts := timeline.Options{
		Title: fmt.Sprintf("%s seed %d, the %s run", c.name, f.Seed, f.which()),
		Header: []timeline.Field{{Key: "test", Value: c.name}, {Key: "seed", Value: strconv.FormatUint(f.Seed, 10)},
			{Key: "strategy", Value: f.Strategy}, {Key: "trace hash", Value: fmt.Sprintf("%016x", res.TraceHash)},
			{Key: "run again", Value: f.Command}},
		Highlight: c.cfg.Highlight,
	}
	if res.Err != nil {
		opts.Error = res.Err.Error()
	}
	write := func(file string, w func(io.Writer) error) error {
		var buf bytes.Buffer
		if err := w(&buf); err != nil {
			return err
		}
		return os.WriteFile(file, buf.Bytes(), 0o644)
	}
	html, perfetto = base+".html", base+".perfetto.json"
	if err := write(html, func(w io.Writer) error { return timeline.Write(w, res.Trace, opts) }); err != nil {
		return "", "", err
	}
	if err := write(perfetto, res.Trace.WritePerfetto); err != nil {
		return "", "", err
	}
	return html, perfetto, nil
}

// view runs f's schedule again with its trace kept, for the report: the
// end of the trace as text, and, under c.out, the whole run drawn as a
// timeline page and written as a Perfetto trace.
func (c *checker) view(f *Failure) {
	if f.Schedule == nil {
		return
	}
	res := c.run(f.Seed, sim.Guided(f.Schedule), func(o *sim.Options) { o.Trace = true })
	f.viewErr = res.Err
	if res.Trace == nil {
		return
	}
	var buf bytes.Buffer
	if res.Trace.WriteText(&buf) == nil {
		lines := strings.SplitAfter(strings.TrimRight(buf.String(), "\n"), "\n")
		if len(lines) > TraceLines {
			f.cut = len(lines) - TraceLines
			lines = lines[f.cut:]
		}
		f.tail = "    " + strings.Join(lines, "    ") + "\n"
	}
	if c.out != "" {
		f.Timeline, f.Perfetto, f.OutErr = c.writeViews(f, res)
	}
}

// describe says what the seeds were, once they passed.
func (c *checker) describe() string {
	var b strings.Builder
	// What passing seeds bound: the rate of the failure nobody saw.
	fmt.Fprintf(&b, "%s passed (failures %s); strategies %s", c.seeds(), triage.Rate{K: 0, N: c.sum.Seeds}, strings.Join(c.cfg.Strategies, " "))
	if c.sum.Saved > 0 {
		fmt.Fprintf(&b, "; %d saved schedule(s) first", c.sum.Saved)
	}
	if len(c.sum.Walks) > 0 {
		fmt.Fprintf(&b, "; seed %d first under every schedule %s:", c.cfg.FirstSeed, c.bound())
		for i, w := range c.sum.Walks {
			if i > 0 {
				b.WriteByte(',')
			}
			if w.Complete {
				fmt.Fprintf(&b, " %s all %d", w.Strategy, w.Runs)
			} else {
				fmt.Fprintf(&b, " %s cut at %d (ExploreRunsMax)", w.Strategy, w.Runs)
			}
		}
	}
	for _, target := range c.cfg.Targets {
		fmt.Fprintf(&b, "; %q reached by %d", target, c.sum.Reached[target])
	}
	return b.String()
}

// bound says in words which schedules Config.Explore walks.
func (c *checker) bound() string { return sim.ExploreOptions{Delays: c.cfg.Explore}.Bound() }

// seeds says which seeds were asked for.
func (c *checker) seeds() string {
	if c.seed != nil {
		return fmt.Sprintf("seed %d (%s)", *c.seed, SeedEnv)
	}
	if c.cfg.Seeds == 1 {
		return fmt.Sprintf("seed %d", c.cfg.FirstSeed)
	}
	return fmt.Sprintf("seeds %d-%d", c.cfg.FirstSeed, c.cfg.FirstSeed+uint64(c.cfg.Seeds-1))
}

// command is the command that runs f's seed again, or the test for a
// saved schedule (nil f).
func (c *checker) command(f *Failure) string {
	var parts []string
	for _, p := range strings.Split(c.name, "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	run := "go test -run '" + strings.Join(parts, "/") + "' " + c.pkg
	if f == nil {
		return run
	}
	env := fmt.Sprintf("%s=%d %s=%s", SeedEnv, f.Seed, StrategyEnv, shell.Quote(f.Strategy))
	if f.Draws != nil {
		env += fmt.Sprintf(" %s=%s", DrawsEnv, f.Draws)
	}
	return env + " " + run
}

// follow has a seed's run follow DrawsEnv's draws, when it is set.
func (c *checker) follow(o *sim.Options) {
	if c.draws != nil {
		o.Chooser = sim.FollowDraws(c.draws)
	}
}

// callerPackage is the import path of the package of the test named
// test, read off the calling goroutine's stack (see testPackage); "." when
// it cannot be told.
func callerPackage(test string) string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs) // from the caller of Check or Run
	frames := runtime.CallersFrames(pcs[:n])
	var funcs []string
	for {
		f, more := frames.Next()
		funcs = append(funcs, f.Function)
		if !more {
			break
		}
	}
	return testPackage(test, funcs)
}

// testPackage is the package of the first of funcs, innermost first, that
// is the test's own function or a closure in it: Check may be called
// through a helper of another package. Without one (Run under a name of
// its own), it is the package of the first of funcs; "." without funcs.
// An external test package's "_test" is dropped: go test takes the
// package's path.
func testPackage(test string, funcs []string) string {
	top, _, _ := strings.Cut(test, "/")
	first := ""
	for _, fn := range funcs {
		// "example.com/a/b_test.TestX.func1": the package ends at the
		// first dot after the last slash.
		slash := strings.LastIndex(fn, "/")
		dot := strings.Index(fn[slash+1:], ".")
		if dot < 0 {
			continue
		}
		pkg, sym := fn[:slash+1+dot], fn[slash+1+dot+1:]
		if sym == top || strings.HasPrefix(sym, top+".") {
			return strings.TrimSuffix(pkg, "_test")
		}
		if first == "" {
			first = pkg
		}
	}
	if first == "" {
		return "."
	}
	return strings.TrimSuffix(first, "_test")
}

// fileName makes s safe as one path element.
func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}
