package scenario

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
)

// WriteStory writes a simulated run as the story of what happened. The
// notable events — requests added, aborted and finished, the core's
// aborts, the strategy starting to withhold a task, a frame delivered to an
// incarnation other than the one that produced it (STALE), the first time
// the run reaches each race window (props.Situation: the founding race's
// window opening, say) — get a line each; the routine activity between two
// of them (frames emitted, delivered and dropped, outputs taken, time
// passing, repeated windows of starvation) is summed up in one line per
// task. The situations are the run's EvReach events (task.Reach; a
// scenario's checker reports its own through it).
func WriteStory(w io.Writer, tr *sim.Trace) error {
	bw := bufio.NewWriter(w)
	st := &story{w: bw, tasks: tr.Tasks, sleeps: sleepCalls(tr)}
	st.cores = slices.ContainsFunc(tr.Tasks, func(name string) bool { return strings.HasPrefix(name, "engine-core-dp") })
	for _, e := range tr.Events {
		st.event(e)
	}
	st.flush()
	return bw.Flush()
}

type story struct {
	w       *bufio.Writer
	tasks   []string
	routine []*routine // since the last notable event, in order of appearance
	from    time.Duration
	to      time.Duration
	victim  string // the task the strategy last withheld
	waited  time.Duration
	// multi are the incarnations that asked for several sequences, whose
	// requests the story names ID#INCARNATION/SEQUENCE.
	multi map[uint64]bool
	// updating: a weight update is open, whose hold a resume leaves.
	updating bool
	// sleeps are the utility calls that were sleeps, by call, and their
	// levels (sleepCalls): the core takes a sleep as a pause first.
	sleeps map[uint64]int
	// cores: the engine has several data-parallel cores, and the story
	// says which a request was routed to.
	cores bool
}

// sleepCalls finds the sleeps among the run's utility calls, which the
// core tells as pauses until they release memory: a sleep of level 1 or 2
// by its release (core.EventSleep, which carries the level), one of level
// 0 by its return (Sleep's EventPaused). A sleep that neither released
// memory nor returned, overtaken by a resume, is told as the pause it was.
func sleepCalls(tr *sim.Trace) map[uint64]int {
	sleeps := map[uint64]int{}
	for _, e := range tr.Events {
		n, ok := e.Note.(interface{ event() core.Event })
		if e.Kind != sim.EvNote || !ok {
			continue
		}
		switch ev := n.event(); {
		case ev.Kind == core.EventSleep:
			sleeps[ev.Call] = ev.Index
		case ev.Kind == core.EventPaused && ev.Text == "Sleep":
			if _, ok := sleeps[ev.Call]; !ok {
				sleeps[ev.Call] = 0
			}
		}
	}
	return sleeps
}

// name names a request's incarnation, and its sequence when it has several.
func (st *story) name(id string, inc uint64, index int) string {
	if st.multi[inc] {
		return fmt.Sprintf("%s#%d/%d", id, inc, index)
	}
	return fmt.Sprintf("%s#%d", id, inc)
}

// routine sums up like events of one task for one request.
type routine struct {
	who, verb   string
	req         string
	n           int
	first, last int // token positions
	finished    core.FinishReason
	withheld    time.Duration
}

func (st *story) event(e sim.Event) {
	who := "sim"
	if e.Task >= 0 && e.Task < len(st.tasks) {
		who = st.tasks[e.Task]
	}
	switch e.Kind {
	case sim.EvStrategy:
		victim, window, ok := parseWithhold(e.Text)
		if !ok {
			st.notable(e.At, "strategy", e.Text)
			return
		}
		if victim == st.victim {
			st.add(e.At, &routine{who: "strategy", verb: "withholds " + victim, n: 1, withheld: window})
			return
		}
		st.victim = victim
		name, _, _ := strings.Cut(e.Text, ": withhold task ")
		st.notable(e.At, "strategy", fmt.Sprintf("withholds %s for %v (%s)", victim, window, name))
	case sim.EvReach:
		st.reached(e.At, who, e.Text)
	case sim.EvWait:
		st.waited += time.Duration(e.Arg)
		st.to = e.At + time.Duration(e.Arg)
	case sim.EvNote:
		n, ok := e.Note.(interface{ event() core.Event })
		if !ok {
			st.notable(e.At, who, e.Note.Kind()+" "+e.Note.String())
			return
		}
		st.engineEvent(e.At, who, n.event())
	}
}

