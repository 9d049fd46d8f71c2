package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/shell"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/sim/simtest"
)

// spec is everything that decides a run but the seed: enough to run it
// again, and what a schedule file's meta carries.
type spec struct {
	scenario   *scenario.Scenario
	strategy   sim.Strategy // nil: the scenario's default
	legacy     bool
	stepsMax   int64
	failpoints []string // "name=terms", as -failpoint gives them
	// envFailpoints are GO_FAILPOINTS's specs of the catalogue, which
	// every run arms too, as "name=terms (GO_FAILPOINTS)": for the words
	// that name a run. A spec made from a merge's shards has none.
	envFailpoints []string
	// config are the -config settings, one per key, sorted by key; each
	// engine the scenario makes takes them over its own.
	config []engineSetting
	// pctDepth is D of a pct:D given without K, and pctSteps the K
	// estimateSteps took from this spec's runs (or another's, see
	// pctEstimate); 0 otherwise.
	pctDepth int
	pctSteps int64
	// seedTimeout is the wall time after which a run that has not ended is
	// reported as a hang (-seed-timeout); 0: never. It is no part of what
	// a run does.
	seedTimeout time.Duration
	// draws, when set (run -draws), are the draws a run follows in place
	// of drawing from its seed: a schedule explore ran.
	draws sim.Draws
	// metrics keeps each engine's counters of a run (run -metrics).
	metrics bool
}

// specFlags registers the flags every subcommand that runs scenarios has.
type specFlags struct {
	scenario   string
	strategy   string
	legacy     bool
	stepsMax   int64
	failpoints repeated
	config     repeated // "key=value", as -config gives them
	// pct is a step estimate already made for pct:D of this scenario
	// (compare's variant B takes A's); nil: estimate it.
	pct *pctEstimate
	// timeout is the command's -seed-timeout (no part of what a run
	// does, so not among these flags), which the runs spec makes to
	// check its settings take too; nil: its default.
	timeout *time.Duration
}

// pctEstimate is the K that estimateSteps gave pct:D for a scenario.
type pctEstimate struct {
	scenario string
	depth    int
	steps    int64
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func (f *specFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.scenario, "scenario", "", "the scenario to run (see simrun list)")
	fs.StringVar(&f.strategy, "strategy", "", "random, pct:D, pct:D:K, chaos[:MAX], starve:PREFIX[:MAX] or replay:FILE; default: the scenario's")
	fs.BoolVar(&f.legacy, "legacy", false, "run the legacy engine (LegacyIDRouting): the pre-fix engine of the founding race")
	fs.Int64Var(&f.stepsMax, "steps-max", 0, "scheduling decisions allowed per run; 0 means the simulator's default")
	fs.Var(&f.failpoints, "failpoint", "arm a failpoint in every run, as `NAME=TERMS` (repeatable; simrun list -failpoints shows them); GO_FAILPOINTS's specs, full names separated by \";\", are armed too")
	fs.Var(&f.config, "config", configHelp())
}

// specFlagNames are the names of the flags specFlags registers: what makes
// a run, which a schedule file records and a compare variant may set.
func specFlagNames() []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(specFlags).register(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// dashed writes flag names as a command line does.
func dashed(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "-" + n
	}
	return out
}

// usageError is bad input: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

