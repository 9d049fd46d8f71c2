package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitCommand(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"go test ./engine", []string{"go", "test", "./engine"}},
		{"  a\t b \n c  ", []string{"a", "b", "c"}},
		{`env LLMDST_LEGACY=0 bin/engine.test -test.run 'TestAbort.*Runtime$'`, []string{"env", "LLMDST_LEGACY=0", "bin/engine.test", "-test.run", "TestAbort.*Runtime$"}},
		{`'it''s'`, []string{"its"}},
		{`'it'\''s'`, []string{"it's"}},
		{`"a b" c`, []string{"a b", "c"}},
		{`"say \"hi\" \\ \$HOME \x"`, []string{`say "hi" \ $HOME \x`}},
		{`a\ b c\\d`, []string{"a b", `c\d`}},
		{`x"y"'z'`, []string{"xyz"}},
		{`'' ""`, []string{"", ""}},
		{"a\\\nb", []string{"ab"}},
		{`$HOME *.go ~`, []string{"$HOME", "*.go", "~"}},
		{`'µs → ok'`, []string{"µs → ok"}},
	} {
		got, err := splitCommand(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{`'open`, `"open`, `a "b`, `trailing\`, `'a' "b\"`} {
		_, err := splitCommand(bad)
		assert.Error(t, err, bad)
	}
}

func TestSplitCommandRoundTripsShellQuote(t *testing.T) {
	argv := []string{"a b", "it's", `"q"`, `back\slash`, "", "$x", "µ"}
	var quoted []string
	for _, a := range argv {
		quoted = append(quoted, shellQuote(a))
	}
	got, err := splitCommand(strings.Join(quoted, " "))
	require.NoError(t, err)
	assert.Equal(t, argv, got)
}

func TestStressUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-p", "2"}, "no command after --"},
		{[]string{"-p", "2", "--"}, "no command after --"},
		{[]string{"-p", "0", "--", "true"}, "-p must be ≥ 1"},
		{[]string{"-rounds", "0", "--", "true"}, "-rounds must be ≥ 1"},
		{[]string{"-load", "-1", "--", "true"}, "-load must be ≥ 0"},
		{[]string{"-timeout", "-1s", "--", "true"}, "-timeout must be ≥ 0"},
		{[]string{"-for", "-1s", "--", "true"}, "-for must be ≥ 0"},
		{[]string{"-env", "NOEQUALS", "--", "true"}, `"NOEQUALS" is not KEY=VALUE`},
		{[]string{"-env", "=x", "--", "true"}, "is not KEY=VALUE"},
		{[]string{"-env", "LLMDST_STRESS_ROUND=1", "--", "true"}, "LLMDST_STRESS_ROUND"},
		{[]string{"-private-tmp", "-env", "TMPDIR=/tmp", "--", "true"}, "TMPDIR"},
		{[]string{"-vs", `true 'unterminated`, "--", "true"}, "-vs: "},
		{[]string{"-vs", "   ", "--", "true"}, "holds no command"},
		{[]string{"-p", "1", "--", "./no/such/command"}, "cannot start ./no/such/command"},
		{[]string{"-p", "1", "-vs", "no-such-command-llmdst", "--", "true"}, "cannot start no-such-command-llmdst"},
		{[]string{"-nosuchflag", "--", "true"}, "flag provided but not defined"},
	} {
		code, out, errOut := simrun(t, append([]string{"stress"}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		assert.Contains(t, errOut, tc.msg, tc.args)
		assert.Empty(t, out, tc.args)
	}
}

func TestStressExitCodes(t *testing.T) {
	code, out, _ := simrun(t, "stress", "-p", "3", "-rounds", "2", "--", "true")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "A: true")
	assert.Contains(t, out, "0/6 (0% [≤ ")
	assert.Contains(t, out, "no failures")
	assert.Contains(t, out, "stress: 3 copies at once; 2 round(s) per variant")

	code, out, _ = simrun(t, "stress", "-p", "2", "-rounds", "1", "--", "sh", "-c", "echo 'error: it broke after 12ms'; exit 3")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "2/2")
	assert.Contains(t, out, "1 failure mode(s)")
	assert.Contains(t, out, "reproduce: LLMDST_STRESS_VARIANT=A LLMDST_STRESS_ROUND=1 LLMDST_STRESS_COPY=1 sh -c")
}

func TestStressForRunsRoundsUntilTheBudgetIsSpent(t *testing.T) {
	// Without -rounds the budget decides: rounds of 0.1s in a 0.35s budget
	// end after the fourth, the first to start past it.
	code, out, errOut := simrun(t, "stress", "-p", "2", "-for", "350ms", "-json", "--", "sleep", "0.1")
	require.Equal(t, 0, code, errOut)
	var j stressJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.True(t, j.BudgetSpent)
	assert.Equal(t, 0.35, j.BudgetSeconds)
	assert.GreaterOrEqual(t, j.Rounds, 1)
	assert.LessOrEqual(t, j.Rounds, 4, "no round starts after the budget")
	assert.Len(t, j.Variants[0].RoundFailures, j.Rounds)
	assert.Contains(t, j.Conditions, "when the 350ms budget ran out")

	// -rounds still bounds the rounds.
	code, out, _ = simrun(t, "stress", "-p", "2", "-for", "1h", "-rounds", "2", "--", "true")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "0/4 (0% [")
	assert.Contains(t, out, "2 round(s) per variant, within a 1h0m0s budget")
}