// reached tells the first time the run reached a situation, unless the
// story's own lines tell it already.
func (st *story) reached(at time.Duration, who, name string) {
	s, err := props.ParseSituation(name)
	switch {
	case err != nil: // a program's own (task.Reach)
		st.notable(at, who, "reaches "+name)
	case !toldAlready.Has(s):
		st.notable(at, who, fmt.Sprintf("reaches %s: %s", s, s.Doc()))
	}
}

// toldAlready are the situations a story's own lines tell (a drop, a
// preemption, a prefix hit, the engine's death) or that nearly every run
// reaches: a line for them would say nothing new.
var toldAlready = props.SetOf(props.StaleFrameDropped, props.LateCoreAbort, props.Preempted, props.PrefixCacheHit,
	props.EngineDied, props.PauseWithRequests, props.AddWhilePaused, props.LoRAWaitedForASlot)

// engineEvent tells an engine event, as a line of its own or in a summary.
func (st *story) engineEvent(at time.Duration, who string, ev core.Event) {
	if p, ok := ev.Params.(engine.Params); ok && ev.Kind == core.EventAdd && p.N > 1 {
		if st.multi == nil {
			st.multi = map[uint64]bool{}
		}
		st.multi[ev.Incarnation] = true
	}
	req := st.name(ev.RequestID, ev.Incarnation, ev.Index)
	switch ev.Kind {
	case core.EventStep, core.EventCoreAdd:
		return
	case core.EventFrameEmitted:
		st.add(at, frameRoutine(who, "emits", req, ev))
	case core.EventFrameDropped:
		st.add(at, frameRoutine(who, "drops (no frontend state for "+ev.InternalID+")", req, ev))
	case core.EventFrameDelivered:
		if ev.Collector != ev.Incarnation || ev.CollectorIndex != ev.Index {
			what := "a previous incarnation's token"
			if ev.Collector == ev.Incarnation {
				what = "another sequence's token"
			}
			st.notable(at, who, fmt.Sprintf("delivers frame %d of %s (token %v at %d) into the collector of %s — STALE: %s",
				ev.Frame, req, ev.Tokens, ev.Position, st.name(ev.RequestID, ev.Collector, ev.CollectorIndex), what))
			return
		}
		st.add(at, frameRoutine(who, "delivers", req, ev))
	case core.EventOutput:
		if ev.Finished {
			st.notable(at, who, fmt.Sprintf("takes the final output of %s: %d token(s), %s", req, len(ev.Tokens), ev.Reason))
			return
		}
		st.add(at, &routine{who: who, verb: "takes outputs of", req: req, n: 1, first: -1})
	case core.EventAdd:
		where := ""
		if st.cores {
			where = " on core " + strconv.Itoa(ev.Engine)
		}
		if p, ok := ev.Params.(engine.Params); ok && p.LoRA != nil {
			st.notable(at, who, fmt.Sprintf("adds %s (internal id %s)%s with LoRA adapter %s (id %d)", req, ev.InternalID, where, p.LoRA.Name, p.LoRA.ID))
			return
		}
		st.notable(at, who, fmt.Sprintf("adds %s (internal id %s)%s", req, ev.InternalID, where))
	case core.EventLoRALoad:
		switch {
		case ev.Err != nil:
			st.notable(at, who, fmt.Sprintf("refuses the load of LoRA adapter %d (call %d): %v", ev.LoRA, ev.Call, ev.Err))
		case ev.Finished:
			st.notable(at, who, fmt.Sprintf("loads LoRA adapter %d's new weights in place (call %d): revision %d, which its requests sample with from the next step on", ev.LoRA, ev.Call, ev.Held))
		default:
			st.notable(at, who, fmt.Sprintf("loads LoRA adapter %d (call %d): nothing a request sees changes", ev.LoRA, ev.Call))
		}
	case core.EventLoRAPin:
		if ev.Err != nil {
			st.notable(at, who, fmt.Sprintf("refuses the pin of LoRA adapter %d (call %d): %v", ev.LoRA, ev.Call, ev.Err))
			return
		}
		st.notable(at, who, fmt.Sprintf("pins LoRA adapter %d (call %d): it keeps a slot of its own from the next step on (%d pinned)", ev.LoRA, ev.Call, ev.Held))
	case core.EventLoRARemove:
		if !ev.Finished {
			st.notable(at, who, fmt.Sprintf("removes LoRA adapter %d (call %d), which was not loaded", ev.LoRA, ev.Call))
			return
		}
		st.notable(at, who, fmt.Sprintf("removes LoRA adapter %d (call %d): unloaded and unpinned; a request of it loads it again", ev.LoRA, ev.Call))
	case core.EventLoRAWait:
		st.notable(at, who, fmt.Sprintf("holds %s back: no LoRA slot for its adapter %d, all %d taken by other adapters' running requests or pins; requests behind it may go first", req, ev.LoRA, ev.Held))
	case core.EventAbort:
		st.notable(at, who, fmt.Sprintf("aborts %s: its frontend state is removed and its collector gets the final %q output", req, ev.Reason))
	case core.EventCoreAbort:
		if ev.Incarnation == 0 {
			st.add(at, &routine{who: who, verb: "finds nothing to abort for", req: ev.InternalID, n: 1, first: -1})
			return
		}
		st.notable(at, who, fmt.Sprintf("processes the abort of %s: the core drops it", req))
	case core.EventCoreReject:
		st.notable(at, who, fmt.Sprintf("refuses the ADD of %s: %v", req, ev.Err))
	case core.EventPreempt:
		if ev.Held > 0 {
			st.notable(at, who, fmt.Sprintf("preempts %s for a reset of the prefix cache: the token its step in flight samples will be dropped", req))
			return
		}
		st.notable(at, who, fmt.Sprintf("preempts %s to free KV blocks", req))
	case core.EventPrefixHit:
		st.notable(at, who, fmt.Sprintf("admits %s from the prefix cache: its first %d token(s) are in cached blocks", req, ev.Held))
	case core.EventTokensCut:
		after := "a stop token"
		switch ev.Text {
		case "length":
			after = "its length limit"
		case "stop-string":
			after = "the token that completed a stop string"
		}
		st.notable(at, who, fmt.Sprintf("drops %d token(s) of the step's several for %s, past %s: it ends there", ev.Held, req, after))
	case core.EventDraftsDropped:
		fate := "they go"
		if ev.Text == "kept" {
			fate = "it keeps them"
		}
		st.notable(at, who, fmt.Sprintf("passes over %s, which had %d draft placeholder(s): the model holds drafts only for its last step's requests, and %s", req, ev.Held, fate))
	case core.EventCallSplit:
		mended := "left so"
		if ev.Finished {
			mended = "brought back into step"
		}
		st.notable(at, who, fmt.Sprintf("%s %d took effect on %d core(s) and not on the others: %s", ev.Text, ev.Call, ev.Held, mended))
	case core.EventKVLoad:
		st.notable(at, who, fmt.Sprintf("starts to load %d block(s) of %s's KV from host memory: it waits for them", ev.Held, req))
	case core.EventKVStore:
		st.notable(at, who, fmt.Sprintf("starts to copy %d block(s) of %s's KV to host memory", ev.Held, req))
	case core.EventKVLoadWait:
		if ev.Text == "loads" {
			st.notable(at, who, fmt.Sprintf("holds %s back before it looks in host memory: as many loads are in flight as requests may run, and it waits for one to land", req))
			break
		}
		if ev.Text == "store" {
			st.notable(at, who, fmt.Sprintf("holds %s back: a preempted request's store to host memory, of its KV, still has copies in flight, and it waits for the last to land", req))
			break
		}
		st.notable(at, who, fmt.Sprintf("holds %s back: a load in flight reads blocks of its KV in host memory, which it waits for instead of loading them again", req))
	case core.EventKVPendingCut:
		st.notable(at, who, fmt.Sprintf("computes %d block(s) of %s's KV again rather than wait for a preempted request's store to host memory, which still copies them", ev.Held, req))
	case core.EventKVStoreWait:
		why := "too many of its blocks on their way there"
		if ev.Text == "loads" {
			why = "blocks there being loaded back, kept until the loads land"
		}
		st.notable(at, who, fmt.Sprintf("finds no room in host memory for %d block(s) of %s's KV, %s: they wait for a later step", ev.Held, req, why))
	case core.EventKVStored:
		switch {
		case ev.Text == "abandoned":
			st.notable(at, who, fmt.Sprintf("lands a copy of %d block(s) of %s's KV after a reset of the prefix cache: of the weights before it, host memory keeps none of its store", ev.Held, req))
		case ev.Text == "ended":
			st.notable(at, who, fmt.Sprintf("completes the store of %s's KV as it ends, no copy in flight: host memory holds its %d block(s) for loads to find", req, ev.Held))
		case ev.Text == "preempted":
			st.notable(at, who, fmt.Sprintf("learns from the step's output that the copies of preempted %s's KV landed: its store is complete, host memory holds its %d block(s) for loads to find", req, ev.Held))
		case ev.Finished:
			st.notable(at, who, fmt.Sprintf("lands the last copy of %s's KV, %d block(s): its store is complete, host memory holds it, and its blocks go back", req, ev.Held))
		default:
			st.notable(at, who, fmt.Sprintf("lands a copy of %d block(s) of %s's KV in host memory: a load finds them once the request ended and its last copy landed", ev.Held, req))
		}
	case core.EventKVLoaded:
		if ev.Text == "abandoned" {
			st.notable(at, who, fmt.Sprintf("lands the %d block(s) of KV loaded for %s after a reset of the prefix cache: of the weights before it, they go back, and it computes again", ev.Held, req))
			return
		}
		if ev.Text == "failed" {
			then := "it computes the failed one and what follows again"
			if ev.Finished {
				then = "it ends with an error (kv_load_failure_policy fail)"
			}
			st.notable(at, who, fmt.Sprintf("lands the %d block(s) of KV loaded for %s, the last failed (the connector reports it invalid): %s", ev.Held, req, then))
			return
		}
		if ev.Finished {
			st.notable(at, who, fmt.Sprintf("lands the %d block(s) of KV loaded for %s, which has ended: its blocks go back now", ev.Held, req))
			return
		}
		st.notable(at, who, fmt.Sprintf("lands the %d block(s) of KV loaded for %s: it waits to be admitted with them", ev.Held, req))
	case core.EventFinish:
		st.notable(at, who, fmt.Sprintf("finishes %s: %s, %d token(s)", req, ev.Reason, len(ev.Tokens)))
	case core.EventIdle:
		st.notable(at, who, fmt.Sprintf("WaitIdle returns: the core holds %d request(s)", ev.Held))
	case core.EventDead:
		st.notable(at, who, fmt.Sprintf("the engine dies: %v", ev.Err))
	case core.EventKVLeak:
		st.notable(at, who, fmt.Sprintf("holds no request after step %d, yet %d KV block(s) are in use: %v", ev.Step, ev.Held, ev.Err))
	case core.EventPause:
		if level, ok := st.sleeps[ev.Call]; ok {
			st.notable(at, who, fmt.Sprintf("takes sleep %d (level %d, %s), a pause first: %s", ev.Call, level, ev.Text, pauseDoes[ev.Text]))
			return
		}
		st.notable(at, who, fmt.Sprintf("takes pause %d (%s): %s", ev.Call, ev.Text, pauseDoes[ev.Text]))
	case core.EventPauseDone:
		if _, ok := st.sleeps[ev.Call]; ok {
			st.notable(at, who, fmt.Sprintf("sleep %d's pause (%s) takes effect: no step until the wake-up", ev.Call, ev.Text))
			return
		}
		st.notable(at, who, fmt.Sprintf("pause %d (%s) takes effect: no step until a resume", ev.Call, ev.Text))
	case core.EventResume:
		if st.updating {
			st.notable(at, who, fmt.Sprintf("takes resume %d: it schedules again once the weight update finishes", ev.Call))
			return
		}
		st.notable(at, who, fmt.Sprintf("takes resume %d: it schedules again", ev.Call))
	case core.EventPaused:
		if ev.Text == "Sleep" {
			st.notable(at, who, fmt.Sprintf("Sleep (sleep %d) returns", ev.Call))
			return
		}
		st.notable(at, who, fmt.Sprintf("PauseGeneration (pause %d) returns", ev.Call))
	case core.EventSleep:
		st.notable(at, who, fmt.Sprintf("sleep %d (level %d) takes effect: the executor releases its %s, and the KV written before is gone", ev.Call, ev.Index, core.SleepTags(ev.Held)))
	case core.EventWakeUp:
		switch {
		case core.SleepTags(ev.Held) == 0 && st.updating:
			st.notable(at, who, fmt.Sprintf("takes wake-up %d (%s): nothing sleeps, it schedules again once the weight update finishes", ev.Call, ev.Text))
		case core.SleepTags(ev.Held) == 0:
			st.notable(at, who, fmt.Sprintf("takes wake-up %d (%s): nothing sleeps, it schedules again", ev.Call, ev.Text))
		case ev.Finished:
			st.notable(at, who, fmt.Sprintf("takes wake-up %d (%s) and schedules again, its %s still asleep", ev.Call, ev.Text, core.SleepTags(ev.Held)))
		default:
			st.notable(at, who, fmt.Sprintf("takes wake-up %d (%s): its %s still asleep, it stays paused", ev.Call, ev.Text, core.SleepTags(ev.Held)))
		}
	case core.EventResumeRefused:
		st.notable(at, who, fmt.Sprintf("refuses resume %d: its %s asleep, the wake-up resumes", ev.Call, core.SleepTags(ev.Held)))
	case core.EventWeightUpdate:
		if ev.Finished {
			st.updating = ev.Text != core.WeightUpdateFinish
		}
		switch {
		case !ev.Finished:
			st.notable(at, who, fmt.Sprintf("refuses the %s of a weight update (call %d): %v", ev.Text, ev.Call, ev.Err))
		case ev.Text == core.WeightUpdateStart:
			st.notable(at, who, fmt.Sprintf("starts a weight update (call %d): no step until its finish", ev.Call))
		case ev.Text == core.WeightUpdateBatch:
			st.notable(at, who, fmt.Sprintf("writes batch %d of the new weights (call %d)", ev.Held, ev.Call))
		default:
			st.notable(at, who, fmt.Sprintf("finishes the weight update (call %d) after %d batch(es): its hold on scheduling ends", ev.Call, ev.Held))
		}
	case core.EventCacheReset:
		if !ev.Finished {
			st.notable(at, who, fmt.Sprintf("refuses reset %d of the prefix cache: running requests hold KV blocks", ev.Call))
			return
		}
		st.notable(at, who, fmt.Sprintf("resets the prefix cache (call %d), having preempted %d running request(s): no later request finds a block cached before it", ev.Call, ev.Held))
	default:
		st.notable(at, who, ev.String())
	}
}

