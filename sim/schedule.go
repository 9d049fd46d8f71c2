package sim

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ScheduleVersion is the version of the schedule text format this build
// writes and reads.
const ScheduleVersion = 1

const scheduleMagic = "llmdst-schedule"

// Step is one recorded decision: run task Task, or, when Wait is set, let
// the clock move on to Until with every runnable task withheld.
type Step struct {
	Task  int
	Wait  bool
	Until time.Duration
}

// Meta is a key and value carried by a schedule (scenario, seed, flags), so
// that a schedule file is enough to replay a run.
type Meta struct {
	Key, Value string
}

// Schedule is the record of a run's decisions. Its String form is the
// versioned text format ParseSchedule reads.
type Schedule struct {
	// Meta is free-form, in order; simrun stores what it needs to rebuild
	// the run.
	Meta []Meta
	// Tasks are the names of the tasks the recorded run started, by ID.
	Tasks []string

	runs  []uint64        // run-length encoded: task<<32 | count; waitTask<<32 | index into waits
	waits []time.Duration // the targets of wait decisions
	steps int64
	off   bool // recording is off (Options.NoRecord)
}

const waitTask = 0xffffffff

func (s *Schedule) run(i int) (task int, n int, until time.Duration) {
	r := s.runs[i]
	task, n = int(r>>32), int(uint32(r))
	if task == waitTask {
		return -1, 1, s.waits[n]
	}
	return task, n, 0
}

// NewSchedule builds a schedule from decisions, for tools that edit them.
// It panics on a step that runs a task number no schedule can hold (below
// 0, or from 2^32-1 up), as a programming error.
func NewSchedule(steps []Step, tasks []string, meta []Meta) *Schedule {
	s := &Schedule{Tasks: append([]string(nil), tasks...), Meta: append([]Meta(nil), meta...)}
	for i, st := range steps {
		if st.Wait {
			s.appendWait(st.Until)
			continue
		}
		if st.Task < 0 || st.Task >= waitTask {
			panic(fmt.Sprintf("sim: NewSchedule: step %d runs task %d; a step runs a task from 0 to %d, or waits (Wait set)", i, st.Task, waitTask-1))
		}
		s.appendRun(st.Task)
	}
	return s
}

// runBuffers holds the buffers schedules are recorded into, from run to
// run: a run takes one as it starts, and keep copies its record out at its
// final size, so the copying and collecting of a record's growth is paid
// once per buffer instead of once per run.
var runBuffers sync.Pool // of *[]uint64

// runBufferMax bounds the entries of a buffer kept in runBuffers.
const runBufferMax = 1 << 20

// record starts recording into a kept buffer, unless recording is off.
func (s *Schedule) record() {
	if s.off {
		return
	}
	if b, _ := runBuffers.Get().(*[]uint64); b != nil {
		s.runs = (*b)[:0]
	}
}

// keep gives the record its own memory, of its final size, and the buffer
// it grew in back to runBuffers.
func (s *Schedule) keep() {
	if s.off || s.runs == nil {
		return
	}
	buf := s.runs
	s.runs = slices.Clone(buf)
	if cap(buf) <= runBufferMax {
		buf = buf[:0]
		runBuffers.Put(&buf)
	}
}

func (s *Schedule) appendRun(task int) {
	if s.off {
		return
	}
	s.steps++
	if n := len(s.runs); n > 0 && s.runs[n-1]>>32 == uint64(task) && uint32(s.runs[n-1]) < 1<<31 {
		s.runs[n-1]++
		return
	}
	s.runs = append(s.runs, uint64(task)<<32|1)
}

func (s *Schedule) appendRuns(task, n int) {
	for n > 0 {
		if k := len(s.runs); k > 0 && s.runs[k-1]>>32 == uint64(task) && uint32(s.runs[k-1])+uint32(min(n, 1<<30)) < 1<<31 {
			s.runs[k-1] += uint64(min(n, 1<<30))
		} else {
			s.runs = append(s.runs, uint64(task)<<32|uint64(min(n, 1<<30)))
		}
		s.steps += int64(min(n, 1<<30))
		n -= min(n, 1<<30)
	}
}

