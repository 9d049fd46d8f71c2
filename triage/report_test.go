package triage

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/golden"
)

// foundingReport is the founding bug report's measurement as a
// StressReport: two trees, 40 copies, 3 rounds, on two cores.
func foundingReport() *StressReport {
	check := "engine_test.cpp:<n>: CHECK( Drain(engine, reused) == <n> ) with expansion: <n> == <n>"
	tok := "tokenizer: cannot open <tmp>"
	a := VariantReport{
		Name: "A", Cmd: []string{"./build-main/engine_test", "--test-case=Drain*"},
		Rounds: []Rate{{11, 40}, {9, 40}, {11, 40}}, Total: Rate{31, 120},
		Modes: []Mode{
			{Signature: check, Count: 25, First: 2, Example: "LLMDST_STRESS_VARIANT=A LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=3 ./build-main/engine_test '--test-case=Drain*'"},
			{Signature: tok, Count: 6, First: 17, Example: "LLMDST_STRESS_VARIANT=A LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=18 ./build-main/engine_test '--test-case=Drain*'"},
		},
		Busy: 90 * time.Second, FirstFailure: 4200 * time.Millisecond,
	}
	b := VariantReport{
		Name: "B", Cmd: []string{"./build-277/engine_test", "--test-case=Drain*"},
		Rounds: []Rate{{0, 40}, {0, 40}, {0, 40}}, Total: Rate{0, 120},
		Busy: 60 * time.Second,
	}
	r := &StressReport{
		Config: StressConfig{
			Parallel: 40, Rounds: 3, Cmd: a.Cmd, VsCmd: b.Cmd, Load: 2, Timeout: time.Minute,
			OutputMax: DefaultOutputMax,
		},
		Variants: []VariantReport{a, b}, GOMAXPROCS: 2, Elapsed: 150 * time.Second,
	}
	r.Comparisons = CompareModes(a.Tally(), b.Tally())
	r.P, r.Verdict = CompareRates(a.Total, b.Total)
	return r
}

// TestWriteTableGolden pins the report's layout in testdata/table.golden;
// run go test -rewrite after a deliberate change and review the diff.
func TestWriteTableGolden(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, foundingReport().WriteTable(&b))
	golden.Check(t, "table.golden", b.String())

	for _, s := range []string{
		"A: ./build-main/engine_test '--test-case=Drain*'  11/40    9/40     11/40    31/120 (25.8% [18.8%, 34.3%])",
		"no failures: 0/120 = 0% [≤ 2.5%, rule of three]",
		"25/120 = 20.8% [14.5%, 28.9%]  first at round 1 copy 3",
		"6/120 = 5.0% [2.3%, 10.5%]  first at round 1 copy 18",
		"gone in B (p<0.0001)",
		"load 2 spinning goroutine(s) (GOMAXPROCS 2)",
		"timeout 1m0s per copy",
	} {
		assert.Contains(t, b.String(), s)
	}
}

func TestWriteTableSumsUpManyRounds(t *testing.T) {
	r := foundingReport()
	for i := range r.Variants {
		v := &r.Variants[i]
		v.Rounds = nil
		for k := range 20 {
			v.Rounds = append(v.Rounds, Rate{K: k % 4 * (1 - i), N: 40})
		}
	}
	r.Config.Rounds = 20
	var b bytes.Buffer
	require.NoError(t, r.WriteTable(&b))
	lines := strings.Split(b.String(), "\n")
	assert.Regexp(t, `^variant +rounds +failures a round +total$`, lines[0])
	assert.Regexp(t, ` 20 +0–3/40 +31/120 `, lines[1])
	assert.Regexp(t, ` 20 +0–0/40 +0/120 `, lines[2])
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

func TestWriteTableReportsWriteErrors(t *testing.T) {
	assert.EqualError(t, foundingReport().WriteTable(&failingWriter{n: 2}), "disk full")
}

func TestJUnitCasesOfAReport(t *testing.T) {
	r := &StressReport{
		Variants: []VariantReport{{Name: "A", Cmd: []string{"./t"}}},
		Copies: []CopyResult{
			{Variant: "A", Round: 1, Copy: 1, Duration: time.Second},
			{Variant: "A", Round: 1, Copy: 2, Failed: true, Signature: "error: boom", Reproduce: "X=1 ./t", Output: []byte("error: boom 7\n"), Duration: 2 * time.Second},
		},
	}
	assert.Equal(t, []JUnitCase{
		{Name: "A round 1 copy 1", Classname: "A: ./t", Time: time.Second},
		{Name: "A round 1 copy 2", Classname: "A: ./t", Failure: "error: boom\nreproduce: X=1 ./t", Output: "error: boom 7\n", Time: 2 * time.Second},
	}, r.JUnitCases())
}