// flakyBin builds the triage package's fixture: a program that fails in
// two ways at known rates, from the copy it is told it is.
func flakyBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flaky")
	out, err := exec.Command("go", "build", "-o", bin, "../../triage/testdata/flaky").CombinedOutput()
	require.NoError(t, err, "building triage/testdata/flaky: %s", out)
	return bin
}

// TestStressSeparatesFailureModes runs the fixture against its fixed
// build: of 20 copies, i%5 == 0 fail a CHECK (4) and i%8 == 3 lose their
// temporary file (3); -fixed-tok removes the second mode only.
func TestStressSeparatesFailureModes(t *testing.T) {
	bin := flakyBin(t)
	junit := filepath.Join(t.TempDir(), "stress.xml")
	code, out, errOut := simrun(t, "stress", "-p", "10", "-rounds", "2", "-env", "FLAKY_PARALLEL=10",
		"-vs", shellQuote(bin)+" -fixed-tok", "-junit", junit, "--", bin)
	require.Equal(t, 1, code, out+errOut)
	for _, want := range []string{
		"variant", "round 1", "round 2", "total",
		"A: " + bin, "B: " + bin + " -fixed-tok",
		"7/20 (35.0% [", "4/20 (20.0% [",
		"2 failure mode(s)", "1 failure mode(s)",
		"CHECK( Drain(engine, reused) == <n> )", "tokenizer: cannot open <tmp>",
		"A vs B, by failure mode (Fisher exact",
		"all failures",
		"stress: 10 copies at once; 2 round(s) per variant, A and B alternating; load 0 (no extra CPU load); shared TMPDIR",
	} {
		assert.Contains(t, out, want)
	}
	assert.Regexp(t, `tokenizer: cannot open <tmp>\s+A 3/20\s+B 0/20\s+gone in B`, out)

	data, err := os.ReadFile(junit)
	require.NoError(t, err)
	var suites struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	require.NoError(t, xml.Unmarshal(data, &suites))
	assert.Equal(t, 40, suites.Tests)
	assert.Equal(t, 11, suites.Failures)
}

func TestStressJSON(t *testing.T) {
	bin := flakyBin(t)
	code, out, _ := simrun(t, "stress", "-p", "8", "-rounds", "1", "-private-tmp", "-load", "1", "-env", "FLAKY_PARALLEL=8", "-json", "--", bin)
	require.Equal(t, 1, code, out)
	var j stressJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Equal(t, 8, j.Parallel)
	assert.Equal(t, 1, j.Load)
	assert.True(t, j.PrivateTmp)
	require.Len(t, j.Variants, 1)
	v := j.Variants[0]
	assert.Equal(t, 8, v.Runs)
	// i = 0..7: i%5 == 0 → 0, 5; i%8 == 3 → 3.
	assert.Equal(t, 3, v.Failed)
	require.Len(t, v.Modes, 2)
	assert.Equal(t, 2, v.Modes[0].Count)
	assert.Contains(t, v.Modes[0].Signature, "CHECK( Drain")
	assert.Equal(t, 1, v.Modes[0].First.Copy)
	assert.Contains(t, v.Modes[0].Reproduce, "LLMDST_STRESS_COPY=1")
	assert.Contains(t, v.Modes[1].Signature, "tokenizer: cannot open <tmp>")
	assert.Contains(t, j.Conditions, "private TMPDIR per copy")
	assert.Empty(t, j.Stopped)
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	for _, k := range []string{"parallel", "rounds", "load", "private_tmp", "variants", "conditions"} {
		assert.Contains(t, raw, k)
	}
}

// TestStressInterruptKillsCopies sends this process SIGINT while the
// copies sleep: they are killed, and the run ends at once with exit 2.
func TestStressInterruptKillsCopies(t *testing.T) {
	dir := t.TempDir()
	done := make(chan int)
	var out, errOut string
	start := time.Now()
	go func() {
		var code int
		code, out, errOut = simrun(t, "stress", "-p", "2", "-rounds", "3", "--", "sh", "-c", `touch "$0/$LLMDST_STRESS_COPY"; exec sleep 60`, dir)
		done <- code
	}()
	// The copies start after the handler is in place.
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) == 2
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	code := <-done
	assert.Equal(t, 2, code, out)
	assert.Less(t, time.Since(start), 30*time.Second)
	assert.Contains(t, errOut, "interrupted in round 1 of variant A")
	assert.Contains(t, errOut, "before any failure")
}
