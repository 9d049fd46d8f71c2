package failpoints_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pingcap/failpoint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/reexec"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

func TestTheCatalogueHasEveryRequiredFault(t *testing.T) {
	for _, name := range []string{"core/stall-before-abort", "core/stall-mid-step", "engine/output-handler-stall",
		"core/model-panic", "core/output-late", "engine/abort-after-add", "engine/client-abandon"} {
		p, err := failpoints.Lookup(name)
		require.NoError(t, err, name)
		assert.Equal(t, "github.com/llmdst/llmdst/"+name, p.FullName())
		assert.NotEmpty(t, p.Doc)
		assert.NotEmpty(t, p.Terms)
		byFull, err := failpoints.Lookup(p.FullName())
		require.NoError(t, err)
		assert.Same(t, p, byFull)
	}
	_, err := failpoints.Lookup("core/nope")
	assert.ErrorContains(t, err, `unknown failpoint "core/nope": want one of`)
}

func TestTermsCountChainAndRatio(t *testing.T) {
	s := rttest.Armed(t, "core/stall-mid-step=2*off->3*return(7)->off")
	var got []string
	for i := 0; i < 7; i++ {
		v, ok := s.Value(failpoints.CoreStallMidStep)
		if ok {
			got = append(got, v)
		} else {
			got = append(got, "-")
		}
	}
	assert.Equal(t, []string{"-", "-", "7", "7", "7", "-", "-"}, got, "two skipped, three fired, then off for good")
	assert.False(t, s.Fires(failpoints.ModelPanic), "an unarmed point of an armed set does not fire")

	fired := 0
	s = rttest.Armed(t, "engine/abort-after-add=1/4*return")
	for i := 0; i < 4000; i++ {
		if s.Fires(failpoints.AbortAfterAdd) {
			fired++
		}
	}
	assert.InDelta(t, 1000, fired, 150, "1/4 of the evaluations fire")
	again := rttest.Armed(t, "engine/abort-after-add=1/4*return")
	fired2 := 0
	for i := 0; i < 4000; i++ {
		if again.Fires(failpoints.AbortAfterAdd) {
			fired2++
		}
	}
	assert.Equal(t, fired, fired2, "the same seed draws the same")
}

// TestModifierListsEvaluateAsPingcaps: a term may carry several modifiers,
// as pingcap's grammar has it, each of which must allow the term, in order.
// Counts alone draw nothing, so a run set and pingcap's own registry (the
// process-wide set) must give the same sequence.
func TestModifierListsEvaluateAsPingcaps(t *testing.T) {
	p := failpoints.CoreStallMidStep
	for _, terms := range []string{
		"3*2*return(1)->return(2)",
		"2*3*return(1)->2*off->1*1*return(3)",
		"0*5*return(1)->4*return(2)",
		"2*return(1)->3*2*off->return(3)",
	} {
		eval := func(s *failpoints.Set) []string {
			var got []string
			for range 9 {
				v, ok := s.Value(p)
				if !ok {
					v = "-"
				}
				got = append(got, v)
			}
			return got
		}
		run := eval(rttest.Armed(t, p.Name+"="+terms))
		require.NoError(t, failpoints.Enable(p.Name, terms))
		pingcap := eval(nil)
		require.NoError(t, failpoints.Disable(p.Name))
		assert.Equal(t, pingcap, run, terms)
	}
	assert.Equal(t, []string{"1", "1", "2", "2"}, func() []string {
		s := rttest.Armed(t, p.Name+"=3*2*return(1)->return(2)")
		var got []string
		for range 4 {
			v, _ := s.Value(p)
			got = append(got, v)
		}
		return got
	}(), "the smaller count ends the term")

	// The fix the refusal of a percentage suggests is accepted: a ratio
	// with a count after it fires at most the count's times.
	_, err := failpoints.NewSet(sim.NewPCGChooser(1, 0), "engine/abort-after-add=50%2*return")
	require.ErrorContains(t, err, "as in 1/4*2*return")
	s := rttest.Armed(t, "engine/abort-after-add=1/4*2*return")
	fired := 0
	for range 400 {
		if s.Fires(failpoints.AbortAfterAdd) {
			fired++
		}
	}
	assert.Equal(t, 2, fired)
}

