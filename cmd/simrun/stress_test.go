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

	"github.com/llmdst/llmdst/internal/shell"
	"github.com/llmdst/llmdst/triage"
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
		quoted = append(quoted, shell.Quote(a))
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
		{[]string{"-vs", "", "--", "true"}, `-vs "" holds no command`},
		{[]string{"-p", "1", "--", "./no/such/command"}, "cannot start ./no/such/command"},
		{[]string{"-p", "1", "-vs", "no-such-command-llmdst", "--", "true"}, "cannot start no-such-command-llmdst"},
		{[]string{"-nosuchflag", "--", "true"}, "flag provided but not defined"},
		{[]string{"-min-reached", "1", "--", "true"}, "-min-reached 1 needs target situations: name them with -targets LIST"},
		{[]string{"-min-reached", "-1", "-targets", "a", "--", "true"}, "want a whole number ≥ 0"},
		{[]string{"-targets", "a,,b", "--", "true"}, `-targets "a,,b" holds an empty name`},
		{[]string{"-targets", " ", "--", "true"}, `-targets " " holds an empty name`},
		{[]string{"-targets", "a, b ,a", "--", "true"}, `-targets names "a" twice: name each target once`},
		{[]string{"-env", "LLMDST_REACHED=/tmp/x", "--", "true"}, "simrun stress: Env sets LLMDST_REACHED, which the runner sets for every copy; remove it"},
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
	assert.NotContains(t, out, "situations", "no targets and nothing reached: nothing said of situations")
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
		"-vs", shell.Quote(bin)+" -fixed-tok", "-junit", junit, "--", bin)
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

// reachScript is a command whose copy 1 of every round reaches "window"
// (twice, logged once) and whose copies all pass: with -p 4 -rounds 2 it
// reaches it in 2 of 8 copies, first at round 1 copy 1.
var reachScript = []string{"sh", "-c", `if [ "$LLMDST_STRESS_COPY" = 1 ]; then echo window >> "$LLMDST_REACHED"; echo window >> "$LLMDST_REACHED"; fi`}

// TestStressCountsTheCopiesThatReachedATarget: -targets lists the
// targets first, reached or not, in the table and the JSON, and says when
// no copy reached one; -min-reached fails the run (exit 1) when one was
// reached in fewer copies, naming the variant and the target.
func TestStressCountsTheCopiesThatReachedATarget(t *testing.T) {
	stress := func(args ...string) (int, string, string) {
		return simrun(t, append(append([]string{"stress", "-p", "4", "-rounds", "2"}, args...), append([]string{"--"}, reachScript...)...)...)
	}
	code, out, errOut := stress("-targets", "never, window")
	require.Equal(t, 0, code, "without -min-reached, a target no copy reached is said, not failed: %s%s", out, errOut)
	assert.Contains(t, out, ""+
		"  no failures: 0/8 = 0% [≤ 37.5%, rule of three]; ")
	assert.Contains(t, out, ""+
		"  situations reached (task.Reach), in copies (* a target):\n"+
		"    * never    0/8    0.0%\n"+
		"    * window   2/8   25.0%  first at round 1 copy 1, 0 of them failed\n"+
		"  no copy reached target never: its passing copies say nothing of what happens there\n")
	assert.Empty(t, errOut)

	code, out, _ = stress("-targets", "never,window", "-json")
	require.Equal(t, 0, code, out)
	var j stressJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	v := j.Variants[0]
	assert.Equal(t, []string{"never", "window"}, v.Targets)
	assert.Equal(t, map[string]int{"never": 0, "window": 2}, v.Reached)
	assert.Equal(t, map[string]triage.CopyRef{"window": {Round: 1, Copy: 1}}, v.ReachedFirst)
	assert.Equal(t, map[string]int{"window": 0}, v.ReachedFailed)

	// Without -targets, what a copy reached is still counted.
	code, out, _ = stress("-json")
	require.Equal(t, 0, code, out)
	j = stressJSON{}
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Nil(t, j.Variants[0].Targets)
	assert.Equal(t, map[string]int{"window": 2}, j.Variants[0].Reached)

	code, out, errOut = stress("-targets", "never,window", "-min-reached", "1")
	assert.Equal(t, 1, code, out)
	assert.Equal(t, "simrun stress, A: target never was reached in 0 of 8 copies, fewer than -min-reached 1\n", errOut)

	code, out, errOut = stress("-targets", "window", "-min-reached", "2")
	assert.Equal(t, 0, code, out+errOut)
	assert.Empty(t, errOut)

	code, _, errOut = stress("-targets", "window", "-min-reached", "3")
	assert.Equal(t, 1, code)
	assert.Equal(t, "simrun stress, A: target window was reached in 2 of 8 copies, fewer than -min-reached 3\n", errOut)
}

