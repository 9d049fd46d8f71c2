package props_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

var rewrite = flag.Bool("rewrite", false, "find the legacy engine's race with rapid again and replace the committed fail file")

// foundingRaceDraws is how many answers a drawn schedule of the founding
// case holds: more than a run asks for (some 300, 700 at the most).
const foundingRaceDraws = 1024

// foundingRaceTest is the test whose fail files are the committed
// counterexamples: rapid replays every file in its testdata/rapid folder
// before it draws new cases.
const foundingRaceTest = "TestFoundingRaceUnderDrawnSchedules"

// foundingRace is the founding case under a schedule rapid draws whole.
// done counts the runs that went to their end.
func foundingRace(legacy bool, done *int) func(*rapid.T) {
	return func(t *rapid.T) {
		prog, out := scenario.AbortReuse.Program(scenario.Options{Legacy: legacy})
		res := sim.Run(sim.Options{Chooser: props.RapidSchedule(t, "schedule", foundingRaceDraws), Strategy: sim.Starve("output-handler"), HangAfter: hangAfter}, prog)
		if done != nil {
			*done++
		}
		if err := out.Err(res.Err); err != nil {
			t.Fatalf("%v", err)
		}
	}
}

// TestFoundingRaceUnderDrawnSchedules: the fixed engine passes the founding
// case under schedules rapid draws, beginning with the legacy engine's
// counterexamples committed in testdata/rapid.
func TestFoundingRaceUnderDrawnSchedules(t *testing.T) {
	rapid.Check(t, foundingRace(false, nil))
}

// TestCommittedCounterexamples checks that each committed fail file is a
// regression test and not a file rapid would quietly skip: it still drives
// the legacy engine into the founding race, and the fixed engine runs the
// same schedule to its end and passes. With -rewrite it finds the race
// again and replaces the files first.
func TestCommittedCounterexamples(t *testing.T) {
	dir := filepath.Join("testdata", "rapid", foundingRaceTest)
	if *rewrite {
		require.NoError(t, os.RemoveAll(dir))
		tb := &rttest.FailTB{T: t, As: foundingRaceTest}
		rttest.CheckCatching(tb, foundingRace(true, nil))
		require.True(t, tb.Failed(), "rapid found no failure in the legacy engine")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.fail"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no counterexample in %s: run go test ./props -run TestCommittedCounterexamples -rewrite", dir)

	rttest.SetFlag(t, "rapid.nofailfile", "true")
	rttest.SetFlag(t, "rapid.checks", "0") // replay the file, draw nothing new
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			rttest.SetFlag(t, "rapid.failfile", file)

			legacy := &rttest.FailTB{T: t}
			rttest.CheckCatching(legacy, foundingRace(true, nil))
			require.True(t, legacy.Failed(), "%s no longer makes the legacy engine fail: rapid skips a file of another version or one the program no longer reads; run -rewrite", file)
			assert.Contains(t, strings.Join(legacy.Msgs, "\n"), props.NoStaleDelivery)

			var done int
			fixed := &rttest.FailTB{T: t}
			rttest.CheckCatching(fixed, foundingRace(false, &done))
			assert.False(t, fixed.Failed(), "the fixed engine fails the legacy counterexample: %s", strings.Join(fixed.Msgs, "\n"))
			assert.Positive(t, done, "the fixed engine did not run the counterexample to its end")
		})
	}
}
