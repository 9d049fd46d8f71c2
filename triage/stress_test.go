package triage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/shell"
)

// The signatures of the fixture's failure modes.
const (
	checkSig = "engine_test.cpp:<n>: CHECK( Drain(engine, reused) == <n> ) with expansion: <n> == <n>"
	tokSig   = "tokenizer: cannot open <tmp>"
	panicSig = "panic: runtime error: index out of range [<n>] with length <n>"
)

// fixtureModel is the failure signature testdata/flaky gives copy i of a
// variant run with args, "" for a pass: the reference the runner's
// results are checked against.
func fixtureModel(i int, args ...string) string {
	switch {
	case i%5 == 0:
		return checkSig
	case i%8 == 3 && !slices.Contains(args, "-fixed-tok"):
		return tokSig
	case i%4 == 1 && slices.Contains(args, "-new-bug"):
		return panicSig
	}
	return ""
}

// records reads what the fixture's copies wrote under FLAKY_RECORD, by
// file name ("A-2-7"), each as its key=value lines.
func records(t *testing.T, dir string) map[string]map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a record being written
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		kv := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(l, "=")
			kv[k] = v
		}
		out[e.Name()] = kv
	}
	return out
}

func TestStressSeparatesTwoFailureModes(t *testing.T) {
	bin := flakyBin(t)
	cfg := StressConfig{Parallel: 8, Rounds: 5, Cmd: []string{bin}, Env: []string{"FLAKY_PARALLEL=8"}}
	var calls []int
	rep, err := Stress(t.Context(), cfg, func(done, total int) {
		assert.Equal(t, 40, total)
		calls = append(calls, done)
	})
	require.NoError(t, err)
	for i, d := range calls {
		require.Equal(t, i+1, d, "progress counts every copy once, in order")
	}
	require.Len(t, calls, 40)

	require.Len(t, rep.Variants, 1)
	v := rep.Variants[0]
	assert.Equal(t, Rate{K: 12, N: 40}, v.Total)
	require.Len(t, rep.Copies, 40)
	for _, c := range rep.Copies {
		want := fixtureModel(c.Index(8))
		assert.Equal(t, want != "", c.Failed, "round %d copy %d", c.Round, c.Copy)
		assert.Equal(t, want, c.Signature, "round %d copy %d", c.Round, c.Copy)
		if !c.Failed {
			assert.Nil(t, c.Output, "passing copies keep no output")
		}
	}
	for r, got := range v.Rounds {
		k := 0
		for c := range 8 {
			if fixtureModel(r*8+c) != "" {
				k++
			}
		}
		assert.Equal(t, Rate{K: k, N: 8}, got, "round %d", r+1)
	}

	require.Len(t, v.Modes, 2, "exactly two modes: %v", v.Modes)
	check, tok := v.Modes[0], v.Modes[1]
	assert.Equal(t, checkSig, check.Signature)
	assert.Equal(t, 8, check.Count)
	assert.Equal(t, 0, check.First)
	assert.Equal(t, "FLAKY_PARALLEL=8 LLMDST_STRESS_VARIANT=A LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=1 "+shell.Quote(bin), check.Example)
	assert.Equal(t, tokSig, tok.Signature)
	assert.Equal(t, 4, tok.Count)
	assert.Equal(t, 3, tok.First, "round 1 copy 4")
	for _, m := range []struct {
		mode Mode
		p    float64
	}{{check, 1.0 / 5}, {tok, 1.0 / 8 * 4 / 5}} {
		lo, hi := m.mode.Rate(40).CI95()
		assert.True(t, lo <= m.p && m.p <= hi, "%s: known rate %v outside [%v, %v]", m.mode.Signature, m.p, lo, hi)
	}

	again, err := Stress(t.Context(), cfg, nil)
	require.NoError(t, err)
	assert.Equal(t, v.Modes, again.Variants[0].Modes, "the same run gives the same modes, counts and examples")

	if sh, err := exec.LookPath("sh"); err == nil {
		for _, m := range v.Modes {
			out, err := exec.Command(sh, "-c", m.Example).CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s reproduces a failure", m.Example)
			assert.Equal(t, m.Signature, Signature(out, exit.ExitCode()), "%s reproduces its mode", m.Example)
		}
	}

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, want := range []string{
		"variant", "round 1", "round 5", "total",
		"A: " + ShellJoin([]string{bin}),
		"12/40 (30.0% [18.1%, 45.4%])",
		"8/40 = 20.0% [10.5%, 34.8%]  first at round 1 copy 1",
		"4/40 = 10.0% [4.0%, 23.1%]  first at round 1 copy 4",
		"    " + checkSig + "\n",
		"    reproduce: " + check.Example + "\n",
		"stress: 8 copies at once; 5 round(s) per variant; load 0 (no extra CPU load); shared TMPDIR; no timeout;",
	} {
		assert.Contains(t, table.String(), want)
	}
	assert.NotContains(t, table.String(), "A vs B")
	assert.NotContains(t, table.String(), "situations", "no targets and nothing reached: nothing said of situations")

	raw, err := json.Marshal(rep.Summary())
	require.NoError(t, err)
	var s Summary
	require.NoError(t, json.Unmarshal(raw, &s))
	assert.Equal(t, 8, s.Parallel)
	assert.Equal(t, 5, s.Rounds)
	require.Len(t, s.Variants, 1)
	assert.Equal(t, 12, s.Variants[0].Failed)
	assert.Equal(t, 40, s.Variants[0].Runs)
	assert.InDelta(t, 0.3, s.Variants[0].Rate, 1e-12)
	require.NotNil(t, s.Variants[0].FirstFailureSeconds)
	assert.Greater(t, s.Variants[0].ExecsPerSec, 0.0)
	require.Len(t, s.Variants[0].Modes, 2)
	assert.Equal(t, ModeSummary{
		Signature: tokSig, Count: 4, Rate: 0.1, CI95: ci95(Rate{4, 40}),
		First: CopyRef{Round: 1, Copy: 4}, Reproduce: tok.Example,
	}, s.Variants[0].Modes[1])
	assert.Nil(t, s.P)
	for _, key := range []string{`"first_failure_seconds":`, `"execs_per_sec":`, `"ci95":[`, `"load":0`, `"parallel":8`, `"reproduce":`} {
		assert.Contains(t, string(raw), key)
	}
}