func (s *Schedule) appendWait(until time.Duration) {
	if s.off {
		return
	}
	s.steps++
	s.runs = append(s.runs, waitTask<<32|uint64(len(s.waits)))
	s.waits = append(s.waits, until)
}

// Len returns the number of decisions.
func (s *Schedule) Len() int64 { return s.steps }

// Steps returns the decisions one by one.
func (s *Schedule) Steps() []Step {
	out := make([]Step, 0, s.steps)
	for i := range s.runs {
		task, n, until := s.run(i)
		for j := 0; j < n; j++ {
			out = append(out, Step{Task: task, Wait: task < 0, Until: until})
		}
	}
	return out
}

// Get returns the value of the first Meta with key, and whether there is one.
func (s *Schedule) Get(key string) (string, bool) {
	for _, m := range s.Meta {
		if m.Key == key {
			return m.Value, true
		}
	}
	return "", false
}

// Set replaces the value of key, or appends it.
func (s *Schedule) Set(key, value string) {
	for i := range s.Meta {
		if s.Meta[i].Key == key {
			s.Meta[i].Value = value
			return
		}
	}
	s.Meta = append(s.Meta, Meta{key, value})
}

// String renders the schedule in the text format:
//
//	llmdst-schedule v1
//	meta "seed" "42"
//	task 0 "main"
//	task 1 "engine-core"
//	steps 9
//	0*3 1 @1500000 1*2 0*2
//	end
//
// A decision is a task ID, "ID*N" for N decisions in a row, or "@NANOS" for
// a wait until that virtual time since Epoch.
func (s *Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s v%d\n", scheduleMagic, ScheduleVersion)
	for _, m := range s.Meta {
		fmt.Fprintf(&b, "meta %s %s\n", strconv.Quote(m.Key), strconv.Quote(m.Value))
	}
	for i, name := range s.Tasks {
		fmt.Fprintf(&b, "task %d %s\n", i, strconv.Quote(name))
	}
	fmt.Fprintf(&b, "steps %d\n", s.steps)
	col := 0
	for i := range s.runs {
		task, n, until := s.run(i)
		var tok string
		switch {
		case task < 0:
			tok = "@" + strconv.FormatInt(int64(until), 10)
		case n == 1:
			tok = strconv.Itoa(task)
		default:
			tok = strconv.Itoa(task) + "*" + strconv.Itoa(n)
		}
		if col > 0 && col+1+len(tok) > 100 {
			b.WriteByte('\n')
			col = 0
		}
		if col > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(tok)
		col += len(tok)
	}
	if col > 0 {
		b.WriteByte('\n')
	}
	b.WriteString("end\n")
	return b.String()
}

// ScheduleError says what is wrong with a schedule's text.
type ScheduleError struct {
	Line int // 1-based; 0 when the whole text is at fault
	Msg  string
}

func (e *ScheduleError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("sim: schedule line %d: %s", e.Line, e.Msg)
	}
	return "sim: schedule: " + e.Msg
}

