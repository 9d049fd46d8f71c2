package triage

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/golden"
)

func TestNormalizeMasks(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"tokenizer: cannot open /tmp/x_tok_0.json", "tokenizer: cannot open <tmp>"},
		{"open /private/var/folders/ab/T/go-build1/x: denied", "open <tmp>: denied"},
		{"wrote $TMPDIR/run-3/out.json.", "wrote <tmp>."},
		{"rm -rf ${TMPDIR}/cache-7 failed", "rm -rf <tmp> failed"},
		{"at 0x1f3a and +0xc0001a2b30", "at <hex> and +<hex>"},
		{"commit 848d4a87e0b1 of main", "commit <hex> of main"},
		{"took 1.23s, then 15ms, 200µs, 3m2s and 1h0m0s", "took <dur>, then <dur>, <dur>, <dur> and <dur>"},
		{"got 4, want 3; index [17]; ratio 0.25; got -3", "got <n>, want <n>; index [<n>]; ratio <n>; got <n>"},
		{"int64 sha256 utf8 stay; tok_0 and x-1 do not", "int64 sha256 utf8 stay; tok_<n> and x-<n> do not"},
		{"2024-01-02T15:04:05.123Z level=error at 10:11:12", "<time> level=error at <time>"},
		{"\x1b[31mFAIL\x1b[0m  \t spaces\n collapse  ", "FAIL spaces collapse"},
		{"/home/ci/build-a/tests/engine_test.cpp:131: FAILED:", ".../engine_test.cpp:<n>: FAILED:"},
		{"words in a-f like deadbeef stay, 12345678 is a number", "words in a-f like deadbeef stay, <n> is a number"},
		{"id 123e4567-e89b-12d3-a456-426614174000 done", "id <hex> done"},
		{"see http://example.com/a/b and ./rel/path/7", "see http://example.com/a/b and ./rel/path/<n>"},
		{"timed out after 10s", "timed out after <dur>"},
		{"5min is not a duration, 10sec neither", "<n>min is not a duration, <n>sec neither"},
		{"CHECK( Drain(engine, reused) == 3 ) with expansion: 4 == 3", "CHECK( Drain(engine, reused) == <n> ) with expansion: <n> == <n>"},
		{"error in /tmpfoo/x is not under a temporary directory", "error in .../x is not under a temporary directory"},
		{"goroutine 7 [running]: created by main.main in goroutine 1 +0x4", "goroutine <n> [running]: created by main.main in goroutine <n> +<hex>"},
	} {
		assert.Equal(t, tc.want, Normalize(tc.in), "Normalize(%q)", tc.in)
	}
}

func TestNormalizeMasksThisProcessTempDir(t *testing.T) {
	dir := t.TempDir() // under os.TempDir(), wherever TMPDIR points
	assert.Equal(t, "cannot open <tmp>", Normalize("cannot open "+filepath.Join(dir, "a_tok_0.json")))
}

func TestFoundingBugsGetOneSignatureEach(t *testing.T) {
	check := []string{
		"engine_test.cpp:131: CHECK( Drain(engine, reused) == 3 ) with expansion: 4 == 3",
		"engine_test.cpp:131: CHECK( Drain(engine, reused) == 3 ) with expansion: 5 == 3",
		"engine_test.cpp:131: CHECK( Drain(engine, reused) == 3 ) with expansion: 7 == 3",
	}
	tok := []string{
		"tokenizer: cannot open /tmp/engine_test_4412_tok_0.json",
		"tokenizer: cannot open /tmp/engine_test_981_tok_0.json",
		"tokenizer: cannot open /tmp/llmdst-stress-77/A-r2-c7/engine_test_3_tok_0.json",
	}
	sig := func(line string) string {
		return Signature([]byte("[engine] started in 1.2ms at 0xc00001a000\n"+line+"\ntest cases: 1 | 1 failed\n"), 1)
	}
	for _, l := range check[1:] {
		assert.Equal(t, sig(check[0]), sig(l))
	}
	for _, l := range tok[1:] {
		assert.Equal(t, sig(tok[0]), sig(l))
	}
	assert.NotEqual(t, sig(check[0]), sig(tok[0]))
	assert.Equal(t, "engine_test.cpp:<n>: CHECK( Drain(engine, reused) == <n> ) with expansion: <n> == <n>", sig(check[0]))
	assert.Equal(t, "tokenizer: cannot open <tmp>", sig(tok[0]))
}

// outputs reads the captured outputs in testdata/outputs, by file name.
func outputs(t *testing.T) ([]string, map[string][]byte) {
	t.Helper()
	files, err := filepath.Glob("testdata/outputs/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	byName := map[string][]byte{}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		names = append(names, filepath.Base(f))
		byName[filepath.Base(f)] = b
	}
	return names, byName
}

