package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOrderAlternates(t *testing.T) {
	assert.Equal(t, [2]int{0, 1}, order(1), "base runs first in odd rounds")
	assert.Equal(t, [2]int{1, 0}, order(2), "head runs first in even rounds")
	assert.Equal(t, [2]int{0, 1}, order(3))
}

func TestCheckSaysWhatIsWrong(t *testing.T) {
	ok := config{base: "HEAD", bench: ".", count: 1, pkgs: []string{"./sim"}}
	require.NoError(t, ok.check())
	for _, c := range []struct {
		mut  func(*config)
		want string
	}{
		{func(c *config) { c.base = "" }, "-base is required"},
		{func(c *config) { c.count = 0 }, "-count must be ≥ 1, got 0"},
		{func(c *config) { c.bench = "(" }, `-bench "(" is not a regular expression`},
		{func(c *config) { c.pkgs = []string{"../elsewhere"} }, `package "../elsewhere" must be a directory inside the module`},
		{func(c *config) { c.pkgs = []string{"/abs"} }, `package "/abs" must be a directory inside the module`},
	} {
		bad := ok
		c.mut(&bad)
		err := bad.check()
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
}

// repo makes a git repository holding a module whose benchmark reports the
// version of the code it was built from: 1 committed, 2 in the working tree.
func repo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, string(b))
	}
	version := func(v string) string {
		return "package p\n\nimport \"testing\"\n\nfunc BenchmarkVersion(b *testing.B) {\n\tfor range b.N {\n\t}\n\tb.ReportMetric(" + v + ", \"version\")\n}\n"
	}
	write("go.mod", "module example.com/ab\n\ngo 1.22\n")
	write("p/p_test.go", version("1"))
	write("q/q.go", "package q\n") // a package without tests
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "version 1")
	write("p/p_test.go", version("2"))
	return dir
}

// versions reads the version metric of every result line of an output.
func versions(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var vs []string
	for _, m := range regexp.MustCompile(`(?m)^BenchmarkVersion\S*\s+\d+.*\s(\S+) version`).FindAllStringSubmatch(string(b), -1) {
		vs = append(vs, m[1])
	}
	return vs
}