func TestPanicTerm(t *testing.T) {
	s := rttest.Armed(t, "core/model-panic=1*off->panic(boom)")
	assert.False(t, s.Fires(failpoints.ModelPanic))
	assert.PanicsWithValue(t, "failpoint core/model-panic: boom", func() { s.Fires(failpoints.ModelPanic) })
}

func TestTermsThatWouldBreakReplayAreRefused(t *testing.T) {
	cases := map[string]string{
		"core/stall-mid-step=50%return(5)": "50% draws from pingcap's global math/rand, which would break replay; write an integer ratio drawn from the run's seeded chooser instead, as in 1/4*return(5)",
		"core/stall-mid-step=sleep(10)":    "sleep waits on the wall clock, which would break replay; give the delay as the value instead, slept on the runtime's clock: return(10000) for 10ms",
		"core/stall-mid-step=pause":        "pause blocks until resumed from outside the run, which would break replay",
		"core/stall-mid-step=":             "empty terms",
		"core/stall-mid-step=print":        `unknown action "print"`,
		"core/stall-mid-step=5/4*return":   `bad ratio "5/4"`,
		"core/stall-mid-step=x*return":     `bad count "x"`,
		"core/stall-mid-step=return(5":     "unclosed",
		"core/nope=return":                 "unknown failpoint",
		"core/stall-mid-step":              "want NAME=TERMS",
	}
	for spec, want := range cases {
		_, err := failpoints.NewSet(sim.NewPCGChooser(1, 0), spec)
		if assert.Error(t, err, spec) {
			assert.Contains(t, err.Error(), want, spec)
		}
	}
	_, err := failpoints.NewSet(sim.NewPCGChooser(1, 0), "core/stall-mid-step=return", "core/stall-mid-step=off")
	assert.ErrorContains(t, err, "armed twice")
}

// TestValuesAreCheckedWhenArmed: a value that a failpoint's terms do not
// allow is refused when it is armed, in a run set, in the process-wide set
// and from GO_FAILPOINTS, rather than run as some other value.
func TestValuesAreCheckedWhenArmed(t *testing.T) {
	const delay = `the delay must be a whole number of microseconds ≥ 0 or a quoted duration such as "2ms"`
	refused := map[string]string{
		"core/stall-mid-step=return(abc)":               "failpoints: core/stall-mid-step: return(abc): " + delay,
		"core/stall-mid-step=return(-5)":                "failpoints: core/stall-mid-step: return(-5): " + delay,
		`core/stall-mid-step=return("bogus")`:           `failpoints: core/stall-mid-step: return("bogus"): ` + delay,
		`core/stall-before-abort=2*off->return("-2ms")`: `failpoints: core/stall-before-abort: return("-2ms"): ` + delay,
		"engine/output-handler-stall=1/2*return(-1)":    "failpoints: engine/output-handler-stall: 1/2*return(-1): " + delay,
		"core/output-late=return(true)":                 "failpoints: core/output-late: return(true): " + delay,
		"core/output-late=return(9223372036854776)":     "failpoints: core/output-late: return(9223372036854776): the delay must be at most 9223372036854775 microseconds, the longest a time.Duration holds",
		"engine/abort-after-add=return(5)":              "failpoints: engine/abort-after-add: return(5): this failpoint takes no value: write return alone",
		`engine/client-abandon=3*return("x")`:           `failpoints: engine/client-abandon: 3*return("x"): this failpoint takes no value: write return alone`,
	}
	for spec, want := range refused {
		_, err := failpoints.NewSet(sim.NewPCGChooser(1, 0), spec)
		assert.EqualError(t, err, want, spec)
		name, terms, _ := strings.Cut(spec, "=")
		if !strings.Contains(terms, "/") { // pingcap's grammar has no ratios
			assert.EqualError(t, failpoints.Enable(name, terms), want, "Enable(%s)", spec)
			p, err := failpoints.Lookup(name)
			require.NoError(t, err)
			assert.False(t, (*failpoints.Set)(nil).Fires(p), "%s is not armed", spec)
		}
	}
	assert.EqualError(t, failpoints.Enable(failpoints.CoreStallMidStep.Name, "50%return(-5)"),
		"failpoints: core/stall-mid-step: 50%return(-5): "+delay, "a value behind pingcap's modifiers is checked too")
	assert.EqualError(t, failpoints.Enable(failpoints.CoreStallMidStep.Name, `return("1->-2")`),
		`failpoints: core/stall-mid-step: return("1->-2"): `+delay, "a quoted value is one value")

	for _, spec := range []string{
		"core/stall-mid-step=return", "core/stall-mid-step=return()", "core/stall-mid-step=return(0)",
		"core/stall-mid-step=return(400)", `core/stall-mid-step=return("2ms")`, "core/stall-mid-step=panic(not a delay)",
		"engine/abort-after-add=return", "engine/client-abandon=2*off->return",
		`core/model-panic=return("any message")`, "core/model-panic=return(7)",
	} {
		_, err := failpoints.NewSet(sim.NewPCGChooser(1, 0), spec)
		assert.NoError(t, err, spec)
	}

	t.Setenv("GO_FAILPOINTS", failpoints.CoreStallMidStep.FullName()+"=return(-5)")
	_, err := failpoints.EnvSpecs()
	assert.EqualError(t, err, "failpoints: GO_FAILPOINTS: core/stall-mid-step: return(-5): "+delay)
}

