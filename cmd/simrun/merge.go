package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/triage"
)

func init() {
	register(&command{name: "merge", summary: "add up the -json results of sweep or explore shards", run: cmdMerge})
}

// mergeResult is a sweep's result added up from its shards: the fields a
// sweep has, and what only a merge knows.
type mergeResult struct {
	sweepResult
	// Shards are the shards merged, in the order given, and Files the
	// files they came from.
	Shards []string `json:"shards"`
	Files  []string `json:"files"`
	// SeedsPerSecSum adds up the shards' rates: the throughput of the
	// machines together, where SeedsPerSec is the wall-clock rate of a
	// matrix whose shards ran side by side (total seeds over the slowest
	// shard's time).
	SeedsPerSecSum float64 `json:"seeds_per_sec_sum"`
	// MissingShards names the shards of an I/N split that were not given,
	// the first missingShardsMax of them; MissingCount counts them all.
	MissingShards []string `json:"missing_shards,omitempty"`
	MissingCount  uint64   `json:"missing_shard_count,omitempty"`
}

func cmdMerge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: simrun merge [-json] [-min-reached N] SHARD.json...")
		fmt.Fprintln(stderr, "Adds up the outputs of simrun sweep -json -shard I/N into the result of one sweep")
		fmt.Fprintln(stderr, "(of each scenario, when the sweep named several),")
		fmt.Fprintln(stderr, "or those of simrun explore -json -shard I/N into one walk.")
		fs.PrintDefaults()
	}
	jsonOut := fs.Bool("json", false, "print the merged JSON object instead of text")
	var minReached wholeNumber
	fs.Var(&minReached, "min-reached", "fail (exit 1) unless every target situation of the sweep was reached in at least `N` seeds of the shards together")
	files, err := parseFlags(fs, args, math.MaxInt)
	if err != nil {
		return helpOK(err)
	}
	if len(files) == 0 {
		return usagef("want the JSON files of the shards to merge: simrun merge shard1.json shard2.json ...")
	}
	if data, err := os.ReadFile(files[0]); err == nil && isExploreJSON(data) {
		return mergeExploreFiles(files, *jsonOut, stdout)
	}
	perFile, err := readShards(files, readSweepJSON)
	if err != nil {
		return err
	}
	// A sweep of several scenarios wrote an object for each: the shards
	// are merged scenario by scenario, in the order they first come.
	var order []string
	shardsOf, filesOf := map[string][]sweepResult{}, map[string][]string{}
	for i, rs := range perFile {
		for _, r := range rs {
			if _, ok := shardsOf[r.Scenario]; !ok {
				order = append(order, r.Scenario)
			}
			shardsOf[r.Scenario] = append(shardsOf[r.Scenario], r)
			filesOf[r.Scenario] = append(filesOf[r.Scenario], files[i])
		}
	}
	merged := make([]*mergeResult, len(order))
	for i, name := range order {
		if merged[i], err = mergeSweeps(shardsOf[name], filesOf[name]); err != nil {
			return err
		}
	}
	for i, m := range merged {
		if *jsonOut {
			if err := writeJSON(stdout, m); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		if err := printMerge(stdout, m); err != nil {
			return err
		}
	}
	for _, m := range merged {
		if m.Failures > 0 || len(m.Nondetermined) > 0 {
			return errFailed
		}
	}
	var short error
	for _, m := range merged {
		if minReached > 0 && len(m.Targets) == 0 {
			return usagef("-min-reached %d: the shards of %s name no target situations", minReached, m.Scenario)
		}
		cmd := "merge"
		if len(merged) > 1 {
			cmd = "merge (" + m.Scenario + ")"
		}
		if err := checkReached(stderr, cmd, &m.sweepResult, uint64(minReached)); err != nil && short == nil {
			short = err
		}
	}
	return short
}

// printMerge writes a merged sweep as text: its shards, those missing,
// the sweep's result and the throughput of the shards together.
func printMerge(w io.Writer, m *mergeResult) error {
	config, err := parseConfig(m.Config) // readSweepJSON read it
	if err != nil {
		return err
	}
	sp := &spec{scenario: &scenario.Scenario{Name: m.Scenario}, legacy: m.Engine == "legacy", stepsMax: m.StepsMax, failpoints: m.Failpoints, config: config}
	fmt.Fprintf(w, "merge of %d shard(s): %s\n", len(m.Files), strings.Join(m.Shards, ", "))
	if len(m.MissingShards) > 0 {
		names := strings.Join(m.MissingShards, ", ")
		if more := m.MissingCount - uint64(len(m.MissingShards)); more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		fmt.Fprintf(w, "  missing shards: %s — the result covers only the seeds given\n", names)
	}
	printSweep(w, sp, &m.sweepResult)
	fmt.Fprintf(w, "  throughput: %.0f seeds/s side by side (the slowest shard took %.2fs), %.0f seeds/s summed over shards\n",
		m.SeedsPerSec, m.Seconds, m.SeedsPerSecSum)
	return nil
}

