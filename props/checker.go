package props

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
)

// The properties a Checker verifies.
const (
	// NoStaleDelivery: a frame is delivered only to the incarnation that
	// produced it.
	NoStaleDelivery = "no-cross-incarnation-delivery"
	// EndsExactlyOnce: every accepted request ends, once.
	EndsExactlyOnce = "each-request-ends-exactly-once"
	// DeltasConcatenate: Delta outputs concatenate, and Cumulative outputs
	// extend one another, to the request's final tokens and text; FinalOnly
	// returns them once. The text is the detokenization of the tokens the
	// caller received, cut before the first stop string that ends after
	// the first MinTokens tokens (the request then finishes with reason
	// stop and no more tokens); a stop token that finished the request is
	// not in it; a running request's text holds back its tail, as long as
	// its longest stop string less one character. Each sequence of a
	// request with N > 1 is held to this as a request of its own; the
	// request's outputs each carry at least one sequence, and the one that
	// says finished is the last, taken once every sequence finished.
	DeltasConcatenate = "deltas-concatenate-to-the-final-output"
	// NothingAfterFinish: no output reaches a caller after the finished one.
	NothingAfterFinish = "nothing-after-finish"
	// ModelTokens: token i of a request is the model's token i for its
	// prompt, as the request samples it: below MinTokens a token that would
	// stop it gives way to the next (core.SampleAt).
	ModelTokens = "token-i-is-the-models-token-i"
	// ReuseFinishesNormally: a reused id's new request, unless its caller
	// aborted it, the engine died or a failed load of its KV ended it
	// (core/kv-load-fails under kv_load_failure_policy fail), finishes with
	// reason length or stop and the right number of tokens.
	ReuseFinishesNormally = "reused-id-finishes-normally"
	// EndsWhereTheModelStops: a request that finished on its own, for
	// length or stop, ends where its sequence must: no token after its
	// first MinTokens but its last is one that stops it (eos unless
	// IgnoreEOS, one of StopTokenIDs), it has at most MaxTokens tokens,
	// and one that finished for length has MaxTokens or fills the model
	// length. A step that yields several tokens (speculative decoding)
	// must take them one by one.
	EndsWhereTheModelStops = "ends-where-the-model-stops"
	// WaitIdleMeansIdle: when WaitIdle returns, the core holds nothing,
	// and every frame it emitted has reached the output handler.
	WaitIdleMeansIdle = "wait-idle-means-the-core-holds-nothing"
	// PausedRunsNothing: once a pause took effect, the core runs no step
	// until it takes a resume.
	PausedRunsNothing = "a-paused-engine-runs-no-step"
	// PauseReturnsAfterItsOutputs: when PauseGeneration returns, every
	// frame the core emitted before the pause took effect has reached the
	// output handler — under PauseAbort, every request the pause aborted
	// has ended.
	PauseReturnsAfterItsOutputs = "pause-returns-after-its-outputs"
	// KVBlocksAccounted: whenever the core holds no request, no KV block
	// is in use (the core reports one that is as it goes empty,
	// core.EventKVLeak); and once an engine is closed, every KV block of
	// its core is free or held by a request the core still holds, as many
	// times as its reference count says (engine.AsyncLLM.CheckKV): a clean
	// Close ends every request, so then none is held, and a block an
	// aborted request never gave back is a leak. Checked as the events
	// arrive, and by Checker.CheckKV after Close.
	KVBlocksAccounted = "kv-blocks-accounted-for"
	// AsleepRunsNothing: while any of the executor's memory sleeps (from
	// a sleep's release to the wake-up that restores the last of it), the
	// core runs no step: a forward pass would read released memory.
	AsleepRunsNothing = "an-asleep-engine-runs-no-step"
	// UpdateRunsNothing: from a weight update's start to its finish the
	// core runs no step: a forward pass would read weights half replaced.
	UpdateRunsNothing = "no-step-during-a-weight-update"
	// WeightsWrittenAwake: a weight update writes the executor's weights
	// only while they are awake (the core refuses its calls otherwise).
	WeightsWrittenAwake = "weights-written-only-awake"
	// LoRASlotsSuffice: no step's batch uses more LoRA adapters than the
	// executor has slots (engine.Config.MaxLoRAs; SetLoRASlots).
	LoRASlotsSuffice = "a-step-uses-at-most-max-loras-adapters"
	// AbortReachesItsCore: with several data-parallel cores, the core that
	// takes an abort of a sequence is the one its ADD went to (the frontend
	// sends its ABORT nowhere else): an abort that reaches another core
	// leaves the sequence running for nobody. And the core that takes an
	// abort of a sequence it holds stops it: it emits no frame of it after.
	AbortReachesItsCore = "abort-reaches-its-core"
	// StepWithinBudget: no step schedules more requests than
	// engine.Config.MaxNumSeqs or more tokens than MaxNumBatchedTokens
	// (vLLM's asserts on max_num_running_reqs and max_num_scheduled_tokens;
	// SetBudget).
	StepWithinBudget = "a-step-stays-within-its-budget"
)

// All lists every property, in the order of DESIGN's list, then the
// pause's, then the KV cache's, then the sleep's, then the weight
// update's, then LoRA's, then data parallelism's.
var All = []string{NoStaleDelivery, EndsExactlyOnce, DeltasConcatenate, NothingAfterFinish, ModelTokens, ReuseFinishesNormally, WaitIdleMeansIdle,
	PausedRunsNothing, PauseReturnsAfterItsOutputs, KVBlocksAccounted, AsleepRunsNothing, UpdateRunsNothing, WeightsWrittenAwake, LoRASlotsSuffice,
	AbortReachesItsCore, EndsWhereTheModelStops, StepWithinBudget}

// Doc returns what the property named prop promises, in a sentence for
// someone reading a failure, or "" when prop names none (simrun list
// -properties prints them).
func Doc(prop string) string { return docs[prop] }

