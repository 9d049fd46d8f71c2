package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/task"
)

// DefaultOutputChunkSize is how many frames the output handler processes
// between yields.
const DefaultOutputChunkSize = 128

// AsyncLLM is vLLM's AsyncLLM: the frontend that admits requests, routes
// the core's frames into per-request collectors, and aborts.
type AsyncLLM struct {
	rt   task.Runtime
	cfg  Config
	ccfg core.Config
	tok  core.Tokenizer
	obs  func(Event)

	// mu is vLLM's output_processor_mutex_: it guards the request states.
	mu      task.Mutex
	states  map[string]*reqState // by internal id; never ranged over unsorted
	live    map[string]*reqState // by external id
	nextInc uint64
	closed  bool
	dead    error
	counts  counters
	// loraNames are the names requests gave each LoRA adapter id, the
	// last one given; made by the first request with an adapter.
	loraNames map[int]string
	// deferredAborts are aborts a fault hook held back until the next ADD.
	deferredAborts []coreAbort
	// dp is the frontend's state of several cores (dp.go), nil with one.
	dp *dataParallel

	// cores are the engine cores by data-parallel rank, one unless
	// Config.DataParallelSize says more; they share the output queue.
	cores []engineCore
	core1 [1]engineCore // cores, with one
	out   *task.Queue[*core.Outputs]
	tasks *task.Group

	// WaitIdle: counters read without the frontend lock, a monitor to wait on.
	progMu         task.Mutex
	progCond       task.Cond
	idleWaiters    atomic.Int32
	batchesHandled atomic.Uint64
	stopped        atomic.Bool // closed or dead
	ended          atomic.Bool // Close returned: the core's loop is over

	// Utility calls (pause.go): the last call number handed out, and, under
	// progMu, the calls awaiting a reply (nil) or holding it; made by the
	// first call, since most engines never make one.
	calls atomic.Uint64
	// sleep is the sleep gauges' state as the last Sleep or WakeUp to
	// return left it: 0 awake, else the level plus 1. An atomic, not
	// under mu: a gauge is no reason to yield.
	sleep   atomic.Int64
	replies map[uint64]*pendingReply
	// version is the weight version (weights.go), nil until one is set.
	version atomic.Pointer[string]
}

// reqState is the output processor's state of one incarnation.
type reqState struct {
	id          string
	internalID  string
	incarnation uint64
	kind        OutputKind
	promptLen   int
	c           *collector
	// index and parent place a sequence of a parallel-sampling request
	// (N > 1); parent is nil for a request of one sequence.
	index  int
	parent *parentReq
	tokens []int // every token delivered so far
	sent   int   // of tokens, how many Delta outputs carried (StreamInterval > 1)
	detok  detokenizer
	// add orders an Abort that comes before AddRequest has sent the ADD:
	// the ABORT must reach the core after it, or the core would run the
	// request to its end for nobody.
	add atomic.Uint32
	// core is the data-parallel rank of the core the sequence was routed
	// to, whose ABORT it takes: 32 bits, beside add.
	core int32
}

// parentReq is vLLM's ParentRequest: what the sequences of a request with
// N > 1 share. Each sequence is a reqState of its own, keyed by its own
// internal id, with the request's collector.
type parentReq struct {
	seqs []*reqState // by index
	open int         // sequences not ended yet
	// final holds each sequence's last completion, for FinalOnly, which
	// returns them together once the last one finishes.
	final []Completion
}

// The states of reqState.add: exactly one of AddRequest and Abort sends
// the core the ABORT of a request aborted around its ADD.
const (
	addPending uint32 = iota // AddRequest has not sent the ADD yet
	addSent                  // the ADD is on the core's input queue
	addAborted               // Abort came first: AddRequest sends the ABORT after its ADD
)

// Request is one incarnation of a caller's request.
type Request struct {
	e           *AsyncLLM
	id          string
	internalID  string
	incarnation uint64
	c           *collector
	par         *parentReq // N > 1
}

