package core

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/task"
)

// InputKind is the kind of a request to the core.
type InputKind uint8

const (
	// InputAdd admits Req.
	InputAdd InputKind = iota + 1
	// InputAbort finishes the requests named by IDs, emitting nothing:
	// a client-initiated abort has no output from the core.
	InputAbort
	// InputShutdown aborts everything, with an abort frame for each
	// request, and stops the core.
	InputShutdown
	// InputPause pauses scheduling, vLLM's pause_scheduler utility call:
	// Mode says what becomes of the requests the core holds, ClearCache
	// whether the prefix cache is reset (and running requests computed
	// again after the resume) once the pause took effect. Its reply, Call's,
	// comes when the pause took effect: once the core has nothing left to
	// step. The core takes ADDs and aborts meanwhile; what it holds back
	// waits for InputResume.
	InputPause
	// InputResume resumes scheduling; it replies at once, after replying
	// to the pauses that had not taken effect yet with Resumed set: they
	// never will. (vLLM leaves them to reply at the core's next idle
	// moment, which under steady load never comes, and then resets the
	// cache of an engine that runs.)
	InputResume
	// InputIsPaused asks whether the core is paused: the reply's Paused.
	InputIsPaused
	// InputResetPrefixCache resets the prefix cache, vLLM's
	// reset_prefix_cache utility call, between steps: with ResetRunning it
	// first preempts every running request (Scheduler.ResetPrefixCache);
	// without, it is refused while one runs. The reply's Reset says
	// whether the cache was reset.
	InputResetPrefixCache
	// InputSleep puts the engine to sleep, vLLM's sleep utility call: a
	// pause of Mode, which at Level 1 or 2 clears the cache, and once it
	// took effect, at those levels, the executor releases its weights and
	// KV cache. It replies then, as a pause does.
	InputSleep
	// InputWakeUp wakes the executor's Tags, vLLM's wake_up, and resumes
	// scheduling once nothing of it sleeps.
	InputWakeUp
	// InputStartWeightUpdate opens a weight update, vLLM's
	// start_weight_update: from it to InputFinishWeightUpdate the core
	// schedules nothing (weights.go). Refused, with the reply's Err, while
	// one is open or while the weights sleep.
	InputStartWeightUpdate
	// InputUpdateWeights writes a batch of the new weights, vLLM's
	// update_weights, into the update open.
	InputUpdateWeights
	// InputFinishWeightUpdate closes the update open, vLLM's
	// finish_weight_update, and lets the core schedule again.
	InputFinishWeightUpdate
	// InputLoadLoRA loads adapter LoRA into the executor's cache, vLLM's
	// add_lora: with LoadInplace its new weights replace those loaded
	// (Scheduler.ReloadLoRA), from the next step on; without, it changes
	// nothing a request sees, as a step loads the adapters it needs.
	// Refused, with the reply's Err, while the weights sleep.
	InputLoadLoRA
	// InputPinLoRA pins adapter LoRA, vLLM's pin_lora: it stays loaded
	// and holds an executor slot of its own until removed, so that its
	// requests never wait for one. Refused, with the reply's Err, when it
	// is not loaded (ErrLoRANotLoaded), when a running request of another
	// adapter uses the slot it needs or when it would leave no slot to the
	// other adapters (ErrLoRAPinSlot); Reply.Done when pinned.
	InputPinLoRA
	// InputRemoveLoRA unloads adapter LoRA, vLLM's remove_lora, and
	// unpins it; a request of it loads it again at its next step.
	// Reply.Done when it was loaded.
	InputRemoveLoRA
	// InputListLoRAs asks for the adapters loaded, vLLM's list_loras:
	// Reply.LoRAs, in increasing order.
	InputListLoRAs
)

// Input is a request to the core, vLLM's EngineCoreRequestType and payload.
type Input struct {
	Kind InputKind
	Req  *Request
	IDs  []string // internal ids, for InputAbort

	// Call numbers a utility call (InputPause, InputResume,
	// InputIsPaused, InputResetPrefixCache, InputSleep, InputWakeUp) for
	// its Reply.
	Call         uint64
	Mode         PauseMode // InputPause, InputSleep
	ClearCache   bool      // InputPause
	ResetRunning bool      // InputResetPrefixCache
	// Level is InputSleep's: 0 pauses only; 1 and 2 release the
	// executor's memory. A byte, as Tags, so that both share the word of
	// the fields before them: an Input is copied through the queues.
	Level uint8
	Tags  SleepTags // InputWakeUp: what to wake; none resumes a level-0 sleep only
	// LoadInplace and LoRA are InputLoadLoRA's: the adapter, and whether
	// its new weights replace those loaded (vLLM's load_inplace).
	LoadInplace bool
	LoRA        int32
	// Direct, if set, takes the reply from the core the moment it is made,
	// ahead of the Outputs already on the output queue, as vLLM's client
	// resolves a utility call on the thread that reads the core's socket;
	// without it the reply travels on the output queue, after them.
	Direct func(Reply)
}

