// Command benchab measures what a change buys: it builds the benchmarks of
// some packages twice, from a base commit and from the working tree, and
// runs the two builds in alternation, then hands both outputs to benchstat.
//
// A shared machine's speed drifts over minutes. Running all of one build's
// counts and then all of the other's puts the drift between them and reads
// as a difference; alternating the builds round by round (base first in odd
// rounds, the working tree first in even ones) spreads the drift over both,
// and benchstat's p-value then says whether what is left is real.
//
// Usage:
//
//	go run ./scripts/benchab -base REV [-bench REGEX] [-count N]
//	    [-benchtime T] [-cpu LIST] [-out DIR] [PACKAGE...]
//
// PACKAGE is a directory of the module (./sim, ./scenario; ./sim when none
// is given). The base tree is extracted with git archive, so uncommitted
// changes are measured on the working-tree side only. Each round runs every
// package's two binaries, one right after the other, once each from that
// package's directory with -test.count 1 and -test.benchmem. Outputs: DIR/base.txt and DIR/head.txt (benchstat's input),
// and on standard output benchstat's tables, then a paired comparison: the
// ratio of head to base within each round, whose median and signed-rank test
// are not moved by a drift that both sides of a round share. GOGC is 400
// unless set, as simrun runs its sweeps. BENCHSTAT names the benchstat
// command ("" skips it).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// benchstatDefault is the benchstat that make bench uses too.
const benchstatDefault = "go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"

// config is one comparison.
type config struct {
	base      string   // the base revision, as given
	bench     string   // -test.bench
	count     int      // rounds
	benchtime string   // -test.benchtime, "" for the default
	cpu       string   // -test.cpu, "" for the default
	out       string   // where the outputs go
	pkgs      []string // package directories, relative to the module root
	benchstat string   // the benchstat command line, "" to skip it
	goCmd     string   // the go command
}

