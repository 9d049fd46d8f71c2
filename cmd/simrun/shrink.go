package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

func init() {
	register(&command{name: "shrink", summary: "minimise a failing run to the fewest preemptions and waits that still fail (-reach: that still reach a situation)", run: cmdShrink})
}

// shrinkDeadlineDefault bounds a shrink's wall time when -deadline is not
// given.
const shrinkDeadlineDefault = 2 * time.Minute

type shrinkJSON struct {
	Scenario   string            `json:"scenario"`
	Seed       uint64            `json:"seed"`
	Strategy   string            `json:"strategy"`
	Engine     string            `json:"engine"`
	Config     []string          `json:"config,omitempty"` // -config, sorted by key
	Failed     bool              `json:"failed"`
	Reaches    string            `json:"reaches,omitempty"` // -reach: the situation every candidate had to reach
	Signature  string            `json:"signature,omitempty"`
	Error      string            `json:"error,omitempty"`
	Before     *sim.Interleaving `json:"before,omitempty"`
	After      *sim.Interleaving `json:"after,omitempty"`
	Runs       int               `json:"runs"`
	Exhausted  bool              `json:"tries_exhausted,omitempty"`
	Cancelled  bool              `json:"deadline_reached,omitempty"`
	Hang       string            `json:"candidate_hang,omitempty"` // a candidate schedule hung, and the shrink stopped
	Schedule   string            `json:"schedule,omitempty"`
	Replay     string            `json:"replay,omitempty"`
	TraceHash  string            `json:"trace_hash,omitempty"`
	ShrunkFrom string            `json:"shrunk_from,omitempty"`
}