func (f *specFlags) spec() (*spec, error) {
	if f.scenario == "" {
		return nil, usagef("-scenario is required: want one of %s", strings.Join(scenario.Names(), ", "))
	}
	sc, err := scenario.Lookup(f.scenario)
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	s := &spec{scenario: sc, legacy: f.legacy, stepsMax: f.stepsMax, failpoints: f.failpoints, seedTimeout: seedTimeoutDefault}
	if env, err := failpoints.EnvSpecs(); err == nil { // refused at start otherwise
		for _, e := range env {
			s.envFailpoints = append(s.envFailpoints, e+" (GO_FAILPOINTS)")
		}
	}
	if f.timeout != nil {
		s.seedTimeout = *f.timeout
	}
	if f.stepsMax < 0 {
		return nil, usagef("-steps-max must be ≥ 0, got %d", f.stepsMax)
	}
	if f.stepsMax > sim.ScheduleStepsMax {
		return nil, usagef("-steps-max must be at most %d, the most decisions a schedule file holds, got %d", int64(sim.ScheduleStepsMax), f.stepsMax)
	}
	if err := s.options(0).CheckFailpoints(); err != nil {
		return nil, &usageError{"-failpoint: " + err.Error()}
	}
	if s.config, err = parseConfig(f.config); err != nil {
		return nil, err
	}
	// The settings go over the scenario's own configuration: a
	// combination the engine's defaults refuse (kv-offload-blocks without
	// prefix caching) suits a scenario that sets the rest on every seed
	// (kv-offload turns prefix caching on), but not one that draws it
	// (pause-resume), whose seeds it would fail.
	if err := checkConfig(s.config); err != nil {
		u, refused := errors.AsType[*usageError](err)
		if !refused {
			return nil, err // no engine could start
		}
		if !s.takesSettings(takesSettingsSeeds) {
			return nil, &configRefused{*u} // a sweep of several skips the scenario
		}
	}
	if err := s.checkScenarioConfig(); err != nil {
		return nil, err
	}
	if f.strategy != "" {
		st, err := parseStrategy(f.strategy)
		if err != nil {
			return nil, err
		}
		if r, ok := st.(replayFile); ok {
			if err := s.checkRecorded(r); err != nil {
				return nil, err
			}
		}
		s.strategy = st
		if depth, ok := pctWithoutSteps(f.strategy); ok {
			var k int64
			if e := f.pct; e != nil && e.depth == depth && e.scenario == sc.Name {
				k = e.steps
			} else if k, err = s.estimateSteps(); err != nil {
				return nil, err
			}
			s.strategy, s.pctDepth, s.pctSteps = sim.PCTSteps(depth, k), depth, k
		}
	}
	return s, nil
}

// checkScenarioConfig runs the scenario's seed 1 with the -config settings
// and reports a configuration the engine refuses — the settings over the
// scenario's own (max-num-seqs=8 against a scenario's budget of 6 tokens a
// step) — as bad input rather than a failure of every seed; and so too
// settings under which the engine refuses the scenario's own requests
// (num-blocks=40 against abort-reuse's requests of 100,000 tokens), when
// seed 1 without them does not fail so. A scenario that draws its
// configuration or its requests from the seed (swarm) may still draw one
// that refuses the settings on other seeds: a sweep warns of each such
// seed and counts no failure (refusedBySettings).
func (s *spec) checkScenarioConfig() error {
	if len(s.config) == 0 {
		return nil
	}
	o, h := s.probe(1)
	if h != nil { // a hang is the runs' to report
		return nil
	}
	settings := strings.Join(settingStrings(s.config), " -config ")
	if errors.Is(o.err, engine.ErrInvalidConfig) {
		return &configRefused{usageError{fmt.Sprintf("-config %s: %s's own configuration with these settings is refused by the engine: %v",
			settings, s.scenario.Name, o.err)}}
	}
	if errors.Is(o.err, engine.ErrInvalidRequest) {
		plain := *s
		plain.config = nil
		if p, h := plain.probe(1); h == nil && !errors.Is(p.err, engine.ErrInvalidRequest) {
			return &configRefused{usageError{fmt.Sprintf("-config %s: %s's own requests are refused by the engine with these settings: %v",
				settings, s.scenario.Name, o.err)}}
		}
	}
	return nil
}

// probe runs seed under Random, unrecorded, to see what the settings do
// to it before anything else runs: its outcome, or its hang.
func (s *spec) probe(seed uint64) (outcome, *sim.HangError) {
	return runOne(s.seedTimeout, seed, func(progress *atomic.Int64) outcome {
		return s.runSeed(seed, sim.Options{Strategy: sim.Random(), NoRecord: true, NoHash: true, Progress: progress})
	})
}