// TestSignaturesGolden pins the signature of every captured output in
// testdata/signatures.golden; run go test -rewrite after a deliberate
// change and review the diff.
func TestSignaturesGolden(t *testing.T) {
	names, out := outputs(t)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n + "\n\t" + Signature(out[n], 1) + "\n")
	}
	golden.Check(t, "signatures.golden", b.String())
}

func TestSignaturePicksTheDetailOfTestFailures(t *testing.T) {
	_, out := outputs(t)
	for _, tc := range []struct{ name, want string }{
		{"go-testify-equal.txt", "TestDrainTestify: demo_test.go:<n>: Not equal: expected: <n> actual : <n> | drain of reused engine"},
		{"go-testify-noerror.txt", "TestOpenTestify: demo_test.go:<n>: Received unexpected error: open <tmp>: no such file or directory"},
		{"go-plain-errorf.txt", "TestPlain: demo_test.go:<n>: Drain(engine, reused) = <n>, want <n>"},
		{"go-subtest-fatal.txt", "TestSub/case_<n>: demo_test.go:<n>: connection reset"},
		{"go-verbose-all.txt", "TestDrainTestify: demo_test.go:<n>: Not equal: expected: <n> actual : <n> | drain of reused engine"},
		{"go-panic.txt", "panic: runtime error: index out of range [<n>] with length <n> [recovered, repanicked]"},
		{"go-test-timeout.txt", "panic: test timed out after <dur> running tests: TestHang (<dur>)"},
		{"go-race.txt", "WARNING: DATA RACE | Read at <hex> by goroutine <n>: demo/race.TestRace.func2() | Write at <hex> by goroutine <n>: demo/race.TestRace.func1()"},
		{"catch2-check.txt", ".../engine_test.cpp:<n>: FAILED: CHECK( Drain(engine, reused) == <n> ) with expansion: <n> == <n>"},
		{"cpp-tokenizer.txt", "terminate called after throwing an instance of 'std::runtime_error' what(): tokenizer: cannot open <tmp>"},
		{"rust-panic.txt", "thread 'tests::drain_reused' panicked at src/lib.rs:<n>:<n>: assertion `left == right` failed: drain of reused engine left: <n> right: <n>"},
		{"rust-panic-backtrace.txt", "thread 'tests::drain_reused' panicked at src/lib.rs:<n>:<n>: assertion `left == right` failed: drain of reused engine left: <n> right: <n>"}, // RUST_BACKTRACE=1: the same failure
		{"python-traceback.txt", "ValueError: drained <n> tokens, want <n>"},
		{"pytest-assert.txt", "FAILED test_drain.py::test_reused - assert <n> == <n>"},
	} {
		sig := Signature(out[tc.name], 1)
		assert.Equal(t, tc.want, sig, tc.name)
		assert.NotContains(t, sig, "--- FAIL", tc.name)
	}
}

// vary rewrites an output as another run of the same failure would print
// it: other temporary directories, and other digits wherever a number is
// not part of a word.
func vary(b []byte) []byte {
	s := strings.ReplaceAll(string(b), "/tmp/", "/tmp/go-build2749/other-run/")
	out := []byte(s)
	for i := range out {
		if out[i] >= '0' && out[i] <= '9' {
			r, _ := utf8.DecodeLastRune(out[:i])
			if i > 0 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') || i+1 < len(out) && out[i+1] == 'x' {
				continue // part of a word, or the 0 of 0x
			}
			out[i] = '0' + (out[i]-'0'+3)%10
		}
	}
	return out
}

func TestSignatureIsStableAcrossRuns(t *testing.T) {
	names, out := outputs(t)
	// Outputs of one failure printed another way: they share its signature.
	same := map[string]bool{"go-verbose-all.txt": true, "rust-panic-backtrace.txt": true}
	seen := map[string]string{}
	for _, n := range names {
		sig := Signature(out[n], 1)
		assert.Equal(t, sig, Signature(vary(out[n]), 1), "%s varied", n)
		if other, dup := seen[sig]; dup && !same[n] && !same[other] {
			t.Errorf("%s and %s share the signature %q", other, n, sig)
		}
		seen[sig] = n
	}
}

func TestSignatureSkipsLogsOfPassingTests(t *testing.T) {
	out := `=== RUN   TestRecover
    recover_test.go:12: expected failure: connection refused, retrying
--- PASS: TestRecover (0.01s)
=== RUN   TestDrain
    drain_test.go:30: seed 42
    drain_test.go:31: drained 4 requests, want 3
--- FAIL: TestDrain (0.00s)
FAIL
exit status 1
FAIL	github.com/acme/engine	0.021s
`
	assert.Equal(t, "TestDrain: drain_test.go:<n>: drained <n> requests, want <n>", Signature([]byte(out), 1))
}

