package core

import (
	"fmt"
	"strconv"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventAdd: the frontend accepted a request and registered it.
	EventAdd EventKind = iota + 1
	// EventAbort: the frontend removed a live incarnation (Abort, Cancel,
	// Close) and put its final abort output into its collector.
	EventAbort
	// EventCoreAdd: the core admitted the request.
	EventCoreAdd
	// EventCoreReject: the core refused an ADD whose internal id it holds
	// (or, which the frontend refuses first, with a LoRA adapter while
	// LoRA is off); Err says which.
	EventCoreReject
	// EventCoreAbort: the core processed an abort of InternalID;
	// Incarnation is the one it finished, 0 when it held none.
	EventCoreAbort
	// EventStep: the core executed a step over Held scheduled requests.
	EventStep
	// EventPreempt: the core preempted a request to free KV blocks; when
	// a reset of the prefix cache preempted it (EventCacheReset), Held is
	// the outputs of its steps in flight that the core will drop.
	EventPreempt
	// EventFrameEmitted: the core emitted a frame of Tokens for
	// Incarnation, the first at output position Position.
	EventFrameEmitted
	// EventFrameDelivered: the output processor put the frame's tokens into
	// the collector of incarnation Collector.
	EventFrameDelivered
	// EventFrameDropped: the output processor found no request for the
	// frame's internal id ("ignore output for already-aborted request").
	EventFrameDropped
	// EventFinish: the output processor finished the request; its final
	// output is in its collector.
	EventFinish
	// EventOutput: the caller took an output from Next.
	EventOutput
	// EventIdle: WaitIdle returned; Held is what the core held then.
	EventIdle
	// EventDead: the engine died; every request gets ErrEngineDead.
	EventDead
	// EventRequestOutput: the caller of a request of several sequences
	// took an output from Next (after an EventOutput for each sequence it
	// carried, Held of them); Finished when the request finished.
	EventRequestOutput
	// EventPrefixHit: the core admitted a waiting request (new, or
	// preempted) that found its first Held tokens in the prefix cache
	// (Config.EnablePrefixCaching) and computes from there.
	EventPrefixHit
	// EventPause: the core took pause Call, of mode Text ("abort",
	// "wait", "keep"); under abort it ends every request it holds next.
	EventPause
	// EventPauseDone: pause Call took effect (the core went idle) and the
	// core replied to it.
	EventPauseDone
	// EventResume: the core took resume Call.
	EventResume
	// EventPaused: PauseGeneration's call Call returned to its caller;
	// Text is "Sleep" when it was Sleep's.
	EventPaused
	// EventKVLeak: the core held no request, yet Held KV blocks were in
	// use after step Step: blocks outlived the requests that took them.
	// Err names the first such block and the incarnation that last took
	// it (Scheduler.CheckBlocks). Reported once for each rise of the count.
	EventKVLeak
	// EventCacheReset: the core answered Call, a reset of the prefix
	// cache: Finished when it reset the cache, after preempting Held
	// running requests, and not when it refused (a request held KV blocks).
	EventCacheReset
	// EventSleep: sleep Call (level Index, mode Text) took effect and the
	// executor released its memory: Held is the SleepTags asleep.
	EventSleep
	// EventWakeUp: the core took wake-up Call, which woke the tags Text;
	// Held is the SleepTags still asleep, and Finished says it resumed
	// scheduling (an EventResume of the same call follows).
	EventWakeUp
	// EventResumeRefused: the core refused resume Call, the executor's
	// SleepTags Held being asleep: the wake-up resumes.
	EventResumeRefused
	// EventWeightUpdate: the core took Call, a weight update's Text
	// (WeightUpdateStart, WeightUpdateBatch, WeightUpdateFinish): Finished when it did it, with Held
	// the batches the update has written after it; refused, Err says why
	// and Held is the SleepTags asleep.
	EventWeightUpdate
	// EventLoRAWait: the core held back waiting request Incarnation, of
	// LoRA adapter LoRA, for the first time since it entered the queue:
	// the step's batch already used Held adapters, the executor's every
	// slot (Config.MaxLoRAs), none of them its own. Requests behind it
	// may be admitted meanwhile.
	EventLoRAWait
	// EventLoRALoad: the core took Call, a load of LoRA adapter LoRA
	// (vLLM's add_lora) after step Step: Finished when its new weights
	// replaced the old in place, Held then their revision (from 1), each
	// step after Step sampling with them; refused, Err says why.
	EventLoRALoad
	// EventLoRAPin: the core took Call, a pin of LoRA adapter LoRA
	// (vLLM's pin_lora): Finished when pinned, Held then the adapters
	// pinned; refused, Err says why.
	EventLoRAPin
	// EventLoRARemove: the core took Call, a removal of LoRA adapter
	// LoRA (vLLM's remove_lora): Finished when it was loaded.
	EventLoRARemove
	// EventKVLoad: the core started to load Held blocks of the waiting
	// request's KV from host memory (Config.KVOffloadBlocks); the request
	// waits for them.
	EventKVLoad
	// EventKVLoaded: the load of Held blocks of the request's KV landed:
	// the request waits to be admitted with them computed, or, Finished,
	// it had ended meanwhile and its blocks went back, or, Text
	// "abandoned", a reset of the prefix cache came meanwhile and the
	// request gave its blocks back to compute again, or, Text "failed",
	// the last block failed (core/kv-load-fails): the request computes it
	// again, or, Finished, ends with an error (Config.KVLoadFailurePolicy).
	EventKVLoaded
	// EventCallSplit: with several data-parallel cores, the frontend's
	// utility call Call, Text, took effect on Held of the cores and not
	// on the others (a resume overtook it there, or a core refused it);
	// Finished when the frontend brought them back into step (a sleep's
	// wake-up, a weight update's finish).
	EventCallSplit
	// EventKVStore: the core started to copy Held of the request's blocks
	// to host memory (Config.KVOffloadBlocks), those a step filled, or
	// its last at its end; an ended request's blocks stay in use until
	// its copies land.
	EventKVStore
	// EventKVStored: a copy of Held blocks of the request's KV to host
	// memory landed; Finished when it was an ended request's last, which
	// completed its store: host memory holds its blocks for loads to
	// find, and the blocks went back; or, Text "abandoned", a reset of
	// the prefix cache came meanwhile, and host memory keeps none of them.
	// With Text "ended" the request ended with no copy in flight and its
	// store completed then, Held the blocks its copies brought; with Text
	// "preempted" the output of the step that preempted it reported its
	// copies landed, which completed its store.
	EventKVStored
	// EventKVStoreWait: host memory could not make room for the Held
	// blocks the request's step filled, too many of its blocks on their
	// way there or, Text "loads", read by loads in flight, which keep
	// them until they land: none is stored, and the request's next steps
	// try again (vLLM's "cannot store"), told once until a copy starts.
	EventKVStoreWait
	// EventKVLoadWait: the core held the waiting request back because a
	// load in flight reads blocks host memory would load for it, as
	// vLLM's connector delays a request whose hits are being loaded: once
	// that load lands, the GPU's cache has them. With Text "loads" it
	// held it back, not looked up, because Config.MaxNumSeqs loads were in
	// flight (the connector's back-pressure); with Text "store" because a
	// preempted request's store still has copies in flight, its own or of
	// blocks it would load (vLLM's HIT_PENDING). Told once for each reason
	// in a row, until the request is admitted or loads.
	EventKVLoadWait
	// EventTokensCut: of the Held+N tokens a step gave the request at
	// once (speculative decoding), the Held after its end were dropped:
	// Text "stop" after a stop token and "length" at MaxTokens or the
	// model length, the tokens taken one by one in the core;
	// "stop-string" after the token that completed a stop string, in the
	// frontend.
	EventTokensCut
	// EventDraftsDropped: with async scheduling and speculative decoding,
	// a step that ran passed over the running request, which had Held
	// draft placeholders: the model has no drafts for it at its next
	// step, and it loses them (vLLM's #46899); Text "kept" when
	// core/spec-placeholders-outlive-their-window kept them.
	EventDraftsDropped
	// EventKVPendingCut: the waiting request's hit in host memory ended
	// with Held blocks a preempted request's store still copies there
	// (vLLM's HIT_PENDING), few enough that it computes them again rather
	// than wait for the copy (Config.KVOffloadMaxRecomputePendingTokens):
	// told as it is admitted, or as its load of the blocks before them
	// starts.
	EventKVPendingCut
)