func TestStressGivesEveryCopyItsOwnTmpdir(t *testing.T) {
	bin := flakyBin(t)
	rec := t.TempDir()
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 4, Rounds: 2, PrivateTmp: true, Cmd: []string{bin},
		Env: []string{"FLAKY_PARALLEL=4", "FLAKY_RECORD=" + rec, "FLAKY_CHECK_TMP=1"},
	}, nil)
	require.NoError(t, err)
	for _, c := range rep.Copies {
		assert.Equal(t, fixtureModel(c.Index(4)), c.Signature, "no copy saw another's TMPDIR")
	}
	got := records(t, rec)
	require.Len(t, got, 8)
	seen := map[string]bool{}
	parent := ""
	for _, name := range slices.Sorted(maps.Keys(got)) {
		dir := got[name]["tmpdir"]
		require.NotEmpty(t, dir, name)
		assert.False(t, seen[dir], "%s shares TMPDIR %s", name, dir)
		seen[dir] = true
		assert.NotEqual(t, filepath.Clean(os.TempDir()), filepath.Clean(dir))
		if parent == "" {
			parent = filepath.Dir(dir)
		}
		assert.Equal(t, parent, filepath.Dir(dir), "one parent for all copies")
		assert.NoDirExists(t, dir, "removed when its copy ended")
	}
	assert.NoDirExists(t, parent, "the parent is removed at the end")
	assert.Contains(t, rep.Conditions(), "private TMPDIR per copy")
	ex := rep.Variants[0].Modes[0].Example
	assert.Contains(t, ex, `t="$(mktemp -d)" && `)
	assert.Contains(t, ex, ` TMPDIR="$t" TMP="$t" TEMP="$t" TEMPDIR="$t" `, "the copy's temporary directory, under every name it had: %s", ex)

	// The contrast: copies sharing one TMPDIR see each other's files.
	shared := t.TempDir()
	rep, err = Stress(t.Context(), StressConfig{
		Parallel: 4, Rounds: 2, Cmd: []string{bin},
		Env: []string{"FLAKY_PARALLEL=4", "FLAKY_CHECK_TMP=1", "TMPDIR=" + shared},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, Rate{K: 4, N: 4}, rep.Variants[0].Rounds[1], "in round 2 every copy finds round 1's marker")
	assert.Equal(t, "error: TMPDIR <tmp> is shared with another copy", rep.Variants[0].Modes[0].Signature)
}

