package sim_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

func TestScheduleRoundTripsThroughText(t *testing.T) {
	for _, st := range []sim.Strategy{sim.Random(), sim.Chaos(), sim.Starve("worker")} {
		res := sim.Run(sim.Options{Seed: 9, Strategy: st}, busy)
		require.NoError(t, res.Err)
		res.Schedule.Set("scenario", "busy")
		res.Schedule.Set("note", "spaces, \"quotes\" and\nnewlines")
		text := res.Schedule.String()
		parsed, err := sim.ParseSchedule(text)
		require.NoError(t, err, st.String())
		assert.Equal(t, text, parsed.String())
		assert.Equal(t, res.Schedule.Len(), parsed.Len())
		assert.Equal(t, res.Schedule.Steps(), parsed.Steps())
		v, ok := parsed.Get("note")
		assert.True(t, ok)
		assert.Equal(t, "spaces, \"quotes\" and\nnewlines", v)

		again := sim.Run(sim.Options{Strategy: sim.Replay(parsed)}, busy)
		require.NoError(t, again.Err, st.String())
		assert.Equal(t, res.TraceHash, again.TraceHash, st.String())
		assert.Equal(t, res.Elapsed, again.Elapsed)
	}
}

// A run records into a buffer later runs reuse; what it returns must be
// its own.
func TestARunsScheduleOutlivesLaterRuns(t *testing.T) {
	var kept []*sim.Schedule
	var texts []string
	for seed := uint64(1); seed <= 20; seed++ {
		res := sim.Run(sim.Options{Seed: seed, Strategy: sim.Chaos()}, busy)
		require.NoError(t, res.Err)
		kept = append(kept, res.Schedule)
		texts = append(texts, res.Schedule.String())
	}
	for i, s := range kept {
		assert.Equal(t, texts[i], s.String(), "seed %d's schedule after the runs that followed it", i+1)
	}
	assert.NotEqual(t, texts[0], texts[1], "seeds record different schedules")
}

func TestNewScheduleRebuildsSteps(t *testing.T) {
	steps := []sim.Step{{Task: 0}, {Task: 0}, {Task: 1}, {Wait: true, Task: -1, Until: time.Millisecond}, {Task: 1}}
	s := sim.NewSchedule(steps, []string{"main", "w"}, nil)
	assert.Equal(t, steps, s.Steps())
	assert.Contains(t, s.String(), "\n0*2 1 @1000000 1\n")
}

func TestNewScheduleRefusesATaskNoScheduleHolds(t *testing.T) {
	// Task -1 without Wait was recorded as a wait, and String and Steps
	// then indexed past the waits.
	assert.PanicsWithValue(t, "sim: NewSchedule: step 1 runs task -1; a step runs a task from 0 to 4294967294, or waits (Wait set)",
		func() { sim.NewSchedule([]sim.Step{{Task: 0}, {Task: -1}}, []string{"main"}, nil) })
	assert.Panics(t, func() { sim.NewSchedule([]sim.Step{{Task: 1<<32 - 1}}, nil, nil) })
}

func TestParseScheduleRejectsBadText(t *testing.T) {
	good := sim.NewSchedule([]sim.Step{{Task: 0}, {Task: 1}}, []string{"main", "w"}, []sim.Meta{{Key: "seed", Value: "1"}}).String()
	cases := map[string]struct{ text, want string }{
		"empty":      {"", "empty text"},
		"foreign":    {"hello world\n", `not a schedule: the first line is "hello world"`},
		"version":    {strings.Replace(good, " v1", " v2", 1), `version "v2" is not supported: this build reads v1`},
		"truncated":  {strings.TrimSuffix(good, "end\n"), "truncated: the text ends"},
		"cut steps":  {strings.Replace(good, "0 1\n", "0\n", 1), "the steps line says 2 decisions, the text holds 1"},
		"bad token":  {strings.Replace(good, "0 1\n", "0 x\n", 1), `bad decision "x"`},
		"bad wait":   {strings.Replace(good, "0 1\n", "0 @-5 1\n", 1), `bad wait "@-5"`},
		"bad meta":   {strings.Replace(good, `meta "seed" "1"`, `meta seed 1`, 1), "meta: want a quoted string"},
		"task gap":   {strings.Replace(good, `task 1 "w"`, `task 3 "w"`, 1), "task: want task 1 next"},
		"no task":    {strings.Replace(good, "0 1\n", "0 7\n", 1), "decision for task 7, but only 2 tasks are listed"},
		"no steps":   {"llmdst-schedule v1\nend\n", "no steps line"},
		"too many":   {strings.Replace(good, "0 1\n", "0 1 0\n", 1), `line 6: corrupt: "0" takes the decisions past the 2 the steps line declares (2 before it)`},
		"long run":   {strings.Replace(good, "0 1\n", "0*1099511627776\n", 1), `line 6: corrupt: "0*1099511627776" takes the decisions past the 2`},
		"late wait":  {strings.Replace(good, "0 1\n", "0 1 @5\n", 1), `corrupt: "@5" takes the decisions past the 2`},
		"huge steps": {strings.Replace(good, "steps 2\n", "steps 9223372036854775807\n", 1), "line 5: steps: 9223372036854775807 decisions is more than a schedule may hold; want at most 4294967296"},
		"after end":  {good + "\n# a comment\n0 1\n", `line 10: unexpected "0 1" after the "end" line`},
		"two ends":   {good + good, `line 8: unexpected "llmdst-schedule v1" after the "end" line`},
	}
	for name, c := range cases {
		_, err := sim.ParseSchedule(c.text)
		var se *sim.ScheduleError
		if assert.ErrorAs(t, err, &se, name) {
			assert.Contains(t, err.Error(), c.want, name)
		}
	}
}