func TestDelayValues(t *testing.T) {
	assert.Equal(t, time.Millisecond, failpoints.Delay(""))
	assert.Equal(t, 400*time.Microsecond, failpoints.Delay("400"))
	assert.Equal(t, 5*time.Millisecond, failpoints.Delay("5ms"))
}

// TestStallIsVirtualUnderTheSimulator: a stall sleeps on the runtime's
// clock, so under the simulator it costs virtual time, not wall time.
func TestStallIsVirtualUnderTheSimulator(t *testing.T) {
	s := rttest.Armed(t, `core/output-late=3*return("2s")`)
	start := time.Now()
	res := sim.Run(sim.Options{}, func(rt task.Runtime) error {
		for i := 0; i < 5; i++ {
			s.Stall(rt, failpoints.CoreOutputLate)
		}
		return nil
	})
	require.NoError(t, res.Err)
	assert.Equal(t, 6*time.Second, res.Elapsed, "three stalls of two virtual seconds")
	assert.Less(t, time.Since(start), time.Second)
}

func TestScopedArmsAndDisarmsTheProcessWideSet(t *testing.T) {
	var nilSet *failpoints.Set
	assert.False(t, nilSet.Fires(failpoints.ClientAbandon))
	t.Run("armed", func(t *testing.T) {
		failpoints.Scoped(t, failpoints.ClientAbandon.Name, "1*return")
		assert.True(t, nilSet.Fires(failpoints.ClientAbandon))
		assert.False(t, nilSet.Fires(failpoints.ClientAbandon), "one time only")
		failpoints.Scoped(t, failpoints.CoreStallMidStep.Name, "1*return(7)")
		v, ok := nilSet.Value(failpoints.CoreStallMidStep)
		assert.True(t, ok)
		assert.Equal(t, "7", v)
	})
	assert.False(t, nilSet.Fires(failpoints.ClientAbandon), "disarmed at the subtest's cleanup")
	require.NoError(t, failpoints.Disable(failpoints.ClientAbandon.Name), "disarming twice is a no-op")
	assert.Error(t, failpoints.Enable("core/nope", "return"))
	assert.Error(t, failpoints.Enable(failpoints.ClientAbandon.Name, "garbage(("))
}

