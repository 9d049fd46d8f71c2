package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

func init() {
	register(&command{name: "list", summary: "list the scenarios, their default strategies and targets", run: cmdList})
	register(&command{name: "run", summary: "run one seed of a scenario", run: cmdRun})
	register(&command{name: "replay", summary: "replay a recorded schedule file exactly", run: cmdReplay})
}

func cmdList(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fps := fs.Bool("failpoints", false, "list the failpoint catalogue instead, faults then planted bugs: names, what each does, the terms it takes")
	situations := fs.Bool("situations", false, "list the situations a run can reach instead (sweep counts the seeds that reached each; -targets takes their names), and the scenarios that target each")
	properties := fs.Bool("properties", false, "list the properties the checker holds every run to instead, and what each promises: a failure names the one it violated")
	jsonOut := fs.Bool("json", false, "print the list as a JSON array of objects, one an item, for a CI job to build its matrix from")
	if _, err := parseFlags(fs, args, 0); err != nil {
		return helpOK(err)
	}
	lists := 0
	for _, on := range []bool{*fps, *situations, *properties} {
		if on {
			lists++
		}
	}
	if lists > 1 {
		return usagef("-failpoints, -situations and -properties each list something else: give one")
	}
	if *jsonOut {
		return writeJSON(stdout, listJSON(*fps, *situations, *properties))
	}
	if *properties {
		for _, p := range props.All {
			fmt.Fprintf(stdout, "%s\n    %s\n", p, props.Doc(p))
		}
		return nil
	}
	if *situations {
		for _, s := range props.AllSituations {
			var by []string
			for _, sc := range scenario.All() {
				if sc.Targets.Has(s) {
					by = append(by, sc.Name)
				}
			}
			fmt.Fprintf(stdout, "%s\n    %s\n", s, s.Doc())
			if len(by) > 0 {
				fmt.Fprintf(stdout, "    the target of: %s\n", strings.Join(by, ", "))
			}
		}
		return nil
	}
	if *fps {
		show := func(p *failpoints.Point) {
			fmt.Fprintf(stdout, "%s\n    %s\n    full name (GO_FAILPOINTS): %s\n    terms: %s\n", p.Name, p.Doc, p.FullName(), p.Terms)
		}
		for _, p := range failpoints.All() {
			show(p)
		}
		if bugs := failpoints.Bugs(); len(bugs) > 0 {
			fmt.Fprintf(stdout, "\nBugs, planted on purpose for a checker to catch (swarm never draws them):\n")
			for _, p := range bugs {
				show(p)
			}
		}
		return nil
	}
	for _, s := range scenario.All() {
		fmt.Fprintf(stdout, "%-22s default strategy %-24s %s\n", s.Name, s.DefaultStrategy, s.Summary)
		if s.Targets != 0 {
			fmt.Fprintf(stdout, "%-22s targets: %s\n", "", s.Targets)
		}
	}
	return nil
}

// The items of simrun list -json.
type (
	scenarioItem struct {
		Name            string   `json:"name"`
		DefaultStrategy string   `json:"default_strategy"`
		Summary         string   `json:"summary"`
		Targets         []string `json:"targets"`
	}
	failpointItem struct {
		Name     string `json:"name"`
		Doc      string `json:"doc"`
		FullName string `json:"full_name"`
		Terms    string `json:"terms"`
		Bug      bool   `json:"bug"` // planted on purpose for a checker to catch
	}
	situationItem struct {
		Name     string   `json:"name"`
		Doc      string   `json:"doc"`
		TargetOf []string `json:"target_of"` // the scenarios that target it
	}
	propertyItem struct {
		Name string `json:"name"`
		Doc  string `json:"doc"`
	}
)