// Reply is the core's answer to a utility call.
type Reply struct {
	Call   uint64
	Paused bool // the core is paused (every call answers it)
	// Resumed answers an InputPause that a resume overtook: the pause
	// never took effect (under PauseAbort its aborts did happen).
	Resumed bool
	// Reset answers an InputResetPrefixCache: the cache was reset.
	Reset bool
	// Asleep: some of the executor's memory sleeps (every call answers
	// it); answering an InputResume, the resume was refused for it.
	Asleep bool
	// Done answers an InputPinLoRA (pinned) and an InputRemoveLoRA (it
	// was loaded).
	Done bool
	// Err is why the core refused a weight update's call or a LoRA load
	// or pin: ErrWeightUpdateActive, ErrNoWeightUpdate, ErrWeightsAsleep,
	// ErrLoRANotLoaded or ErrLoRAPinSlot.
	Err error
	// LoRAs answers an InputListLoRAs: the adapters loaded, by id, in
	// increasing order.
	LoRAs []int
	// Engine is the data-parallel rank of the core that replied.
	Engine int
}

// Outputs is one batch from the core: the frames of a step. Dead is set,
// alone, when the core failed. The scheduler's counts do not travel with
// it: an abort changes them without a batch, so the core publishes them
// (EngineCore.Stats).
type Outputs struct {
	Frames []Frame
	Step   int64
	Dead   error
	// Reply, when set, answers a utility call, alone in its batch: every
	// frame of the batches before it came first.
	Reply *Reply
}

// EngineCore is the busy loop of vLLM's EngineCoreProc around a Scheduler,
// as one task.
type EngineCore struct {
	rt     task.Runtime
	cfg    Config
	sched  *Scheduler
	in     *task.Queue[Input]
	aborts *task.Queue[[]string]
	out    *task.Queue[*Outputs]
	faults *failpoints.Set
	// outRefs counts the cores that share the output queue and have not
	// stopped (ShareOutput); nil when the core has it alone.
	outRefs *atomic.Int32

	step int64
	// lora is the executor's LoRA state, made by NewEngineCore with
	// MaxLoRAs > 0 only, so that an engine without LoRA pays a pointer.
	lora *coreLoRA
	// flight is vLLM's batch queue under AsyncScheduling: the steps the
	// model runs, oldest first, whose outputs the scheduler has not taken.
	flight  [2]inflight
	nflight int
	// held and inputsDone are read by other tasks (WaitIdle) without the
	// core's help, so they are atomic.
	held          atomic.Int64
	inputsSent    atomic.Int64
	inputsDone    atomic.Uint64
	batches       atomic.Uint64
	abortsPending atomic.Int64
	// The scheduler's counts as of the core's last change, for the
	// frontend's gauges: an abort changes them without a batch.
	running, waiting, kvUsed, preemptions       atomic.Int64
	prefixQueries, prefixHits                   atomic.Int64
	prefixPreemptedQueries, prefixPreemptedHits atomic.Int64
	offloadCounts                               *offloadCounts // with host memory only
	specCounts                                  *specPublished // with speculative decoding only
	progress                                    func()         // called when the core is about to block for input
	// leaked is the most KV blocks the core has found in use while it held
	// no request (EventKVLeak): each leak is reported once. Written by the
	// core only, read by any task (KVLeaked).
	leaked atomic.Int64

	// pauses are the pauses that have not taken effect yet: they reply
	// when the core next has nothing to step (vLLM's idle callbacks).
	pauses []Input
	// asleep is the executor's memory a sleep released and no wake-up
	// has restored yet (sleep.go).
	asleep SleepTags
	// updating: a weight update is open; written: the batches it wrote
	// (weights.go).
	updating bool
	written  int
	// kv is the core's side of KV offloading (offload.go), made with
	// Config.KVOffloadBlocks only, so that a core without it pays a pointer.
	kv *coreKV
}

// inflight is a step the model runs: what it computes, the tokens it
// samples, and when they come back.
type inflight struct {
	so      *SchedulerOutput
	sampled []int
	step    int64
	done    time.Time
}

