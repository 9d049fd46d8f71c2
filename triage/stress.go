package triage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/internal/shell"
	"github.com/llmdst/llmdst/task"
)

// Limits of a stress run.
const (
	// ParallelMax bounds StressConfig.Parallel.
	ParallelMax = 1024
	// RoundsMax bounds StressConfig.Rounds.
	RoundsMax = 1_000_000
	// LoadMax bounds StressConfig.Load.
	LoadMax = 1024
	// DefaultOutputMax is the output kept per copy, in bytes, when
	// StressConfig.OutputMax is 0.
	DefaultOutputMax = 64 << 10
	// killWait is how long a copy's output pipes may stay open after the
	// copy exited or was killed — held by a grandchild that escaped its
	// process group — before they are closed under it.
	killWait = 2 * time.Second
)

// The environment variables every copy gets, so that a fixture can behave
// deterministically and a failure can be reproduced alone.
const (
	EnvRound   = "LLMDST_STRESS_ROUND"   // 1-based round, within the copy's variant
	EnvCopy    = "LLMDST_STRESS_COPY"    // 1-based copy, within its round
	EnvVariant = "LLMDST_STRESS_VARIANT" // "A" or "B"
	// EnvReached names the file to which a copy logs the situations it
	// reaches (task.Reach on the real runtime): one of its own, under a
	// directory Stress makes and removes. Reproduce lines leave it out.
	EnvReached = task.ReachedEnv
)

// tmpVars are the variables PrivateTmp points at a copy's own directory:
// TMPDIR for Go, POSIX tools, Python and libstdc++ (which also reads TMP,
// TEMP and TEMPDIR); TMP and TEMP for Windows and Python. GOTMPDIR is left
// alone: the go command already gives each invocation its own work
// directory under it.
var tmpVars = []string{"TMPDIR", "TMP", "TEMP", "TEMPDIR"}

// StressConfig configures Stress.
type StressConfig struct {
	// Parallel is how many copies run at once, 1 to ParallelMax.
	Parallel int
	// Rounds is how many rounds each variant runs, 1 to RoundsMax. A round
	// runs Parallel copies of one variant and ends when all have ended.
	Rounds int
	// Cmd is the argv of variant A; it must not be empty. A relative path
	// is resolved against Dir.
	Cmd []string
	// VsCmd is the argv of variant B, or nil for one variant. With B, the
	// rounds interleave A1 B1 A2 B2 …, so that both variants meet the same
	// drift in machine load, and each runs Rounds rounds.
	VsCmd []string
	// PrivateTmp gives every copy its own fresh, empty TMPDIR (and TMP,
	// TEMP, TEMPDIR) under one parent directory, each removed when its copy
	// ends and the parent at the end, so that copies which pick fixed
	// temporary names stop overwriting each other. Programs that hard-code
	// /tmp are not helped.
	PrivateTmp bool
	// Env is extra KEY=VALUE entries for every copy, on top of this
	// process's environment. It must not set the LLMDST_STRESS_ variables
	// or LLMDST_REACHED, nor the temporary-directory ones when PrivateTmp
	// is set.
	Env []string
	// Targets are situations (task.Reach names) to report for each
	// variant even when no copy reached them, first and in this order:
	// copies that pass say nothing of a race whose window none of them
	// opened. Each must be non-empty, hold no line break (the log of a
	// copy turns one into a space) and be named once.
	Targets []string
	// Load is how many goroutines spin, burning CPU, beside the copies for
	// the whole run, 0 to LoadMax; 0 means none. Spinning goroutines need
	// no helper binary, but at most GOMAXPROCS of them burn at once.
	Load int
	// Timeout bounds each copy's wall time; 0 means no bound. A copy over
	// it is sent SIGQUIT, with its process group, so that a Go program
	// prints every goroutine's stack into its output (where it hung), and
	// is killed if it has not ended 2s later; it counts as failed with the
	// signature "timed out after <dur>".
	Timeout time.Duration
	// Budget bounds the run's wall time; 0 means no bound. Once Budget has
	// passed since the start, no new round begins (with VsCmd, no new pair
	// of rounds, so that both variants run as many), and the rounds under
	// way end as usual. Rounds still bounds the rounds.
	Budget time.Duration
	// Dir is the copies' working directory; "" means this process's.
	Dir string
	// OutputMax is the tail of a copy's combined stdout and stderr kept, in
	// bytes; 0 means DefaultOutputMax.
	OutputMax int
}

