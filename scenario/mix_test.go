package scenario_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
)

// TestControlMixPassesOnTheFixedEngine: the engine as it is passes
// control-mix under chaos, its default, and under a starved engine core,
// with every controller's calls in every other's window.
func TestControlMixPassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.ControlMix, "chaos", "starve:engine-core")
}

// TestControlMixCatchesEachControllersBugs: control-mix catches, under
// chaos, the planted bugs of each scenario whose controller it borrows —
// pause-resume's, weight-sync's, colocate's, live-reload's, lora-reload's
// and multi-lora's — the KV cache's, and its own operator's pins, each on
// the property its own scenario catches it by (and the core's death, "",
// where a dropped or stale token leaves it nothing to schedule): 16 of
// the 19. One scenario so stands for the others in a hunt across the
// control calls.
func TestControlMixCatchesEachControllersBugs(t *testing.T) {
	for _, c := range []struct {
		failpoint string
		by        []string // the properties it may fail by; the first must be among them
	}{
		{"core/pause-last-mode-wins", []string{props.PausedRunsNothing}},
		{"core/update-keeps-scheduling", []string{props.UpdateRunsNothing}},
		{"core/update-holds-by-pausing", []string{props.PausedRunsNothing, props.UpdateRunsNothing}},
		{"core/update-while-asleep", []string{props.WeightsWrittenAwake}},
		{"core/partial-wake-resumes", []string{props.AsleepRunsNothing}},
		{"core/resume-while-asleep", []string{props.AsleepRunsNothing}},
		{"core/sleep-keeps-prefix-cache", []string{props.ModelTokens}},
		{"core/reset-clears-nothing", []string{props.ModelTokens}},
		{"core/reset-keeps-stale-token", []string{props.ModelTokens, ""}},
		{"core/reset-discards-unconditionally", []string{props.ModelTokens, ""}},
		{"core/kv-keep-evicted-hash", []string{props.ModelTokens, props.KVBlocksAccounted}},
		{"core/kv-leak-on-abort", []string{props.KVBlocksAccounted, props.ModelTokens, props.ReuseFinishesNormally}},
		{"core/lora-reload-keeps-prefix-cache", []string{props.ModelTokens}},
		{"core/lora-limit-forgets-running", []string{props.LoRASlotsSuffice}},
		{"core/prefix-cache-ignores-lora", []string{props.ModelTokens}},
		{"core/lora-pin-ignores-slots", []string{props.LoRASlotsSuffice, ""}}, // "": a load finds the cache pinned full
	} {
		counts, first := sweepFailures(t, scenario.ControlMix, "chaos", pauseSeeds(), withFailpoint(c.failpoint+"=return"))
		assert.Positive(t, counts[c.by[0]], "%s: no seed failed %s: %v", c.failpoint, c.by[0], counts)
		for p, n := range counts {
			assert.True(t, slices.Contains(c.by, p), "%s: %d failure(s) by %q, first seed %d", c.failpoint, n, p, first[p])
		}
	}
}
