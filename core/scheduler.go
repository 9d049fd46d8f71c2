package core

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/llmdst/llmdst/failpoints"
)

// outputCapInitial is the room a request's output starts with: most
// requests are short, and a long one grows by doubling from here.
const outputCapInitial = 32

// Scheduled is one request's share of a step.
type Scheduled struct {
	Req       *Request
	Start     int  // the position of the first token the step computes
	NumTokens int  // tokens computed this step
	Sample    bool // the step reaches the end of the sequence (placeholders included) and samples a token
	// Accepted is how many of the step's drafts the model agreed with:
	// set by Scheduler.Sample.
	Accepted int32
	// Drafts is how many of the request's draft tokens the step computes
	// after its sequence (Config.NumSpeculativeTokens): their KV, and the
	// model's tokens that verify them (Scheduler.Sample).
	Drafts int
	// Cached is, for a request admitted this step, the tokens it found in
	// the prefix cache and starts after; 0 otherwise.
	Cached int
}

// SchedulerOutput is what one step computes.
type SchedulerOutput struct {
	Scheduled   []Scheduled
	Preempted   []*Request
	TotalTokens int
	// LoRAWaiting are the waiting requests the step held back, for the
	// first time since they last entered the queue, because its batch
	// already used Config.MaxLoRAs adapters, none of them theirs; LoRAs
	// are the adapters it used then.
	LoRAWaiting []*Request
	LoRAs       []int
	// Loads are the waiting requests whose KV the step started to load
	// from host memory (Config.KVOffloadBlocks): they wait until it lands
	// (Scheduler.CompleteLoad).
	Loads []*Request
	// LoadWaiting are the waiting requests the step held back, for the
	// first time since they last entered the queue or began to wait for
	// that reason, because a load in flight reads blocks host memory
	// would load for them (vLLM's connector delays them: once it lands,
	// the GPU's cache has them), or because Config.MaxNumSeqs loads were
	// in flight (the connector's back-pressure: once one lands, they look
	// up again).
	LoadWaiting []*Request
	// LoadHeld counts the waiting requests the step held back for a load
	// to land, told or not (Scheduler.WaitsForLoad).
	LoadHeld int

	sampled []int // Sample's result, room reused with the output
}

// Frame is the core's output for one request in one step: the tokens it
// sampled and, when it stopped, why. vLLM calls it an EngineCoreOutput.
type Frame struct {
	ID          uint64 // unique in a core, from 1
	InternalID  string
	ExternalID  string
	Incarnation uint64
	Index       int // the request's sequence (Request.Index)
	NewTokens   []int
	Position    int // output position of NewTokens[0]
	Finished    bool
	Reason      FinishReason
	StopReason  int // the stop token, or -1
}

// SchedulerStats are the counts vLLM reports with every batch of outputs.
// KVUsedBlocks counts the blocks requests hold, never the null block;
// KVNumBlocks is the whole cache, Config.NumBlocks (vLLM's
// num_gpu_blocks), null block included. Usage is KVUsedBlocks over
// KVNumBlocks−1, as vLLM's BlockPool.get_usage divides by the usable
// blocks.
//
// The prefix cache's counts are vLLM's PrefixCacheStats, in tokens, since
// the start and only with Config.EnablePrefixCaching: each lookup of a
// waiting request's prefix adds its length to the queries and the tokens
// it found cached to the hits, as vLLM's get_computed_blocks records them
// — a request that waits for room is counted at each step that tries it;
// a request's lookups after a preemption are counted apart, as vLLM does,
// so that a victim that finds its own blocks again does not raise the hit
// rate.
type SchedulerStats struct {
	Running      int
	Waiting      int
	Preemptions  int64 // since the start
	KVUsedBlocks int   // held by requests: 0 to KVNumBlocks−1; a cached block no request holds is free
	KVNumBlocks  int   // the cache, the null block included

	PrefixCacheQueries          int64 // tokens looked up by requests never preempted
	PrefixCacheHits             int64 // of those, tokens found cached
	PrefixCachePreemptedQueries int64 // tokens looked up by preempted requests as they resumed
	PrefixCachePreemptedHits    int64 // of those, tokens found cached

	// KVOffload is host memory's, with Config.KVOffloadBlocks; zero
	// without.
	KVOffload KVOffloadStats
	// SpecDecoding is speculative decoding's, with
	// Config.NumSpeculativeTokens; zero without.
	SpecDecoding SpecDecodingStats
}

// Scheduler is vLLM's v1 request scheduler as a plain state machine:
// waiting and running queues, a token budget per step with chunked prefill,
// paged KV blocks, preemption by recompute when blocks run out and, with
// Config.EnablePrefixCaching, automatic prefix caching. Of the cache's
// NumBlocks blocks, requests hold at most NumBlocks−1: one is vLLM's null
// block, which its BlockPool keeps out of the free queue. Under
// PolicyFCFS the waiting queue is in order of arrival and the newest running
// request is preempted; under PolicyPriority the waiting queue is in order
// of (Priority, Incarnation, Index) and the running request last in that
// order is preempted. It has no locks and no tasks; EngineCore drives it.
type Scheduler struct {
	cfg      Config
	requests map[string]*Request // by internal id; never ranged over
	// waiting is in arrival order under PolicyFCFS, preempted requests
	// back at the front; in priority order under PolicyPriority, preempted
	// requests back at their place.
	waiting []*Request
	running []*Request // in admission order: the last is the newest
	pool    blockPool  // the KV blocks: UsableBlocks free at the start

	// kvEpoch counts the writes that overwrote a block another request
	// held (kv.go): a request that has not read its blocks since the last
	// one reads them all at its next step.
	kvEpoch uint64
	// kvStamp stamps the KV written since the KV was last discarded, by a
	// reset of the prefix cache or a sleep (kv.go): 0 until the first,
	// then each a mix of the one before.
	kvStamp uint64

	preemptions int64
	frames      uint64
	prefix      prefixCounts // the prefix cache's counts

	hits []int32 // scratch: a waiting request's cache hits

	blocksRoom [blocksRoom]kvBlock // the pool's first blocks

	// Scratch reused from step to step: a step's SchedulerOutput and
	// samples are read until the next Schedule, or with AsyncScheduling the
	// one after it, so the steps take turns with two. out is the last
	// Schedule's.
	outs [2]SchedulerOutput
	out  *SchedulerOutput

	// lora is the scheduler's LoRA state, made by the first reload or
	// pin, so that an engine without them pays a pointer.
	lora *schedLoRA
	// offload is host memory for KV and its loads (offload.go), with
	// Config.KVOffloadBlocks; nil without.
	offload *kvOffload
	// spec counts speculative decoding's drafts, with
	// Config.NumSpeculativeTokens; nil without.
	spec *specCounts

	pause PauseState // what Schedule leaves alone: asked, or PausedAll when held
	asked PauseState // EngineCore's pauses (SetPauseState)
	held  bool       // a weight update's hold (Hold)
}

