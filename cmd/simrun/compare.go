package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/triage"
)

func init() {
	register(&command{name: "compare", summary: "run two variants over the same seeds and test the difference, mode by mode", run: cmdCompare})
}

// compareResult is what compare found: both variants' sweeps over the
// same seeds, paired by seed.
type compareResult struct {
	Scenario    string        `json:"scenario,omitempty"` // with several scenarios: the one both variants ran
	SeedRange   string        `json:"seed_range"`
	Requested   string        `json:"requested_seed_range,omitempty"` // set when the budget ended A early
	Stopped     string        `json:"stopped,omitempty"`
	Seeds       uint64        `json:"seeds"`
	Seconds     float64       `json:"elapsed_seconds"`
	SeedsPerSec float64       `json:"seeds_per_sec"`
	A           compareSide   `json:"a"`
	B           compareSide   `json:"b"`
	Paired      pairedTable   `json:"paired"`
	P           float64       `json:"p_value"`
	Verdict     string        `json:"verdict"`
	Modes       []compareMode `json:"modes"`
}

// compareSide is one variant: its flags and its sweep.
type compareSide struct {
	Flags string `json:"flags"`
	sweepResult
}

// pairedTable counts seeds by what each variant did with them.
type pairedTable struct {
	Both    uint64 `json:"both"`
	OnlyA   uint64 `json:"only_a"`
	OnlyB   uint64 `json:"only_b"`
	Neither uint64 `json:"neither"`
}

// compareMode is one failure mode in both variants, tested on its own.
type compareMode struct {
	Signature string      `json:"signature"`
	A         modeRate    `json:"a"`
	B         modeRate    `json:"b"`
	Paired    pairedTable `json:"paired"`
	P         float64     `json:"p_value"`
	// PCorrected is P corrected for the number of modes compared, by
	// Holm's method (triage.ModeComparison.PCorrected): the mode's
	// difference holds among them all when it is below 0.05.
	PCorrected float64 `json:"p_corrected"`
	Verdict    string  `json:"verdict"`
}

type modeRate struct {
	Count      uint64     `json:"count"`
	Rate       float64    `json:"rate"`
	CI95       [2]float64 `json:"ci95"`
	UpperBound float64    `json:"upper_bound"` // the rule of three when the mode is not seen, as the text says
	FirstSeed  *uint64    `json:"first_seed"`
	Replay     string     `json:"replay,omitempty"`
}