var docs = map[string]string{
	NoStaleDelivery:             "a frame is delivered only to the incarnation of its request id that produced it: a reused id's new request never receives a token of an earlier one (the founding race)",
	EndsExactlyOnce:             "every request the engine accepted ends, once: with its finished output or with an error",
	DeltasConcatenate:           "Delta outputs concatenate, and Cumulative outputs extend one another, to the request's final tokens and text, which FinalOnly returns once; the text is the tokens' detokenization, cut before a stop string",
	NothingAfterFinish:          "no output reaches a caller after the finished one",
	ModelTokens:                 "token i of a request is the model's token i for its prompt (below MinTokens a token that would stop it gives way to the next)",
	ReuseFinishesNormally:       "a reused id's new request, unless its caller aborted it, the engine died or a failed load of its KV ended it, finishes with reason length or stop and the right number of tokens",
	WaitIdleMeansIdle:           "when WaitIdle returns, the core holds no request and every frame it emitted has reached the output handler",
	PausedRunsNothing:           "once a pause took effect, the core runs no step until it takes a resume",
	PauseReturnsAfterItsOutputs: "when PauseGeneration returns, every frame the core emitted before the pause took effect has reached the output handler; under PauseAbort, every request the pause aborted has ended",
	KVBlocksAccounted:           "whenever the core holds no request, no KV block is in use; once the engine is closed, every KV block is free or held by a request the core still holds, as many times as its reference count says: a block an aborted request never gave back is a leak",
	AsleepRunsNothing:           "while any of the executor's memory sleeps, from a sleep's release to the wake-up that restores the last of it, the core runs no step",
	UpdateRunsNothing:           "from a weight update's start to its finish the core runs no step, whatever resumes or wake-ups come between: a forward pass would read weights half replaced",
	WeightsWrittenAwake:         "a weight update writes the executor's weights only while they are awake: while they sleep its calls are refused",
	LoRASlotsSuffice:            "no step's batch uses more LoRA adapters than the executor has LoRA slots (max_loras): a waiting request of another adapter waits for a slot",
	EndsWhereTheModelStops:      "a request that finished on its own ends where its sequence must: at its first token past MinTokens that stops it, at MaxTokens, or at the model length, never past them",
	AbortReachesItsCore:         "an abort of a request reaches the core its ADD went to (with several data-parallel cores, no other), and there it stops the request: the core emits no frame of it after, where it would run on for nobody",
	StepWithinBudget:            "no step schedules more requests than max_num_seqs or computes more tokens than max_num_batched_tokens, draft tokens counted",
}

// Violation is a property that did not hold.
type Violation struct {
	Property string
	Detail   string
	// Event is the index of the event that showed it, from 0.
	Event int
	// Task and Point say where the violation was detected, when the checker
	// runs under the simulator (see Checker.Where).
	Task, Point string
	// AtDeadlock: the run ended with every task blocked, and the checker
	// found the violation in what that left (a request never ended).
	AtDeadlock bool
}

func (v *Violation) Error() string {
	where := ""
	switch {
	case v.Task != "":
		where = fmt.Sprintf(" (detected in task %s after %s)", v.Task, v.Point)
	case v.AtDeadlock:
		where = " (at a deadlock: every task blocked)"
	}
	return fmt.Sprintf("property %s violated: %s%s", v.Property, v.Detail, where)
}

// Signature is the violation's failure mode (see sim.Signature): the
// property and where it was detected, without the detail's numbers and
// requests.
func (v *Violation) Signature() string {
	switch {
	case v.Task != "":
		return fmt.Sprintf("%s (in %s after %s)", v.Property, v.Task, v.Point)
	case v.AtDeadlock:
		return v.Property + " (at a deadlock)"
	}
	return v.Property
}

// incarnation is what the checker knows of one AddRequest, or of one
// sequence of it when it asked for N > 1: each sequence is checked as a
// request of its own.
type incarnation struct {
	id        string
	internal  string // the id the core knows it by
	n         uint64
	index     int            // the sequence (engine.Params.N > 1), else 0
	more      []*incarnation // sequences 1 to N−1, on sequence 0
	params    engine.Params
	sampling  core.SamplingParams // params as the core samples by
	promptLen int
	key       uint64
	// lora is the sequence's LoRA adapter, nil for the base model.
	lora  *seqLoRA
	reuse bool // the id was used before
	// prev and next are the incarnations of the same id before and after
	// this one, 0 for none (on sequence 0).
	prev, next uint64
	// inCore counts the sequences of the incarnation the core holds, and
	// inFlight the frames they produced that the output processor has not
	// taken yet (on sequence 0).
	inCore, inFlight int
	// engine is the data-parallel rank of the core that took the
	// sequence's ADD, and input that core's number for it
	// (core.Event.Input), 0 until the core took it.
	engine int
	input  uint64
	// coreAborted: the core took an abort of the sequence (the frontend
	// sends each abort on two queues, so the core takes it twice).
	coreAborted bool
	// coreStopped: the core took an abort of the sequence while it held
	// it, and so finished it there: it emits none of its frames after.
	coreStopped bool
	aborted     bool // its caller aborted or cancelled it, or Close did
	// loadFailed: a load of its KV failed and the core ended it with an
	// error (kv_load_failure_policy fail).
	loadFailed bool
	finished   bool
	reason     core.FinishReason
	final      []int // tokens at the finish
	received   []int // tokens the caller received, by Delta concatenation or the latest Cumulative
	sawFinish  bool  // the caller took the finished output (of this sequence)
	// sawRequestFinish: the caller took the finished output of a request
	// of several sequences (on sequence 0).
	sawRequestFinish bool
	text             textOracle
}

// textOracle is what the checker knows of the text a caller received. It
// is worked out from the tokenizer's pieces of the tokens the caller
// received and from the request's parameters, apart from the engine's
// detokenizer, so that it catches that detokenizer's mistakes. It keeps
// lengths and a cursor, never the text: the checker runs on every event of
// every seed.
type textOracle struct {
	hold    int // characters a running request's text holds back: its longest stop string's, less one
	reach   int // bytes before a new piece where a stop string ending in it may begin: its longest stop string's, less one
	fed     int // tokens of received decoded so far
	textLen int // bytes of their text
	stopAt  int // tokens decoded when a stop string ended the text; 0 if none did
	cut     int // where the text ends then: before that stop string
	// got is how many bytes of the text a Delta caller received; at is
	// where the text goes on from there.
	got int
	at  textCursor
	bad bool // a violation was reported: later outputs are not checked
}

// textCursor is a place in the text of a token sequence: byte off of the
// piece of token tok.
type textCursor struct{ tok, off int }