// takesSettingsSeeds are the seeds takesSettings runs.
const takesSettingsSeeds = 16

// takesSettings reports whether the scenario's own configuration takes the
// -config settings on its first n seeds: the engine refuses none of them as
// invalid, and none hangs.
func (s *spec) takesSettings(n uint64) bool {
	for seed := uint64(1); seed <= n; seed++ {
		if o, h := s.probe(seed); h != nil || errors.Is(o.err, engine.ErrInvalidConfig) {
			return false
		}
	}
	return true
}

// configRefused is bad input: the -config settings do not suit the
// scenario. A sweep of several scenarios skips it and sweeps the others.
type configRefused struct{ usageError }

// pctWithoutSteps reports the depth of a pct:D strategy that leaves its
// step estimate to the default.
func pctWithoutSteps(name string) (depth int, ok bool) {
	d, ok := strings.CutPrefix(name, "pct:")
	if !ok || strings.Contains(d, ":") {
		return 0, false
	}
	depth, err := strconv.Atoi(d)
	return depth, err == nil
}

// calibrationSeeds is how many runs estimate PCT's step count.
const calibrationSeeds = 16

// estimateSteps estimates how many decisions a run of the spec takes, for
// pct:D, whose change points fall at random among the first K decisions: a
// K far past the runs' length puts them past their end, where they do
// nothing (the default of 1,000 against the ~150 of an abort-reuse run
// left pct:3 without a change point in most runs), and one far short of it
// never preempts the runs' later part. The estimate is the median length
// of seeds 1 to 16 under random: it depends on the scenario, engine,
// failpoints and step limit alone, not on the seeds a command runs, so a
// seed runs the same in a sweep and alone, and the strategy's name
// (pct:D:K) records it.
func (s *spec) estimateSteps() (int64, error) {
	steps := make([]int64, 0, calibrationSeeds)
	for seed := uint64(1); seed <= calibrationSeeds; seed++ {
		o, h := runOne(s.seedTimeout, seed, func(progress *atomic.Int64) outcome {
			return s.runSeed(seed, sim.Options{Strategy: sim.Random(), NoRecord: true, NoHash: true, Progress: progress})
		})
		if h != nil {
			return 0, fmt.Errorf("pct: estimating the runs' length, seed %d hung under random (%w); give the estimate as pct:D:K", seed, h)
		}
		steps = append(steps, o.res.Steps)
	}
	slices.Sort(steps)
	return max(steps[len(steps)/2], 1), nil
}

// replayFile is sim.Replay of a schedule file.
type replayFile struct {
	sim.Strategy
	file string
	sch  *sim.Schedule
}

// String names the strategy as -strategy takes it, so that a command
// printed to run a seed again replays the same file.
func (r replayFile) String() string { return "replay:" + r.file }

// parseStrategy adds replay:FILE to sim.ParseStrategy.
func parseStrategy(name string) (sim.Strategy, error) {
	if file, ok := strings.CutPrefix(name, "replay:"); ok {
		sch, err := readSchedule(file)
		if err != nil {
			return nil, err
		}
		return replayFile{Strategy: sim.Replay(sch), file: file, sch: sch}, nil
	}
	st, err := sim.ParseStrategy(name)
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	return st, nil
}

func (s *spec) strategyOrDefault() sim.Strategy {
	if s.strategy != nil {
		return s.strategy
	}
	st, err := sim.ParseStrategy(s.scenario.DefaultStrategy)
	if err != nil {
		panic("simrun: scenario " + s.scenario.Name + " has a bad default strategy") // checked at registration
	}
	return st
}

func (s *spec) engineName() string {
	if s.legacy {
		return "legacy"
	}
	return "fixed"
}