// mergeExploreFiles merges the -json of explore -shard I/N jobs: one walk,
// complete when every shard is, failed when any is, with the first failure
// in depth-first order.
func mergeExploreFiles(files []string, jsonOut bool, stdout io.Writer) error {
	shards, err := readShards(files, readExploreJSON)
	if err != nil {
		return err
	}
	m, err := mergeExplores(shards, files)
	if err != nil {
		return err
	}
	if jsonOut {
		if err := writeJSON(stdout, m); err != nil {
			return err
		}
	} else {
		printExploreMerge(stdout, m)
	}
	if m.Failed {
		return errFailed
	}
	return nil
}

// readShards reads the shards' files with read, in order, stopping at the
// first it cannot.
func readShards[T any](files []string, read func(file string) (T, error)) ([]T, error) {
	var shards []T
	for _, f := range files {
		r, err := read(f)
		if err != nil {
			return nil, err
		}
		shards = append(shards, r)
	}
	return shards, nil
}

// readSweepJSON reads one shard's simrun sweep -json output: a summary
// object for each scenario it swept.
func readSweepJSON(file string) ([]sweepResult, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usagef("cannot read a shard: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var rs []sweepResult
	for {
		var r sweepResult
		if err := dec.Decode(&r); err == io.EOF && len(rs) > 0 {
			return rs, nil
		} else if err != nil {
			return nil, usagef("%s is not the output of simrun sweep -json: %v", file, err)
		}
		if r.Scenario == "" || r.SeedRange == "" {
			return nil, usagef("%s is not the output of simrun sweep -json: it has no scenario or seed_range", file)
		}
		if r.Failures > r.Seeds || uint64(len(r.FailingSeeds)) > r.Failures {
			return nil, usagef("%s is damaged: %d failures and %d failing seeds listed among %d seeds", file, r.Failures, len(r.FailingSeeds), r.Seeds)
		}
		if slices.ContainsFunc(rs, func(o sweepResult) bool { return o.Scenario == r.Scenario }) {
			return nil, usagef("%s holds scenario %s twice: a sweep writes each scenario once", file, r.Scenario)
		}
		// Its settings are compared, and printed in commands that run
		// them: in the canonical form a sweep writes.
		settings, err := parseConfig(r.Config)
		if err != nil {
			return nil, usagef("%s: its config: %v", file, err)
		}
		r.Config = settingStrings(settings)
		rs = append(rs, r)
	}
}

// mergeSweeps adds shards up. It refuses shards of different runs and
// shards that cover a seed twice.
func mergeSweeps(shards []sweepResult, files []string) (*mergeResult, error) {
	first := shards[0]
	m := &mergeResult{Files: files}
	m.Scenario, m.Strategy, m.Engine = first.Scenario, first.Strategy, first.Engine
	m.StepsMax, m.Failpoints, m.Config = first.StepsMax, first.Failpoints, first.Config
	m.Targets = first.Targets
	shardOf := map[string]string{} // shard and its seeds → file; looked up, never ranged
	var spans, requested []span
	var spanFile, stops []string
	for i, r := range shards {
		if diff := sweepDiff(first, r); diff != "" {
			return nil, usagef("cannot merge %s with %s: %s; shards must come from one sweep — the same scenario, strategy, engine, steps-max, failpoints, config and targets",
				files[i], files[0], diff)
		}
		name := r.Shard
		if name == "" {
			name = "seeds " + r.SeedRange
		}
		// The same shard twice has a clearer message than the seed they
		// share; shards with the same I/N of different seed lists do not
		// overlap, and the seeds below show it.
		shard := describeShard(r)
		if f, dup := shardOf[shard]; dup {
			return nil, usagef("overlapping shards: %s and %s are both %s", f, files[i], shard)
		}
		shardOf[shard] = files[i]
		m.Shards = append(m.Shards, name)
		set, err := parseSeeds(r.SeedRange)
		if err != nil {
			return nil, usagef("%s: its seed_range %q is not a seed set", files[i], r.SeedRange)
		}
		if set.n != r.Seeds {
			return nil, usagef("%s is damaged: its seed_range %s holds %d seeds, but it says %d", files[i], r.SeedRange, set.n, r.Seeds)
		}
		asked := set
		if r.Stopped != "" {
			who := name
			if r.Shard != "" {
				who = "shard " + r.Shard
			}
			stops = append(stops, who+": "+r.Stopped)
			if asked, err = parseSeeds(r.Requested); err != nil {
				return nil, usagef("%s: its requested_seed_range %q is not a seed set", files[i], r.Requested)
			}
		}
		requested = append(requested, asked.spans...)
		for _, sp := range set.spans {
			for k, other := range spans {
				if sp.lo <= other.hi && other.lo <= sp.hi {
					return nil, usagef("overlapping shards: %s (%s) and %s (%s) both ran seed %d", spanFile[k], other.String(), files[i], sp.String(), max(sp.lo, other.lo))
				}
			}
			spans = append(spans, sp)
			spanFile = append(spanFile, files[i])
		}
	}
	names := make([]string, len(shards))
	for i, r := range shards {
		names[i] = r.Shard
	}
	m.MissingShards, m.MissingCount = missingShards(names)
	// Sweeps of other seed lists may each have a shard 1/2: where a name
	// comes twice, the seeds tell its shards apart.
	times := map[string]int{}
	for _, name := range m.Shards {
		times[name]++
	}
	for i, name := range m.Shards {
		if times[name] > 1 {
			m.Shards[i] = fmt.Sprintf("%s (seeds %s)", name, shards[i].SeedRange)
		}
	}

	// Seeds and counts add up.
	var seconds float64
	truncatedAt := ^uint64(0) // failing seeds are complete up to here
	for _, r := range shards {
		m.Seeds += r.Seeds
		m.Failures += r.Failures
		m.Refused += r.Refused
		m.StepLimited += r.StepLimited
		m.Steps += r.Steps
		m.Workers += r.Workers
		m.Determinism += r.Determinism
		m.Nondetermined = append(m.Nondetermined, r.Nondetermined...)
		m.FailingSeeds = append(m.FailingSeeds, r.FailingSeeds...)
		m.SeedsPerSecSum += r.SeedsPerSec
		for name, n := range r.Reached {
			if m.Reached == nil {
				m.Reached = map[string]uint64{}
			}
			m.Reached[name] += n
		}
		for name, first := range r.ReachedFirst {
			if m.ReachedFirst == nil {
				m.ReachedFirst = map[string]uint64{}
			}
			if have, ok := m.ReachedFirst[name]; !ok || first < have {
				m.ReachedFirst[name] = first
			}
		}
		seconds = max(seconds, r.Seconds)
		if r.Truncated && len(r.FailingSeeds) > 0 {
			truncatedAt = min(truncatedAt, r.FailingSeeds[len(r.FailingSeeds)-1])
		}
		if r.Truncated {
			m.Truncated = true
		}
		if r.FirstFailSecs != nil && (m.FirstFailSecs == nil || *r.FirstFailSecs < *m.FirstFailSecs) {
			secs := *r.FirstFailSecs // shards run side by side: the earliest
			m.FirstFailSecs = &secs
		}
		if r.FirstFailure != nil && (m.FirstFailure == nil || *r.FirstFailure < *m.FirstFailure) {
			f := *r.FirstFailure
			m.FirstFailure, m.Error, m.Replay = &f, r.Error, r.Replay
		}
	}
	m.Seconds = seconds
	if seconds > 0 {
		m.SeedsPerSec = float64(m.Seeds) / seconds
	}
	m.SeedRange = seedSet{spans: mergeSpans(spans)}.String()
	if len(stops) > 0 { // a shard stopped early: say which, and what was asked
		m.Stopped = strings.Join(stops, "; ")
		m.Requested = seedSet{spans: mergeSpans(requested)}.String()
	}
	rate := triage.Rate{K: int(m.Failures), N: int(m.tested())}
	m.Rate = rate.P()
	m.CI95[0], m.CI95[1] = rate.CI95()
	m.UpperBound = rate.UpperBound()

	slices.Sort(m.Nondetermined)
	slices.Sort(m.FailingSeeds)
	// A truncated shard lists only its first failing seeds: the merged list
	// is complete only up to the last seed it lists.
	if i, _ := slices.BinarySearch(m.FailingSeeds, truncatedAt); truncatedAt != ^uint64(0) {
		for i < len(m.FailingSeeds) && m.FailingSeeds[i] == truncatedAt {
			i++
		}
		m.FailingSeeds = m.FailingSeeds[:i]
	}
	if len(m.FailingSeeds) > failingSeedsMax {
		m.FailingSeeds, m.Truncated = m.FailingSeeds[:failingSeedsMax], true
	}
	if m.FailingSeeds == nil {
		m.FailingSeeds = []uint64{}
	}

	// Modes merge by signature; each keeps its earliest example.
	bySig := map[string]int{} // index into m.Modes; looked up, never ranged
	for _, r := range shards {
		for _, mode := range r.Modes {
			i, ok := bySig[mode.Signature]
			if !ok {
				bySig[mode.Signature] = len(m.Modes)
				m.Modes = append(m.Modes, mode)
				continue
			}
			have := &m.Modes[i]
			have.Count += mode.Count
			if mode.FirstSeed < have.FirstSeed {
				have.FirstSeed, have.Error, have.Replay = mode.FirstSeed, mode.Error, mode.Replay
			}
		}
	}
	for i := range m.Modes {
		mr := triage.Rate{K: int(m.Modes[i].Count), N: int(m.Seeds)}
		m.Modes[i].Rate = mr.P()
		m.Modes[i].CI95[0], m.Modes[i].CI95[1] = mr.CI95()
	}
	sortModes(m.Modes)
	if m.Modes == nil {
		m.Modes = []sweepMode{}
	}
	return m, nil
}

// sweepDiff says how two sweeps differ in what decides their runs, or ""
// when they ran the same runs but for the seeds.
func sweepDiff(a, b sweepResult) string {
	var diffs []string
	differ := func(what, x, y string) {
		if x != y {
			diffs = append(diffs, fmt.Sprintf("%s %s, not %s", what, y, x))
		}
	}
	differ("scenario", a.Scenario, b.Scenario)
	differ("strategy", a.Strategy, b.Strategy)
	differ("engine", a.Engine, b.Engine)
	differ("steps-max", stepsMaxString(a.StepsMax), stepsMaxString(b.StepsMax))
	differ("failpoints", failpointsString(a.Failpoints), failpointsString(b.Failpoints))
	differ("config", failpointsString(a.Config), failpointsString(b.Config))
	differ("targets", failpointsString(a.Targets), failpointsString(b.Targets))
	if len(diffs) == 0 {
		return ""
	}
	return "it has " + strings.Join(diffs, ", ")
}

func stepsMaxString(n int64) string {
	if n == 0 {
		return "0 (the default)"
	}
	return fmt.Sprint(n)
}

func failpointsString(fps []string) string {
	if len(fps) == 0 {
		return "none"
	}
	return strings.Join(fps, " ")
}

func describeShard(r sweepResult) string {
	if r.Shard != "" {
		return fmt.Sprintf("shard %s of seeds %s", r.Shard, r.SeedRange)
	}
	return "seeds " + r.SeedRange
}

// missingShardsMax bounds the missing shards a merge names: a sweep may be
// split into as many shards as it has seeds.
const missingShardsMax = 100

// missingShards names the first missingShardsMax shards of an I/N split
// that were not given, and counts them all, when every shard given (as
// -shard names it) is one of the same N.
func missingShards(shards []string) ([]string, uint64) {
	n := uint64(0)
	have := map[uint64]bool{} // looked up, never ranged
	for _, shard := range shards {
		i, k, err := parseShard(shard)
		if err != nil || (n != 0 && k != n) {
			return nil, 0
		}
		n = k
		have[i] = true
	}
	var missing []string
	for i := uint64(1); i <= n && len(missing) < missingShardsMax; i++ {
		if !have[i] {
			missing = append(missing, fmt.Sprintf("%d/%d", i, n))
		}
	}
	return missing, n - uint64(len(have))
}

// mergeSpans sorts spans and joins those that touch.
func mergeSpans(spans []span) []span {
	s := slices.Clone(spans)
	sort.Slice(s, func(i, j int) bool { return s[i].lo < s[j].lo })
	var out []span
	for _, sp := range s {
		if n := len(out); n > 0 && out[n-1].hi != ^uint64(0) && sp.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, sp.hi)
			continue
		}
		out = append(out, sp)
	}
	return out
}

func (s span) String() string {
	if s.lo == s.hi {
		return fmt.Sprint(s.lo)
	}
	return fmt.Sprintf("%d-%d", s.lo, s.hi)
}