func TestStressAlternatesVariants(t *testing.T) {
	bin := flakyBin(t)
	rec := t.TempDir()
	bArgs := []string{"-new-bug", "-fixed-tok"}
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 8, Rounds: 5, Cmd: []string{bin}, VsCmd: append([]string{bin}, bArgs...),
		Env: []string{"FLAKY_PARALLEL=8", "FLAKY_RECORD=" + rec},
	}, nil)
	require.NoError(t, err)

	require.Len(t, rep.Copies, 80)
	for i, c := range rep.Copies {
		block := i / 8
		assert.Equal(t, string("AB"[block%2]), c.Variant, "copy %d runs in round order A1 B1 A2 B2 …", i)
		assert.Equal(t, block/2+1, c.Round, "copy %d", i)
		assert.Equal(t, i%8+1, c.Copy, "copy %d", i)
		var args []string
		if c.Variant == "B" {
			args = bArgs
		}
		assert.Equal(t, fixtureModel(c.Index(8), args...), c.Signature, "%s round %d copy %d", c.Variant, c.Round, c.Copy)
	}
	got := records(t, rec)
	require.Len(t, got, 80)
	for r := 1; r <= 5; r++ {
		for c := 1; c <= 8; c++ {
			assert.Equal(t, "", got[fmt.Sprintf("A-%d-%d", r, c)]["args"])
			assert.Equal(t, "-new-bug -fixed-tok", got[fmt.Sprintf("B-%d-%d", r, c)]["args"])
		}
	}

	a, b := rep.Variants[0], rep.Variants[1]
	assert.Equal(t, Rate{12, 40}, a.Total)
	assert.Equal(t, Rate{16, 40}, b.Total)
	require.Len(t, b.Modes, 2)
	assert.Equal(t, panicSig, b.Modes[1].Signature)
	assert.Equal(t, 8, b.Modes[1].Count)
	assert.Equal(t, 1, b.Modes[1].First, "round 1 copy 2")
	assert.Contains(t, b.Modes[1].Example, "LLMDST_STRESS_VARIANT=B LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=2 "+ShellJoin(append([]string{bin}, bArgs...)))

	verdicts := map[string]string{}
	for _, c := range rep.Comparisons {
		verdicts[c.Signature] = c.Verdict
	}
	assert.Equal(t, map[string]string{
		checkSig: "no significant change (p=1)",
		panicSig: "new in B (p=0.0053); holds among 3 modes (p=0.016 corrected)",
		tokSig:   "gone in B, not significant (p=0.12)",
	}, verdicts)
	assert.Equal(t, "no significant change (p=0.48)", rep.Verdict)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "A vs B, by failure mode")
	assert.Contains(t, table.String(), "new in B (p=0.0053)")
	assert.Contains(t, table.String(), "B: "+ShellJoin(append([]string{bin}, bArgs...)))
	assert.Contains(t, table.String(), "A and B alternating")
	s := rep.Summary()
	require.NotNil(t, s.P)
	assert.Len(t, s.Comparisons, 3)
}

func TestStressStopsBetweenPairsOfRoundsOnceTheBudgetIsSpent(t *testing.T) {
	bin := flakyBin(t)
	cfg := StressConfig{Parallel: 4, Rounds: 5, Cmd: []string{bin}, VsCmd: []string{bin, "-fixed-tok"}, Budget: time.Nanosecond}
	totals := map[int]bool{}
	rep, err := Stress(t.Context(), cfg, func(done, total int) { totals[total] = true })
	require.NoError(t, err, "a spent budget is not an error")
	assert.Equal(t, map[int]bool{-1: true}, totals, "with a budget, the copies to come are not known")
	assert.True(t, rep.BudgetSpent)
	require.Len(t, rep.Copies, 8, "the first pair of rounds runs whatever the budget")
	for _, v := range rep.Variants {
		assert.Len(t, v.Rounds, 1, "variant %s: both variants run as many rounds", v.Name)
	}
	assert.Contains(t, rep.Conditions(), "; 1 round(s) per variant, A and B alternating, when the 1ns budget ran out;")
	s := rep.Summary()
	assert.Equal(t, 1, s.Rounds)
	assert.True(t, s.BudgetSpent)
	assert.Equal(t, 1e-9, s.BudgetSeconds)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "round 1  total\n", "only the round that ran has a column")

	// A budget that is not spent changes nothing but the conditions.
	cfg = StressConfig{Parallel: 2, Rounds: 2, Cmd: []string{bin}, Budget: time.Hour}
	rep, err = Stress(t.Context(), cfg, nil)
	require.NoError(t, err)
	assert.False(t, rep.BudgetSpent)
	assert.Len(t, rep.Copies, 4)
	assert.Contains(t, rep.Conditions(), "; 2 round(s) per variant, within a 1h0m0s budget;")
}

