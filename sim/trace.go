package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/llmdst/llmdst/task"
)

// EventKind says what an Event records.
type EventKind uint8

const (
	// EvSpawn: task Task started task Arg, named Point; Task is -1 when
	// the simulator started it, to run a timer's or a done context's callback.
	EvSpawn EventKind = iota + 1
	// EvSwitch: at Point, task Task handed the baton to task Arg.
	EvSwitch
	// EvBlock: task Task parked at Point.
	EvBlock
	// EvWake: task Task (-1: the clock) made task Arg runnable.
	EvWake
	// EvWait: the strategy withheld every runnable task; the clock moves on
	// by Arg nanoseconds.
	EvWait
	// EvAdvance: the clock moved to At.
	EvAdvance
	// EvExit: task Task ended.
	EvExit
	// EvNote: the program annotated the trace (Note).
	EvNote
	// EvStrategy: the strategy explained a decision (Text).
	EvStrategy
	// EvReach: task Task first reached situation Text (task.Reach). Like a
	// strategy note it stays out of the trace hash.
	EvReach
)

var eventKindNames = [...]string{"", "spawn", "switch", "block", "wake", "wait", "advance", "exit", "note", "strategy", "reach"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one entry of a run's trace.
type Event struct {
	Step  int64         // decisions taken before it
	At    time.Duration // virtual time since Epoch
	Task  int           // the acting task, -1 for the simulator
	Kind  EventKind
	Arg   int    // the other task, or a duration in nanoseconds for EvWait
	Point string // scheduling point, or the spawned task's name
	Text  string // EvStrategy; EvReach: the situation
	Note  Annotation
}

// Annotation is an application event recorded in a run's trace, such as an
// engine's "frame delivered". Its Fingerprint is folded into the trace hash.
type Annotation interface {
	// Kind is a short, constant name: "frame.delivered".
	Kind() string
	// Fingerprint depends only on the annotation's content, never on
	// pointers or wall time.
	Fingerprint() uint64
	// String is the human form, rendered only when a trace is written.
	String() string
}

// FlowAnnotation links annotations into a flow (an arrow in Perfetto): the
// annotation that starts flow id, then those that continue or end it.
type FlowAnnotation interface {
	Annotation
	Flow() (id uint64, start bool)
}

// Note records an application event in the trace of the simulated run that
// rt belongs to, attributed to the running task. On any other runtime it
// does nothing, so engine observers may call it unconditionally.
func Note(rt task.Runtime, a Annotation) {
	s, ok := rt.(*sched)
	if !ok || s.cur == nil {
		return
	}
	s.checkLiveCaller()
	if !s.opts.NoHash {
		s.hashNote(a.Kind(), a.Fingerprint())
	}
	if s.trace != nil {
		s.event(Event{Kind: EvNote, Task: s.cur.id, Note: a})
	}
}

// Tracing reports whether rt is a simulated run that keeps a full trace.
func Tracing(rt task.Runtime) bool {
	s, ok := rt.(*sched)
	return ok && s.trace != nil
}

// Hashing reports whether rt is a simulated run that computes a trace
// hash, so that an observer can skip fingerprinting otherwise.
func Hashing(rt task.Runtime) bool {
	s, ok := rt.(*sched)
	return ok && !s.opts.NoHash
}

// Trace is everything that happened in a run, in order.
type Trace struct {
	Tasks  []string // task names by ID
	Events []Event
}

func (s *sched) event(e Event) {
	e.Step, e.At = s.steps, s.now
	s.trace.Events = append(s.trace.Events, e)
}

func (tr *Trace) taskName(id int) string {
	if id < 0 {
		return "sim"
	}
	if id < len(tr.Tasks) {
		return tr.Tasks[id]
	}
	return "task" + strconv.Itoa(id)
}

func (tr *Trace) taskLabel(id int) string {
	if id < 0 {
		return "sim"
	}
	return tr.taskName(id) + "#" + strconv.Itoa(id)
}

// Describe renders one event as a line of text, without step and time.
func (tr *Trace) Describe(e Event) string {
	switch e.Kind {
	case EvSpawn:
		return fmt.Sprintf("starts %s", tr.taskLabel(e.Arg))
	case EvSwitch:
		return fmt.Sprintf("at %s → %s runs", e.Point, tr.taskLabel(e.Arg))
	case EvBlock:
		return "blocks at " + e.Point
	case EvWake:
		return "wakes " + tr.taskLabel(e.Arg)
	case EvWait:
		return fmt.Sprintf("every runnable task withheld: the clock moves on by %v", time.Duration(e.Arg))
	case EvAdvance:
		return "the clock moves to +" + e.At.String()
	case EvExit:
		return "exits"
	case EvNote:
		return e.Note.Kind() + " " + e.Note.String()
	case EvStrategy:
		return e.Text
	case EvReach:
		return "reaches " + e.Text
	}
	return e.Kind.String()
}

// WriteText writes one line per event: step, virtual time, task, what
// happened.
func (tr *Trace) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, e := range tr.Events {
		fmt.Fprintf(bw, "%6d %12s  %-22s %s\n", e.Step, "+"+e.At.String(), tr.taskLabel(e.Task), tr.Describe(e))
	}
	return bw.Flush()
}