// validate returns the config with defaults filled in, or the first
// mistake in it.
func (cfg StressConfig) validate() (StressConfig, error) {
	switch {
	case len(cfg.Cmd) == 0 || cfg.Cmd[0] == "":
		return cfg, errors.New("stress: no command given: want -- CMD ARGS")
	case cfg.VsCmd != nil && (len(cfg.VsCmd) == 0 || cfg.VsCmd[0] == ""):
		return cfg, errors.New("stress: VsCmd is set but empty: want the argv of variant B, or nil for one variant")
	case cfg.Parallel < 1 || cfg.Parallel > ParallelMax:
		return cfg, fmt.Errorf("stress: -p must be ≥ 1 and ≤ %d, got %d", ParallelMax, cfg.Parallel)
	case cfg.Rounds < 1 || cfg.Rounds > RoundsMax:
		return cfg, fmt.Errorf("stress: Rounds must be ≥ 1 and ≤ %d, got %d", RoundsMax, cfg.Rounds)
	case cfg.Load < 0 || cfg.Load > LoadMax:
		return cfg, fmt.Errorf("stress: Load must be ≥ 0 and ≤ %d, got %d", LoadMax, cfg.Load)
	case cfg.Timeout < 0:
		return cfg, fmt.Errorf("stress: Timeout must be ≥ 0 (0 means none), got %v", cfg.Timeout)
	case cfg.Budget < 0:
		return cfg, fmt.Errorf("stress: Budget must be ≥ 0 (0 means none), got %v", cfg.Budget)
	case cfg.OutputMax < 0:
		return cfg, fmt.Errorf("stress: OutputMax must be ≥ 0 bytes (0 means %d), got %d", DefaultOutputMax, cfg.OutputMax)
	}
	for _, kv := range cfg.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return cfg, fmt.Errorf("stress: Env entry %q is not KEY=VALUE", kv)
		}
		if k == EnvRound || k == EnvCopy || k == EnvVariant || k == EnvReached {
			return cfg, fmt.Errorf("stress: Env sets %s, which the runner sets for every copy; remove it", k)
		}
		if cfg.PrivateTmp && slices.Contains(tmpVars, k) {
			return cfg, fmt.Errorf("stress: Env sets %s, which PrivateTmp sets for every copy; drop one of them", k)
		}
	}
	for i, name := range cfg.Targets {
		switch {
		case name == "":
			return cfg, fmt.Errorf("stress: target %d of Targets is empty: want the name a program passes to task.Reach", i+1)
		case strings.ContainsAny(name, "\n\r"):
			return cfg, fmt.Errorf("stress: target %q holds a line break, which a copy's log of situations turns into a space: name it as it reads back", name)
		case slices.Contains(cfg.Targets[:i], name):
			return cfg, fmt.Errorf("stress: Targets names %q twice; name each target once", name)
		}
	}
	if cfg.Dir != "" {
		if fi, err := os.Stat(cfg.Dir); err != nil || !fi.IsDir() {
			return cfg, fmt.Errorf("stress: Dir %q is not a directory: want an existing working directory or \"\"", cfg.Dir)
		}
	}
	if cfg.OutputMax == 0 {
		cfg.OutputMax = DefaultOutputMax
	}
	return cfg, nil
}

// CopyResult is one copy's run.
type CopyResult struct {
	Variant string // "A" or "B"
	Round   int    // 1-based, within the variant
	Copy    int    // 1-based, within the round
	Failed  bool   // it exited non-zero, was killed, or timed out
	// ExitCode is the exit status, -1 when a signal ended the copy.
	ExitCode int
	// Signal names the signal that ended the copy, "" if none.
	Signal   string
	TimedOut bool
	// Duration is the copy's wall time from start to exit.
	Duration time.Duration
	// Output is the tail of the combined stdout and stderr of a failed
	// copy; nil for a copy that passed, to bound memory.
	Output []byte
	// Signature is the failure's signature, "" for a copy that passed.
	Signature string
	// Reproduce is a shell command line that runs this copy again alone.
	Reproduce string
	// Reached are the situations the copy reached (task.Reach), each
	// once, in the order first reached; nil for none.
	Reached []string
}

// Index numbers a copy among its variant's runs from 0, round by round.
func (c CopyResult) Index(parallel int) int {
	return (c.Round-1)*parallel + c.Copy - 1
}