// Checker verifies the properties over one engine's events — one engine,
// since incarnations are numbered per engine. It is not safe
// for concurrent use: under the simulator events arrive one at a time; on
// the real runtime wrap Observe in a lock.
type Checker struct {
	model  core.Model
	incs   []*incarnation    // by incarnation number, which an engine hands out densely from 1
	latest map[string]uint64 // external id → its latest incarnation
	dead   bool              // the engine died: every live request ends with an error
	cause  error             // why it died
	// inCore are the incarnations (and sequences) the core holds, as its
	// own events tell: admitted, and neither aborted nor finished in the
	// core since.
	inCore map[seqKey]bool
	// concurrent: the events come from goroutines (Observer on the real
	// runtime), where WaitIdle answers only for the inputs sent before it.
	concurrent bool
	// views are what each core's events tell of its state, by
	// data-parallel rank (core.Event.Engine): one, in view1, but for an
	// engine of several cores (SetEngine).
	views []coreView
	view1 [1]coreView
	// pauses are, by call, the pauses the cores took: the frames emitted
	// by the time the pause took effect on every core, and the requests
	// it aborted.
	pauses  map[uint64]*pauseCall
	events  int
	all     []*Violation
	reached SituationSet
	// modelLen is the engine's MaxModelLen, when known (SetModelLen): a
	// length finish then has an exact token count.
	modelLen int
	// loraSlots is the engine's LoRA slots (SetLoRASlots): 0, LoRA off.
	loraSlots int
	// maxSeqs and maxTokens are a step's budget (SetBudget), 0 unknown.
	maxSeqs, maxTokens int
	// idleTargets are, by core, the inputs the last WaitIdle waited for
	// (core.EventIdle, on goroutines).
	idleTargets []uint64
	// routed are, with several cores, the cores the frontend sent the
	// ADDs of each internal id to, a bit a core (an id names one sequence
	// but under legacy routing).
	routed map[string]uint64
	// Where, if set, says where the running code is; a Violation records
	// it. Under the simulator set it to a closure over sim.Where.
	Where func() (task, point string)

	tok core.Tokenizer // the engine's: the text oracle decodes with it
	// window is where the text oracle looks for stop strings; windowBuf
	// holds it unless a stop string is long.
	window    []byte
	windowBuf [64]byte
}

// NewChecker returns a checker for an engine running model.
func NewChecker(model core.Model) *Checker {
	if model == nil {
		model = core.ToyModel{}
	}
	c := &Checker{model: model, latest: make(map[string]uint64), incs: make([]*incarnation, 0, 16),
		inCore: make(map[seqKey]bool)}
	c.window = c.windowBuf[:0]
	c.views = c.view1[:]
	return c
}

// coreView is what one core's events tell of its state: whether it is
// paused, and whether a pause took effect since it last resumed; the
// executor's memory asleep; that a weight update is open; and, by LoRA
// adapter, the revisions of its weights loaded in place
// (core.EventLoRALoad), each with the first step of the core to sample
// with it.
type coreView struct {
	// emitted counts the frames the core emitted, and inFlight those of
	// them the output handler has not delivered or dropped yet.
	emitted, inFlight int
	paused, pauseDone bool
	asleep            core.SleepTags
	updating          bool
	loraLoads         map[int]revisions
}

// framesInFlight counts the frames every core emitted that the output
// handler has not delivered or dropped yet.
func (c *Checker) framesInFlight() int {
	n := 0
	for i := range c.views {
		n += c.views[i].inFlight
	}
	return n
}

// bitsOf returns the bits set in m, lowest first.
func bitsOf(m uint64) []int {
	var bits []int
	for i := range 64 {
		if m&(1<<i) != 0 {
			bits = append(bits, i)
		}
	}
	return bits
}

// view returns the state of the core of data-parallel rank n.
func (c *Checker) view(n int) *coreView {
	for len(c.views) <= n {
		c.views = append(c.views, coreView{})
	}
	return &c.views[n]
}

// violationsMax bounds what a checker keeps: the first is what matters.
const violationsMax = 64

func (c *Checker) fail(prop, format string, args ...any) {
	if len(c.all) >= violationsMax {
		return
	}
	v := &Violation{Property: prop, Detail: fmt.Sprintf(format, args...), Event: c.events}
	if c.Where != nil {
		v.Task, v.Point = c.Where()
	}
	c.all = append(c.all, v)
}

// SetModel sets the model the engine runs, for the token checks; call it
// before the first request.
func (c *Checker) SetModel(m core.Model) {
	if m == nil {
		m = core.ToyModel{}
	}
	c.model = m
}

// SetModelLen sets the engine's model length (its MaxModelLen, defaults
// applied), so that a reused id's length finish is checked for its exact
// token count: its MaxTokens, or what the model length leaves after the
// prompt. Without it, only more tokens than MaxTokens are caught.
func (c *Checker) SetModelLen(n int) { c.modelLen = n }

// SetLoRASlots sets the engine's LoRA slots, its Config.LoRASlots: no
// step may use more adapters. 0, LoRA off, until it is set.
func (c *Checker) SetLoRASlots(n int) { c.loraSlots = n }

// SetBudget tells the checker a step's budget: the most requests it
// schedules and the most tokens it computes (engine.Config.MaxNumSeqs and
// MaxNumBatchedTokens, defaults applied); 0 leaves one unchecked.
func (c *Checker) SetBudget(seqs, tokens int) { c.maxSeqs, c.maxTokens = seqs, tokens }

// SetEngine tells the checker what it needs of the configuration of the
// engine it follows: its model (SetModel), model length (SetModelLen),
// LoRA slots (SetLoRASlots), a step's budget (SetBudget) and
// data-parallel cores.
func (c *Checker) SetEngine(cfg engine.Config) {
	c.view(max(cfg.DataParallelSize, 1) - 1) // a view a core: a pause takes effect once on every core
	c.SetModel(cfg.Model)
	d := core.Config{MaxModelLen: cfg.MaxModelLen, MaxNumSeqs: cfg.MaxNumSeqs, MaxNumBatchedTokens: cfg.MaxNumBatchedTokens}.WithDefaults()
	c.SetModelLen(d.MaxModelLen)
	c.SetBudget(d.MaxNumSeqs, d.MaxNumBatchedTokens)
	c.SetLoRASlots(cfg.LoRASlots())
}

// Err returns the first violation so far, or nil.
func (c *Checker) Err() error {
	if len(c.all) == 0 {
		return nil
	}
	return c.all[0]
}

// Violations returns every violation recorded, in order, up to 64.
func (c *Checker) Violations() []*Violation { return c.all }

// Aborted tells the checker that the caller aborted or cancelled an
// incarnation, every sequence of it, so that it is not expected to finish
// normally.
func (c *Checker) Aborted(inc uint64) {
	if in := c.inc(inc); in != nil {
		for _, s := range in.sequences() {
			s.aborted = true
		}
	}
}

func (c *Checker) inc(n uint64) *incarnation {
	if n < uint64(len(c.incs)) {
		return c.incs[n]
	}
	return nil
}

// seqKey names a sequence of an incarnation.
type seqKey struct {
	inc   uint64
	index int
}