// NewScheduler returns an empty scheduler; cfg must have its defaults set.
// Its free blocks are cfg.UsableBlocks(): the null block is never free.
func NewScheduler(cfg Config) *Scheduler {
	s := &Scheduler{cfg: cfg, requests: make(map[string]*Request)}
	s.out = &s.outs[0]
	s.pool = newBlockPool(cfg, s.blocksRoom[:])
	if cfg.KVOffloadBlocks > 0 {
		s.offload = newKVOffload(cfg)
	}
	if cfg.NumSpeculativeTokens > 0 {
		s.spec = newSpecCounts(cfg.NumSpeculativeTokens)
	}
	return s
}

// AddRequest queues r as waiting. It fails when r's internal id is live,
// or its request ended with a KV load or store in flight, vLLM's
// "duplicate request id" assertion, and when r has a LoRA adapter
// and LoRA is off (Config.MaxLoRAs 0), which the frontend refuses first.
func (s *Scheduler) AddRequest(r *Request) error {
	if _, ok := s.requests[r.InternalID]; ok {
		return fmt.Errorf("core: duplicate request id %q", r.InternalID)
	}
	if s.offload != nil {
		// An ended request whose KV load has not landed is still among
		// vLLM's requests, its id too (legacy routing reuses ids).
		if _, ok := s.offload.loads[r.InternalID]; ok {
			return fmt.Errorf("core: duplicate request id %q: its KV load from host memory has not landed", r.InternalID)
		}
		if st, ok := s.offload.stores[r.InternalID]; ok && st.ended {
			return fmt.Errorf("core: duplicate request id %q: its KV store to host memory has not landed", r.InternalID)
		}
	}
	if r.LoRA != 0 && s.cfg.MaxLoRAs == 0 {
		return fmt.Errorf("core: request %q asks for LoRA adapter %d, but LoRA is off (MaxLoRAs 0)", r.InternalID, r.LoRA)
	}
	r.Status = StatusWaiting
	r.StopReason = -1
	r.key = s.keyOf(r)
	r.loraSalt, r.cacheKeys, r.loraWaited, r.kvLoad = 0, keysByRevision, false, kvNoLoad
	if r.Output == nil {
		r.Output = make([]int, 0, min(r.Params.MaxTokens, outputCapInitial))
	}
	if r.table == nil { // room in the request for a short one's blocks
		r.table, r.hashes, r.sampled = r.tableRoom[:0], r.hashesRoom[:0], r.sampledRoom[:0]
	}
	r.table, r.Blocks, r.cachedBlocks = r.table[:0], 0, 0
	r.hashes, r.hashed, r.tail = r.hashes[:0], 0, digestSeed
	s.digest(r)
	s.requests[r.InternalID] = r
	if s.cfg.SchedulingPolicy == PolicyPriority {
		s.waiting = slices.Insert(s.waiting, s.waitingPlace(r, false), r)
	} else {
		s.waiting = append(s.waiting, r)
	}
	return nil
}

// priorityOrder is PolicyPriority's order: vLLM's Request.__lt__,
// (priority, arrival_time, request_id), with arrival as the Incarnation,
// the order of AddRequest calls. A request's sequences share their
// parent's arrival time in vLLM, so their ids, "INDEX_ID", decide: as
// strings, so that sequence 10 comes before sequence 2 (and 10 before 1,
// '0' sorting before '_').
func priorityOrder(a, b *Request) int {
	return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Incarnation, b.Incarnation), seqIDOrder(a.Index, b.Index))
}

// seqIDOrder compares sequences i and j of one request as vLLM compares
// their ids, "i_ID" and "j_ID": byte by byte, without making them.
func seqIDOrder(i, j int) int {
	if i == j {
		return 0
	}
	var bi, bj [24]byte
	a := append(strconv.AppendInt(bi[:0], int64(i), 10), '_')
	b := append(strconv.AppendInt(bj[:0], int64(j), 10), '_')
	return bytes.Compare(a, b)
}

// waitingPlace returns where r goes in a waiting queue in priority order:
// after every request that comes before it. Among requests of the same key,
// which the engine never makes, the queue keeps FCFS's order: a new request
// goes after them and a preempted one before them.
func (s *Scheduler) waitingPlace(r *Request, preempted bool) int {
	lo, hi := 0, len(s.waiting)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		c := priorityOrder(s.waiting[m], r)
		if c < 0 || c == 0 && !preempted {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// victim returns the running request to preempt when KV blocks run out:
// the newest under PolicyFCFS; under PolicyPriority vLLM's
// max(running, key=(priority, arrival_time)): the latest in that order,
// and of a request's sequences, which share their arrival, the first in
// running order, as Python's max keeps the first of equals.
func (s *Scheduler) victim() int {
	v := len(s.running) - 1
	if s.cfg.SchedulingPolicy != PolicyPriority {
		return v
	}
	v = 0
	for i := 1; i < len(s.running); i++ {
		a, b := s.running[i], s.running[v]
		if cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Incarnation, b.Incarnation)) > 0 {
			v = i
		}
	}
	return v
}

// Get returns the live request with internal id id.
func (s *Scheduler) Get(id string) (*Request, bool) {
	r, ok := s.requests[id]
	return r, ok
}

// FinishRequests ends the live requests among ids with status, freeing their
// blocks; unknown and finished ids are ignored, so aborting is idempotent. It
// returns the requests it ended.
func (s *Scheduler) FinishRequests(ids []string, status Status) []*Request {
	var done []*Request
	for _, id := range ids {
		r, ok := s.requests[id]
		if !ok {
			continue
		}
		s.finish(r, status)
		done = append(done, r)
	}
	return done
}

// FinishAll ends every live request with status, oldest first.
func (s *Scheduler) FinishAll(status Status) []*Request {
	all := append(append([]*Request(nil), s.running...), s.waiting...)
	slices.SortFunc(all, func(a, b *Request) int { // (incarnation, sequence) is unique
		return cmp.Or(cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.Index, b.Index))
	})
	for _, r := range all {
		s.finish(r, status)
	}
	return all
}

// finish ends r with status: it leaves whichever queue holds it (a live
// request is in exactly one) and gives its blocks back, with KV offloading
// once the load or store of its blocks lands.
func (s *Scheduler) finish(r *Request, status Status) {
	switch {
	case r.kvLoad == kvLoading:
		s.abortLoad(r, status)
		return
	case s.offload == nil || !s.endStore(r):
		s.freeBlocks(r)
	}
	s.leave(r, status)
}

// leave ends r with status without giving its blocks back: finish's second
// half, and the whole of it under the CoreKVLeakOnAbort bug.
func (s *Scheduler) leave(r *Request, status Status) {
	r.Status = status
	if i := slices.Index(s.running, r); i >= 0 {
		s.running = slices.Delete(s.running, i, i+1)
	} else {
		s.waiting = remove(s.waiting, r)
	}
	delete(s.requests, r.InternalID)
}