// VariantReport is what one variant did under stress.
type VariantReport struct {
	Name string   // "A" or "B"
	Cmd  []string // its argv
	// Rounds holds the failures of each of its rounds, in order.
	Rounds []Rate
	// Total is its failures among all its runs.
	Total Rate
	// Modes are its failure modes, most frequent first; a mode's First is
	// a CopyResult.Index and its Example a reproduce command line.
	Modes []Mode
	// Busy is the wall time of its rounds.
	Busy time.Duration
	// FirstFailure is the wall time of its rounds until the end of its
	// first failed copy; meaningful when Total.K > 0.
	FirstFailure time.Duration
	// Reached counts, for each situation, the copies that reached it
	// (task.Reach): the targets first, in the order of
	// StressConfig.Targets, reached or not; then every other situation a
	// copy reached, most copies first, then by name. Nil when there are
	// no targets and no copy reached anything.
	Reached []Situation
}

// Label is the variant's command as a shell would take it.
func (v VariantReport) Label() string { return ShellJoin(v.Cmd) }

// ExecsPerSec is how many copies the variant ran per second of its rounds.
func (v VariantReport) ExecsPerSec() float64 {
	if v.Busy <= 0 {
		return 0
	}
	return float64(v.Total.N) / v.Busy.Seconds()
}

// Tally is the variant's runs and failure modes.
func (v VariantReport) Tally() Tally { return Tally{Runs: v.Total.N, Modes: v.Modes} }

// StressReport is the outcome of Stress.
type StressReport struct {
	// Config is the configuration run, with defaults filled in.
	Config StressConfig
	// Variants are A, and B when Config.VsCmd was set.
	Variants []VariantReport
	// Copies are all copies of the completed rounds, in the order the
	// rounds ran, each round's copies by number.
	Copies []CopyResult
	// Comparisons compare the failure modes of A and B; nil for one
	// variant.
	Comparisons []ModeComparison
	// SituationComparisons compare, situation by situation, the copies of
	// A and B that reached each (see CompareSituations); nil for one
	// variant, and when there are no targets and no copy reached anything.
	SituationComparisons []SituationComparison
	// P and Verdict compare B's total failure rate with A's; zero for one
	// variant.
	P       float64
	Verdict string
	// GOMAXPROCS is the runtime's setting during the run: at most that
	// many Load goroutines burned at once.
	GOMAXPROCS int
	// Elapsed is the wall time of the whole run.
	Elapsed time.Duration
	// BudgetSpent is set when Config.Budget ended the run before
	// Config.Rounds rounds.
	BudgetSpent bool
}

type variant struct {
	name string
	cmd  []string
}

// Stress runs the command (and VsCmd, interleaved) Parallel copies at a
// time for Rounds rounds each and reports the failures and their modes.
// progress, if not nil, is called after every copy with the copies ended
// and the copies planned (-1 with a Budget), from Stress's goroutine, never
// concurrently.
//
// A configuration mistake returns a nil report and an error before
// anything runs. A copy that cannot start ends the run after its round;
// when ctx ends, the running copies are killed with their process groups.
// Either way Stress returns the report of the rounds completed before
// with the error, which wraps ctx.Err() for an interruption.
func Stress(ctx context.Context, cfg StressConfig, progress func(done, total int)) (*StressReport, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	variants := []variant{{"A", cfg.Cmd}}
	if cfg.VsCmd != nil {
		variants = append(variants, variant{"B", cfg.VsCmd})
	}
	total := len(variants) * cfg.Rounds * cfg.Parallel
	if cfg.Budget > 0 {
		total = -1 // how many rounds fit in the budget is not known
	}

	// One directory for the copies' logs of situations reached, each read
	// and removed when its copy ends.
	reached, err := os.MkdirTemp("", "llmdst-reached-")
	if err != nil {
		return nil, fmt.Errorf("stress: cannot make the directory for the copies' logs of situations reached (%s): %w", EnvReached, err)
	}
	defer os.RemoveAll(reached) // also when progress panics

	parent := ""
	if cfg.PrivateTmp {
		if parent, err = os.MkdirTemp("", "llmdst-stress-"); err != nil {
			return nil, fmt.Errorf("stress: cannot make the private temporary directories: %w", err)
		}
	}
	stopLoad := startLoad(cfg.Load)
	defer stopLoad() // also when progress panics; stopping twice is harmless
	if parent != "" {
		defer os.RemoveAll(parent)
	}

	st := stressState{cfg: cfg, parent: parent, reached: reached, progress: progress, total: total}
	reports := make([]VariantReport, len(variants))
	modes := make([]Modes, len(variants))
	situations := make([]situationTally, len(variants))
	for i, v := range variants {
		reports[i] = VariantReport{Name: v.name, Cmd: v.cmd}
	}
	var copies []CopyResult
	var runErr error
	spent := false
rounds:
	for round := 1; round <= cfg.Rounds; round++ {
		if round > 1 && cfg.Budget > 0 && time.Since(start) >= cfg.Budget {
			spent = true
			break
		}
		for i, v := range variants {
			results, busy, err := st.runRound(ctx, v, round)
			if err != nil {
				runErr = err
				break rounds
			}
			reports[i].addRound(&modes[i], &situations[i], results, busy, cfg.Parallel)
			copies = append(copies, results...)
		}
	}

	stopLoad()
	if parent != "" {
		if err := os.RemoveAll(parent); err != nil && runErr == nil {
			runErr = fmt.Errorf("stress: cannot remove the private temporary directories: %w", err)
		}
	}
	if err := os.RemoveAll(reached); err != nil && runErr == nil {
		runErr = fmt.Errorf("stress: cannot remove %s, the directory of the copies' logs of situations reached: %w", reached, err)
	}
	for i := range reports {
		reports[i].Reached = situations[i].list(cfg.Targets)
	}
	r := &StressReport{Config: cfg, Variants: reports, Copies: copies, GOMAXPROCS: runtime.GOMAXPROCS(0), Elapsed: time.Since(start), BudgetSpent: spent}
	if len(reports) == 2 {
		r.Comparisons = CompareModes(reports[0].Tally(), reports[1].Tally())
		r.SituationComparisons = CompareSituations(reports[0], reports[1])
		r.P, r.Verdict = CompareRates(reports[0].Total, reports[1].Total)
	}
	return r, runErr
}