// seq returns sequence index of incarnation n, or nil.
func (c *Checker) seq(n uint64, index int) *incarnation {
	in := c.inc(n)
	if in == nil || index == 0 {
		return in
	}
	if index > 0 && index <= len(in.more) {
		return in.more[index-1]
	}
	return nil
}

// Observe consumes one engine event. It is the engine's Config.Observer.
func (c *Checker) Observe(ev core.Event) { c.ObserveEvent(&ev) }

// ObserveEvent is Observe for an observer that holds the event already: the
// checker reads it and keeps nothing of it, so the event is not copied.
func (c *Checker) ObserveEvent(ev *core.Event) {
	c.observe(ev)
	c.events++
}

func (c *Checker) observe(ev *core.Event) {
	switch ev.Kind {
	case core.EventAdd:
		c.add(ev)
	case core.EventAbort:
		if in := c.seq(ev.Incarnation, ev.Index); in != nil {
			in.aborted = true
		}
	case core.EventCoreAdd:
		if k := (seqKey{ev.Incarnation, ev.Index}); !c.inCore[k] {
			c.inCore[k] = true
			if in := c.inc(ev.Incarnation); in != nil {
				in.inCore++
			}
			if seq := c.seq(ev.Incarnation, ev.Index); seq != nil {
				seq.engine, seq.input = ev.Engine, ev.Input
			}
		}
		if c.view(ev.Engine).paused {
			c.reach(AddWhilePaused)
		}
	case core.EventCoreReject:
		c.reach(CoreRefusedAdd)
		if seq := c.seq(ev.Incarnation, ev.Index); seq != nil {
			seq.engine, seq.input = ev.Engine, ev.Input
		}
	case core.EventCoreAbort:
		if c.routed != nil && c.routed[ev.InternalID]&(1<<uint(ev.Engine)) == 0 {
			c.fail(AbortReachesItsCore, "core %d took an abort of %s, whose ADD went to core(s) %v: the sequence runs on there for nobody", ev.Engine, ev.InternalID, bitsOf(c.routed[ev.InternalID]))
		}
		c.coreAbortReached(ev)
		if s := c.seq(ev.Incarnation, ev.Index); s != nil && ev.Incarnation != 0 {
			s.coreStopped = true
		}
		c.leaveCore(seqKey{ev.Incarnation, ev.Index})
		c.checkCoreAbort(ev)
	case core.EventFrameEmitted:
		v := c.view(ev.Engine)
		v.emitted++
		v.inFlight++
		if in := c.inc(ev.Incarnation); in != nil {
			in.inFlight++
		}
		if ev.Finished {
			c.leaveCore(seqKey{ev.Incarnation, ev.Index})
		}
		seq := c.seq(ev.Incarnation, ev.Index)
		if seq != nil && seq.coreStopped {
			c.fail(AbortReachesItsCore, "core %d emitted frame %d of %s (incarnation %d) after it took that sequence's abort: the aborted request runs on for nobody", ev.Engine, ev.Frame, ev.InternalID, ev.Incarnation)
		}
		if seq != nil && seq.lora != nil && len(ev.Tokens) > 0 {
			seq.lora.sampledUnder(ev.Position, c.view(ev.Engine).loraLoads[seq.lora.id].at(ev.Step))
		}
		c.checkModel(seq, ev.Tokens, ev.Position, func() string { return fmt.Sprintf("frame %d emitted by the core", ev.Frame) })
	case core.EventFrameDropped:
		c.reach(StaleFrameDropped)
		c.frameTaken(ev)
	case core.EventFrameDelivered:
		c.frameTaken(ev)
		if ev.Collector != ev.Incarnation {
			c.fail(NoStaleDelivery, "frame %d of %s (incarnation %d, tokens %v at position %d) was delivered to incarnation %d of %q",
				ev.Frame, ev.InternalID, ev.Incarnation, ev.Tokens, ev.Position, ev.Collector, ev.RequestID)
		} else if ev.CollectorIndex != ev.Index {
			c.fail(NoStaleDelivery, "frame %d of %s (incarnation %d sequence %d, tokens %v at position %d) was delivered to its sequence %d",
				ev.Frame, ev.InternalID, ev.Incarnation, ev.Index, ev.Tokens, ev.Position, ev.CollectorIndex)
		}
		if in := c.seq(ev.Collector, ev.CollectorIndex); in != nil && in.finished {
			c.fail(NothingAfterFinish, "frame %d was delivered to incarnation %d of %q after it finished", ev.Frame, ev.Collector, ev.RequestID)
		}
	case core.EventFinish:
		in := c.seq(ev.Incarnation, ev.Index)
		if in == nil {
			c.fail(EndsExactlyOnce, "incarnation %d of %q finished but was never added", ev.Incarnation, ev.RequestID)
			return
		}
		if in.finished {
			c.fail(EndsExactlyOnce, "incarnation %d of %q finished twice: %s, then %s", in.n, in.id, in.reason, ev.Reason)
			return
		}
		in.finished, in.reason, in.final = true, ev.Reason, slices.Clone(ev.Tokens)
		c.checkModel(in, in.final, 0, func() string { return fmt.Sprintf("the final tokens of %q", in.id) })
		c.checkEnd(in)
	case core.EventOutput:
		c.output(ev)
	case core.EventRequestOutput:
		c.requestOutput(ev)
	case core.EventDead:
		c.dead, c.cause = true, ev.Err
		c.reach(EngineDied)
		for k := range c.inCore {
			c.leaveCore(k)
		}
	case core.EventPreempt:
		c.reach(Preempted)
		if ev.Held > 0 {
			c.reach(ResetWithStepInFlight)
		}
	case core.EventPrefixHit:
		c.reach(PrefixCacheHit)
	case core.EventKVLoaded:
		switch {
		case ev.Text == "failed":
			c.reach(KVLoadFailed)
			if in := c.seq(ev.Incarnation, ev.Index); in != nil && ev.Finished {
				in.loadFailed = true
			}
		case ev.Finished:
			c.reach(KVLoadLandedAfterAbort)
		case ev.Text != "abandoned":
			c.reach(KVLoadedFromHost)
		}
	case core.EventKVStoreWait:
		if ev.Text == "loads" {
			c.reach(KVStoreWaitedForLoads)
		}
	case core.EventKVLoadWait:
		switch ev.Text {
		case "loads":
			c.reach(KVLoadHeldBack)
		case "store":
			c.reach(KVLoadWaitedForAStore)
		default:
			c.reach(KVLoadWaitedForALoad)
		}
	case core.EventCallSplit:
		c.reach(CallSplitAcrossCores)
	case core.EventTokensCut:
		c.reach(TokensCutAtAStop)
	case core.EventDraftsDropped:
		c.reach(DraftPlaceholdersDropped)
	case core.EventKVPendingCut:
		c.reach(KVPendingComputedAgain)
	case core.EventPause, core.EventPauseDone, core.EventResume, core.EventPaused:
		c.pause(ev)
	case core.EventSleep:
		c.view(ev.Engine).asleep = core.SleepTags(ev.Held)
	case core.EventWakeUp:
		v := c.view(ev.Engine)
		v.asleep = core.SleepTags(ev.Held)
		if v.asleep != 0 && len(c.inCore) > 0 {
			c.reach(PartialWakeWithRequests)
		}
	case core.EventResumeRefused:
		c.reach(ResumeWhileAsleep)
	case core.EventWeightUpdate:
		c.weightUpdate(ev)
	case core.EventStep:
		v := c.view(ev.Engine)
		if v.paused && v.pauseDone {
			c.fail(PausedRunsNothing, "the core ran step %d (%d scheduled) after a pause took effect, with no resume since", ev.Step, ev.Held)
		}
		if v.asleep != 0 {
			c.fail(AsleepRunsNothing, "the core ran step %d (%d scheduled) with the executor's %s asleep", ev.Step, ev.Held, v.asleep)
		}
		if v.updating {
			c.fail(UpdateRunsNothing, "the core ran step %d (%d scheduled) in the middle of a weight update, over weights half replaced", ev.Step, ev.Held)
		}
		if c.maxSeqs > 0 && ev.Held > c.maxSeqs || c.maxTokens > 0 && ev.StepTokens > c.maxTokens {
			c.fail(StepWithinBudget, "core %d ran step %d over %d request(s) and %d token(s), past its budget of %d and %d (MaxNumSeqs, MaxNumBatchedTokens)", ev.Engine, ev.Step, ev.Held, ev.StepTokens, c.maxSeqs, c.maxTokens)
		}
		if ev.LoRA > c.loraSlots {
			c.fail(LoRASlotsSuffice, "the core ran step %d (%d scheduled) over %d LoRA adapters, with %d LoRA slot(s)", ev.Step, ev.Held, ev.LoRA, c.loraSlots)
		}
	case core.EventLoRAWait:
		c.reach(LoRAWaitedForASlot)
	case core.EventLoRALoad:
		c.loraLoad(ev)
	case core.EventKVLeak:
		c.fail(KVBlocksAccounted, "after core step %d the core held no request, yet %d KV block(s) were in use: %v", ev.Step, ev.Held, ev.Err)
	case core.EventIdle:
		// The checker's own account of the core, not the engine's counter
		// that WaitIdle read. WaitIdle also waits for the output handler
		// to take every batch the core emitted: a frame on its way is the
		// core's work still.
		held, frames := c.idleAccount(ev)
		if len(held) != 0 || ev.Held != 0 {
			c.fail(WaitIdleMeansIdle, "WaitIdle returned while the core held incarnation(s) %v (it counted %d)", sortedKeys(held), ev.Held)
		}
		if frames > 0 {
			c.fail(WaitIdleMeansIdle, "WaitIdle returned while %d frame(s) the core emitted had not reached the output handler", frames)
		}
	}
}