func TestRunBuildsBaseFromTheCommitAndHeadFromTheWorkingTree(t *testing.T) {
	dir := repo(t)
	t.Chdir(dir)
	out := filepath.Join(t.TempDir(), "ab")
	var stdout, stderr strings.Builder
	err := run(config{base: "HEAD", bench: "Version", count: 3, benchtime: "1x", out: out,
		pkgs: []string{"./p", "./q"}, goCmd: "go"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	assert.Regexp(t, `\./p\s+Version\S*\s+version\s+2\.000\s+0 of 3\s+0\.250`, stdout.String(), "the paired table: head ÷ base in every round")
	assert.Equal(t, []string{"1.000", "1.000", "1.000"}, versions(t, filepath.Join(out, "base.txt")), "one result a round, built from the commit")
	assert.Equal(t, []string{"2.000", "2.000", "2.000"}, versions(t, filepath.Join(out, "head.txt")), "one result a round, built from the working tree")
	assert.Contains(t, stderr.String(), "uncommitted changes")
	assert.Contains(t, stderr.String(), "round 3 of 3")
	assert.NoDirExists(t, filepath.Join(out, "src-base"), "the extracted base tree is removed")
}

func TestRunSaysWhatIsWrong(t *testing.T) {
	dir := repo(t)
	t.Chdir(dir)
	base := config{base: "HEAD", bench: "Version", count: 1, benchtime: "1x", pkgs: []string{"./p"}, goCmd: "go"}
	for _, c := range []struct {
		mut  func(*config)
		want string
	}{
		{func(c *config) { c.base = "no-such-rev" }, `-base "no-such-rev" is not a commit of this repository`},
		{func(c *config) { c.bench = "Nothing" }, `no benchmark matched -bench "Nothing" in base's ./p`},
		{func(c *config) { c.pkgs = []string{"./r"} }, "package ./r does not exist in base"},
	} {
		bad := base
		bad.out = filepath.Join(t.TempDir(), "ab")
		c.mut(&bad)
		err := run(bad, io.Discard, io.Discard)
		if assert.Error(t, err) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
}

func TestSignedRankP(t *testing.T) {
	// Every one of n differences on the same side: only the two all-same
	// sign assignments are as extreme, so p = 2/2^n.
	assert.InDelta(t, 2.0/32, signedRankP([]float64{0.1, 0.2, 0.3, 0.4, 0.5}), 1e-12)
	assert.InDelta(t, 2.0/1024, signedRankP([]float64{-1, -2, -3, -4, -5, -6, -7, -8, -9, -10}), 1e-12)
	// n = 10, the smallest rank alone on the other side: W+ = 1, and the
	// assignments with W+ ≤ 1 or ≥ 54 are 4 of 1024.
	assert.InDelta(t, 4.0/1024, signedRankP([]float64{-0.01, 2, 3, 4, 5, 6, 7, 8, 9, 10}), 1e-12)
	// Balanced signs are no evidence at all; zeros are dropped.
	assert.InDelta(t, 1.0, signedRankP([]float64{1, -1, 2, -2}), 1e-12)
	assert.Equal(t, 1.0, signedRankP([]float64{0, 0}))
	// Ties share their mean rank: |d| all equal, 3 positive of 4: W+ = 7.5
	// (doubled 15 of 20); as or more extreme: 0, 1, 3 or 4 positives, 10 of 16.
	assert.InDelta(t, 10.0/16, signedRankP([]float64{1, 1, 1, -1}), 1e-12)
}

func TestPairedCancelsADriftBothSidesShare(t *testing.T) {
	rs := newResults()
	// The machine's speed drifts by 2× over the rounds; head is 5% faster
	// than base within every round.
	for r, speed := range []float64{1, 1.3, 0.7, 1.9, 1.1, 0.8, 1.5, 1.2} {
		base := 100 * speed
		rs.add(0, r, "./sim", fmt.Sprintf("BenchmarkX-2   \t 1000\t %.2f ns/op\t 16 B/op\t 1 allocs/op\t %.1f runs/s\n", base, 1e9/base))
		rs.add(1, r, "./sim", fmt.Sprintf("BenchmarkX-2   \t 1000\t %.2f ns/op\t 16 B/op\t 1 allocs/op\t %.1f runs/s\nPASS\n", 0.95*base, 1e9/(0.95*base)))
	}
	rows := rs.paired()
	require.Len(t, rows, 2, "B/op and allocs/op are equal in every round and left out")
	assert.Equal(t, metricKey{"./sim", "X-2", "ns/op"}, rows[0].key)
	assert.InDelta(t, 0.95, rows[0].ratio, 1e-3)
	assert.Equal(t, 8, rows[0].lower)
	assert.InDelta(t, 2.0/256, rows[0].p, 1e-12)
	assert.Equal(t, "runs/s", rows[1].key.unit)
	assert.InDelta(t, 1/0.95, rows[1].ratio, 1e-3)
	assert.Equal(t, 0, rows[1].lower)
	var out strings.Builder
	writePaired(&out, rows, 8)
	assert.Contains(t, out.String(), "0.950")
	assert.Contains(t, out.String(), "8 of 8")
}

func TestPairedSkipsRoundsWhereASideHasNoValue(t *testing.T) {
	rs := newResults()
	rs.add(0, 0, "p", "BenchmarkY 10 5 ns/op\n")
	rs.add(1, 0, "p", "BenchmarkY 10 4 ns/op\n")
	rs.add(1, 1, "p", "BenchmarkY 10 4 ns/op\n") // base printed nothing in round 1
	rows := rs.paired()
	require.Len(t, rows, 1)
	assert.Equal(t, 1, rows[0].pairs)
	assert.InDelta(t, 0.8, rows[0].ratio, 1e-12)
}

// TestPairedKeepsAMetricThatLeavesZero: an allocation where there was
// none has no ratio to take, but it is a difference in every round, not
// an equality.
func TestPairedKeepsAMetricThatLeavesZero(t *testing.T) {
	rs := newResults()
	for r := range 3 {
		rs.add(0, r, "./sim", "BenchmarkX-2 1000 100 ns/op 0 B/op 0 allocs/op\n")
		rs.add(1, r, "./sim", "BenchmarkX-2 1000 100 ns/op 16 B/op 1 allocs/op\n")
	}
	rows := rs.paired()
	require.Len(t, rows, 2, "B/op and allocs/op went from 0 in every round")
	assert.Equal(t, "B/op", rows[0].key.unit)
	assert.Equal(t, 3, rows[0].pairs)
	assert.Equal(t, 0, rows[0].lower)
	var out strings.Builder
	writePaired(&out, rows, 3)
	assert.NotContains(t, out.String(), "every metric was equal")
	assert.Regexp(t, `\./sim\s+X-2\s+allocs/op\s+—\s+0 of 3\s+—`, out.String())
}
