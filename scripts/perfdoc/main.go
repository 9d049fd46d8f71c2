// Command perfdoc writes docs/PERFORMANCE.md from the output of make bench:
// Go benchmark results (the medians of every count), a simrun stress of the
// real-runtime founding test and a simrun sweep of the same case, simrun
// explore's walks of it, and the machine they ran on.
//
// Usage:
//
//	go run ./scripts/perfdoc -bench out/bench/bench.txt -stress out/bench/stress.json \
//		-sweep out/bench/sweep.json -explore 'out/bench/explore-*.json' > docs/PERFORMANCE.md
package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/props"
)

// history is what each optimisation bought, as measured when it was made:
// written by hand, appended as is.
//
//go:embed history.md
var history string

// result is one benchmark's metrics over its counts.
type result struct {
	values map[string][]float64 // unit → one value per count
}

func (r *result) median(unit string) (float64, bool) {
	vs := r.values[unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// span returns the lowest and the highest of a unit's counts.
func (r *result) span(unit string) (lo, hi float64, ok bool) {
	vs := r.values[unit]
	if len(vs) == 0 {
		return 0, 0, false
	}
	return slices.Min(vs), slices.Max(vs), true
}

// parseBench reads `go test -bench` output. A benchmark's name keeps its
// -P suffix, which says on how many cores it ran.
func parseBench(r io.Reader) (map[string]*result, map[string]string, error) {
	out := map[string]*result{}
	env := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "Benchmark") && !strings.Contains(k, " ") {
			env[k] = strings.TrimSpace(v) // some CPUs' names are padded with spaces
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		res := out[f[0]]
		if res == nil {
			res = &result{values: map[string][]float64{}}
			out[f[0]] = res
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%q: %q is not a number", line, f[i])
			}
			res.values[f[i+1]] = append(res.values[f[i+1]], v)
		}
	}
	return out, env, sc.Err()
}

type stressSummary struct {
	Parallel       int             `json:"parallel"`
	Rounds         int             `json:"rounds"`
	ElapsedSeconds float64         `json:"elapsed_seconds"`
	Variants       []stressVariant `json:"variants"`
}

type stressVariant struct {
	Runs                int      `json:"runs"`
	Failed              int      `json:"failures"`
	UpperBound          float64  `json:"upper_bound"`
	FirstFailureSeconds *float64 `json:"first_failure_seconds"`
	ExecsPerSec         float64  `json:"execs_per_sec"`
	// Reached counts the copies that reached each situation (their
	// task.Reach log), the -targets always; nil from a stress that
	// counted none.
	Reached map[string]int `json:"reached"`
}

type sweepSummary struct {
	Seeds         uint64   `json:"seeds"`
	Failures      uint64   `json:"failures"`
	Rate          float64  `json:"rate"`
	SeedsPerSec   float64  `json:"seeds_per_sec"`
	Seconds       float64  `json:"elapsed_seconds"`
	Workers       int      `json:"workers"`
	FirstFailSecs *float64 `json:"first_failure_after_seconds"`
	// Reached counts the seeds that reached each situation.
	Reached map[string]uint64 `json:"reached"`

	profile *profileShares // a legacy sweep's CPU profile (-profile); nil when none
}

// exploreSummary is what simrun explore -json prints.
type exploreSummary struct {
	Engine          string  `json:"engine"`
	Delays          int     `json:"delays"`
	Workers         int     `json:"workers"`
	Schedules       int     `json:"schedules"`
	Complete        bool    `json:"complete"`
	Failed          bool    `json:"failed"`
	Seconds         float64 `json:"elapsed_seconds"`
	SchedulesPerSec float64 `json:"schedules_per_sec"`
}