// idleAccount is what WaitIdle answers for when it returns (ev): the
// sequences the core holds and the frames on their way to the output
// handler. Under the simulator that is all of them, since nothing runs
// between WaitIdle's test and its event. On goroutines (Observer on the
// real runtime) a request added meanwhile may be in the core by the
// event, so it is only those of the inputs WaitIdle waited for: the
// core took every input up to ev.Input before WaitIdle's test, so a
// sequence of one of them that is still held, or a frame of it still on
// its way, is a violation there too. With several cores there is an
// event a core, in rank order: each answers for its core's sequences,
// and the last for the frames.
func (c *Checker) idleAccount(ev *core.Event) (held map[seqKey]bool, frames int) {
	if !c.concurrent {
		return c.inCore, c.framesInFlight()
	}
	for len(c.idleTargets) <= ev.Engine {
		c.idleTargets = append(c.idleTargets, 0)
	}
	c.idleTargets[ev.Engine] = ev.Input
	for k := range c.inCore {
		if seq := c.seq(k.inc, k.index); seq == nil || seq.engine == ev.Engine && seq.input <= ev.Input {
			if held == nil {
				held = make(map[seqKey]bool)
			}
			held[k] = true
		}
	}
	if ev.Engine+1 < len(c.views) {
		return held, 0 // the frames are counted at the last core's event, every core's inputs known
	}
	// An incarnation was answered when each of its sequences' ADDs was
	// among the inputs its core's WaitIdle waited for.
	answered := func(s *incarnation) bool { return s.engine >= len(c.idleTargets) || s.input <= c.idleTargets[s.engine] }
	for _, in := range c.incs {
		if in == nil || in.inFlight == 0 || !answered(in) {
			continue
		}
		all := true
		for _, s := range in.more {
			all = all && answered(s)
		}
		if all {
			frames += in.inFlight
		}
	}
	return held, frames
}

// leaveCore forgets a sequence the core no longer holds.
func (c *Checker) leaveCore(k seqKey) {
	if !c.inCore[k] {
		return
	}
	delete(c.inCore, k)
	if in := c.inc(k.inc); in != nil {
		in.inCore--
	}
}

// coreAbortReached records what an abort the core took reached: the first
// abort of a sequence that found it finished in the core, or an abort
// meant for an ended incarnation while a newer one of the id was in the
// core.
func (c *Checker) coreAbortReached(ev *core.Event) {
	target := c.seq(ev.Incarnation, ev.Index)
	if ev.Incarnation == 0 { // the core held nothing by that internal id
		target = c.byInternalID(ev.InternalID)
	}
	if target == nil {
		return
	}
	if ev.Incarnation == 0 && !target.coreAborted {
		c.reach(LateCoreAbort)
	}
	target.coreAborted = true
	first := c.inc(target.n)
	switch latest := c.latestOf(first); {
	case ev.Incarnation != 0 && first.reuse && !target.aborted && !target.finished:
		// An abort nobody asked for hit a reused id's live incarnation:
		// it was meant for an earlier one (checkCoreAbort says so).
		c.reach(AbortAfterReuse)
	case latest != first && latest.inCore > 0:
		c.reach(AbortAfterReuse)
	}
}

// byInternalID returns the latest sequence with an internal id, or nil.
// It looks through every incarnation, latest first: it serves an abort of
// a request the core no longer held, a few a run.
func (c *Checker) byInternalID(id string) *incarnation {
	for _, in := range slices.Backward(c.incs) {
		if in == nil {
			continue
		}
		if in.internal == id {
			return in
		}
		for _, s := range in.more {
			if s.internal == id {
				return s
			}
		}
	}
	return nil
}

