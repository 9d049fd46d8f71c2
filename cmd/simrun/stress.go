package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/schollz/progressbar/v3"

	"github.com/llmdst/llmdst/triage"
)

func init() {
	register(&command{name: "stress", summary: "run a real command many times in parallel and report its failure modes", run: cmdStress})
}

// envFlags collects repeated -env KEY=VALUE flags.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, " ") }

func (e *envFlags) Set(kv string) error {
	k, _, ok := strings.Cut(kv, "=")
	if !ok || k == "" || strings.ContainsAny(k, " \t\n") {
		return fmt.Errorf("%q is not KEY=VALUE", kv)
	}
	*e = append(*e, kv)
	return nil
}

// stressJSON is what -json prints: the report's summary, the conditions
// as a sentence, and why the run stopped early, if it did: an interruption
// or a copy that could not start.
type stressJSON struct {
	triage.Summary
	Conditions string `json:"conditions"`
	Stopped    string `json:"stopped_early,omitempty"`
}

func cmdStress(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: simrun stress [flags] -- CMD ARGS")
		fmt.Fprintln(stderr, "Runs CMD -p copies at a time for -rounds rounds, or as many as fit in -for (alternating with -vs, if given), and")
		fmt.Fprintln(stderr, "reports the failures per round and in total, with 95% intervals, split into failure modes.")
		fmt.Fprintln(stderr, "Every copy gets LLMDST_STRESS_VARIANT, LLMDST_STRESS_ROUND and LLMDST_STRESS_COPY, and LLMDST_REACHED,")
		fmt.Fprintln(stderr, "a file of its own to which task.Reach logs the situations it reaches: the report counts the copies that reached each.")
		fs.PrintDefaults()
	}
	parallel := fs.Int("p", 40, "copies run at once")
	rounds := fs.Int("rounds", 3, "rounds per command; with -vs the commands alternate round by round (with -for and no -rounds: as many as fit)")
	budget := fs.Duration("for", 0, "start no new round once `DURATION` of wall time is spent (a CI budget); the rounds under way end as usual; 0 means none")
	vs := fs.String("vs", "", "a second command `CMD` to compare with, as a shell would split it (quotes and backslashes; no expansion)")
	privateTmp := fs.Bool("private-tmp", false, "give every copy its own empty TMPDIR (and TMP, TEMP, TEMPDIR)")
	var env envFlags
	fs.Var(&env, "env", "set `KEY=VALUE` in every copy's environment (repeatable)")
	load := fs.Int("load", 0, "goroutines burning CPU beside the copies, to starve them as a busy CI machine does")
	timeout := fs.Duration("timeout", 0, "stop a copy running longer than this and count it as failed: SIGQUIT, so that a Go program prints its goroutines' stacks into its output (-junit keeps it), then SIGKILL 2s later; 0 means no limit")
	jsonOut := fs.Bool("json", false, "print one JSON summary object instead of the table")
	junit := fs.String("junit", "", "write a JUnit XML report to `FILE`: one test case per copy, failures with a reproduce command")
	quiet := fs.Bool("quiet", false, "no progress bar, even on a terminal")
	targets := fs.String("targets", "", "report the situations in `LIST` (names the command passes to task.Reach, comma-separated) for each variant, first, even when no copy reached them")
	var minReached wholeNumber
	fs.Var(&minReached, "min-reached", "fail (exit 1) unless every -targets situation was reached in at least `N` copies of each variant: copies that never opened a race's window prove nothing of it (0: only say when a target was reached by none)")
	argv, err := parseFlags(fs, args, math.MaxInt)
	if err != nil {
		return helpOK(err)
	}
	if len(argv) == 0 {
		return usagef("no command after --: want simrun stress [flags] -- CMD ARGS")
	}
	if *parallel < 1 || *parallel > triage.ParallelMax {
		return usagef("-p must be ≥ 1 and ≤ %d, got %d", triage.ParallelMax, *parallel)
	}
	if *rounds < 1 || *rounds > triage.RoundsMax {
		return usagef("-rounds must be ≥ 1 and ≤ %d, got %d", triage.RoundsMax, *rounds)
	}
	if *load < 0 || *load > triage.LoadMax {
		return usagef("-load must be ≥ 0 and ≤ %d, got %d", triage.LoadMax, *load)
	}
	if *timeout < 0 {
		return usagef("-timeout must be ≥ 0 (0 means no limit), got %v", *timeout)
	}
	if *budget < 0 {
		return usagef("-for must be ≥ 0 (0 means no budget), got %v", *budget)
	}
	if *budget > 0 && !flagGiven(fs, "rounds") {
		*rounds = triage.RoundsMax // the budget decides
	}
	targetList, err := stressTargets(*targets)
	if err != nil {
		return err
	}
	if minReached > 0 && len(targetList) == 0 {
		return usagef("-min-reached %d needs target situations: name them with -targets LIST", minReached)
	}
	cfg := triage.StressConfig{Parallel: *parallel, Rounds: *rounds, Cmd: argv, PrivateTmp: *privateTmp, Env: env, Load: *load, Timeout: *timeout, Budget: *budget, Targets: targetList}
	if flagGiven(fs, "vs") {
		b, err := splitCommand(*vs)
		if err != nil {
			return usagef("-vs: %v", err)
		}
		if len(b) == 0 {
			return usagef("-vs %q holds no command", *vs)
		}
		cfg.VsCmd = b
	}
	for _, c := range [][]string{cfg.Cmd, cfg.VsCmd} {
		if c == nil {
			continue
		}
		if _, err := exec.LookPath(c[0]); err != nil {
			return usagef("cannot start %s: %v", triage.ShellJoin(c), errors.Unwrap(err))
		}
	}

	undo, err := outputDirs(fileDir("-junit", *junit)...)
	if err != nil {
		return err
	}
	defer undo()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var bar *progressbar.ProgressBar
	var progress func(done, total int)
	if !*quiet && !*jsonOut && isTerminal(stderr) {
		progress = func(done, total int) {
			if bar == nil {
				bar = newBar(stderr, int64(total), "runs")
			}
			bar.Set(done)
		}
	}
	rep, err := triage.Stress(ctx, cfg, progress)
	if bar != nil {
		bar.Finish()
	}
	if rep == nil {
		// A mistake in the configuration: nothing ran.
		return &usageError{strings.TrimPrefix(err.Error(), "stress: ")}
	}
	stopped := ""
	if err != nil {
		stopped = err.Error()
	}
	if *junit != "" {
		if werr := writeStressJUnit(*junit, rep, uint64(minReached)); werr != nil {
			return werr
		}
	}
	if *jsonOut {
		if werr := writeJSON(stdout, stressJSON{Summary: rep.Summary(), Conditions: rep.Conditions(), Stopped: stopped}); werr != nil {
			return werr
		}
	} else if len(rep.Copies) > 0 {
		if werr := rep.WriteTable(stdout); werr != nil {
			return werr
		}
	}
	failures := 0
	for _, v := range rep.Variants {
		failures += v.Total.K
	}
	why := ""
	if err != nil {
		why = strings.TrimPrefix(err.Error(), "stress: ")
	}
	if err != nil && ctx.Err() == nil {
		// A copy could not start, or its log of situations could not be
		// read: the command or the machine is wrong, not flaky.
		return errors.New(why)
	}
	// -min-reached holds each variant to it, whether or not a copy
	// failed: a B that passes because it no longer opens the race's
	// window has not fixed the race.
	short := stressShortOfReach(rep, uint64(minReached))
	for _, s := range short {
		fmt.Fprintf(stderr, "simrun stress, %s\n", s)
	}
	switch {
	case err != nil && (failures > 0 || len(short) > 0):
		fmt.Fprintf(stderr, "simrun stress: %s; the table covers the rounds completed before\n", why)
		return errFailed
	case err != nil:
		return fmt.Errorf("%s, before any failure", why)
	case failures > 0 || len(short) > 0:
		return errFailed
	}
	return nil
}