func main() {
	c := config{goCmd: "go", benchstat: benchstatDefault}
	if v, ok := os.LookupEnv("BENCHSTAT"); ok {
		c.benchstat = v
	}
	if v := os.Getenv("GO"); v != "" {
		c.goCmd = v
	}
	flag.StringVar(&c.base, "base", "", "the base commit (any git revision: HEAD, main~3, a hash)")
	flag.StringVar(&c.bench, "bench", ".", "the benchmarks to run (-test.bench)")
	flag.IntVar(&c.count, "count", 6, "rounds; each runs every benchmark once per build")
	flag.StringVar(&c.benchtime, "benchtime", "", "-test.benchtime for every run")
	flag.StringVar(&c.cpu, "cpu", "", "-test.cpu for every run")
	flag.StringVar(&c.out, "out", "out/bench-ab", "directory for base.txt, head.txt and the binaries")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./scripts/benchab -base REV [-bench REGEX] [-count N] [-benchtime T] [-cpu LIST] [-out DIR] [PACKAGE...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	c.pkgs = flag.Args()
	if len(c.pkgs) == 0 {
		c.pkgs = []string{"./sim"}
	}
	if err := run(c, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchab:", err)
		os.Exit(2)
	}
}

// check says what is wrong with c before anything is built.
func (c config) check() error {
	if c.base == "" {
		return errors.New("-base is required: the revision to compare the working tree with (HEAD for uncommitted changes)")
	}
	if c.count < 1 {
		return fmt.Errorf("-count must be ≥ 1, got %d", c.count)
	}
	if _, err := regexp.Compile(c.bench); err != nil {
		return fmt.Errorf("-bench %q is not a regular expression: %v", c.bench, err)
	}
	for _, p := range c.pkgs {
		if filepath.IsAbs(p) || !filepath.IsLocal(filepath.Clean(p)) {
			return fmt.Errorf("package %q must be a directory inside the module, like ./sim", p)
		}
	}
	return nil
}

// side is one of the two builds.
type side struct {
	name string // "base" or "head"
	root string // the module root it is built from
	bin  string // where its test binaries go
	out  *os.File
}

// order is which side runs first in round r (1-based): base in odd rounds.
func order(r int) [2]int {
	if r%2 == 1 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

func run(c config, stdout, stderr io.Writer) error {
	if err := c.check(); err != nil {
		return err
	}
	root, err := gitOutput(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("not inside a git repository: %v", err)
	}
	rev, err := gitOutput(root, "rev-parse", "--verify", "--quiet", c.base+"^{commit}")
	if err != nil {
		return fmt.Errorf("-base %q is not a commit of this repository", c.base)
	}
	out, err := filepath.Abs(c.out)
	if err != nil {
		return err
	}
	baseRoot := filepath.Join(out, "src-base")
	if err := os.RemoveAll(baseRoot); err != nil {
		return err
	}
	if err := os.MkdirAll(baseRoot, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(baseRoot)
	if err := extract(root, rev, baseRoot); err != nil {
		return err
	}
	if dirty, _ := gitOutput(root, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		fmt.Fprintln(stderr, "benchab: head is the working tree, with its uncommitted changes")
	}
	short := rev
	if len(short) > 12 {
		short = short[:12]
	}
	fmt.Fprintf(stderr, "benchab: base %s (%s), head the working tree %s\n", c.base, short, root)

	sides := [2]*side{
		{name: "base", root: baseRoot, bin: filepath.Join(out, "bin-base")},
		{name: "head", root: root, bin: filepath.Join(out, "bin-head")},
	}
	for _, s := range sides {
		if err := os.MkdirAll(s.bin, 0o755); err != nil {
			return err
		}
		for _, p := range c.pkgs {
			if err := build(c.goCmd, s, p); err != nil {
				return err
			}
		}
		f, err := os.Create(filepath.Join(out, s.name+".txt"))
		if err != nil {
			return err
		}
		defer f.Close()
		s.out = f
	}

	res, err := rounds(c, sides, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "benchab: wrote %s and %s\n", sides[0].out.Name(), sides[1].out.Name())
	if c.benchstat != "" {
		fields := strings.Fields(c.benchstat)
		cmd := exec.Command(fields[0], append(fields[1:], "base="+sides[0].out.Name(), "head="+sides[1].out.Name())...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("benchstat: %v", err)
		}
	}
	writePaired(stdout, res.paired(), c.count)
	return nil
}

// rounds runs the two sides' binaries in alternation, c.count rounds, and
// collects what they printed.
func rounds(c config, sides [2]*side, stderr io.Writer) (*results, error) {
	env := os.Environ()
	if os.Getenv("GOGC") == "" {
		env = append(env, "GOGC=400")
	}
	args := []string{"-test.run", "^$", "-test.bench", c.bench, "-test.count", "1", "-test.benchmem"}
	if c.benchtime != "" {
		args = append(args, "-test.benchtime", c.benchtime)
	}
	if c.cpu != "" {
		args = append(args, "-test.cpu", c.cpu)
	}
	ran := [2]int{} // benchmark result lines per side
	res := newResults()
	for r := 1; r <= c.count; r++ {
		fmt.Fprintf(stderr, "benchab: round %d of %d\n", r, c.count)
		for _, p := range c.pkgs { // a package's pair back to back
			for _, i := range order(r) {
				s := sides[i]
				output, err := runBench(s, p, args, env)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s %s: %v", r, s.name, p, err)
				}
				ran[i] += res.add(i, r-1, p, output)
			}
		}
	}
	for i, s := range sides {
		if ran[i] == 0 {
			return nil, fmt.Errorf("no benchmark matched -bench %q in %s's %s", c.bench, s.name, strings.Join(c.pkgs, " "))
		}
	}
	return res, nil
}

// extract writes the tree of rev into dir.
func extract(root, rev, dir string) error {
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var archiveErrs, untarErrs bytes.Buffer // each written by its own copier
	archive.Stderr, untar.Stderr = &archiveErrs, &untarErrs
	if err := untar.Start(); err != nil {
		return fmt.Errorf("tar: %v", err)
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return fmt.Errorf("git archive %s: %v: %s", rev, err, archiveErrs.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar: %v: %s", err, untarErrs.String())
	}
	return nil
}

// binName is the test binary of package directory p.
func binName(p string) string {
	return strings.ReplaceAll(filepath.Clean(p), string(filepath.Separator), "_") + ".test"
}

func build(goCmd string, s *side, p string) error {
	dir := filepath.Join(s.root, p)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("package %s does not exist in %s", p, s.name)
	}
	cmd := exec.Command(goCmd, "test", "-c", "-o", filepath.Join(s.bin, binName(p)), "./"+filepath.ToSlash(filepath.Clean(p)))
	cmd.Dir = s.root
	var errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errs, &errs
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s's %s: %v\n%s", s.name, p, err, errs.String())
	}
	return nil
}

// runBench runs one package's binary of side s once, appends what it printed
// to s's output and returns it.
func runBench(s *side, p string, args, env []string) (string, error) {
	bin := filepath.Join(s.bin, binName(p))
	if _, err := os.Stat(bin); err != nil {
		return "", nil // a package without tests builds no binary
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(s.root, p)
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if _, werr := s.out.Write(buf.Bytes()); werr != nil {
		return "", werr
	}
	if err != nil {
		return "", fmt.Errorf("%v\n%s", err, lastLines(buf.String(), 20))
	}
	return buf.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var errs bytes.Buffer
	cmd.Stderr = &errs
	b, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(errs.String()); msg != "" {
			return "", errors.New(msg)
		}
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
