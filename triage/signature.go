package triage

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// SignatureMax is the length in bytes beyond which a signature is cut
// (and ends in "…").
const SignatureMax = 300

// continuationLinesMax bounds the lines appended to an error line that
// announces detail with a trailing colon.
const continuationLinesMax = 4

// Failure is what is known of one failed run of a process.
type Failure struct {
	// Output is the process's combined stdout and stderr, or its tail.
	Output []byte
	// ExitCode is the process's exit status; -1 when a signal ended it.
	ExitCode int
	// Signal names the signal that ended the process ("killed",
	// "segmentation fault"); "" when it exited by itself.
	Signal string
	// TimedOut is set when the process was killed for running over
	// Timeout.
	TimedOut bool
	// Timeout is the limit a timed-out process ran over.
	Timeout time.Duration
}

// Signature is the failure's signature: "timed out after <dur>" when it
// timed out; else the most informative error line of its output, normalised
// (see Normalize and Failure.Signature); else "killed by signal NAME"; else
// "exit status N".
func Signature(output []byte, exitCode int) string {
	return Failure{Output: output, ExitCode: exitCode}.Signature()
}

// Signature names the failure so that two runs failing the same way share
// it and runs failing differently do not. Failures are grouped into modes
// by it.
//
// In the output it looks, in order, for:
//
//  1. a data race report: its header and the first lines of each access;
//  2. in Go test output, the first log line of a failing test that reads
//     like an error (a testify block, "got 4, want 3", "cannot …"), as
//     "TestName: file_test.go:<n>: message" — the detail, not the
//     "--- FAIL" summary above or below it;
//  3. a Go "panic:" or "fatal error:" line;
//  4. a Rust thread's panic with its message, the exception line that
//     ends a Python traceback, or pytest's first "FAILED file::test - …"
//     summary line;
//  5. the first line that reads like an error (error, fail, CHECK(,
//     assert, expected, cannot, timed out, deadlock…), skipping summary
//     lines (FAIL, "FAIL pkg 0.1s", "exit status 1", "--- FAIL: TestX")
//     and stack traces; a line ending in a colon takes the lines after it;
//  6. the first log line of a failing Go test;
//  7. the innermost "--- FAIL: TestName", then "FAIL pkg".
func (f Failure) Signature() string {
	if f.TimedOut {
		if f.Timeout > 0 {
			return Normalize("timed out after " + f.Timeout.String())
		}
		return "timed out"
	}
	if sig := outputSignature(f.Output); sig != "" {
		return sig
	}
	if f.Signal != "" {
		return "killed by signal " + f.Signal
	}
	return "exit status " + strconv.Itoa(f.ExitCode)
}

var (
	goRunRE    = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	goResultRE = regexp.MustCompile(`^\s*--- (FAIL|PASS|SKIP): (\S+)`)
	goLogRE    = regexp.MustCompile(`^(\s+)(\S+\.go:\d+): ?(.*)$`)
	goPkgRE    = regexp.MustCompile(`^FAIL\s+(\S+)(?:\s+[\d.]+s)?\s*$`)
	goStackRE  = regexp.MustCompile(`^goroutine \d+ \[`)
	panicRE    = regexp.MustCompile(`^(?:panic: |fatal error: )`)
	raceRE     = regexp.MustCompile(`(?i)\bdata race\b`)
	accessRE   = regexp.MustCompile(`(?i)^\s*(?:previous )?(?:atomic )?(?:read|write)\b.*\bat\b`)
	// summaryRE matches the lines a test run prints around every failure,
	// which name no failure mode.
	summaryRE = regexp.MustCompile(`^(?:FAIL|PASS|ok\s.*|\?\s.*|exit status \d+|=== .*|\s*--- (?:FAIL|PASS|SKIP):.*|FAIL\s.*|[=\-~.]{5,}|coverage: .*)$`)
	errorRE   = regexp.MustCompile(`(?i)(?:\bpanic:|\bfatal\b|\berr\b|\berrors?\b|\w+error\b|\bfail(?:s|ed|ure|ing)?\b|\bcheck\s*\(|\brequire\s*\(|\bassert|\bexpected\b|\bunexpected\b|\bcannot\b|\bcan't\b|\bcould(?:n't| not)\b|\bunable to\b|\btime ?out\b|\btimed out\b|\bdeadlock|\brace detected\b|\bdata race\b|\bexception\b|\babort|\bkilled\b|\bsegmentation\b|\bsig(?:segv|abrt|bus)\b|\btraceback\b|\bno such file\b|\bpermission denied\b|\bmismatch\b|\bnot equal\b)`)
	// gotWantRE catches Go's idiomatic t.Errorf("got %v, want %v").
	gotWantRE = regexp.MustCompile(`(?i)\b(?:got|want|wanted)\b`)
)

// logEntry is a line a Go test logged (t.Log, t.Error…) with the indented
// lines that continue it.
type logEntry struct {
	test string   // the test it belongs to, "" if unknown
	site string   // "file_test.go:123"
	text string   // the message on the first line
	cont []string // continuation lines
}