// NewEngineCore returns a core reading in and aborts and writing out. cfg
// must have its defaults set. progress, if set, runs every time the core has
// nothing to do and is about to block for input (vLLM's idle callbacks),
// and when it stops.
func NewEngineCore(rt task.Runtime, cfg Config, in *task.Queue[Input], aborts *task.Queue[[]string], out *task.Queue[*Outputs], progress func()) *EngineCore {
	c := &EngineCore{rt: rt, cfg: cfg, sched: NewScheduler(cfg), in: in, aborts: aborts, out: out, faults: cfg.Faults, progress: progress}
	if cfg.MaxLoRAs > 0 {
		c.lora = &coreLoRA{}
	}
	if cfg.KVOffloadBlocks > 0 {
		c.kv, c.offloadCounts = &coreKV{}, &offloadCounts{}
	}
	if cfg.NumSpeculativeTokens > 0 {
		c.specCounts = newSpecPublished(cfg.NumSpeculativeTokens)
	}
	return c
}

// ShareOutput makes the output queue one that cores share: Run closes it
// on its way out only when it brings refs to 0, as the last of them to
// stop. Call it before Run.
func (c *EngineCore) ShareOutput(refs *atomic.Int32) { c.outRefs = refs }

// Batches returns the number of Outputs the core has put on its output
// queue.
func (c *EngineCore) Batches() uint64 { return c.batches.Load() }

// AbortsPending returns the number of abort batches put on the aborts
// queue by SendAbort and not yet drained, without taking the queue's lock
// (a scheduling point).
func (c *EngineCore) AbortsPending() int64 { return c.abortsPending.Load() }

// Send puts an input on the core's input queue, counting it, so that the
// core drains the queue only when something is there and WaitIdle knows
// what was sent. It reports false when the queue is closed.
func (c *EngineCore) Send(in Input) bool {
	c.inputsSent.Add(1)
	if !c.in.Put(in) {
		c.inputsSent.Add(-1) // the core has stopped; nothing will process it
		return false
	}
	return true
}

// SendAbort puts an abort on both of the core's queues, as vLLM's input
// thread does: the aborts queue, drained during a step, and the input queue.
func (c *EngineCore) SendAbort(ids []string) {
	c.abortsPending.Add(1)
	if !c.aborts.Put(ids) {
		c.abortsPending.Add(-1) // closed: nothing will drain it
	}
	c.Send(Input{Kind: InputAbort, IDs: ids})
}

// InputsSent returns the number of inputs put with Send.
func (c *EngineCore) InputsSent() uint64 { return uint64(c.inputsSent.Load()) }

// Held returns the number of requests the core holds.
func (c *EngineCore) Held() int { return int(c.held.Load()) }

// InputsDone returns the number of inputs the core has processed.
func (c *EngineCore) InputsDone() uint64 { return c.inputsDone.Load() }

// Run is the busy loop; inputs must come through Send and SendAbort. It
// returns after InputShutdown, or when the model panics, in which case it
// first puts an Outputs with Dead set. It closes the output queue on its
// way out.
func (c *EngineCore) Run() {
	defer func() {
		if c.outRefs == nil || c.outRefs.Add(-1) == 0 {
			c.out.Close()
		}
		if c.progress != nil {
			c.progress()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			if task.Stopping(r) { // the run ends, the core did not fail
				panic(r)
			}
			err := fmt.Errorf("engine core: %v", r)
			c.emit(Event{Kind: EventDead, Err: err})
			c.batches.Add(1)
			c.out.Put(&Outputs{Dead: err, Step: c.step})
		}
	}()
	for {
		if c.kv != nil && len(c.kv.copies) > 0 {
			c.landCopies()
		}
		if c.idle() {
			// Drain the eager aborts before sleeping: an abort whose
			// input-queue copy was already handled would otherwise wait in
			// the aborts queue for the next step and hit whatever request
			// then holds its id. Idle means nothing of the past is pending.
			if c.processAborts() {
				// As an abort's input does: a request it ended may have a
				// last copy of its store to start, which holds blocks a
				// waiting request needs until it lands.
				c.syncHeld()
			}
			c.completePauses()
			if c.progress != nil {
				c.progress()
			}
			in, ok, due := c.waitInput()
			if due {
				continue // a copy is due: it lands first
			}
			if !ok || !c.handle(in) {
				return
			}
		}
		for uint64(c.inputsSent.Load()) > c.inputsDone.Load() {
			in, ok := c.in.TryGet()
			if !ok {
				break // counted, but not put yet: the next round takes it
			}
			if !c.handle(in) {
				return
			}
		}
		if c.idle() {
			continue // paused, or nothing came
		}
		if c.cfg.AsyncScheduling {
			c.runStepAsync()
		} else {
			c.runStep()
		}
	}
}