// TestParseScheduleRefusesRunsPastTheDeclaredStepsAtOnce: a line of long
// runs of alternating tasks, each token worth 2^40 decisions, under a
// steps line of 2, is refused at its first token, before memory grows with
// the runs it declares.
func TestParseScheduleRefusesRunsPastTheDeclaredStepsAtOnce(t *testing.T) {
	var b strings.Builder
	b.WriteString("llmdst-schedule v1\ntask 0 \"main\"\ntask 1 \"w\"\nsteps 2\n")
	for i := 0; i < 10_000; i++ {
		fmt.Fprintf(&b, "%d*1099511627776 ", i%2)
	}
	b.WriteString("\nend\n")
	text := b.String()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := sim.ParseSchedule(text)
	runtime.ReadMemStats(&after)
	var se *sim.ScheduleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 5, se.Line)
	assert.Contains(t, se.Msg, `"0*1099511627776" takes the decisions past the 2 the steps line declares`)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(20*len(text)), "bytes allocated to refuse %d bytes of text", len(text))
}

func TestReplayFailsWhenTheCodeNoLongerMatches(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 4}, busy)
	require.NoError(t, res.Err)

	changed := func(rt task.Runtime) error { // one worker fewer, different names
		g := task.NewGroup(rt, "g")
		g.Go("other", func() { rt.Yield("x") })
		g.Wait()
		return nil
	}
	again := sim.Run(sim.Options{Strategy: sim.Replay(res.Schedule)}, changed)
	var mm *sim.ScheduleMismatchError
	require.ErrorAs(t, again.Err, &mm)
	assert.Contains(t, again.Err.Error(), "replay diverged at step")

	short := sim.NewSchedule(res.Schedule.Steps()[:10], res.Schedule.Tasks, nil)
	again = sim.Run(sim.Options{Strategy: sim.Replay(short)}, busy)
	require.ErrorAs(t, again.Err, &mm)
	assert.Contains(t, again.Err.Error(), "the schedule ends after 10 decisions, but the run goes on")

	long := sim.NewSchedule(append(res.Schedule.Steps(), sim.Step{Task: 0}), res.Schedule.Tasks, nil)
	again = sim.Run(sim.Options{Strategy: sim.Replay(long)}, busy)
	require.ErrorAs(t, again.Err, &mm)
	assert.Contains(t, again.Err.Error(), "the run ended after")
}