// RejectUnschedulable ends the head of the waiting queue with an error when
// nothing runs and it still could not be scheduled: it needs more KV blocks
// than the cache's usable ones (all but the null block), and would
// otherwise wait forever. It returns the request it ended. Nothing is
// rejected while the step held a request back for a KV load to land
// (WaitsForLoad): that one waits for the load, not for room. A paused
// scheduler rejects nothing: what waits, waits for the resume. Called
// after a Schedule that scheduled nothing: when that step preempted, the
// request that could not be scheduled is the last it preempted — its own
// victim, alone in the cache — which under PolicyFCFS is the head and
// under PolicyPriority need not be; with speculative decoding it is not
// rejected then if its sequence alone fits, as it asked for room for its
// drafts.
func (s *Scheduler) RejectUnschedulable() (*Request, bool) {
	if len(s.running) > 0 || len(s.waiting) == 0 || s.pause != Unpaused || s.waitingHoldBlocks() || s.WaitsForLoad() {
		return nil, false
	}
	r := s.waiting[0]
	if n := len(s.out.Preempted); n > 0 && s.out.Preempted[n-1].Status == StatusPreempted {
		r = s.out.Preempted[n-1]
		if s.spec != nil && s.cfg.BlocksFor(r.NumTokens()) <= s.cfg.UsableBlocks() {
			// It asked for room for draft tokens too (and with
			// AsyncScheduling for those in flight, counted as kept):
			// admitted again it asks for its sequence's alone, which
			// fits.
			return nil, false
		}
	}
	s.finish(r, StatusFinishedError)
	return r, true
}

func remove(rs []*Request, r *Request) []*Request {
	if i := slices.Index(rs, r); i >= 0 {
		return slices.Delete(rs, i, i+1)
	}
	return rs
}

// HasRequests reports whether any request is waiting or running.
func (s *Scheduler) HasRequests() bool { return s.NumRequests() > 0 }

// HasWork reports whether Schedule would find anything to schedule under
// the pause state, vLLM's unfinished requests as its paused scheduler
// counts them: every request when unpaused, the running ones under
// PausedNew, none under PausedAll. The requests a pause holds back are
// live all the same (HasRequests, NumRequests).
func (s *Scheduler) HasWork() bool { return s.hasWork(s.pause) }

// HeldWork reports whether a hold (Hold) holds back work the pause state
// would schedule.
func (s *Scheduler) HeldWork() bool { return s.held && s.hasWork(s.asked) }

func (s *Scheduler) hasWork(st PauseState) bool {
	switch st {
	case Unpaused:
		return len(s.requests) > 0
	case PausedNew:
		return len(s.running) > 0
	}
	return false
}

// NumRequests returns the number of live requests, and of ended ones whose
// KV load or store has not landed, which hold their blocks until it does
// (vLLM keeps them among its requests until then).
func (s *Scheduler) NumRequests() int {
	if s.offload == nil {
		return len(s.requests)
	}
	return len(s.requests) + s.endedTransfers()
}

// Stats returns the counts vLLM reports.
func (s *Scheduler) Stats() SchedulerStats {
	st := SchedulerStats{PrefixCacheQueries: s.prefix.queries, PrefixCacheHits: s.prefix.hits,
		PrefixCachePreemptedQueries: s.prefix.preemptedQueries, PrefixCachePreemptedHits: s.prefix.preemptedHits}
	st.Running, st.Waiting, st.Preemptions = len(s.running), len(s.waiting), s.preemptions
	st.KVUsedBlocks, st.KVNumBlocks = s.cfg.UsableBlocks()-s.pool.numFree, s.cfg.NumBlocks
	if s.offload != nil {
		st.KVOffload = s.offload.stats()
	}
	if s.spec != nil {
		st.SpecDecoding = s.spec.stats()
	}
	return st
}

// freeBlocks gives r's blocks back, the last first (blockPool.freeAll).
// Cached blocks keep their hashes.
func (s *Scheduler) freeBlocks(r *Request) {
	s.pool.freeAll(r.table)
	r.table, r.Blocks, r.cachedBlocks = r.table[:0], 0, 0
}

// grow reserves the blocks r needs to hold n computed tokens, if there are
// enough free, and caches the blocks those tokens fill (allocate).
func (s *Scheduler) grow(r *Request, n int) bool {
	need := s.cfg.BlocksFor(n) - len(r.table)
	if need > s.pool.numFree {
		return false
	}
	s.allocate(r, need, n)
	return true
}

// allocate hands r need new blocks and, with prefix caching, caches its
// full blocks up to n tokens: vLLM's allocate_slots caches them when it
// allocates, before the forward pass computes them, so that a request
// scheduled later in the same step can hit them (the pass writes KV
// before attention reads it).
func (s *Scheduler) allocate(r *Request, need, n int) {
	if len(r.table)+need > cap(r.table) {
		r.table = slices.Grow(r.table, max(need, s.roomFor(r)-len(r.table)))
	}
	for ; need > 0; need-- {
		r.table = append(r.table, s.pool.pop(r.Incarnation))
	}
	r.Blocks = len(r.table)
	if !s.cfg.EnablePrefixCaching {
		return
	}
	full := min(n, r.NumTokens()) / s.cfg.BlockSize
	salt := r.cacheSalt()
	for ; r.cachedBlocks < full; r.cachedBlocks++ {
		s.pool.cache(r.table[r.cachedBlocks], r.hashes[r.cachedBlocks]^salt)
	}
}

// roomFor is the room for block ids or hashes that r's table and hashes
// grow to when they outgrow the request's own: every block its prompt and
// MaxTokens can fill, up to a bound, so that a long request pays one
// allocation for each rather than one per doubling.
func (s *Scheduler) roomFor(r *Request) int {
	const roomMax = 256
	return s.cfg.BlocksFor(min(len(r.Prompt)+min(r.Params.MaxTokens, roomMax*s.cfg.BlockSize), roomMax*s.cfg.BlockSize))
}

// lookup returns into hits the cached blocks of r's longest cached prefix
// of full blocks, short of its last token, which must be computed to
// sample from its logits: vLLM's max_cache_hit_length, num_tokens−1.
func (s *Scheduler) lookup(r *Request, hits []int32) []int32 {
	hits = hits[:0]
	salt := r.cacheSalt()
	for _, h := range r.hashes[:(r.NumTokens()-1)/s.cfg.BlockSize] {
		id, ok := s.pool.lookup(h ^ salt)
		if !ok {
			break
		}
		hits = append(hits, id)
	}
	return hits
}

// prefixCounts are the prefix cache's counts in tokens (SchedulerStats).
type prefixCounts struct{ queries, hits, preemptedQueries, preemptedHits int64 }

// recordLookup counts a lookup of r's prefix that found hit tokens, as
// vLLM's get_computed_blocks records it: at every lookup, so a request
// that waits for room is counted again at each step that tries it.
func (s *Scheduler) recordLookup(r *Request, hit int) {
	if r.Preemptions > 0 {
		s.prefix.preemptedQueries += int64(r.NumTokens())
		s.prefix.preemptedHits += int64(hit)
	} else {
		s.prefix.queries += int64(r.NumTokens())
		s.prefix.hits += int64(hit)
	}
}

