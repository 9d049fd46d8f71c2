package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// runsHeader is the first line of runs.tsv: the columns of a run.
const runsHeader = "date\tcode\thost\treal_executions_per_s\tlegacy_sweep_seeds_per_s\tfixed_seeds_per_s_both_cores\ttask_switch_ns"

// A run is one make bench run's headline figures, a line of runs.tsv: the
// two sides of the executions target and the two simulator figures that
// say how fast the host ran the simulator. A figure not measured is 0.
type run struct {
	Date string // YYYY-MM-DD
	Code string // the commit measured, "-dirty" after it with changes not committed
	Host string // the CPU as go test names it
	// RealPerSec is simrun stress's executions a second of the real-runtime
	// test; SweepPerSec a legacy sweep's seeds a second.
	RealPerSec, SweepPerSec float64
	BothCores               float64 // fixed abort-reuse seeds a second, both cores
	SwitchNs                float64 // a task switch
}

// ratio is the executions target's figure, 0 when a side is missing.
func (r run) ratio() float64 {
	if r.RealPerSec <= 0 || r.SweepPerSec <= 0 {
		return 0
	}
	return r.SweepPerSec / r.RealPerSec
}

// parseRuns reads runs.tsv: its header, then a run a line. name is the
// file's, for errors, which say the line and the column that is wrong.
func parseRuns(r io.Reader, name string) ([]run, error) {
	sc := bufio.NewScanner(r)
	var runs []run
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if line == 1 {
			if text != runsHeader {
				return nil, fmt.Errorf("%s:1: the header is %q, want %q", name, text, runsHeader)
			}
			continue
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		f := strings.Split(text, "\t")
		if len(f) != 7 {
			return nil, fmt.Errorf("%s:%d: %d tab-separated fields, want 7 (%s)", name, line, len(f), strings.ReplaceAll(runsHeader, "\t", ", "))
		}
		ru := run{Date: f[0], Code: f[1], Host: f[2]}
		cols := strings.Split(runsHeader, "\t")
		for i, dst := range []*float64{&ru.RealPerSec, &ru.SweepPerSec, &ru.BothCores, &ru.SwitchNs} {
			v, err := strconv.ParseFloat(f[3+i], 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%s:%d: %s is %q, not a number ≥ 0", name, line, cols[3+i], f[3+i])
			}
			*dst = v
		}
		runs = append(runs, ru)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return runs, nil
}

// readRuns reads runs.tsv at path; a file not there holds no runs yet.
func readRuns(path string) ([]run, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseRuns(f, path)
}

// formatRuns writes runs as runs.tsv holds them.
func formatRuns(w io.Writer, runs []run) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, runsHeader)
	for _, r := range runs {
		// The real side is tens a second on some hosts: a tenth moves the
		// ratio by a few.
		real := strconv.FormatFloat(math.Round(r.RealPerSec*10)/10, 'f', -1, 64)
		fmt.Fprintf(bw, "%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f\n", r.Date, r.Code, r.Host, real, r.SweepPerSec, r.BothCores, r.SwitchNs)
	}
	return bw.Flush()
}

// writeRunsFile writes runs to path through a file beside it, so that a
// failure leaves the old file whole.
func writeRunsFile(path string, runs []run) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := formatRuns(f, runs); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// recordRun writes runs, this run last, to path, if this run measured both
// sides of the ratio: a row without one would tell the next reader nothing
// of the target.
func recordRun(path string, runs []run) error {
	this := runs[len(runs)-1]
	if this.ratio() == 0 {
		return fmt.Errorf("this run measured %.1f real executions a second and %.0f sweep seeds a second; a run kept in %s needs both", this.RealPerSec, this.SweepPerSec, path)
	}
	return writeRunsFile(path, runs)
}

// hostSummary is what the runs on one host had in common.
type hostSummary struct {
	host             string
	runs             int
	real, sweep, rat [2]float64 // lowest, highest
}

// byHost sums the runs up host by host, in the order each host first ran.
func byHost(runs []run) []hostSummary {
	var hs []hostSummary
	widen := func(r *[2]float64, v float64, first bool) {
		if first {
			*r = [2]float64{v, v}
			return
		}
		r[0], r[1] = min(r[0], v), max(r[1], v)
	}
	for _, r := range runs {
		if r.ratio() == 0 {
			continue
		}
		i := slices.IndexFunc(hs, func(h hostSummary) bool { return h.host == r.Host })
		if i < 0 {
			hs = append(hs, hostSummary{host: r.Host})
			i = len(hs) - 1
		}
		h := &hs[i]
		first := h.runs == 0
		widen(&h.real, r.RealPerSec, first)
		widen(&h.sweep, r.SweepPerSec, first)
		widen(&h.rat, r.ratio(), first)
		h.runs++
	}
	return hs
}