// idle reports whether the core has nothing to step: no work the pause
// state lets it schedule, and no step in flight.
func (c *EngineCore) idle() bool {
	return (!c.sched.HasWork() || c.kv != nil && c.kv.stalled) && c.nflight == 0
}

// handle processes one input; it reports false on shutdown.
func (c *EngineCore) handle(in Input) bool {
	defer c.inputsDone.Add(1)
	if c.kv != nil {
		c.kv.stalled = false // what it brings may be scheduled
	}
	switch in.Kind {
	case InputAdd:
		r := in.Req
		n := c.inputsDone.Load() + 1 // this input's number: only the core counts them
		if err := c.sched.AddRequest(r); err != nil {
			c.emit(Event{Kind: EventCoreReject, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Err: err, Input: n})
			c.put([]Frame{c.sched.FinalFrame(r, FinishError)})
			return true
		}
		c.syncHeld()
		c.emit(Event{Kind: EventCoreAdd, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Input: n})
	case InputAbort:
		c.abort(in.IDs)
		c.syncHeld()
	case InputShutdown:
		var frames []Frame
		for _, r := range c.sched.FinishAll(StatusFinishedAborted) {
			frames = append(frames, c.sched.FinalFrame(r, FinishAbort))
		}
		if c.kv != nil {
			c.sched.DropTransfers() // the executor stops: no copy lands
			c.kv.copies = nil
		}
		c.put(frames)
		return false
	case InputPause:
		c.pause(in)
	case InputResume:
		if c.asleep != 0 && !c.faults.Fires(failpoints.CoreResumeWhileAsleep) {
			// vLLM resumes the scheduler of a sleeping executor, whose
			// next step reads released memory; the wake-up resumes it.
			c.emit(Event{Kind: EventResumeRefused, Call: in.Call, Held: int(c.asleep)})
			c.reply(in)
			break
		}
		c.resume(in)
		c.reply(in)
	case InputIsPaused:
		c.reply(in)
	case InputResetPrefixCache:
		c.resetPrefixCache(in)
	case InputSleep:
		// The KV cache goes: the prefix cache must go with it, and the
		// requests a keep freezes must compute again.
		in.ClearCache = in.Level >= 1 && !c.faults.Fires(failpoints.CoreSleepKeepsPrefixCache)
		c.pause(in)
	case InputWakeUp:
		c.wakeUp(in)
	case InputStartWeightUpdate, InputUpdateWeights, InputFinishWeightUpdate:
		c.weightUpdate(in)
	case InputLoadLoRA:
		c.loadLoRA(in)
	case InputPinLoRA:
		c.pinLoRA(in)
	case InputRemoveLoRA:
		c.removeLoRA(in)
	case InputListLoRAs:
		c.listLoRAs(in)
	}
	return true
}

// abort finishes the requests of ids that the core holds. Its caller
// publishes the counts: an abort input at once, a step with its batch (an
// idle core holds nothing for it to finish).
func (c *EngineCore) abort(ids []string) {
	c.faults.Stall(c.rt, failpoints.CoreStallBeforeAbort)
	for _, id := range ids {
		var inc uint64
		var ext string
		idx := 0
		if r, ok := c.sched.Get(id); ok {
			inc, ext, idx = r.Incarnation, r.ExternalID, r.Index
			if c.faults.Fires(failpoints.CoreKVLeakOnAbort) {
				c.sched.leave(r, StatusFinishedAborted) // the bug: its blocks stay held
			} else if c.faults.Fires(failpoints.CoreAbortLeavesRequestRunning) {
				// the bug: taken and reported, the request runs on
			} else {
				c.sched.finish(r, StatusFinishedAborted)
			}
		}
		c.emit(Event{Kind: EventCoreAbort, RequestID: ext, InternalID: id, Incarnation: inc, Index: idx})
	}
}

// runStep is vLLM's step: schedule, execute the model, process the aborts
// that arrived meanwhile, update, and put the frames on the output queue.
func (c *EngineCore) runStep() {
	so := c.schedule()
	if len(so.Scheduled) == 0 {
		c.rejectUnschedulable(len(so.Preempted) > 0)
		return
	}
	c.startStep(so)
	if c.cfg.StepTime > 0 {
		c.rt.Sleep(c.cfg.StepTime)
	} else {
		c.rt.Yield("engine-core.execute-model")
	}
	c.finishStep(so, c.sched.Sample(so, c.cfg.Model), c.step)
}