func cmdCompare(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: simrun compare -scenario NAME -seeds A-B -a 'FLAGS' -b 'FLAGS' [flags]")
		fmt.Fprintln(stderr, "Runs variants A and B over the same seeds, pairs the runs by seed, and tests the")
		fmt.Fprintln(stderr, "difference in failures, overall and for each failure mode apart (Fisher's exact test).")
		fmt.Fprintf(stderr, "-a and -b take run's flags (%s), added to the\n", strings.Join(dashed(specFlagNames()), ", "))
		fmt.Fprintln(stderr, "common ones: a variant's flag replaces the common one, and its -failpoint NAME=TERMS is armed")
		fmt.Fprintln(stderr, "beside the common failpoints, in place of a common one of the same NAME; its -config KEY=VALUE")
		fmt.Fprintln(stderr, "replaces a common setting of the same KEY.")
		fmt.Fprintln(stderr, "With -for, A runs for half the budget and B over the seeds A ran.")
		fmt.Fprintln(stderr, "With several scenarios (-scenario a,b or all), each is compared in turn, as alone, and the")
		fmt.Fprintln(stderr, "text ends with the scenarios B is worse in, better in, and the same in; -for is shared.")
		fs.PrintDefaults()
	}
	var sf specFlags
	sf.register(fs)
	fs.Lookup("scenario").Usage = "the scenario both variants run (see simrun list); several, each compared in turn, as a comma-separated list, or all of them as `all`"
	aFlags := fs.String("a", "", "variant A's flags, as run takes them, e.g. '-legacy'; empty: the common flags alone")
	bFlags := fs.String("b", "", "variant B's flags, e.g. '-strategy chaos'; empty: the common flags alone")
	var wf sweepFlags
	wf.register(fs, "seeds to run each variant on", "print one JSON object instead of text, one a scenario")
	sf.timeout = &wf.seedTimeout
	junit := fs.String("junit", "", "write a JUnit XML report to `FILE`: one test case per variant and per failure mode, and one per target a variant reached in too few seeds (-min-reached); a suite a scenario")
	out := fs.String("out", "out", "directory for the schedule files of each mode's first failing seed: A's in its subdirectory a, B's in b")
	var rf reachFlags
	rf.register(fs)
	if _, err := parseFlags(fs, args, 0); err != nil {
		return helpOK(err)
	}
	names := []string{sf.scenario} // one, or none when each variant names its own
	multi := sf.scenario == "all" || strings.Contains(sf.scenario, ",")
	if multi {
		var err error
		if names, err = scenarioList(sf.scenario); err != nil {
			return err
		}
	}
	seeds, err := parseSeeds(wf.seeds)
	if err != nil {
		return err
	}
	// Every scenario's variants are made and checked before any runs: a
	// setting one refuses is bad input, not a failure found an hour in.
	var pairs []*comparePair
	var skipped []string
	var some props.SituationSet
	for _, name := range names {
		f := sf
		f.scenario = name
		p, err := newComparePair(f, *aFlags, *bFlags, &rf, seeds, multi)
		if refused := (*configRefused)(nil); multi && errors.As(err, &refused) {
			fmt.Fprintf(stderr, "simrun compare: skipping %s: %v\n", name, err)
			skipped = append(skipped, name)
			continue
		}
		if err != nil {
			return err
		}
		some |= p.a.scenario.Targets | p.b.scenario.Targets
		p.a.seedTimeout, p.b.seedTimeout = wf.seedTimeout, wf.seedTimeout
		pairs = append(pairs, p)
	}
	if len(pairs) == 0 {
		return usagef("-config %s: every scenario of -scenario %s refuses these settings", strings.Join(sf.config, " -config "), sf.scenario)
	}
	if multi && rf.min > 0 && rf.targets == "" && some == 0 {
		return usagef("-min-reached %d: scenarios %s name no target situations; name them with -targets", rf.min, sf.scenario)
	}
	det, err := wf.check()
	if err != nil {
		return err
	}
	undo, err := outputDirs(append([]outPlace{outDir("-out", filepath.Join(*out, "a")), outDir("-out", filepath.Join(*out, "b"))}, fileDir("-junit", *junit)...)...)
	if err != nil {
		return err
	}
	defer undo()
	j := &compareJob{stdout: stdout, stderr: stderr, aFlags: *aFlags, bFlags: *bFlags, wf: &wf, min: uint64(rf.min), det: det, out: *out, multi: multi}
	var done []compareDone
	var cut string // why the scenarios after done did not run
	start := time.Now()
	for i, p := range pairs {
		budget := wf.budget
		if wf.budget > 0 && multi {
			budget = budgetShare(wf.budget, start, len(pairs)-i)
		}
		if j.interrupted != nil && j.interrupted.happened() {
			cut = "interrupted"
			break // the scenarios not yet run are not reported as run
		}
		if multi && !wf.json && i > 0 {
			fmt.Fprintln(stdout)
		}
		d := j.one(p, seeds, budget)
		if d.fatal != nil {
			j.interrupted.release()
			return d.fatal
		}
		done = append(done, d)
		if d.cut != "" {
			if cut = d.cut; cut != "interrupted" {
				// Its worker is left behind, spinning or blocked: a
				// comparison that went on would measure the next
				// scenarios beside it.
				cut = "a seed of " + d.scenario + " hung"
			}
			break
		}
	}
	j.interrupted.release()
	if *junit != "" {
		suites := make([]triage.JUnitSuite, len(done))
		for i, d := range done {
			suites[i] = d.suite
		}
		if err := writeFile(*junit, func(w io.Writer) error { return triage.WriteJUnitSuites(w, suites) }); err != nil {
			return err
		}
	}
	if multi && !wf.json {
		all := make([]string, len(pairs))
		for i, p := range pairs {
			all[i] = p.a.scenario.Name
		}
		printCompareTotal(stdout, all, skipped, done, cut, time.Since(start))
	}
	// The worst: a failure, else why a comparison stopped short.
	var worst error
	for _, d := range done {
		if errors.Is(d.err, errFailed) {
			return errFailed
		}
		if worst == nil {
			worst = d.err
		}
	}
	if worst == nil && cut == "interrupted" {
		worst = fmt.Errorf("interrupted after %d of %d scenarios, before any failure", len(done), len(pairs))
	}
	return worst
}

// comparePair is one scenario's two variants and the targets each holds.
type comparePair struct {
	a, b               *spec
	targetsA, targetsB props.SituationSet
}