func TestStressValidatesItsConfig(t *testing.T) {
	cmd := []string{"true"}
	for _, tc := range []struct {
		cfg  StressConfig
		want string
	}{
		{StressConfig{Parallel: 1, Rounds: 1}, "stress: no command given: want -- CMD ARGS"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: []string{""}}, "stress: no command given: want -- CMD ARGS"},
		{StressConfig{Rounds: 1, Cmd: cmd}, "stress: -p must be ≥ 1 and ≤ 1024, got 0"},
		{StressConfig{Parallel: 2000, Rounds: 1, Cmd: cmd}, "stress: -p must be ≥ 1 and ≤ 1024, got 2000"},
		{StressConfig{Parallel: 1, Cmd: cmd}, "stress: Rounds must be ≥ 1 and ≤ 1000000, got 0"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, VsCmd: []string{}}, "stress: VsCmd is set but empty: want the argv of variant B, or nil for one variant"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Load: -1}, "stress: Load must be ≥ 0 and ≤ 1024, got -1"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Timeout: -1}, "stress: Timeout must be ≥ 0 (0 means none), got -1ns"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Budget: -time.Second}, "stress: Budget must be ≥ 0 (0 means none), got -1s"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, OutputMax: -1}, "stress: OutputMax must be ≥ 0 bytes (0 means 65536), got -1"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Env: []string{"FOO"}}, `stress: Env entry "FOO" is not KEY=VALUE`},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Env: []string{"LLMDST_STRESS_ROUND=2"}}, "stress: Env sets LLMDST_STRESS_ROUND, which the runner sets for every copy; remove it"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, PrivateTmp: true, Env: []string{"TMPDIR=/x"}}, "stress: Env sets TMPDIR, which PrivateTmp sets for every copy; drop one of them"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Env: []string{"LLMDST_REACHED=/x"}}, "stress: Env sets LLMDST_REACHED, which the runner sets for every copy; remove it"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Targets: []string{"a", ""}}, "stress: target 2 of Targets is empty: want the name a program passes to task.Reach"},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Targets: []string{"a\nb"}}, `stress: target "a\nb" holds a line break, which a copy's log of situations turns into a space: name it as it reads back`},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Targets: []string{"a", "b", "a"}}, `stress: Targets names "a" twice; name each target once`},
		{StressConfig{Parallel: 1, Rounds: 1, Cmd: cmd, Dir: "/does/not/exist"}, `stress: Dir "/does/not/exist" is not a directory: want an existing working directory or ""`},
	} {
		rep, err := Stress(t.Context(), tc.cfg, nil)
		assert.EqualError(t, err, tc.want)
		assert.Nil(t, rep)
	}
}

func TestStressReportsACommandThatCannotStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-test")
	rep, err := Stress(t.Context(), StressConfig{Parallel: 2, Rounds: 3, Cmd: []string{missing}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stress: cannot start variant A ("+missing+"):")
	require.NotNil(t, rep)
	assert.Empty(t, rep.Copies)
}

func TestStressRunsInDir(t *testing.T) {
	bin := flakyBin(t)
	dir := filepath.Dir(bin)
	rep, err := Stress(t.Context(), StressConfig{Parallel: 1, Rounds: 1, Cmd: []string{"./" + filepath.Base(bin)}, Dir: dir}, nil)
	require.NoError(t, err)
	require.Len(t, rep.Copies, 1)
	assert.Equal(t, "cd "+shell.Quote(dir)+" && LLMDST_STRESS_VARIANT=A LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=1 ./flaky", rep.Copies[0].Reproduce)
}

func TestStressInterruptedBeforeItBegins(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err := Stress(ctx, StressConfig{Parallel: 1, Rounds: 1, Cmd: []string{flakyBin(t)}}, nil)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
	require.NotNil(t, rep)
	assert.Empty(t, rep.Copies)
}

func TestStressUnderABudgetCountsTheRoundsThatRan(t *testing.T) {
	// Interrupted at once: no round ran, and the planned rounds, which the
	// budget was to decide, are not claimed.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err := Stress(ctx, StressConfig{Parallel: 1, Rounds: RoundsMax, Cmd: []string{flakyBin(t)}, Budget: time.Hour}, nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, rep.BudgetSpent)
	assert.Equal(t, 0, rep.Summary().Rounds)
	assert.Contains(t, rep.Conditions(), "; 0 round(s) per variant, within a 1h0m0s budget;")
}

func TestTailBufferKeepsWholeLinesOfTheTail(t *testing.T) {
	tb := &tailBuffer{max: 16}
	fmt.Fprint(tb, "short\n")
	assert.Equal(t, "short\n", string(tb.Bytes()), "nothing dropped: from the start")
	for i := range 10 {
		fmt.Fprintf(tb, "line %d\n", i)
	}
	assert.Equal(t, "line 8\nline 9\n", string(tb.Bytes()))
	tb.Write([]byte(strings.Repeat("x", 40) + "\nend\n"))
	assert.Equal(t, "end\n", string(tb.Bytes()))
	assert.LessOrEqual(t, len(tb.buf), 2*tb.max, "memory stays bounded")

	// One write of exactly what the buffer keeps drops nothing: its first
	// line is whole.
	exact := &tailBuffer{max: 16}
	exact.Write([]byte("first\nsecond\nend\n"[:16]))
	assert.Equal(t, "first\nsecond\nend"[:16], string(exact.Bytes()))
	exact.Write([]byte("!"))
	assert.Equal(t, "second\nend!", string(exact.Bytes()), "one byte more drops the cut first line")
}

func TestShellJoin(t *testing.T) {
	assert.Equal(t, `./t -run 'Test(A|B)$' 'it'\''s' ''`, ShellJoin([]string{"./t", "-run", "Test(A|B)$", "it's", ""}))
}

// reachScript is a shell fixture of known situations: copy i (from 0, as
// CopyResult.Index with 4 copies a round) reaches "window" (logged twice,
// read once) when i is 1, 4 or 7, "beta" when 2 or 3, "alpha" when 5 or
// 7 and "rare" when 6, and fails when i is 2, 4 or 6. It records its
// LLMDST_REACHED under $0, as ROUND-COPY.
const reachScript = `i=$(( (LLMDST_STRESS_ROUND - 1) * 4 + LLMDST_STRESS_COPY - 1 ))
echo "$LLMDST_REACHED" > "$0/$LLMDST_STRESS_ROUND-$LLMDST_STRESS_COPY"
r() { echo "$1" >> "$LLMDST_REACHED"; }
case $i in 1|4|7) r window; r window;; esac
case $i in 2|3) r beta;; esac
case $i in 5|7) r alpha;; esac
case $i in 6) r rare;; esac
case $i in 2|4|6) echo "error: copy $i broke"; exit 1;; esac
exit 0`

func TestStressCountsTheCopiesThatReachedEachSituation(t *testing.T) {
	rec := t.TempDir()
	outer := filepath.Join(t.TempDir(), "outer")
	t.Setenv(EnvReached, outer) // this process's, which no copy must inherit
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 4, Rounds: 2, Cmd: []string{"sh", "-c", reachScript, rec}, Targets: []string{"never", "window"},
	}, nil)
	require.NoError(t, err)
	require.Len(t, rep.Copies, 8)
	byIndex := map[int][]string{}
	for _, c := range rep.Copies {
		byIndex[c.Index(4)] = c.Reached
		assert.NotContains(t, c.Reproduce, EnvReached+"=", "a copy run again alone need not log")
	}
	assert.Equal(t, map[int][]string{
		0: nil, 1: {"window"}, 2: {"beta"}, 3: {"beta"},
		4: {"window"}, 5: {"alpha"}, 6: {"rare"}, 7: {"window", "alpha"},
	}, byIndex, "each copy's situations, each once, in the order reached")

	v := rep.Variants[0]
	assert.Equal(t, Rate{K: 3, N: 8}, v.Total)
	assert.Equal(t, []Situation{
		{Name: "never", Target: true, First: -1},
		{Name: "window", Target: true, Copies: 3, Failed: 1, First: 1},
		{Name: "alpha", Copies: 2, Failed: 0, First: 5},
		{Name: "beta", Copies: 2, Failed: 1, First: 2},
		{Name: "rare", Copies: 1, Failed: 1, First: 6},
	}, v.Reached, "targets first, in their order; then most copies first, then by name")

	// Every copy logged to a file of its own, in one directory, gone at
	// the end.
	logs := records(t, rec)
	require.Len(t, logs, 8)
	dir := ""
	for name, kv := range logs {
		var path string
		for k := range kv {
			path = k // the record's one line, with no "="
		}
		round, copyN, _ := strings.Cut(name, "-")
		assert.Equal(t, "A-r"+round+"-c"+copyN, filepath.Base(path), name)
		if dir == "" {
			dir = filepath.Dir(path)
		}
		assert.Equal(t, dir, filepath.Dir(path), "one directory for all copies")
	}
	assert.True(t, strings.HasPrefix(filepath.Base(dir), "llmdst-reached-"), dir)
	assert.NoDirExists(t, dir, "removed at the end")
	assert.NoFileExists(t, outer, "every copy logs to its own file, not to the one this process inherited")

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "  1 failure mode(s); first failure after ")
	assert.Contains(t, table.String(), "    reproduce: LLMDST_STRESS_VARIANT=A LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=3 sh -c ")
	assert.Contains(t, table.String(), ""+
		"  situations reached (task.Reach), in copies (* a target):\n"+
		"    * never    0/8    0.0%\n"+
		"    * window   3/8   37.5%  first at round 1 copy 2, 1 of them failed\n"+
		"      alpha    2/8   25.0%  first at round 2 copy 2, 0 of them failed\n"+
		"      beta     2/8   25.0%  first at round 1 copy 3, 1 of them failed\n"+
		"      rare     1/8   12.5%  first at round 2 copy 3, 1 of them failed\n"+
		"  no copy reached target never: its passing copies say nothing of what happens there\n"+
		"\nstress: 4 copies at once;", "after the failure modes, before the conditions")

	raw, err := json.Marshal(rep.Summary())
	require.NoError(t, err)
	var s Summary
	require.NoError(t, json.Unmarshal(raw, &s))
	vs := s.Variants[0]
	assert.Equal(t, []string{"never", "window"}, vs.Targets)
	assert.Equal(t, map[string]int{"never": 0, "window": 3, "alpha": 2, "beta": 2, "rare": 1}, vs.Reached, "targets always, with 0")
	assert.Equal(t, map[string]CopyRef{"window": {1, 2}, "alpha": {2, 2}, "beta": {1, 3}, "rare": {2, 3}}, vs.ReachedFirst)
	assert.Equal(t, map[string]int{"window": 1, "alpha": 0, "beta": 1, "rare": 1}, vs.ReachedFailed)
	for _, key := range []string{`"targets":["never","window"]`, `"reached":{`, `"reached_first":{`, `"reached_failed":{`} {
		assert.Contains(t, string(raw), key)
	}
}