// New starts an engine: the core's busy loop as the task "engine-core" and
// the output handler as "output-handler", on cfg.Runtime. A configuration
// it cannot run is an ErrInvalidConfig that names the field.
func New(cfg Config) (*AsyncLLM, error) {
	if cfg.Runtime == nil {
		cfg.Runtime = task.Real()
	}
	if cfg.OutputChunkSize == 0 {
		cfg.OutputChunkSize = DefaultOutputChunkSize
	}
	if cfg.OutputChunkSize < 0 {
		return nil, &configError{fmt.Errorf("engine: OutputChunkSize must be ≥ 0, got %d", cfg.OutputChunkSize)}
	}
	if cfg.StreamInterval < 0 {
		return nil, &configError{fmt.Errorf("engine: StreamInterval must be ≥ 0, got %d", cfg.StreamInterval)}
	}
	if cfg.MaxLoRAs < 0 {
		return nil, &configError{fmt.Errorf("engine: MaxLoRAs must be ≥ 0 (0: the default of %d), got %d", DefaultMaxLoRAs, cfg.MaxLoRAs)}
	}
	if cfg.MaxLoRAs > 0 && !cfg.EnableLoRA {
		return nil, &configError{fmt.Errorf("engine: MaxLoRAs is %d but LoRA is off: set EnableLoRA to serve LoRA adapters", cfg.MaxLoRAs)}
	}
	switch {
	case cfg.MaxCPULoRAs < 0:
		return nil, &configError{fmt.Errorf("engine: MaxCPULoRAs must be ≥ 0 (0: MaxLoRAs), got %d", cfg.MaxCPULoRAs)}
	case cfg.MaxCPULoRAs > 0 && !cfg.EnableLoRA:
		return nil, &configError{fmt.Errorf("engine: MaxCPULoRAs is %d but LoRA is off: set EnableLoRA to serve LoRA adapters", cfg.MaxCPULoRAs)}
	case cfg.MaxCPULoRAs > 0 && cfg.MaxCPULoRAs < cfg.LoRASlots():
		// vLLM's LoRAConfig: "max_cpu_loras must be >= max_loras".
		return nil, &configError{fmt.Errorf("engine: MaxCPULoRAs (%d) must be ≥ MaxLoRAs (%d): the executor loads every adapter of a step", cfg.MaxCPULoRAs, cfg.LoRASlots())}
	case cfg.KVOffloadBlocks < 0:
		return nil, &configError{fmt.Errorf("engine: KVOffloadBlocks must be ≥ 0 (0: offloading off), got %d", cfg.KVOffloadBlocks)}
	case cfg.KVOffloadBlocks > 0 && !cfg.EnablePrefixCaching:
		return nil, &configError{fmt.Errorf("engine: KVOffloadBlocks is %d but EnablePrefixCaching is off: offloaded blocks are found by the prefix cache's hashes", cfg.KVOffloadBlocks)}
	case cfg.KVOffloadStoreThreshold < 0:
		return nil, &configError{fmt.Errorf("engine: KVOffloadStoreThreshold must be ≥ 0 (below 2: every block stored), got %d", cfg.KVOffloadStoreThreshold)}
	case cfg.KVLoadFailurePolicy > LoadFailureRecompute:
		return nil, &configError{fmt.Errorf("engine: unknown KVLoadFailurePolicy %d: want LoadFailureFail or LoadFailureRecompute", cfg.KVLoadFailurePolicy)}
	case cfg.KVOffloadMaxRecomputePendingTokens < 0:
		return nil, &configError{fmt.Errorf("engine: KVOffloadMaxRecomputePendingTokens must be ≥ 0 (0: always wait for a pending store), got %d", cfg.KVOffloadMaxRecomputePendingTokens)}
	case cfg.KVOffloadTrackerSize < 0:
		return nil, &configError{fmt.Errorf("engine: KVOffloadTrackerSize must be ≥ 0 (0: %d), got %d", core.DefaultKVOffloadTrackerSize, cfg.KVOffloadTrackerSize)}
	case cfg.NumSpeculativeTokens < 0:
		return nil, &configError{fmt.Errorf("engine: NumSpeculativeTokens must be ≥ 0 (0: speculative decoding off), got %d", cfg.NumSpeculativeTokens)}
	}
	if cfg.DataParallelSize < 0 || cfg.DataParallelSize > MaxDataParallelSize {
		return nil, &configError{fmt.Errorf("engine: DataParallelSize must be from 0 (one core) to %d, got %d", MaxDataParallelSize, cfg.DataParallelSize)}
	}
	ccfg := cfg.coreConfig()
	if err := ccfg.Validate(); err != nil {
		return nil, &configError{err}
	}
	rt := cfg.Runtime
	e := &AsyncLLM{
		rt: rt, cfg: cfg, ccfg: ccfg, obs: cfg.Observer,
		mu:     rt.NewMutex("frontend"),
		states: make(map[string]*reqState),
		live:   make(map[string]*reqState),
		out:    task.NewQueue[*core.Outputs](rt, task.QueueName("core-output")),
		tasks:  task.NewGroup(rt, "engine-tasks"),
		progMu: rt.NewMutex("engine-progress"),
	}
	e.progCond = rt.NewCond(e.progMu)
	e.startCores()
	e.tasks.Go("output-handler", e.outputHandler)
	return e, nil
}