// TestEnableRefusesWhatPingcapCannotRead: terms pingcap's parser panics on
// are refused like any it cannot parse, and disarming a failpoint whose
// arming was refused is a no-op, as disarming a disarmed one is.
func TestEnableRefusesWhatPingcapCannotRead(t *testing.T) {
	var nilSet *failpoints.Set
	for _, terms := range []string{"return(abc)", "return(x)", "garbage(("} {
		err := failpoints.Enable(failpoints.ModelPanic.Name, terms)
		require.Error(t, err, terms)
		assert.Contains(t, err.Error(), "failpoints: core/model-panic: ", terms)
		assert.False(t, nilSet.Fires(failpoints.ModelPanic), terms)
		require.NoError(t, failpoints.Disable(failpoints.ModelPanic.Name), terms)
	}
	assert.ErrorContains(t, failpoints.Enable(failpoints.ModelPanic.Name, "return(abc)"),
		`failpoints: core/model-panic: pingcap's failpoint cannot read "return(abc)": runtime error: slice bounds out of range`)
}

// TestGOFailpointsArmsTheProcessWideSet runs this test binary again with
// GO_FAILPOINTS set, as a user would: this package reads it at start
// before pingcap's init does (internal/fpenv takes it out of the
// environment first), arms the catalogue's failpoints and other packages'
// alike, and puts it back.
func TestGOFailpointsArmsTheProcessWideSet(t *testing.T) {
	const other = "some/other/package/point"
	env := failpoints.CoreStallMidStep.FullName() + "=return(42);" + other + "=return(7)"
	if os.Getenv("LLMDST_FAILPOINTS_CHILD") == "1" {
		var nilSet *failpoints.Set
		v, ok := nilSet.Value(failpoints.CoreStallMidStep)
		if !ok || v != "42" {
			t.Fatalf("GO_FAILPOINTS did not arm core/stall-mid-step: %q %v", v, ok)
		}
		specs, err := failpoints.EnvSpecs()
		if err != nil || len(specs) != 1 || specs[0] != "core/stall-mid-step=return(42)" {
			t.Fatalf("EnvSpecs: %v %v", specs, err)
		}
		if v, err := failpoint.Eval(other); err != nil || v != 7 {
			t.Fatalf("GO_FAILPOINTS did not arm %s in pingcap's registry: %v %v", other, v, err)
		}
		if got := os.Getenv("GO_FAILPOINTS"); got != env {
			t.Fatalf("GO_FAILPOINTS is %q after start, not %q", got, env)
		}
		return
	}
	code, stdout, stderr := goFailpointsChild(t, env)
	require.Equal(t, 0, code, stdout+stderr)
	assert.Contains(t, stdout, "PASS")
}