func TestParseStrategy(t *testing.T) {
	for _, s := range []string{"random", "pct:2", "pct:3:500", "pct:1024", "chaos", "chaos:51.2ms", "chaos:1h0m0s", "starve:output-handler", "starve:main:800µs"} {
		st, err := sim.ParseStrategy(s)
		require.NoError(t, err, s)
		assert.Equal(t, s, st.String())
	}
	for s, want := range map[string]string{
		"bogus":                    `unknown strategy "bogus"`,
		"pct":                      "want pct:D with a depth D ≥ 1",
		"pct:0":                    "want pct:D with a depth D ≥ 1",
		"pct:2:x":                  "step estimate K ≥ 1",
		"starve:":                  "want starve:PREFIX",
		"random:3":                 "takes no argument",
		"chaos:soon":               "the longest window must be a duration from 50µs to 1h0m0s",
		"starve:x:1µs":             "the longest window must be a duration from 50µs to 1h0m0s",
		"pct:1025":                 `strategy "pct:1025": a depth of 1025 is more than PCT can use; want D ≤ 1024`,
		"pct:10000000":             "a depth of 10000000 is more than PCT can use",
		"pct:99999999999999999999": "a depth of 99999999999999999999 is more than PCT can use",
		"chaos:2562047h":           `strategy "chaos:2562047h": the longest window must be a duration from 50µs to 1h0m0s, as in 12.8ms, got "2562047h"`,
		"starve:x:1h1s":            "the longest window must be a duration from 50µs to 1h0m0s",
	} {
		_, err := sim.ParseStrategy(s)
		assert.ErrorContains(t, err, want, s)
	}
	windows := sim.StarveWindows(math.MaxInt64)
	assert.Len(t, windows, 48, "windows up to the end of time stop before they overflow")
	assert.Positive(t, windows[len(windows)-1])
}

// TestStrategiesMadeInCodeKeepTheirWindowsInBounds: ChaosUpTo and
// StarveUpTo take any duration; past the bounds ParseStrategy keeps, a
// window's end would pass the end of virtual time (and the run panicked
// on a wait before now), and the name recorded with the run would not
// parse back.
func TestStrategiesMadeInCodeKeepTheirWindowsInBounds(t *testing.T) {
	for _, c := range []struct {
		st   sim.Strategy
		want string
	}{
		{sim.ChaosUpTo(math.MaxInt64), "chaos:1h0m0s"},
		{sim.StarveUpTo("worker", math.MaxInt64), "starve:worker:1h0m0s"},
		{sim.ChaosUpTo(0), "chaos:50µs"},
		{sim.StarveUpTo("worker", -time.Second), "starve:worker:50µs"},
	} {
		assert.Equal(t, c.want, c.st.String())
		back, err := sim.ParseStrategy(c.st.String())
		require.NoError(t, err, c.want)
		assert.Equal(t, c.want, back.String())
		for seed := uint64(1); seed <= 20; seed++ {
			res := sim.Run(sim.Options{Seed: seed, Strategy: c.st}, func(rt task.Runtime) error {
				for i := range 3 {
					rt.Go(fmt.Sprint("worker-", i), func() {
						for range 5 {
							rt.Sleep(time.Hour)
							rt.Yield("worker")
						}
					})
				}
				return nil
			})
			require.NoError(t, res.Err, "%s seed %d", c.want, seed)
		}
	}
}

// frame is an annotation of the kind an engine publishes.
type frame struct {
	id    uint64
	start bool
}

func (f frame) Kind() string {
	if f.start {
		return "frame.emitted"
	}
	return "frame.delivered"
}
func (f frame) Fingerprint() uint64         { return f.id }
func (f frame) String() string              { return fmt.Sprintf("frame %d", f.id) }
func (f frame) Flow() (uint64, bool)        { return f.id, f.start }
func (f frame) withStart(b bool) frame      { f.start = b; return f }
func noteProgram(rt task.Runtime) error     { return pingPong(rt, 3) }
func pingPong(rt task.Runtime, n int) error { return pingPongNotes(rt, n, true) }

func pingPongNotes(rt task.Runtime, n int, notes bool) error {
	q := task.NewQueue[uint64](rt, task.QueueName("frames"))
	g := task.NewGroup(rt, "g")
	g.Go("producer", func() {
		for i := uint64(1); i <= uint64(n); i++ {
			if notes {
				sim.Note(rt, frame{id: i}.withStart(true))
			}
			q.Put(i)
			rt.Sleep(time.Millisecond)
		}
		q.Close()
	})
	g.Go("consumer", func() {
		for v, ok := q.Get(); ok; v, ok = q.Get() {
			if notes {
				sim.Note(rt, frame{id: v})
			}
		}
	})
	g.Wait()
	return nil
}

