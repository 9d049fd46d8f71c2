package engine

import (
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/task"
)

// MaxDataParallelSize is the most engine cores one frontend runs
// (Config.DataParallelSize).
const MaxDataParallelSize = 64

// dataParallel is the frontend's state of several cores.
type dataParallel struct {
	// inflight counts, by core, the sequences routed to it that the
	// frontend has not ended, and lbStart is where the load balancer's
	// next scan starts.
	inflight []int
	lbStart  int
	// callMu orders the utility calls (broadcast), and ranks are the
	// cores', 0 to DataParallelSize−1.
	callMu task.Mutex
	ranks  []int
	// counts are the frontend's counters of each core's requests, by
	// rank (with one core, AsyncLLM.counts).
	counts []counters
}

// countsOf are the frontend's counters of the requests of the core of
// rank n.
func (e *AsyncLLM) countsOf(n int32) *counters {
	if e.dp == nil {
		return &e.counts
	}
	return &e.dp.counts[n]
}

// frameCore is the rank of the core that numbered frame id (the core of
// rank r of n numbers r+1, r+1+n, …).
func (e *AsyncLLM) frameCore(id uint64) int32 {
	return int32((id - 1) % uint64(len(e.cores)))
}

// ranks returns the ranks of the cores, nil with one.
func (e *AsyncLLM) ranks() []int {
	if e.dp == nil {
		return nil
	}
	return e.dp.ranks
}

// engineCore is one data-parallel engine core and its two input queues.
type engineCore struct {
	c      *core.EngineCore
	in     *task.Queue[core.Input]
	aborts *task.Queue[[]string]
}