// ParseSchedule reads the text format String writes. It rejects other
// versions, truncated text, malformed lines and text after the end line
// with a *ScheduleError.
func ParseSchedule(text string) (*Schedule, error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), scheduleLineMax)
	line := 0
	next := func() (string, bool) {
		for sc.Scan() {
			line++
			l := strings.TrimSpace(sc.Text())
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			return l, true
		}
		return "", false
	}
	errf := func(format string, args ...any) error {
		return &ScheduleError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	// unread is why the reader stopped before the end of the text, if it
	// did: a line too long to hold.
	unread := func() error {
		if sc.Err() == nil {
			return nil
		}
		return &ScheduleError{Line: line + 1, Msg: fmt.Sprintf("the line is longer than %d bytes, the most a schedule line may hold", scheduleLineMax)}
	}
	first, ok := next()
	if !ok {
		if err := unread(); err != nil {
			return nil, err
		}
		return nil, &ScheduleError{Msg: "empty text: want a first line \"" + scheduleMagic + " v1\""}
	}
	magic, ver, _ := strings.Cut(first, " ")
	if magic != scheduleMagic {
		return nil, errf("not a schedule: the first line is %q, want %q", clip(first), fmt.Sprintf("%s v%d", scheduleMagic, ScheduleVersion))
	}
	if ver != "v"+strconv.Itoa(ScheduleVersion) {
		return nil, errf("version %q is not supported: this build reads v%d", ver, ScheduleVersion)
	}
	s := &Schedule{}
	declared := int64(-1)
	for {
		l, ok := next()
		if !ok {
			if err := unread(); err != nil {
				return nil, err
			}
			return nil, &ScheduleError{Msg: fmt.Sprintf("truncated: the text ends after line %d without the \"end\" line", line)}
		}
		if l == "end" {
			// A schedule is one file: text after its end is a second
			// schedule appended, or an edit in the wrong place.
			if extra, ok := next(); ok {
				return nil, errf("unexpected %q after the \"end\" line: want only blank lines and # comments there", clip(extra))
			}
			if err := unread(); err != nil {
				return nil, err
			}
			break
		}
		word, rest, _ := strings.Cut(l, " ")
		switch {
		case word == "meta" && declared < 0:
			k, v, err := twoQuoted(rest)
			if err != nil {
				return nil, errf("meta: %v", err)
			}
			s.Meta = append(s.Meta, Meta{k, v})
		case word == "task" && declared < 0:
			idStr, q, _ := strings.Cut(rest, " ")
			id, err := strconv.Atoi(idStr)
			if err != nil || id != len(s.Tasks) {
				return nil, errf("task: want task %d next, got %q", len(s.Tasks), clip(l))
			}
			name, err := strconv.Unquote(q)
			if err != nil {
				return nil, errf("task %d: the name %q is not a quoted string", id, clip(q))
			}
			s.Tasks = append(s.Tasks, name)
		case word == "steps" && declared < 0:
			n, err := strconv.ParseInt(rest, 10, 64)
			if err != nil || n < 0 {
				return nil, errf("steps: want a count ≥ 0, got %q", clip(rest))
			}
			if n > ScheduleStepsMax {
				return nil, errf("steps: %d decisions is more than a schedule may hold; want at most %d", n, int64(ScheduleStepsMax))
			}
			declared = n
		case declared >= 0:
			for _, tok := range strings.Fields(l) {
				if err := s.parseToken(tok, declared); err != nil {
					return nil, errf("%v", err)
				}
			}
		default:
			return nil, errf("unexpected %q before the steps line", clip(l))
		}
	}
	if declared < 0 {
		return nil, &ScheduleError{Msg: "no steps line"}
	}
	if s.steps != declared {
		return nil, &ScheduleError{Msg: fmt.Sprintf("truncated or corrupt: the steps line says %d decisions, the text holds %d", declared, s.steps)}
	}
	for i := range s.runs {
		if task, _, _ := s.run(i); task >= 0 && task >= len(s.Tasks) && len(s.Tasks) > 0 {
			return nil, &ScheduleError{Msg: fmt.Sprintf("decision for task %d, but only %d tasks are listed", task, len(s.Tasks))}
		}
	}
	return s, nil
}

// scheduleLineMax bounds a line of a schedule's text, in bytes. String
// wraps decisions at 100 columns; only a meta value or a task name can
// come near it.
const scheduleLineMax = 16 << 20

// ScheduleStepsMax bounds the decisions a schedule's text may declare, and
// so those of a recorded run. The decisions are read run-length encoded,
// but whoever takes them one by one (Steps, shrinking) holds them all:
// 1<<32 is hours of decisions, far past DefaultStepsMax, and still a count
// the rest of the code can hold.
const ScheduleStepsMax = 1 << 32

// parseToken appends the decisions of one token, refusing any that would
// take the schedule past the declared count before it grows: a line of
// "ID*N" tokens with large N would otherwise fill memory before the count
// is checked at the end.
func (s *Schedule) parseToken(tok string, declared int64) error {
	if strings.HasPrefix(tok, "@") {
		ns, err := strconv.ParseInt(tok[1:], 10, 64)
		if err != nil || ns <= 0 {
			return fmt.Errorf("bad wait %q: want @NANOS with NANOS > 0", clip(tok))
		}
		if s.steps >= declared {
			return s.tooMany(tok, declared)
		}
		s.appendWait(time.Duration(ns))
		return nil
	}
	idStr, nStr, hasN := strings.Cut(tok, "*")
	id, err := strconv.Atoi(idStr)
	if err != nil || id < 0 || id >= waitTask {
		return fmt.Errorf("bad decision %q: want a task ID, ID*N or @NANOS", clip(tok))
	}
	n := 1
	if hasN {
		n, err = strconv.Atoi(nStr)
		if err != nil || n < 1 || n > 1<<40 {
			return fmt.Errorf("bad repeat %q: want ID*N with N ≥ 1", clip(tok))
		}
	}
	if int64(n) > declared-s.steps {
		return s.tooMany(tok, declared)
	}
	s.appendRuns(id, n)
	return nil
}

