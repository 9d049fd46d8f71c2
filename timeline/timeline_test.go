package timeline_test

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/svgtest"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
	"github.com/llmdst/llmdst/timeline"
)

// legacySeed fails on the legacy engine with the founding race: a frame
// of the aborted abort-a reaches the collector of the reused abort-a.
const legacySeed = 1

func stale(a sim.Annotation) bool { return strings.Contains(a.String(), "STALE") }

// foundingTrace runs the founding scenario on the legacy engine with a
// full trace.
func foundingTrace(t *testing.T) (*sim.Trace, error) {
	t.Helper()
	sc, err := scenario.Lookup("abort-reuse")
	require.NoError(t, err)
	st, err := sim.ParseStrategy(sc.DefaultStrategy)
	require.NoError(t, err)
	prog, out := sc.Program(scenario.Options{Legacy: true, Seed: legacySeed})
	res := sim.Run(sim.Options{Seed: legacySeed, Strategy: st, Trace: true}, prog)
	require.NotNil(t, res.Trace)
	return res.Trace, out.Err(res.Err)
}

func write(t *testing.T, tr *sim.Trace, opts timeline.Options) string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, timeline.Write(&buf, tr, opts))
	return buf.String()
}

func TestFoundingRaceIsDrawn(t *testing.T) {
	tr, runErr := foundingTrace(t)
	require.Error(t, runErr, "seed %d of the legacy engine must fail", legacySeed)
	page := write(t, tr, timeline.Options{
		Header:    []timeline.Field{{Key: "scenario", Value: "abort-reuse"}, {Key: "seed", Value: "1"}},
		Error:     runErr.Error(),
		Highlight: scenario.IsStaleDelivery,
	})
	svg := svgtest.Parse(t, page)

	// A lane per task, named after it.
	lanes := svg.All(svgtest.Classed("lane"))
	var ids []string
	for _, l := range lanes {
		ids = append(ids, l.Attr("id"))
	}
	assert.Equal(t, []string{"lane-main", "lane-engine-core", "lane-output-handler"}, ids)
	lane := map[string]*svgtest.Element{}
	for _, l := range lanes {
		lane[l.Attr("data-task")] = l
	}

	// Every task runs, and the baton passes between them.
	for _, name := range []string{"main", "engine-core", "output-handler"} {
		assert.NotEmpty(t, lane[name].All(svgtest.Classed("run")), "%s never runs", name)
	}
	assert.NotEmpty(t, svg.All(svgtest.Classed("switch")))
	// The core sleeps a step's time and, woken by the clock, runs on with
	// no switch: its stretch starts again where it was woken.
	woken := 0
	for _, r := range lane["engine-core"].All(svgtest.Classed("run")) {
		if strings.Contains(r.Title(), "(since woken by the clock, until ") {
			woken++
		}
	}
	assert.Positive(t, woken)

	// The strategy starves the output handler: its lane is shaded, and
	// only its lane.
	starved := lane["output-handler"].All(svgtest.Classed("starve"))
	require.NotEmpty(t, starved)
	assert.Contains(t, starved[0].Title(), `withhold task 2 "output-handler"`)
	assert.Empty(t, lane["main"].All(svgtest.Classed("starve")))
	assert.Empty(t, lane["engine-core"].All(svgtest.Classed("starve")))

	// Frames flow from the core to the output handler; the stale ones are
	// red, and so is the marker of their delivery.
	flows := svg.All(svgtest.Classed("frame-flow"))
	staleFlows := svg.All(svgtest.Classed("frame-flow", "stale"))
	require.NotEmpty(t, staleFlows)
	assert.Greater(t, len(flows), len(staleFlows))
	assert.Contains(t, staleFlows[0].Title(), "STALE")
	first := firstStaleFrame(t, tr)
	assert.Equal(t, fmt.Sprintf("stale-flow-%d", first), staleFlows[0].Attr("id"), "frame %d is the first stale one", first)
	assert.Equal(t, "url(#arrow-stale)", staleFlows[0].Attr("marker-end"))
	delivered := lane["output-handler"].All(svgtest.Classed("event", "stale"))
	require.NotEmpty(t, delivered)
	assert.Contains(t, delivered[0].Title(), fmt.Sprintf("frame %d ", first))

	// The clock moves on while everything is withheld; time is labelled.
	assert.NotEmpty(t, svg.All(svgtest.Classed("wait")))
	assert.NotEmpty(t, svg.All(svgtest.Classed("time")))

	// The header says what ran and how it failed.
	assert.Contains(t, page, "abort-reuse")
	assert.Contains(t, page, "no-cross-incarnation-delivery")
	assert.Contains(t, page, `id="legend"`)
}