// admit gives a waiting request the cached blocks it hit and the blocks
// for n more tokens, if there are enough free; the cached blocks no
// request holds are free blocks it takes, and cannot be handed out too
// (vLLM's num_evictable_computed_blocks). With ReserveFullSequence the
// blocks of its whole sequence so far must be free too, as vLLM's
// allocate_slots checks with full_sequence_must_fit. On failure nothing
// changes.
func (s *Scheduler) admit(r *Request, hits []int32, n int) bool {
	computed := len(hits) * s.cfg.BlockSize
	need := s.cfg.BlocksFor(computed+n) - len(hits)
	fits := need // the blocks that must be free: this step's
	if s.cfg.ReserveFullSequence {
		fits = max(fits, s.cfg.BlocksFor(min(r.NumTokens(), s.cfg.MaxModelLen))-len(hits)) // or the whole sequence's
	}
	evictable := 0
	for _, id := range hits {
		if s.pool.blocks[id].ref == 0 {
			evictable++
		}
	}
	if fits+evictable > s.pool.numFree {
		return false
	}
	for _, id := range hits {
		s.pool.touch(id, r.Incarnation)
		r.table = append(r.table, id)
	}
	r.cachedBlocks = len(hits)
	r.NumComputed = computed
	s.allocate(r, need, computed+n)
	return true
}

// admitLoaded admits a waiting request whose KV landed, with the blocks
// for n more tokens: it reserved those of its whole sequence when its
// load started, and gives back those past them, which it takes again as
// it runs, as any running request does.
func (s *Scheduler) admitLoaded(r *Request, n int) bool {
	if n <= 0 {
		return false
	}
	keep := s.cfg.BlocksFor(r.NumComputed + n)
	if keep-len(r.table) > s.pool.numFree {
		return false
	}
	for len(r.table) > keep {
		s.pool.free(r.table[len(r.table)-1]) // never written, never cached
		r.table = r.table[:len(r.table)-1]
	}
	r.Blocks = len(r.table)
	s.allocate(r, keep-len(r.table), r.NumComputed+n)
	r.kvLoad = kvNoLoad
	return true
}

// newTokens returns how many tokens running request r would compute this
// step within budget: the rest of its sequence, placeholders and draft
// tokens included,
// clipped by the budget and the model length (the last token of a
// sequence of the model length is sampled, never computed). Under
// AsyncScheduling it is 0 when the step in flight samples r's last token
// (MaxTokens), as vLLM schedules no step that could only be dropped.
func (s *Scheduler) newTokens(r *Request, budget int) int {
	if r.endsInFlight() {
		return 0
	}
	n := r.NumTokens() + r.Placeholders + s.numDrafts(r) - r.NumComputed // vLLM's num_tokens_with_spec
	return min(n, budget, s.cfg.MaxModelLen-1-r.NumComputed)
}