// newComparePair makes the variants of the common flags sf, checked
// against seeds. Among several scenarios (multi), the variants may not
// name their own, and a scenario that names no target has none to reach.
func newComparePair(sf specFlags, aFlags, bFlags string, rf *reachFlags, seeds seedSet, multi bool) (*comparePair, error) {
	spA, err := variantSpec("a", aFlags, sf)
	if err != nil {
		return nil, err
	}
	// pct:D without K takes K from the runs of the spec (estimateSteps),
	// which differ between variants of another engine or failpoint: each
	// would then run another strategy, and the comparison would measure
	// that too. B takes A's, unless it names another depth or scenario.
	if spA.pctDepth > 0 {
		sf.pct = &pctEstimate{scenario: spA.scenario.Name, depth: spA.pctDepth, steps: spA.pctSteps}
	}
	spB, err := variantSpec("b", bFlags, sf)
	if err != nil {
		return nil, err
	}
	if multi && (spA.scenario.Name != sf.scenario || spB.scenario.Name != sf.scenario) {
		return nil, usagef("-a and -b may not name -scenario when -scenario names several: both variants run each of them")
	}
	p := &comparePair{a: spA, b: spB}
	for _, v := range []struct {
		name    string
		sp      *spec
		targets *props.SituationSet
	}{{"A", spA, &p.targetsA}, {"B", spB, &p.targetsB}} {
		if err := v.sp.checkReplaySeeds(seeds, "-seeds"); err != nil {
			return nil, fmt.Errorf("variant %s: %w", v.name, err)
		}
		rfv := rf
		if multi {
			rfv = &reachFlags{targets: rf.targets}
		}
		if *v.targets, err = variantTargets(rfv, v.name, v.sp); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// compareJob is what the comparisons of one compare command share.
type compareJob struct {
	stdout, stderr io.Writer
	aFlags, bFlags string
	wf             *sweepFlags
	min            uint64 // -min-reached
	det            checkShare
	out            string
	multi          bool
	interrupted    *signalStop
}

// compareDone is how one scenario's comparison ended.
type compareDone struct {
	scenario string
	res      *compareResult // nil when it stopped short
	suite    triage.JUnitSuite
	err      error  // errFailed when something failed; else why it stopped short
	cut      string // set when it stopped short, and no later scenario may run: why
	fatal    error  // an output that could not be written: the command ends with it
}

// one compares the variants of p over seeds, within budget (0: none), and
// reports it, as compare of one scenario does.
func (j *compareJob) one(p *comparePair, seeds seedSet, budget time.Duration) compareDone {
	name := p.a.scenario.Name
	unit := "runs"
	if j.multi {
		unit = "runs of " + name
	}
	bar := j.wf.progress(j.stderr, 2*seeds.n, unit)
	tally := func() *sweepState {
		return &sweepState{modes: map[string]*modeTally{}, workers: j.wf.jobs, sigs: map[uint64]string{}}
	}
	// Under a budget, A runs for half of it and B over the seeds A ran,
	// so that the two stay paired seed by seed.
	a := tally()
	a.budget, a.targets = budget/2, p.targetsA
	// Ctrl-C (or SIGTERM) stops the variant running, and the comparison
	// there, as a hang does: the sweeps as far as they went are reported.
	if j.interrupted == nil {
		j.interrupted = stopOnSignal(a)
	} else {
		j.interrupted.watch(a)
	}
	stA := sweepInto(a, p.a, seeds, j.det, bar)
	partial := compareHangOut{stdout: j.stdout, stderr: j.stderr, bar: bar, json: j.wf.json, requested: seeds, multi: j.multi}
	sideA := hangSide{"A", j.aFlags, p.a, stA, filepath.Join(j.out, "a")}
	const hung = "a seed hung"
	if stA.hung {
		return partial.report(sideA, nil, hung)
	}
	if j.interrupted.happened() && stA.stopped != "" {
		return partial.interrupted(sideA, nil)
	}
	b := tally()
	b.targets = p.targetsB
	j.interrupted.watch(b)
	stB := sweepInto(b, p.b, stA.ran, j.det, bar)
	sideB := hangSide{"B", j.bFlags, p.b, stB, filepath.Join(j.out, "b")}
	if stB.hung {
		return partial.report(sideB, &sideA, hung)
	}
	if j.interrupted.happened() && stB.stopped != "" {
		return partial.interrupted(sideB, &sideA)
	}
	if bar != nil {
		bar.Finish()
	}
	ran := stA.ran // B ran these too

	res := compareResult{SeedRange: ran.String(), Seeds: ran.n, Seconds: (stA.elapsed + stB.elapsed).Seconds()}
	if j.multi {
		res.Scenario = name
	}
	if stA.stopped != "" {
		res.Requested = seeds.String()
		var of time.Duration // the whole -for, when budget is a share of it
		if j.multi {
			of = j.wf.budget
		}
		res.Stopped = budgetRanOut(budget, of) + ", half of it for A"
	}
	if res.Seconds > 0 {
		res.SeedsPerSec = float64(ran.n) / res.Seconds
	}
	res.A = compareSide{Flags: j.aFlags, sweepResult: stA.summary(p.a, "")}
	res.B = compareSide{Flags: j.bFlags, sweepResult: stB.summary(p.b, "")}
	cmd := partial.cmd(name)
	stA.printWarnings(j.stderr, cmd+", A")
	stB.printWarnings(j.stderr, cmd+", B")
	// Each variant writes its schedules into a directory of its own: the
	// file names say scenario, engine and seed, which both may share, and
	// one variant's file must not replace the other's.
	for _, side := range []struct {
		sp  *spec
		r   *sweepResult
		dir string
	}{{p.a, &res.A.sweepResult, "a"}, {p.b, &res.B.sweepResult, "b"}} {
		if err := writeModeSchedules(side.sp, side.r, filepath.Join(j.out, side.dir)); err != nil {
			return compareDone{fatal: err}
		}
	}
	res.Paired = pairSeeds(stA, stB, "")
	rateA, rateB := triage.Rate{K: int(res.A.Failures), N: int(ran.n)}, triage.Rate{K: int(res.B.Failures), N: int(ran.n)}
	res.P, res.Verdict = triage.CompareRates(rateA, rateB)
	res.Modes = compareModes(stA, stB, &res)

	d := compareDone{scenario: name, res: &res, suite: triage.JUnitSuite{Name: partial.suiteName(name, res.SeedRange), Cases: compareJUnitCases(&res, j.min)}}
	if j.wf.json {
		if err := writeJSON(j.stdout, res); err != nil {
			return compareDone{fatal: err}
		}
	} else {
		printCompare(j.stdout, &res)
	}
	// -min-reached holds each variant to it, whether or not a seed
	// failed: a B that passes because it no longer reaches the race's
	// window has not fixed the race.
	failed := res.A.Failures > 0 || res.B.Failures > 0
	for _, s := range []struct {
		name string
		side *compareSide
	}{{"A", &res.A}, {"B", &res.B}} {
		if err := checkReached(j.stderr, cmd+", "+s.name, &s.side.sweepResult, j.min); err != nil {
			failed = true
		}
	}
	if failed {
		d.err = errFailed
	}
	return d
}

// printCompareTotal ends the text of a compare of several scenarios: the
// scenarios B is worse in, better in, and not significantly different
// in, by the test of all failures, and those stopped short or not run.
func printCompareTotal(w io.Writer, names, skipped []string, done []compareDone, cut string, elapsed time.Duration) {
	var seeds uint64
	var worse, better, same, neither, short []string
	for _, d := range done {
		if d.res == nil {
			short = append(short, fmt.Sprintf("%s (%s)", d.scenario, d.cut))
			continue
		}
		r := d.res
		seeds += r.Seeds
		item := fmt.Sprintf("%s (A %d, B %d of %d seeds, %s%s)", d.scenario, r.A.Failures, r.B.Failures, r.Seeds, triage.PWords(r.P), modesWords(r.Modes))
		switch a, b := float64(r.A.Failures), float64(r.B.Failures); {
		case a == 0 && b == 0:
			neither = append(neither, d.scenario)
		case r.P >= triage.Alpha:
			same = append(same, item)
		case b > a:
			worse = append(worse, item)
		default:
			better = append(better, item)
		}
	}
	fmt.Fprintf(w, "\ncompare of %d scenarios: %d seeds per variant in %.2fs\n", len(names)+len(skipped), seeds, elapsed.Seconds())
	for _, l := range []struct {
		what  string
		items []string
	}{{"worse in B", worse}, {"better in B", better}, {"no significant change", same}, {"no failures in either", neither}, {"stopped short", short}} {
		if len(l.items) > 0 {
			fmt.Fprintf(w, "  %s: %s\n", l.what, strings.Join(l.items, ", "))
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "  skipped (the -config settings do not suit them): %s\n", strings.Join(skipped, ", "))
	}
	if n := len(names) - len(done); n > 0 {
		fmt.Fprintf(w, "  not run (%s): %s\n", cut, strings.Join(names[len(done):], ", "))
	}
	if line := holmWords(done); line != "" {
		fmt.Fprintf(w, "  %s\n", line)
	}
}

// holmWords says, of a compare of several scenarios, which differences
// hold once corrected for the number of scenarios tested (triage.Holm):
// each scenario's test is at p < Alpha alone, and among thirteen one may
// differ by chance. "" for fewer than two tests.
func holmWords(done []compareDone) string {
	var names []string
	var ps []float64
	for _, d := range done {
		if d.res != nil {
			names, ps = append(names, d.scenario), append(ps, d.res.P)
		}
	}
	if len(ps) < 2 {
		return ""
	}
	var holds, chance []string
	for i, adj := range triage.Holm(ps) {
		switch {
		case ps[i] >= triage.Alpha:
		case adj < triage.Alpha:
			holds = append(holds, fmt.Sprintf("%s (%s corrected)", names[i], triage.PWords(adj)))
		default:
			chance = append(chance, fmt.Sprintf("%s (%s corrected)", names[i], triage.PWords(adj)))
		}
	}
	line := fmt.Sprintf("each scenario is tested on its own at p < %g; corrected for the %d tests (Holm's method)", triage.Alpha, len(ps))
	switch {
	case holds == nil && chance == nil:
		return line + ", there is no difference to correct"
	case chance == nil:
		return line + ", every difference holds: " + strings.Join(holds, ", ")
	case holds == nil:
		return line + ", every difference may be chance: " + strings.Join(chance, ", ")
	}
	return line + ", the difference holds in " + strings.Join(holds, ", ") + " and may be chance in " + strings.Join(chance, ", ")
}

// modesWords counts the failure modes of a comparison whose difference
// holds once corrected for their number, for the total: "; modes: 1
// worse in B, 2 better".
func modesWords(ms []compareMode) string {
	var worse, better int
	for _, m := range ms {
		switch {
		case m.PCorrected >= triage.Alpha:
		case m.B.Count > m.A.Count:
			worse++
		default:
			better++
		}
	}
	var parts []string
	if worse > 0 {
		parts = append(parts, fmt.Sprintf("%d worse in B", worse))
	}
	if better > 0 {
		parts = append(parts, fmt.Sprintf("%d better", better))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; modes: " + strings.Join(parts, ", ")
}

// variantTargets returns the target situations of a variant's sweep:
// -targets, the same for both variants, else those of the variant's
// scenario, which may differ from the other's (-a '-scenario X'). A
// scenario with none under -min-reached is a usage error of the variant;
// an error of -targets is the same for both, and names none.
func variantTargets(rf *reachFlags, name string, sp *spec) (props.SituationSet, error) {
	set, err := rf.targetSet(sp.scenario.Targets, sp.scenario.Name)
	if err != nil && rf.targets == "" {
		return 0, usagef("variant %s: %v", name, err)
	}
	return set, err
}

// variantSpec reads a variant's flags on top of the common ones.
func variantSpec(name, flags string, common specFlags) (*spec, error) {
	argv, err := splitCommand(flags)
	if err != nil {
		return nil, usagef("-%s: %v", name, err)
	}
	fs := flag.NewFlagSet("-"+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var v specFlags
	v.register(fs)
	takes := "-a and -b take run's flags " + strings.Join(dashed(specFlagNames()), ", ")
	if err := fs.Parse(argv); err != nil {
		return nil, usagef("-%s %q: %v; %s", name, flags, err, takes)
	}
	if fs.NArg() > 0 {
		return nil, usagef("-%s %q: unexpected argument %q; %s", name, flags, fs.Arg(0), takes)
	}
	merged := common
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "scenario":
			merged.scenario = v.scenario
		case "strategy":
			merged.strategy = v.strategy
		case "legacy":
			merged.legacy = v.legacy
		case "steps-max":
			merged.stepsMax = v.stepsMax
		case "failpoint":
			merged.failpoints = mergeFailpoints(common.failpoints, v.failpoints)
		case "config":
			// Given later, a variant's setting replaces a common one of
			// the same key.
			merged.config = slices.Concat(common.config, v.config)
		default:
			panic("simrun: compare does not apply the variant flag -" + f.Name)
		}
	})
	sp, err := merged.spec()
	if err != nil {
		msg := fmt.Sprintf("variant %s (-%s %q): %v", upper(name), name, flags, err)
		if refused := (*configRefused)(nil); errors.As(err, &refused) {
			return nil, &configRefused{usageError{msg}} // a scenario of several may be skipped for it
		}
		return nil, &usageError{msg}
	}
	return sp, nil
}

// mergeFailpoints arms a variant's failpoints on top of the common ones:
// a variant's NAME=TERMS replaces a common one of the same name, so that a
// variant can change a failpoint's terms.
func mergeFailpoints(common, variant []string) []string {
	name := func(fp string) string {
		n, _, _ := strings.Cut(fp, "=")
		n = strings.TrimSpace(n)
		if p, err := failpoints.Lookup(n); err == nil {
			return p.Name // a full name and a short one are one failpoint
		}
		return n
	}
	var out []string
	for _, fp := range common {
		if !slices.ContainsFunc(variant, func(v string) bool { return name(v) == name(fp) }) {
			out = append(out, fp)
		}
	}
	return append(out, variant...)
}

func upper(s string) string {
	if s == "a" {
		return "A"
	}
	return "B"
}

// pairSeeds counts the seeds by which variant failed on them — with
// signature sig, or in any way when sig is empty.
func pairSeeds(a, b *sweepState, sig string) pairedTable {
	var t pairedTable
	failsIn := func(st *sweepState, seed uint64) bool {
		s, ok := st.sigs[seed]
		return ok && (sig == "" || s == sig)
	}
	var inA uint64
	for _, seed := range a.failing {
		if sig != "" && a.sigs[seed] != sig {
			continue
		}
		inA++
		if failsIn(b, seed) {
			t.Both++
		}
	}
	t.OnlyA = inA - t.Both
	for _, seed := range b.failing {
		if failsIn(b, seed) && !failsIn(a, seed) {
			t.OnlyB++
		}
	}
	t.Neither = a.ran.n - t.Both - t.OnlyA - t.OnlyB
	return t
}

// compareModes tests every mode seen in either variant on its own.
func compareModes(a, b *sweepState, res *compareResult) []compareMode {
	tally := func(r *sweepResult) triage.Tally {
		t := triage.Tally{Runs: int(r.Seeds)}
		for _, m := range r.Modes {
			t.Modes = append(t.Modes, triage.Mode{Signature: m.Signature, Count: int(m.Count), First: int(m.FirstSeed)})
		}
		return t
	}
	side := func(r *sweepResult, sig string) modeRate {
		mr := modeRate{}
		for _, m := range r.Modes {
			if m.Signature == sig {
				first := m.FirstSeed
				mr = modeRate{Count: m.Count, Rate: m.Rate, CI95: m.CI95, FirstSeed: &first, Replay: m.Replay}
			}
		}
		rate := triage.Rate{K: int(mr.Count), N: int(r.Seeds)}
		if mr.FirstSeed == nil {
			mr.CI95[0], mr.CI95[1] = rate.CI95()
		}
		mr.UpperBound = rate.UpperBound()
		return mr
	}
	cmps := triage.CompareModes(tally(&res.A.sweepResult), tally(&res.B.sweepResult))
	out := make([]compareMode, 0, len(cmps))
	for _, c := range cmps {
		out = append(out, compareMode{Signature: c.Signature, A: side(&res.A.sweepResult, c.Signature), B: side(&res.B.sweepResult, c.Signature),
			Paired: pairSeeds(a, b, c.Signature), P: c.P, PCorrected: c.PCorrected, Verdict: c.Verdict})
	}
	return out
}

// compareHangOut is where compare reports a comparison that ended early,
// by a hang or an interrupt: the text or JSON output and the JUnit report
// asked for.
type compareHangOut struct {
	stdout, stderr io.Writer
	bar            *progressbar.ProgressBar
	json           bool
	requested      seedSet
	multi          bool // one scenario of several
}

// suiteName names the JUnit suite of a comparison of scenario over seeds:
// the scenario is named when it is one of several.
func (h compareHangOut) suiteName(scenario, seeds string) string {
	if h.multi {
		return "simrun compare " + scenario + " " + seeds
	}
	return "simrun compare " + seeds
}

// hangSide is a variant's sweep as far as it went.
type hangSide struct {
	name, flags string
	sp          *spec
	st          *sweepState
	dir         string
}

// compareHangJSON is what compare -json prints when a seed hung or the
// comparison was interrupted: the sweeps as far as they went, and no
// comparison (no p-value, no pairs).
type compareHangJSON struct {
	Scenario  string       `json:"scenario,omitempty"` // with several scenarios
	SeedRange string       `json:"seed_range"`
	Requested string       `json:"requested_seed_range"`
	Stopped   string       `json:"stopped"`
	Hung      string       `json:"hung,omitempty"` // the variant whose seed hung
	Verdict   string       `json:"verdict"`
	A         *compareSide `json:"a,omitempty"`
	B         *compareSide `json:"b,omitempty"` // nil when A stopped: B did not run
}

// sides summarises each variant that ran, A first, and writes the schedule
// of each of its modes' first failing seed. last is the variant that
// stopped; other is A's complete sweep when B stopped, nil otherwise.
func (h compareHangOut) sides(last hangSide, other *hangSide) ([]hangSide, []compareSide, error) {
	if h.bar != nil {
		h.bar.Finish()
	}
	sides := []hangSide{last}
	if other != nil {
		sides = []hangSide{*other, last}
	}
	results := make([]compareSide, len(sides))
	for i, s := range sides {
		r := s.st.summary(s.sp, "")
		if err := writeModeSchedules(s.sp, &r, s.dir); err != nil {
			return nil, nil, err
		}
		results[i] = compareSide{Flags: s.flags, sweepResult: r}
	}
	return sides, results, nil
}

// writeJSON prints j with the variants that ran.
func (h compareHangOut) writeJSON(j compareHangJSON, sides []hangSide, results []compareSide) error {
	for i, s := range sides {
		if s.name == "A" {
			j.A = &results[i]
		} else {
			j.B = &results[i]
		}
	}
	return writeJSON(h.stdout, j)
}

// report reports the hang that stopped variant hung's sweep: the two
// variants no longer run the same seeds, and no pairing of them says
// anything, so the comparison ends there (B does not run after A hung).
// other is A's complete sweep when B hung, nil otherwise.
func (h compareHangOut) report(hung hangSide, other *hangSide, cut string) compareDone {
	d := compareDone{scenario: hung.sp.scenario.Name, err: errFailed, cut: cut}
	sides, results, err := h.sides(hung, other)
	if err != nil {
		d.fatal = err
		return d
	}
	r := &results[len(results)-1].sweepResult // the variant that hung
	// Each mode whose first seed hung: one, unless workers hung at once.
	var hung1 []*sweepMode
	for i := range r.Modes {
		if r.Modes[i].hang != nil {
			hung1 = append(hung1, &r.Modes[i])
		}
	}
	stoppedBy := func(m *sweepMode) string {
		return fmt.Sprintf("variant %s (%s): seed %d hung; no comparison is made until it ends", hung.name, flagsOrNone(hung.flags), m.FirstSeed)
	}
	hm := hung1[0]
	for _, m := range hung1 {
		if m.FirstSeed < hm.FirstSeed {
			hm = m
		}
	}
	d.suite = h.stopSuite(results, sides, hm.Error, "\nrun: "+hm.Replay)
	if h.json {
		j := compareHangJSON{SeedRange: hung.st.ran.String(), Requested: h.requested.String(), Stopped: stoppedBy(hm), Hung: hung.name,
			Verdict: "no comparison: variant " + hung.name + " hung"}
		if h.multi {
			j.Scenario = d.scenario
		}
		if err := h.writeJSON(j, sides, results); err != nil {
			d.fatal = err
			return d
		}
	} else {
		for _, m := range hung1 {
			fmt.Fprintf(h.stdout, "compare: %s\n    %s\n    run: %s\n", stoppedBy(m), m.Error, m.Replay)
		}
	}
	printHangs(h.stderr, h.cmd(d.scenario)+", "+hung.name, r.Modes)
	return d
}

// cmd names the command in what it writes on stderr.
func (h compareHangOut) cmd(scenario string) string {
	if h.multi {
		return "compare -scenario " + scenario
	}
	return "compare"
}

// interrupted reports a comparison stopped by a signal while variant last
// ran: each variant's sweep as far as it went, and no comparison, since
// the two no longer ran the same seeds. other is A's complete sweep when
// B was interrupted, nil otherwise.
func (h compareHangOut) interrupted(last hangSide, other *hangSide) compareDone {
	d := compareDone{scenario: last.sp.scenario.Name, cut: "interrupted"}
	sides, results, err := h.sides(last, other)
	if err != nil {
		d.fatal = err
		return d
	}
	r := &results[len(results)-1].sweepResult
	stopped := fmt.Sprintf("variant %s (%s) interrupted after %d of %d seeds; no comparison is made", last.name, flagsOrNone(last.flags), r.Seeds, last.st.requested.n)
	d.suite = h.stopSuite(results, sides, stopped, "")
	if h.json {
		j := compareHangJSON{SeedRange: last.st.ran.String(), Requested: h.requested.String(), Stopped: stopped,
			Verdict: "no comparison: interrupted"}
		if h.multi {
			j.Scenario = d.scenario
		}
		if err := h.writeJSON(j, sides, results); err != nil {
			d.fatal = err
			return d
		}
	} else {
		fmt.Fprintf(h.stdout, "compare: %s\n", stopped)
		for i, s := range sides {
			fmt.Fprintf(h.stdout, "%s  %s\n", s.name, flagsOrNone(s.flags))
			printSweep(h.stdout, s.sp, &results[i].sweepResult)
		}
	}
	d.err = fmt.Errorf("%s, before any failure", stopped)
	for i, s := range sides {
		s.st.printWarnings(h.stderr, h.cmd(d.scenario)+", "+s.name)
		if results[i].Failures > 0 {
			d.err = errFailed
		}
	}
	return d
}

// stopSuite is the JUnit suite of a comparison that stopped short: a case
// for each variant that ran, the one that stopped the comparison failing
// with failure (and output added to its output): an unfinished comparison
// has not passed.
func (h compareHangOut) stopSuite(results []compareSide, sides []hangSide, failure, output string) triage.JUnitSuite {
	var cases []triage.JUnitCase
	for i, s := range sides {
		f, o := "", ""
		if i == len(sides)-1 { // the variant that stopped
			f, o = failure, output
		}
		cases = append(cases, variantCase(s.name, &results[i], results[i].Seeds, f, o))
	}
	last := results[len(results)-1]
	return triage.JUnitSuite{Name: h.suiteName(last.Scenario, last.SeedRange), Cases: cases}
}

// variantCase is a variant's JUnit case over seeds. It fails with failure,
// output added to its output, when failure is given (the variant that
// stopped an unfinished comparison), and otherwise when a seed failed,
// with the replay of the first.
func variantCase(name string, s *compareSide, seeds uint64, failure, output string) triage.JUnitCase {
	c := triage.JUnitCase{Name: fmt.Sprintf("%s: %s", name, flagsOrNone(s.Flags)), Classname: "simrun.compare." + s.Scenario,
		Time:   time.Duration(s.Seconds * float64(time.Second)),
		Output: fmt.Sprintf("%s, strategy %s, %s: %s", s.Scenario, s.Strategy, engineWords(s.Engine, s.Config, nil), triage.Rate{K: int(s.Failures), N: int(seeds)})}
	switch {
	case failure != "":
		c.Failure = failure
		c.Output += output
	case s.Failures > 0:
		c.Failure = fmt.Sprintf("%d of %d seeds failed", s.Failures, seeds)
		if s.Replay != "" {
			c.Output += "\nreplay the first: " + s.Replay
		}
	}
	return c
}

// writeModeSchedules writes the schedule of every mode's first failing
// seed and sets the modes' replay commands, as sweep does.
func writeModeSchedules(sp *spec, r *sweepResult, dir string) error {
	for i := range r.Modes {
		m := &r.Modes[i]
		nondet := m.Signature == sigNondeterministic
		var o outcome
		if m.hang == nil {
			// A seed whose two runs differed runs twice again, so that
			// the schedule written is one of a pair that was compared.
			o = sp.run(m.FirstSeed, sim.Options{CheckDeterminism: nondet})
			errors.As(o.err, &m.hang) // it failed otherwise in the sweep: not deterministic
		}
		if h := m.hang; h != nil {
			// Running it again would hang again: its stacks say where.
			if err := sp.writeStacks(dir, h); err != nil {
				return err
			}
			m.Error = firstLine(h.Error())
			m.Replay = sp.runCommand(m.FirstSeed, r.Strategy)
			if r.FirstFailure != nil && m.FirstSeed == *r.FirstFailure {
				r.Error, r.Replay = h.Error(), m.Replay
			}
			continue
		}
		file := sp.scheduleFile(dir, m.FirstSeed, "")
		if err := writeSchedule(file, sp, &o); err != nil {
			return err
		}
		m.Replay = sp.reproducer(m.FirstSeed, o.strategy, nondet, file)
		if r.FirstFailure != nil && m.FirstSeed == *r.FirstFailure {
			r.Replay = m.Replay
		}
	}
	return nil
}

func flagsOrNone(f string) string {
	if f == "" {
		return "(no flags)"
	}
	return f
}

func printCompare(w io.Writer, r *compareResult) {
	if r.Scenario != "" {
		fmt.Fprintf(w, "compare %s over seeds %s", r.Scenario, r.SeedRange)
	} else {
		fmt.Fprintf(w, "compare over seeds %s", r.SeedRange)
	}
	if r.Requested != "" {
		fmt.Fprintf(w, " of %s", r.Requested)
	}
	fmt.Fprintf(w, ": %d seeds per variant, paired by seed, in %.2fs\n", r.Seeds, r.Seconds)
	if r.Stopped != "" {
		fmt.Fprintf(w, "  stopped early: %s; B ran the seeds A ran\n", r.Stopped)
	}
	for _, s := range []struct {
		name string
		side *compareSide
	}{{"A", &r.A}, {"B", &r.B}} {
		fmt.Fprintf(w, "  %s  %-16s %s, strategy %s, %s\n", s.name, flagsOrNone(s.side.Flags), s.side.Scenario, s.side.Strategy, engineWords(s.side.Engine, s.side.Config, nil))
	}
	fmt.Fprintln(w, "  failures:")
	fmt.Fprintf(w, "    A  %s\n", triage.Rate{K: int(r.A.Failures), N: int(r.Seeds)})
	fmt.Fprintf(w, "    B  %s\n", triage.Rate{K: int(r.B.Failures), N: int(r.Seeds)})
	fmt.Fprintf(w, "    paired: both %d, only A %d, only B %d, neither %d\n", r.Paired.Both, r.Paired.OnlyA, r.Paired.OnlyB, r.Paired.Neither)
	fmt.Fprintf(w, "    Fisher's exact test: %s\n", r.Verdict)
	printTargetsReached(w, r)
	if len(r.Modes) == 0 {
		return
	}
	if len(r.Modes) == 1 {
		fmt.Fprintln(w, "  failure modes (1), tested on its own:")
	} else {
		fmt.Fprintf(w, "  failure modes (%d), each tested on its own, then corrected for their number (Holm's method):\n", len(r.Modes))
	}
	for _, m := range r.Modes {
		fmt.Fprintf(w, "    %s: %s\n", m.Signature, m.Verdict)
		fmt.Fprintf(w, "      A %s;  B %s\n", triage.Rate{K: int(m.A.Count), N: int(r.Seeds)}, triage.Rate{K: int(m.B.Count), N: int(r.Seeds)})
		fmt.Fprintf(w, "      paired: both %d, only A %d, only B %d\n", m.Paired.Both, m.Paired.OnlyA, m.Paired.OnlyB)
		for _, s := range []struct {
			name string
			mr   modeRate
		}{{"A", m.A}, {"B", m.B}} {
			if s.mr.FirstSeed != nil {
				fmt.Fprintf(w, "      first in %s: seed %d: %s\n", s.name, *s.mr.FirstSeed, s.mr.Replay)
			}
		}
	}
	for _, s := range []struct {
		name string
		side *compareSide
	}{{"A", &r.A}, {"B", &r.B}} {
		if n := len(s.side.Nondetermined); n > 0 {
			fmt.Fprintf(w, "  determinism: %d seed(s) of %s ran differently: %v\n", n, s.name, s.side.Nondetermined)
		}
	}
}

// printTargetsReached writes, for each target situation of either
// variant, the seeds of each that reached it: a B that fails less and
// still reaches the race's window as often fixed the race, where one that
// stopped reaching it only moved it.
func printTargetsReached(w io.Writer, r *compareResult) {
	var targets []string
	for _, name := range append(slices.Clone(r.A.Targets), r.B.Targets...) {
		if !slices.Contains(targets, name) {
			targets = append(targets, name)
		}
	}
	if len(targets) == 0 {
		return
	}
	fmt.Fprintln(w, "  targets reached, in seeds:")
	for _, name := range targets {
		a, b := r.A.Reached[name], r.B.Reached[name]
		seeds := float64(max(r.Seeds, 1))
		fmt.Fprintf(w, "    %s: A %d (%s), B %d (%s)\n", name, a, triage.Percent(float64(a)/seeds), b, triage.Percent(float64(b)/seeds))
	}
}

// compareJUnitCases are a comparison's JUnit cases: a case per variant,
// each followed by a failing case per target of the variant reached in
// fewer than minReached seeds (-min-reached), and a failing case per
// failure mode.
func compareJUnitCases(r *compareResult, minReached uint64) []triage.JUnitCase {
	var cases []triage.JUnitCase
	for _, s := range []struct {
		name string
		side *compareSide
	}{{"A", &r.A}, {"B", &r.B}} {
		cases = append(cases, variantCase(s.name, s.side, r.Seeds, "", ""))
		cases = append(cases, reachCases(&s.side.sweepResult, minReached, s.name+": ", "simrun.compare."+s.side.Scenario)...)
	}
	for _, m := range r.Modes {
		c := triage.JUnitCase{Name: "mode " + m.Signature, Classname: "simrun.compare." + r.A.Scenario, Failure: m.Verdict,
			Output: fmt.Sprintf("A %s; B %s; paired: both %d, only A %d, only B %d", triage.Rate{K: int(m.A.Count), N: int(r.Seeds)},
				triage.Rate{K: int(m.B.Count), N: int(r.Seeds)}, m.Paired.Both, m.Paired.OnlyA, m.Paired.OnlyB)}
		for _, rp := range []string{m.A.Replay, m.B.Replay} {
			if rp != "" {
				c.Output += "\nreplay: " + rp
			}
		}
		cases = append(cases, c)
	}
	return cases
}