// writeWalks sets out the walks of simrun explore over the founding case:
// how many schedules each bound holds, to size a walk by, and how fast
// they run.
func writeWalks(p func(string, ...any), walks []exploreSummary) {
	if len(walks) == 0 {
		return
	}
	p("## Every schedule within a bound")
	p("")
	p("`simrun explore -scenario abort-reuse` runs seed 1 under every schedule within D departures")
	p("from `starve:output-handler`'s calm one, on both cores. The schedules a bound holds grow by")
	p("a factor of about the run's decisions with each departure; a walk's cost is theirs:")
	p("")
	head(p, "engine", "departures", "schedules", "outcome", "wall", "schedules per second")
	for _, w := range walks {
		outcome := "stopped early, none failed"
		switch {
		case w.Failed:
			outcome = "failed: the first failing schedule found"
		case w.Complete:
			outcome = "every one passed"
		}
		p("| %s | %d | %d | %s | %.2f s | %.0f |", w.Engine, w.Delays, w.Schedules, outcome, w.Seconds, w.SchedulesPerSec)
	}
	p("")
}

// founding is the situation the founding race needs: a legacy run fails
// exactly when it reaches it.
var founding = props.StaleFrameAfterReuse.String()

// writeWindows counts the two sides in openings of the founding race's
// window, which is what a run is for. The real-runtime test follows its
// engine with the same checker and logs the situations it reached, which
// the stress counts; a stress that did not count them (an older file)
// stands in its failures, since a legacy run fails exactly when it opens
// the window. Then the situations either side reached, side by side.
func writeWindows(p func(string, ...any), stress *stressSummary, sweep *sweepSummary) {
	opened, ok := sweep.Reached[founding]
	if !ok || len(stress.Variants) == 0 || sweep.Seconds <= 0 || stress.Variants[0].ExecsPerSec <= 0 {
		return
	}
	v := stress.Variants[0]
	simRate := float64(opened) / sweep.Seconds
	realOpened, measured := v.Reached[founding]
	if !measured {
		realOpened = v.Failed
	}
	share, bound := float64(realOpened)/float64(max(v.Runs, 1)), ""
	if realOpened == 0 {
		share, bound = 3/float64(max(v.Runs, 1)), "at most " // the rule of three
	}
	realRate := share * v.ExecsPerSec
	p("Counted in openings of the founding race's window (`%s`) rather than in executions: the", founding)
	p("sweep opened it on %d of its %d seeds, %.0f a second.", opened, sweep.Seeds, simRate)
	if measured {
		p("The real-runtime test follows its engine with the same checker, which logs the situations each process")
		p("reached (`props.Checker.Observer`, `LLMDST_REACHED`), and `simrun stress -targets` counts them: the real processes")
		p("opened the window in %d of their %d executions, %s%.2f%% of the time,", realOpened, v.Runs, bound, 100*share)
	} else {
		p("A legacy run fails exactly when it opens")
		p("the window (it routes the old incarnation's frame to the new one; `scenario.TestTheFixedEnginePassesWhereTheLegacyEngineFails`")
		p("holds it seed by seed), so the real processes, with %d failures in %d executions, opened it %s%.2f%%", v.Failed, v.Runs, bound, 100*share)
		p("of the time,")
	}
	p("%s%.2f a second: the simulator opened it %s%.0f times as often. The target above counts", bound, realRate, strings.Replace(bound, "at most", "at least", 1), simRate/realRate)
	p("executions; this is what an execution of each is worth.")
	p("")
	if !measured {
		return
	}
	p("Every situation either side reached, in executions (seeds):")
	p("")
	head(p, "situation", fmt.Sprintf("real processes, of %d", v.Runs), fmt.Sprintf("simulator, of %d", sweep.Seeds))
	for _, s := range props.AllSituations {
		name := s.String()
		r, n := v.Reached[name], sweep.Reached[name]
		if r == 0 && n == 0 {
			continue
		}
		p("| `%s` | %d (%.1f%%) | %d (%.1f%%) |", name, r, 100*float64(r)/float64(max(v.Runs, 1)), n, 100*float64(n)/float64(max(sweep.Seeds, 1)))
	}
	p("")
}

