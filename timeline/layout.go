package timeline

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/sim"
)

// Limits of a drawing.
const (
	// DefaultStepsMax is Options.StepsMax when it is 0: about the most
	// decisions a browser scrolls through comfortably.
	DefaultStepsMax = 4000
	// DefaultFlowsMax is Options.FlowsMax when it is 0.
	DefaultFlowsMax = 2000
	// markLinesMax bounds the lines of one marker's tooltip.
	markLinesMax = 24
)

// layout is what a trace draws, within the window of steps [from, to].
type layout struct {
	tasks    []string
	steps    int64 // decisions in the whole run
	from, to int64 // the window drawn, inclusive

	runs     []stretch
	switches []baton
	starves  []starve
	waits    []wait
	notes    []strategyNote
	marks    []*mark
	flows    []flow
	ticks    []tick
	end      time.Duration // virtual time at the end

	flowsLeftOut int  // routine flows over the cap
	inferred     bool // no strategy note says who was withheld: starvation is inferred
	lanes        []int
	laneIDs      map[int]string // looked up, never ranged
	laneOf       map[int]int    // task → position among lanes; looked up, never ranged
}

// stretch is a task running from one decision to another.
type stretch struct {
	task       int
	from, to   int64
	since, end string // the points it started and stopped at
	at         time.Duration
}

// baton is a switch: at point, task from handed the baton to task to.
type baton struct {
	step     int64
	from, to int
	point    string
	at       time.Duration
}

// starve is a window in which the strategy withheld task.
type starve struct {
	task      int
	from, to  int64
	at, until time.Duration
	text      string
	ended     string // why the shading stops
	window    time.Duration
	inferred  bool // from the trace's waits, not from a strategy note
}

// wait is the clock moving on while every runnable task was withheld.
type wait struct {
	step int64
	at   time.Duration
	by   time.Duration
}

// strategyNote is a strategy event other than a starvation window, or a
// situation a task reached (reach).
type strategyNote struct {
	step  int64
	task  int // the task it names, -1 for none
	at    time.Duration
	text  string
	reach bool // a situation (task.Reach), drawn apart from the strategy's
}

// mark is the application events of one task at one decision.
type mark struct {
	task      int
	step      int64
	at        time.Duration
	kinds     []string // distinct, in order
	lines     []string
	more      int // lines left out
	stale     bool
	notable   bool   // holds an event other than a routine flow
	label     string // the first notable event, shortened
	flowStart bool
	flowEnd   bool
}

// flow is an arrow from the annotation that started a flow to one that
// continued or ended it.
type flow struct {
	id               uint64
	fromTask, toTask int
	fromStep, toStep int64
	clipped          bool // it started before the window
	stale            bool
	kind             string // the ending annotation's kind
	text             string
}

// tick is a change of virtual time.
type tick struct {
	step int64
	at   time.Duration
}