func (e *AsyncLLM) emit(ev Event) {
	if e.obs != nil {
		e.obs(ev)
	}
}

// AddRequest registers a request and sends it to the core. The prompt is
// encoded with the toy tokenizer. It fails fast when the engine is dead or
// closed, with ErrDuplicateRequestID when id is still live in the frontend,
// and with ErrInvalidRequest when the request cannot run.
func (e *AsyncLLM) AddRequest(id, prompt string, p Params) (*Request, error) {
	if err := e.usable(); err != nil { // a dead engine says so first, whatever the request
		return nil, err
	}
	tokens := e.tok.Encode(prompt)
	if err := e.validate(id, tokens, p); err != nil {
		return nil, err
	}
	p.StopTokenIDs = slices.Clone(p.StopTokenIDs)
	p.Stop = slices.Clone(p.Stop)

	e.mu.Lock()
	if err := e.unusableLocked(); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	if old, ok := e.live[id]; ok {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is still live (incarnation %d); abort it or read it to its end first", ErrDuplicateRequestID, id, old.incarnation)
	}
	if p.LoRA != nil {
		if e.loraNames == nil {
			e.loraNames = make(map[int]string)
		}
		e.loraNames[p.LoRA.ID] = p.LoRA.Name
	}
	e.nextInc++
	inc := e.nextInc
	internal := id
	if !e.cfg.LegacyIDRouting {
		internal = id + "-" + incSuffix(inc)
	}
	r := &Request{e: e, id: id, internalID: internal, incarnation: inc, c: newCollector(e.rt, p.Output)}
	n := p.sequences()
	if n > 1 {
		// Parallel sampling, as vLLM's add_request: one child request per
		// sequence, "INDEX_ID", all feeding the one collector.
		r.par = &parentReq{seqs: make([]*reqState, 0, n), open: n}
	}
	st := e.registerLocked(id, internal, inc, 0, r.par, r.c, tokens, p)
	if r.par != nil {
		r.par.seqs = append(r.par.seqs, st)
		for i := 1; i < n; i++ {
			r.par.seqs = append(r.par.seqs, e.registerLocked(id, internal, inc, i, r.par, r.c, tokens, p))
		}
	}
	e.live[id] = st
	deferred := e.deferredAborts
	e.deferredAborts = nil
	e.mu.Unlock()

	e.rt.Yield("frontend.add.after-register")
	if r.par == nil {
		e.sendAdd(st, tokens, p)
	} else {
		for _, s := range r.par.seqs {
			e.sendAdd(s, tokens, p)
		}
	}
	e.sendHeld(deferred)
	return r, nil
}

// sendAdd sends the core the ADD of a registered request, or of one
// sequence of it, and its ABORT right after when an Abort came first.
func (e *AsyncLLM) sendAdd(st *reqState, prompt []int, p Params) {
	e.cores[st.core].c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{
		InternalID: st.internalID, ExternalID: st.id, Incarnation: st.incarnation, Index: st.index, Priority: p.Priority, LoRA: p.LoRAID(), Prompt: prompt,
		Params: p.Sampling(),
	}})
	if !st.add.CompareAndSwap(addPending, addSent) { // aborted while its ADD was on the way
		e.sendAbort(int(st.core), []string{st.internalID})
	}
}

// registerLocked makes the output processor's state of sequence index of
// an incarnation (0 and no parent for a request of one sequence) and
// tells the observer.
func (e *AsyncLLM) registerLocked(id, internal string, inc uint64, index int, par *parentReq, c *collector, prompt []int, p Params) *reqState {
	if par != nil {
		internal = strconv.Itoa(index) + "_" + internal // vLLM's child request id
	}
	st := &reqState{id: id, internalID: internal, incarnation: inc, index: index, parent: par, kind: p.Output, promptLen: len(prompt),
		c: c, detok: newDetokenizer(p.Stop, p.MinTokens, p.Output, e.cfg.StreamInterval > 1)}
	if e.dp != nil {
		st.core = int32(e.routeLocked(p))
	}
	e.states[internal] = st
	e.emit(Event{Kind: core.EventAdd, RequestID: id, InternalID: internal, Incarnation: inc, Index: index, Prompt: prompt, Params: p, Engine: int(st.core)})
	return st
}

