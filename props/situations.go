package props

import (
	"fmt"
	"iter"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// Situation is a circumstance a run can reach that the properties are
// about: the window a race needs, a rare path of the engine. A run that
// passes tells nothing of a race whose window it never opened, so the
// checker records the situations each run reached and simrun counts the
// seeds that reached each: a sweep of the fixed engine that finds nothing
// shows that it went where the legacy engine fails (FoundationDB's code
// probes, Antithesis's "sometimes" assertions). The checker sees them in
// the engine's events, as it sees the properties: the engine is not
// instrumented for them.
type Situation uint8

const (
	// StaleFrameAfterReuse: a frame of an ended incarnation reached the
	// output processor while a newer incarnation of its request id was
	// live — the founding race's window. The fixed engine drops the frame;
	// the legacy engine, routing by the caller's id, delivers it to the
	// new incarnation (no-stale-delivery).
	StaleFrameAfterReuse Situation = iota
	// ReuseBeforeCoreAbort: a request id was added again while the core
	// still held an earlier incarnation of it: the frontend had ended it,
	// and the core had not yet taken the abort.
	ReuseBeforeCoreAbort
	// ReuseWithFramesInFlight: a request id was added again while frames
	// an earlier incarnation of it produced were on their way to the
	// output processor.
	ReuseWithFramesInFlight
	// AbortAfterReuse: the core took an abort meant for an ended
	// incarnation while a newer incarnation of its id was in the core —
	// the window of vLLM #23697. The fixed engine aborts the old internal
	// id; the legacy engine, routing by the caller's id, aborts the new
	// incarnation (reused-id-finishes-normally).
	AbortAfterReuse
	// StaleFrameDropped: the output processor dropped a frame whose
	// request had ended (vLLM's "ignore output for already-aborted
	// request").
	StaleFrameDropped
	// LateCoreAbort: the core took an abort of a request it no longer
	// held: the abort raced the request's finish in the core.
	LateCoreAbort
	// CoreRefusedAdd: the core refused an ADD whose internal id it still
	// held, which only routing by the caller's id can cause.
	CoreRefusedAdd
	// Preempted: the core preempted a request to free KV blocks.
	Preempted
	// PrefixCacheHit: the core admitted a request that found tokens in
	// the prefix cache.
	PrefixCacheHit
	// PauseWithRequests: a pause reached the core while it held requests.
	PauseWithRequests
	// PauseWhilePaused: a pause reached the core while it was paused.
	PauseWhilePaused
	// ResumeBeforePauseTookEffect: a resume reached the core while a
	// pause had not yet taken effect (a wait pause still draining).
	ResumeBeforePauseTookEffect
	// AddWhilePaused: the core admitted a request while it was paused.
	AddWhilePaused
	// EngineDied: the engine died and ended every request with an error.
	EngineDied
	// ResetWithStepInFlight: a reset of the prefix cache preempted a
	// running request with a step of it in flight (async scheduling),
	// whose token the core must drop when it comes back, and sample again.
	ResetWithStepInFlight
	// PartialWakeWithRequests: a wake-up left some of the executor's
	// memory asleep while the core held requests, which must wait for the
	// rest of it (the window of vLLM #44395).
	PartialWakeWithRequests
	// ResumeWhileAsleep: a resume reached the core while some of the
	// executor's memory slept; the core refused it.
	ResumeWhileAsleep
	// UpdateWithRequests: a weight update began while the core held
	// requests, which must wait for its finish.
	UpdateWithRequests
	// ResumeDuringUpdate: a resume (a ResumeGeneration, a wake-up)
	// reached the core in the middle of a weight update, which it must
	// not end.
	ResumeDuringUpdate
	// UpdateWhileAsleep: a weight update's call reached the core while
	// the executor's weights slept; the core refused it.
	UpdateWhileAsleep
	// LoRAWaitedForASlot: the core held a waiting request back because
	// the step's batch used every LoRA slot, none for its adapter.
	LoRAWaitedForASlot
	// LoRAReloadWithRequests: an adapter's new weights were loaded in
	// place while the core held requests of it.
	LoRAReloadWithRequests
	// LoRALoadDuringAnUpdate: an adapter's new weights were loaded in
	// place in the middle of a weight update of the base model, while
	// the core held requests of the adapter: two trainers' weights change
	// under requests the update holds.
	LoRALoadDuringAnUpdate
	// KVLoadedFromHost: a waiting request's KV landed from host memory
	// (KV offloading), which it waited for.
	KVLoadedFromHost
	// KVLoadLandedAfterAbort: a request's KV load landed after the
	// request had ended, into blocks it must have kept until then.
	KVLoadLandedAfterAbort
	// KVStoreWaitedForLoads: host memory had no room for the blocks a
	// step filled but what loads in flight read, which it keeps until they
	// land (vLLM's ref_cnt): the store waited for a later step. Without
	// the wait the store's copy overwrites the KV a load reads
	// (core/kv-evict-while-loading), and the run fails instead.
	KVStoreWaitedForLoads
	// KVLoadWaitedForALoad: a waiting request whose prompt continues with
	// blocks host memory holds waited while another request's load of
	// them was in flight, as vLLM's connector delays it, instead of
	// loading them a second time; once that load lands the GPU's cache
	// has them, or, if that request ended, it loads them itself.
	KVLoadWaitedForALoad
	// CallSplitAcrossCores: with several data-parallel cores, a control
	// call took effect on some and not on others (a resume overtook it
	// there, or a core refused it): the cores must be brought back into
	// step, or some hold their requests for a wake-up or a finish nobody
	// will send.
	CallSplitAcrossCores
	// KVLoadHeldBack: a waiting request was held back, its lookup of
	// host memory not run, while as many loads were in flight as
	// requests may run (Config.MaxNumSeqs), as vLLM's connector's
	// back-pressure holds every waiting request: it waits for one to
	// land, even a load of a request that ended.
	KVLoadHeldBack
	// TokensCutAtAStop: a step gave a request several tokens at once
	// (speculative decoding) and some came after its end — a stop token,
	// MaxTokens or the model length before the last, taken one by one in
	// the core, or a stop string the frontend found — and were dropped:
	// taken at once, they would have gone past the request's end.
	TokensCutAtAStop
	// DraftPlaceholdersDropped: with async scheduling and speculative
	// decoding, a step that ran passed over a running request that had
	// draft placeholders; the model holds drafts only for its last step's
	// requests, so they had to go, or its next step would give the model
	// tokens it does not have.
	DraftPlaceholdersDropped
	// KVLoadWaitedForAStore: a waiting request waited for a preempted
	// request's store, its own or one of blocks it would load from host
	// memory, to land before it was admitted (vLLM's HIT_PENDING): a
	// store never completed would hold it for ever (vLLM's #49829).
	KVLoadWaitedForAStore
	// KVPendingComputedAgain: a waiting request's hit in host memory ended
	// with blocks a preempted request's store still copied, few enough
	// (Config.KVOffloadMaxRecomputePendingTokens, vLLM's
	// max_recompute_pending_tokens) that it computed them again rather
	// than wait for the store.
	KVPendingComputedAgain
	// KVLoadFailed: a load from host memory landed with a block that
	// failed (core/kv-load-fails), and its request ended with an error or
	// computed it again (Config.KVLoadFailurePolicy).
	KVLoadFailed

	situationCount
)

var situationNames = [situationCount]string{
	"stale-frame-after-reuse", "reuse-before-the-core-aborted", "reuse-with-frames-in-flight", "abort-after-reuse", "stale-frame-dropped",
	"late-core-abort", "core-refused-an-add", "preempted", "prefix-cache-hit", "pause-with-requests", "pause-while-paused",
	"resume-before-pause-took-effect", "add-while-paused", "engine-died", "reset-with-a-step-in-flight",
	"partial-wake-with-requests", "resume-while-asleep", "update-with-requests", "resume-during-an-update", "update-while-asleep",
	"lora-waited-for-a-slot", "lora-reload-with-requests", "lora-load-during-an-update",
	"kv-loaded-from-host", "kv-load-landed-after-abort", "kv-store-waited-for-loads", "kv-load-waited-for-a-load", "call-split-across-cores",
	"kv-load-held-back", "tokens-cut-at-a-stop", "draft-placeholders-dropped", "kv-load-waited-for-a-store",
	"kv-pending-computed-again", "kv-load-failed",
}

var situationDocs = [situationCount]string{
	"a frame of an ended incarnation reached the output processor while a newer incarnation of its id was live (the founding race's window)",
	"an id was added again while the core still held an earlier incarnation of it",
	"an id was added again while frames of an earlier incarnation of it were on their way to the output processor",
	"the core took an abort meant for an ended incarnation while a newer one of its id was in the core (vLLM #23697's window)",
	"the output processor dropped a frame whose request had ended",
	"the core took an abort of a request it no longer held",
	"the core refused an ADD whose internal id it still held",
	"the core preempted a request to free KV blocks",
	"the core admitted a request that found tokens in the prefix cache",
	"a pause reached the core while it held requests",
	"a pause reached the core while it was paused",
	"a resume reached the core before a pause had taken effect",
	"the core admitted a request while it was paused",
	"the engine died and ended every request with an error",
	"a reset of the prefix cache preempted a request with a step of it in flight, whose token must be dropped",
	"a wake-up left some of the executor's memory asleep while the core held requests, which must wait for the rest (vLLM #44395's window)",
	"a resume reached the core while some of the executor's memory slept",
	"a weight update began while the core held requests, which must wait for its finish",
	"a resume (a ResumeGeneration, a wake-up) reached the core in the middle of a weight update, which it must not end",
	"a weight update's call reached the core while the executor's weights slept",
	"the core held a waiting request back because the step's batch used every LoRA slot, none of them for its adapter",
	"an adapter's new weights were loaded in place while the core held requests of it, which go on with them",
	"an adapter's new weights were loaded in place in the middle of a weight update, while the core held requests of it",
	"a waiting request's KV landed from host memory (KV offloading) after it waited for the copy",
	"a request's KV load from host memory landed after the request had ended, into blocks it must have kept until then",
	"host memory had no room for a step's blocks but what loads in flight read, kept until they land: the store waited",
	"a waiting request waited for another request's load of blocks it would load from host memory, instead of loading them twice",
	"a control call took effect on some data-parallel cores and not on others (a resume overtook it there, or a core refused it), which must be brought back into step",
	"a waiting request was held back, not looked up in host memory, while as many KV loads were in flight as requests may run (the connector's back-pressure)",
	"a step gave a request several tokens at once (speculative decoding) and those after its end — a stop token, MaxTokens, the model length or a stop string before the last — were dropped",
	"with async scheduling and speculative decoding, a step that ran passed over a running request with draft placeholders, which the model has no drafts for at its next step: they were dropped",
	"a waiting request waited for a preempted request's store to host memory, its own or one of blocks it would load, to land (vLLM's HIT_PENDING)",
	"a waiting request computed again the blocks at the end of its hit in host memory that a preempted request's store still copied, rather than wait for it (vLLM's max_recompute_pending_tokens)",
	"a load from host memory landed with a block that failed, and its request ended with an error or computed it again (vLLM's kv_load_failure_policy)",
}

// AllSituations lists every situation, in the order of their constants.
var AllSituations = func() []Situation {
	all := make([]Situation, situationCount)
	for i := range all {
		all[i] = Situation(i)
	}
	return all
}()

func (s Situation) String() string {
	if s < situationCount {
		return situationNames[s]
	}
	return fmt.Sprintf("situation(%d)", s)
}

// Doc says in a line what the situation is.
func (s Situation) Doc() string {
	if s < situationCount {
		return situationDocs[s]
	}
	return ""
}

// ParseSituation returns the situation a name (Situation.String) names.
func ParseSituation(name string) (Situation, error) {
	for i, n := range situationNames {
		if n == name {
			return Situation(i), nil
		}
	}
	return 0, fmt.Errorf("no situation %q; the situations are %s", name, strings.Join(situationNames[:], ", "))
}

// ReuseWindows are the windows the legacy engine's routing by the
// caller's id fails in: every failure of its id reuse reaches one of them.
var ReuseWindows = SetOf(StaleFrameAfterReuse, AbortAfterReuse, CoreRefusedAdd)

// SituationSet is a set of situations.
type SituationSet uint64

// A set holds every situation.
var _ [64 - situationCount]struct{}

// SetOf returns the set of the situations given.
func SetOf(ss ...Situation) SituationSet {
	var set SituationSet
	for _, s := range ss {
		set = set.With(s)
	}
	return set
}

// With returns the set with s added.
func (set SituationSet) With(s Situation) SituationSet { return set | 1<<s }

// Has reports whether s is in the set.
func (set SituationSet) Has(s Situation) bool { return set&(1<<s) != 0 }

// Len is the number of situations in the set.
func (set SituationSet) Len() int { return bits.OnesCount64(uint64(set)) }

// All yields the set's situations in the order of their constants.
func (set SituationSet) All() iter.Seq[Situation] {
	return func(yield func(Situation) bool) {
		for rest := uint64(set); rest != 0; rest &= rest - 1 {
			if !yield(Situation(bits.TrailingZeros64(rest))) {
				return
			}
		}
	}
}

// List returns the set's situations in the order of their constants.
func (set SituationSet) List() []Situation { return slices.Collect(set.All()) }

// String lists the set's situations, comma-separated; "none" when empty.
func (set SituationSet) String() string {
	if set == 0 {
		return "none"
	}
	names := make([]string, 0, set.Len())
	for s := range set.All() {
		names = append(names, s.String())
	}
	return strings.Join(names, ", ")
}

// Reach hands each situation of the set on to task.Reach on rt, in the
// order of their constants: under the simulator the run lists them (and a
// traced run records where), on the real runtime a process started with
// task.ReachedEnv logs them.
func (set SituationSet) Reach(rt task.Runtime) {
	for s := range set.All() {
		task.Reach(rt, s.String())
	}
}

// Reached returns the situations the run reached so far.
func (c *Checker) Reached() SituationSet { return c.reached }

// Observer returns an engine observer (engine.Config.Observer) that feeds
// c every event and hands each situation c newly reaches on to
// task.Reach(rt, …), after the event that reached it. On the real runtime
// the engine's goroutines call it at once: it takes their events one at a
// time, in the order they come, which is the order of the engine's own
// hand-offs (each event is published before the hand-off it announces,
// and the frontend's under its lock). Read c (Finish, Err, Reached) once
// the engine is closed.
//
// Off the simulator, WaitIdleMeansIdle holds WaitIdle to the inputs sent
// before it was called: the core may take a request another goroutine
// added between WaitIdle's test and its event.
func (c *Checker) Observer(rt task.Runtime) func(core.Event) {
	_, simulated := sim.Seed(rt)
	c.concurrent = !simulated
	var mu sync.Mutex
	return func(ev core.Event) {
		mu.Lock()
		defer mu.Unlock()
		before := c.reached
		c.ObserveEvent(&ev)
		if c.reached != before {
			(c.reached &^ before).Reach(rt)
		}
	}
}

func (c *Checker) reach(s Situation) { c.reached = c.reached.With(s) }