// runStepAsync is vLLM's step_with_batch_queue under async scheduling: it
// schedules a step and hands it to the model, and returns at once when
// that is the only step in flight, so that the loop takes the inputs that
// came meanwhile and schedules the next step while the model runs this
// one; with two in flight, or nothing more to schedule, it waits for the
// oldest and applies its output. The model runs steps one after the
// other, each StepTime long. The core is not idle: it has work, or a step
// in flight.
func (c *EngineCore) runStepAsync() {
	if c.sched.HasWork() {
		so := c.schedule()
		switch {
		case len(so.Scheduled) > 0:
			c.startStep(so)
			// The model runs the step now, after the one before it; the
			// tokens are its until the scheduler takes them.
			sampled := c.sched.Sample(so, c.cfg.Model)
			done := c.rt.Now()
			if c.nflight > 0 && c.flight[c.nflight-1].done.After(done) {
				done = c.flight[c.nflight-1].done
			}
			c.flight[c.nflight] = inflight{so: so, sampled: sampled, step: c.step, done: done.Add(c.cfg.StepTime)}
			c.nflight++
			if c.nflight < len(c.flight) {
				return
			}
		default:
			c.rejectUnschedulable(len(so.Preempted) > 0)
			if c.nflight == 0 {
				return
			}
		}
	}
	b := c.flight[0]
	c.flight[0], c.flight[1] = c.flight[1], inflight{}
	c.nflight--
	if wait := b.done.Sub(c.rt.Now()); wait > 0 {
		c.rt.Sleep(wait)
	} else {
		c.rt.Yield("engine-core.execute-model")
	}
	c.finishStep(b.so, b.sampled, b.step)
}

// schedule schedules a step and tells the observer whom it preempted and
// admitted from the prefix cache.
func (c *EngineCore) schedule() *SchedulerOutput {
	so := c.sched.Schedule()
	for _, r := range so.Preempted {
		c.emit(Event{Kind: EventPreempt, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index})
	}
	for _, r := range so.LoRAWaiting {
		c.emit(Event{Kind: EventLoRAWait, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, LoRA: r.LoRA, Held: len(so.LoRAs)})
	}
	for _, pc := range c.sched.PendingCut() {
		r := pc.R
		c.emit(Event{Kind: EventKVPendingCut, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: pc.Blocks})
	}
	if len(so.Loads) > 0 {
		c.startLoads(so.Loads)
	}
	for _, r := range c.sched.DraftsDropped() {
		kept := "" // core/spec-placeholders-outlive-their-window keeps them
		if r.spec.slots > 0 {
			kept = "kept"
		}
		c.emit(Event{Kind: EventDraftsDropped, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: c.cfg.NumSpeculativeTokens, Text: kept})
	}
	for _, r := range so.LoadWaiting { // after the loads they wait for
		why := ""
		switch r.loadHeld {
		case loadHeldBack:
			why = "loads"
		case loadPending:
			why = "store"
		}
		c.emit(Event{Kind: EventKVLoadWait, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Text: why})
	}
	if c.cfg.EnablePrefixCaching && c.cfg.Observer != nil {
		for _, sc := range so.Scheduled {
			if r := sc.Req; sc.Cached > 0 {
				c.emit(Event{Kind: EventPrefixHit, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: sc.Cached})
			}
		}
	}
	return so
}

// startStep numbers a step that schedules something, as the model starts
// it.
func (c *EngineCore) startStep(so *SchedulerOutput) {
	c.step++
	batch, slots := 0, 0 // the batch's adapters, and the slots they and the pins take
	if c.cfg.MaxLoRAs > 0 {
		batch, slots = c.loraCount(so)
	}
	if c.cfg.Observer != nil {
		c.emit(Event{Kind: EventStep, Step: c.step, Held: len(so.Scheduled), StepTokens: so.TotalTokens, LoRA: slots})
	}
	if msg, ok := c.faults.Value(failpoints.ModelPanic); ok {
		panic(failpoints.InjectedPanic(failpoints.ModelPanic.Name, msg))
	}
	if c.asleep != 0 {
		// A GPU's forward pass into released memory: vLLM's #44395.
		panic(fmt.Sprintf("illegal memory access: step %d ran a forward pass with the executor's %s asleep", c.step, c.asleep))
	}
	if batch > c.cfg.MaxLoRAs {
		// vLLM's worker, activating the batch's adapters.
		panic(fmt.Sprintf("Number of requested LoRAs (%d) is greater than the number of GPU LoRA slots (%d): step %d", batch, c.cfg.MaxLoRAs, c.step))
	}
	if slots > c.cfg.MaxLoRAs {
		// vLLM's worker, finding the slots the batch needs pinned.
		panic(fmt.Sprintf("%v: step %d needs %d LoRA slots for its batch and %d pinned, of %d", errAllPinned, c.step, batch, slots-batch, c.cfg.MaxLoRAs))
	}
	if batch > 0 {
		pinned := c.sched.PinnedLoRAs()
		for _, a := range c.lora.batch { // the executor loads them
			if !c.lora.load(a, pinned, c.cfg.MaxCPULoRAs) {
				panic(fmt.Sprintf("%v: step %d loads adapter %d", errAllPinned, c.step, a))
			}
		}
	}
}