// allCores are the ranks of n cores, in order.
func allCores(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// startCores makes the engine's cores and starts their busy loops. One
// core is the task "engine-core" on the queues "core-input" and
// "core-aborts"; of several, core N is "engine-core-dpN" on
// "core-input-dpN" and "core-aborts-dpN", all putting their outputs on
// the one output queue, as vLLM's engines send theirs to the frontend's
// one socket.
func (e *AsyncLLM) startCores() {
	n := max(e.cfg.DataParallelSize, 1)
	e.cores = e.core1[:]
	var refs *atomic.Int32
	if n > 1 {
		e.cores = make([]engineCore, n)
		e.dp = &dataParallel{inflight: make([]int, n), callMu: e.rt.NewMutex("utility-calls"), ranks: allCores(n), counts: make([]counters, n)}
		refs = new(atomic.Int32)
		refs.Store(int32(n))
	}
	suffix := func(i int) string {
		if n == 1 {
			return ""
		}
		return "-dp" + strconv.Itoa(i)
	}
	for i := range e.cores {
		cfg := e.ccfg
		cfg.DataParallelRank = int32(i)
		ec := engineCore{
			in:     task.NewQueue[core.Input](e.rt, task.QueueName("core-input"+suffix(i))),
			aborts: task.NewQueue[[]string](e.rt, task.QueueName("core-aborts"+suffix(i))),
		}
		ec.c = core.NewEngineCore(e.rt, cfg, ec.in, ec.aborts, e.out, e.notify)
		if refs != nil {
			ec.c.ShareOutput(refs)
		}
		e.cores[i] = ec
	}
	for i, c := range e.cores { // each made before any runs
		e.tasks.Go("engine-core"+suffix(i), c.c.Run)
	}
}

// routeLocked chooses the core of a new sequence and counts it there, as
// vLLM's DPLBAsyncMPClient.get_core_engine_for_request: the rank the
// request names, or else the core of the lowest score, the greater of
// the sequences the frontend routed there and not ended and the requests
// the core runs and keeps waiting, waiting ones counting extra on a core
// whose KV cache is more than half full; the scan starts one core further
// each time, so that ties go round (vLLM's scoring since its #49204 and
// rotation since #47420; before them it scored waiting*4 + running from a
// fixed start). vLLM reads the cores' counts from a
// coordinator that publishes them every 100ms; here they are the cores'
// own, as of their last change.
func (e *AsyncLLM) routeLocked(p Params) int {
	best := 0
	if p.DataParallelRank != nil {
		best = *p.DataParallelRank
	} else {
		best = e.leastLoadedLocked()
		e.dp.lbStart = (e.dp.lbStart + 1) % len(e.cores)
	}
	e.dp.inflight[best]++
	return best
}

// leastLoadedLocked returns the core of the lowest score (routeLocked).
func (e *AsyncLLM) leastLoadedLocked() int {
	n := len(e.cores)
	best, bestScore := 0, -1.0
	for i := range n {
		idx := (e.dp.lbStart + i) % n
		s := e.cores[idx].c.Stats()
		score := float64(max(e.dp.inflight[idx], s.Running+s.Waiting))
		if s.Waiting > 0 {
			usage := Stats{KVUsedBlocks: s.KVUsedBlocks, KVNumBlocks: s.KVNumBlocks}.KVCacheUsage()
			score += float64(s.Waiting) * 6 * max(0, usage-0.5)
		}
		if bestScore < 0 || score < bestScore {
			best, bestScore = idx, score
		}
	}
	return best
}

// inputsSent returns, by core, the inputs sent to it so far.
func (e *AsyncLLM) inputsSent() []uint64 {
	sent := make([]uint64, len(e.cores))
	for i, c := range e.cores {
		sent[i] = c.c.InputsSent()
	}
	return sent
}

// coresIdle reports whether every core has processed the inputs of
// targets, holds no request and has no abort pending, and the output
// handler has taken every batch they emitted: atomic reads only, with no
// scheduling point between them, so that they describe one moment.
func (e *AsyncLLM) coresIdle(targets []uint64) bool {
	var batches uint64
	for i, c := range e.cores {
		if c.c.AbortsPending() != 0 || c.c.InputsDone() < targets[i] || c.c.Held() != 0 {
			return false
		}
		batches += c.c.Batches()
	}
	return batches == e.batchesHandled.Load()
}

// broadcast sends a utility call to the cores of ranks to (all of them,
// but for a call that mends a split outcome on some), as vLLM's
// data-parallel client sends one to each engine and gathers their
// replies; with one core, to it. The calls
// of several callers reach every core in one order: vLLM's client sends
// a call to its engines one after the other, so a pause and another
// caller's resume can reach two engines in opposite orders and leave one
// paused and the other running, with both callers answered. It reports
// false when a core has stopped.
func (e *AsyncLLM) broadcast(in core.Input, to []int) bool {
	if len(e.cores) == 1 {
		return e.cores[0].c.Send(in)
	}
	if !e.cfg.Faults.Fires(failpoints.EngineDPCallsSplit) {
		e.dp.callMu.Lock()
		defer e.dp.callMu.Unlock()
	}
	for _, n := range to {
		if !e.cores[n].c.Send(in) {
			return false
		}
	}
	return true
}

// mendsSplit reports whether a call whose outcome split the cores is to
// be mended on those it took effect on, as no engine/dp-calls-split.
func (e *AsyncLLM) mendsSplit(p *pendingReply) bool {
	return len(p.took) > 0 && !e.cfg.Faults.Fires(failpoints.EngineDPCallsSplit)
}

// splitCalls name the calls whose outcome can split the cores, for
// core.EventCallSplit. A pause that a resume overtook on some cores is
// not among them: the resume, reaching every core in the same order,
// resumes the others too.
var splitCalls = map[core.InputKind]string{
	core.InputSleep: "sleep", core.InputResetPrefixCache: "reset of the prefix cache",
	core.InputStartWeightUpdate: "start of a weight update", core.InputUpdateWeights: "weight batch", core.InputFinishWeightUpdate: "finish of a weight update",
	core.InputLoadLoRA: "LoRA load", core.InputPinLoRA: "LoRA pin",
}

// split tells the observer of a call that took effect on some of the
// cores it went to and not on the others, mended or not.
func (e *AsyncLLM) split(call uint64, p *pendingReply, mended bool) {
	if len(p.took) == 0 || len(p.took) == p.want { // one core's calls always
		return
	}
	if name, ok := splitCalls[p.kind]; ok {
		e.emit(Event{Kind: core.EventCallSplit, Call: call, Text: name, Held: len(p.took), Finished: mended})
	}
}

// pendingReply gathers the replies of the cores to one utility call.
type pendingReply struct {
	kind core.InputKind
	want int // the cores asked
	n    int // the cores that replied
	// took are the ranks of the cores on which the call took effect, with
	// several cores: they neither refused it nor took a resume before it
	// took effect (a reset: reset).
	took []int
	r    core.Reply // their replies, combined
}

// add combines a core's reply with those before it: the engine is paused,
// asleep, or resumed before a pause took effect, when any core is; a
// reset happened when it happened on every core, a LoRA adapter is
// pinned when every core pinned it and was loaded when any core had it;
// the first refusal is the call's; the adapters loaded are those every
// core keeps loaded, which a request finds wherever it is routed.
// vLLM's data-parallel client returns the first engine's reply alone.
func (p *pendingReply) add(r core.Reply) {
	p.n++
	if p.want > 1 && r.Err == nil && !r.Resumed && (p.kind != core.InputResetPrefixCache || r.Reset) {
		p.took = append(p.took, r.Engine)
	}
	if p.n == 1 {
		p.r = r
		return
	}
	q := &p.r
	q.Paused = q.Paused || r.Paused
	q.Resumed = q.Resumed || r.Resumed
	q.Asleep = q.Asleep || r.Asleep
	q.Reset = q.Reset && r.Reset
	if p.kind == core.InputRemoveLoRA {
		q.Done = q.Done || r.Done
	} else {
		q.Done = q.Done && r.Done // a pin's
	}
	if q.Err == nil {
		q.Err = r.Err
	}
	if p.kind == core.InputListLoRAs {
		q.LoRAs = slices.DeleteFunc(q.LoRAs, func(id int) bool { return !slices.Contains(r.LoRAs, id) })
	}
}