var eventKindNames = [...]string{"", "add", "abort", "core.add", "core.reject", "core.abort", "core.step", "core.preempt",
	"frame.emitted", "frame.delivered", "frame.dropped", "finish", "output", "idle", "dead", "request.output", "core.prefix-hit",
	"core.pause", "core.pause-done", "core.resume", "paused", "core.kv-leak", "core.cache-reset",
	"core.sleep", "core.wake-up", "core.resume-refused", "core.weight-update", "core.lora-wait", "core.lora-load",
	"core.lora-pin", "core.lora-remove", "core.kv-load", "core.kv-loaded", "call-split", "core.kv-store", "core.kv-stored",
	"core.kv-store-wait", "core.kv-load-wait", "tokens-cut", "core.drafts-dropped",
	"core.kv-pending-cut"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && k > 0 {
		return eventKindNames[k]
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing the engine did, published to an observer in the task
// where it happened. Frames carry the incarnation that produced them, so a
// stale token is detected by provenance.
type Event struct {
	Kind        EventKind
	RequestID   string // external id
	InternalID  string
	Incarnation uint64 // the incarnation the event concerns; for frames, the producer
	Collector   uint64 // EventFrameDelivered: the incarnation that received the frame
	// Index is the sequence of a parallel-sampling request the event
	// concerns (Request.Index; for frames, the producer's), 0 otherwise;
	// for EventSleep, the sleep's level.
	Index int
	// CollectorIndex is, for EventFrameDelivered, the sequence of
	// Collector that received the frame.
	CollectorIndex int
	Frame          uint64 // frame number, from 1, unique in an engine
	Tokens         []int  // a frame's new tokens, or the tokens of an output
	Position       int    // output position of Tokens[0]
	Text           string // EventOutput: the output's text
	Finished       bool
	Reason         FinishReason
	Step           int64  // core step number
	StepTokens     int    // EventStep: the tokens the step computes; not in the trace hash, as they follow from the schedule
	Held           int    // EventStep: requests scheduled; EventIdle: requests the core held; EventRequestOutput: sequences carried; EventPrefixHit: tokens found cached; EventKVLeak: blocks in use; EventCacheReset: requests preempted; EventPreempt: outputs in flight to drop; EventSleep, EventWakeUp, EventResumeRefused: the SleepTags asleep
	Err            error  // EventDead, EventCoreReject, EventFinish with an error: the cause; EventKVLeak: the leak, named
	Prompt         []int  // EventAdd: the prompt's tokens
	Params         any    // EventAdd: the frontend's request parameters (engine.Params)
	Call           uint64 // EventPause, EventPauseDone, EventResume, EventPaused, EventCacheReset, EventSleep, EventWakeUp, EventResumeRefused, EventWeightUpdate: the utility call
	// LoRA is, for EventLoRAWait, the waiting request's LoRA adapter, for
	// EventLoRALoad the adapter loaded, and for EventStep the LoRA
	// adapters the step's batch used, as the executor counts them (0 with
	// LoRA off).
	LoRA int
	// Input numbers the core's inputs in the order it took them, from 1:
	// for EventCoreAdd and EventCoreReject, the ADD's; for EventIdle, the
	// inputs WaitIdle waited for (those sent before it was called), so
	// that an observer on goroutines can tell the requests added while
	// WaitIdle returned from those it answered for.
	Input uint64
	// Engine is the data-parallel rank of the core whose event it is
	// (Config.DataParallelRank), 0 with one core; for EventIdle, the
	// core whose inputs Input counts (one event a core); for EventAdd,
	// the core the frontend routed the sequence to.
	Engine int
}

func (e Event) String() string {
	if e.Engine == 0 {
		return e.text()
	}
	return e.text() + " on core " + strconv.Itoa(e.Engine)
}

func (e Event) text() string {
	switch e.Kind {
	case EventFrameEmitted, EventFrameDropped:
		return fmt.Sprintf("%s frame %d of %s (incarnation %d) tokens %v at %d%s", e.Kind, e.Frame, e.InternalID, e.Incarnation, e.Tokens, e.Position, finished(e))
	case EventFrameDelivered:
		s := fmt.Sprintf("%s frame %d of %s (incarnation %d) tokens %v at %d → collector of incarnation %d", e.Kind, e.Frame, e.InternalID, e.Incarnation, e.Tokens, e.Position, e.Collector)
		if e.CollectorIndex != 0 || e.Index != 0 {
			s += fmt.Sprintf(" sequence %d", e.CollectorIndex)
		}
		switch {
		case e.Collector != e.Incarnation:
			s += " [STALE: another incarnation's token]"
		case e.CollectorIndex != e.Index:
			s += " [MISROUTED: another sequence's token]"
		}
		return s
	case EventStep:
		if e.LoRA > 0 {
			return fmt.Sprintf("%s %d: %d scheduled, %d LoRA adapter(s)", e.Kind, e.Step, e.Held, e.LoRA)
		}
		return fmt.Sprintf("%s %d: %d scheduled", e.Kind, e.Step, e.Held)
	case EventLoRALoad:
		switch {
		case e.Err != nil:
			return fmt.Sprintf("%s: call %d, adapter %d refused: %v", e.Kind, e.Call, e.LoRA, e.Err)
		case e.Finished:
			return fmt.Sprintf("%s: call %d, adapter %d's new weights in place after step %d: revision %d", e.Kind, e.Call, e.LoRA, e.Step, e.Held)
		}
		return fmt.Sprintf("%s: call %d, adapter %d loaded", e.Kind, e.Call, e.LoRA)
	case EventLoRAPin:
		if e.Err != nil {
			return fmt.Sprintf("%s: call %d, adapter %d refused: %v", e.Kind, e.Call, e.LoRA, e.Err)
		}
		return fmt.Sprintf("%s: call %d, adapter %d pinned, %d pinned", e.Kind, e.Call, e.LoRA, e.Held)
	case EventLoRARemove:
		return fmt.Sprintf("%s: call %d, adapter %d removed (it was loaded: %t)", e.Kind, e.Call, e.LoRA, e.Finished)
	case EventKVLoad:
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) of its KV load from host memory", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventCallSplit:
		return fmt.Sprintf("%s %s (call %d) took effect on %d core(s) only, mended %t", e.Kind, e.Text, e.Call, e.Held, e.Finished)
	case EventKVStore:
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) of its KV copied to host memory", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventTokensCut:
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d token(s) of a step past its end dropped (%s)", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held, e.Text)
	case EventDraftsDropped:
		if e.Text == "kept" {
			return fmt.Sprintf("%s %s (%s, incarnation %d): passed over with %d draft placeholder(s), which the model has no drafts for, and kept them", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		}
		return fmt.Sprintf("%s %s (%s, incarnation %d): passed over with %d draft placeholder(s), which the model has no drafts for", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventKVPendingCut:
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) of its KV a preempted request's store still copies to host memory: it computes them again rather than wait", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventKVLoadWait:
		if e.Text == "loads" {
			return fmt.Sprintf("%s %s (%s, incarnation %d): as many loads from host memory in flight as requests may run: it waits for one to land", e.Kind, e.RequestID, e.InternalID, e.Incarnation)
		}
		if e.Text == "store" {
			return fmt.Sprintf("%s %s (%s, incarnation %d): a preempted request's store to host memory, of its KV, still has copies in flight: it waits for the last to land", e.Kind, e.RequestID, e.InternalID, e.Incarnation)
		}
		return fmt.Sprintf("%s %s (%s, incarnation %d): a load in flight reads blocks of its KV in host memory: it waits for it", e.Kind, e.RequestID, e.InternalID, e.Incarnation)
	case EventKVStoreWait:
		why := ""
		if e.Text == "loads" {
			why = " while loads read it"
		}
		return fmt.Sprintf("%s %s (%s, incarnation %d): no room in host memory for %d block(s) of its KV%s: they wait", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held, why)
	case EventKVStored:
		switch {
		case e.Text == "abandoned":
			return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed after a reset of the prefix cache; host memory keeps none", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		case e.Text == "ended":
			return fmt.Sprintf("%s %s (%s, incarnation %d): ended with no copy in flight, the store of %d block(s) complete", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		case e.Text == "preempted":
			return fmt.Sprintf("%s %s (%s, incarnation %d): preempted, the step's output reports its copies landed, the store of %d block(s) complete", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		case e.Finished:
			return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed in host memory, the store complete; its blocks go back", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		}
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed in host memory", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventKVLoaded:
		if e.Text == "failed" {
			if e.Finished {
				return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed, the last failed: it ends with an error", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
			}
			return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed, the last failed: it computes from there", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		}
		if e.Text == "abandoned" {
			return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed after a reset of the prefix cache; it computes again", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		}
		if e.Finished {
			return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed after it ended; its blocks go back", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
		}
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d block(s) landed", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventLoRAWait:
		return fmt.Sprintf("%s %s (%s, incarnation %d): LoRA adapter %d waits for a slot, the batch uses all %d", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.LoRA, e.Held)
	case EventIdle:
		return fmt.Sprintf("%s: the core holds %d request(s)", e.Kind, e.Held)
	case EventKVLeak:
		return fmt.Sprintf("%s after step %d: the core holds no request, yet %d KV block(s) are in use: %v", e.Kind, e.Step, e.Held, e.Err)
	case EventOutput:
		if e.Index != 0 {
			return fmt.Sprintf("%s %s (incarnation %d sequence %d) tokens %v%s", e.Kind, e.RequestID, e.Incarnation, e.Index, e.Tokens, finished(e))
		}
		return fmt.Sprintf("%s %s (incarnation %d) tokens %v%s", e.Kind, e.RequestID, e.Incarnation, e.Tokens, finished(e))
	case EventDead:
		return fmt.Sprintf("%s: %v", e.Kind, e.Err)
	case EventPrefixHit:
		return fmt.Sprintf("%s %s (%s, incarnation %d): %d token(s) found cached", e.Kind, e.RequestID, e.InternalID, e.Incarnation, e.Held)
	case EventRequestOutput:
		return fmt.Sprintf("%s %s (incarnation %d) %d sequence(s)%s", e.Kind, e.RequestID, e.Incarnation, e.Held, finished(e))
	case EventPause, EventPauseDone:
		return fmt.Sprintf("%s: call %d, mode %s", e.Kind, e.Call, e.Text)
	case EventCacheReset:
		if !e.Finished {
			return fmt.Sprintf("%s: call %d refused: running requests hold KV blocks", e.Kind, e.Call)
		}
		return fmt.Sprintf("%s: call %d, %d running request(s) preempted", e.Kind, e.Call, e.Held)
	case EventSleep:
		return fmt.Sprintf("%s: call %d, level %d, mode %s: %s asleep", e.Kind, e.Call, e.Index, e.Text, SleepTags(e.Held))
	case EventWakeUp:
		s := fmt.Sprintf("%s: call %d woke %s", e.Kind, e.Call, e.Text)
		if SleepTags(e.Held) != 0 {
			s += fmt.Sprintf(", %s still asleep", SleepTags(e.Held))
		}
		if e.Finished {
			s += ", resumes"
		}
		return s
	case EventResumeRefused:
		return fmt.Sprintf("%s: call %d: the executor's %s asleep", e.Kind, e.Call, SleepTags(e.Held))
	case EventWeightUpdate:
		if !e.Finished {
			return fmt.Sprintf("%s: call %d, %s refused: %v", e.Kind, e.Call, e.Text, e.Err)
		}
		return fmt.Sprintf("%s: call %d, %s, %d batch(es) written", e.Kind, e.Call, e.Text, e.Held)
	case EventResume, EventPaused:
		return fmt.Sprintf("%s: call %d", e.Kind, e.Call)
	}
	return fmt.Sprintf("%s %s (%s, incarnation %d)%s", e.Kind, e.RequestID, e.InternalID, e.Incarnation, finished(e))
}

func finished(e Event) string {
	if e.Finished || e.Reason != FinishNone {
		return " finished " + string(e.Reason)
	}
	return ""
}