// addRound adds one completed round of the variant, whose failures are
// collected in ms and situations reached in sits.
func (v *VariantReport) addRound(ms *Modes, sits *situationTally, results []CopyResult, busy time.Duration, parallel int) {
	k := 0
	firstEnd := time.Duration(-1)
	for _, c := range results {
		sits.add(c, c.Index(parallel))
		if !c.Failed {
			continue
		}
		k++
		ms.Add(c.Signature, c.Index(parallel), c.Reproduce)
		if firstEnd < 0 || c.Duration < firstEnd {
			firstEnd = c.Duration
		}
	}
	if v.Total.K == 0 && k > 0 {
		v.FirstFailure = v.Busy + firstEnd
	}
	v.Rounds = append(v.Rounds, Rate{K: k, N: len(results)})
	v.Total = Rate{K: v.Total.K + k, N: v.Total.N + len(results)}
	v.Busy += busy
	v.Modes = ms.List()
}

// stressState is what the rounds of one Stress call share.
type stressState struct {
	cfg      StressConfig
	parent   string // the private temporary directories' parent, or ""
	reached  string // the directory of the copies' logs of situations reached
	progress func(done, total int)
	done     int
	total    int
}

// runRound runs the Parallel copies of one round of a variant and returns
// their results by copy number and the round's wall time. A round that
// ctx ended before it began, or in which it killed a copy, is an error.
func (st *stressState) runRound(ctx context.Context, v variant, round int) ([]CopyResult, time.Duration, error) {
	interrupted := func(err error) error {
		return fmt.Errorf("stress: interrupted in round %d of variant %s: %w", round, v.name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, interrupted(err)
	}
	start := time.Now()
	results := make([]CopyResult, st.cfg.Parallel)
	killed := make([]bool, st.cfg.Parallel)
	errs := make([]error, st.cfg.Parallel)
	ended := make(chan struct{}, st.cfg.Parallel)
	for c := range st.cfg.Parallel {
		go func() {
			results[c], killed[c], errs[c] = st.runCopy(ctx, v, round, c+1)
			ended <- struct{}{}
		}()
	}
	for range st.cfg.Parallel {
		<-ended
		st.done++
		if st.progress != nil {
			st.progress(st.done, st.total)
		}
	}
	busy := time.Since(start)
	for c := range st.cfg.Parallel {
		if errs[c] != nil {
			return nil, busy, errs[c] // the copies failed alike: one says it
		}
		if killed[c] {
			return nil, busy, interrupted(ctx.Err())
		}
	}
	return results, busy, nil
}

// runCopy runs one copy to its end; killed reports that ctx ended it.
func (st *stressState) runCopy(ctx context.Context, v variant, round, copyN int) (res CopyResult, killed bool, err error) {
	cfg := st.cfg
	res = CopyResult{Variant: v.name, Round: round, Copy: copyN}
	tmp := ""
	if st.parent != "" {
		tmp = filepath.Join(st.parent, fmt.Sprintf("%s-r%d-c%d", v.name, round, copyN))
		if err := os.Mkdir(tmp, 0o700); err != nil {
			return res, false, fmt.Errorf("stress: cannot make the private temporary directory of %s round %d copy %d: %w", v.name, round, copyN, err)
		}
		defer os.RemoveAll(tmp)
	}
	copyVars := []string{EnvVariant + "=" + v.name, EnvRound + "=" + strconv.Itoa(round), EnvCopy + "=" + strconv.Itoa(copyN)}
	res.Reproduce = reproduceLine(cfg, v.cmd, copyVars)

	cctx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.Timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
	}
	defer cancel()
	cmd := exec.CommandContext(cctx, v.cmd[0], v.cmd[1:]...)
	cmd.Dir = cfg.Dir
	// The log of situations reached comes last, over any this process
	// inherited, and stays out of the reproduce line: a copy run again
	// alone need not log.
	reachedLog := filepath.Join(st.reached, fmt.Sprintf("%s-r%d-c%d", v.name, round, copyN))
	cmd.Env = append(append(append(os.Environ(), cfg.Env...), copyVars...), EnvReached+"="+reachedLog)
	if tmp != "" {
		for _, k := range tmpVars {
			cmd.Env = append(cmd.Env, k+"="+tmp)
		}
	}
	out := &tailBuffer{max: cfg.OutputMax}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = killWait
	// Past the timeout, ask for the stacks first; when the run is
	// cancelled, kill.
	ownProcessGroup(cmd, func() bool { return ctx.Err() == nil })

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, false, fmt.Errorf("stress: cannot start variant %s (%s): %w", v.name, ShellJoin(v.cmd), err)
	}
	_ = cmd.Wait() // the outcome is read from ProcessState below
	res.Duration = time.Since(start)
	killProcessGroup(cmd)

	state := cmd.ProcessState
	res.ExitCode = state.ExitCode()
	res.Signal = signalName(state)
	res.TimedOut = cfg.Timeout > 0 && !state.Success() && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	res.Failed = !state.Success()
	if res.Failed && ctx.Err() != nil {
		return res, true, nil
	}
	if res.Reached, err = task.ReadReached(reachedLog); err != nil {
		return res, false, fmt.Errorf("stress: cannot read %s, the log of the situations variant %s round %d copy %d reached (%s): %w; did the command remove or replace it?", reachedLog, v.name, round, copyN, EnvReached, err)
	}
	_ = os.Remove(reachedLog) // read: the directory need not keep every copy's; Stress removes what is left
	if res.Failed {
		res.Output = out.Bytes()
		res.Signature = Failure{Output: res.Output, ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, Timeout: cfg.Timeout}.Signature()
	}
	return res, false, nil
}