// Schedule decides what the next step computes: running requests first,
// preempting while KV blocks run out (the newest running request, or under
// PolicyPriority the last in priority order), then waiting requests, from
// the head of the waiting queue, while there is budget and room — but none
// when something was preempted this step. With prefix caching a waiting
// request (new, or preempted: it computes from its first token) starts
// after its longest cached prefix. The output is valid until the next
// call, or with AsyncScheduling until the call after it. Every scheduled
// request's NumComputed then counts the step's tokens, and with
// AsyncScheduling its Placeholders the token it samples, as vLLM's
// _update_after_schedule: each Schedule must be followed by the
// UpdateFromOutput of its output, before the next one or, with
// AsyncScheduling, the one after.
func (s *Scheduler) Schedule() *SchedulerOutput {
	out := &s.outs[0]
	if s.cfg.AsyncScheduling && s.out == out {
		out = &s.outs[1]
	}
	s.out = out
	if s.offload != nil {
		s.offload.beginStep(out)
	}
	clear(out.Scheduled)
	clear(out.Preempted)
	out.Scheduled, out.Preempted, out.TotalTokens, out.LoadHeld = out.Scheduled[:0], out.Preempted[:0], 0, 0
	if len(out.LoRAWaiting) > 0 {
		clear(out.LoRAWaiting)
		out.LoRAWaiting = out.LoRAWaiting[:0]
	}
	if len(out.LoadWaiting) > 0 {
		clear(out.LoadWaiting)
		out.LoadWaiting = out.LoadWaiting[:0]
	}
	if len(out.Loads) > 0 {
		clear(out.Loads)
		out.Loads = out.Loads[:0]
	}
	budget := s.cfg.MaxNumBatchedTokens
	if s.pause == PausedAll {
		budget = 0 // vLLM's paused scheduler: a token budget of nothing
	}
	for i := 0; i < len(s.running) && budget > 0; {
		r := s.running[i]
		n := s.newTokens(r, budget)
		if n <= 0 {
			i++
			continue
		}
		for !s.grow(r, r.NumComputed+n) {
			v := s.victim()
			victim := s.running[v]
			if v < i {
				// A request before r (only PolicyPriority picks one): its
				// share of this step is undone, as vLLM does, and r moves
				// down a place with it gone.
				budget += s.unschedule(victim)
				i--
			}
			s.preempt(victim, out)
			out.Preempted = append(out.Preempted, victim)
			if victim == r {
				break
			}
		}
		if r.Status == StatusPreempted {
			break // r itself was the victim; nothing after it runs either
		}
		past := r.NumComputed + n - r.NumTokens() - r.Placeholders // the drafts it computes
		out.Scheduled = append(out.Scheduled, Scheduled{Req: r, Start: r.NumComputed, NumTokens: n, Sample: past >= 0, Drafts: max(past, 0)})
		out.TotalTokens += n
		budget -= n
		i++
	}
	if len(out.Preempted) == 0 && s.pause == Unpaused {
		if s.cfg.MaxLoRAs > 0 {
			s.scheduledLoRAs(out)
		}
		// With KV offloading the requests whose KV landed go first, as
		// vLLM puts back at the head of the queue the requests it skipped
		// while their KV loaded: each holds blocks the others may need.
		first, landedWait := 0, false
		if s.offload != nil {
			first = -1
			if s.cfg.Faults.Fires(failpoints.CoreKVLoadedWaitsBehindBlocked) {
				first, landedWait = 0, true
			}
		}
		seqs := 0 // what counts toward MaxNumSeqs besides the running requests
		if s.offload != nil && s.cfg.Faults.Fires(failpoints.CoreMaxNumSeqsCountsDeferred) {
			seqs = s.deferred()
		}
		for pass := first; pass <= 0; pass++ {
			// With KV offloading, once a request cannot be admitted the
			// requests behind it are not either, but for those whose KV
			// landed: they hold every block their sequence needs.
			blocked := false
			for i := 0; i < len(s.waiting) && budget > 0 && len(s.running)+seqs < s.cfg.MaxNumSeqs; {
				r := s.waiting[i] // NumComputed is 0: new, or preempted, unless its KV landed
				if r.kvLoad == kvLoading || (pass < 0 || blocked) && (r.kvLoad != kvLoaded || landedWait) {
					i++ // its KV loads; or the pass is for landed requests, or it waits behind one that could not be admitted
					continue
				}
				if r.LoRA != 0 {
					if !s.loraSlot(out, r) {
						i++ // vLLM: "Scheduling would exceed max_loras, skip."
						continue
					}
					s.saltLoRA(r)
				}
				if r.kvLoad == kvLoaded && !s.loadedAsIs(r) {
					s.unload(r) // its adapter's weights changed while its KV loaded: computed by the old ones
					if pass < 0 {
						i++ // it waits at its place now
						continue
					}
				}
				var hit, n, cached int // cached: the tokens the prefix cache gave it (EventPrefixHit)
				if r.kvLoad == kvLoaded {
					hit = r.NumComputed
					n = min(r.NumTokens()-hit, budget, s.cfg.MaxModelLen-hit)
					if !s.admitLoaded(r, n) {
						blocked = true
						i++
						continue
					}
				} else {
					if s.cfg.EnablePrefixCaching {
						s.hits = s.lookup(r, s.hits)
						s.recordLookup(r, len(s.hits)*s.cfg.BlockSize)
					}
					if s.offload != nil {
						how := s.startLoad(r, s.hits)
						held := loadNone
						if how.holds() {
							held = how
						}
						if held != loadNone {
							out.LoadHeld++
							if held != r.loadHeld {
								out.LoadWaiting = append(out.LoadWaiting, r) // told once for each reason in a row
							}
						}
						r.loadHeld = held
						switch how {
						case loadStarted:
							out.Loads = append(out.Loads, r)
							s.offload.cutPending(r)
						case loadNoRoom:
							blocked = true // those behind it wait too; a delayed one's may run
						}
						if how != loadNone {
							i++
							continue
						}
					}
					hit = len(s.hits) * s.cfg.BlockSize
					cached = hit
					n = min(r.NumTokens()-hit, budget, s.cfg.MaxModelLen-hit)
					if n <= 0 || !s.admit(r, s.hits, n) {
						if s.offload == nil {
							break
						}
						blocked = true
						i++
						continue
					}
					if s.offload != nil {
						s.offload.recordLookup(r, hit, 0) // host memory had none of what the GPU's cache lacks
						s.offload.cutPending(r)
					}
				}
				if i == 0 {
					s.waiting = s.waiting[1:]
				} else { // behind requests held back for a LoRA slot, which keep their places
					s.waiting = slices.Delete(s.waiting, i, i+1)
				}
				out.LoRAs = withLoRA(out.LoRAs, r.LoRA)
				r.loraWaited = false
				s.running = append(s.running, r)
				r.Status = StatusRunning
				r.kvChecked = 0 // it reads every block it took at its first step
				out.Scheduled = append(out.Scheduled, Scheduled{Req: r, Start: r.NumComputed, NumTokens: n, Sample: r.NumComputed+n == r.NumTokens()+r.Placeholders, Cached: cached})
				out.TotalTokens += n
				budget -= n
			}
		}
	}
	for _, sc := range out.Scheduled {
		sc.Req.NumComputed += sc.NumTokens
		if sc.Sample && s.cfg.AsyncScheduling {
			sc.Req.Placeholders += 1 + sc.Drafts // its token, and the drafts the model may keep
		}
	}
	if s.spec != nil && s.cfg.AsyncScheduling {
		s.placeDrafts(out)
	}
	if s.offload != nil && len(out.Scheduled) == 0 && len(s.offload.flushed) > 0 {
		// A step of nothing runs for the connector alone, and reports: the
		// requests it held for those stores are admitted at the next step,
		// which the core must not wait for an input to run.
		s.offload.reported = s.completeFlushed(out)
	}
	return out
}

// placeDrafts gives, with AsyncScheduling and speculative decoding, every
// request whose step out samples draft placeholders for its next step, as
// vLLM's AsyncScheduler does after it schedules; a running request out
// passes over loses its own, which the worker would have no drafts for
// (vLLM's #46899), unless core/spec-placeholders-outlive-their-window
// keeps them. Those passed over by a step that runs, not for a step in
// flight that ends them, are DraftsDropped.
func (s *Scheduler) placeDrafts(out *SchedulerOutput) {
	s.spec.schedules++
	clear(s.spec.dropped)
	s.spec.dropped = s.spec.dropped[:0]
	for _, sc := range out.Scheduled {
		if sc.Sample {
			r := sc.Req
			if r.spec == nil {
				r.spec = &reqSpec{}
			}
			r.spec.slots, r.spec.placedAt = s.cfg.NumSpeculativeTokens, s.spec.schedules
		}
	}
	for _, r := range s.running {
		if sp := r.spec; sp != nil && sp.slots > 0 && sp.placedAt != s.spec.schedules {
			if len(out.Scheduled) > 0 && !r.endsInFlight() {
				// Passed over, and not because the step in flight ends
				// it.
				s.spec.dropped = append(s.spec.dropped, r)
			}
			if !s.cfg.Faults.Fires(failpoints.CoreSpecPlaceholdersOutliveTheirWindow) {
				sp.slots = 0
			}
		}
	}
}

// DraftsDropped returns, with AsyncScheduling and speculative decoding,
// the running requests with draft placeholders the last Schedule passed
// over in a step that runs: the model has no drafts for them at their
// next step, and they lose the placeholders (EventDraftsDropped). Valid
// until the next Schedule.
func (s *Scheduler) DraftsDropped() []*Request {
	if s.spec == nil {
		return nil
	}
	return s.spec.dropped
}

// numDrafts is how many draft tokens r has for its next step: with
// AsyncScheduling the placeholders the scheduler gave it, else the drafts
// proposed after its last step.
func (s *Scheduler) numDrafts(r *Request) int {
	switch {
	case r.spec == nil:
		return 0
	case s.cfg.AsyncScheduling:
		return r.spec.slots
	}
	return len(r.spec.drafts)
}

// CountLoRAs fills running and waiting, cleared first, with how many
// requests of each LoRA adapter the scheduler runs and keeps waiting,
// vLLM's running_lora_adapters and waiting_lora_adapters (by id).
func (s *Scheduler) CountLoRAs(running, waiting map[int]int) {
	clear(running)
	clear(waiting)
	for _, r := range s.running {
		if r.LoRA != 0 {
			running[r.LoRA]++
		}
	}
	for _, r := range s.waiting {
		if r.LoRA != 0 {
			waiting[r.LoRA]++
		}
	}
}

