package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// top is go tool pprof -top -nodefraction=0 of a made-up profile, each kind
// of name it prints.
const top = `File: simrun
Type: cpu
Duration: 7.87s, Total samples = 8s (101.64%)
Showing nodes accounting for 8s, 100% of 8s total
      flat  flat%   sum%        cum   cum%
     1.00s 12.50% 12.50%      1.00s 12.50%  runtime.memclrNoHeapPointers
     2.00s 25.00% 37.50%      2.00s 25.00%  internal/runtime/atomic.(*Uint32).CompareAndSwap (inline)
     0.80s 10.00% 47.50%      2.00s 25.00%  github.com/llmdst/llmdst/sim.(*sched).stop
     0.40s  5.00% 52.50%      0.66s  8.25%  github.com/llmdst/llmdst/sim.(*sched).decide (partial-inline)
     0.40s  5.00% 57.50%      0.40s  5.00%  github.com/llmdst/llmdst/sim.(*slab[go.shape.struct { github.com/llmdst/llmdst/core.Request; x int }]).new (inline)
     1.60s 20.00% 77.50%      3.00s 37.50%  github.com/llmdst/llmdst/core.(*Scheduler).Schedule
     0.60s  7.50% 85.00%      0.60s  7.50%  aeshashbody
     0.40s  5.00% 90.00%      0.40s  5.00%  iter.Pull[go.shape.struct {}].func1.1
     0.40s  5.00% 95.00%      0.40s  5.00%  math/rand/v2.(*PCG).Uint64 (inline)
     0.32s  4.00% 99.00%      0.32s  4.00%  github.com/llmdst/llmdst/internal/rttest.SetFlag
     0.04s  0.50% 99.50%      0.04s  0.50%  github.com/schollz/progressbar/v3.(*ProgressBar).Add64
     0.04s  0.50%   100%      0.04s  0.50%  fmt.(*pp).doPrintf
     0.00s  0.00%   100%      0.04s  0.50%  main.(*spec).runSeed (inline)
     0.00s  0.00%   100%      0.00s  0.00%  type:.eq.github.com/llmdst/llmdst/core.Request
     0.00s  0.00%   100%      0.00s  0.00%  [libc.so.6]
         0     0%   100%      7.00s 87.50%  runtime.corostart
`

func TestAProfileIsSummedByPart(t *testing.T) {
	p, err := parseProfileTop(strings.NewReader(top))
	require.NoError(t, err)
	assert.Equal(t, []share{
		{partRuntime, 25 + 12.5 + 7.5},
		{"the engine's core", 20},
		{"the simulator", 20}, // a tie: by name
		{"the rest of the standard library", 10.5},
		{"llmdst's internal/rttest", 4},
		{"other modules", 0.5},
		{"code outside Go", 0}, // listed, if with none of its own
		{"simrun itself", 0},
	}, p.parts)
	assert.Equal(t, share{"internal/runtime/atomic.(*Uint32).CompareAndSwap", 25}, p.top, "named without (inline)")

	var out strings.Builder
	writeProfile(func(f string, a ...any) { fmt.Fprintf(&out, f+"\n", a...) }, p)
	doc := out.String()
	assert.Contains(t, doc, "part: the Go runtime 45%, the engine's core 20%, the simulator 20%, the rest of the standard library 10%, llmdst's internal/rttest 4%, and 0.5% in parts of under 1% each.",
		"the parts of 1% and more, largest first, the others together")
	assert.Contains(t, doc, "No function has more than 25.0% of its own\n(`internal/runtime/atomic.(*Uint32).CompareAndSwap`)")
	assert.Contains(t, doc, "would make a seed 1.25 times faster", "100 / (100 - 20)")
	assert.NotContains(t, doc, "%!")
}

func TestEachFunctionsPart(t *testing.T) {
	for fn, part := range map[string]string{
		"runtime.mallocgc": partRuntime,
		"internal/runtime/maps.(*Map).getWithoutKeySmallFastStr": partRuntime,
		"aeshashbody":              partRuntime,
		"type:.eq.[2]interface {}": partRuntime,
		"type:.eq.github.com/llmdst/llmdst/core.Request":                                                    partRuntime,
		"github.com/llmdst/llmdst/sim.(*slab[go.shape.struct { github.com/llmdst/llmdst/core.x int }]).new": partSim,
		"github.com/llmdst/llmdst/props.(*Checker).observe":                                                 "the checker",
		"github.com/llmdst/llmdst/internal/rttest.SetFlag":                                                  "llmdst's internal/rttest",
		"main.sweepInto.func1":                                   "simrun itself",
		"iter.Pull[go.shape.struct {}].func1.1":                  "the rest of the standard library",
		"math/rand/v2.(*PCG).Uint64":                             "the rest of the standard library",
		"slices.Clone[go.shape.[]int,go.shape.int]":              "the rest of the standard library",
		"github.com/schollz/progressbar/v3.(*ProgressBar).Add64": "other modules",
		"golang.org/x/sys/unix.Syscall":                          "other modules",
		"<unknown>":                                              "code outside Go",
		"[libc.so.6]":                                            "code outside Go",
		"x_cgo_thread_start":                                     "code outside Go",
	} {
		assert.Equal(t, part, partOf(fn), fn)
	}
}

func TestAProfileListingThatLeavesOutIsRefused(t *testing.T) {
	for name, c := range map[string]struct{ text, says string }{
		"nodes dropped": {strings.Replace(top, "      flat  flat%", "Dropped 192 nodes (cum <= 0.04s)\n      flat  flat%", 1), "-nodefraction=0"},
		"a share missing": {strings.Replace(top, "     0.60s  7.50% 85.00%      0.60s  7.50%  aeshashbody\n", "", 1),
			"hold 92.5% of the samples"},
		"no listing":     {"File: simrun\nType: cpu\n", "not the output of go tool pprof -top"},
		"a line not its": {top + "something else\n", `not a line of go tool pprof -top: "something else"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseProfileTop(strings.NewReader(c.text))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.says)
		})
	}
}

func TestNoProfileNoParagraph(t *testing.T) {
	var out strings.Builder
	writeProfile(func(f string, a ...any) { fmt.Fprintf(&out, f+"\n", a...) }, nil)
	assert.Empty(t, out.String())
}
