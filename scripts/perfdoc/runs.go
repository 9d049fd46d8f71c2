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
const runsHeader = "date\tcode\tcpu\tprocs\treal_executions_per_s\tlegacy_sweep_seeds_per_s\tfixed_seeds_per_s_both_cores\ttask_switch_ns"

// runsFields is the number of columns of runs.tsv.
var runsFields = len(strings.Split(runsHeader, "\t"))

// A run is one make bench run's headline figures, a line of runs.tsv: the
// two sides of the executions target and the two simulator figures that
// say how fast the host ran the simulator. A figure not measured is 0.
type run struct {
	Date  string // YYYY-MM-DD
	Code  string // the commit measured, "-dirty" after it with changes not committed
	CPU   string // as go test names it: one name may cover several machines
	Procs int    // GOMAXPROCS
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
	cols := strings.Split(runsHeader, "\t")
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
		if len(f) != runsFields {
			return nil, fmt.Errorf("%s:%d: %d tab-separated fields, want %d (%s)", name, line, len(f), runsFields, strings.Join(cols, ", "))
		}
		ru := run{Date: f[0], Code: f[1], CPU: f[2]}
		if ru.Code == "" {
			return nil, fmt.Errorf("%s:%d: the code is empty: a run names the commit it measured", name, line)
		}
		procs, err := strconv.Atoi(f[3])
		if err != nil || procs < 1 {
			return nil, fmt.Errorf("%s:%d: %s is %q, not a whole number ≥ 1", name, line, cols[3], f[3])
		}
		ru.Procs = procs
		for i, dst := range []*float64{&ru.RealPerSec, &ru.SweepPerSec, &ru.BothCores, &ru.SwitchNs} {
			v, err := strconv.ParseFloat(f[4+i], 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("%s:%d: %s is %q, not a number ≥ 0", name, line, cols[4+i], f[4+i])
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

// tenths is v to a tenth, as runs.tsv keeps a figure: whole figures
// without a point, and none rounded across a target's line (99.96 ns is
// 100 and a miss either way; 99.94 stays under it).
func tenths(v float64) string {
	return strconv.FormatFloat(tenth(v), 'f', -1, 64)
}

func tenth(v float64) float64 { return math.Round(v*10) / 10 }

// formatRuns writes runs as runs.tsv holds them.
func formatRuns(w io.Writer, runs []run) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, runsHeader)
	for _, r := range runs {
		fmt.Fprintf(bw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Date, r.Code, r.CPU, r.Procs,
			tenths(r.RealPerSec), tenths(r.SweepPerSec), tenths(r.BothCores), tenths(r.SwitchNs))
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
// sides of the ratio and names its code: a row without them would tell the
// next reader nothing of the target. A run the same as the last one kept
// (perfdoc run again on the same output) is not kept twice.
func recordRun(path string, runs []run) error {
	this := runs[len(runs)-1]
	if this.ratio() == 0 {
		return fmt.Errorf("this run measured %.1f real executions a second and %.0f sweep seeds a second; a run kept in %s needs both", this.RealPerSec, this.SweepPerSec, path)
	}
	if this.Code == "" {
		return fmt.Errorf("this run names no code (-code): a run kept in %s names the commit it measured", path)
	}
	if len(runs) > 1 && runs[len(runs)-2] == this {
		return nil
	}
	return writeRunsFile(path, runs)
}

// cpuSummary is what the runs on one kind of CPU had in common.
type cpuSummary struct {
	cpu              string
	runs             int
	real, sweep, rat [2]float64 // lowest, highest
}

// byCPU sums the runs up by the CPU they ran on, in the order each first
// ran; runs without a ratio are left out.
func byCPU(runs []run) []cpuSummary { return groupRuns(runs, func(r run) string { return r.CPU }) }

// groupRuns sums the runs with a ratio up by key, in the order each key
// first comes.
func groupRuns(runs []run, key func(run) string) []cpuSummary {
	var cs []cpuSummary
	for _, r := range runs {
		if r.ratio() == 0 {
			continue
		}
		k := key(r)
		i := slices.IndexFunc(cs, func(c cpuSummary) bool { return c.cpu == k })
		if i < 0 {
			cs = append(cs, cpuSummary{cpu: k})
			i = len(cs) - 1
		}
		c := &cs[i]
		first := c.runs == 0
		widen(&c.real, r.RealPerSec, first)
		widen(&c.sweep, r.SweepPerSec, first)
		widen(&c.rat, r.ratio(), first)
		c.runs++
	}
	return cs
}

// widen makes r the lowest and highest of what it held and v; first: of v alone.
func widen(r *[2]float64, v float64, first bool) {
	if first {
		*r = [2]float64{v, v}
		return
	}
	r[0], r[1] = min(r[0], v), max(r[1], v)
}

func orDash(v float64, format string) string {
	if v <= 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// seedCost is what this run measured of a legacy seed's parts, for the
// cost a thousandfold would leave each decision; a figure not measured is 0.
type seedCost struct {
	decisions         float64        // a legacy abort-reuse seed's scheduling decisions
	calmNs, chaosNs   float64        // a decision where the task goes on
	coroutineSwitchNs float64        // a bare coroutine switch
	profile           *profileShares // a legacy sweep's CPU profile; nil when none was taken
}

// writeRuns sets out every make bench run, this one last, and what the
// executions target not met would take: the ratio CPU by CPU, and the cost
// of a seed a thousandfold would need.
func writeRuns(p func(string, ...any), runs []run, cost seedCost) {
	if len(runs) == 0 {
		return
	}
	p("## Every `make bench` run")
	p("")
	p("Each run's headline figures, oldest first, this one last (`scripts/perfdoc/runs.tsv`, to which")
	p("`make bench` adds its row): the real processes' executions a second (`simrun stress -p 40` of")
	p("the real-runtime test, legacy engine), a legacy `simrun sweep` of 100,000 seeds on every")
	p("core, their ratio, and the simulator's own pace on the host that ran them. The CPU is the name")
	p("the host reports; one name may cover several machines.")
	p("")
	head(p, "date", "code", "CPU", "cores", "real executions/s", "sweep seeds/s", "ratio", "fixed seeds/s, both cores", "task switch, ns")
	for _, r := range runs {
		p("| %s | %s | %s | %d | %s | %s | %s | %s | %s |", r.Date, r.Code, r.CPU, r.Procs, orDash(r.RealPerSec, "%.0f"),
			orDash(r.SweepPerSec, "%.0f"), orDash(r.ratio(), "%.0f×"), orDash(r.BothCores, "%.0f"), orDash(r.SwitchNs, "%.0f"))
	}
	p("")
	var held []string
	for _, t := range []struct {
		what string
		v    func(run) float64
		met  func(float64) bool
	}{
		{"both-core seeds a second met 20,000", func(r run) float64 { return r.BothCores }, func(v float64) bool { return v >= 20000 }},
		{"the task switch met 100 ns", func(r run) float64 { return r.SwitchNs }, func(v float64) bool { return v < 100 }},
	} {
		if s := sinceLastMiss(runs, t.v, t.met); s != "" {
			held = append(held, t.what+" "+s)
		}
	}
	if len(held) > 0 {
		p("Of the targets the table follows, %s.", strings.Join(held, "; "))
		p("")
	}
	cs := byCPU(runs)
	if len(cs) == 0 {
		return
	}
	p("## What a thousandfold would take")
	p("")
	p("The ratio follows how fast the host starts processes far more than the code. CPU by CPU, the")
	p("lowest and the highest over its runs:")
	p("")
	head(p, "CPU", "runs", "real executions/s", "sweep seeds/s", "ratio", "a seed this much cheaper would meet 1,000×")
	fastest := run{}
	for _, c := range cs {
		cheaper := fmt.Sprintf("%.1f – %.1f", 1000/c.rat[1], 1000/c.rat[0])
		if c.rat[0] >= 1000 {
			cheaper = "met on every run"
		}
		p("| %s | %d | %.0f – %.0f | %.0f – %.0f | %.0f× – %.0f× | %s |", c.cpu, c.runs, c.real[0], c.real[1],
			c.sweep[0], c.sweep[1], c.rat[0], c.rat[1], cheaper)
	}
	all := groupRuns(runs, func(run) string { return "" })[0]
	for _, r := range runs {
		if r.ratio() > 0 && r.RealPerSec > fastest.RealPerSec {
			fastest = r
		}
	}
	p("")
	p("A real execution is a process start of the engine's test binary, 40 at a time: where")
	p("processes start slowly, one takes 30–40 ms of wall time and 10–20 ms of CPU, most of it in")
	p("the kernel (`/usr/bin/time`). Over every run the real side ranged %.1f times (%.0f to %.0f a second),", all.real[1]/all.real[0], all.real[0], all.real[1])
	p("the sweep %.1f times (%.0f to %.0f seeds a second).", all.sweep[1]/all.sweep[0], all.sweep[0], all.sweep[1])
	if last := runs[len(runs)-1]; last.ratio() > 0 && last.ratio() < 1000 {
		p("On this run a seed %.1f times cheaper would have met the target.", 1000/last.ratio())
	}
	if cost.decisions > 0 {
		perSeed := float64(fastest.Procs) / (1000 * fastest.RealPerSec) // CPU seconds a seed
		p("At the fastest start rate seen, %.0f a second (%s, %s), a thousandfold is %.0f seeds a second", fastest.RealPerSec, fastest.Code, fastest.CPU, 1000*fastest.RealPerSec)
		p("on its %d cores: %.1f µs of CPU a seed, %.0f ns for each of a legacy seed's %.0f scheduling decisions",
			fastest.Procs, perSeed*1e6, perSeed*1e9/cost.decisions, cost.decisions)
		p("and the engine code between them, where on this run a decision alone cost %s (`calm`) to %s",
			orDash(cost.calmNs, "%.0f ns"), orDash(cost.chaosNs, "%.0f ns"))
		p("(`chaos`) and a bare coroutine switch %s (\"The simulator's switch\").", orDash(cost.coroutineSwitchNs, "%.0f ns"))
	}
	writeProfile(p, cost.profile)
	p("Counted in openings of the founding race's window instead (\"Real")
	p("processes against the simulator\"), the simulator is thousands of times ahead; the target")
	p("counts executions, and that is the figure held to it.")
	p("")
}

// thisRun is the row this make bench run adds: its date, the code it
// measured, its CPU and cores, and its figures to a tenth, as runs.tsv
// keeps them, so that the run reads the same in this document as in the
// ones after it.
func thisRun(date, code string, env map[string]string, procs int, b map[string]*result, stress *stressSummary, sweep *sweepSummary) run {
	r := run{Date: date, Code: code, CPU: env["cpu"], Procs: procs, SweepPerSec: sweep.SeedsPerSec}
	if r.CPU == "" {
		r.CPU = "unknown"
	}
	if len(stress.Variants) > 0 {
		r.RealPerSec = stress.Variants[0].ExecsPerSec
	}
	r.BothCores, _ = get(b, "BenchmarkSeedParallel/abort-reuse/fixed-2", "seeds/s")
	r.SwitchNs, _ = get(b, benchName("BenchmarkYieldSwitch/pull", procs), "ns/switch")
	r.RealPerSec, r.SweepPerSec, r.BothCores, r.SwitchNs = tenth(r.RealPerSec), tenth(r.SweepPerSec), tenth(r.BothCores), tenth(r.SwitchNs)
	return r
}

// costOfASeed is what b measured of a legacy seed's parts.
func costOfASeed(b map[string]*result, procs int) seedCost {
	var c seedCost
	c.decisions, _ = get(b, "BenchmarkSeed/abort-reuse/legacy", "steps/seed")
	c.calmNs, _ = get(b, benchName("BenchmarkDecision/calm", procs), "ns/op")
	c.chaosNs, _ = get(b, benchName("BenchmarkDecision/chaos", procs), "ns/op")
	c.coroutineSwitchNs, _ = get(b, benchName("BenchmarkRawSwitch/pull", procs), "ns/switch")
	return c
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
	return fmt.Sprintf("on every one of the %d runs since the run of %s (%s), which missed it at %s", after, runs[miss].Code, runs[miss].Date, tenths(v(runs[miss])))
}