// listJSON is what list prints with -json: the same items as its text, in
// the same order, with empty lists as [] rather than null.
func listJSON(fps, situations, properties bool) any {
	switch {
	case properties:
		items := []propertyItem{}
		for _, p := range props.All {
			items = append(items, propertyItem{Name: p, Doc: props.Doc(p)})
		}
		return items
	case situations:
		items := []situationItem{}
		for _, s := range props.AllSituations {
			it := situationItem{Name: s.String(), Doc: s.Doc(), TargetOf: []string{}}
			for _, sc := range scenario.All() {
				if sc.Targets.Has(s) {
					it.TargetOf = append(it.TargetOf, sc.Name)
				}
			}
			items = append(items, it)
		}
		return items
	case fps:
		items := []failpointItem{}
		for i, list := range [][]*failpoints.Point{failpoints.All(), failpoints.Bugs()} {
			for _, p := range list {
				items = append(items, failpointItem{Name: p.Name, Doc: p.Doc, FullName: p.FullName(), Terms: p.Terms, Bug: i == 1})
			}
		}
		return items
	}
	items := []scenarioItem{}
	for _, sc := range scenario.All() {
		it := scenarioItem{Name: sc.Name, DefaultStrategy: sc.DefaultStrategy, Summary: sc.Summary, Targets: []string{}}
		for s := range sc.Targets.All() {
			it.Targets = append(it.Targets, s.String())
		}
		items = append(items, it)
	}
	return items
}

func helpOK(err error) error {
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

// outputFlags are the flags that say where a run's artifacts go.
type outputFlags struct {
	trace    string
	story    bool
	json     bool
	schedule string
	out      string
	html     string
	metrics  bool
}

func (f *outputFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.trace, "trace", "", "write the run's trace to `FILE`: Perfetto/Chrome JSON (.json), JSON lines (.jsonl) or text (.txt)")
	fs.BoolVar(&f.story, "story", false, "print the run as a story: starvation, engine events, the failure")
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of text")
	fs.StringVar(&f.html, "html", "", "write the run as a self-contained HTML timeline to `FILE`: lanes per task, starvation, frame flows, the stale frame in red")
	fs.BoolVar(&f.metrics, "metrics", false, "print each engine's metrics as the run closed it, under vLLM's names (the Prometheus text engine.Stats writes): its prefix cache's and host memory's hits, evictions, preemptions…")
}

// registerSchedule registers the flags that say where the run's schedule
// goes: not for replay, whose schedule is the file it was given.
func (f *outputFlags) registerSchedule(fs *flag.FlagSet) {
	fs.StringVar(&f.schedule, "schedule-out", "", "write the run's schedule to `FILE` (by default a failing run's goes to -out; - writes none)")
	fs.StringVar(&f.out, "out", "out", "directory for schedule files of failing runs")
}

// tracing reports whether the flags need the run's full trace.
// check refuses flags that do not go together.
func (f *outputFlags) check() error {
	if f.json && f.story {
		return usagef("-story and -json do not go together: -json prints one JSON object; -trace FILE.jsonl writes the run's events as JSON lines")
	}
	return nil
}

func (f *outputFlags) tracing() bool { return f.trace != "" || f.story || f.html != "" }

type runJSON struct {
	Scenario  string   `json:"scenario"`
	Seed      uint64   `json:"seed"`
	Strategy  string   `json:"strategy"`
	Engine    string   `json:"engine"`
	Config    []string `json:"config,omitempty"` // -config, sorted by key
	Failed    bool     `json:"failed"`
	Error     string   `json:"error"` // "" on a pass: always there, for a script that reads it
	Signature string   `json:"signature,omitempty"`
	Steps     int64    `json:"steps"`
	ElapsedNS int64    `json:"elapsed_ns"`
	TraceHash string   `json:"trace_hash"`
	Schedule  string   `json:"schedule,omitempty"`
	Replay    string   `json:"replay,omitempty"`
	Replayed  *bool    `json:"same_hash_as_recorded,omitempty"`
	Draws     string   `json:"draws,omitempty"` // run -draws
	// Reached are the situations the run reached (props.Situation).
	Reached []string `json:"reached"`
	// Metrics are each engine's metrics as the run closed it, in the
	// order it made them, with -metrics.
	Metrics [][]engine.Metric `json:"metrics,omitempty"`
}

// seedCommand makes the flags of a command that runs one seed of a
// scenario (run, explore): the spec's, the outputs', and -seed.
func seedCommand(name string, stderr io.Writer, seedDoc string) (*flag.FlagSet, *specFlags, *outputFlags, *uint64) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sf, of := &specFlags{}, &outputFlags{}
	sf.register(fs)
	of.register(fs)
	of.registerSchedule(fs)
	seed := new(uint64(1))
	fs.Var((*wholeNumber)(seed), "seed", seedDoc)
	return fs, sf, of, seed
}