func TestSignatureOfBareSummaries(t *testing.T) {
	leaf := "--- FAIL: TestOuter (0.02s)\n    --- FAIL: TestOuter/inner_3 (0.01s)\nFAIL\nFAIL\tgithub.com/acme/engine\t0.1s\nFAIL\n"
	assert.Equal(t, "--- FAIL: TestOuter/inner_<n>", Signature([]byte(leaf), 1))
	assert.Equal(t, "FAIL github.com/acme/engine", Signature([]byte("FAIL\tgithub.com/acme/engine\t0.1s\n"), 1))
	assert.Equal(t, "exit status 1", Signature([]byte("FAIL\nexit status 1\n"), 1))
}

func TestSignatureFallbacks(t *testing.T) {
	assert.Equal(t, "exit status 3", Signature([]byte("hello\nworld 42\n"), 3))
	assert.Equal(t, "exit status 1", Signature(nil, 1))
	assert.Equal(t, "killed by signal SIGSEGV", Failure{ExitCode: -1, Signal: "SIGSEGV"}.Signature())
	assert.Equal(t, "error: boom", Failure{Output: []byte("error: boom\n"), ExitCode: -1, Signal: "SIGABRT"}.Signature(),
		"the output says more than the signal")
	assert.Equal(t, "timed out after <dur>", Failure{Output: []byte("error: retrying\n"), TimedOut: true, Timeout: 2 * time.Second}.Signature(),
		"a timeout says more than what the output said before it")
	assert.Equal(t, "timed out", Failure{TimedOut: true}.Signature())
}

func TestSignatureIsCut(t *testing.T) {
	long := "error: " + strings.Repeat("é", 400)
	sig := Signature([]byte(long), 1)
	assert.LessOrEqual(t, len(sig), SignatureMax)
	assert.True(t, strings.HasSuffix(sig, "…"))
	assert.True(t, utf8.ValidString(sig))
}

func TestSignatureHandlesCarriageReturnsAndColour(t *testing.T) {
	out := "progress 10%\rprogress 100%\r\n\x1b[1;31merror:\x1b[0m disk full\r\n"
	assert.Equal(t, "error: disk full", Signature([]byte(out), 1))
	assert.Regexp(t, regexp.MustCompile(`^[^\x1b]*$`), Signature([]byte(out), 1))
}

// TestTimesOfDayMaskAlikeAtEveryHour: a clock that does not pad the hour
// writes 9:59:59 and then 10:00:00; the same failure either side of ten
// o'clock is one mode.
func TestTimesOfDayMaskAlikeAtEveryHour(t *testing.T) {
	for _, tc := range [][2]string{
		{"9:59:59 error: lost frame", "10:00:00 error: lost frame"},
		{"error at 2024-01-02 9:04:05.123 PM", "error at 2024-01-02 11:04:05.123 PM"},
		{"error after 0:00:01.5 of work", "error after 12:00:01.5 of work"},
	} {
		assert.Equal(t, Normalize(tc[1]), Normalize(tc[0]), "%q and %q", tc[0], tc[1])
		assert.Contains(t, Normalize(tc[0]), TimeMask, tc[0])
	}
}

// TestOneRaceIsOneModeWhicheverAccessCameFirst: the race detector reports
// the later access first and the earlier as "Previous", so the same race
// reads the other way round when the goroutines ran the other way round.
// A flaky race does exactly that; it is still one failure mode.
func TestOneRaceIsOneModeWhicheverAccessCameFirst(t *testing.T) {
	report := func(first, firstFrame, previous, previousFrame string) []byte {
		return []byte("==================\nWARNING: DATA RACE\n" +
			first + " at 0x00c000018248 by goroutine 10:\n  " + firstFrame + "\n      /tmp/x/race_test.go:13 +0x7b\n\n" +
			"Previous " + previous + " at 0x00c000018248 by goroutine 9:\n  " + previousFrame + "\n      /tmp/x/race_test.go:12 +0x8d\n" +
			"==================\n--- FAIL: TestRace (0.00s)\n    testing.go:1712: race detected during execution of test\nFAIL\n")
	}
	readLast := Signature(report("Read", "demo/race.TestRace.func2()", "write", "demo/race.TestRace.func1()"), 1)
	writeLast := Signature(report("Write", "demo/race.TestRace.func1()", "read", "demo/race.TestRace.func2()"), 1)
	assert.Equal(t, readLast, writeLast)
	assert.Contains(t, readLast, "demo/race.TestRace.func1()")
	assert.Contains(t, readLast, "demo/race.TestRace.func2()")

	// Two writers: the goroutine numbers do not decide the order either.
	w := func(a, b string) []byte {
		return []byte("WARNING: DATA RACE\nWrite at 0x00c0000a0010 by goroutine " + a + ":\n  demo.f()\n\n" +
			"Previous write at 0x00c0000a0010 by goroutine " + b + ":\n  demo.g()\n==================\n")
	}
	assert.Equal(t, Signature(w("7", "12"), 1), Signature(w("12", "7"), 1))

	other := Signature(report("Read", "demo/race.TestOther.func2()", "write", "demo/race.TestOther.func1()"), 1)
	assert.NotEqual(t, readLast, other, "another race is another mode")
}