func (e *AsyncLLM) unusableLocked() error {
	if e.dead != nil {
		return e.dead
	}
	if e.closed {
		return ErrClosed
	}
	return nil
}

// coreAbort is an abort of internal ids for the core of rank core.
type coreAbort struct {
	core int
	ids  []string
}

// sendAbort tells core n to abort internal ids, on both of its queues as
// vLLM's input thread does — unless the failpoint engine/abort-after-add
// holds it back until after the next ADD.
func (e *AsyncLLM) sendAbort(n int, ids []string) {
	if e.cfg.Faults.Fires(failpoints.AbortAfterAdd) {
		e.mu.Lock()
		e.deferredAborts = append(e.deferredAborts, coreAbort{n, ids})
		e.mu.Unlock()
		return
	}
	e.cores[n].c.SendAbort(ids)
}

// sendAborts tells each core to abort the sequences of sts it holds, in
// one batch a core.
func (e *AsyncLLM) sendAborts(sts []*reqState) {
	if len(e.cores) == 1 {
		ids := make([]string, len(sts))
		for i, st := range sts {
			ids[i] = st.internalID
		}
		e.sendAbort(0, ids)
		return
	}
	coreOf := func(st *reqState) int { return int(st.core) }
	if e.cfg.Faults.Fires(failpoints.EngineDPAbortMisrouted) {
		e.mu.Lock()
		now := e.leastLoadedLocked()
		e.mu.Unlock()
		coreOf = func(*reqState) int { return now } // the bug: where a new request would go
	}
	for n := range e.cores {
		var ids []string
		for _, st := range sts {
			if coreOf(st) == n {
				ids = append(ids, st.internalID)
			}
		}
		if len(ids) > 0 {
			e.sendAbort(n, ids)
		}
	}
}

// flushAborts sends the aborts the failpoint held back: a transport
// delivers everything before a barrier (WaitIdle, Close).
func (e *AsyncLLM) flushAborts() {
	e.mu.Lock()
	held := e.deferredAborts
	e.deferredAborts = nil
	e.mu.Unlock()
	e.sendHeld(held)
}

// sendHeld sends the aborts the failpoint held back, each to its core.
func (e *AsyncLLM) sendHeld(held []coreAbort) {
	for _, a := range held {
		e.cores[a.core].c.SendAbort(a.ids)
	}
}

// Abort aborts the live requests with these external ids, in one batch:
// their frontend state goes at once, each collector gets a final output with
// reason abort and the tokens so far, and the core is told asynchronously.
// Unknown and finished ids are ignored.
func (e *AsyncLLM) Abort(ids ...string) {
	e.mu.Lock()
	var aborted []*reqState
	for _, id := range ids {
		st, ok := e.live[id]
		switch {
		case !ok:
		case st.parent != nil:
			aborted = e.abortSeqsLocked(st.parent, aborted)
		default:
			e.abortLocked(st)
			aborted = append(aborted, st)
		}
	}
	e.mu.Unlock()
	if len(aborted) == 0 {
		return
	}
	e.rt.Yield("frontend.abort.after-state-removed")
	sent := aborted[:0]
	for _, st := range aborted {
		// A request whose ADD is not sent yet gets its ABORT from
		// AddRequest, right after the ADD.
		if !st.add.CompareAndSwap(addPending, addAborted) {
			sent = append(sent, st)
		}
	}
	if len(sent) > 0 {
		e.sendAborts(sent)
	}
}

// abortSeqsLocked aborts every sequence of a parallel-sampling request
// that has not ended, as vLLM's abort of a parent aborts its children, and
// appends them to aborted.
func (e *AsyncLLM) abortSeqsLocked(par *parentReq, aborted []*reqState) []*reqState {
	for _, s := range par.seqs {
		if e.states[s.internalID] == s {
			e.abortLocked(s)
			aborted = append(aborted, s)
		}
	}
	return aborted
}

// abortLocked removes a live incarnation, or one sequence of it, and puts
// its final abort output.
func (e *AsyncLLM) abortLocked(st *reqState) {
	e.emit(Event{Kind: core.EventAbort, RequestID: st.id, InternalID: st.internalID, Incarnation: st.incarnation, Index: st.index, Reason: FinishAbort})
	if out, ok := e.makeOutput(st, nil, true, FinishAbort, ""); ok { // a FinalOnly sequence but the last gives none
		st.c.put(out)
	}
	e.endLocked(st, FinishAbort, nil)
}