// outcome is one run's result as simrun reports it.
type outcome struct {
	seed     uint64
	res      sim.Result
	err      error // the run's error joined with the checker's
	checker  *props.Checker
	strategy string
	// fileSuffix follows SEED in the name of the run's schedule file, and
	// meta is written in it after the spec's: what tells a schedule
	// Explore found from a seed's own.
	fileSuffix string
	meta       []sim.Meta
	stats      []engine.Stats // each engine's, with the spec's metrics
	// refused: the engine refused the configuration the seed drew with the
	// spec's settings, and the run tested nothing (refusedBySettings).
	refused bool
}

func (o *outcome) failed() bool { return o.err != nil }

// reached returns the situations the run reached; none for a run that hung.
func (o *outcome) reached() props.SituationSet {
	if o.checker == nil {
		return 0
	}
	return o.checker.Reached()
}

// options are the scenario options of one seed.
func (s *spec) options(seed uint64) scenario.Options {
	o := scenario.Options{Legacy: s.legacy, Seed: seed, Failpoints: s.failpoints, Stats: s.metrics}
	if len(s.config) > 0 {
		settings := s.config
		o.Engine = func(c *engine.Config) {
			for _, st := range settings {
				st.set(c)
			}
		}
	}
	return o
}

// configStrings are the spec's settings as -config takes them; nil when
// there are none.
func (s *spec) configStrings() []string { return settingStrings(s.config) }

// engineWords names the spec's engine, its settings and its failpoints.
func (s *spec) engineWords() string {
	return engineWords(s.engineName(), s.configStrings(), s.armed(s.failpoints))
}

// armed is fps, a run's -failpoint specs, with GO_FAILPOINTS's after them.
func (s *spec) armed(fps []string) []string {
	if len(s.envFailpoints) == 0 {
		return fps
	}
	return append(slices.Clone(fps), s.envFailpoints...)
}

// runWords names a run of the spec: "abort-reuse seed 7, strategy chaos,
// draws 3:1, fixed engine".
func (s *spec) runWords(o *outcome) string {
	draws := ""
	if d := s.drawsString(); d != "" {
		draws = ", draws " + d
	}
	return fmt.Sprintf("%s seed %d, strategy %s%s, %s", s.scenario.Name, o.seed, o.strategy, draws, s.engineWords())
}

// run runs one seed, under a watchdog of its own when s.seedTimeout is set.
func (s *spec) run(seed uint64, opts sim.Options) outcome {
	o, h := runOne(s.seedTimeout, seed, func(progress *atomic.Int64) outcome {
		opts.Progress = progress
		return s.runSeed(seed, opts)
	})
	if h != nil {
		return s.hung(h, opts.Strategy)
	}
	return o
}

// hung is the outcome of a seed that hung under strategy (nil: the
// default): no result, the hang as its error.
func (s *spec) hung(h *sim.HangError, strategy sim.Strategy) outcome {
	h.Draws = s.draws
	return outcome{seed: h.Seed, err: h, strategy: cmp.Or(strategy, s.strategyOrDefault()).String()}
}

// runSeed runs one seed on the calling goroutine.
func (s *spec) runSeed(seed uint64, opts sim.Options) outcome {
	prog, out := s.scenario.Program(s.options(seed))
	opts.Seed = seed
	if opts.Strategy == nil {
		opts.Strategy = s.strategyOrDefault()
	}
	if opts.StepsMax == 0 {
		opts.StepsMax = s.stepsMax
	}
	if s.draws != nil && opts.Chooser == nil {
		opts.Chooser = sim.FollowDraws(s.draws)
	}
	res := sim.Run(opts, prog)
	return outcome{seed: seed, res: res, err: out.Err(res.Err), checker: out.Checker, strategy: res.Strategy, stats: out.Stats}
}