// TestStressCountsTheSituationsAGoProgramReached runs the Go fixture,
// which calls task.Reach on the real runtime, against its fixed build:
// both open the tokenizer race's window in the same copies (i%8 == 3, 5
// of 40), A fails in all of them, and B, with the race fixed, only in the
// one (i = 35) that fails its CHECK first.
func TestStressCountsTheSituationsAGoProgramReached(t *testing.T) {
	bin := flakyBin(t)
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 8, Rounds: 5, Cmd: []string{bin}, VsCmd: []string{bin, "-fixed-tok"},
		Env: []string{"FLAKY_PARALLEL=8", "FLAKY_REACH=1"}, Targets: []string{"tok-window"},
	}, nil)
	require.NoError(t, err)
	a, b := rep.Variants[0], rep.Variants[1]
	assert.Equal(t, []Situation{{Name: "tok-window", Target: true, Copies: 5, Failed: 5, First: 3}}, a.Reached)
	assert.Equal(t, []Situation{{Name: "tok-window", Target: true, Copies: 5, Failed: 1, First: 3}}, b.Reached)
	for _, c := range rep.Copies {
		if c.Index(8)%8 == 3 {
			assert.Equal(t, []string{"tok-window"}, c.Reached, "%s round %d copy %d", c.Variant, c.Round, c.Copy)
		} else {
			assert.Nil(t, c.Reached, "%s round %d copy %d", c.Variant, c.Round, c.Copy)
		}
	}
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "    * tok-window   5/40   12.5%  first at round 1 copy 4, 5 of them failed\n")
	assert.Contains(t, table.String(), "    * tok-window   5/40   12.5%  first at round 1 copy 4, 1 of them failed\n")
	assert.NotContains(t, table.String(), "no copy reached")
	assert.Contains(t, table.String(), ""+
		"A vs B, by situation reached (Fisher exact, α = 0.05):\n"+
		"  * tok-window  A 5/40  B 5/40  no significant change (p=1)\n")
}

// TestStressEndsOnALogOfSituationsItCannotRead: a copy that turns its
// log into a directory ends the run after its round, with an error that
// names the file, and the directory of logs is removed all the same.
func TestStressEndsOnALogOfSituationsItCannotRead(t *testing.T) {
	rec := t.TempDir()
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 2, Rounds: 3, Cmd: []string{"sh", "-c", `echo "$LLMDST_REACHED" > "$0/log"; mkdir -p "$LLMDST_REACHED"`, rec},
	}, nil)
	require.Error(t, err)
	require.NotNil(t, rep)
	assert.Empty(t, rep.Copies, "the round is not counted")
	b, rerr := os.ReadFile(filepath.Join(rec, "log"))
	require.NoError(t, rerr)
	path := strings.TrimSpace(string(b))
	assert.Contains(t, err.Error(), "stress: cannot read "+filepath.Dir(path)+"/A-r1-c")
	assert.Contains(t, err.Error(), ", the log of the situations variant A round 1 copy ")
	assert.Contains(t, err.Error(), "did the command remove or replace it?")
	assert.NoDirExists(t, filepath.Dir(path))
}