func cmdShrink(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shrink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: simrun shrink -scenario NAME -seed N [flags]")
		fmt.Fprintln(stderr, "       simrun shrink [flags] FILE.schedule")
		fmt.Fprintln(stderr, "Minimises a failing run, by delta debugging over its recorded decisions, to the fewest")
		fmt.Fprintln(stderr, "preemptions (then waits) that still fail with the same failure signature, and writes")
		fmt.Fprintln(stderr, "the shrunk schedule, which simrun replay reproduces exactly. With -reach SITUATION it shrinks")
		fmt.Fprintln(stderr, "a run that reached the situation, passing or failing, to the fewest that still reach it")
		fmt.Fprintln(stderr, "and still pass, or fail the same way: the simplest opening of a race's window.")
		fs.PrintDefaults()
	}
	var sf specFlags
	sf.register(fs)
	seed := new(uint64(1))
	fs.Var((*wholeNumber)(seed), "seed", "the seed `N` whose failure to shrink")
	out := fs.String("out", "out", "directory for the shrunk schedule file")
	story := fs.Bool("story", false, "print the shrunk run as a story: starvation, engine events, the failure")
	trace := fs.String("trace", "", "write the shrunk run's trace to `FILE`: Perfetto/Chrome JSON (.json), JSON lines (.jsonl) or text (.txt)")
	html := fs.String("html", "", "write the shrunk run as a self-contained HTML timeline to `FILE`")
	jsonOut := fs.Bool("json", false, "print one JSON object instead of text")
	tries := fs.Int("tries", sim.DefaultShrinkRunsMax, "runs the shrink may make")
	deadline := fs.Duration("deadline", shrinkDeadlineDefault, "wall time the shrink may take; it stops with the simplest failure found so far")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	reach := fs.String("reach", "", "shrink to the simplest run that still reaches `SITUATION` (simrun list -situations), and still passes or fails as the run did, rather than the simplest that fails")
	var timeout time.Duration
	registerSeedTimeout(fs, &timeout)
	sf.timeout = &timeout
	rest, err := parseFlags(fs, args, 1)
	if err != nil {
		return helpOK(err)
	}
	if *tries < 1 {
		return usagef("-tries must be ≥ 1, got %d", *tries)
	}
	if *deadline <= 0 {
		return usagef("-deadline must be a positive duration, as in 30s, got %v", *deadline)
	}
	if err := (&outputFlags{json: *jsonOut, story: *story}).check(); err != nil {
		return err
	}
	var target props.Situation
	if *reach != "" {
		if target, err = props.ParseSituation(*reach); err != nil {
			return usagef("-reach: %v", err)
		}
	}

	dirs := append([]outPlace{outDir("-out", *out)}, fileDir("-trace", *trace)...)
	undo, err := outputDirs(append(dirs, fileDir("-html", *html)...)...)
	if err != nil {
		return err
	}
	defer undo()

	var sp *spec
	var o outcome
	from := ""
	explored := "" // the bound of the walk that found the file's schedule, if one did
	if len(rest) == 1 {
		for _, name := range append(specFlagNames(), "seed") {
			if flagGiven(fs, name) {
				return usagef("-%s does not go with a schedule file: the file says how its run was made", name)
			}
		}
		from = rest[0]
		sch, err := readSchedule(from)
		if err != nil {
			return err
		}
		var s uint64
		sp, s, err = specFromSchedule(sch)
		if err != nil {
			return usagef("%s: %v", from, err)
		}
		*seed = s
		sp.seedTimeout = timeout
		o = sp.run(s, sim.Options{Strategy: sim.Replay(sch)})
		o.strategy, _ = sch.Get("strategy")
		explored, _ = sch.Get("explored")
		if err := diverged(from, o.res.Err); err != nil {
			return err
		}
	} else {
		if sp, err = sf.spec(); err != nil {
			return err
		}
		if err := sp.checkReplaySeeds(seedSet{spans: []span{{*seed, *seed}}, n: 1}, "-seed"); err != nil {
			return err
		}
		sp.seedTimeout = timeout
		o = sp.run(*seed, sim.Options{})
		from = sp.runCommand(*seed, o.strategy)
	}

	head := fmt.Sprintf("%s seed %d, strategy %s, %s", sp.scenario.Name, *seed, o.strategy, sp.engineWords())
	var hang *sim.HangError
	nothing := ""
	switch {
	case errors.As(o.err, &hang):
	case *reach == "" && !o.failed():
		nothing = "no failure to shrink"
	case *reach != "" && !o.reached().Has(target):
		nothing = "it did not reach " + target.String() + ", nothing to shrink"
	}
	if nothing != "" {
		if *jsonOut {
			if err := writeJSON(stdout, shrinkJSON{Scenario: sp.scenario.Name, Seed: *seed, Strategy: o.strategy, Engine: sp.engineName(), Config: sp.configStrings(),
				Failed: o.failed(), Signature: signatureOf(o), Reaches: *reach}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(stdout, "%s: %s after %d steps — %s\n", head, passOrFail(o), o.res.Steps, nothing)
		}
		return failedErr(&o)
	}

	if hang != nil {
		// A run that does not end leaves no schedule to shrink.
		if err := sp.writeStacks(*out, hang); err != nil {
			return err
		}
		if *jsonOut {
			j := shrinkJSON{Scenario: sp.scenario.Name, Seed: *seed, Strategy: o.strategy, Engine: sp.engineName(), Config: sp.configStrings(), Failed: true,
				Signature: hang.Signature(), Error: hang.Error(), ShrunkFrom: from}
			if err := writeJSON(stdout, j); err != nil {
				return err
			}
			return errFailed
		}
		fmt.Fprintf(stdout, "shrink %s: HANG, nothing to shrink: a run that does not end leaves no schedule\n  %s\n", head, indent(hang.Error(), "  "))
		return errFailed
	}

	// What every candidate must keep: the failure, by its signature (or
	// the pass), and under -reach the situation.
	want := signatureOf(o)
	keeps := func(r *outcome) bool {
		return signatureOf(*r) == want && (*reach == "" || r.reached().Has(target))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	// A candidate schedule that hangs is a failure of its own, and each
	// leaves a goroutine behind: the shrink stops at the first.
	var candidateHang *sim.HangError
	test := func(opts sim.Options) (sim.Result, bool) {
		r := sp.run(*seed, opts)
		if errors.As(r.err, &candidateHang) {
			cancel()
			return r.res, false
		}
		return r.res, keeps(&r)
	}
	opts := sim.ShrinkOptions{RunsMax: *tries, StepsMax: sp.stepsMax}
	if o.res.StepLimited() {
		opts.StepsMax = o.res.Steps // the failure is the limit: keep it where it was
	}
	goal := "FAIL, " + want // what the shrunk run is, for the text
	if want == "" {
		goal = "ok"
	}
	if *reach != "" {
		goal = "reaches " + *reach + ", " + goal
	}
	if !*quiet {
		fmt.Fprintf(stderr, "shrink %s: %s\n", head, goal)
		opts.Progress = func(s sim.ShrinkStats) {
			fmt.Fprintf(stderr, "  run %d: %v\n", s.Runs, s.After)
		}
	}
	shrunk, stats, err := sim.Shrink(ctx, o.res.Schedule, test, opts)
	if errors.Is(err, sim.ErrShrinkNoFailure) {
		return fmt.Errorf("%s: %s, but not again when its own schedule is followed: the run is not deterministic (%v)", head, goal, err)
	}
	if err != nil {
		return err
	}
	if candidateHang != nil {
		if err := sp.writeStacks(*out, candidateHang); err != nil {
			return err
		}
	}

	// The shrunk run, replayed strictly from its schedule: what the file
	// will reproduce. The story and the trace come from the same run under
	// Guided, which follows the schedule to the letter and says in the
	// trace whom it withholds and preempts.
	so := sp.run(*seed, sim.Options{Strategy: sim.Replay(shrunk)})
	so.strategy = o.strategy
	if !keeps(&so) {
		panic(fmt.Sprintf("simrun: the shrunk schedule of %s does not replay to the same end (%s; %v): a broken invariant of sim.Shrink", head, goal, so.err))
	}
	if *story || *trace != "" || *html != "" {
		told := sp.run(*seed, sim.Options{Strategy: sim.Guided(shrunk), Trace: true})
		if told.res.TraceHash != so.res.TraceHash {
			panic(fmt.Sprintf("simrun: Guided and Replay of the shrunk schedule of %s differ: a broken invariant of sim.Guided", head))
		}
		so.res.Trace = told.res.Trace
	}
	suffix := ".shrunk"
	extra := []sim.Meta{
		{Key: "shrunk-from", Value: from},
		{Key: "preemptions", Value: strconv.Itoa(stats.After.Preemptions)},
		{Key: "waits", Value: strconv.Itoa(stats.After.Waits)},
	}
	if *reach != "" {
		suffix = ".reach-" + *reach
		extra = append(extra, sim.Meta{Key: "reaches", Value: *reach})
	}
	if explored != "" {
		// A walk's schedule, not the seed's own: its shrunk file must not
		// take the place of the seed's.
		suffix = exploredSuffix("") + suffix
		extra = append(extra, sim.Meta{Key: "explored", Value: explored})
	}
	file := sp.scheduleFile(*out, *seed, suffix)
	if err := writeSchedule(file, sp, &so, extra...); err != nil {
		return err
	}
	if *trace != "" {
		if err := writeTrace(*trace, so.res.Trace); err != nil {
			return err
		}
	}
	if *html != "" {
		if err := writeHTML(*html, sp, &so, file); err != nil {
			return err
		}
	}

	if *jsonOut {
		j := shrinkJSON{Scenario: sp.scenario.Name, Seed: *seed, Strategy: o.strategy, Engine: sp.engineName(), Config: sp.configStrings(), Failed: so.failed(),
			Signature: want, Reaches: *reach, Before: &stats.Before, After: &stats.After, Runs: stats.Runs,
			Exhausted: stats.Exhausted, Cancelled: stats.Cancelled, Schedule: file, Replay: replayCommand(file),
			TraceHash: fmt.Sprintf("%016x", so.res.TraceHash), ShrunkFrom: from}
		if so.failed() {
			j.Error = so.err.Error()
		}
		if candidateHang != nil {
			j.Hang = firstLine(candidateHang.Error())
		}
		if err := writeJSON(stdout, j); err != nil {
			return err
		}
		return failedErr(&so)
	}
	fmt.Fprintf(stdout, "shrink %s: %s\n", head, goal)
	fmt.Fprintf(stdout, "  before: %6d decisions, %3d preemptions, %3d waits\n", stats.Before.Decisions, stats.Before.Preemptions, stats.Before.Waits)
	fmt.Fprintf(stdout, "  after:  %6d decisions, %3d preemptions, %3d waits  (%d runs)\n", stats.After.Decisions, stats.After.Preemptions, stats.After.Waits, stats.Runs)
	switch {
	case stats.Exhausted:
		fmt.Fprintf(stdout, "  stopped at -tries %d: the simplest run found so far; more tries may shrink it further\n", *tries)
	case candidateHang != nil:
		fmt.Fprintf(stdout, "  stopped: a candidate schedule hung, the simplest run found so far is below\n    %s\n", indent(candidateHang.Error(), "    "))
	case stats.Cancelled:
		fmt.Fprintf(stdout, "  stopped at -deadline %v: the simplest run found so far; more time may shrink it further\n", *deadline)
	}
	if so.failed() {
		fmt.Fprintf(stdout, "  %s\n", indent(so.err.Error(), "  "))
	}
	fmt.Fprintf(stdout, "  shrunk schedule: %s\n", file)
	fmt.Fprintf(stdout, "  replay: %s\n", replayCommand(file))
	if *trace != "" {
		fmt.Fprintf(stdout, "  trace: %s\n", *trace)
	}
	if *html != "" {
		fmt.Fprintf(stdout, "  timeline: %s\n", *html)
	}
	if *story {
		fmt.Fprintln(stdout)
		if err := scenario.WriteStory(stdout, so.res.Trace); err != nil {
			return err
		}
	}
	return failedErr(&so)
}

// signatureOf is a run's failure signature; "" when it passed.
func signatureOf(o outcome) string {
	if !o.failed() {
		return ""
	}
	return signature(o.err)
}

// passOrFail says how a run ended, in a word.
func passOrFail(o outcome) string {
	if o.failed() {
		return "FAIL"
	}
	return "ok"
}

// failedErr is errFailed for a run that failed, nil for one that passed.
func failedErr(o *outcome) error {
	if o.failed() {
		return errFailed
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