// refusedBySettings reports whether o, the outcome of seed under opts,
// is the engine's refusal of a configuration the -config settings made
// invalid: a scenario that draws its configuration from the seed (swarm)
// drew one the settings conflict with (a budget of 2 tokens against
// max-num-seqs=3), where the seed without the settings starts its engine.
// Such a seed tests nothing: bad input for that seed, not a failure.
func (s *spec) refusedBySettings(seed uint64, o *outcome, opts sim.Options) bool {
	if len(s.config) == 0 || !errors.Is(o.err, engine.ErrInvalidConfig) || o.checker != nil && o.checker.Err() != nil {
		return false // a violation beside the refusal is a failure
	}
	plain := *s
	plain.config = nil
	opts.CheckDeterminism = false
	p := plain.runSeed(seed, opts)
	return !errors.Is(p.err, engine.ErrInvalidConfig)
}

// refusalWarning is the warning of a seed whose drawn configuration the
// settings made invalid (refusedBySettings), by err's signature.
func (s *spec) refusalWarning(err error) string {
	return fmt.Sprintf("the engine refuses the configuration %s drew with -config %s, and the seed ran nothing (no failure counted): %s",
		s.scenario.Name, strings.Join(settingStrings(s.config), " -config "), signature(err))
}

// scheduleFile names the schedule file of a seed in dir:
// SCENARIO-ENGINE[-TAG]-seedN[suffix].schedule (scripts/sim-story.sh relies
// on it).
func (s *spec) scheduleFile(dir string, seed uint64, suffix string) string {
	return s.seedFile(dir, seed, suffix+".schedule")
}

// seedFile names a file about a seed in dir: SCENARIO-ENGINE-seedN +
// suffix, with a tag of the failpoints and settings after ENGINE when the
// spec has any (settingsTag), so that sweeps of one scenario under other
// -failpoint or -config write to one directory without overwriting each
// other's files.
func (s *spec) seedFile(dir string, seed uint64, suffix string) string {
	engine := s.engineName()
	if tag := s.settingsTag(); tag != "" {
		engine += "-" + tag
	}
	return filepath.Join(dir, fmt.Sprintf("%s-%s-seed%d%s", s.scenario.Name, engine, seed, suffix))
}

// settingsTag is 8 hex digits of a hash of the spec's failpoints and
// -config settings, as the schedule file records them; "" when it has
// neither.
func (s *spec) settingsTag() string {
	settings := s.configStrings()
	if len(s.failpoints) == 0 && len(settings) == 0 {
		return ""
	}
	h := fnv.New32a()
	for _, fp := range s.failpoints {
		fmt.Fprintf(h, "failpoint %s\n", fp)
	}
	for _, c := range settings {
		fmt.Fprintf(h, "config %s\n", c)
	}
	return fmt.Sprintf("%08x", h.Sum32())
}

// writeStacks writes the goroutine dump of a hung seed to dir, once, and
// notes the file in the error.
func (s *spec) writeStacks(dir string, h *sim.HangError) error {
	return writeStacksTo(s.seedFile(dir, h.Seed, ".stacks.txt"), h)
}

// writeStacksTo writes the goroutine dump of a hung seed to file, once, and
// notes the file in the error.
func writeStacksTo(file string, h *sim.HangError) error {
	if h.StacksFile != "" {
		return nil
	}
	if err := writeFile(file, func(w io.Writer) error {
		_, err := w.Write(h.Stacks)
		return err
	}); err != nil {
		return err
	}
	h.StacksFile = file
	return nil
}