// coreLoRA is an EngineCore's LoRA state.
type coreLoRA struct {
	// cache are the adapters loaded, least recently used first, at most
	// Config.MaxCPULoRAs (load).
	cache []int
	batch []int // scratch: loraCount's adapters
	// published are the requests of each adapter as last published
	// (LoRACounts); now is publishLoRAs' scratch.
	published atomic.Pointer[LoRACounts]
	now       LoRACounts
}

// loraCount is how many LoRA adapters the batch of so uses, and how many
// slots they and the pinned adapters take, as the executor counts them
// when it loads and activates them, apart from the scheduler's own
// account.
func (c *EngineCore) loraCount(so *SchedulerOutput) (batch, slots int) {
	l := c.lora
	l.batch = l.batch[:0]
	for _, sc := range so.Scheduled {
		l.batch = withLoRA(l.batch, sc.Req.LoRA)
	}
	batch, slots = len(l.batch), len(l.batch)
	for _, a := range c.sched.PinnedLoRAs() {
		if !slices.Contains(l.batch, a) {
			slots++
		}
	}
	return batch, slots
}

// finishStep takes step's output from the model: the aborts that arrived
// while it ran first, then the update, whose frames go on the output queue.
func (c *EngineCore) finishStep(so *SchedulerOutput, sampled []int, step int64) {
	c.faults.Stall(c.rt, failpoints.CoreStallMidStep)
	c.processAborts()
	out, room := newBatch(len(so.Scheduled))
	frames := c.sched.UpdateFromOutputInto(room, so, sampled)
	if c.cfg.NumSpeculativeTokens > 0 {
		for _, sc := range so.Scheduled {
			if r := sc.Req; r.spec != nil && r.spec.cut > 0 {
				c.emit(Event{Kind: EventTokensCut, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: r.spec.cut, Text: string(r.Status.Reason())})
				r.spec.cut = 0
			}
		}
	}
	c.putBatch(out, frames, step)
}

// processAborts drains the aborts queue, so that an abort that arrived while
// the model ran wins over the step's tokens. It reports whether it took
// any.
func (c *EngineCore) processAborts() bool {
	if c.abortsPending.Load() == 0 {
		return false // nothing was put: no need to take the queue's lock
	}
	var ids []string
	n := int64(0)
	for {
		batch, ok := c.aborts.TryGet()
		if !ok {
			break
		}
		ids = append(ids, batch...)
		n++
	}
	if len(ids) > 0 {
		c.abort(ids)
	}
	c.abortsPending.Add(-n)
	return len(ids) > 0
}

// rejectUnschedulable follows a step that scheduled nothing: with nothing
// running, it ends the request that could never fit with an error frame
// (Scheduler.RejectUnschedulable); with requests running, either a step is
// in flight (AsyncScheduling), which is what runs, or the step must have
// stopped at a request preempted as its own victim, and the next step runs
// the others; anything else would spin forever, and panics. With nothing
// running it waits for a KV copy or load to land; and with nothing in
// flight either, requests that wait and no step would ever schedule
// (each holding another back) make it panic too.
func (c *EngineCore) rejectUnschedulable(preempted bool) {
	if r, ok := c.sched.RejectUnschedulable(); ok {
		c.put([]Frame{c.sched.FinalFrame(r, FinishError)})
		return
	}
	if c.nflight > 0 {
		return
	}
	st := c.sched.Stats()
	n := st.Running
	if n == 0 && c.kv != nil && (len(c.kv.copies) > 0 || c.sched.WaitsForLoad()) && !c.sched.Reported() {
		// What waits needs blocks a KV load or store holds, or gives
		// back, or a load to land: the core waits for an input or for
		// the copy to land, as vLLM's steps run empty meanwhile. (A
		// request held for a load with no copy in flight waits for ever:
		// core/kv-load-forgotten-on-abort.) Not when the step reported
		// preempted requests' stores done: the next step admits them.
		c.kv.stalled = true
		return
	}
	if n > 0 && preempted {
		// A request was its own victim with requests after it still
		// running (PolicyPriority can pick such a victim; PolicyFCFS's is
		// always the last): the step stops there, and the next one runs
		// them, as vLLM's empty step does.
		c.syncHeld()
		return
	}
	if n > 0 {
		// A running request always has a token to compute; without one
		// the loop would spin on it forever, and its caller wait forever.
		panic(fmt.Sprintf("core: %d running requests and none could be scheduled", n))
	}
	if st.Waiting > 0 && !preempted && !c.sched.Reported() && c.sched.HasWork() {
		// Nothing runs, nothing is in flight or landing, no request was
		// ended as one that could never fit, and the next step would
		// schedule nothing again: the waiting requests hold each other
		// back (core/kv-loaded-waits-behind-blocked, vLLM's #45387). The
		// loop would spin without end, its requests never ending; a dead
		// core ends every one with an error.
		panic(fmt.Sprintf("core: %d waiting requests, none running or in flight, and none could be scheduled (%d of %d KV blocks held)", st.Waiting, st.KVUsedBlocks, st.KVNumBlocks))
	}
}