// TestBadGOFailpointsStopsTheProcessAtStart: a GO_FAILPOINTS that this
// package or pingcap's cannot take stops the process before main with one
// line on standard error and exit code 2, as any bad input to simrun
// does, rather than pingcap's panic, or its exit 1 (a failure found, to a
// CI job) with its message on standard output.
func TestBadGOFailpointsStopsTheProcessAtStart(t *testing.T) {
	const delay = `the delay must be a whole number of microseconds ≥ 0 or a quoted duration such as "2ms"`
	stall := failpoints.CoreStallMidStep.FullName()
	for env, want := range map[string]string{
		stall + "=return(abc)":                            "failpoints: GO_FAILPOINTS: core/stall-mid-step: return(abc): " + delay,
		stall + "=return(ab)":                             "failpoints: GO_FAILPOINTS: core/stall-mid-step: return(ab): " + delay,
		stall + "=return(-5)":                             "failpoints: GO_FAILPOINTS: core/stall-mid-step: return(-5): " + delay,
		"core/stall-mid-step=return(x)":                   "failpoints: GO_FAILPOINTS: core/stall-mid-step: return(x): " + delay,
		"garbage":                                         `failpoints: GO_FAILPOINTS: "garbage": want NAME=TERMS, specs separated by ";", as in github.com/llmdst/llmdst/core/stall-before-abort=return(500)`,
		stall + "=return;=return":                         `failpoints: GO_FAILPOINTS: "=return": want NAME=TERMS`,
		stall + "p=return":                                `failpoints: GO_FAILPOINTS: unknown failpoint "github.com/llmdst/llmdst/core/stall-mid-stepp": want one of core/`,
		"other/x=return(x)":                               `failpoints: GO_FAILPOINTS: other/x: pingcap's failpoint cannot read "return(x)": `,
		"other/x=return(1.5)":                             `failpoints: GO_FAILPOINTS: other/x: failpoint: failed to parse "return(1.5)"`,
		failpoints.ModelPanic.FullName() + "=return(abc)": `failpoints: GO_FAILPOINTS: core/model-panic: pingcap's failpoint cannot read "return(abc)": `,
	} {
		code, stdout, stderr := goFailpointsChild(t, env)
		assert.Equal(t, 2, code, "%s: %s", env, stderr)
		assert.Empty(t, stdout, env)
		assert.True(t, strings.HasPrefix(stderr, want), "%s: %s", env, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s: one line: %s", env, stderr)
	}
}

// goFailpointsChild runs TestGOFailpointsArmsTheProcessWideSet in this
// test binary again with GO_FAILPOINTS set to env.
func goFailpointsChild(t *testing.T, env string) (code int, stdout, stderr string) {
	t.Helper()
	return reexec.Test(t, "TestGOFailpointsArmsTheProcessWideSet", "LLMDST_FAILPOINTS_CHILD=1", "GO_FAILPOINTS="+env)
}

func ExampleNewSet() {
	set, err := failpoints.NewSet(sim.NewPCGChooser(42, sim.StreamFaults),
		"core/stall-before-abort=2*return(400)", "core/model-panic=10*off->panic")
	if err != nil {
		panic(err)
	}
	fmt.Println(set.Specs())
	// Output: [core/stall-before-abort=2*return(400) core/model-panic=10*off->panic]
}

// BenchmarkDisarmed is what a failpoint costs in production: one atomic
// load when nothing is armed.
func BenchmarkDisarmed(b *testing.B) {
	var process *failpoints.Set
	rt := task.Real()
	for i := 0; i < b.N; i++ {
		process.Stall(rt, failpoints.CoreStallMidStep)
	}
}

// BenchmarkDisarmedRunSet is the same for a run's own empty set.
func BenchmarkDisarmedRunSet(b *testing.B) {
	s, _ := failpoints.NewSet(sim.NewPCGChooser(1, 0))
	rt := task.Real()
	for i := 0; i < b.N; i++ {
		s.Stall(rt, failpoints.CoreStallMidStep)
	}
}

// TestAQuotedValueHoldsAnArrow: "->" inside a quoted value is part of the
// value, in a run set as in pingcap's grammar (and in the process-wide set),
// so that a spec GO_FAILPOINTS arms is armed the same in a simulated run.
func TestAQuotedValueHoldsAnArrow(t *testing.T) {
	s := rttest.Armed(t, `core/model-panic=1*off->return("a->b")`)
	assert.False(t, s.Fires(failpoints.ModelPanic))
	v, ok := s.Value(failpoints.ModelPanic)
	assert.True(t, ok)
	assert.Equal(t, "a->b", v)
	assert.Equal(t, []string{`core/model-panic=1*off->return("a->b")`}, s.Specs())

	t.Setenv("GO_FAILPOINTS", failpoints.ModelPanic.FullName()+`=return("x->y")`)
	specs, err := failpoints.EnvSpecs()
	require.NoError(t, err)
	_, err = failpoints.NewSet(sim.NewPCGChooser(1, 0), specs...)
	assert.NoError(t, err, "a spec GO_FAILPOINTS arms is armed in a run set too")

	// A quote that is not closed is not a value, as pingcap does not read it.
	for _, spec := range []string{`core/model-panic=return("a)`, `core/model-panic=return("a->b)`, `core/model-panic=return("a)->off`} {
		_, err := failpoints.NewSet(sim.NewPCGChooser(1, 0), spec)
		assert.ErrorContains(t, err, "quoted value", spec)
	}
}