// keyOf is the key r samples with: its sequence's, its adapter's at the
// adapter's revision.
func (s *Scheduler) keyOf(r *Request) uint64 {
	key := SequenceKey(s.cfg.Model.Prepare(r.Prompt), r.Index)
	if r.LoRA == 0 {
		return key
	}
	return RevisionKey(LoRAKey(key, r.LoRA), s.loraRevision(r.LoRA))
}

// saltLoRA sets the salts of waiting request r, which has an adapter, for
// the KV it is about to compute, from its first token, with its adapter's
// weights as they are now; a request admitted before a reload goes on
// with the salts it was admitted with, reading its own KV. The prefix
// cache keys its blocks with the revision too, unless a planted bug
// leaves out the adapter or, as vLLM does, the revision.
func (s *Scheduler) saltLoRA(r *Request) {
	rev := s.loraRevision(r.LoRA)
	r.loraSalt = loraSalt(r.LoRA, rev)
	switch {
	case s.cfg.Faults.Fires(failpoints.CorePrefixCacheIgnoresLoRA):
		r.cacheKeys = keysIgnoreLoRA
	case rev > 0 && s.cfg.Faults.Fires(failpoints.CoreLoRAReloadKeepsPrefixCache):
		r.cacheKeys = keysIgnoreRevision
	default:
		r.cacheKeys = keysByRevision
	}
}

// ReloadLoRA takes new weights for adapter lora, loaded in place (vLLM's
// add_lora with load_inplace), and returns its revision: every request of
// it samples with the new weights from its next step on, those running
// over the KV they computed before (vLLM's policy switch in the middle
// of a request), and a request admitted from now on computes its KV anew.
func (s *Scheduler) ReloadLoRA(lora int) uint64 {
	l := s.loraState()
	if l.revs == nil {
		l.revs = make(map[int]uint64)
	}
	l.revs[lora]++
	for _, q := range [...][]*Request{s.running, s.waiting} {
		for _, r := range q {
			if r.LoRA == lora {
				r.key = s.keyOf(r)
			}
		}
	}
	return l.revs[lora]
}

// schedLoRA is a scheduler's LoRA state.
type schedLoRA struct {
	revs   map[int]uint64 // by adapter, the loads of new weights in place (ReloadLoRA)
	pinned []int          // the adapters pinned (PinLoRA), in the order pinned
}

func (s *Scheduler) loraState() *schedLoRA {
	if s.lora == nil {
		s.lora = &schedLoRA{}
	}
	return s.lora
}

// loraRevision is the revision of adapter lora's weights: how many times
// they were loaded in place.
func (s *Scheduler) loraRevision(lora int) uint64 {
	if s.lora == nil {
		return 0
	}
	return s.lora.revs[lora]
}

// PinnedLoRAs are the adapters pinned, in the order pinned; the slice is
// the scheduler's, valid until the next PinLoRA or UnpinLoRA.
func (s *Scheduler) PinnedLoRAs() []int {
	if s.lora == nil {
		return nil
	}
	return s.lora.pinned
}

// PinLoRA pins adapter lora: from the next step on it holds an executor
// slot of its own, which the scheduler counts among the step's adapters
// whether or not a request of it runs, so that its requests never wait
// for a slot. EngineCore checks first that it fits (pinLoRA).
func (s *Scheduler) PinLoRA(lora int) {
	l := s.loraState()
	if !slices.Contains(l.pinned, lora) {
		l.pinned = append(l.pinned, lora)
	}
}

// UnpinLoRA lets adapter lora's slot go; it reports whether it was
// pinned.
func (s *Scheduler) UnpinLoRA(lora int) bool {
	if s.lora == nil {
		return false
	}
	i := slices.Index(s.lora.pinned, lora)
	if i >= 0 {
		s.lora.pinned = slices.Delete(s.lora.pinned, i, i+1)
	}
	return i >= 0
}

// RunningLoRAs appends to dst the adapters of the running requests, each
// once, in the order of the running queue.
func (s *Scheduler) RunningLoRAs(dst []int) []int {
	for _, r := range s.running {
		dst = withLoRA(dst, r.LoRA)
	}
	return dst
}

// scheduledLoRAs sets out.LoRAs to the adapters of the running requests
// the step scheduled, vLLM's scheduled_loras, and of those it passed over
// (vLLM's num_new_tokens 0: at the model's length behind the optimistic
// tokens of async scheduling and drafts, which a rejection takes back),
// before it admits waiting requests: a request passed over runs at a step
// to come, beside whatever this one admits. One whose end is in flight,
// at its MaxTokens or the model length, runs no more, and leaves its slot.
func (s *Scheduler) scheduledLoRAs(out *SchedulerOutput) {
	out.LoRAs = out.LoRAs[:0]
	if s.cfg.Faults.Fires(failpoints.CoreLoRALimitForgetsRunning) {
		return
	}
	// out.Scheduled holds the running requests scheduled so far, none
	// whose end is in flight: all of them unless the step passed one over.
	if len(out.Scheduled) < len(s.running) && !s.cfg.Faults.Fires(failpoints.CoreLoRASlotLeftWhenPassedOver) {
		for _, r := range s.running {
			if !r.endsInFlightAt(s.cfg.MaxModelLen) {
				out.LoRAs = withLoRA(out.LoRAs, r.LoRA)
			}
		}
	} else {
		for _, sc := range out.Scheduled {
			out.LoRAs = withLoRA(out.LoRAs, sc.Req.LoRA)
		}
	}
	if s.lora == nil || s.cfg.Faults.Fires(failpoints.CoreLoRAPinIgnoresSlots) {
		return
	}
	for _, l := range s.lora.pinned { // each holds its slot
		out.LoRAs = withLoRA(out.LoRAs, l)
	}
}

// loraSlot reports whether waiting request r, which has an adapter, may
// join the step's batch: its adapter is among out.LoRAs, or a slot is
// free, which its admission takes. Held back, r is told in out.LoRAWaiting
// once a wait.
func (s *Scheduler) loraSlot(out *SchedulerOutput, r *Request) bool {
	if len(out.LoRAs) < s.cfg.MaxLoRAs || slices.Contains(out.LoRAs, r.LoRA) {
		return true
	}
	if !r.loraWaited {
		r.loraWaited = true
		out.LoRAWaiting = append(out.LoRAWaiting, r)
	}
	return false
}

// unschedule takes r's share out of the step being scheduled, if it has
// one, and returns the tokens it gives back to the budget. Its blocks go
// with its preemption.
func (s *Scheduler) unschedule(r *Request) int {
	out := s.out
	i := slices.IndexFunc(out.Scheduled, func(sc Scheduled) bool { return sc.Req == r })
	if i < 0 {
		return 0
	}
	n := out.Scheduled[i].NumTokens
	out.Scheduled = slices.Delete(out.Scheduled, i, i+1)
	out.TotalTokens -= n
	s.uncacheUnwritten(r)
	return n
}