func (s *Schedule) tooMany(tok string, declared int64) error {
	return fmt.Errorf("corrupt: %q takes the decisions past the %d the steps line declares (%d before it)", clip(tok), declared, s.steps)
}

func twoQuoted(s string) (string, string, error) {
	a, rest, err := cutQuoted(s)
	if err != nil {
		return "", "", err
	}
	b, rest, err := cutQuoted(strings.TrimSpace(rest))
	if err != nil {
		return "", "", err
	}
	if strings.TrimSpace(rest) != "" {
		return "", "", fmt.Errorf("unexpected %q after the value", clip(rest))
	}
	return a, b, nil
}

func cutQuoted(s string) (string, string, error) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", fmt.Errorf("want a quoted string, got %q", clip(s))
	}
	v, _ := strconv.Unquote(q)
	return v, s[len(q):], nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Replay follows a recorded schedule strictly: it fails the run at the first
// decision the program no longer offers, and when the run goes on past the
// schedule or ends before it.
func Replay(s *Schedule) Strategy { return replayStrategy{s: s} }

type replayStrategy struct{ s *Schedule }

func (r replayStrategy) String() string { return "replay" }

func (r replayStrategy) NewPolicy(Chooser) Policy { return &replayPolicy{s: r.s} }

type replayPolicy struct {
	s *Schedule
	c cursor
}

// cursor walks a schedule's decisions one at a time.
type cursor struct {
	run  int // index into s.runs
	used int // entries taken from s.runs[run]
}

// next takes the schedule's next entry: a task (≥ 0), or -1 and a wait's
// time. ok is false once the schedule is exhausted.
func (c *cursor) next(s *Schedule) (task int, until time.Duration, ok bool) {
	for c.run < len(s.runs) {
		task, n, until := s.run(c.run)
		if c.used < n {
			c.used++
			return task, until, true
		}
		c.run++
		c.used = 0
	}
	return 0, 0, false
}

func (p *replayPolicy) Pick(v *View) Decision {
	task, until, ok := p.c.next(p.s)
	if !ok {
		return Fail(&ScheduleMismatchError{Step: v.Step, Reason: fmt.Sprintf("the schedule ends after %d decisions, but the run goes on", p.s.steps)})
	}
	if task < 0 {
		if until <= v.Now {
			return Fail(&ScheduleMismatchError{Step: v.Step, Reason: fmt.Sprintf("the schedule waits until %v, but the clock already reads %v", until, v.Now)})
		}
		return WaitUntil(until)
	}
	for i, t := range v.Candidates {
		if t.id == task {
			if task < len(p.s.Tasks) && p.s.Tasks[task] != t.name {
				return Fail(&ScheduleMismatchError{Step: v.Step, Reason: fmt.Sprintf("the schedule runs task %d %q, but task %d is now %q", task, p.s.Tasks[task], t.id, t.name)})
			}
			return Pick(i)
		}
	}
	return Fail(&ScheduleMismatchError{Step: v.Step, Reason: fmt.Sprintf("the schedule runs task %d%s, which cannot run now; runnable: %s", task, p.taskName(task), describe(v.Candidates))})
}

func (p *replayPolicy) taskName(id int) string {
	if id < len(p.s.Tasks) {
		return " " + strconv.Quote(p.s.Tasks[id])
	}
	return ""
}

func (p *replayPolicy) Finish(steps int64) error {
	if steps < p.s.steps {
		return &ScheduleMismatchError{Step: steps, Reason: fmt.Sprintf("the run ended after %d decisions, but the schedule has %d", steps, p.s.steps)}
	}
	return nil
}

func describe(ts []*Task) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %q at %q", t.id, t.name, t.point)
	}
	if len(ts) == 0 {
		b.WriteString("none")
	}
	return b.String()
}