// plan computes what to draw.
func plan(tr *sim.Trace, opts Options) *layout {
	l := &layout{tasks: tr.Tasks, laneIDs: map[int]string{}, laneOf: map[int]int{}}
	highlight := opts.Highlight
	if highlight == nil {
		highlight = func(sim.Annotation) bool { return false }
	}
	stepsMax := int64(opts.StepsMax)
	if stepsMax <= 0 {
		stepsMax = DefaultStepsMax
	}
	flowsMax := opts.FlowsMax
	if flowsMax <= 0 {
		flowsMax = DefaultFlowsMax
	}

	// The window: the whole run, or stepsMax decisions around the first
	// highlighted event, or up to the end.
	focus := int64(-1)
	withholds := false
	for _, e := range tr.Events {
		l.steps = max(l.steps, e.Step+1)
		l.end = max(l.end, e.At)
		switch {
		case e.Kind == sim.EvNote && focus < 0 && highlight(e.Note):
			focus = e.Step
		case e.Kind == sim.EvStrategy && !withholds:
			_, _, withholds = parseWithhold(e.Text)
		}
	}
	l.inferred = !withholds
	l.from, l.to = 0, max(l.steps-1, 0)
	if l.steps > stepsMax {
		if focus < 0 {
			focus = l.steps - 1
		}
		l.from = max(0, focus-stepsMax*3/4)
		l.to = min(l.steps-1, l.from+stepsMax-1)
		l.from = max(0, l.to-stepsMax+1)
	}

	notable := opts.Notable
	if notable == nil {
		notable = func(sim.Annotation) bool { return true }
	}
	b := builder{l: l, highlight: highlight, notable: notable, flowsMax: flowsMax, running: -1, holder: -1,
		open: map[uint64]flowStart{}, lastMark: map[int]*mark{}, woken: map[int]wake{}}
	b.ready = make([]readiness, len(tr.Tasks))
	for t := range b.ready {
		b.ready[t].since = -1
	}
	lastAt := time.Duration(-1)
	for i, e := range tr.Events {
		if e.At != lastAt {
			lastAt = e.At
			if l.in(e.Step) {
				l.ticks = append(l.ticks, tick{step: e.Step, at: e.At})
			}
		}
		b.closeStarve(e)
		switch e.Kind {
		case sim.EvSpawn:
			b.becameReady(e.Arg, e.Step, e.At)
			if e.Task < 0 && b.running < 0 && b.holder < 0 {
				b.begin(e.Arg, e.Step, "start", e.At) // the first task
			}
			b.resume(e, i)
		case sim.EvSwitch:
			if b.running != e.Task {
				b.resume(e, i)
			}
			preempted := b.holder != e.Task // it neither blocked nor exited
			b.stop(e.Step, e.Point)
			if preempted {
				b.becameReady(e.Task, e.Step, e.At)
			}
			if l.in(e.Step) {
				l.switches = append(l.switches, baton{step: e.Step, from: e.Task, to: e.Arg, point: e.Point, at: e.At})
			}
			b.begin(e.Arg, e.Step, e.Point, e.At)
		case sim.EvBlock:
			b.resume(e, i)
			b.stop(e.Step, "blocks at "+e.Point)
			b.holder, b.blockedAt = e.Task, i
		case sim.EvExit:
			b.resume(e, i)
			b.stop(e.Step, "exit")
			b.holder, b.blockedAt = e.Task, i
		case sim.EvWake:
			if e.Task >= 0 {
				b.resume(e, i)
			}
			b.woken[e.Arg] = wake{index: i, step: e.Step}
			b.becameReady(e.Arg, e.Step, e.At)
		case sim.EvWait:
			if l.in(e.Step) {
				l.waits = append(l.waits, wait{step: e.Step, at: e.At, by: time.Duration(e.Arg)})
			}
			for t := range b.ready {
				if b.ready[t].since >= 0 {
					b.ready[t].waited += time.Duration(e.Arg)
				}
			}
		case sim.EvStrategy:
			b.strategy(e)
		case sim.EvReach:
			if l.in(e.Step) {
				l.notes = append(l.notes, strategyNote{step: e.Step, task: e.Task, at: e.At, text: "reaches " + e.Text, reach: true})
			}
		case sim.EvNote:
			b.resume(e, i)
			b.note(e)
		}
	}
	last := l.steps
	b.stop(last, "end")
	for t := range b.ready {
		b.ran(t, last, l.end)
	}
	if b.starving != nil {
		b.starving.to, b.starving.ended = last, "the run ended"
		b.keepStarve()
	}
	l.pickLanes()
	return l
}

// readiness is a task's wait for the baton: since the step it could run
// (-1: it is running or blocked), and how far the clock moved meanwhile.
type readiness struct {
	since  int64
	at     time.Duration
	waited time.Duration
}

// wake is the last wake of a task: its event's index and step.
type wake struct {
	index int
	step  int64
}

// flowStart is where an open flow began.
type flowStart struct {
	task int
	step int64
}

// builder walks the events once, keeping the state that spans them.
type builder struct {
	l         *layout
	highlight func(sim.Annotation) bool
	notable   func(sim.Annotation) bool
	flowsMax  int
	routine   int // routine flows drawn

	running   int // the task whose stretch is open, -1 for none
	since     int64
	sincePt   string
	sinceAt   time.Duration
	holder    int          // the task that blocked or exited holding the baton, -1 for none
	blockedAt int          // its event's index
	woken     map[int]wake // looked up, never ranged

	starving *starve
	ready    []readiness
	open     map[uint64]flowStart // looked up, never ranged
	lastMark map[int]*mark        // looked up, never ranged
}

func (b *builder) begin(task int, step int64, point string, at time.Duration) {
	b.running, b.since, b.sincePt, b.sinceAt = task, step, point, at
	b.holder = -1
	b.ran(task, step, at)
}