// endLocked forgets an incarnation whose final output (or error) its
// collector holds, counts how it finished, and tells the observer.
func (e *AsyncLLM) endLocked(st *reqState, reason FinishReason, err error) {
	e.dropLocked(st)
	n := e.countsOf(st.core)
	switch reason {
	case FinishStop:
		n.FinishedStop++
	case FinishLength:
		n.FinishedLength++
	case FinishAbort:
		n.FinishedAbort++
	default:
		n.FinishedError++
	}
	e.emit(Event{Kind: core.EventFinish, RequestID: st.id, InternalID: st.internalID, Incarnation: st.incarnation, Index: st.index, Finished: true, Reason: reason, Err: err, Tokens: st.tokens})
}

// dropLocked forgets a sequence; its id stays live until its request's
// last sequence is forgotten.
func (e *AsyncLLM) dropLocked(st *reqState) {
	delete(e.states, st.internalID)
	if e.dp != nil {
		e.dp.inflight[st.core]--
	}
	head := st
	if par := st.parent; par != nil {
		if par.open--; par.open > 0 {
			return
		}
		head = par.seqs[0]
	}
	if e.live[st.id] == head {
		delete(e.live, st.id)
	}
}

// HasUnfinishedRequests reports whether the frontend holds any request. As
// in vLLM it says nothing about the core: use WaitIdle for that.
func (e *AsyncLLM) HasUnfinishedRequests() bool {
	e.mu.Lock()
	n := len(e.states)
	e.mu.Unlock()
	return n > 0
}

// WaitIdle waits until the core is quiescent: it has processed every input
// sent before the call (every abort confirmed, the eager aborts queue
// drained too), holds no request, and the output handler has taken every
// batch the core emitted. It returns early
// with ctx's error when ctx is done, or with ErrClosed or the engine-dead
// error.
func (e *AsyncLLM) WaitIdle(ctx context.Context) error {
	e.flushAborts()
	targets := e.inputsSent()
	e.progMu.Lock()
	e.idleWaiters.Add(1)
	stop, _ := task.AfterContext(e.rt, ctx, func() {
		e.progMu.Lock()
		e.progCond.Broadcast()
		e.progMu.Unlock()
	})
	var err error
	for {
		if err = ctx.Err(); err != nil {
			break
		}
		if err = e.usable(); err != nil {
			break
		}
		// Atomic reads only, with no scheduling point between them, so
		// that they describe one moment. The event reports that moment,
		// the core holding nothing: a second read of Held could count,
		// on goroutines, a request added since.
		if e.coresIdle(targets) {
			break
		}
		e.progCond.Wait("engine.wait-idle")
	}
	e.idleWaiters.Add(-1)
	e.progMu.Unlock()
	stop()
	if err == nil {
		for n, target := range targets {
			e.emit(Event{Kind: core.EventIdle, Input: target, Engine: n})
		}
	}
	return err
}

// notify wakes WaitIdle callers, if there are any, after progress.
func (e *AsyncLLM) notify() {
	if e.idleWaiters.Load() > 0 {
		e.progMu.Lock()
		e.progCond.Broadcast()
		e.progMu.Unlock()
	}
}

// Close aborts every live request, stops the core and the output handler,
// and waits for them. It is idempotent.
func (e *AsyncLLM) Close() error {
	e.mu.Lock()
	first := !e.closed
	e.closed = true
	e.stopped.Store(true) // before any request ends, as die does
	if first {
		for _, st := range e.liveSortedLocked() {
			e.abortLocked(st)
		}
	}
	e.mu.Unlock()
	if first {
		e.flushAborts()
		for _, c := range e.cores {
			c.c.Send(core.Input{Kind: core.InputShutdown})
			c.in.Close()
		}
	}
	e.tasks.Wait()
	for _, c := range e.cores {
		c.aborts.Close()
	}
	e.ended.Store(true)
	e.notify()
	return nil
}

// CheckKV reports the first way the core's KV blocks disagree with the
// requests the core holds, or nil: a block held by no request (a leak), a
// reference count that is not the number of its holders, a block both free
// and held, a request whose blocks do not cover its computed tokens
// (core.Scheduler.CheckBlocks). Close ends every request the core holds,
// so after a clean Close every block must be free. The blocks are the
// core loop's own: call it after Close returned; before, it says so.
func (e *AsyncLLM) CheckKV() error {
	if !e.ended.Load() {
		return errors.New("engine: CheckKV before Close returned: the core's KV blocks are its loop's while it runs")
	}
	for n, c := range e.cores {
		if err := c.c.CheckKV(); err != nil {
			if len(e.cores) > 1 {
				return fmt.Errorf("engine: KV blocks of core %d: %w", n, err)
			}
			return fmt.Errorf("engine: KV blocks: %w", err)
		}
	}
	return nil
}