func TestPageNeedsNoNetwork(t *testing.T) {
	tr, _ := foundingTrace(t)
	page := write(t, tr, timeline.Options{Highlight: stale})
	for _, ref := range []string{"src=", "href=\"http", "@import", "url(http", "<link"} {
		assert.NotContains(t, page, ref)
	}
	assert.True(t, strings.HasPrefix(page, "<!DOCTYPE html>"))
	assert.Contains(t, page, "<script>")
}

func TestLongRunIsCappedAroundTheStaleFrame(t *testing.T) {
	tr, _ := foundingTrace(t)
	page := write(t, tr, timeline.Options{Highlight: stale, StepsMax: 60, FlowsMax: 3})
	svg := svgtest.Parse(t, page)
	assert.NotEqual(t, "0", svg.Attr("data-from"), "the window starts after the run's beginning")
	assert.Contains(t, page, "only decisions")
	assert.Contains(t, page, "routine frame flows are not drawn")
	// The stale frame is still drawn, from the window's edge.
	staleFlows := svg.All(svgtest.Classed("frame-flow", "stale"))
	require.NotEmpty(t, staleFlows)
	assert.True(t, staleFlows[0].HasClass("clipped"), "frame 25 was emitted before the window")
	routine := 0
	for _, f := range svg.All(svgtest.Classed("frame-flow")) {
		if !f.HasClass("stale") {
			routine++
		}
	}
	assert.LessOrEqual(t, routine, 3)
	for _, r := range svg.All(svgtest.Classed("run")) {
		assert.NotEmpty(t, r.Attr("width"))
	}
}

// ann is a test annotation.
type ann struct {
	text string
	flow uint64
	kind string
}

func (a ann) Kind() string         { return a.kind }
func (a ann) Fingerprint() uint64  { return a.flow }
func (a ann) String() string       { return a.text }
func (a ann) Flow() (uint64, bool) { return a.flow, a.kind == "send" }

var _ sim.FlowAnnotation = ann{}

// TestAnyProgramAndHostileNames draws a program that is not the engine,
// whose task names and annotations need escaping, and whose receiver
// blocks and is woken.
func TestAnyProgramAndHostileNames(t *testing.T) {
	prog := func(rt task.Runtime) error {
		q := task.NewQueue[int](rt)
		g := task.NewGroup(rt, "g")
		g.Go(`<sender & "co">`, func() {
			for i := range 3 {
				sim.Note(rt, ann{text: "send <b>" + string(rune('0'+i)) + "</b>", flow: uint64(i), kind: "send"})
				q.Put(i)
				rt.Sleep(time.Millisecond)
			}
			q.Close()
		})
		g.Go("receiver", func() {
			for {
				v, ok := q.Get()
				if !ok {
					return
				}
				text := "recv & done"
				if v == 1 {
					text = "recv STALE"
				}
				sim.Note(rt, ann{text: text, flow: uint64(v), kind: "recv"})
			}
		})
		g.Wait()
		return nil
	}
	res := sim.Run(sim.Options{Seed: 7, Strategy: sim.Random(), Trace: true}, prog)
	require.NoError(t, res.Err)
	page := write(t, res.Trace, timeline.Options{Title: "a <test>", Highlight: stale, Error: "x < y & z"})
	svg := svgtest.Parse(t, page)
	assert.NotContains(t, page, "<b>")
	assert.NotContains(t, page, "<sender")
	assert.Contains(t, page, "x &lt; y &amp; z")
	var ids []string
	for _, l := range svg.All(svgtest.Classed("lane")) {
		ids = append(ids, l.Attr("id"))
	}
	assert.Contains(t, ids, "lane-receiver")
	assert.Contains(t, ids, "lane--sender----co--")
	assert.Len(t, svg.All(svgtest.Classed("frame-flow")), 3)
	assert.Len(t, svg.All(svgtest.Classed("frame-flow", "stale")), 1)
	assert.Empty(t, svg.All(svgtest.Classed("starve")), "random withholds nobody")
	// The receiver runs after each wake, though no switch hands it the
	// baton when it is the only task left.
	recv := svg.All(func(e *svgtest.Element) bool { return e.Attr("id") == "lane-receiver" })
	require.Len(t, recv, 1)
	assert.NotEmpty(t, recv[0].All(svgtest.Classed("run")))
}