// outputSignature is the normalised signature found in output, or "".
func outputSignature(output []byte) string {
	lines := splitLines(output)
	if sig := raceSignature(lines); sig != "" {
		return finish(sig)
	}

	failing := map[string]bool{} // looked up only, never ranged
	var failOrder []string
	for _, l := range lines {
		if m := goResultRE.FindStringSubmatch(l); m != nil && m[1] == "FAIL" && !failing[m[2]] {
			failing[m[2]] = true
			failOrder = append(failOrder, m[2])
		}
	}
	entries, inEntry := goLogEntries(lines)
	var candidates []logEntry
	for _, e := range entries {
		if failing[e.test] {
			candidates = append(candidates, e)
		}
	}
	for _, e := range candidates {
		if msg, ok := e.errorMessage(); ok {
			return finish(e.test + ": " + e.site + ": " + msg)
		}
	}

	stack := false
	for i, l := range lines {
		if goStackRE.MatchString(l) {
			stack = true
		}
		if l == "" {
			stack = false
		}
		if !stack && panicRE.MatchString(l) {
			return finish(withDetail(l, lines[i+1:]))
		}
	}
	if sig := otherLanguageSignature(lines); sig != "" {
		return finish(sig)
	}
	stack = false
	for i, l := range lines {
		switch {
		case goStackRE.MatchString(l):
			stack = true
		case strings.TrimSpace(l) == "":
			stack = false
		}
		if stack || inEntry[i] || summaryRE.MatchString(l) || !errorRE.MatchString(l) {
			continue
		}
		return finish(withDetail(l, lines[i+1:]))
	}

	if len(candidates) > 0 {
		return finish(candidates[0].test + ": " + candidates[0].site + ": " + candidates[0].message())
	}
	if leaf := leafTest(failOrder); leaf != "" {
		return finish("--- FAIL: " + leaf)
	}
	for _, l := range lines {
		if m := goPkgRE.FindStringSubmatch(l); m != nil {
			return finish("FAIL " + m[1])
		}
	}
	return ""
}

// splitLines splits output into lines without ANSI codes or carriage
// returns.
func splitLines(output []byte) []string {
	s := ansiRE.ReplaceAllString(string(output), "")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		// A carriage return rewrites its line: keep what was written last.
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	return lines
}

// finish normalises a signature and cuts it to SignatureMax.
func finish(sig string) string {
	s := Normalize(sig)
	if len(s) <= SignatureMax {
		return s
	}
	cut := SignatureMax - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// raceSignature is a data race report's header with the first line of
// each access and the frame below it (Go's race detector and
// ThreadSanitizer print the same shape), or "".
//
// A report names the later access first and the earlier one "Previous",
// so the same race reads the other way round when the goroutines ran the
// other way round: the accesses are written without "Previous", in a fixed
// order, so that both orders give one signature.
func raceSignature(lines []string) string {
	for i, l := range lines {
		if !raceRE.MatchString(l) || !strings.Contains(strings.ToUpper(l), "WARNING") {
			continue
		}
		var accesses []string
		for j := i + 1; j < len(lines) && len(accesses) < 2; j++ {
			if summaryRE.MatchString(lines[j]) && strings.Trim(lines[j], "=") == "" {
				break // the "==================" closing the report
			}
			if accessRE.MatchString(lines[j]) {
				access := strings.TrimSpace(lines[j])
				if len(access) > len("previous ") && strings.EqualFold(access[:len("previous ")], "previous ") {
					access = access[len("previous "):]
					access = strings.ToUpper(access[:1]) + access[1:]
				}
				if j+1 < len(lines) {
					access += " " + strings.TrimSpace(lines[j+1])
				}
				accesses = append(accesses, Normalize(access))
			}
		}
		slices.Sort(accesses)
		return strings.Join(append([]string{strings.TrimSpace(l)}, accesses...), " | ")
	}
	return ""
}

// goLogEntries finds the lines Go tests logged, and which test each
// belongs to: the one named by the last "=== RUN/CONT/NAME" line (go test
// -v) or the last "--- FAIL/PASS" header (go test without -v, which prints
// a failed test's log under its header). inEntry marks every line that is
// part of an entry.
func goLogEntries(lines []string) (entries []logEntry, inEntry []bool) {
	inEntry = make([]bool, len(lines))
	cur := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := goRunRE.FindStringSubmatch(l); m != nil {
			cur = m[1]
			continue
		}
		if m := goResultRE.FindStringSubmatch(l); m != nil {
			cur = m[2]
			continue
		}
		m := goLogRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent := len(m[1])
		j := i + 1
		for j < len(lines) && lines[j] != "" && indentOf(lines[j]) > indent {
			j++
		}
		for k := i; k < j; k++ {
			inEntry[k] = true
		}
		entries = append(entries, logEntry{test: cur, site: m[2], text: m[3], cont: lines[i+1 : j]})
		i = j - 1
	}
	return entries, inEntry
}

