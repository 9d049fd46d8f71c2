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
		tb := &failTB{T: t, name: foundingRaceTest}
		checkCatching(tb, foundingRace(true, nil))
		require.True(t, tb.failed, "rapid found no failure in the legacy engine")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.fail"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no counterexample in %s: run go test ./props -run TestCommittedCounterexamples -rewrite", dir)

	setFlag(t, "rapid.nofailfile", "true")
	setFlag(t, "rapid.checks", "0") // replay the file, draw nothing new
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			setFlag(t, "rapid.failfile", file)

			legacy := &failTB{T: t}
			checkCatching(legacy, foundingRace(true, nil))
			require.True(t, legacy.failed, "%s no longer makes the legacy engine fail: rapid skips a file of another version or one the program no longer reads; run -rewrite", file)
			assert.Contains(t, strings.Join(legacy.msgs, "\n"), props.NoStaleDelivery)

			var done int
			fixed := &failTB{T: t}
			checkCatching(fixed, foundingRace(false, &done))
			assert.False(t, fixed.failed, "the fixed engine fails the legacy counterexample: %s", strings.Join(fixed.msgs, "\n"))
			assert.Positive(t, done, "the fixed engine did not run the counterexample to its end")
		})
	}
}

// checkCatching runs rapid.Check on tb, which ends a failure by panicking
// with itself.
func checkCatching(tb *failTB, prop func(*rapid.T)) {
	defer func() {
		if r := recover(); r != nil && r != tb {
			panic(r)
		}
	}()
	rapid.Check(tb, prop)
}

// setFlag sets a rapid flag for the rest of the test.
func setFlag(t *testing.T, name, value string) {
	old := flag.Lookup(name).Value.String()
	require.NoError(t, flag.Set(name, value))
	t.Cleanup(func() { _ = flag.Set(name, old) })
}