func TestEmptyTrace(t *testing.T) {
	page := write(t, &sim.Trace{}, timeline.Options{})
	svg := svgtest.Parse(t, page)
	assert.Empty(t, svg.All(svgtest.Classed("lane")))
}

func TestWriteReportsWriterErrors(t *testing.T) {
	tr, _ := foundingTrace(t)
	err := timeline.Write(failingWriter{}, tr, timeline.Options{})
	assert.ErrorIs(t, err, io.ErrClosedPipe)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestLargeTraceStaysSmall draws a run of some 100,000 decisions with a
// flow at each: the page keeps to the caps and says so.
func TestLargeTraceStaysSmall(t *testing.T) {
	const sends = 25_000
	prog := func(rt task.Runtime) error {
		q := task.NewQueue[int](rt)
		g := task.NewGroup(rt, "g")
		g.Go("sender", func() {
			for i := range sends {
				sim.Note(rt, ann{text: "send", flow: uint64(i), kind: "send"})
				q.Put(i)
				rt.Yield("sender.loop")
			}
			q.Close()
		})
		g.Go("receiver", func() {
			for {
				v, ok := q.Get()
				if !ok {
					return
				}
				text := "recv"
				if v == sends/2 {
					text = "recv STALE"
				}
				sim.Note(rt, ann{text: text, flow: uint64(v), kind: "recv"})
			}
		})
		g.Wait()
		return nil
	}
	res := sim.Run(sim.Options{Seed: 3, Strategy: sim.Random(), Trace: true}, prog)
	require.NoError(t, res.Err)
	require.Greater(t, res.Steps, int64(2*timeline.DefaultStepsMax))
	page := write(t, res.Trace, timeline.Options{Highlight: stale})
	assert.Less(t, len(page), 8<<20, "the page must stay a few megabytes at most")
	svg := svgtest.Parse(t, page)
	from, err := strconv.Atoi(svg.Attr("data-from"))
	require.NoError(t, err)
	to, err := strconv.Atoi(svg.Attr("data-to"))
	require.NoError(t, err)
	assert.Equal(t, timeline.DefaultStepsMax, to-from+1)
	assert.Contains(t, page, "only decisions")
	assert.Len(t, svg.All(svgtest.Classed("frame-flow", "stale")), 1, "the window holds the highlighted flow")
}

// TestReplayInfersStarvation draws the replay of the founding race: the
// replay strategy explains nothing, so the output handler's starvation is
// read from the clock moving on while it could run.
func TestReplayInfersStarvation(t *testing.T) {
	sc, err := scenario.Lookup("abort-reuse")
	require.NoError(t, err)
	st, err := sim.ParseStrategy(sc.DefaultStrategy)
	require.NoError(t, err)
	prog, _ := sc.Program(scenario.Options{Legacy: true, Seed: legacySeed})
	first := sim.Run(sim.Options{Seed: legacySeed, Strategy: st}, prog)
	require.Error(t, first.Err)
	prog, _ = sc.Program(scenario.Options{Legacy: true, Seed: legacySeed})
	res := sim.Run(sim.Options{Seed: legacySeed, Strategy: sim.Replay(first.Schedule), Trace: true}, prog)
	require.Equal(t, first.TraceHash, res.TraceHash)

	page := write(t, res.Trace, timeline.Options{Highlight: stale})
	svg := svgtest.Parse(t, page)
	lane := map[string]*svgtest.Element{}
	for _, l := range svg.All(svgtest.Classed("lane")) {
		lane[l.Attr("data-task")] = l
	}
	inferred := lane["output-handler"].All(svgtest.Classed("starve", "inferred"))
	require.NotEmpty(t, inferred)
	assert.Contains(t, inferred[0].Title(), "output-handler #2 could run but did not while the clock moved on")
	assert.Contains(t, page, "holds no strategy notes")
	assert.NotEmpty(t, svg.All(svgtest.Classed("frame-flow", "stale")))
}

// firstStaleFrame finds, in the trace itself, the frame number of the first
// delivery to another incarnation.
func firstStaleFrame(t *testing.T, tr *sim.Trace) uint64 {
	t.Helper()
	for _, e := range tr.Events {
		if e.Kind == sim.EvNote && scenario.IsStaleDelivery(e.Note) {
			f, ok := e.Note.(sim.FlowAnnotation)
			require.True(t, ok)
			id, _ := f.Flow()
			return id
		}
	}
	t.Fatal("the trace has no stale delivery")
	return 0
}

// TestLaneIDsAreUnique draws tasks whose names give the same slug, one of
// them the slug another gets with its task number: every lane keeps an id
// of its own.
func TestLaneIDsAreUnique(t *testing.T) {
	prog := func(rt task.Runtime) error {
		g := task.NewGroup(rt, "g")
		for _, name := range []string{"a", "a-3", "a", "A"} { // tasks 1 to 4
			g.Go(name, func() { rt.Yield("work") })
		}
		g.Wait()
		return nil
	}
	res := sim.Run(sim.Options{Seed: 1, Strategy: sim.Random(), Trace: true}, prog)
	require.NoError(t, res.Err)
	svg := svgtest.Parse(t, write(t, res.Trace, timeline.Options{}))
	seen := map[string]string{}
	lanes := svg.All(svgtest.Classed("lane"))
	require.Len(t, lanes, len(res.Trace.Tasks))
	for _, l := range lanes {
		id := l.Attr("id")
		if other, dup := seen[id]; dup {
			t.Errorf("tasks %s and %s share the lane id %q", other, l.Attr("data-task-id"), id)
		}
		seen[id] = l.Attr("data-task-id")
	}
}

// TestTheWindowIsMarkedWhereItOpened: the fixed engine's run of seed 1
// reaches the founding window, and the page marks each situation on the
// lane of the task that first reached it, named in the tooltip.
func TestTheWindowIsMarkedWhereItOpened(t *testing.T) {
	sc, err := scenario.Lookup("abort-reuse")
	require.NoError(t, err)
	st, err := sim.ParseStrategy(sc.DefaultStrategy)
	require.NoError(t, err)
	prog, out := sc.Program(scenario.Options{Seed: 1})
	res := sim.Run(sim.Options{Seed: 1, Strategy: st, Trace: true}, prog)
	require.NoError(t, out.Err(res.Err))
	svg := svgtest.Parse(t, write(t, res.Trace, timeline.Options{Highlight: scenario.IsStaleDelivery}))
	reached := func(laneID string) []string {
		lane := svg.Find(func(e *svgtest.Element) bool { return e.Attr("id") == laneID })
		require.NotNil(t, lane, laneID)
		var titles []string
		for _, c := range lane.All(svgtest.Classed("reach")) {
			titles = append(titles, c.Title())
		}
		return titles
	}
	handler := reached("lane-output-handler")
	require.Len(t, handler, 2, "stale-frame-dropped, then the window: %v", handler)
	assert.Contains(t, handler[0], "reaches stale-frame-dropped")
	assert.Contains(t, handler[1], "reaches stale-frame-after-reuse")
	main := reached("lane-main")
	require.Len(t, main, 1, "%v", main)
	assert.Contains(t, main[0], "reaches reuse-with-frames-in-flight")
}