// stressTargets splits -targets into its names, trimmed of spaces; any
// name goes, since a real program names its own situations, but an empty
// one or one given twice is a usage error.
func stressTargets(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	var names []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, usagef("-targets %q holds an empty name: want situation names, comma-separated, as the command passes them to task.Reach", list)
		case slices.Contains(names, name):
			return nil, usagef("-targets names %q twice: name each target once", name)
		}
		names = append(names, name)
	}
	return names, nil
}

// stressShortTarget is a target fewer copies of a variant reached than
// -min-reached asked.
type stressShortTarget struct {
	variant, label string // "A", and "A: CMD"
	shortTarget
}

// String says what fell short, after the variant's name.
func (s stressShortTarget) String() string {
	return s.variant + ": " + s.shortTarget.String()
}

// stressShortOfReach returns, variant by variant, the targets reached in
// fewer than min copies; none when min is 0. A variant that ran no copy
// (an interrupted run) is not held to it.
func stressShortOfReach(rep *triage.StressReport, min uint64) []stressShortTarget {
	var short []stressShortTarget
	for _, v := range rep.Variants {
		if v.Total.N == 0 {
			continue
		}
		for _, s := range v.Reached {
			if s.Target && uint64(s.Copies) < min {
				short = append(short, stressShortTarget{variant: v.Name, label: v.Name + ": " + v.Label(),
					shortTarget: shortTarget{name: s.Name, n: uint64(s.Copies), of: uint64(v.Total.N), min: min, unit: "copies"}})
			}
		}
	}
	return short
}