// meta is what a schedule file carries about its run.
func (s *spec) meta(o *outcome) []sim.Meta {
	m := []sim.Meta{
		{Key: "scenario", Value: s.scenario.Name},
		{Key: "seed", Value: strconv.FormatUint(o.seed, 10)},
		{Key: "strategy", Value: o.strategy},
		{Key: "engine", Value: s.engineName()},
		{Key: "trace-hash", Value: fmt.Sprintf("%016x", o.res.TraceHash)},
		{Key: "steps", Value: strconv.FormatInt(o.res.Steps, 10)},
	}
	if s.stepsMax != 0 {
		m = append(m, sim.Meta{Key: "steps-max", Value: strconv.FormatInt(s.stepsMax, 10)})
	}
	for _, fp := range s.failpoints {
		m = append(m, sim.Meta{Key: "failpoint", Value: fp})
	}
	for _, c := range s.configStrings() {
		m = append(m, sim.Meta{Key: "config", Value: c})
	}
	if env := goFailpointsEnv(); env != "" {
		m = append(m, sim.Meta{Key: "go-failpoints", Value: env})
	}
	if o.err != nil {
		m = append(m, sim.Meta{Key: "error", Value: firstLine(o.err.Error())})
	}
	return m
}

// envMismatch says how GO_FAILPOINTS differs from what a schedule was
// recorded with ("" when it does not): its failpoints are part of every run,
// and a replay under others would diverge as if the code had changed.
func envMismatch(sch *sim.Schedule) string {
	recorded, _ := sch.Get("go-failpoints")
	now := goFailpointsEnv()
	if recorded == now {
		return ""
	}
	say := func(v string) string {
		if v == "" {
			return "unset"
		}
		return shell.Quote(v)
	}
	return fmt.Sprintf("GO_FAILPOINTS %s, not %s", say(recorded), say(now))
}

// specFromSchedule rebuilds the spec of a recorded run.
func specFromSchedule(sch *sim.Schedule) (*spec, uint64, error) {
	if d := envMismatch(sch); d != "" {
		return nil, 0, fmt.Errorf("the schedule was recorded with %s: set it as it was", d)
	}
	get := func(k string) (string, error) {
		v, ok := sch.Get(k)
		if !ok {
			return "", fmt.Errorf("the schedule has no %q meta: it was not written by simrun, or is damaged", k)
		}
		return v, nil
	}
	if test, ok := sch.Get(simtest.MetaTest); ok {
		if _, ok := sch.Get("scenario"); !ok {
			cmd, _ := sch.Get(simtest.MetaCommand)
			return nil, 0, fmt.Errorf("the schedule was saved by simtest for the Go test %s: run that test (%s), which runs the schedules saved for it first", test, cmd)
		}
	}
	name, err := get("scenario")
	if err != nil {
		return nil, 0, err
	}
	sc, err := scenario.Lookup(name)
	if err != nil {
		return nil, 0, err
	}
	seedStr, err := get("seed")
	if err != nil {
		return nil, 0, err
	}
	seed, err := strconv.ParseUint(seedStr, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("the schedule's seed %q is not a number", seedStr)
	}
	eng, err := get("engine")
	if err != nil {
		return nil, 0, err
	}
	if eng != "legacy" && eng != "fixed" {
		return nil, 0, fmt.Errorf("the schedule's engine %q is neither legacy nor fixed", eng)
	}
	s := &spec{scenario: sc, legacy: eng == "legacy"}
	if v, ok := sch.Get("steps-max"); ok {
		if s.stepsMax, err = strconv.ParseInt(v, 10, 64); err != nil {
			return nil, 0, fmt.Errorf("the schedule's steps-max %q is not a number", v)
		}
	}
	s.failpoints = recordedFailpoints(sch)
	if err := s.options(seed).CheckFailpoints(); err != nil {
		return nil, 0, fmt.Errorf("the schedule's failpoints: %w", err)
	}
	if s.config, err = parseConfig(recordedConfig(sch)); err != nil {
		return nil, 0, fmt.Errorf("the schedule's config: %w", err)
	}
	return s, seed, nil
}

// replayCommand is the one command that replays a failure.
func replayCommand(file string) string { return envPrefix() + "simrun replay " + shell.Quote(file) }

// envPrefix is GO_FAILPOINTS as a command's prefix, when it is set: every
// run adds its failpoints to the flags', so a command printed to show a run
// again must carry it, or the run it shows is another.
func envPrefix() string {
	env := goFailpointsEnv()
	if env == "" {
		return ""
	}
	return "GO_FAILPOINTS=" + shell.Quote(env) + " "
}