// becameReady notes that task may run from step on.
func (b *builder) becameReady(task int, step int64, at time.Duration) {
	if task < 0 || task >= len(b.ready) || b.ready[task].since >= 0 {
		return
	}
	b.ready[task] = readiness{since: step, at: at}
}

// ran ends the task's wait for the baton. Without the strategy's notes, a
// wait in which the clock moved on is drawn as starvation: the task could
// run, and time passed without it.
func (b *builder) ran(task int, step int64, at time.Duration) {
	if task < 0 || task >= len(b.ready) {
		return
	}
	r := b.ready[task]
	b.ready[task] = readiness{since: -1}
	if r.since < 0 || r.waited == 0 || !b.l.inferred {
		return
	}
	b.l.keepStarve(starve{task: task, from: r.since, to: step, at: r.at, until: at, window: r.waited, inferred: true,
		text:  fmt.Sprintf("%s #%d could run but did not while the clock moved on %v", b.l.tasks[task], task, r.waited),
		ended: "it ran"})
}

func (b *builder) stop(step int64, point string) {
	if b.running < 0 {
		return
	}
	l := b.l
	s := stretch{task: b.running, from: b.since, to: step, since: b.sincePt, end: point, at: b.sinceAt}
	if from, to, ok := l.clip(s.from, s.to); ok {
		s.from, s.to = from, to
		l.runs = append(l.runs, s)
	}
	b.running = -1
}

// resume reopens the stretch of a task that acts again after it blocked
// and was woken without a switch: the strategy picked it again.
func (b *builder) resume(e sim.Event, i int) {
	if e.Task < 0 || b.running >= 0 || e.Task != b.holder {
		return
	}
	w, ok := b.woken[e.Task]
	if !ok || w.index < b.blockedAt {
		return // it hands the baton on from where it blocked
	}
	b.begin(e.Task, w.step, "woken by the clock", e.At)
}

// strategy records a strategy note: a starvation window, or a marker.
func (b *builder) strategy(e sim.Event) {
	l := b.l
	victim, window, ok := parseWithhold(e.Text)
	if !ok {
		if l.in(e.Step) {
			l.notes = append(l.notes, strategyNote{step: e.Step, task: noteTask(e.Text, len(l.tasks)), at: e.At, text: e.Text})
		}
		return
	}
	if b.starving != nil {
		b.starving.to, b.starving.ended = e.Step, "the strategy picked a new victim"
		b.keepStarve()
	}
	if victim < 0 || victim >= len(l.tasks) {
		return
	}
	b.starving = &starve{task: victim, from: e.Step, at: e.At, until: e.At + window, window: window, text: e.Text}
}

// closeStarve ends the open starvation window once the clock has reached
// its end, or its victim has exited.
func (b *builder) closeStarve(e sim.Event) {
	s := b.starving
	switch {
	case s == nil:
		return
	case e.At >= s.until:
		s.to, s.ended = e.Step, "its window ran out at +"+s.until.String()
	case e.Kind == sim.EvExit && e.Task == s.task:
		s.to, s.ended = e.Step, "the task exited"
	default:
		return
	}
	b.keepStarve()
}

func (b *builder) keepStarve() {
	s := b.starving
	b.starving = nil
	b.l.keepStarve(*s)
}

// keepStarve keeps a starvation window if it overlaps the window drawn.
func (l *layout) keepStarve(s starve) {
	if from, to, ok := l.clip(s.from, s.to); ok {
		s.from, s.to = from, to
		l.starves = append(l.starves, s)
	}
}

// in reports whether a step falls in the window drawn.
func (l *layout) in(step int64) bool { return step >= l.from && step <= l.to }

// clip cuts the stretch of steps from…to to the window drawn, reporting
// whether anything of it is left.
func (l *layout) clip(from, to int64) (int64, int64, bool) {
	if to < l.from || from > l.to {
		return 0, 0, false
	}
	return max(from, l.from), min(to, l.to+1), true
}

