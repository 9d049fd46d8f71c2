package triage

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmdst/llmdst/internal/shell"
)

// ShellJoin joins argv into a command line a POSIX shell splits back into
// argv.
func ShellJoin(argv []string) string { return shell.Join(argv) }

// tableRate formats a total as "31/120 (25.8% [18.8%, 34.3%])", or as
// "0/120 (0% [≤ 2.5%, rule of three])" when nothing failed.
func tableRate(r Rate) string {
	if r.N == 0 {
		return "0/0"
	}
	return fmt.Sprintf("%d/%d (%s)", r.K, r.N, r.interval())
}

// firstAt locates a mode's first occurrence as "round 2 copy 7".
func firstAt(first, parallel int) string {
	return fmt.Sprintf("round %d copy %d", first/parallel+1, first%parallel+1)
}

// seconds formats a duration in seconds with two decimals.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

// WriteTable writes the report for people: one row per variant with its
// failures in every round and in total (with the 95% Wilson interval);
// then each variant's failure modes with their rates, first occurrence and
// a command line reproducing it, and, when it has targets or a copy
// reached a situation (task.Reach), the copies that reached each; with two
// variants, the comparison of every mode and of the totals, then, when
// there are targets or a copy reached a situation, the comparison of
// every situation; and last the conditions of the run.
func (r *StressReport) WriteTable(w io.Writer) error {
	p := &printer{w: w}
	tw := tabwriter.NewWriter(p, 0, 8, 2, ' ', 0)
	rounds := r.roundsShown()
	head := []string{"variant"}
	if rounds > tableRoundsMax {
		head = append(head, "rounds", "failures a round")
	} else {
		for i := range rounds {
			head = append(head, fmt.Sprintf("round %d", i+1))
		}
	}
	fmt.Fprintln(tw, strings.Join(append(head, "total"), "\t"))
	for _, v := range r.Variants {
		row := []string{v.Name + ": " + v.Label()}
		if rounds > tableRoundsMax {
			row = append(row, fmt.Sprint(len(v.Rounds)), v.roundSpread())
		} else {
			for i := range rounds {
				cell := "-" // a round the run did not complete
				if i < len(v.Rounds) {
					cell = fmt.Sprintf("%d/%d", v.Rounds[i].K, v.Rounds[i].N)
				}
				row = append(row, cell)
			}
		}
		fmt.Fprintln(tw, strings.Join(append(row, tableRate(v.Total)), "\t"))
	}
	tw.Flush()

	for _, v := range r.Variants {
		p.printf("\n%s: %s\n", v.Name, v.Label())
		speed := fmt.Sprintf("%.1f runs/s", v.ExecsPerSec())
		if v.Total.K == 0 {
			p.printf("  no failures: %s; %s\n", v.Total, speed)
		} else {
			p.printf("  %d failure mode(s); first failure after %s of its rounds; %s\n", len(v.Modes), seconds(v.FirstFailure), speed)
		}
		for _, m := range v.Modes {
			p.printf("  %s  first at %s\n", m.Rate(v.Total.N), firstAt(m.First, r.Config.Parallel))
			p.printf("    %s\n", m.Signature)
			p.printf("    reproduce: %s\n", m.Example)
		}
		r.writeReached(p, v)
	}

	if len(r.Variants) == 2 {
		p.printf("\nA vs B, by failure mode (Fisher exact, α = %g):\n", Alpha)
		tw := tabwriter.NewWriter(p, 0, 8, 2, ' ', 0)
		for _, c := range r.Comparisons {
			fmt.Fprintf(tw, "  %s\tA %d/%d\tB %d/%d\t%s\n", c.Signature, c.A.K, c.A.N, c.B.K, c.B.N, c.Verdict)
		}
		a, b := r.Variants[0].Total, r.Variants[1].Total
		fmt.Fprintf(tw, "  all failures\tA %d/%d\tB %d/%d\t%s\n", a.K, a.N, b.K, b.N, r.Verdict)
		tw.Flush()
		r.writeSituationComparisons(p)
	}

	p.printf("\n%s\n", r.Conditions())
	return p.err
}

// tableRoundsMax is the most rounds WriteTable gives a column each; more
// are summed up as their number and the spread of their failures.
const tableRoundsMax = 12

// roundsShown is how many rounds the table has: those asked for, or, under
// a budget, which decides how many, those that ran.
func (r *StressReport) roundsShown() int {
	if r.Config.Budget > 0 && len(r.Variants) > 0 {
		return len(r.Variants[0].Rounds)
	}
	return r.Config.Rounds
}

// roundSpread gives the fewest and most failures of a round, as "0–3/40".
func (v *VariantReport) roundSpread() string {
	if len(v.Rounds) == 0 {
		return "-"
	}
	lo, hi := v.Rounds[0].K, v.Rounds[0].K
	for _, rd := range v.Rounds {
		lo, hi = min(lo, rd.K), max(hi, rd.K)
	}
	return fmt.Sprintf("%d–%d/%d", lo, hi, v.Rounds[0].N)
}