func cmdRun(args []string, stdout, stderr io.Writer) error {
	fs, sf, of, seed := seedCommand("run", stderr, "the seed `N` to run")
	check := fs.Bool("check-determinism", false, "run the seed twice and fail if the two runs' trace hashes differ")
	drawsFlag := fs.String("draws", "", "answer the strategy's draws with `D`, a schedule simrun explore ran (as it prints them: N:V,… the draw N answered V, every other 0; calm for none), in place of the seed's; an answer the run cannot give (a draw it never makes, an answer past a draw's last) is warned of")
	var timeout time.Duration
	registerSeedTimeout(fs, &timeout)
	sf.timeout = &timeout
	if _, err := parseFlags(fs, args, 0); err != nil {
		return helpOK(err)
	}
	sp, err := sf.spec()
	if err != nil {
		return err
	}
	sp.seedTimeout, sp.metrics = timeout, of.metrics
	if flagGiven(fs, "draws") {
		if sp.draws, err = runDraws(sp, *drawsFlag, *check); err != nil {
			return err
		}
	}
	if err := sp.checkReplaySeeds(seedSet{spans: []span{{*seed, *seed}}, n: 1}, "-seed"); err != nil {
		return err
	}
	if err := of.check(); err != nil {
		return err
	}
	undo, err := outputDirs(of.dirs(true)...)
	if err != nil {
		return err
	}
	defer undo()
	r, replaying := sp.strategy.(replayFile)
	o := sp.run(*seed, sim.Options{Trace: of.tracing(), CheckDeterminism: *check})
	if sp.draws != nil {
		// A schedule of explore's, named as explore names its files,
		// not the seed's own.
		o.fileSuffix = exploredSuffix("")
		o.meta = []sim.Meta{{Key: "draws", Value: sp.draws.String()}}
	}
	if replaying {
		// As simrun replay says it: the flags match what the file records.
		if err := diverged(r.file, o.res.Err); err != nil {
			return err
		}
	}
	for _, w := range o.res.Warnings {
		fmt.Fprintf(stderr, "simrun run: warning: %s\n", w)
	}
	return report(sp, &o, of, nil, stdout)
}

// runDraws reads run -draws for the strategy of sp: one that explore
// walks, and never with -check-determinism, which draws from the seed.
func runDraws(sp *spec, text string, check bool) (sim.Draws, error) {
	d, err := sim.ParseDraws(text)
	if err != nil {
		return nil, usagef("-draws: %v", err)
	}
	if check {
		return nil, usagef("-draws and -check-determinism do not go together: a run that follows draws has no seed's draws to check against")
	}
	if _, ok := sp.strategy.(replayFile); ok {
		return nil, usagef("-draws and -strategy %s do not go together: a replay draws nothing", sp.strategy)
	}
	if err := (sim.ExploreOptions{Options: sim.Options{Strategy: sp.strategyOrDefault()}}).Check(); err != nil {
		return nil, usagef("-draws: %v", strings.TrimPrefix(err.Error(), "sim: Explore "))
	}
	return d, nil
}

func cmdReplay(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: simrun replay [flags] FILE.schedule")
		fs.PrintDefaults()
	}
	var of outputFlags
	of.register(fs)
	var timeout time.Duration
	registerSeedTimeout(fs, &timeout)
	rest, err := parseFlags(fs, args, 1)
	if err != nil {
		return helpOK(err)
	}
	if len(rest) != 1 {
		return usagef("want one schedule file: simrun replay FILE.schedule")
	}
	sch, err := readSchedule(rest[0])
	if err != nil {
		return err
	}
	sp, seed, err := specFromSchedule(sch)
	if err != nil {
		return usagef("%s: %v", rest[0], err)
	}
	sp.seedTimeout, sp.metrics = timeout, of.metrics
	if err := of.check(); err != nil {
		return err
	}
	undo, err := outputDirs(of.dirs(false)...)
	if err != nil {
		return err
	}
	defer undo()
	o := sp.run(seed, sim.Options{Strategy: sim.Replay(sch), Trace: of.tracing()})
	o.strategy, _ = sch.Get("strategy")
	if err := diverged(rest[0], o.res.Err); err != nil {
		return err
	}
	recorded, _ := sch.Get("trace-hash")
	rp := &replayed{file: rest[0], recorded: recorded, same: recorded == fmt.Sprintf("%016x", o.res.TraceHash)}
	if err := report(sp, &o, &of, rp, stdout); err != nil {
		return err
	}
	if recorded != "" && !rp.same {
		return errFailed // not the run recorded: the code changed since, or it is not deterministic
	}
	return nil
}