// pauseDoes says what the core does as it takes a pause of each mode.
var pauseDoes = map[string]string{
	core.PauseAbort.String(): "it aborts every request it holds, and holds back the ones added later",
	core.PauseWait.String():  "its running requests run to their ends, the waiting ones and later ones wait",
	core.PauseKeep.String():  "every request freezes where it is",
}

func frameRoutine(who, verb, req string, ev core.Event) *routine {
	r := &routine{who: who, verb: verb + " frames of", req: req, n: 1, first: ev.Position, last: ev.Position + max(len(ev.Tokens), 1) - 1}
	if ev.Finished {
		r.finished = ev.Reason
	}
	return r
}

// add folds a routine event into the summary since the last notable one.
func (st *story) add(at time.Duration, r *routine) {
	if len(st.routine) == 0 {
		st.from = at
	}
	st.to = max(st.to, at)
	for _, have := range st.routine {
		if have.who == r.who && have.verb == r.verb && have.req == r.req {
			have.n += r.n
			have.last = max(have.last, r.last)
			have.withheld += r.withheld
			if r.finished != "" {
				have.finished = r.finished
			}
			return
		}
	}
	st.routine = append(st.routine, r)
}

func (st *story) notable(at time.Duration, who, what string) {
	st.flush()
	fmt.Fprintf(st.w, "%16s  %-15s %s\n", "+"+at.String(), who, what)
}