// uncacheUnwritten takes out of the prefix cache the blocks of r that this
// step cached when it allocated them and will now not write: those past
// the tokens r has computed. vLLM keeps them (its open #43569), so that a
// request whose prompt continues r's sequence would hit a block that holds
// nothing; core/kv-keep-unwritten-hash plants that bug here. Only r holds
// them: no request is admitted in a step that preempts.
func (s *Scheduler) uncacheUnwritten(r *Request) {
	written := r.NumComputed / s.cfg.BlockSize
	if r.cachedBlocks <= written || s.cfg.Faults.Fires(failpoints.CoreKVKeepUnwrittenHash) {
		return
	}
	for _, id := range r.table[written:r.cachedBlocks] {
		s.pool.uncache(id)
	}
	r.cachedBlocks = written
}

// preempt frees r's blocks and puts it back in the waiting queue — at the
// front under PolicyFCFS, at its place under PolicyPriority (vLLM's
// prepend_request of a priority queue is an add) — to be computed again
// from its first token (recompute). out is the step being scheduled, or
// nil between steps: the next step's output reports r's store.
func (s *Scheduler) preempt(r *Request, out *SchedulerOutput) {
	if s.offload != nil {
		s.flushStore(r, out)
	}
	s.freeBlocks(r)
	r.NumComputed = 0
	if r.spec != nil {
		// vLLM clears a preempted request's spec_token_ids; it computes
		// from its first token, where no rejection of a step in flight
		// moves it.
		r.spec.drafts, r.spec.slots, r.spec.rejected = r.spec.drafts[:0], 0, 0
	}
	r.Status = StatusPreempted
	r.Preemptions++
	s.preemptions++
	s.running = remove(s.running, r)
	at := 0
	if s.cfg.SchedulingPolicy == PolicyPriority {
		at = s.waitingPlace(r, true)
	}
	s.waiting = slices.Insert(s.waiting, at, r)
}

// Sample runs the model over a step: it asks the model for the token of
// every scheduled request that reaches the end of its sequence this step;
// the others get -1. A request's tokens sampled here are the model's until
// UpdateFromOutput applies them: a step scheduled meanwhile (AsyncScheduling)
// computes and samples after them, as a GPU does from its last step's
// output. The result lives with so.
func (s *Scheduler) Sample(so *SchedulerOutput, m Model) []int {
	tokens := so.sampled[:0]
	if cap(tokens) < len(so.Scheduled) {
		tokens = make([]int, 0, len(so.Scheduled))
	}
	tokens = tokens[:len(so.Scheduled)]
	so.sampled = tokens
	async := s.cfg.AsyncScheduling && s.spec != nil // the worker proposes the drafts
	if async {
		s.spec.samples++
	}
	// The pass writes every scheduled token's KV, then attention reads it.
	for _, sc := range so.Scheduled {
		if sc.Req.Status == StatusRunning { // not finished since Schedule
			s.kvWrite(sc.Req, s.startOf(sc), sc.NumTokens)
		}
	}
	for i := range so.Scheduled {
		sc := &so.Scheduled[i]
		tokens[i] = -1
		if r := sc.Req; sc.Sample && r.Status == StatusRunning {
			start := s.startOf(*sc)
			key := s.kvRead(r, start+sc.NumTokens)
			at := len(r.Output) + len(r.sampled)
			t := SampleAt(m, key, at, &r.Params, s.cfg.EOSTokenID)
			if t < 0 {
				// -1 means "nothing sampled" to UpdateFromOutput.
				panic(fmt.Sprintf("core: model %T returned token %d at output position %d of request %q; a token id must be ≥ 0",
					m, t, at, r.ExternalID))
			}
			tokens[i] = t
			if s.cfg.AsyncScheduling { // the next step may compute it before it is applied
				r.sampled = append(r.sampled, t)
			}
			sc.Accepted = 0
			if sc.Drafts > 0 {
				sp := r.spec
				if async && sp.proposedAt != s.spec.samples-1 {
					// The worker holds its last step's drafts only.
					panic(fmt.Sprintf("core: draft token -1 reached the model's input: request %q (incarnation %d) was scheduled %d draft placeholder(s) the worker has no drafts for, as it was not in the step before (a device-side assert)",
						r.InternalID, r.Incarnation, sc.Drafts))
				}
				sp.accepted = sp.accepted[:0]
				for j := 0; j < sc.Drafts && sp.drafts[j] == t; j++ {
					// The draft agrees with the model: kept, and the model's
					// token after it is sampled from the KV the step wrote.
					t = SampleAt(m, key, at+j+1, &r.Params, s.cfg.EOSTokenID)
					sp.accepted = append(sp.accepted, t)
				}
				sc.Accepted = int32(len(sp.accepted))
				if async {
					r.sampled = append(r.sampled, sp.accepted...)
					if rejected := sc.Drafts - len(sp.accepted); rejected > 0 {
						sp.rejected += rejected
						s.kvRollback(r, start+1+len(sp.accepted))
					}
				}
			}
			if async {
				s.proposeAt(r, at+1+int(sc.Accepted))
				r.spec.proposedAt = s.spec.samples
			}
		}
	}
	return tokens
}

// startOf is where the model computes sc's tokens from: where the
// scheduler put them, but with AsyncScheduling and speculative decoding
// before that by the drafts the worker rejected in the request's steps
// whose outputs the scheduler has not applied (reqSpec's rejected).
func (s *Scheduler) startOf(sc Scheduled) int {
	if r := sc.Req; s.cfg.AsyncScheduling && r.spec != nil {
		return sc.Start - r.spec.rejected
	}
	return sc.Start
}

// UpdateFromOutput applies a step's sampled tokens: each scheduled request
// that is still live takes its token, a placeholder no more, and is checked
// for a stop — a request preempted since the step was scheduled too, as
// vLLM does: the model computed its token before the preemption freed its
// blocks. Requests finished since (an abort while the model ran, a stop in
// the step before) are skipped: the request a step is applied to is the one
// it scheduled, never another that has its id since. It returns a frame for
// every request with a new token or a stop.
func (s *Scheduler) UpdateFromOutput(so *SchedulerOutput, sampled []int) []Frame {
	return s.UpdateFromOutputInto(nil, so, sampled)
}

