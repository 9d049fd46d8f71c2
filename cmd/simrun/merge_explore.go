package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/llmdst/llmdst/sim"
)

// exploreMerge is a walk added up from the -json of its explore -shard I/N
// jobs: what explore -json says of a whole walk, and what only a merge
// knows.
type exploreMerge struct {
	exploreJSON
	// Shards are the shards merged, in the order given, and Files the
	// files they came from.
	Shards []string `json:"shards"`
	Files  []string `json:"files"`
	// FailedShard is the shard whose failure is the walk's: the first in
	// depth-first order of the shards' failures.
	FailedShard string `json:"failed_shard,omitempty"`
	// MissingShards names the shards of the I/N split that were not
	// given, the first missingShardsMax; MissingCount counts them all.
	// A walk with any missing is not complete.
	MissingShards []string `json:"missing_shards,omitempty"`
	MissingCount  uint64   `json:"missing_shard_count,omitempty"`
}

// isExploreJSON reports whether data is explore -json's output rather than
// sweep's: only explore's has delays.
func isExploreJSON(data []byte) bool {
	var probe struct {
		Delays *int `json:"delays"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Delays != nil
}

// readExploreJSON reads one shard's simrun explore -json output.
func readExploreJSON(file string) (exploreJSON, error) {
	var j exploreJSON
	data, err := os.ReadFile(file)
	if err != nil {
		return j, usagef("cannot read a shard: %v", err)
	}
	if err := json.Unmarshal(data, &j); err != nil || !isExploreJSON(data) || j.Scenario == "" {
		return j, usagef("%s is not the output of simrun explore -json", file)
	}
	if j.Seeds != "" {
		return j, usagef("%s walked -seeds %s: the shards of one walk merge, of one -seed; a walk of several seeds stops at the first that fails, a different seed in each shard", file, j.Seeds)
	}
	if j.Shard == "" {
		return j, usagef("%s is a whole walk, not an explore -shard I/N: there is nothing to merge it with", file)
	}
	settings, err := parseConfig(j.Config)
	if err != nil {
		return j, usagef("%s: its config: %v", file, err)
	}
	j.Config = settingStrings(settings)
	return j, nil
}

// mergeExplores adds up the shards of one walk. It refuses shards of
// different walks, and a shard given twice.
func mergeExplores(shards []exploreJSON, files []string) (*exploreMerge, error) {
	first := shards[0]
	m := &exploreMerge{Files: files}
	m.Scenario, m.Seed, m.Strategy, m.Engine, m.Config, m.Failpoints, m.Delays = first.Scenario, first.Seed, first.Strategy, first.Engine, first.Config, first.Failpoints, first.Delays
	m.Complete = true
	var failedDraws sim.Draws
	byShard := map[string]string{} // looked up, never ranged
	var stops []string
	for i, j := range shards {
		if diff := exploreDiff(first, j); diff != "" {
			return nil, usagef("cannot merge %s with %s: %s; shards must come from one walk — the same scenario, seed, strategy, engine, config, failpoints and -delays", files[i], files[0], diff)
		}
		if f, dup := byShard[j.Shard]; dup {
			return nil, usagef("%s and %s are both shard %s", f, files[i], j.Shard)
		}
		byShard[j.Shard] = files[i]
		m.Shards = append(m.Shards, j.Shard)
		m.Walks = max(m.Walks, j.Walks)
		m.Workers = max(m.Workers, j.Workers)
		m.Schedules += j.Schedules
		m.DeepestDraws = max(m.DeepestDraws, j.DeepestDraws)
		m.Seconds = max(m.Seconds, j.Seconds)
		m.Complete = m.Complete && j.Complete
		if j.Stopped != "" {
			stops = append(stops, "shard "+j.Shard+": "+j.Stopped)
		}
		if j.Error != "" && m.Error == "" {
			// A run drew differently from the one it followed: the
			// walk as a whole proves nothing.
			m.Failed, m.Error = true, "shard "+j.Shard+": "+j.Error
		}
		if j.Failure == nil {
			continue
		}
		d, err := sim.ParseDraws(j.Failure.Draws)
		if err != nil {
			return nil, usagef("%s: its failure's draws: %v", files[i], err)
		}
		if m.Failure == nil || slices.Compare(d, failedDraws) < 0 {
			m.Failed, m.Failure, m.FailedShard, failedDraws = true, j.Failure, j.Shard, d
		}
	}
	m.Shard = strings.Join(m.Shards, ",")
	m.MissingShards, m.MissingCount = missingShards(m.Shards)
	if m.MissingCount > 0 || m.Failed {
		m.Complete = false
	}
	m.Stopped = strings.Join(stops, "; ")
	if m.Seconds > 0 {
		m.SchedulesPerSec = float64(m.Schedules) / m.Seconds
	}
	return m, nil
}

// exploreDiff says how b's walk differs from a's, "" when it is the same.
func exploreDiff(a, b exploreJSON) string {
	_, an, _ := parseShard(a.Shard)
	_, bn, _ := parseShard(b.Shard)
	for _, d := range []struct {
		what string
		a, b any
	}{
		{"scenario", a.Scenario, b.Scenario},
		{"seed", a.Seed, b.Seed},
		{"strategy", a.Strategy, b.Strategy},
		{"engine", a.Engine, b.Engine},
		{"config", strings.Join(a.Config, " "), strings.Join(b.Config, " ")},
		{"failpoints", strings.Join(a.Failpoints, " "), strings.Join(b.Failpoints, " ")},
		{"delays", a.Delays, b.Delays},
		{"number of shards", an, bn},
	} {
		if d.a != d.b {
			return fmt.Sprintf("%s %v against %v", d.what, d.b, d.a)
		}
	}
	return ""
}

// printExploreMerge prints a merged walk as explore prints a whole one.
func printExploreMerge(w io.Writer, m *exploreMerge) {
	fmt.Fprintf(w, "merge of %d shard(s): %s\n", len(m.Shards), strings.Join(m.Shards, ", "))
	bound := sim.ExploreOptions{Delays: m.Delays}.Bound()
	engine := engineWords(m.Engine, m.Config, m.Failpoints)
	fmt.Fprintf(w, "%s seed %d, strategy %s, %s, %s: ", m.Scenario, m.Seed, m.Strategy, engine, bound)
	tally := fmt.Sprintf("%d schedules, the slowest shard %.2fs", m.Schedules, m.Seconds)
	switch {
	case m.Error != "":
		fmt.Fprintf(w, "NONDETERMINISTIC\n  %s\n", indent(m.Error, "  "))
	case m.Failure != nil:
		fmt.Fprintf(w, "FAIL: %s\n  the first failing schedule in depth-first order is shard %s's (draws %s):\n  %s\n", tally, m.FailedShard, m.Failure.Draws, indent(m.Failure.Error, "  "))
		if m.Failure.Replay != "" {
			fmt.Fprintf(w, "  replay: %s\n", m.Failure.Replay)
		}
	case m.Complete:
		fmt.Fprintf(w, "every schedule passed: %s, the longest %d draws\n", tally, m.DeepestDraws)
	default:
		fmt.Fprintf(w, "none failed, NOT complete: %s\n", tally)
	}
	if len(m.MissingShards) > 0 {
		names := strings.Join(m.MissingShards, ", ")
		if more := m.MissingCount - uint64(len(m.MissingShards)); more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		fmt.Fprintf(w, "  missing shards: %s — their schedules did not run\n", names)
	}
	if m.Stopped != "" {
		fmt.Fprintf(w, "  stopped early: %s\n", m.Stopped)
	}
}