// TestStressWithoutSituationsSaysNothingOfThem: with no targets and no
// copy that reached anything, neither the table nor the summary mentions
// situations, as before they were counted.
func TestStressWithoutSituationsSaysNothingOfThem(t *testing.T) {
	rep, err := Stress(t.Context(), StressConfig{Parallel: 2, Rounds: 1, Cmd: []string{"sh", "-c", "exit 1"}}, nil)
	require.NoError(t, err)
	assert.Nil(t, rep.Variants[0].Reached)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.NotContains(t, table.String(), "situations")
	assert.NotContains(t, table.String(), "no copy reached")
	raw, err := json.Marshal(rep.Summary())
	require.NoError(t, err)
	for _, key := range []string{`"targets"`, `"reached`} {
		assert.NotContains(t, string(raw), key)
	}

	// Nor, with two variants, are situations compared.
	rep, err = Stress(t.Context(), StressConfig{Parallel: 2, Rounds: 1, Cmd: []string{"sh", "-c", "exit 1"}, VsCmd: []string{"true"}}, nil)
	require.NoError(t, err)
	assert.Nil(t, rep.SituationComparisons)
	table.Reset()
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), "A vs B, by failure mode")
	assert.NotContains(t, table.String(), "situation")
	raw, err = json.Marshal(rep.Summary())
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"comparisons":`)
	assert.NotContains(t, string(raw), `situation`)
}

// vsReachScript is a shell fixture of known situations for two variants
// of 4 copies a round, run for 3 rounds: A reaches "window" in every copy
// but copy 1 (9 of 12) and "alpha" in copy 3 of rounds 1 and 2 (2); B
// reaches "bonly" in copy 4 (3); both reach "both" in copy 1 of rounds 1
// and 2 (2 each). Every copy passes.
const vsReachScript = `r() { echo "$1" >> "$LLMDST_REACHED"; }
c=$LLMDST_STRESS_COPY
case $LLMDST_STRESS_VARIANT in
A) if [ "$c" != 1 ]; then r window; fi
   if [ "$c" = 3 ] && [ "$LLMDST_STRESS_ROUND" -le 2 ]; then r alpha; fi;;
B) if [ "$c" = 4 ]; then r bonly; fi;;
esac
if [ "$c" = 1 ] && [ "$LLMDST_STRESS_ROUND" -le 2 ]; then r both; fi
exit 0`

// TestStressComparesTheSituationsOfTwoVariants: with two variants, every
// situation either reached, and every target, is compared between them
// as failure modes are, with CompareRates' verdicts: the targets first,
// then by the larger of the two counts, then by name.
func TestStressComparesTheSituationsOfTwoVariants(t *testing.T) {
	script := []string{"sh", "-c", vsReachScript}
	rep, err := Stress(t.Context(), StressConfig{
		Parallel: 4, Rounds: 3, Cmd: script, VsCmd: script, Targets: []string{"never"},
	}, nil)
	require.NoError(t, err)
	a, b := rep.Variants[0], rep.Variants[1]
	require.Equal(t, Rate{K: 0, N: 12}, a.Total)
	require.Equal(t, Rate{K: 0, N: 12}, b.Total)

	p := func(ak, bk int) float64 { return FisherExact(ak, 12-ak, bk, 12-bk) }
	// Corrected for the 5 situations (Holm): window's p times 5, bonly's
	// times 4, the others 1.
	const window = "gone in B (p=0.00034); holds among 5 situations (p=0.0017 corrected)"
	assert.Equal(t, []SituationComparison{
		{Situation: "never", Target: true, A: Rate{0, 12}, B: Rate{0, 12}, P: 1, PCorrected: 1, Verdict: "reached by neither"},
		{Situation: "window", A: Rate{9, 12}, B: Rate{0, 12}, P: p(9, 0), PCorrected: 5 * p(9, 0), Verdict: window},
		{Situation: "bonly", A: Rate{0, 12}, B: Rate{3, 12}, P: p(0, 3), PCorrected: 4 * p(0, 3), Verdict: "new in B, not significant (p=0.22)"},
		{Situation: "alpha", A: Rate{2, 12}, B: Rate{0, 12}, P: p(2, 0), PCorrected: 1, Verdict: "gone in B, not significant (p=0.48)"},
		{Situation: "both", A: Rate{2, 12}, B: Rate{2, 12}, P: 1, PCorrected: 1, Verdict: "no significant change (p=1)"},
	}, rep.SituationComparisons, "the target first; then by the larger count (bonly's 3 before the 2 and 2 of both), then by name")
	for _, c := range rep.SituationComparisons[1:] {
		_, verdict := CompareRates(c.A, c.B)
		assert.True(t, strings.HasPrefix(c.Verdict, verdict), "%s: %q begins with CompareRates' own verdict %q", c.Situation, c.Verdict, verdict)
	}
	assert.Less(t, rep.SituationComparisons[1].P, Alpha, "window: a significant difference")
	assert.GreaterOrEqual(t, rep.SituationComparisons[4].P, Alpha, "both: none")

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	assert.Contains(t, table.String(), ""+
		"A vs B, by failure mode (Fisher exact, α = 0.05):\n"+
		"  all failures  A 0/12  B 0/12  no failures in either\n"+
		"\n"+
		"A vs B, by situation reached (Fisher exact, α = 0.05):\n"+
		"  * never   A 0/12  B 0/12  reached by neither\n"+
		"    window  A 9/12  B 0/12  "+window+"\n"+
		"    bonly   A 0/12  B 3/12  new in B, not significant (p=0.22)\n"+
		"    alpha   A 2/12  B 0/12  gone in B, not significant (p=0.48)\n"+
		"    both    A 2/12  B 2/12  no significant change (p=1)\n"+
		"\n"+
		"stress: 4 copies at once;", "after the failure modes, before the conditions")

	raw, err := json.Marshal(rep.Summary())
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"situation_comparisons":[{"situation":"never","target":true,"a":[0,12],"b":[0,12],"p":1,"p_corrected":1,"verdict":"reached by neither"},`)
	var s Summary
	require.NoError(t, json.Unmarshal(raw, &s))
	assert.Equal(t, []SituationComparisonSummary{
		{Situation: "never", Target: true, A: [2]int{0, 12}, B: [2]int{0, 12}, P: 1, PCorrected: 1, Verdict: "reached by neither"},
		{Situation: "window", A: [2]int{9, 12}, B: [2]int{0, 12}, P: p(9, 0), PCorrected: 5 * p(9, 0), Verdict: window},
		{Situation: "bonly", A: [2]int{0, 12}, B: [2]int{3, 12}, P: p(0, 3), PCorrected: 4 * p(0, 3), Verdict: "new in B, not significant (p=0.22)"},
		{Situation: "alpha", A: [2]int{2, 12}, B: [2]int{0, 12}, P: p(2, 0), PCorrected: 1, Verdict: "gone in B, not significant (p=0.48)"},
		{Situation: "both", A: [2]int{2, 12}, B: [2]int{2, 12}, P: 1, PCorrected: 1, Verdict: "no significant change (p=1)"},
	}, s.SituationComparisons)
}