// replayed is what report says of a replay: the schedule file replayed,
// the trace hash it recorded ("" for none), and whether the run's is that
// one.
type replayed struct {
	file     string
	recorded string
	same     bool
}

// report prints a run, writes its artifacts, and returns errFailed when it
// failed. rp is nil but for a replay.
func report(sp *spec, o *outcome, of *outputFlags, rp *replayed, stdout io.Writer) error {
	var hang *sim.HangError
	if errors.As(o.err, &hang) {
		return reportHang(sp, o, hang, of, rp, stdout)
	}
	schedFile, err := writeArtifacts(sp, o, of, rp)
	if err != nil {
		return err
	}
	if of.json {
		if err := writeJSON(stdout, o.json(sp, schedFile, rp)); err != nil {
			return err
		}
		return failedErr(o)
	}
	if err := printRun(sp, o, of, rp, schedFile, stdout); err != nil {
		return err
	}
	return failedErr(o)
}

// writeArtifacts writes what the flags ask of a run: its schedule (by
// default a failing run's, under -out), trace and timeline. It returns the
// schedule file written, "" for none.
func writeArtifacts(sp *spec, o *outcome, of *outputFlags, rp *replayed) (schedFile string, err error) {
	switch {
	case rp != nil: // never rewrite the file being replayed
	case of.schedule == "-":
	case of.schedule != "":
		schedFile = of.schedule
	case o.failed():
		schedFile = sp.scheduleFile(of.out, o.seed, o.fileSuffix)
	}
	if schedFile != "" {
		if err := writeSchedule(schedFile, sp, o, o.meta...); err != nil {
			return "", err
		}
	}
	if of.trace != "" && o.res.Trace != nil {
		if err := writeTrace(of.trace, o.res.Trace); err != nil {
			return "", err
		}
	}
	if of.html != "" && o.res.Trace != nil {
		again := schedFile // what the page offers to show the run again
		if rp != nil {
			again = rp.file
		}
		if err := writeHTML(of.html, sp, o, again); err != nil {
			return "", err
		}
	}
	return schedFile, nil
}

// json is the run as run -json prints it.
func (o *outcome) json(sp *spec, schedFile string, rp *replayed) runJSON {
	j := runJSON{Scenario: sp.scenario.Name, Seed: o.seed, Strategy: o.strategy, Engine: sp.engineName(), Config: sp.configStrings(), Failed: o.failed(),
		Steps: o.res.Steps, ElapsedNS: int64(o.res.Elapsed), TraceHash: fmt.Sprintf("%016x", o.res.TraceHash), Schedule: schedFile,
		Reached: []string{}, Draws: sp.drawsString()}
	for _, s := range o.reached().List() {
		j.Reached = append(j.Reached, s.String())
	}
	if rp != nil && rp.recorded != "" {
		j.Replayed = &rp.same
	}
	for _, st := range o.stats {
		j.Metrics = append(j.Metrics, st.Metrics())
	}
	if o.failed() {
		j.Error, j.Signature = o.err.Error(), signature(o.err)
		if schedFile != "" {
			j.Replay = sp.reproducer(o.seed, o.strategy, isNondeterministic(o.err), schedFile)
		}
	}
	return j
}

// printRun prints a run as text: what ran, how it ended, its hash and the
// situations it reached, where its artifacts went, and its story if asked.
func printRun(sp *spec, o *outcome, of *outputFlags, rp *replayed, schedFile string, stdout io.Writer) error {
	fmt.Fprintf(stdout, "%s: ", sp.runWords(o))
	return printOutcome(sp, o, of, rp, schedFile, stdout)
}