// latestOf returns the latest incarnation of in's request id.
func (c *Checker) latestOf(in *incarnation) *incarnation {
	for in.next != 0 {
		in = c.inc(in.next)
	}
	return in
}

// frameTaken follows a frame the output processor delivered or dropped:
// one of an incarnation that a newer one of its id replaced, taken while
// that one is live, is the founding race's window.
func (c *Checker) frameTaken(ev *core.Event) {
	v := &c.views[0]
	if n := uint64(len(c.views)); n > 1 {
		v = &c.views[(ev.Frame-1)%n] // the core of rank r numbers its frames r+1, r+1+n, …
	}
	v.inFlight--
	in := c.inc(ev.Incarnation)
	if in == nil {
		return
	}
	in.inFlight--
	if in.next == 0 {
		return
	}
	if in = c.latestOf(in); !in.aborted && !in.finished {
		c.reach(StaleFrameAfterReuse)
	}
}

// pauseCall is what the checker knows of one pause.
type pauseCall struct {
	aborted []seqKey // what the cores held when they took an abort pause
	// emitted are, by core, the frames it emitted when the pause took
	// effect on it, and done the cores on which it did.
	emitted []int
	done    int
}

// pause follows the core's pauses and resumes and checks PauseGeneration's
// return.
// weightUpdate follows a weight update's calls: the update open, and the
// situations they reach.
func (c *Checker) weightUpdate(ev *core.Event) {
	if !ev.Finished {
		if errors.Is(ev.Err, core.ErrWeightsAsleep) {
			c.reach(UpdateWhileAsleep)
		}
		return
	}
	v := c.view(ev.Engine)
	if v.asleep&core.SleepWeights != 0 {
		c.fail(WeightsWrittenAwake, "the core took the %s of a weight update (call %d) with the executor's %s asleep", ev.Text, ev.Call, v.asleep)
	}
	switch ev.Text {
	case core.WeightUpdateStart:
		v.updating = true
		if len(c.inCore) > 0 {
			c.reach(UpdateWithRequests)
		}
	case core.WeightUpdateFinish:
		v.updating = false
	}
}

func (c *Checker) pause(ev *core.Event) {
	if c.pauses == nil {
		c.pauses = make(map[uint64]*pauseCall)
	}
	v := c.view(ev.Engine)
	switch ev.Kind {
	case core.EventPause:
		if v.paused {
			c.reach(PauseWhilePaused)
		}
		if len(c.inCore) > 0 {
			c.reach(PauseWithRequests)
		}
		p := c.pauses[ev.Call]
		if p == nil {
			p = &pauseCall{emitted: make([]int, len(c.views))}
			c.pauses[ev.Call] = p
		}
		v.paused = true
		if ev.Text == core.PauseAbort.String() {
			// The core ends everything it holds next: an abort its
			// callers asked for, as far as the properties go.
			for _, k := range keysInOrder(c.inCore) {
				if in := c.seq(k.inc, k.index); in != nil && in.engine == ev.Engine {
					in.aborted = true
					p.aborted = append(p.aborted, k)
				}
			}
		}
	case core.EventPauseDone:
		if p := c.pauses[ev.Call]; p != nil {
			p.done++
			for len(p.emitted) <= ev.Engine { // a checker SetEngine was not given
				p.emitted = append(p.emitted, 0)
			}
			p.emitted[ev.Engine] = v.emitted
		}
		if v.paused {
			v.pauseDone = true
		}
	case core.EventResume:
		if v.paused && !v.pauseDone {
			c.reach(ResumeBeforePauseTookEffect)
		}
		if v.updating {
			c.reach(ResumeDuringUpdate)
		}
		v.paused, v.pauseDone = false, false
	case core.EventPaused:
		p := c.pauses[ev.Call]
		delete(c.pauses, ev.Call)
		if p == nil || p.done < len(c.views) {
			c.fail(PauseReturnsAfterItsOutputs, "PauseGeneration (call %d) returned before the core took the pause, or before it took effect", ev.Call)
			return
		}
		var open []string
		for _, k := range p.aborted {
			if in := c.seq(k.inc, k.index); in != nil && !in.finished {
				open = append(open, fmt.Sprintf("%q (incarnation %d%s)", in.id, in.n, in.seqName()))
			}
		}
		if len(open) > 0 {
			c.fail(PauseReturnsAfterItsOutputs, "PauseGeneration (call %d, abort) returned before %s, which the pause aborted, ended", ev.Call, strings.Join(open, ", "))
			return
		}
		missing := 0
		for n, before := range p.emitted {
			missing += max(0, before-(c.views[n].emitted-c.views[n].inFlight))
		}
		if missing > 0 {
			c.fail(PauseReturnsAfterItsOutputs, "PauseGeneration (call %d) returned with %d frame(s) the core emitted before the pause took effect not yet at the output handler", ev.Call, missing)
		}
	}
}

// add records an incarnation the frontend accepted, or one sequence of it.
func (c *Checker) add(ev *core.Event) {
	if len(c.views) > 1 {
		if c.routed == nil {
			c.routed = make(map[string]uint64)
		}
		c.routed[ev.InternalID] |= 1 << uint(ev.Engine)
	}
	p, _ := ev.Params.(engine.Params)
	prev := c.latest[ev.RequestID]
	in := &incarnation{id: ev.RequestID, internal: ev.InternalID, n: ev.Incarnation, index: ev.Index, params: p, sampling: p.Sampling(), promptLen: len(ev.Prompt),
		key: core.SequenceKey(c.model.Prepare(ev.Prompt), ev.Index), reuse: prev != 0}
	if id := p.LoRAID(); id != 0 {
		in.key = core.LoRAKey(in.key, id)
		in.lora = &seqLoRA{id: id}
	}
	for _, s := range p.Stop {
		in.text.hold = max(in.text.hold, utf8.RuneCountInString(s)-1)
		in.text.reach = max(in.text.reach, len(s)-1)
	}
	if ev.Index > 0 { // a later sequence of the incarnation sequence 0 began
		if first := c.inc(ev.Incarnation); first != nil {
			in.reuse = first.reuse
			first.more = append(first.more, in)
		}
		return
	}
	c.latest[ev.RequestID] = ev.Incarnation
	for uint64(len(c.incs)) <= ev.Incarnation {
		c.incs = append(c.incs, nil)
	}
	c.incs[ev.Incarnation] = in
	in.prev = prev
	for p := c.inc(prev); p != nil; p = c.inc(p.prev) {
		if p.next == 0 {
			p.next = in.n
		}
		if p.inCore > 0 {
			c.reach(ReuseBeforeCoreAbort)
		}
		if p.inFlight > 0 {
			c.reach(ReuseWithFramesInFlight)
		}
	}
}