// writeStressJUnit writes stress's JUnit report: a case per copy, then a
// failing case per target of a variant reached in fewer than minReached
// copies (-min-reached), named "VARIANT: target NAME", so that a report
// does not pass a run that proved nothing of a race.
func writeStressJUnit(file string, rep *triage.StressReport, minReached uint64) error {
	cases := rep.JUnitCases()
	for _, s := range stressShortOfReach(rep, minReached) {
		cases = append(cases, triage.JUnitCase{Name: s.variant + ": target " + s.name, Classname: s.label, Failure: s.shortTarget.String(),
			Output: "copies that did not reach the target say nothing of what happens there: run more copies, or under conditions that reach it (-p, -load, -for)"})
	}
	return writeFile(file, func(w io.Writer) error {
		return triage.WriteJUnit(w, "simrun stress", cases)
	})
}

// splitCommand splits a command line into argv as a POSIX shell would,
// without expanding anything: words are separated by blanks; 'single
// quotes' keep everything literally; "double quotes" keep everything but
// \" \\ \$ \` and an escaped newline; outside quotes a backslash keeps the
// next character (and an escaped newline disappears). An unterminated
// quote or a trailing backslash is an error.
func splitCommand(s string) ([]string, error) {
	var argv []string
	var word strings.Builder
	inWord := false
	r := []rune(s)
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				argv = append(argv, word.String())
				word.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 >= len(r) {
				return nil, fmt.Errorf("%q ends with a lone backslash", s)
			}
			i++
			inWord = true
			if r[i] != '\n' {
				word.WriteRune(r[i])
			}
		case c == '\'':
			end := i + 1
			for end < len(r) && r[end] != '\'' {
				end++
			}
			if end >= len(r) {
				return nil, fmt.Errorf("%q has an unterminated single quote at character %d", s, i+1)
			}
			word.WriteString(string(r[i+1 : end]))
			inWord, i = true, end
		case c == '"':
			j := i + 1
			for ; j < len(r) && r[j] != '"'; j++ {
				if r[j] == '\\' && j+1 < len(r) && strings.ContainsRune("\"\\$`\n", r[j+1]) {
					j++
					if r[j] != '\n' {
						word.WriteRune(r[j])
					}
					continue
				}
				word.WriteRune(r[j])
			}
			if j >= len(r) {
				return nil, fmt.Errorf("%q has an unterminated double quote at character %d", s, i+1)
			}
			inWord, i = true, j
		default:
			word.WriteRune(c)
			inWord = true
		}
	}
	if inWord {
		argv = append(argv, word.String())
	}
	return argv, nil
}