// liveSortedLocked returns the live requests oldest first, so that nothing
// depends on map order.
func (e *AsyncLLM) liveSortedLocked() []*reqState {
	all := make([]*reqState, 0, len(e.states))
	for _, st := range e.states {
		all = append(all, st)
	}
	slices.SortFunc(all, func(a, b *reqState) int {
		return cmp.Or(cmp.Compare(a.incarnation, b.incarnation), cmp.Compare(a.index, b.index))
	})
	return all
}

// die ends every live request with the engine-dead error; later calls fail
// fast with it. Of several cores, the live ones are shut down, as vLLM's
// client shuts every engine down once one dies: they drop what they hold
// and stop, and the last to stop ends the output handler.
func (e *AsyncLLM) die(cause error) {
	err := fmt.Errorf("%w: %v", ErrEngineDead, cause)
	e.mu.Lock()
	first := e.dead == nil
	if first {
		e.dead = err
		// Before any request fails: a caller that reads the error and
		// calls again must find the engine stopped (usable's fast path).
		e.stopped.Store(true)
		for _, st := range e.liveSortedLocked() {
			st.c.fail(err)
			e.endLocked(st, FinishError, err)
		}
	}
	e.mu.Unlock()
	if first && len(e.cores) > 1 {
		for _, c := range e.cores {
			c.c.Send(core.Input{Kind: core.InputShutdown})
		}
	}
}

// outputHandler is vLLM's output handler task: it takes batches from the
// core, processes them in chunks with the frontend lock held, yielding
// between chunks, and aborts in the core what each chunk's stop strings
// finished.
func (e *AsyncLLM) outputHandler() {
	for {
		outs, ok := e.out.Get()
		if !ok {
			return
		}
		e.cfg.Faults.Stall(e.rt, failpoints.OutputHandlerStall)
		if outs.Dead != nil {
			e.die(outs.Dead)
		} else {
			e.process(outs)
		}
		if outs.Reply != nil {
			e.deliver(*outs.Reply) // after every frame before it
		}
		outs.Release() // nothing made from it points into it
		e.batchesHandled.Add(1)
		e.notify()
	}
}

// process routes a batch chunk by chunk. As vLLM's output handler does, the
// core is told to abort what a chunk's stop strings finished once that
// chunk is done (after the yield that follows it), not after the whole
// batch: the core can stop those requests while later chunks are processed.
func (e *AsyncLLM) process(outs *core.Outputs) {
	frames := outs.Frames
	chunk := e.cfg.OutputChunkSize
	for start := 0; start < len(frames); start += chunk {
		end := min(start+chunk, len(frames))
		var toAbort []*reqState
		e.mu.Lock()
		for i := start; i < end; i++ {
			if st := e.processFrameLocked(&frames[i]); st != nil {
				toAbort = append(toAbort, st)
			}
		}
		e.mu.Unlock()
		if end < len(frames) {
			e.rt.Yield("output-handler.between-chunks")
		}
		if len(toAbort) > 0 {
			e.sendAborts(toAbort)
		}
	}
}