// checkModel verifies tokens against the model's tokens for a sequence's
// prompt, from output position pos; what says whose tokens they are, and
// is formatted only when they are wrong.
func (c *Checker) checkModel(in *incarnation, tokens []int, pos int, what func() string) {
	if in == nil {
		return
	}
	for i, tok := range tokens {
		if want := core.SampleAt(c.model, in.keyAt(pos+i), pos+i, &in.sampling, core.EOSTokenID); tok != want {
			c.fail(ModelTokens, "%s: token %d is %d, but the model's token %d for incarnation %d of %q%s is %d",
				what(), pos+i, tok, pos+i, in.n, in.id, in.seqName(), want)
			return
		}
	}
}

// sequences returns every sequence of an incarnation, from sequence 0,
// which holds the others.
func (in *incarnation) sequences() []*incarnation {
	return append([]*incarnation{in}, in.more...)
}

// seqName names the sequence of a parallel-sampling request, for messages.
func (in *incarnation) seqName() string {
	if in.index == 0 && len(in.more) == 0 {
		return ""
	}
	return fmt.Sprintf(" sequence %d", in.index)
}

// checkCoreAbort: the core aborts only what the frontend asked it to, and
// the frontend asks only for an incarnation it ended first (an abort, a
// cancel, Close, a stop string). An incarnation the core drops while it is
// live and nobody aborted it was hit by an abort meant for another — a
// predecessor's late abort routed by the reused id (vLLM #23697) — and can
// no longer end on its own. Close aborting it later would hide that.
func (c *Checker) checkCoreAbort(ev *core.Event) {
	in := c.seq(ev.Incarnation, ev.Index)
	if ev.Incarnation == 0 || in == nil || in.aborted || in.finished {
		return
	}
	prop := EndsExactlyOnce
	if in.reuse {
		prop = ReuseFinishesNormally
	}
	c.fail(prop, "the core aborted %q (incarnation %d, internal id %s), which nobody aborted and which had not finished: it can no longer finish on its own",
		in.id, in.n, ev.InternalID)
}

// checkEnd holds a finished sequence to how it must have ended. A reused
// id's request, unless its caller aborted it, the engine died or a load
// of its KV failed and ended it, finishes
// for length or stop (ReuseFinishesNormally). One that finished on its own
// ends where its sequence must (EndsWhereTheModelStops): no more than
// MaxTokens tokens — more can only be someone else's, or tokens past its
// end —, for length MaxTokens or what the model length leaves (the core
// ends a request at the first step that reaches either: fewer was cut
// short), and no token past MinTokens but its last that stops it. A
// reused id's length finish answers for its counts to
// ReuseFinishesNormally.
func (c *Checker) checkEnd(in *incarnation) {
	reuse := in.reuse && !in.aborted && !c.dead && !in.loadFailed
	if in.reason != core.FinishLength && in.reason != core.FinishStop {
		if reuse {
			c.fail(ReuseFinishesNormally, "reused %q (incarnation %d) ended with reason %q without being aborted", in.id, in.n, in.reason)
		}
		return
	}
	n := len(in.final)
	prop, who := EndsWhereTheModelStops, fmt.Sprintf("%q (incarnation %d%s)", in.id, in.n, in.seqName())
	if reuse && in.reason == core.FinishLength {
		prop, who = ReuseFinishesNormally, "reused "+who
	}
	if n > in.params.MaxTokens {
		c.fail(prop, "%s finished with reason %s and %d tokens, more than its MaxTokens %d", who, in.reason, n, in.params.MaxTokens)
		return
	}
	if in.reason == core.FinishLength && c.modelLen > 0 {
		if want := min(in.params.MaxTokens, c.modelLen-in.promptLen); n != want {
			c.fail(prop, "%s finished for length with %d tokens, where its MaxTokens %d and the model length %d after a %d-token prompt give %d",
				who, n, in.params.MaxTokens, c.modelLen, in.promptLen, want)
			return
		}
	}
	for i := in.sampling.MinTokens; i < n-1; i++ {
		if in.sampling.StopsOn(in.final[i], core.EOSTokenID) {
			c.fail(EndsWhereTheModelStops, "%s finished with reason %s after %d tokens, but its token %d (%d) stops it: it went on past its end",
				who, in.reason, n, i, in.final[i])
			return
		}
	}
}

func (c *Checker) output(ev *core.Event) {
	in := c.seq(ev.Incarnation, ev.Index)
	if in == nil {
		return
	}
	if in.sawFinish {
		c.fail(NothingAfterFinish, "%q (incarnation %d) returned an output after its finished one", in.id, in.n)
		return
	}
	if ev.RequestID != in.id {
		c.fail(NoStaleDelivery, "an output of %q (incarnation %d) reached its caller as request %q", in.id, in.n, ev.RequestID)
	}
	if ev.Finished && in.finished && ev.Reason != in.reason {
		c.fail(EndsExactlyOnce, "%q (incarnation %d) ended with reason %s, but its finished output says %q", in.id, in.n, in.reason, ev.Reason)
	}
	switch in.params.Output {
	case engine.Delta:
		c.checkModel(in, ev.Tokens, len(in.received), func() string { return fmt.Sprintf("a Delta output of %q", in.id) })
		in.received = append(in.received, ev.Tokens...)
	default:
		if len(ev.Tokens) < len(in.received) || !slices.Equal(ev.Tokens[:len(in.received)], in.received) {
			c.fail(DeltasConcatenate, "a %s output of %q (incarnation %d) has tokens %v, which do not extend the previous %v",
				in.params.Output, in.id, in.n, ev.Tokens, in.received)
			in.text.bad = true // its text cannot be followed either
		}
		c.checkModel(in, ev.Tokens, 0, func() string { return fmt.Sprintf("a %s output of %q", in.params.Output, in.id) })
		in.received = append(in.received[:0], ev.Tokens...)
	}
	c.checkText(in, ev)
	if !ev.Finished {
		if in.params.Output == engine.FinalOnly {
			c.fail(DeltasConcatenate, "a FinalOnly request %q (incarnation %d) returned an unfinished output", in.id, in.n)
		}
		return
	}
	in.sawFinish = true
	if in.finished && !slices.Equal(in.received, in.final) {
		c.fail(DeltasConcatenate, "the outputs of %q (incarnation %d, %s) add up to %d tokens %v, but it finished with %d tokens %v",
			in.id, in.n, in.params.Output, len(in.received), clip(in.received), len(in.final), clip(in.final))
	}
}