// Conditions is one line stating how the run was made: parallelism,
// rounds, budget, load, temporary directories, timeout and wall time.
func (r *StressReport) Conditions() string {
	c := r.Config
	parts := []string{
		fmt.Sprintf("%d copies at once", c.Parallel),
		fmt.Sprintf("%d round(s) per variant", r.roundsShown()),
	}
	if len(r.Variants) == 2 {
		parts[1] += ", A and B alternating"
	}
	switch {
	case r.BudgetSpent:
		parts[1] += ", when the " + c.Budget.String() + " budget ran out"
	case c.Budget > 0:
		parts[1] += ", within a " + c.Budget.String() + " budget"
	}
	if c.Load > 0 {
		parts = append(parts, fmt.Sprintf("load %d spinning goroutine(s) (GOMAXPROCS %d)", c.Load, r.GOMAXPROCS))
	} else {
		parts = append(parts, "load 0 (no extra CPU load)")
	}
	if c.PrivateTmp {
		parts = append(parts, "private TMPDIR per copy")
	} else {
		parts = append(parts, "shared TMPDIR")
	}
	if c.Timeout > 0 {
		parts = append(parts, "timeout "+c.Timeout.String()+" per copy")
	} else {
		parts = append(parts, "no timeout")
	}
	parts = append(parts, seconds(r.Elapsed)+" in all")
	return "stress: " + strings.Join(parts, "; ")
}

// printer writes until the first error and keeps it.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.w.Write(b)
	p.err = err
	return n, err
}

func (p *printer) printf(format string, args ...any) {
	fmt.Fprintf(p, format, args...)
}

// Summary is a StressReport for machines, shaped for encoding/json.
type Summary struct {
	Parallel       int                 `json:"parallel"`
	Rounds         int                 `json:"rounds"` // asked for, or, under a budget, run
	Load           int                 `json:"load"`
	GOMAXPROCS     int                 `json:"gomaxprocs"`
	PrivateTmp     bool                `json:"private_tmp"`
	TimeoutSeconds float64             `json:"timeout_seconds"`
	BudgetSeconds  float64             `json:"budget_seconds,omitempty"`
	BudgetSpent    bool                `json:"budget_spent,omitempty"` // the budget ended the run before Rounds rounds
	ElapsedSeconds float64             `json:"elapsed_seconds"`
	Variants       []VariantSummary    `json:"variants"`
	Comparisons    []ComparisonSummary `json:"comparisons,omitempty"`
	// SituationComparisons compare the copies of two variants that
	// reached each situation; absent for one variant, and when there are
	// no targets and no copy reached anything.
	SituationComparisons []SituationComparisonSummary `json:"situation_comparisons,omitempty"`
	// P and Verdict compare the totals of two variants.
	P       *float64 `json:"p,omitempty"`
	Verdict string   `json:"verdict,omitempty"`
}

// VariantSummary is one variant in a Summary.
type VariantSummary struct {
	Name          string     `json:"name"`
	Command       []string   `json:"command"`
	RoundFailures []int      `json:"round_failures"`
	Runs          int        `json:"runs"`
	Failed        int        `json:"failures"`
	Rate          float64    `json:"rate"`
	CI95          [2]float64 `json:"ci95"`
	// UpperBound is the 95% upper bound on the rate (the rule of three
	// when nothing failed).
	UpperBound float64 `json:"upper_bound"`
	// FirstFailureSeconds is null when nothing failed.
	FirstFailureSeconds *float64      `json:"first_failure_seconds"`
	ExecsPerSec         float64       `json:"execs_per_sec"`
	Modes               []ModeSummary `json:"modes"`
	// Targets are StressConfig.Targets, absent when none.
	Targets []string `json:"targets,omitempty"`
	// Reached is, by name, the copies that reached each situation reached
	// at all (task.Reach) and each target, reached or not; absent when
	// there are no targets and no copy reached anything.
	Reached map[string]int `json:"reached,omitempty"`
	// ReachedFirst is the first copy that reached each situation in
	// Reached that a copy reached; ReachedFailed, for the same situations,
	// how many of the copies that reached it failed.
	ReachedFirst  map[string]CopyRef `json:"reached_first,omitempty"`
	ReachedFailed map[string]int     `json:"reached_failed,omitempty"`
}

// ModeSummary is one failure mode in a Summary.
type ModeSummary struct {
	Signature string     `json:"signature"`
	Count     int        `json:"count"`
	Rate      float64    `json:"rate"`
	CI95      [2]float64 `json:"ci95"`
	First     CopyRef    `json:"first"`
	Reproduce string     `json:"reproduce"`
}

// CopyRef names one copy of a variant.
type CopyRef struct {
	Round int `json:"round"`
	Copy  int `json:"copy"`
}

// ComparisonSummary is one ModeComparison in a Summary.
type ComparisonSummary struct {
	Signature string  `json:"signature"`
	A         [2]int  `json:"a"` // failures, runs
	B         [2]int  `json:"b"`
	P         float64 `json:"p"`
	// PCorrected is P corrected for the number of modes compared
	// (ModeComparison.PCorrected).
	PCorrected float64 `json:"p_corrected"`
	Verdict    string  `json:"verdict"`
}