// batches holds the Outputs their consumers released, frames' room and
// all, for the core's later steps. What it reuses is memory only: a batch
// taken from it is overwritten whole, so nothing a run does depends on
// whether the pool had one.
var batches sync.Pool

// minBatchRoom is the room for frames a new batch gets: enough for the
// small steps that are most of them. Smaller batches (a final frame put
// alone) are not kept: one taken from the pool would be too small for most
// steps.
const minBatchRoom = 4

// maxKeptBatchRoom bounds the batches kept. A big step's batch is not:
// clearing it on one core for the core loop to fill on another cost more
// than allocating it afresh (256 streaming requests on goroutines: 14%
// fewer tokens a second), and a big batch kept for a small step wastes it.
const maxKeptBatchRoom = 16

// newBatch returns an Outputs and room for n frames in it, a released batch
// when one with the room is at hand.
func newBatch(n int) (*Outputs, []Frame) {
	if n <= maxKeptBatchRoom {
		if out, _ := batches.Get().(*Outputs); out != nil && cap(out.Frames) >= n {
			return out, out.Frames[:0]
		}
	}
	if n <= minBatchRoom {
		b := &struct { // one allocation for the batch and its room
			out    Outputs
			frames [minBatchRoom]Frame
		}{}
		return &b.out, b.frames[:0]
	}
	return &Outputs{}, make([]Frame, 0, n)
}

// Release gives the batch back to the core once its consumer is done with it:
// the consumer must keep no pointer into Frames, and must not use the batch
// again. The frames' NewTokens are the requests' own and stay valid. A batch
// that is never released is collected as usual.
func (o *Outputs) Release() {
	if o == nil || cap(o.Frames) < minBatchRoom || cap(o.Frames) > maxKeptBatchRoom {
		return
	}
	clear(o.Frames) // let the frames' strings go
	*o = Outputs{Frames: o.Frames[:0]}
	batches.Put(o)
}

func (c *EngineCore) put(frames []Frame) {
	c.putBatch(&Outputs{}, frames, c.step)
}

// putBatch publishes the held count and puts frames on the output queue.
// The batch is counted before the held count drops: a request the core
// has finished is still the core's work until its final frame is on the
// queue, and WaitIdle, reading Held and then Batches, must not find the
// core empty with that frame still unsent (a late batch sits in between).
func (c *EngineCore) putBatch(out *Outputs, frames []Frame, step int64) {
	if len(frames) > 0 {
		c.batches.Add(1)
	}
	c.syncHeld()
	if len(frames) == 0 {
		return
	}
	if c.cfg.Observer != nil { // the events are built only when someone listens
		for i := range frames {
			f := &frames[i]
			c.emit(Event{Kind: EventFrameEmitted, RequestID: f.ExternalID, InternalID: f.InternalID, Incarnation: f.Incarnation, Index: f.Index,
				Frame: f.ID, Tokens: f.NewTokens, Position: f.Position, Finished: f.Finished, Reason: f.Reason, Step: step})
		}
	}
	c.faults.Stall(c.rt, failpoints.CoreOutputLate)
	*out = Outputs{Frames: frames, Step: step}
	c.out.Put(out)
}

func (c *EngineCore) emit(e Event) {
	if c.cfg.Observer != nil {
		e.Engine = int(c.cfg.DataParallelRank)
		c.cfg.Observer(e)
	}
}