// requestOutput checks an output of a request of several sequences as a
// whole, after its sequences' own events: it carries at least one
// sequence, none after the finished one, and it is finished exactly when
// the caller has seen every sequence finish.
func (c *Checker) requestOutput(ev *core.Event) {
	in := c.inc(ev.Incarnation)
	if in == nil {
		return
	}
	switch {
	case in.sawRequestFinish:
		c.fail(NothingAfterFinish, "%q (incarnation %d) returned an output after its finished one", in.id, in.n)
		return
	case ev.Held == 0:
		c.fail(DeltasConcatenate, "%q (incarnation %d, %d sequences) returned an output that carries no sequence", in.id, in.n, len(in.more)+1)
	}
	var open []int
	for _, s := range in.sequences() {
		if !s.sawFinish {
			open = append(open, s.index)
		}
	}
	if ev.Finished != (len(open) == 0) {
		c.fail(DeltasConcatenate, "%q (incarnation %d) returned an output with finished=%v, while the caller had not seen sequence(s) %v finish",
			in.id, in.n, ev.Finished, open)
	}
	in.sawRequestFinish = ev.Finished
}

func clip(ts []int) string {
	if len(ts) <= 8 {
		return fmt.Sprint(ts)
	}
	return strings.TrimSuffix(fmt.Sprint(ts[:8]), "]") + " …]"
}

// Finish runs the end-of-run checks — every accepted request ended — and
// returns the first violation of the run, or nil. Call it after the engine
// is closed.
func (c *Checker) Finish() error {
	for _, in := range c.incs {
		if in == nil {
			continue
		}
		for _, s := range in.sequences() {
			if !s.finished {
				c.fail(EndsExactlyOnce, "%q (incarnation %d%s) was accepted but never ended", s.id, s.n, s.seqName())
			}
		}
	}
	return c.Err()
}

// CheckKV checks a closed engine's KV blocks (engine.AsyncLLM.CheckKV)
// and records what it finds as a violation of KVBlocksAccounted. Call it
// after e.Close returned, before Finish.
func (c *Checker) CheckKV(e *engine.AsyncLLM) {
	if err := e.CheckKV(); err != nil {
		c.fail(KVBlocksAccounted, "%v", err)
	}
}

// Dead returns why the engine died, or nil while it has not: a workload
// that did not mean to kill it can tell an unexpected death, which the
// properties allow (every request then ends with the error), from one it
// caused.
func (c *Checker) Dead() error {
	if !c.dead {
		return nil
	}
	if c.cause == nil {
		return engine.ErrEngineDead
	}
	return c.cause
}

// Summary counts what the checker saw, for reports.
type Summary struct {
	Requests, Reused, Aborted, Finished int
}

// Summary returns the counts.
func (c *Checker) Summary() Summary {
	var s Summary
	for _, in := range c.incs {
		if in == nil {
			continue
		}
		s.Requests++
		if in.reuse {
			s.Reused++
		}
		if in.aborted {
			s.Aborted++
		}
		if !slices.ContainsFunc(in.sequences(), func(s *incarnation) bool { return !s.finished }) {
			s.Finished++
		}
	}
	return s
}

// Locked wraps the checker's Observe in a lock, for engines on the real
// runtime, whose events come from several goroutines.
func (c *Checker) Locked() func(core.Event) {
	var mu sync.Mutex
	return func(ev core.Event) {
		mu.Lock()
		c.Observe(ev)
		mu.Unlock()
	}
}

// keysInOrder returns m's keys in order of incarnation, then sequence.
func keysInOrder(m map[seqKey]bool) []seqKey {
	keys := make([]seqKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b seqKey) int { return cmp.Or(cmp.Compare(a.inc, b.inc), cmp.Compare(a.index, b.index)) })
	return keys
}

// sortedKeys lists the incarnations of m in order, a sequence of a
// parallel-sampling request as INCARNATION/SEQUENCE.
func sortedKeys(m map[seqKey]bool) []string {
	keys := keysInOrder(m)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strconv.FormatUint(k.inc, 10)
		if k.index > 0 {
			out[i] += "/" + strconv.Itoa(k.index)
		}
	}
	return out
}

// revisionFrom is a revision of an adapter's weights and where it began:
// for an adapter, the first step that samples with it; for a sequence,
// the first output position sampled under it.
type revisionFrom struct {
	from int64
	rev  uint64
}

// revisions are an adapter's or a sequence's, in the order they began.
type revisions []revisionFrom

// at is the revision in force at x: the last to begin at or before it, 0
// before the first.
func (rs revisions) at(x int64) uint64 {
	var rev uint64
	for _, r := range rs {
		if r.from > x {
			break
		}
		rev = r.rev
	}
	return rev
}

// loraLoad records an adapter's new weights loaded in place: the steps
// after the load sample with them.
func (c *Checker) loraLoad(ev *core.Event) {
	if !ev.Finished {
		return
	}
	for k := range c.inCore {
		if in := c.seq(k.inc, k.index); in != nil && in.lora != nil && in.lora.id == ev.LoRA {
			c.reach(LoRAReloadWithRequests)
			if c.view(ev.Engine).updating {
				c.reach(LoRALoadDuringAnUpdate)
			}
			break
		}
	}
	v := c.view(ev.Engine)
	if v.loraLoads == nil {
		v.loraLoads = make(map[int]revisions)
	}
	v.loraLoads[ev.LoRA] = append(v.loraLoads[ev.LoRA], revisionFrom{ev.Step + 1, uint64(ev.Held)})
}

// seqLoRA is a sequence's LoRA adapter: its id, and the revisions its
// tokens were sampled under, from the output position each began at, as
// the frames showed them (empty until a reload).
type seqLoRA struct {
	id   int
	revs revisions
}

// sampledUnder records that the sequence's tokens from output position
// pos on were sampled under revision rev of its adapter's weights.
func (l *seqLoRA) sampledUnder(pos int, rev uint64) {
	if n := len(l.revs); n > 0 && l.revs[n-1].rev == rev || n == 0 && rev == 0 {
		return
	}
	l.revs = append(l.revs, revisionFrom{int64(pos), rev})
}

// keyAt is the key the sequence's token at output position pos was
// sampled with: its adapter's, at the revision it was sampled under.
func (in *incarnation) keyAt(pos int) uint64 {
	if in.lora == nil || len(in.lora.revs) == 0 {
		return in.key
	}
	return core.RevisionKey(in.key, in.lora.revs.at(int64(pos)))
}