// note records an application event: a marker, and an arrow when it
// continues or ends a flow.
func (b *builder) note(e sim.Event) {
	l := b.l
	hl := b.highlight(e.Note)
	f, isFlow := e.Note.(sim.FlowAnnotation)
	var id uint64
	start := false
	if isFlow {
		id, start = f.Flow()
		if start {
			b.open[id] = flowStart{task: e.Task, step: e.Step}
		}
	}
	if !l.in(e.Step) {
		return
	}
	m := b.lastMark[e.Task]
	if m == nil || m.step != e.Step {
		m = &mark{task: e.Task, step: e.Step, at: e.At}
		b.lastMark[e.Task] = m
		l.marks = append(l.marks, m)
	}
	kind := e.Note.Kind()
	if !slices.Contains(m.kinds, kind) {
		m.kinds = append(m.kinds, kind)
	}
	text := e.Note.String()
	if len(m.lines) < markLinesMax {
		m.lines = append(m.lines, text)
	} else {
		m.more++
	}
	m.flowStart = m.flowStart || start
	m.flowEnd = m.flowEnd || isFlow && !start
	if hl || !isFlow && b.notable(e.Note) {
		if !m.notable || hl && !m.stale {
			m.label = shorten(text, 40)
		}
		m.notable = true
	}
	m.stale = m.stale || hl
	if !isFlow || start {
		return
	}
	from, ok := b.open[id]
	if !ok {
		return // its start was not recorded
	}
	if !hl && b.routine >= b.flowsMax {
		l.flowsLeftOut++
		return
	}
	if !hl {
		b.routine++
	}
	fl := flow{id: id, fromTask: from.task, fromStep: from.step, toTask: e.Task, toStep: e.Step, stale: hl, kind: kind, text: text}
	if fl.fromStep < l.from {
		fl.fromStep, fl.clipped = l.from, true
	}
	l.flows = append(l.flows, fl)
}

// pickLanes gives a lane to every task with something drawn in the
// window, in task order.
func (l *layout) pickLanes() {
	used := make([]bool, len(l.tasks))
	use := func(t int) {
		if t >= 0 && t < len(used) {
			used[t] = true
		}
	}
	for _, r := range l.runs {
		use(r.task)
	}
	for _, s := range l.switches {
		use(s.from)
		use(s.to)
	}
	for _, s := range l.starves {
		use(s.task)
	}
	for _, m := range l.marks {
		use(m.task)
	}
	for _, n := range l.notes {
		use(n.task)
	}
	seen := map[string]bool{} // looked up, never ranged
	for t, name := range l.tasks {
		if !used[t] {
			continue
		}
		id := "lane-" + slug(name)
		// Another task's name may give the id with a number already:
		// tasks "a", "a-3" and a second "a" as task 3.
		for seen[id] {
			id += "-" + strconv.Itoa(t)
		}
		seen[id] = true
		l.laneOf[t] = len(l.lanes)
		l.laneIDs[t] = id
		l.lanes = append(l.lanes, t)
	}
}

// lanesLeftOut is how many tasks have no lane in the window.
func (l *layout) lanesLeftOut() int { return len(l.tasks) - len(l.lanes) }

// parseWithhold reads a starvation note of sim's starving strategies:
// `NAME: withhold task N "TASK" for DUR`.
func parseWithhold(text string) (task int, window time.Duration, ok bool) {
	_, rest, found := strings.Cut(text, ": withhold task ")
	if !found {
		return 0, 0, false
	}
	num, rest, found := strings.Cut(rest, " ")
	if !found {
		return 0, 0, false
	}
	task, err := strconv.Atoi(num)
	if err != nil {
		return 0, 0, false
	}
	q := strings.LastIndexByte(rest, '"')
	if q < 0 {
		return 0, 0, false
	}
	d, err := time.ParseDuration(strings.TrimPrefix(rest[q+1:], " for "))
	if err != nil {
		return 0, 0, false
	}
	return task, d, true
}

// noteTask finds the task a strategy note names ("... task 3 ..."), or -1.
func noteTask(text string, tasks int) int {
	_, rest, found := strings.Cut(text, " task ")
	if !found {
		return -1
	}
	num, _, _ := strings.Cut(rest, " ")
	t, err := strconv.Atoi(num)
	if err != nil || t < 0 || t >= tasks {
		return -1
	}
	return t
}

// slug makes a task name usable in an element id.
func slug(name string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('-')
		}
	}
	if sb.Len() == 0 {
		return "task"
	}
	return sb.String()
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// class is the CSS class a note's marker is drawn with.
func (n strategyNote) class() string {
	if n.reach {
		return "reach"
	}
	return "strategy"
}