func orDash(v float64, format string) string {
	if v <= 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// writeRuns sets out every make bench run, this one last, and what the
// executions target not met would take: the ratio host by host, and the
// cost of a seed a thousandfold would need.
func writeRuns(p func(string, ...any), runs []run, decisions float64) {
	if len(runs) == 0 {
		return
	}
	p("## Every `make bench` run")
	p("")
	p("Each run's headline figures, oldest first, this one last (`scripts/perfdoc/runs.tsv`, to which")
	p("`make bench` adds its row): the real processes' executions a second (`simrun stress -p 40` of")
	p("the real-runtime test, legacy engine), a legacy `simrun sweep` of 100,000 seeds on both")
	p("cores, their ratio, and the simulator's own pace on the host that ran them.")
	p("")
	p("| date | code | host | real executions/s | sweep seeds/s | ratio | fixed seeds/s, both cores | task switch, ns |")
	p("|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		p("| %s | %s | %s | %s | %s | %s | %s | %s |", r.Date, r.Code, r.Host, orDash(r.RealPerSec, "%.0f"),
			orDash(r.SweepPerSec, "%.0f"), orDash(r.ratio(), "%.0f×"), orDash(r.BothCores, "%.0f"), orDash(r.SwitchNs, "%.0f"))
	}
	p("")
	for _, t := range []struct {
		what string
		v    func(run) float64
		met  func(float64) bool
	}{
		{"both-core seeds a second met 20,000", func(r run) float64 { return r.BothCores }, func(v float64) bool { return v >= 20000 }},
		{"the task switch met 100 ns", func(r run) float64 { return r.SwitchNs }, func(v float64) bool { return v < 100 }},
	} {
		if s := sinceLastMiss(runs, t.v, t.met); s != "" {
			p("Of the targets the table follows, %s %s.", t.what, s)
		}
	}
	p("")
	hs := byHost(runs)
	if len(hs) == 0 {
		return
	}
	p("## What a thousandfold would take")
	p("")
	p("The ratio follows the host's process starts far more than the code. Host by host, the lowest")
	p("and the highest over its runs:")
	p("")
	p("| host | runs | real executions/s | sweep seeds/s | ratio | a seed this much cheaper would meet 1,000× |")
	p("|---|---|---|---|---|---|")
	fastest := 0.0
	for _, h := range hs {
		p("| %s | %d | %.0f – %.0f | %.0f – %.0f | %.0f× – %.0f× | %.1f – %.1f |", h.host, h.runs, h.real[0], h.real[1],
			h.sweep[0], h.sweep[1], h.rat[0], h.rat[1], 1000/h.rat[1], 1000/h.rat[0])
		fastest = max(fastest, h.real[1])
	}
	p("")
	p("A real execution is a process start of the engine's test binary, 40 at a time on two cores:")
	p("where processes start slowly, one takes 30–40 ms of wall time and 10–20 ms of CPU, most of it")
	p("in the kernel (`/usr/bin/time`). The simulator's pace moved far less from host to host.")
	if last := runs[len(runs)-1]; last.ratio() > 0 && last.ratio() < 1000 {
		p("On this run a seed %.1f times cheaper would have met the target.", 1000/last.ratio())
	}
	if decisions > 0 {
		perSeed := 2 / (1000 * fastest) // CPU seconds a seed on two cores
		p("At the fastest start rate seen, %.0f a second, a thousandfold is %.0f seeds a second on two", fastest, 1000*fastest)
		p("cores: %.1f µs of CPU a seed, %.0f ns for each of its %.0f scheduling decisions and the engine code", perSeed*1e6, perSeed*1e9/decisions, decisions)
		p("between them, where a decision alone costs 10 to 40 ns and a coroutine switch 35 (\"The")
		p("simulator's switch\").")
	}
	p("Nor is one cost most of a seed. A legacy sweep's CPU profile (`simrun sweep -legacy -seeds")
	p("1-100000 -cpuprofile`), its own time by package: the Go runtime 35%% (allocation, collection, the")
	p("coroutine switches), the simulator 19%%, the engine's core 19%%, its frontend 9%%, the checker 6%%;")
	p("no function above 5%% of its own. A simulator that cost nothing would make a seed about 1.3")
	p("times faster. Counted in openings of the founding race's window instead (\"Real processes")
	p("against the simulator\"), the simulator is thousands of times ahead; the target counts")
	p("executions, and that is the figure held to it.")
	p("")
}

// thisRun is the row this make bench run adds: its date, the code it
// measured, its host, and its figures.
func thisRun(date, code string, env map[string]string, b map[string]*result, stress *stressSummary, sweep *sweepSummary, at func(string) string) run {
	r := run{Date: date, Code: code, Host: env["cpu"], SweepPerSec: sweep.SeedsPerSec}
	if r.Host == "" {
		r.Host = "unknown"
	}
	if len(stress.Variants) > 0 {
		r.RealPerSec = stress.Variants[0].ExecsPerSec
	}
	r.BothCores, _ = get(b, "BenchmarkSeedParallel/abort-reuse/fixed-2", "seeds/s")
	r.SwitchNs, _ = get(b, at("BenchmarkYieldSwitch/pull"), "ns/switch")
	return r
}

// sinceLastMiss says for how long a target held over the runs: on every
// run, on every run since the last that missed it, or on none of the last
// (with the last that met it); "" when no run measured it.
func sinceLastMiss(runs []run, v func(run) float64, met func(float64) bool) string {
	measured, miss, hit := 0, -1, -1
	for i, r := range runs {
		if v(r) <= 0 {
			continue
		}
		measured++
		if met(v(r)) {
			hit = i
		} else {
			miss = i
		}
	}
	switch {
	case measured == 0:
		return ""
	case miss < 0:
		return fmt.Sprintf("on every one of the %d runs that measured it", measured)
	case hit < miss:
		if hit < 0 {
			return "on none of the runs"
		}
		return fmt.Sprintf("last on the run of %s (%s), not on the runs after it", runs[hit].Code, runs[hit].Date)
	}
	after := 0
	for _, r := range runs[miss+1:] {
		if v(r) > 0 {
			after++
		}
	}
	return fmt.Sprintf("on every one of the %d runs since the run of %s (%s), which missed it at %.0f", after, runs[miss].Code, runs[miss].Date, v(runs[miss]))
}