// printOutcome is printRun after the line's head: how the run ended, and
// the rest.
func printOutcome(sp *spec, o *outcome, of *outputFlags, rp *replayed, schedFile string, stdout io.Writer) error {
	if o.failed() {
		fmt.Fprintf(stdout, "FAIL after %d steps, %v virtual\n", o.res.Steps, o.res.Elapsed)
		fmt.Fprintf(stdout, "  %s\n", indent(o.err.Error(), "  "))
	} else {
		fmt.Fprintf(stdout, "ok, %d steps, %v virtual\n", o.res.Steps, o.res.Elapsed)
	}
	fmt.Fprintf(stdout, "  trace hash %016x", o.res.TraceHash)
	if rp != nil {
		switch {
		case rp.recorded == "":
			fmt.Fprint(stdout, " (the schedule recorded none)")
		case rp.same:
			fmt.Fprint(stdout, " (the same as recorded)")
		default:
			fmt.Fprintf(stdout, " (DIFFERENT from the recorded %s: this is not the run recorded; the code changed since, or the run is not deterministic)", rp.recorded)
		}
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "  reached: %s\n", o.reached())
	if of.trace != "" {
		fmt.Fprintf(stdout, "  trace: %s\n", of.trace)
	}
	if of.html != "" {
		fmt.Fprintf(stdout, "  timeline: %s\n", of.html)
	}
	if o.failed() && schedFile != "" {
		fmt.Fprintf(stdout, "  replay: %s\n", sp.reproducer(o.seed, o.strategy, isNondeterministic(o.err), schedFile))
	}
	for i, st := range o.stats {
		fmt.Fprintf(stdout, "  metrics of engine %d of %d:\n", i+1, len(o.stats))
		for _, m := range st.Metrics() {
			fmt.Fprintf(stdout, "    %s %s\n", m.Name, strconv.FormatFloat(m.Value, 'g', -1, 64))
		}
	}
	if of.story && o.res.Trace != nil {
		fmt.Fprintln(stdout)
		return scenario.WriteStory(stdout, o.res.Trace)
	}
	return nil
}

// reportHang reports a run that did not end: there is no schedule, trace or
// hash to give, only the stacks, which go beside the schedules (for a
// replay, beside the file replayed), and the command that runs it again.
func reportHang(sp *spec, o *outcome, h *sim.HangError, of *outputFlags, rp *replayed, stdout io.Writer) error {
	dir, again := of.out, sp.runCommand(o.seed, o.strategy)
	if rp != nil {
		dir, again = filepath.Dir(rp.file), replayCommand(rp.file)
	}
	if err := writeStacksTo(sp.seedFile(dir, h.Seed, o.fileSuffix+".stacks.txt"), h); err != nil {
		return err
	}
	if of.json {
		if err := writeJSON(stdout, sp.hangJSON(o.seed, o.strategy, h, again)); err != nil {
			return err
		}
		return errFailed
	}
	fmt.Fprintf(stdout, "%s: HANG\n", sp.runWords(o))
	fmt.Fprintf(stdout, "  %s\n", indent(h.Error(), "  "))
	fmt.Fprintf(stdout, "  run again: %s\n", again)
	return errFailed
}

// hangJSON is a hung run as run -json prints it, again the command that
// runs it again.
func (s *spec) hangJSON(seed uint64, strategy string, h *sim.HangError, again string) runJSON {
	return runJSON{Scenario: s.scenario.Name, Seed: seed, Strategy: strategy, Engine: s.engineName(), Config: s.configStrings(), Failed: true,
		Error: h.Error(), Signature: h.Signature(), Replay: again, Draws: s.drawsString()}
}

// drawsString is run -draws as given, "" without it.
func (s *spec) drawsString() string {
	if s.draws == nil {
		return ""
	}
	return s.draws.String()
}

// checkRecorded refuses the replay of a schedule that simrun recorded on
// another scenario, engine, failpoints or -config than s: it could only diverge, and
// the divergence would read as if the code had changed.
func (s *spec) checkRecorded(r replayFile) error {
	name, ok := r.sch.Get("scenario")
	if !ok {
		return nil // not written by simrun: nothing to check against
	}
	var diffs []string
	if name != s.scenario.Name {
		diffs = append(diffs, fmt.Sprintf("scenario %s, not %s", name, s.scenario.Name))
	}
	if eng, ok := r.sch.Get("engine"); ok && eng != s.engineName() {
		diffs = append(diffs, fmt.Sprintf("the %s engine, not the %s one", eng, s.engineName()))
	}
	fps := recordedFailpoints(r.sch)
	if !slices.Equal(fps, s.failpoints) {
		diffs = append(diffs, fmt.Sprintf("%s, not %s", failpointList(fps), failpointList(s.failpoints)))
	}
	// A recorded setting is compared as simrun replay would run it: in
	// canonical form, so that -config step-time=0.2ms matches 200µs.
	config := recordedConfig(r.sch)
	if settings, err := parseConfig(config); err == nil {
		config = settingStrings(settings)
	}
	if !slices.Equal(config, s.configStrings()) {
		diffs = append(diffs, fmt.Sprintf("%s, not %s", configList(config), configList(s.configStrings())))
	}
	if d := envMismatch(r.sch); d != "" {
		diffs = append(diffs, d)
	}
	if len(diffs) == 0 {
		return nil
	}
	return usagef("-strategy replay:%s: the schedule was recorded with %s: give the flags it was recorded with, or run %s",
		r.file, strings.Join(diffs, ", "), replayCommand(r.file))
}