// reproduceLine is a shell command line that runs one copy again alone.
func reproduceLine(cfg StressConfig, argv, copyVars []string) string {
	var parts []string
	if cfg.Dir != "" {
		parts = append(parts, "cd", shell.Quote(cfg.Dir), "&&")
	}
	if cfg.PrivateTmp { // every temp variable a copy gets, as it got them
		parts = append(parts, `t="$(mktemp -d)" &&`)
	}
	for _, kv := range append(append([]string(nil), cfg.Env...), copyVars...) {
		k, v, _ := strings.Cut(kv, "=")
		parts = append(parts, k+"="+shell.Quote(v))
	}
	if cfg.PrivateTmp {
		for _, k := range tmpVars {
			parts = append(parts, k+`="$t"`)
		}
	}
	parts = append(parts, ShellJoin(argv))
	return strings.Join(parts, " ")
}

// startLoad starts n goroutines that burn CPU until the returned function
// is called; it returns once they have all stopped.
func startLoad(n int) (stop func()) {
	var stopped atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { burn(&stopped) })
	}
	return sync.OnceFunc(func() {
		stopped.Store(true)
		wg.Wait()
	})
}

// burn spins until stopped is set, checking it every few microseconds.
func burn(stopped *atomic.Bool) uint64 {
	x := uint64(1)
	for !stopped.Load() {
		for range 1024 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	return x
}

// tailBuffer keeps the last max bytes written to it. os/exec calls Write
// from one goroutine at a time when Stdout and Stderr are the same
// pointer.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		if len(t.buf)+len(p) > t.max { // else nothing is dropped
			t.truncated = true
		}
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.truncated = true
	}
	return n, nil
}

// Bytes is the tail, starting at a whole line when bytes were dropped.
func (t *tailBuffer) Bytes() []byte {
	b := t.buf
	if len(b) > t.max {
		b, t.truncated = b[len(b)-t.max:], true
	}
	if t.truncated {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return append([]byte(nil), b...)
}