// SituationComparisonSummary is one SituationComparison in a Summary.
type SituationComparisonSummary struct {
	Situation  string  `json:"situation"`
	Target     bool    `json:"target"`
	A          [2]int  `json:"a"` // copies that reached it, runs
	B          [2]int  `json:"b"`
	P          float64 `json:"p"`
	PCorrected float64 `json:"p_corrected"` // SituationComparison.PCorrected
	Verdict    string  `json:"verdict"`
}

// copyRef names the copy of index i (CopyResult.Index) among runs of
// parallel copies a round.
func copyRef(i, parallel int) CopyRef {
	return CopyRef{Round: i/parallel + 1, Copy: i%parallel + 1}
}

// ci95 is r's 95% Wilson interval as a pair.
func ci95(r Rate) [2]float64 {
	lo, hi := r.CI95()
	return [2]float64{lo, hi}
}

// Summary returns the report for machines.
func (r *StressReport) Summary() Summary {
	c := r.Config
	s := Summary{
		Parallel: c.Parallel, Rounds: r.roundsShown(), Load: c.Load, GOMAXPROCS: r.GOMAXPROCS,
		PrivateTmp: c.PrivateTmp, TimeoutSeconds: c.Timeout.Seconds(), ElapsedSeconds: r.Elapsed.Seconds(),
		BudgetSeconds: c.Budget.Seconds(), BudgetSpent: r.BudgetSpent,
		Variants: []VariantSummary{},
	}
	for _, v := range r.Variants {
		vs := VariantSummary{
			Name: v.Name, Command: v.Cmd, RoundFailures: []int{}, Runs: v.Total.N, Failed: v.Total.K,
			Rate: v.Total.P(), CI95: ci95(v.Total), UpperBound: v.Total.UpperBound(),
			ExecsPerSec: v.ExecsPerSec(), Modes: []ModeSummary{},
		}
		for _, rd := range v.Rounds {
			vs.RoundFailures = append(vs.RoundFailures, rd.K)
		}
		if v.Total.K > 0 {
			sec := v.FirstFailure.Seconds()
			vs.FirstFailureSeconds = &sec
		}
		for _, m := range v.Modes {
			rate := m.Rate(v.Total.N)
			vs.Modes = append(vs.Modes, ModeSummary{
				Signature: m.Signature, Count: m.Count, Rate: rate.P(), CI95: ci95(rate),
				First:     copyRef(m.First, c.Parallel),
				Reproduce: m.Example,
			})
		}
		vs.Targets = slices.Clone(c.Targets)
		for _, sit := range v.Reached {
			if vs.Reached == nil {
				vs.Reached, vs.ReachedFirst, vs.ReachedFailed = map[string]int{}, map[string]CopyRef{}, map[string]int{}
			}
			vs.Reached[sit.Name] = sit.Copies
			if sit.Copies > 0 {
				vs.ReachedFirst[sit.Name], vs.ReachedFailed[sit.Name] = copyRef(sit.First, c.Parallel), sit.Failed
			}
		}
		s.Variants = append(s.Variants, vs)
	}
	for _, cmp := range r.Comparisons {
		s.Comparisons = append(s.Comparisons, ComparisonSummary{
			Signature: cmp.Signature, A: [2]int{cmp.A.K, cmp.A.N}, B: [2]int{cmp.B.K, cmp.B.N}, P: cmp.P, PCorrected: cmp.PCorrected, Verdict: cmp.Verdict,
		})
	}
	for _, c := range r.SituationComparisons {
		s.SituationComparisons = append(s.SituationComparisons, SituationComparisonSummary{
			Situation: c.Situation, Target: c.Target, A: [2]int{c.A.K, c.A.N}, B: [2]int{c.B.K, c.B.N}, P: c.P, PCorrected: c.PCorrected, Verdict: c.Verdict,
		})
	}
	if len(r.Variants) == 2 {
		p := r.P
		s.P, s.Verdict = &p, r.Verdict
	}
	return s
}

// JUnitCases turns every copy into a test case named after its variant,
// round and copy, with the variant's command as class name, the signature
// as failure message and the output tail as system-out.
func (r *StressReport) JUnitCases() []JUnitCase {
	labels := map[string]string{} // looked up, never ranged
	for _, v := range r.Variants {
		labels[v.Name] = v.Name + ": " + v.Label()
	}
	cases := make([]JUnitCase, 0, len(r.Copies))
	for _, c := range r.Copies {
		jc := JUnitCase{
			Name:      fmt.Sprintf("%s round %d copy %d", c.Variant, c.Round, c.Copy),
			Classname: labels[c.Variant],
			Output:    string(c.Output),
			Time:      c.Duration,
		}
		if c.Failed {
			jc.Failure = c.Signature + "\nreproduce: " + c.Reproduce
		}
		cases = append(cases, jc)
	}
	return cases
}