// checkReplaySeeds refuses to replay s's schedule file (-strategy
// replay:FILE) on a seed other than the one it was recorded with, given by
// flag: such a run could only diverge, and a divergence cuts the run short
// where its checker sees requests that never ended, a failure that is not
// one.
func (s *spec) checkReplaySeeds(seeds seedSet, flag string) error {
	r, ok := s.strategy.(replayFile)
	if !ok {
		return nil
	}
	recorded, ok := r.sch.Get("seed")
	if !ok {
		return nil // not written by simrun: nothing to check against
	}
	if seeds.n == 1 && strconv.FormatUint(seeds.at(0), 10) == recorded {
		return nil
	}
	asked := seeds.String()
	if flag == "-seeds" {
		asked = "-seeds " + asked
	}
	return usagef("-strategy replay:%s: the schedule was recorded with seed %s, not %s: give %s %s, or run %s",
		r.file, recorded, asked, flag, recorded, replayCommand(r.file))
}

func failpointList(fps []string) string {
	if len(fps) == 0 {
		return "no failpoints"
	}
	return "-failpoint " + strings.Join(fps, " -failpoint ")
}

// replaysFile reports whether sp replays file itself (-strategy
// replay:FILE), which, as simrun replay, a run must not rewrite.
func replaysFile(sp *spec, file string) bool {
	r, ok := sp.strategy.(replayFile)
	if !ok {
		return false
	}
	a, err := os.Stat(r.file)
	if err != nil {
		return false
	}
	b, err := os.Stat(file)
	return err == nil && os.SameFile(a, b)
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// writeSchedule writes a recorded run's schedule with the meta that says
// what ran, and extra; but never over the file the run replays (-strategy
// replay:FILE), which holds that run's schedule already, and whose meta
// says how it was first found.
func writeSchedule(file string, sp *spec, o *outcome, extra ...sim.Meta) error {
	if replaysFile(sp, file) {
		return nil
	}
	sch := o.res.Schedule
	sch.Meta = append(sp.meta(o), extra...)
	return writeFile(file, func(w io.Writer) error {
		_, err := io.WriteString(w, sch.String())
		return err
	})
}

// diverged is the usage error of a replay of file that left its schedule:
// the flags match what the file records, so the code has changed.
func diverged(file string, runErr error) error {
	var mm *sim.ScheduleMismatchError
	if errors.As(runErr, &mm) {
		return usagef("%s no longer matches the code: %v", file, mm)
	}
	return nil
}

func readSchedule(file string) (*sim.Schedule, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("cannot read the schedule: %v", err)
	}
	sch, err := sim.ParseSchedule(string(data))
	if err != nil {
		return nil, usagef("%s: %v", file, err)
	}
	return sch, nil
}