// syncHeld publishes how many requests the core holds, for the frontend's
// WaitIdle to read, and the scheduler's counts, for its gauges.
//
// It is also where the core checks its blocks as it goes empty: holding no
// request, it must hold no KV block either. A block still in use then
// outlived every request that took it (a leak), and the core reports it
// (EventKVLeak) at that moment, on its own task, at the cost of one
// comparison a change; the whole pool is read only when the check fails.
// The report comes before the held count is published, so that a WaitIdle
// that returns has seen it.
func (c *EngineCore) syncHeld() {
	if c.kv != nil {
		c.startStores()
	}
	n := c.sched.NumRequests()
	st := c.sched.Stats()
	if n == 0 && int64(st.KVUsedBlocks) > c.leaked.Load() {
		c.leaked.Store(int64(st.KVUsedBlocks))
		c.emit(Event{Kind: EventKVLeak, Step: c.step, Held: st.KVUsedBlocks, Err: c.sched.CheckBlocks()})
	}
	c.held.Store(int64(n))
	publish(&c.running, int64(st.Running))
	publish(&c.waiting, int64(st.Waiting))
	publish(&c.kvUsed, int64(st.KVUsedBlocks))
	publish(&c.preemptions, st.Preemptions)
	if c.cfg.MaxLoRAs > 0 {
		c.publishLoRAs()
	}
	if c.cfg.EnablePrefixCaching {
		publish(&c.prefixQueries, st.PrefixCacheQueries)
		publish(&c.prefixHits, st.PrefixCacheHits)
		publish(&c.prefixPreemptedQueries, st.PrefixCachePreemptedQueries)
		publish(&c.prefixPreemptedHits, st.PrefixCachePreemptedHits)
	}
	if c.offloadCounts != nil {
		c.offloadCounts.publish(st.KVOffload)
	}
	if c.specCounts != nil {
		c.specCounts.publish(st.SpecDecoding)
	}
}

// KVLeaked is the most KV blocks the core has found in use while it held
// no request (EventKVLeak): blocks that outlived the requests that took
// them, 0 in a correct engine. Any task may call it.
func (c *EngineCore) KVLeaked() int { return int(c.leaked.Load()) }

// publish stores v in a unless a holds it already: most steps change few
// of the counts, and a load costs less than a store.
// LoRACounts are how many requests of each LoRA adapter (by id) the core
// runs and keeps waiting, vLLM's SchedulerStats.running_lora_adapters and
// waiting_lora_adapters: an adapter with none is absent.
type LoRACounts struct{ Running, Waiting map[int]int }

// publishLoRAs publishes the scheduler's LoRA counts when they changed,
// as a new snapshot: one a reader holds is never written again.
func (c *EngineCore) publishLoRAs() {
	now := &c.lora.now
	if now.Running == nil {
		now.Running, now.Waiting = map[int]int{}, map[int]int{}
	}
	c.sched.CountLoRAs(now.Running, now.Waiting)
	if last := c.lora.published.Load(); last != nil && maps.Equal(last.Running, now.Running) && maps.Equal(last.Waiting, now.Waiting) {
		return
	}
	c.lora.published.Store(&LoRACounts{Running: maps.Clone(now.Running), Waiting: maps.Clone(now.Waiting)})
}

// LoRACounts returns the LoRA counts as of the core's last change; they
// are empty with LoRA off. Any task may call it; the maps must not be
// changed.
func (c *EngineCore) LoRACounts() LoRACounts {
	if c.lora == nil {
		return LoRACounts{}
	}
	if l := c.lora.published.Load(); l != nil {
		return *l
	}
	return LoRACounts{}
}

func publish(a *atomic.Int64, v int64) {
	if a.Load() != v {
		a.Store(v)
	}
}

// Stats returns the scheduler's counts as of the core's last change (an
// add, an abort, a step), as vLLM's core reports them after every step,
// even one that only finished aborted requests and produced no output.
// Each count is the core's at some moment; read while the core runs, they
// need not all be of the same one.
func (c *EngineCore) Stats() SchedulerStats {
	return SchedulerStats{Running: int(c.running.Load()), Waiting: int(c.waiting.Load()),
		Preemptions: c.preemptions.Load(), KVUsedBlocks: int(c.kvUsed.Load()), KVNumBlocks: c.cfg.NumBlocks,
		PrefixCacheQueries: c.prefixQueries.Load(), PrefixCacheHits: c.prefixHits.Load(),
		PrefixCachePreemptedQueries: c.prefixPreemptedQueries.Load(), PrefixCachePreemptedHits: c.prefixPreemptedHits.Load(),
		KVOffload: c.offloadCounts.load(c.cfg), SpecDecoding: c.specCounts.load()}
}