func (st *story) flush() {
	if len(st.routine) == 0 && st.waited == 0 {
		return
	}
	span := "+" + st.from.String()
	if st.to > st.from {
		span += "…" + st.to.String()
	}
	if len(st.routine) == 0 {
		span = "+" + st.to.String()
	}
	var parts []string
	for _, r := range st.routine {
		parts = append(parts, r.String())
	}
	if st.waited > 0 {
		parts = append(parts, fmt.Sprintf("the clock moves on %v while every runnable task is withheld", st.waited))
	}
	for i, p := range parts {
		if i == 0 {
			fmt.Fprintf(st.w, "%16s  %-15s %s\n", span, "…", p)
		} else {
			fmt.Fprintf(st.w, "%16s  %-15s %s\n", "", "", p)
		}
	}
	st.routine, st.waited = nil, 0
}

func (r *routine) String() string {
	switch {
	case r.withheld > 0:
		if r.n == 1 {
			return fmt.Sprintf("%s %s once more, for %v", r.who, r.verb, r.withheld)
		}
		return fmt.Sprintf("%s %s %d more times, %v in all", r.who, r.verb, r.n, r.withheld)
	case r.first >= 0:
		s := fmt.Sprintf("%s %s %s ×%d (tokens %d…%d)", r.who, r.verb, r.req, r.n, r.first, r.last)
		if r.finished != "" {
			s += " finished " + string(r.finished)
		}
		return s
	}
	return fmt.Sprintf("%s %s %s ×%d", r.who, r.verb, r.req, r.n)
}

// parseWithhold reads a starvation note: `NAME: withhold task N "TASK" for DUR`.
func parseWithhold(text string) (victim string, window time.Duration, ok bool) {
	_, rest, found := strings.Cut(text, ": withhold task ")
	if !found {
		return "", 0, false
	}
	q1 := strings.IndexByte(rest, '"')
	q2 := strings.LastIndexByte(rest, '"')
	if q1 < 0 || q2 <= q1 {
		return "", 0, false
	}
	victim = rest[q1+1 : q2]
	d, err := time.ParseDuration(strings.TrimPrefix(rest[q2+1:], " for "))
	if err != nil {
		return "", 0, false
	}
	return victim, d, true
}

func (n note) event() core.Event { return n.ev }

// IsStaleDelivery reports whether a trace annotation is a frame delivered
// to an incarnation other than the one that produced it: the founding
// race's stale token.
func IsStaleDelivery(a sim.Annotation) bool {
	n, ok := a.(interface{ event() core.Event })
	if !ok {
		return false
	}
	ev := n.event()
	return ev.Kind == core.EventFrameDelivered && ev.Collector != ev.Incarnation
}