func writeTrace(file string, tr *sim.Trace) error {
	return writeFile(file, func(w io.Writer) error {
		switch strings.ToLower(filepath.Ext(file)) {
		case ".jsonl":
			return tr.WriteJSONL(w)
		case ".txt", ".log":
			return tr.WriteText(w)
		default:
			return tr.WritePerfetto(w)
		}
	})
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeFile creates file (and its directory) and fills it with write,
// reporting the first error of writing or closing. A regular file is
// written as a temporary file beside it and renamed into place only when
// everything was written, so that a failed write (a full disk, a file size
// limit) leaves no truncated artifact behind, and an older file of the same
// name intact. The standard output or error, by any name, is written
// through the stream (stdStream). A symbolic link is written through: the
// file it names is replaced and the link kept. Anything else that is there
// already (a device, a named pipe) is opened and written as it is, never
// replaced; a directory is refused.
func writeFile(file string, write func(w io.Writer) error) (err error) {
	if s := stdStream(file); s != nil {
		if err := write(s); err != nil {
			return fmt.Errorf("cannot write %s: %w", file, err)
		}
		return nil
	}
	path, inPlace, err := writePlace(file)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	if inPlace {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cannot write %s: %w", file, err)
		}
		return nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	err = write(f)
	if err == nil {
		err = f.Chmod(0o644) // CreateTemp makes the file private
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", file, err)
	}
	return os.Rename(f.Name(), path)
}

// stdStream returns os.Stdout or os.Stderr when file is the file one of
// them writes (/dev/stdout, /proc/self/fd/2, or the file a shell
// redirected it to), nil otherwise: written through the stream, the file's
// bytes go after what the stream wrote, and a file the shell opened to
// append to keeps what it held, where opening or replacing it would not.
func stdStream(file string) *os.File {
	fi, err := os.Stat(file)
	if err != nil {
		return nil
	}
	for _, s := range []*os.File{os.Stdout, os.Stderr} {
		if si, err := s.Stat(); err == nil && os.SameFile(fi, si) {
			return s
		}
	}
	return nil
}

// writePlace is where writeFile puts file: the path to replace by a
// rename (file itself, or the file a symbolic link names), or, with
// inPlace, the path to open and write as it is (a device, a named pipe, a
// link that names nothing yet). A directory is an error.
func writePlace(file string) (path string, inPlace bool, err error) {
	fi, err := os.Lstat(file)
	if err != nil {
		return file, false, nil // nothing there yet (or unreadable: the write says why)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(file)
		if err != nil {
			return file, true, nil // a dangling link: opening it makes what it names
		}
		if fi, err = os.Stat(real); err != nil {
			return file, true, nil
		}
		file = real
	}
	switch {
	case fi.IsDir():
		return "", false, errors.New("it is a directory")
	case !fi.Mode().IsRegular():
		return file, true, nil
	}
	return file, false, nil
}

// outputDirs makes the directories a command will write its files into
// before it spends its time, so that a result is not lost at the end for
// want of a place to put it: a directory that cannot be made, or in which
// no file can be created, is bad input, refused before anything runs, and
// so is a file flag that names a directory or the standard output. The
// returned undo removes the directories made here that are still empty, so
// that a command that wrote nothing (a sweep that passed) leaves nothing
// behind.
func outputDirs(places ...outPlace) (undo func(), err error) {
	// made is in the reverse of the order the directories were made in,
	// so that each is removed before its parent: compare makes OUT/a (and
	// OUT with it) and then OUT/b, and OUT can go only after both.
	var made []string
	undo = func() {
		for _, d := range made {
			os.Remove(d) // only an empty directory goes
		}
	}
	for _, p := range places {
		if p.file == "-" {
			undo()
			return nil, usagef("%s -: simrun writes a file here, not the standard output; name a file (/dev/stdout is one)", p.flag)
		}
		dir := p.dir
		if dir == "" {
			dir = "."
		}
		var fresh []string
		for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
				break
			}
			fresh = append(fresh, d)
		}
		// Counted before MkdirAll, which may make some of them and fail.
		made = append(fresh, made...) // fresh is deepest first
		if err := os.MkdirAll(dir, 0o755); err != nil {
			undo()
			return nil, usagef("%s %s: cannot make the directory: %v", p.flag, dir, err)
		}
		f, err := os.CreateTemp(dir, ".simrun-probe-*")
		if err != nil {
			undo()
			return nil, usagef("%s %s: cannot write files there: %v", p.flag, dir, err)
		}
		f.Close()
		os.Remove(f.Name())
		if p.file != "" {
			if _, _, err := writePlace(p.file); err != nil {
				undo()
				return nil, usagef("%s %s: %v; name a file", p.flag, p.file, err)
			}
		}
	}
	return undo, nil
}

// outPlace is a place a command writes into, named by flag: a directory
// (-out), or a file and its directory.
type outPlace struct{ flag, dir, file string }

// outDir is the directory a flag names, for outputDirs.
func outDir(flagName, dir string) outPlace { return outPlace{flag: flagName, dir: dir} }

// fileDir is the file a flag names, for outputDirs; nothing when the flag
// is not given (or, for -schedule-out, is "-": write none).
func fileDir(flagName, file string) []outPlace {
	if file == "" || file == "-" && flagName == "-schedule-out" {
		return nil
	}
	return []outPlace{{flag: flagName, dir: filepath.Dir(file), file: file}}
}

// dirs are the places the flags write into; out is the -out directory
// when the command has one.
func (f *outputFlags) dirs(withOut bool) []outPlace {
	var d []outPlace
	if withOut {
		d = append(d, outDir("-out", f.out))
		d = append(d, fileDir("-schedule-out", f.schedule)...)
	}
	d = append(d, fileDir("-trace", f.trace)...)
	return append(d, fileDir("-html", f.html)...)
}