// UpdateFromOutputInto is UpdateFromOutput appending the frames to dst, a
// batch's room that the caller reuses.
func (s *Scheduler) UpdateFromOutputInto(dst []Frame, so *SchedulerOutput, sampled []int) []Frame {
	frames := dst
	byID := s.cfg.AsyncScheduling && s.cfg.Faults.Fires(failpoints.CoreAsyncOutputByID)
	for i, sc := range so.Scheduled {
		r := sc.Req
		if byID {
			// The bug: whoever holds the id now takes the output.
			if now, ok := s.requests[r.InternalID]; ok {
				r = now
			}
		}
		if r.Status.Finished() || sampled[i] < 0 {
			continue // finished since (aborted while the model ran), or a chunk of prefill
		}
		if s.cfg.AsyncScheduling {
			if r.discard > 0 {
				if sc.Drafts > 0 && s.cfg.Faults.Fires(failpoints.CoreSpecRejectsBeforeDiscard) {
					// The bug: the stale step's rejections taken off the
					// request as it is now.
					rejected := sc.Drafts - int(sc.Accepted)
					if r.NumComputed > 0 {
						r.NumComputed -= rejected
					}
					if r.Placeholders > 0 {
						r.Placeholders -= rejected
					}
				}
				// Sampled before a reset preempted it (ResetPrefixCache):
				// its token and drafts were counted as placeholders.
				if s.cfg.Faults.Fires(failpoints.CoreDiscardCountsFrames) {
					r.discard-- // the bug: a step's output counted as one
				} else {
					r.discard = max(r.discard-1-sc.Drafts, 0)
				}
				continue
			}
			if r.Placeholders < 1+sc.Drafts {
				// vLLM's assert num_output_placeholders >= 0.
				panic(fmt.Sprintf("core: request %q (incarnation %d) got an output of a step that did not schedule it: no output placeholder left", r.InternalID, r.Incarnation))
			}
			r.Placeholders -= 1 + sc.Drafts
			took := min(1+int(sc.Accepted), len(r.sampled))
			if sc.Drafts > 0 {
				// The step's kept tokens, out of the worker's hands.
				r.spec.accepted = append(r.spec.accepted[:0], r.sampled[1:took]...)
			}
			r.sampled = r.sampled[:copy(r.sampled, r.sampled[took:])]
		}
		first, running := len(r.Output), r.Status == StatusRunning
		r.Output = append(r.Output, sampled[i])
		s.digest(r)
		stopped := s.checkStop(r)
		if sc.Drafts > 0 {
			stopped = s.verified(r, sc.Drafts, stopped, running)
		}
		n := len(r.Output)
		// NewTokens is the request's own output, which only grows: the
		// frame, and whatever is made from it, may be kept without a copy,
		// and the batch it came in can be reused.
		frames = append(frames, Frame{ID: s.nextFrame(), InternalID: r.InternalID, ExternalID: r.ExternalID, Incarnation: r.Incarnation, Index: r.Index,
			NewTokens: r.Output[first:n:n], Position: first, StopReason: r.StopReason})
		f := &frames[len(frames)-1]
		if stopped {
			f.Finished, f.Reason = true, r.Status.Reason()
			s.finish(r, r.Status)
		} else if s.cfg.NumSpeculativeTokens > 0 && !s.cfg.AsyncScheduling {
			s.proposeAt(r, len(r.Output))
		}
	}
	if s.offload != nil {
		if len(s.offload.flushed) > 0 {
			s.completeFlushed(so)
		}
		// The blocks the step filled go to host memory, as vLLM's
		// connector stores them step by step: those of the requests
		// that ended went with their end.
		for _, sc := range so.Scheduled {
			if r := sc.Req; r.Status == StatusRunning {
				s.storeFilled(r)
			}
		}
	}
	return frames
}

// verified applies the verification of the drafts a step computed after
// r's sequence, r's first token of the step appended and checked for a
// stop already: the tokens the model sampled after the drafts it agreed
// with are appended one by one, each checked for a stop, and what follows
// a stop is dropped, as vLLM's _update_request_with_output; r's computed
// tokens roll back past the drafts it did not agree with, vLLM's
// num_rejected, unless it is no longer running (preempted since the step
// was scheduled: it computes from its first token). It reports whether r
// stopped.
func (s *Scheduler) verified(r *Request, drafts int, stopped, running bool) bool {
	kept := r.spec.accepted
	accepted := len(kept)
	if running {
		// With AsyncScheduling the worker rolled its KV back as it
		// sampled, and no longer counts these rejections as unheard of.
		r.NumComputed -= drafts - accepted
		if s.cfg.AsyncScheduling {
			r.spec.rejected -= drafts - accepted
		}
	}
	s.spec.observe(drafts, accepted)
	if accepted > 0 && s.cfg.Faults.Fires(failpoints.CoreSpecTakesTokensAtOnce) {
		// The bug: every kept token appended, the last alone checked.
		r.Status, r.StopReason = StatusRunning, -1
		r.Output = append(r.Output, kept...)
		s.digest(r)
		stopped = s.checkStop(r)
	} else {
		for i, t := range kept {
			if stopped {
				r.spec.cut = accepted - i
				break
			}
			r.Output = append(r.Output, t)
			s.digest(r)
			stopped = s.checkStop(r)
		}
	}
	if !stopped && accepted < drafts && !s.cfg.AsyncScheduling {
		s.kvRollback(r, r.NumComputed)
	}
	return stopped
}

// proposeAt asks the draft model for r's next draft tokens, from output
// position at on: Config.NumSpeculativeTokens of them, from r's key, as a
// draft model reads what r computed. Without AsyncScheduling it runs after
// a step's output is applied, vLLM's update_draft_token_ids; with it the
// worker runs it as it samples.
func (s *Scheduler) proposeAt(r *Request, at int) {
	if r.spec == nil {
		r.spec = &reqSpec{}
	}
	sp := r.spec
	sp.drafts = sp.drafts[:0]
	for j := range s.cfg.NumSpeculativeTokens {
		sp.drafts = append(sp.drafts, s.cfg.Draft.TokenAt(r.key, at+j))
	}
}

// FinalFrame is the frame that tells the frontend a request ended in the
// core without a sampled token (shutdown, a refused ADD).
func (s *Scheduler) FinalFrame(r *Request, reason FinishReason) Frame {
	return Frame{ID: s.nextFrame(), InternalID: r.InternalID, ExternalID: r.ExternalID, Incarnation: r.Incarnation, Index: r.Index,
		Position: len(r.Output), Finished: true, Reason: reason, StopReason: -1}
}

// nextFrame numbers a frame: from 1, unique among the data-parallel
// cores of one frontend, the core of rank r of n numbering r+1, r+1+n, …
func (s *Scheduler) nextFrame() uint64 {
	s.frames++
	if s.cfg.DataParallelSize <= 1 {
		return s.frames
	}
	return (s.frames-1)*uint64(s.cfg.DataParallelSize) + uint64(s.cfg.DataParallelRank) + 1
}

// checkStop is vLLM's check_stop: below MinTokens nothing stops; then EOS
// (unless ignored), a stop token, the output length or the model length.
func (s *Scheduler) checkStop(r *Request) bool {
	p := r.Params
	if len(r.Output) < p.MinTokens {
		return false
	}
	last := r.Output[len(r.Output)-1]
	if !p.IgnoreEOS && last == s.cfg.EOSTokenID {
		r.Status = StatusFinishedStopped
		return true
	}
	if slices.Contains(p.StopTokenIDs, last) {
		r.Status = StatusFinishedStopped
		r.StopReason = last
		return true
	}
	if len(r.Output) >= p.MaxTokens || r.NumTokens() >= s.cfg.MaxModelLen {
		r.Status = StatusFinishedLength
		return true
	}
	return false
}