// TestCompareSituationsTakesTargetsFromEitherVariant: a situation counts
// as a target when either variant marks it, keeps A's order of targets,
// and one neither reached nor targeted is left out.
func TestCompareSituationsTakesTargetsFromEitherVariant(t *testing.T) {
	a := VariantReport{Total: Rate{K: 0, N: 10}, Reached: []Situation{
		{Name: "t2", Target: true, First: -1}, {Name: "t1", Target: true, Copies: 1, First: 3}, {Name: "x", Copies: 1, First: 0}, {Name: "idle", First: -1},
	}}
	b := VariantReport{Total: Rate{K: 0, N: 20}, Reached: []Situation{
		{Name: "t1", Copies: 2, First: 0}, {Name: "y", Copies: 4, First: 0}, {Name: "t3", Target: true, First: -1},
	}}
	var names []string
	for _, c := range CompareSituations(a, b) {
		names = append(names, fmt.Sprintf("%s %v %d/%d %d/%d", c.Situation, c.Target, c.A.K, c.A.N, c.B.K, c.B.N))
	}
	assert.Equal(t, []string{"t2 true 0/10 0/20", "t1 true 1/10 2/20", "t3 true 0/10 0/20", "y false 0/10 4/20", "x false 1/10 0/20"}, names)
	assert.Nil(t, CompareSituations(VariantReport{Total: Rate{N: 3}}, VariantReport{Total: Rate{N: 3}}))
}

// TestCompareSituationsSaysMoreOrLessOften: a situation reached more
// often in B is not "worse in B", as a failure would be.
func TestCompareSituationsSaysMoreOrLessOften(t *testing.T) {
	few := VariantReport{Total: Rate{N: 40}, Reached: []Situation{{Name: "window", Copies: 2}}}
	many := VariantReport{Total: Rate{N: 40}, Reached: []Situation{{Name: "window", Copies: 20}}}
	p, _ := CompareRates(Rate{K: 2, N: 40}, Rate{K: 20, N: 40})
	require.Less(t, p, Alpha)
	up := CompareSituations(few, many)
	require.Len(t, up, 1)
	assert.Equal(t, "more often in B (p<0.0001)", up[0].Verdict)
	down := CompareSituations(many, few)
	require.Len(t, down, 1)
	assert.Equal(t, "less often in B (p<0.0001)", down[0].Verdict)
}