// processFrameLocked routes one frame to its request. It returns the
// request when the core must abort it: a stop string finished it while
// the core still runs it.
func (e *AsyncLLM) processFrameLocked(f *core.Frame) *reqState {
	st, ok := e.states[f.InternalID]
	if !ok {
		e.countsOf(e.frameCore(f.ID)).StaleFramesDropped++
		if e.obs != nil {
			e.emit(Event{Kind: core.EventFrameDropped, RequestID: f.ExternalID, InternalID: f.InternalID, Incarnation: f.Incarnation, Index: f.Index,
				Frame: f.ID, Tokens: f.NewTokens, Position: f.Position, Finished: f.Finished, Reason: f.Reason})
		}
		return nil
	}
	if e.obs != nil { // built only when someone listens: this is the hot path
		e.emit(Event{Kind: core.EventFrameDelivered, RequestID: f.ExternalID, InternalID: f.InternalID, Incarnation: f.Incarnation, Index: f.Index,
			Collector: st.incarnation, CollectorIndex: st.index, Frame: f.ID, Tokens: f.NewTokens, Position: f.Position, Finished: f.Finished, Reason: f.Reason})
	}
	n := e.countsOf(st.core)
	if len(st.tokens) == 0 && len(f.NewTokens) > 0 {
		n.PromptTokens += int64(st.promptLen)
	}
	st.tokens = append(st.tokens, f.NewTokens...)
	n.GenerationTokens += int64(len(f.NewTokens))

	finished, reason := f.Finished, f.Reason
	stopReason := ""
	if f.StopReason >= 0 {
		stopReason = strconv.Itoa(f.StopReason)
	}
	text := f.NewTokens
	if f.Finished && f.Reason == FinishStop && len(text) > 0 {
		// A stop token (EOS or one of StopTokenIDs) ends the text before
		// it, as vLLM's detokenizer skips it; its id stays in TokenIDs.
		text = text[:len(text)-1]
	}
	newTokens := f.NewTokens
	if s, took, hit := st.detok.update(text); hit {
		finished, reason, stopReason = true, FinishStop, s
		if past := len(newTokens) - took; past > 0 && !e.cfg.Faults.Fires(failpoints.EngineKeepsTokensPastStopString) {
			// The frame's tokens after the one that completed the stop
			// string (several a step with speculative decoding) are past
			// the request's end: dropped, as vLLM's open #47616 would.
			newTokens = newTokens[:took:took] // no room over the core's tokens past the stop
			st.tokens = st.tokens[:len(st.tokens)-past]
			if e.obs != nil {
				e.emit(Event{Kind: core.EventTokensCut, RequestID: f.ExternalID, InternalID: f.InternalID, Incarnation: f.Incarnation, Index: f.Index, Held: past, Text: "stop-string"})
			}
		}
	}
	if e.holdsBack(st, finished) {
		return nil
	}
	if out, ok := e.makeOutput(st, newTokens, finished, reason, stopReason); ok {
		st.c.put(out)
	}
	if !finished {
		return nil
	}
	e.endLocked(st, reason, nil)
	if f.Finished {
		return nil
	}
	return st
}

// holdsBack reports whether a Delta output of st waits for more tokens, as
// vLLM's stream_interval: until the interval's worth of tokens since the
// last one, except the first token and the finish.
func (e *AsyncLLM) holdsBack(st *reqState, finished bool) bool {
	n := e.cfg.StreamInterval
	return n > 1 && st.kind == Delta && !finished && st.sent > 0 && len(st.tokens)-st.sent < n
}

// makeOutput builds the output of a request after new tokens, as vLLM's
// _make_request_output: FinalOnly builds nothing until finished. Under a
// StreamInterval a Delta output carries every token since the last one.
func (e *AsyncLLM) makeOutput(st *reqState, newTokens []int, finished bool, reason FinishReason, stopReason string) (Output, bool) {
	if !finished && st.kind == FinalOnly {
		return Output{}, false
	}
	delta := st.kind == Delta
	out := Output{RequestID: st.id, Text: st.detok.next(finished, delta), Finished: finished, PromptTokens: st.promptLen}
	switch {
	case delta && e.cfg.StreamInterval > 1:
		n := len(st.tokens)
		out.TokenIDs = st.tokens[st.sent:n:n] // no room past it: a merge copies
		st.sent = n
	case delta:
		out.TokenIDs = newTokens
	default:
		out.TokenIDs = slices.Clone(st.tokens)
	}
	if finished {
		out.FinishReason, out.StopReason = reason, stopReason
	}
	if st.parent != nil {
		return st.parent.output(st, out)
	}
	return out, true
}

// output turns what sequence st produced into its request's output, as
// vLLM's ParentRequest.get_outputs: a streamed output carries the one
// sequence; FinalOnly gathers each sequence's last completion and returns
// them all with the last one. The request is finished when st is its last
// sequence to finish (dropLocked then counts it out).
func (par *parentReq) output(st *reqState, one Output) (Output, bool) {
	c := Completion{Index: st.index, TokenIDs: one.TokenIDs, Text: one.Text, FinishReason: one.FinishReason, StopReason: one.StopReason}
	out := Output{RequestID: one.RequestID, Finished: one.Finished && par.open == 1, PromptTokens: one.PromptTokens}
	if st.kind != FinalOnly {
		out.Completions = []Completion{c}
		return out, true
	}
	if par.final == nil {
		par.final = make([]Completion, len(par.seqs))
	}
	par.final[st.index] = c
	if !out.Finished {
		return Output{}, false
	}
	out.Completions = par.final
	return out, true
}