// TestStressMinReachedHoldsEachVariantToIt: a B that passes because it no
// longer reaches the target fails -min-reached, named as B, in the exit
// status and in the JUnit report, though no copy failed.
func TestStressMinReachedHoldsEachVariantToIt(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "stress.xml")
	args := append([]string{"stress", "-p", "4", "-rounds", "2", "-vs", "true", "-targets", "window", "-min-reached", "1", "-junit", junit, "--"}, reachScript...)
	code, out, errOut := simrun(t, args...)
	require.Equal(t, 1, code, out)
	assert.Equal(t, "simrun stress, B: target window was reached in 0 of 8 copies, fewer than -min-reached 1\n", errOut)
	assert.Contains(t, out, "    * window   2/8   25.0%  first at round 1 copy 1, 0 of them failed\n")
	assert.Contains(t, out, "    * window   0/8   0.0%\n  no copy reached target window: its passing copies say nothing of what happens there\n")

	data, err := os.ReadFile(junit)
	require.NoError(t, err)
	var suites struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Cases []struct {
				Name      string `xml:"name,attr"`
				Classname string `xml:"classname,attr"`
				Failure   *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(data, &suites))
	assert.Equal(t, 17, suites.Tests, "16 copies and one short target")
	assert.Equal(t, 1, suites.Failures)
	var failed []string
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			if c.Failure != nil {
				failed = append(failed, c.Classname+" | "+c.Name+" | "+c.Failure.Message)
			}
		}
	}
	assert.Equal(t, []string{"B: true | B: target window | target window was reached in 0 of 8 copies, fewer than -min-reached 1"}, failed)
}

// TestStressCountsWhatAGoProgramReached runs the triage fixture, which
// calls task.Reach on the real runtime: the copies with i%8 == 3 (2 of
// 16) reach the tokenizer race's window and fail there.
func TestStressCountsWhatAGoProgramReached(t *testing.T) {
	bin := flakyBin(t)
	code, out, _ := simrun(t, "stress", "-p", "8", "-rounds", "2", "-env", "FLAKY_PARALLEL=8", "-env", "FLAKY_REACH=1",
		"-targets", "tok-window", "-min-reached", "2", "-json", "--", bin)
	require.Equal(t, 1, code, out)
	var j stressJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	v := j.Variants[0]
	assert.Equal(t, map[string]int{"tok-window": 2}, v.Reached)
	assert.Equal(t, map[string]triage.CopyRef{"tok-window": {Round: 1, Copy: 4}}, v.ReachedFirst)
	assert.Equal(t, map[string]int{"tok-window": 2}, v.ReachedFailed)
}

// TestStressComparesTheSituationsOfAAndB: with -vs, the copies of A and
// B that reached each situation are compared after the failure modes, a
// target marked, in the table and in the JSON.
func TestStressComparesTheSituationsOfAAndB(t *testing.T) {
	args := append([]string{"stress", "-p", "4", "-rounds", "2", "-vs", "true", "-targets", "window", "--"}, reachScript...)
	code, out, errOut := simrun(t, args...)
	require.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, ""+
		"  all failures  A 0/8  B 0/8  no failures in either\n"+
		"\n"+
		"A vs B, by situation reached (Fisher exact, α = 0.05):\n"+
		"  * window  A 2/8  B 0/8  gone in B, not significant (p=0.47)\n"+
		"\n"+
		"stress: 4 copies at once;")

	code, out, errOut = simrun(t, append([]string{"stress", "-json"}, args[1:]...)...)
	require.Equal(t, 0, code, out+errOut)
	var j stressJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Equal(t, []triage.SituationComparisonSummary{{
		Situation: "window", Target: true, A: [2]int{2, 8}, B: [2]int{0, 8},
		P: triage.FisherExact(2, 6, 0, 8), PCorrected: triage.FisherExact(2, 6, 0, 8), Verdict: "gone in B, not significant (p=0.47)",
	}}, j.SituationComparisons)
}