type jsonEvent struct {
	Step   int64  `json:"step"`
	AtNS   int64  `json:"at_ns"`
	Task   int    `json:"task"`
	Name   string `json:"task_name"`
	Kind   string `json:"kind"`
	Arg    *int   `json:"arg,omitempty"`
	Point  string `json:"point,omitempty"`
	Note   string `json:"note,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// WriteJSONL writes one JSON object per event.
func (tr *Trace) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, e := range tr.Events {
		je := jsonEvent{Step: e.Step, AtNS: int64(e.At), Task: e.Task, Name: tr.taskName(e.Task), Kind: e.Kind.String(), Point: e.Point}
		switch e.Kind {
		case EvSpawn, EvSwitch, EvWake, EvWait:
			arg := e.Arg
			je.Arg = &arg
		case EvNote:
			je.Note = e.Note.Kind()
			je.Detail = e.Note.String()
		case EvStrategy, EvReach:
			je.Detail = e.Text
		}
		if err := enc.Encode(je); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// perfettoEvent is one record of the Chrome trace-event format.
type perfettoEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	ID   string         `json:"id,omitempty"`
	Cat  string         `json:"cat,omitempty"`
	BP   string         `json:"bp,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// PerfettoStepMicros is the width of one scheduling decision on the
// timeline of WritePerfetto. Virtual time stands still while tasks run, so
// the timeline's axis is decisions, and virtual time is an argument of every
// record and a counter track of its own.
const PerfettoStepMicros = 10

// WritePerfetto writes the trace as Chrome trace-event JSON for
// ui.perfetto.dev: a track per task, a slice for each stretch a task runs,
// instants for annotations, situations reached and strategy notes, and flow arrows between
// annotations that implement FlowAnnotation.
func (tr *Trace) WritePerfetto(w io.Writer) error {
	var out []perfettoEvent
	const pid = 1
	out = append(out, perfettoEvent{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": "llmdst simulation"}})
	for id, name := range tr.Tasks {
		out = append(out, perfettoEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: id + 1, Args: map[string]any{"name": fmt.Sprintf("%s #%d", name, id)}})
		out = append(out, perfettoEvent{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: id + 1, Args: map[string]any{"sort_index": id}})
	}
	ts := func(step int64) float64 { return float64(step * PerfettoStepMicros) }
	running, since, sincePoint := 0, int64(0), "start"
	closeSlice := func(step int64, endPoint string) {
		if running < 0 {
			return
		}
		d := ts(step) - ts(since)
		if d <= 0 {
			d = PerfettoStepMicros / 2
		}
		out = append(out, perfettoEvent{Name: tr.taskName(running), Ph: "X", Ts: ts(since), Dur: &d, Pid: pid, Tid: running + 1,
			Cat: "run", Args: map[string]any{"from": sincePoint, "to": endPoint}})
	}
	lastAt := time.Duration(-1)
	for _, e := range tr.Events {
		if e.At != lastAt {
			lastAt = e.At
			out = append(out, perfettoEvent{Name: "virtual time (ms)", Ph: "C", Ts: ts(e.Step), Pid: pid, Args: map[string]any{"ms": float64(e.At) / float64(time.Millisecond)}})
		}
		switch e.Kind {
		case EvSwitch:
			closeSlice(e.Step, e.Point)
			running, since, sincePoint = e.Arg, e.Step, e.Point
		case EvExit:
			if e.Task == running {
				closeSlice(e.Step, "exit")
				running = -1
			}
		case EvNote:
			ev := perfettoEvent{Name: e.Note.Kind(), Ph: "i", S: "t", Ts: ts(e.Step) + 1, Pid: pid, Tid: e.Task + 1, Cat: "note",
				Args: map[string]any{"detail": e.Note.String(), "virtual_time": "+" + e.At.String()}}
			out = append(out, ev)
			if f, ok := e.Note.(FlowAnnotation); ok {
				id, start := f.Flow()
				ph := "f"
				if start {
					ph = "s"
				}
				out = append(out, perfettoEvent{Name: "frame", Ph: ph, Ts: ts(e.Step) + 1, Pid: pid, Tid: e.Task + 1, Cat: "flow",
					ID: strconv.FormatUint(id, 16), BP: "e"})
			}
		case EvReach:
			out = append(out, perfettoEvent{Name: tr.Describe(e), Ph: "i", S: "t", Ts: ts(e.Step) + 1, Pid: pid, Tid: e.Task + 1, Cat: "reach",
				Args: map[string]any{"virtual_time": "+" + e.At.String()}})
		case EvStrategy, EvWait:
			tid := 0
			if e.Task >= 0 {
				tid = e.Task + 1
			}
			out = append(out, perfettoEvent{Name: tr.Describe(e), Ph: "i", S: "g", Ts: ts(e.Step), Pid: pid, Tid: tid, Cat: "strategy",
				Args: map[string]any{"virtual_time": "+" + e.At.String()}})
		}
	}
	if len(tr.Events) > 0 {
		closeSlice(tr.Events[len(tr.Events)-1].Step+1, "end")
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if _, err := bw.WriteString(`{"displayTimeUnit":"ns","traceEvents":[`); err != nil {
		return err
	}
	for i, ev := range out {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
		if err := enc.Encode(ev); err != nil {
			return err
		}
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// Where returns the running task of the simulated run rt belongs to and the
// scheduling point it last passed, so that a checker can say where a
// violation was detected. ok is false on any other runtime.
func Where(rt task.Runtime) (taskName, point string, ok bool) {
	s, isSim := rt.(*sched)
	if !isSim || s.cur == nil {
		return "", "", false
	}
	return s.cur.name, s.cur.point, true
}

// NoteHash folds an application event into the trace hash of the simulated
// run rt belongs to without recording it: the cheap form of Note for runs
// that keep no trace. It does nothing on any other runtime.
func NoteHash(rt task.Runtime, kind string, fingerprint uint64) {
	s, ok := rt.(*sched)
	if !ok || s.cur == nil || s.opts.NoHash {
		return
	}
	s.checkLiveCaller()
	s.hashNote(kind, fingerprint)
}

// hashNote folds an application event into the trace hash.
func (s *sched) hashNote(kind string, fingerprint uint64) {
	s.hash.word(hkNote)
	s.hashPoint(kind)
	s.hash.word(fingerprint)
}