// goFailpointsEnv is GO_FAILPOINTS, "" when it is unset or blank.
func goFailpointsEnv() string {
	env := os.Getenv("GO_FAILPOINTS")
	if strings.TrimSpace(env) == "" {
		return ""
	}
	return env
}

// recordedFailpoints returns the -failpoint specs a schedule was recorded
// with.
func recordedFailpoints(sch *sim.Schedule) []string {
	var fps []string
	for _, m := range sch.Meta {
		if m.Key == "failpoint" {
			fps = append(fps, m.Value)
		}
	}
	return fps
}

// recordedConfig returns the -config settings a schedule was recorded with.
func recordedConfig(sch *sim.Schedule) []string {
	var settings []string
	for _, m := range sch.Meta {
		if m.Key == "config" {
			settings = append(settings, m.Value)
		}
	}
	return settings
}

// reproducer is the command that shows a run again: the replay of its
// schedule file, or the seed run again when there is no file; and, when two
// runs of the seed differed, the seed run twice again, since a schedule
// replays one run and cannot show a difference.
func (s *spec) reproducer(seed uint64, strategy string, nondeterministic bool, schedFile string) string {
	switch {
	case nondeterministic:
		return s.runCommand(seed, strategy) + " -check-determinism"
	case schedFile != "":
		return replayCommand(schedFile)
	}
	return s.runCommand(seed, strategy)
}

// isNondeterministic reports whether err says that two runs of a seed
// differed.
func isNondeterministic(err error) bool {
	var nd *sim.NondeterminismError
	return errors.As(err, &nd)
}

// runCommand is the command that runs the same seed again.
func (s *spec) runCommand(seed uint64, strategy string) string {
	cmd := fmt.Sprintf("%ssimrun run -scenario %s -seed %d -strategy %s", envPrefix(), s.scenario.Name, seed, shell.Quote(strategy))
	if s.legacy {
		cmd += " -legacy"
	}
	if s.stepsMax != 0 {
		cmd += fmt.Sprintf(" -steps-max %d", s.stepsMax)
	}
	for _, fp := range s.failpoints {
		cmd += " -failpoint " + shell.Quote(fp)
	}
	for _, c := range s.configStrings() {
		cmd += " -config " + shell.Quote(c)
	}
	if d := s.drawsString(); d != "" {
		cmd += " -draws " + d
	}
	return cmd
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// sigNondeterministic is the signature of two runs of a seed that differed.
var sigNondeterministic = sim.Signature(&sim.NondeterminismError{})

// signature names a failure mode: the violated property and where it was
// detected (props.Violation.Signature), or the kind of run failure
// (sim.Signature), without the request a check of the engine names and
// without the data-parallel rank in a core's task and queue names: the
// cores run the same code, so a check failing in engine-core-dp1 after
// core-aborts-dp1.lock fails as it does in engine-core after
// core-aborts.lock, on one core. The error itself keeps the core's name.
func signature(err error) string {
	sig := requestNameRE.ReplaceAllString(sim.Signature(err), `request "ID"`)
	if !strings.Contains(sig, "-dp") { // one core: a failing seed pays no second pattern
		return sig
	}
	return coreRankRE.ReplaceAllString(sig, "$1")
}

// requestNameRE matches a request named in an error of the engine's core
// (`request "b" (incarnation 6) got an output …`): the same check failing
// for another request is the same failure mode, as it is with other
// numbers.
var requestNameRE = regexp.MustCompile(`request "[^"]*"`)

// coreRankRE matches the rank the engine appends to the names of a
// data-parallel core's task and queues ("engine-core-dp2",
// "core-input-dp2").
var coreRankRE = regexp.MustCompile(`\b(engine-core|core-input|core-aborts)-dp[0-9]+\b`)
