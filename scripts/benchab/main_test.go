package main

import (
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
	var stderr strings.Builder
	err := run(config{base: "HEAD", bench: "Version", count: 3, benchtime: "1x", out: out,
		pkgs: []string{"./p", "./q"}, goCmd: "go"}, io.Discard, &stderr)
	require.NoError(t, err, stderr.String())
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