// writeScenarios sets out every scenario's seed, one core, under its own
// default strategy, as BenchmarkSeed measured it: what a hunt of each
// costs. The scenarios are those the benchmark ran, in name order.
func writeScenarios(p func(string, ...any), b map[string]*result) {
	var names []string
	for name := range b {
		if s, ok := strings.CutPrefix(name, "BenchmarkSeed/"); ok {
			if sc, ok := strings.CutSuffix(s, "/fixed"); ok {
				names = append(names, sc)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	p("## Each scenario's seeds")
	p("")
	p("Seeds per second on one core, each scenario under its default strategy, to size a hunt")
	one, ok1 := get(b, "BenchmarkSeedParallel/abort-reuse/fixed", "seeds/s")
	both, ok2 := get(b, "BenchmarkSeedParallel/abort-reuse/fixed-2", "seeds/s")
	if ok1 && ok2 && one > 0 {
		p("(a sweep on two cores runs %.1f times as many: abort-reuse's `BenchmarkSeedParallel`), the", both/one)
	} else {
		p("(a sweep on more cores runs more: `BenchmarkSeedParallel` says how many), the")
	}
	p("fixed engine's on two data-parallel")
	p("engine cores too (`-config data-parallel-size=2`); the decisions, bytes and allocations")
	p("are the fixed engine's on one engine core, a seed's mean:")
	p("")
	head(p, "scenario", "fixed engine, seeds/s", "legacy engine, seeds/s", "fixed, two cores, seeds/s", "decisions", "µs a decision", "bytes", "allocations")
	for _, sc := range names {
		fixed, legacy := "BenchmarkSeed/"+sc+"/fixed", "BenchmarkSeed/"+sc+"/legacy"
		s, okS := get(b, fixed, "seeds/s")
		l, okL := get(b, legacy, "seeds/s")
		d, okD := get(b, "BenchmarkSeed/"+sc+"/dp2", "seeds/s")
		st, okT := get(b, fixed, "steps/seed")
		bytes, okB := get(b, fixed, "B/op")
		allocs, okA := get(b, fixed, "allocs/op")
		per, okP := 0.0, okS && okT && s > 0 && st > 0
		if okP {
			per = 1e6 / s / st
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |", sc, num(s, okS, "%.0f"), num(l, okL, "%.0f"), num(d, okD, "%.0f"),
			num(st, okT, "%.0f"), num(per, okP, "%.2f"), num(bytes, okB, "%.0f"), num(allocs, okA, "%.0f"))
	}
	p("")
}

func readJSON(file string, v any) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func main() {
	benchFile := flag.String("bench", "out/bench/bench.txt", "go test -bench output")
	stressFile := flag.String("stress", "out/bench/stress.json", "simrun stress -json output")
	sweepFile := flag.String("sweep", "out/bench/sweep.json", "simrun sweep -json output")
	pgo := flag.String("pgo", "off", "the profile the benchmarks were built with (go build -pgo), or off")
	exploreGlob := flag.String("explore", "", "simrun explore -json outputs, a glob (\"\": none), set out in the order of their names")
	runsFile := flag.String("runs", "", "every make bench run's headline figures (scripts/perfdoc/runs.tsv), set out with this run's after them (\"\": none)")
	record := flag.Bool("record", false, "add this run's row to the -runs file")
	code := flag.String("code", "", "the commit the benchmarks measured, for this run's row (-runs)")
	profileFile := flag.String("profile", "", "go tool pprof -top -nodefraction=0 of a legacy sweep's CPU profile, for what a seed's time goes to (\"\": none)")
	flag.Parse()
	if *record && *runsFile == "" {
		fail(fmt.Errorf("-record adds this run to the -runs file, and no -runs was given"))
	}
	f, err := os.Open(*benchFile)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	bench, env, err := parseBench(f)
	if err != nil {
		fail(err)
	}
	var stress stressSummary
	if err := readJSON(*stressFile, &stress); err != nil {
		fail(fmt.Errorf("stress: %w", err))
	}
	var sweep sweepSummary
	if err := readJSON(*sweepFile, &sweep); err != nil {
		fail(fmt.Errorf("sweep: %w", err))
	}
	if *profileFile != "" {
		// A profile unread is a paragraph short, not a run lost.
		if sweep.profile, err = readProfileTop(*profileFile); err != nil {
			fmt.Fprintf(os.Stderr, "perfdoc: -profile: %v; the document leaves it out\n", err)
		}
	}
	var walks []exploreSummary
	if *exploreGlob != "" {
		files, err := filepath.Glob(*exploreGlob)
		if err != nil {
			fail(fmt.Errorf("-explore: %w", err))
		}
		slices.Sort(files)
		for _, file := range files {
			var w exploreSummary
			if err := readJSON(file, &w); err != nil {
				fail(fmt.Errorf("explore: %s: %w", file, err))
			}
			walks = append(walks, w)
		}
	}
	// The benchmarks ran on this machine just before, with its GOMAXPROCS.
	procs := runtime.GOMAXPROCS(0)
	var runs []run
	if *runsFile != "" {
		if runs, err = readRuns(*runsFile); err != nil {
			fail(fmt.Errorf("-runs: %w", err))
		}
		runs = append(runs, thisRun(time.Now().UTC().Format("2006-01-02"), *code, env, procs, bench, &stress, &sweep))
		if *record {
			// The document is still written: a run not kept is a row
			// short, not a run lost.
			if err := recordRun(*runsFile, runs); err != nil {
				fmt.Fprintf(os.Stderr, "perfdoc: -record: %v (-stress %s, -sweep %s); not kept\n", err, *stressFile, *sweepFile)
			}
		}
	}
	w := bufio.NewWriter(os.Stdout)
	write(w, bench, env, &stress, &sweep, walks, runs, procs, *pgo)
	if err := w.Flush(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "perfdoc:", err)
	os.Exit(1)
}

// get returns a benchmark's median for unit, or NaN-free 0 and false.
func get(b map[string]*result, name, unit string) (float64, bool) {
	r, ok := b[name]
	if !ok {
		return 0, false
	}
	return r.median(unit)
}

// spread is a benchmark's range over its counts, in format, for the targets
// table: how far from its target a median might move in the next run.
func spread(b map[string]*result, name, unit, format string) string {
	r, ok := b[name]
	if !ok {
		return "—"
	}
	lo, hi, ok := r.span(unit)
	if !ok {
		return "—"
	}
	return fmt.Sprintf(format+" – "+format+" (%d)", lo, hi, len(r.values[unit]))
}

// spreadFloorNs leaves out of widestSpread the benchmarks of a nanosecond
// or so, whose counts move with the code's alignment more than the host.
const spreadFloorNs = 100

// widestSpread is the benchmark whose counts spread the widest about their
// median time, (highest − lowest) ÷ median in percent, among those of three
// counts or more and of spreadFloorNs or more: the noise of the host as this
// run saw it.
func widestSpread(b map[string]*result) (name string, pct float64, ok bool) {
	names := make([]string, 0, len(b))
	for n := range b {
		names = append(names, n)
	}
	sort.Strings(names) // the first of equals, whatever the map's order
	for _, n := range names {
		r := b[n]
		if len(r.values["ns/op"]) < 3 {
			continue
		}
		med, _ := r.median("ns/op")
		lo, hi, _ := r.span("ns/op")
		if med < spreadFloorNs {
			continue
		}
		if v := 100 * (hi - lo) / med; !ok || v > pct {
			name, pct, ok = n, v, true
		}
	}
	return name, pct, ok
}

// head writes a table's header, a column a name, and the line under it.
func head(p func(string, ...any), cols ...string) {
	var row strings.Builder
	row.WriteString("|")
	for _, c := range cols {
		if c != "" {
			row.WriteString(" " + c)
		}
		row.WriteString(" |")
	}
	p("%s", row.String())
	p("|%s", strings.Repeat("---|", len(cols)))
}

func num(v float64, ok bool, format string) string {
	if !ok {
		return "not measured"
	}
	return fmt.Sprintf(format, v)
}

func verdict(ok, met bool) string {
	switch {
	case !ok:
		return "—"
	case met:
		return "met"
	}
	return "**not met**"
}

// benchName names a benchmark that make bench runs without -test.cpu: go
// test appends the GOMAXPROCS it ran at, "-4" on four cores, nothing at 1.
// Those run with -test.cpu 1,2 are named "" and "-2" on every machine.
func benchName(name string, procs int) string {
	if procs == 1 {
		return name
	}
	return name + "-" + strconv.Itoa(procs)
}

// write writes the document; runs are every make bench run, this one last
// (none: the section is left out).
func write(w io.Writer, b map[string]*result, env map[string]string, stress *stressSummary, sweep *sweepSummary, walks []exploreSummary, runs []run, procs int, pgo string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	at := func(name string) string { return benchName(name, procs) }
	p("# Performance")
	p("")
	p("Generated by `make bench` (scripts/bench.sh, then `go run ./scripts/perfdoc`) on %s.", time.Now().UTC().Format("2006-01-02"))
	p("Every figure is the median of the benchmark's counts, one a round, the rounds one after")
	p("another; `out/bench/bench.txt` holds them all, and `benchstat` compares two such files. Runs")
	p("use GOGC=400, as `simrun` does.")
	if pgo == "off" || pgo == "" {
		p("The binaries were built without profile-guided optimisation (PGO=off).")
	} else {
		p("The binaries were built with the profile `cmd/simrun/default.pgo` (profile-guided")
		p("optimisation), as `go build ./cmd/simrun` builds `simrun`; `make pgo` writes it again.")
	}
	p("")
	p("**Machine:** %s, %s/%s, %d cores seen by Go, %s.", env["cpu"], env["goos"], env["goarch"], runtime.NumCPU(), runtime.Version())
	if name, pct, ok := widestSpread(b); ok {
		p("On this run the counts of one benchmark spread by as much as %.0f%% of their median (`%s`),", pct, name)
		p("so a figure may differ as much from one `make bench` to the next: benchstat says when a")
		p("difference is more than that.")
	}
	p("")

	p("## Targets")
	p("")
	p("The range is the lowest and the highest of the counts (how many in brackets); a target")
	p("whose range straddles it is met on some runs and missed on others. The two rows measured by")
	p("one run each have none.")
	p("")
	head(p, "what", "target", "measured", "range over the counts", "")
	seeds2, ok2 := get(b, "BenchmarkSeedParallel/abort-reuse/fixed-2", "seeds/s")
	p("| abort-reuse seeds per second, both cores | ≥ 20,000 | %s | %s | %s |", num(seeds2, ok2, "%.0f"),
		spread(b, "BenchmarkSeedParallel/abort-reuse/fixed-2", "seeds/s", "%.0f"), verdict(ok2, seeds2 >= 20000))
	sw, okSw := get(b, at("BenchmarkYieldSwitch/pull"), "ns/switch")
	p("| a task switch (decision and baton pass) | < 100 ns | %s | %s | %s |", num(sw, okSw, "%.0f ns"),
		spread(b, at("BenchmarkYieldSwitch/pull"), "ns/switch", "%.0f"), verdict(okSw, sw < 100))
	vt, okVt := get(b, at("BenchmarkVirtualTime"), "x-realtime")
	p("| virtual time against wall time, 1,000 steps of 10 ms | ≥ 10,000× | %s | %s | %s |", num(vt, okVt, "%.0f×"),
		spread(b, at("BenchmarkVirtualTime"), "x-realtime", "%.0f"), verdict(okVt, vt >= 10000))
	var ratio float64
	okRatio := len(stress.Variants) > 0 && stress.Variants[0].ExecsPerSec > 0 && sweep.SeedsPerSec > 0
	if okRatio {
		ratio = sweep.SeedsPerSec / stress.Variants[0].ExecsPerSec
	}
	p("| simulator executions per second over real processes | ≥ 1,000× | %s | one run | %s |", num(ratio, okRatio, "%.0f×"), verdict(okRatio, ratio >= 1000))
	okFirst := sweep.FirstFailSecs != nil
	var first float64
	if okFirst {
		first = *sweep.FirstFailSecs
	}
	p("| simulator's wall time to the first failure, legacy engine | < 10 ms | %s | one run | %s |", num(first*1000, okFirst, "%.2f ms"), verdict(okFirst, first < 0.010))
	tps, okT := get(b, at("BenchmarkThroughput"), "tokens/s")
	p("| tokens per second to 256 Delta consumers on goroutines | ≥ 2,000,000 | %s | %s | %s |", num(tps, okT, "%.0f"),
		spread(b, at("BenchmarkThroughput"), "tokens/s", "%.0f"), verdict(okT, tps >= 2e6))
	apt, okA := get(b, at("BenchmarkThroughput"), "allocs/op")
	p("| allocations per token | ≤ 1 | %s | %s | %s |", num(apt, okA, "%.2f"),
		spread(b, at("BenchmarkThroughput"), "allocs/op", "%.2f"), verdict(okA, apt <= 1))
	y, okY := get(b, at("BenchmarkRealYield"), "ns/op")
	p("| Yield on the real runtime | < 2 ns | %s | %s | %s |", num(y, okY, "%.2f ns"),
		spread(b, at("BenchmarkRealYield"), "ns/op", "%.2f"), verdict(okY, y < 2))
	d, okD := get(b, at("BenchmarkDisarmed"), "ns/op")
	p("| a disarmed failpoint | < 2 ns | %s | %s | %s |", num(d, okD, "%.2f ns"),
		spread(b, at("BenchmarkDisarmed"), "ns/op", "%.2f"), verdict(okD, d < 2))
	p("")

	p("## The simulator's switch")
	p("")
	p("A task hands the baton to the next task itself: one coroutine switch when two tasks take")
	p("turns, and never more than two a hand-off over a run (see `sched.stop`). The raw floor is a")
	p("bare pair of goroutines handing off; a task switch adds the decision (strategy, schedule")
	p("record, trace hash) and the simulator's bookkeeping; \"as in a sweep\" leaves out the record")
	p("and the hash, as a sweep's seeds run.")
	p("")
	head(p, "mechanism", "raw floor, ns per switch", "a task switch in the simulator, ns", "as in a sweep, ns", "ping-pong through a Queue, ns per switch")
	for _, m := range []string{"pull", "chan"} {
		raw, ok1 := get(b, at("BenchmarkRawSwitch/"+m), "ns/switch")
		ys, ok2 := get(b, at("BenchmarkYieldSwitch/"+m), "ns/switch")
		ysw, ok4 := get(b, at("BenchmarkYieldSwitch/"+m+"-sweep"), "ns/switch")
		q, ok3 := get(b, at("BenchmarkSwitch/"+m), "ns/switch")
		name := map[string]string{"pull": "iter.Pull coroutines (kept)", "chan": "channels, through a loop"}[m]
		p("| %s | %s | %s | %s | %s |", name, num(raw, ok1, "%.0f"), num(ys, ok2, "%.0f"), num(ysw, ok4, "%.0f"), num(q, ok3, "%.0f"))
	}
	if h, ok := get(b, at("BenchmarkRawSwitch/handoff"), "ns/switch"); ok {
		p("")
		p("The same hand-off with nothing of the simulator around it (two coroutines resuming each other")
		p("behind a `Yield` called through an interface, a decision that only picks the other): %s.", num(h, ok, "%.0f ns"))
		p("What a task switch costs above it is the decision, the runnable set and the checks of `sched.stop`.")
	}
	for _, st := range []string{"calm", "random", "chaos"} {
		dec, ok := get(b, at("BenchmarkDecision/"+st), "ns/op")
		p("")
		p("A decision where the task goes on (`%s`): %s.", st, num(dec, ok, "%.0f ns"))
	}
	r200, ok := get(b, at("BenchmarkRun200/pull"), "runs/s")
	rp, okP := get(b, at("BenchmarkRunPooled"), "runs/s")
	p("")
	p("A whole 2-task, 200-step run: %s runs/s; with a goroutine pool, as a sweep's worker keeps, %s runs/s.",
		num(r200, ok, "%.0f"), num(rp, okP, "%.0f"))
	p("")

	p("## abort-reuse seeds per second")
	p("")
	head(p, "", "one core", "both cores")
	for _, e := range []string{"fixed", "legacy"} {
		one, ok1 := get(b, "BenchmarkSeedParallel/abort-reuse/"+e, "seeds/s")
		two, ok2 := get(b, "BenchmarkSeedParallel/abort-reuse/"+e+"-2", "seeds/s")
		p("| %s engine | %s | %s |", e, num(one, ok1, "%.0f"), num(two, ok2, "%.0f"))
	}
	steps, okS := get(b, "BenchmarkSeed/abort-reuse/fixed", "steps/seed")
	allocs, okA2 := get(b, "BenchmarkSeed/abort-reuse/fixed", "allocs/op")
	p("")
	p("A seed takes %s scheduling decisions and %s allocations.", num(steps, okS, "%.0f"), num(allocs, okA2, "%.0f"))
	p("")

	p("## Real processes against the simulator")
	p("")
	p("The same founding case, on the legacy engine, measured in one `make bench` run:")
	p("")
	head(p, "", "executions", "failures", "executions per second", "wall time to the first failure")
	if len(stress.Variants) > 0 {
		v := stress.Variants[0]
		ff := fmt.Sprintf("none in %d executions (rate ≤ %.2f%%, rule of three)", v.Runs, 100*v.UpperBound)
		if v.FirstFailureSeconds != nil {
			ff = fmt.Sprintf("%.2f s", *v.FirstFailureSeconds)
		}
		p("| `simrun stress -p %d -rounds %d`, the real-runtime test as processes | %d | %d | %.0f | %s |",
			stress.Parallel, stress.Rounds, v.Runs, v.Failed, v.ExecsPerSec, ff)
	}
	ff := "none"
	if sweep.FirstFailSecs != nil {
		ff = fmt.Sprintf("%.2f ms", *sweep.FirstFailSecs*1000)
	}
	p("| `simrun sweep -legacy`, %d workers | %d | %d (%.1f%%) | %.0f | %s |", sweep.Workers, sweep.Seeds, sweep.Failures, 100*sweep.Rate, sweep.SeedsPerSec, ff)
	p("")
	writeWindows(p, stress, sweep)

	p("## Engine throughput on goroutines")
	p("")
	bpt, okB := get(b, at("BenchmarkThroughput"), "B/op")
	p("256 concurrent Delta consumers, a model of no latency: %s tokens/s, %s allocations and %s bytes per token.",
		num(tps, okT, "%.0f"), num(apt, okA, "%.2f"), num(bpt, okB, "%.0f"))
	p("")

	writeWalks(p, walks)

	p("## How the cost grows")
	p("")
	p("Seeds per second on one core for a workload of C client tasks, each adding and reading R")
	p("requests of 4 tokens one after another (chaos strategy), to size a sweep:")
	p("")
	head(p, "clients \\ requests each", "1", "4", "16")
	for _, c := range []int{1, 4, 16} {
		row := fmt.Sprintf("| %d |", c)
		for _, r := range []int{1, 4, 16} {
			name := fmt.Sprintf("BenchmarkScale/clients=%d/requests=%d", c, r)
			s, ok := get(b, name, "seeds/s")
			st, _ := get(b, name, "steps/seed")
			row += " " + num(s, ok, "%.0f") + fmt.Sprintf(" (%.0f steps) |", st)
		}
		p("%s", row)
	}
	p("")
	p("The cost of a seed is close to linear in its scheduling decisions: about %s µs per",
		num(func() float64 {
			s, _ := get(b, "BenchmarkScale/clients=16/requests=16", "seeds/s")
			st, _ := get(b, "BenchmarkScale/clients=16/requests=16", "steps/seed")
			if s == 0 || st == 0 {
				return 0
			}
			return 1e6 / s / st
		}(), true, "%.2f"))
	p("decision, whatever the shape of the workload.")
	p("")
	writeScenarios(p, b)
	cost := costOfASeed(b, procs)
	cost.profile = sweep.profile
	writeRuns(p, runs, cost)
	p("%s", strings.TrimRight(history, "\n"))
}