func TestTraceExports(t *testing.T) {
	res := sim.Run(sim.Options{Seed: 2, Strategy: sim.Chaos(), Trace: true}, noteProgram)
	require.NoError(t, res.Err)
	tr := res.Trace
	require.NotNil(t, tr)
	assert.Equal(t, []string{"main", "producer", "consumer"}, tr.Tasks)

	var text bytes.Buffer
	require.NoError(t, tr.WriteText(&text))
	assert.Contains(t, text.String(), "producer#1")
	assert.Contains(t, text.String(), "frame.delivered frame 3")
	assert.Contains(t, text.String(), "blocks at frames.get")

	var jl bytes.Buffer
	require.NoError(t, tr.WriteJSONL(&jl))
	lines := strings.Split(strings.TrimSpace(jl.String()), "\n")
	assert.Len(t, lines, len(tr.Events))
	kinds := map[string]int{}
	for _, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		kinds[m["kind"].(string)]++
	}
	assert.Equal(t, 6, kinds["note"])
	assert.Positive(t, kinds["switch"])

	var pf bytes.Buffer
	require.NoError(t, tr.WritePerfetto(&pf))
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Tid  int            `json:"tid"`
			ID   string         `json:"id"`
			Dur  float64        `json:"dur"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(pf.Bytes(), &doc))
	slices, flows := map[int]int{}, map[string]string{}
	threads := map[string]bool{}
	for _, e := range doc.TraceEvents {
		switch e.Ph {
		case "X":
			slices[e.Tid]++
			assert.Positive(t, e.Dur)
		case "s", "f":
			flows[e.ID] += e.Ph
		case "M":
			if e.Name == "thread_name" {
				threads[e.Args["name"].(string)] = true
			}
		}
	}
	for tid := 1; tid <= 3; tid++ {
		assert.Positive(t, slices[tid], "no running slice for task %d", tid-1)
	}
	assert.Equal(t, map[string]string{"1": "sf", "2": "sf", "3": "sf"}, flows, "one arrow per frame, from emission to delivery")
	assert.True(t, threads["producer #1"])
}

func TestNotesAreHashed(t *testing.T) {
	with := sim.Run(sim.Options{Seed: 2}, func(rt task.Runtime) error { return pingPongNotes(rt, 3, true) })
	without := sim.Run(sim.Options{Seed: 2}, func(rt task.Runtime) error { return pingPongNotes(rt, 3, false) })
	require.NoError(t, with.Err)
	require.NoError(t, without.Err)
	assert.Equal(t, with.Steps, without.Steps)
	assert.NotEqual(t, with.TraceHash, without.TraceHash)
}

// TestStarveOfAPrefixWithAColonParsesBack: the name of a strategy is
// recorded with every run and printed in the command that runs it again,
// so it must parse back to the same strategy when the prefix it starves
// holds a colon too ("worker:" for tasks named "worker:1", "worker:2").
func TestStarveOfAPrefixWithAColonParsesBack(t *testing.T) {
	for _, st := range []sim.Strategy{
		sim.Starve("worker:"), sim.Starve("worker:1"), sim.Starve("a:b:c"),
		sim.StarveUpTo("worker:1", 800*time.Microsecond), sim.Starve("worker:0"),
	} {
		back, err := sim.ParseStrategy(st.String())
		require.NoError(t, err, st.String())
		assert.Equal(t, st.String(), back.String())
		ran := 0
		res := sim.Run(sim.Options{Seed: 1, Strategy: back}, func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g")
			for _, name := range []string{"worker:", "worker:1", "worker:0", "a:b:c"} {
				g.Go(name, func() { rt.Yield("w"); ran++ })
			}
			g.Wait()
			return nil
		})
		require.NoError(t, res.Err, st.String())
		assert.Empty(t, res.Warnings, "%s starves the tasks its prefix names", st)
		assert.Equal(t, 4, ran)
	}
	// Typed by hand with the default window, a prefix whose last part is
	// not a duration is the prefix whole.
	st, err := sim.ParseStrategy("starve:worker:1")
	require.NoError(t, err)
	assert.Equal(t, sim.Starve("worker:1").String(), st.String())
}

// TestParseScheduleSaysALineIsTooLong: a line past what the reader holds
// is not the end of the text; calling it truncated sends whoever reads the
// error looking for a cut file.
func TestParseScheduleSaysALineIsTooLong(t *testing.T) {
	long := sim.NewSchedule([]sim.Step{{Task: 0}}, []string{"main"}, []sim.Meta{{Key: "workload", Value: strings.Repeat("x", 17<<20)}}).String()
	_, err := sim.ParseSchedule(long)
	var se *sim.ScheduleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 2, se.Line)
	assert.NotContains(t, err.Error(), "truncated")
	assert.Contains(t, err.Error(), "longer than")
}