func indentOf(l string) int {
	return len(l) - len(strings.TrimLeft(l, " \t"))
}

// testifyFields parses testify's block of "\tLabel:\tvalue" lines, where a
// blank label continues the field above. ok is false when the entry is no
// testify block.
func (e logEntry) testifyFields() (errLines []string, messages string, ok bool) {
	field := ""
	for _, c := range e.cont {
		t := strings.TrimLeft(c, " ")
		if !strings.HasPrefix(t, "\t") {
			continue
		}
		label, value, found := strings.Cut(t[1:], "\t")
		if !found {
			continue
		}
		if l := strings.TrimSpace(label); l != "" {
			field = strings.TrimSuffix(l, ":")
		}
		switch field {
		case "Error":
			ok = true
			if v := strings.TrimSpace(value); v != "" {
				errLines = append(errLines, v)
			}
		case "Messages":
			messages = strings.TrimSpace(strings.TrimSpace(messages + " " + value))
		}
	}
	return errLines, messages, ok
}

// message is the entry's text, with its continuation when the text
// announces one.
func (e logEntry) message() string {
	msg, _ := e.messageAndKind()
	return msg
}

// messageAndKind is message, and whether it came from a testify block.
func (e logEntry) messageAndKind() (msg string, testify bool) {
	if errLines, messages, ok := e.testifyFields(); ok {
		msg := strings.Join(errLines, " ")
		if messages != "" {
			msg += " | " + messages
		}
		return msg, true
	}
	t := strings.TrimSpace(e.text)
	if t == "" || strings.HasSuffix(t, ":") {
		return strings.TrimSpace(t + " " + strings.Join(continuation(e.cont), " ")), false
	}
	return t, false
}

// errorMessage is message when the entry reads like an error.
func (e logEntry) errorMessage() (string, bool) {
	msg, testify := e.messageAndKind()
	if testify || errorRE.MatchString(msg) || gotWantRE.MatchString(msg) {
		return msg, true
	}
	return "", false
}

// continuation is up to continuationLinesMax lines that follow an error
// line ending in a colon: until a blank line, a summary line or a stack
// trace.
func continuation(lines []string) []string {
	var out []string
	for _, l := range lines {
		if len(out) == continuationLinesMax || strings.TrimSpace(l) == "" || summaryRE.MatchString(l) || goStackRE.MatchString(l) {
			break
		}
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

var (
	rustPanicRE     = regexp.MustCompile(`^thread '[^']*' panicked at `)
	pyTracebackRE   = regexp.MustCompile(`^Traceback \(most recent call last\):\s*$`)
	pytestFailedRE  = regexp.MustCompile(`^FAILED \S+::\S+`)
	rustBacktraceRE = regexp.MustCompile(`^(?:note: run with .RUST_BACKTRACE=|stack backtrace:)`)
)

// otherLanguageSignature is the failure line of a test runner or language
// other than Go's whose first error-like line is not the one that names the
// failure: Rust's panic of a thread (cargo test's "test x ... FAILED"
// comes first), with its message and the assertion's values; the
// exception that ends a Python traceback, not the frames after its first
// line; pytest's short summary line of the first failing test, not the
// source line it marks with ">". "" when there is none.
func otherLanguageSignature(lines []string) string {
	for i, l := range lines {
		switch {
		case rustPanicRE.MatchString(l):
			var detail []string
			if strings.HasSuffix(strings.TrimSpace(l), ":") {
				for _, c := range continuation(lines[i+1:]) {
					if rustBacktraceRE.MatchString(c) {
						break
					}
					detail = append(detail, c)
				}
			}
			return strings.Join(append([]string{l}, detail...), " ")
		case pyTracebackRE.MatchString(l):
			for _, e := range lines[i+1:] {
				if e != "" && e[0] != ' ' && e[0] != '\t' {
					return e // the exception: "ValueError: …"
				}
			}
		case pytestFailedRE.MatchString(l):
			return l
		}
	}
	return ""
}

// withDetail appends to an error line the lines that complete it: those
// after a line ending in a colon, C++'s "what():" after "terminate called
// after throwing…", and the tests a Go test timeout names after "running
// tests:".
func withDetail(l string, rest []string) string {
	next := ""
	if len(rest) > 0 {
		next = strings.TrimSpace(rest[0])
	}
	switch {
	case strings.HasSuffix(strings.TrimSpace(l), ":"), next == "running tests:":
		return l + " " + strings.Join(continuation(rest), " ")
	case strings.HasPrefix(next, "what():"):
		return l + " " + next
	}
	return l
}

// leafTest is the first failing test without a failing subtest.
func leafTest(failing []string) string {
	for _, name := range failing {
		leaf := true
		for _, other := range failing {
			if strings.HasPrefix(other, name+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			return name
		}
	}
	return ""
}