// ID returns the caller's request id.
func (r *Request) ID() string { return r.id }

// InternalID returns the id the core knows this incarnation by.
func (r *Request) InternalID() string { return r.internalID }

// Incarnation returns the number of the AddRequest call that made r.
func (r *Request) Incarnation() uint64 { return r.incarnation }

// Next blocks until the request has an output and returns it. After the
// Finished output it returns io.EOF; if the engine died first, the
// engine-dead error, every time.
func (r *Request) Next() (Output, error) {
	out, err := r.c.next()
	if err == nil && r.e.obs != nil {
		if r.par == nil {
			r.e.emit(Event{Kind: core.EventOutput, RequestID: out.RequestID, InternalID: r.internalID, Incarnation: r.incarnation,
				Tokens: out.TokenIDs, Text: out.Text, Finished: out.Finished, Reason: out.FinishReason})
		}
		// One event a sequence, Finished when that sequence finished,
		// then one for the output as a whole.
		for _, c := range out.Completions {
			r.e.emit(Event{Kind: core.EventOutput, RequestID: out.RequestID, InternalID: r.par.seqs[c.Index].internalID, Incarnation: r.incarnation, Index: c.Index,
				Tokens: c.TokenIDs, Text: c.Text, Finished: c.FinishReason != "", Reason: c.FinishReason})
		}
		if r.par != nil {
			r.e.emit(Event{Kind: core.EventRequestOutput, RequestID: r.id, InternalID: r.internalID, Incarnation: r.incarnation,
				Held: len(out.Completions), Finished: out.Finished})
		}
	}
	return out, err
}

// Cancel aborts this incarnation only — the client walked away. Its
// collector gets the final abort output, which Next still returns. It is a
// no-op once the request ended.
func (r *Request) Cancel() {
	e := r.e
	var one [1]*reqState // on the stack: most requests have one sequence
	var sts []*reqState
	e.mu.Lock()
	if r.par != nil {
		sts = e.abortSeqsLocked(r.par, nil)
	} else if st, ok := e.states[r.internalID]; ok && st.incarnation == r.incarnation {
		e.abortLocked(st)
		one[0] = st
		sts = one[:]
	}
	e.mu.Unlock()
	if len(sts) == 0 {
		return
	}
	e.rt.Yield("frontend.cancel.after-state-removed")
	e.sendAborts(sts)
}

// Generate adds a request and yields its outputs until it finishes. An
// error ends the sequence: the AddRequest error, the engine-dead error, or
// ctx's error once ctx is done, in which case the request was aborted. A
// consumer that stops early aborts the request, as a client walking away.
func (e *AsyncLLM) Generate(ctx context.Context, id, prompt string, p Params) iter.Seq2[Output, error] {
	return func(yield func(Output, error) bool) {
		r, err := e.AddRequest(id, prompt, p)
		if err != nil {
			yield(Output{}, err)
			return
		}
		if e.cfg.Faults.Fires(failpoints.ClientAbandon) {
			return // the client vanished: no read, no cancel; the request runs on
		}
		stop, _ := task.AfterContext(e.rt, ctx, r.Cancel)
		defer stop()
		// A consumer whose loop body panics (or calls runtime.Goexit) has
		// walked away too, but yield never returns to say so: abort the
		// request on the way out, or it runs on to MaxTokens for nobody,
		// its id still live. Every other way out has ended it already.
		ended := false
		defer func() {
			if !ended {
				r.Cancel()
			}
		}()
		for {
			if err := ctx.Err(); err != nil {
				r.Cancel()
				ended = true
				yield(Output{}, err)
				return
			}
			out, err := r.Next()
			if errors.Is(err, io.EOF) {
				ended = true
				return
			}
			if err != nil {
				ended = true // the engine died: its requests are gone
				yield(Output{}, err)
				return
			}
			if out.Finished {
				ended = true
			}
			if out.aborted() && ctx.Err() != nil {
				yield(Output{}, ctx.Err())
				return
			}
			if !yield(out, nil) {
				r.Cancel()
				ended = true
				return
			}
			if out.Finished {
				return
			}
		}
	}
}

// incSuffix is the suffix of an incarnation's internal id: its number in
// hex, eight digits at least, so that no two incarnations share one (the
// eight digits alone would repeat after 2³² requests).
func incSuffix(inc uint64) string {
	if inc < 1<<32 {
		return strconv.FormatUint(inc|1<<32, 16)[1:]
	}
	return strconv.FormatUint(inc, 16)
}
