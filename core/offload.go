package core

import (
	"container/list"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/task"
)

// KV offloading is vLLM's OffloadingConnector with its native CPU backend
// (--kv-offloading-backend native, --kv-offloading-size): the full blocks
// a request computed are kept in host memory by the hash of their prefix
// after the GPU lets them go, and a request whose prompt continues past
// its GPU prefix-cache hit with blocks host memory holds loads them back
// instead of computing them again. The load is asynchronous, as vLLM's
// is: the scheduler gives the request its blocks and leaves it waiting
// for them (vLLM's WAITING_FOR_REMOTE_KVS), the executor copies the KV in
// while the steps of other requests run, and the scheduler learns that
// the copy landed at a step's end (vLLM's finished_recving). The request
// then waits with the loaded tokens computed, holding every block its
// sequence needs, and the requests whose KV landed are admitted first, as
// vLLM puts back at the head of its queue the requests it skipped: the
// blocks they hold come back once they run.
//
// Two invariants keep the copy safe, and each is a planted bug here:
//   - A request aborted while its KV loads keeps its blocks until the copy
//     lands, as vLLM's scheduler keeps an aborted request's blocks until
//     finished_recving; given back at once, they go to another request
//     and the copy overwrites its KV (core/kv-load-frees-on-abort).
//   - The KV in host memory was computed by the weights of its time: a
//     reset of the prefix cache, which stands for a weight update, drops it
//     too, as vLLM's reset_prefix_cache(reset_connector=True) does; vLLM's
//     default keeps it, and a later request loads KV of the old weights
//     (core/reset-keeps-offloaded-kv). A sleep drops it as well, by the
//     reset it makes: here a sleep releases the KV as a reset does (kv.go).
//
// An ended request whose load is in flight is still the core's: its id
// is not free again until the load lands (under legacy routing the core
// refuses an ADD of it, as vLLM's duplicate request id), pauses take
// effect after it, WaitIdle waits for it. A reset that may preempt
// abandons the loads in flight, whose requests compute again once they
// landed, rather than fail for the blocks they hold.
//
// The store is asynchronous too, and step by step, as vLLM's connector
// stores (_get_reqs_to_store): after each step the blocks it filled that
// are full, written and cached, and that host memory neither holds nor
// has on its way, start a copy there; host memory makes room for them at
// once, but a load finds them only once their request ended and its last
// copy landed (vLLM's complete_store at finished_sending). A request that
// ends with copies in flight keeps its blocks in use until they land
// (vLLM's request_finished asking to delay the free): the copies read
// them then. A third invariant, planted as a bug: given back at the end,
// the blocks go to another request, and the last copies read its KV
// under the ended request's hashes (core/kv-store-frees-early), which a
// later load brings back. An ended request whose store is in flight is
// still the core's, as one whose load is. A preempted request's copies
// read its blocks at once, as vLLM's worker waits for them before the
// blocks are reused (handle_preemptions), but the scheduler learns they
// landed only from the output of the step it preempted the request in
// (vLLM's store jobs reported done with a step's output): until then its
// blocks are on their way, and the request waits to be admitted again,
// as vLLM's connector defers a request whose own transfer jobs are in
// flight, and so does one whose lookup finds them (vLLM's HIT_PENDING,
// which has no deadline: a report lost holds them for ever, planted as
// core/kv-store-forgotten-on-preempt, the class of vLLM's #49829), unless
// Config.KVOffloadMaxRecomputePendingTokens bounds a reader's wait: a hit
// that ends with that many tokens of such blocks or fewer is cut before
// them, and the reader computes them (vLLM's max_recompute_pending_tokens;
// it never bounds the request's wait for its own store). A
// live or ended request's block on its way is no hit: its GPU blocks
// hold it, which the GPU's prefix cache finds first. A reset of the
// prefix cache that may preempt
// abandons the stores in flight, as it does the loads: what they copy is
// of the weights before it.
//
// The model of it: host memory holds Config.KVOffloadBlocks blocks in as
// many slots; with Config.KVOffloadStoreThreshold, only those the lookups
// of waiting requests saw that many times (host_memory.go's
// reuseTracker). It puts out the least recently used first, or as vLLM's ARC
// chooses (Config.KVOffloadPolicy, host_memory.go); the lookup of a
// waiting request, whether it loads or not, and a step's store are each a
// use of every block of the request host memory holds, its first the most
// recent, as vLLM's touch. It never puts out one a store is still copying
// in, nor one a load in flight reads (vLLM's ref_cnt, held from
// prepare_load to complete_load), nor, for a store's room, one the store
// passes over, stored already: a load reads its slots when it lands, and
// a store whose copy landed in a slot put out under it would have
// overwritten them, a fourth invariant planted as a bug
// (core/kv-evict-while-loading). When there is no room for all the blocks
// a step filled, none is stored, and the request's next step tries again
// with those it fills too. A load starts when a waiting request would be
// admitted and reserves the blocks of its whole sequence at once, so that
// it never waits for room once its KV landed. The link to host memory
// carries loads and stores apart, as vLLM's two transfer streams: a load
// of n blocks takes (2+n)/2 steps' time (Config.StepTime) after the loads
// before it; a store's copy of n blocks n/2 steps of the link after the
// copies before it, landing a step after that. Each lands at the first
// step boundary from its due time on, the core waiting for one when
// nothing else can run.
//
// A waiting request whose blocks a load in flight reads waits for that
// load (vLLM's _blocks_being_loaded), and every waiting request waits,
// not looked up, while Config.MaxNumSeqs loads are in flight (the
// connector's back-pressure). Either wait ends because every load lands
// and host memory is told (complete_load), its request live or not: a
// fifth invariant planted as a bug, where a load whose request ended is
// never completed for host memory and the next reader of its blocks waits
// for ever (core/kv-load-forgotten-on-abort). The scheduler never rejects
// a request that waits for a load (RejectUnschedulable).

// kvLoadState is where a request is in a load: none, waiting for its KV
// to land, or landed and waiting to be admitted.
type kvLoadState uint8

const (
	kvNoLoad kvLoadState = iota
	kvLoading
	kvLoaded
)

// kvOffload is the scheduler's host memory for KV and its loads and
// stores in flight, made when Config.KVOffloadBlocks is set.
type kvOffload struct {
	capacity int
	policy   KVOffloadPolicy
	byHash   map[uint64]*list.Element // hash → its entry in lru or t2
	// lru lists the blocks host memory holds or has on their way, of
	// *offloaded, least recently used first; under ARC only those not
	// used since they were stored (T1), and t2 those used since (T2).
	lru, t2 list.List
	ghosts  [2]ghostList // ARC's B1 and B2
	target  float64      // ARC's target size of T1
	// words are host memory's slots, a block's KV each. taken are the
	// slots handed out since the last drop, the first ones of words, and
	// free those of them put out since, the last put out taken again
	// first once every slot was.
	words  []uint64
	free   []int32
	taken  int32
	victim []*list.Element    // the blocks victims chose, room reused
	counts KVOffloadStats     // its counters; stats adds the gauges
	reuse  *reuseTracker      // with a store threshold only
	loads  map[string]*kvLoad // by the internal id of the request that started it
	// stores are the requests' stores, by internal id: a live request's
	// from its first copy on, an ended one's until its last copy landed.
	stores map[string]*kvStore
	// flushed are the stores of preempted requests not yet reported
	// landed (kvStore's flushed), in order of preemption.
	flushed []*kvStore
	// reported: the last step scheduled nothing and its output reported
	// some of them (Scheduler.Reported).
	reported bool
	// cut is how many blocks a preempted request's store still copies the
	// last lookup left out of its hit, to compute them again
	// (Config.KVOffloadMaxRecomputePendingTokens); 0 when it left none.
	cut int
	// pendingCut are the requests the step being scheduled cut so
	// (Scheduler.PendingCut).
	pendingCut []PendingCut
	started    []StoreJob // the copies started since the core last took them (TakeStores)
	// done are the stores completed as their requests ended, with no copy
	// in flight, since the core last took them (TakeStores).
	done []StoreDone
	// waits are the requests whose filled blocks began to wait for room,
	// since the core last took them (TakeStores).
	waits []StoreWait
	jobs  uint64 // copies ever started, for their numbers
}

// StoreDone is a store completed as its request ended, with no copy in
// flight, or, Preempted, with the output of the step that preempted it:
// how many blocks host memory keeps for it.
type StoreDone struct {
	R         *Request
	Blocks    int
	Preempted bool
}

// StoreWait is a request whose step filled Blocks blocks host memory
// cannot make room for, too many of its blocks on their way there or read
// by loads in flight (Loads: there would be room but for the loads): they
// wait for a later step, which tries again with those it fills too.
type StoreWait struct {
	R      *Request
	Blocks int
	Loads  bool
}

// offloaded is one block's KV in host memory: its slot holds the word a
// block holds (kv.go), under the hash of the prefix it ends. A pending
// one is room a store in flight copies into: no load finds it until the
// store lands. One that loads in flight read (reads, vLLM's ref_cnt)
// stays until they landed. Neither is put out to make room: the next
// store into its slot would overwrite what the copy still reads
// (core/kv-evict-while-loading puts out one that loads read).
type offloaded struct {
	hash    uint64
	slot    int32
	reads   int32
	pending bool
	t2      bool // in ARC's T2
	// protected: a store making room passes over it, stored already.
	protected bool
	// flushed: pending for a preempted request's store, which a lookup
	// finds and waits for (HIT_PENDING); a live or ended request's pending
	// block is no hit.
	flushed bool
}

// pinned reports whether o cannot be put out: a store copies into it, a
// load reads it, or a store that passes over it makes room.
func (o *offloaded) pinned() bool { return o.pending || o.reads > 0 || o.protected }

// kvStore is a request's store of its blocks into host memory, vLLM's
// _reqs_being_stored: the blocks its copies take, step by step as they
// fill, and, once it ended, the blocks it holds until the last copy
// lands. Host memory has room for them from the copy's start, but a load
// finds them only once the request ended and every copy landed (vLLM's
// complete_store at finished_sending), or at once when it is preempted.
type kvStore struct {
	r      *Request
	next   int           // r's blocks passed over so far, vLLM's next_stored_block_idx
	copies []storedBlock // the blocks its copies take
	jobs   []StoreJob    // its copies in flight
	ended  bool          // r ended: the store completes as its last copy lands
	// flushed: r was preempted with copies in flight. The worker waited
	// for them, which read r's blocks before their reuse, but the
	// scheduler learns it only from the output of flushedOut's step
	// (vLLM's store jobs of a preempted request stay in flight until
	// reported): until then r waits to be admitted again, and so does a
	// request that would load its blocks (HIT_PENDING).
	flushed bool
	// flushedOut is the step that preempted r, whose output reports the
	// copies done, or, nil, the next step scheduled: a reset of the prefix
	// cache preempted r between steps, and vLLM's worker learns of it with
	// the next scheduler output's preempted requests.
	flushedOut *SchedulerOutput
	blocks     []int32 // r's table when it ended: in use until the last copy lands
	freed      bool    // core/kv-store-frees-early gave blocks back at the end
	// abandoned: a reset of the prefix cache came while a copy was in
	// flight; what it copies is of the weights before, and it keeps none.
	abandoned bool
}

// StoreJob is one copy of a store: the blocks of one step, the copies
// [from, to) of its request's store.
type StoreJob struct {
	ID       string // the request's internal id
	Job      uint64 // the copy's number, from 1
	from, to int
}

// Blocks returns how many blocks the copy takes.
func (j StoreJob) Blocks() int { return j.to - j.from }

// kvLoad is a copy of KV from host memory into a request's blocks: the
// words it copies into the blocks of the request's table from start on,
// under the hashes the blocks are cached by once they land.
type kvLoad struct {
	r       *Request
	start   int
	reads   []*offloaded // the KV it copies, kept in host memory until it lands
	aborted bool         // r ended while the copy was in flight
	blocks  []int32      // r's table when it ended: what the copy writes and then gives back
	freed   bool         // core/kv-load-frees-on-abort gave blocks back at the abort
	// abandoned: a reset of the prefix cache came while the copy was in
	// flight; what it copies is of the weights before, and r computes
	// again once it landed.
	abandoned bool
}

// held returns the blocks the store holds until it lands: none while its
// request lives (the request holds them), none once
// core/kv-store-frees-early gave them back at the end.
func (st *kvStore) held() []int32 {
	if st.freed {
		return nil
	}
	return st.blocks
}

// storedBlock is a block a store copies: its index in the request's
// table, the hash host memory keeps it under, and what its copy read.
type storedBlock struct {
	at   int
	hash uint64
	word uint64
	dst  *list.Element // its room in host memory
}

func newKVOffload(cfg Config) *kvOffload {
	return &kvOffload{capacity: cfg.KVOffloadBlocks, policy: cfg.KVOffloadPolicy, reuse: newReuseTracker(cfg.KVOffloadStoreThreshold, cfg.KVOffloadTrackerSize), byHash: map[uint64]*list.Element{}, loads: map[string]*kvLoad{}, stores: map[string]*kvStore{}}
}

// startLoad starts the load of r's blocks after its GPU hits that host
// memory holds, if there are any and room for its whole sequence, and
// reports what came of it: with none, r is admitted as it is; short of
// room, r waits (admit's failure). When a load in flight reads any of
// those blocks, r waits for it instead, as vLLM's connector delays a
// request whose hits are being loaded (_blocks_being_loaded, kept with
// prefix caching): that load caches them in the GPU, where r finds them.
// r stays in the waiting queue, skipped until the load lands
// (CompleteLoad). So it does, not looked up, while Config.MaxNumSeqs
// loads are in flight (the connector's back-pressure). Each time a lookup
// runs, whether a load starts or not, it makes a use of every block of r
// host memory holds, its first the most recent, as vLLM's
// get_num_new_matched_tokens touches them before its lookup, and, with a
// store threshold, counts a sighting of every full block past the hits;
// the load itself is no use (prepare_load). A load started is counted as
// vLLM's scheduler counts it (recordLookup).
func (s *Scheduler) startLoad(r *Request, hits []int32) loadStart {
	s.offload.cut = 0
	if st := s.offload.stores[r.InternalID]; st != nil && st.flushed {
		return loadPending // vLLM: a request whose own transfer jobs are in flight waits
	}
	if len(s.offload.loads) >= s.cfg.MaxNumSeqs {
		return loadHeldBack // before the lookup: it touches nothing
	}
	salt := r.cacheSalt()
	s.offload.touch(r.hashes, salt) // a lookup is a use of every block it may read
	first := len(hits)
	if t := s.offload.reuse; t != nil && len(r.hashes) > first {
		t.record(r.hashes[first:], salt) // vLLM looks up nothing when less than a block is past the hits
	}
	var reads []*offloaded
	pending := -1 // the first block of the hit a preempted request's store still copies
	for _, h := range r.hashes[first : (r.NumTokens()-1)/s.cfg.BlockSize] {
		o, ok := s.offload.lookup(h ^ salt)
		if !ok || o.pending && !o.flushed {
			break // a live or ended request's copy in flight: no load finds it yet
		}
		if o.pending && pending < 0 {
			pending = len(reads)
		}
		reads = append(reads, o)
	}
	if pending >= 0 {
		tail := len(reads) - pending
		if tail*s.cfg.BlockSize > s.cfg.KVOffloadMaxRecomputePendingTokens {
			return loadPending // vLLM's HIT_PENDING: it waits for the store's copy to land
		}
		// vLLM's max_recompute_pending_tokens: computing the tail again
		// is cheaper than the wait; the hit ends before it.
		s.offload.cut = tail
		reads = reads[:pending]
	}
	if len(reads) == 0 {
		return loadNone
	}
	if slices.ContainsFunc(reads, func(o *offloaded) bool { return o.reads > 0 }) {
		return loadDelayed // vLLM's connector: "hit blocks are being loaded, delay request"
	}
	need := s.cfg.BlocksFor(min(r.NumTokens(), s.cfg.MaxModelLen)) - first
	evictable := 0
	for _, id := range hits {
		if s.pool.blocks[id].ref == 0 {
			evictable++
		}
	}
	if need+evictable > s.pool.numFree {
		return loadNoRoom
	}
	ld := &kvLoad{r: r, start: first, reads: reads}
	for _, o := range reads {
		o.reads++ // vLLM's prepare_load
	}
	for _, id := range hits {
		s.pool.touch(id, r.Incarnation)
		r.table = append(r.table, id)
	}
	r.cachedBlocks = first
	s.allocate(r, need, first*s.cfg.BlockSize) // caches nothing past the hits
	r.kvLoad = kvLoading
	s.offload.loads[r.InternalID] = ld
	s.offload.recordLookup(r, first*s.cfg.BlockSize, len(reads)*s.cfg.BlockSize)
	return loadStarted
}

// PendingCut is a waiting request whose hit in host memory was cut
// before Blocks blocks a preempted request's store still copies there,
// which it computes again rather than wait for the copy
// (Config.KVOffloadMaxRecomputePendingTokens).
type PendingCut struct {
	R      *Request
	Blocks int
}

// cutPending tells of r's hit cut before the pending blocks its lookup
// left out (cut), if it was, once r is admitted or its load started.
func (o *kvOffload) cutPending(r *Request) {
	if o.cut > 0 {
		o.pendingCut = append(o.pendingCut, PendingCut{R: r, Blocks: o.cut})
	}
}

// PendingCut returns the waiting requests the last Schedule admitted or
// started to load with their hits cut before blocks a preempted request's
// store still copies to host memory, few enough to compute again
// (Config.KVOffloadMaxRecomputePendingTokens). It is valid until the next
// Schedule. (Not a field of SchedulerOutput: the scheduler, which holds
// two, stays within its allocation's size class.)
func (s *Scheduler) PendingCut() []PendingCut {
	if s.offload == nil {
		return nil
	}
	return s.offload.pendingCut
}

// loadStart is what a waiting request's lookup of host memory came to.
type loadStart uint8

const (
	loadNone    loadStart = iota // host memory has nothing past its GPU hits: it is admitted as it is
	loadStarted                  // its load started: it waits for it to land
	loadNoRoom                   // no room for its whole sequence: it waits, and those behind it
	// loadDelayed: a load in flight reads blocks it would load; it waits
	// for that load to land, when the GPU's cache has them, and those
	// behind it may be admitted meanwhile (vLLM's connector returns None,
	// the scheduler skips it this step).
	loadDelayed
	// loadHeldBack: Config.MaxNumSeqs loads were in flight, their
	// requests live or ended; it waits, not looked up, for one to land,
	// and those behind it too (vLLM's connector's back-pressure returns
	// None before its lookup while max_num_seqs requests are being loaded,
	// for every waiting request).
	loadHeldBack
	// loadPending: a preempted request's store, its own or one of blocks
	// it would load, is not yet reported landed; it waits for the report,
	// and those behind it may be admitted meanwhile (vLLM's lookup
	// answers HIT_PENDING and its connector None, with no deadline: its
	// #49829).
	loadPending
)

// holds reports whether the request waits in the queue, skipped, for a
// load or a store in flight to land, and the requests behind it may be
// admitted.
func (h loadStart) holds() bool {
	return h == loadDelayed || h == loadHeldBack || h == loadPending
}

// Reported reports whether the last step, which scheduled nothing,
// reported the stores of preempted requests done: the requests it held
// for them are admitted at the next step.
func (s *Scheduler) Reported() bool { return s.offload != nil && s.offload.reported }

// WaitsForLoad reports whether the last step held a waiting request back
// for a KV load in flight to land (a load of blocks it would load, or the
// connector's back-pressure): the loads in flight always land, and then
// it looks up again.
func (s *Scheduler) WaitsForLoad() bool { return s.out != nil && s.out.LoadHeld > 0 }

// waitingHoldBlocks reports whether blocks are held but by running
// requests: by a load or a store in flight, or by a waiting request whose
// KV landed. Then a request that cannot be admitted now may be later: the
// copy gives its blocks back, or its request runs and ends.
func (s *Scheduler) waitingHoldBlocks() bool {
	if s.offload == nil {
		return false
	}
	return len(s.offload.loads) > 0 || s.endedStores() > 0 || slices.ContainsFunc(s.waiting, func(r *Request) bool { return r.kvLoad == kvLoaded })
}

// TransfersInFlight returns how many loads and stores have copies that
// have not landed, their requests live or ended.
func (s *Scheduler) TransfersInFlight() int {
	if s.offload == nil {
		return 0
	}
	n := len(s.offload.loads)
	for _, st := range s.offload.stores {
		if len(st.jobs) > 0 {
			n++
		}
	}
	return n
}

// endedStores returns how many stores hold an ended request's blocks
// until their copies land.
func (s *Scheduler) endedStores() int {
	n := 0
	for _, st := range s.offload.stores {
		if st.ended {
			n++
		}
	}
	return n
}

// LoadOutcome is how a KV load from host memory ended.
type LoadOutcome uint8

const (
	// LoadLanded: the copy wrote the request's blocks, which are cached,
	// and it waits to be admitted with their tokens computed.
	LoadLanded LoadOutcome = iota
	// LoadEnded: the request had ended; its blocks went back.
	LoadEnded
	// LoadAbandoned: a reset of the prefix cache came while the copy was
	// in flight; the request gave its blocks back and computes again.
	LoadAbandoned
	// LoadFailed: the copy's last block failed (core/kv-load-fails); the
	// request ended with an error (LoadFailureFail), or waits to be
	// admitted with the blocks before it computed, or, none of them, to
	// look up again (LoadFailureRecompute).
	LoadFailed
)

// CompleteLoad lands the load r started, r given by its internal id: the
// copy writes its blocks, which are cached, and r waits to be admitted
// with their tokens computed. A load whose request ended meanwhile gives
// its blocks back instead, after writing them, and one a reset abandoned
// gives them back and leaves its request to compute again. It returns the
// request, how the load ended and how many blocks it copied; an id with
// no load in flight returns nil.
func (s *Scheduler) CompleteLoad(id string) (r *Request, how LoadOutcome, n int) {
	if s.offload == nil {
		return nil, LoadLanded, 0
	}
	ld, ok := s.offload.loads[id]
	if !ok {
		return nil, LoadLanded, 0
	}
	delete(s.offload.loads, id)
	if !ld.aborted || !s.cfg.Faults.Fires(failpoints.CoreKVLoadForgottenOnAbort) {
		ld.landed()
	}
	r, n = ld.r, len(ld.reads)
	s.offload.counts.LoadedBlocks += int64(n)
	if ld.aborted {
		s.landLoad(ld, ld.blocks)
		s.releaseEnded(ld)
		return r, LoadEnded, n
	}
	if ld.abandoned {
		s.unload(r) // the copy landed in blocks it gives back: it computes again
		return r, LoadAbandoned, n
	}
	s.landLoad(ld, r.table)
	valid, how := n, LoadLanded
	if s.cfg.Faults.Fires(failpoints.CoreKVLoadFails) {
		// vLLM's connector reports the block in invalid_block_ids: what
		// landed in it is not the KV host memory held.
		valid, how = n-1, LoadFailed
		s.offload.counts.FailedLoads++
		b := &s.pool.blocks[r.table[ld.start+valid]]
		b.word = garbage(b.word, ld.reads[valid].hash)
		if !s.cfg.Faults.Fires(failpoints.CoreKVLoadFailedBlockKept) {
			s.offload.forgetFailed(ld.reads[valid])
		}
		if s.cfg.KVLoadFailurePolicy == LoadFailureFail {
			r.kvLoad = kvNoLoad
			s.finish(r, StatusFinishedError) // nothing cached: its blocks go back
			return r, how, n
		}
	}
	cached := valid // vLLM caches the blocks that loaded, up to the first that failed
	if valid < n && s.cfg.Faults.Fires(failpoints.CoreKVLoadCachesInvalidBlocks) {
		cached = n
	}
	for j, o := range ld.reads[:cached] {
		s.pool.cache(r.table[ld.start+j], o.hash)
	}
	r.cachedBlocks = ld.start + valid
	r.NumComputed = r.cachedBlocks * s.cfg.BlockSize
	r.kvLoad = kvLoaded
	if r.NumComputed == 0 {
		s.unload(r) // vLLM frees its blocks: it looks up again
	}
	return r, how, n
}

// landed is ld's end for the host memory it read (vLLM's complete_load):
// it may be put out again. What a reset dropped meanwhile is gone anyway.
func (ld *kvLoad) landed() {
	for _, o := range ld.reads {
		o.reads--
	}
}

// landLoad writes the words a load reads into the blocks of table it
// copies into: whoever holds them now. A block another request holds
// makes every holder read all its blocks again (kvEpoch), as an
// overwrite does.
func (s *Scheduler) landLoad(ld *kvLoad, table []int32) {
	bs := int32(s.cfg.BlockSize)
	for j, o := range ld.reads {
		b := &s.pool.blocks[table[ld.start+j]]
		if ld.freed && b.ref > 0 {
			s.kvEpoch++
		}
		b.word, b.filled = s.offload.word(o), bs
	}
}

// abortLoad ends r, whose KV is loading, without giving its blocks back:
// the load keeps them until it lands. Under core/kv-load-frees-on-abort
// they go back at once, and the copy still writes them.
func (s *Scheduler) abortLoad(r *Request, status Status) {
	ld := s.offload.loads[r.InternalID]
	ld.aborted = true
	ld.blocks = slices.Clone(r.table)
	if s.cfg.Faults.Fires(failpoints.CoreKVLoadFreesOnAbort) {
		ld.freed = true
		s.freeBlocks(r)
	}
	r.table, r.Blocks, r.cachedBlocks = r.table[:0], 0, 0
	r.kvLoad = kvNoLoad
	s.leave(r, status)
}

// abandonTransfers marks every load and store in flight abandoned, for a
// reset of the prefix cache that may preempt: what the copies bring is of
// the weights before it; the loads' requests compute again once they
// landed, and the stores keep nothing. It returns how many blocks the
// copies hold until then, each once: the sequences of a request share
// their prompt's hits, and requests their cached blocks.
func (s *Scheduler) abandonTransfers() int {
	var held []int32
	for _, ld := range s.offload.loads { // the count does not depend on the order
		ld.abandoned = true
		switch {
		case !ld.aborted:
			held = append(held, ld.r.table...)
			ld.r.cachedBlocks = 0 // the reset uncaches its hits
		case !ld.freed:
			held = append(held, ld.blocks...)
		}
	}
	for _, st := range s.offload.stores { // the ended requests': the reset preempted the others
		st.abandoned = true
		held = append(held, st.held()...)
	}
	slices.Sort(held)
	return len(slices.Compact(held))
}

// storeFilled starts a copy into host memory of the blocks of r filled
// since its last, vLLM's _get_reqs_to_store: those full, written and
// cached that host memory neither holds nor has on its way, and, with a
// store threshold, that lookups saw often enough; it passes over the
// others for good. Host memory
// makes room for all of them or stores none (vLLM's prepare_store,
// "cannot store"): then r's next step tries again from the same block,
// with those it fills too. A copy started makes every full block of r
// whose tokens are known a use, its first the most recent (vLLM's touch). It
// is called after every step, for the requests it computed.
func (s *Scheduler) storeFilled(r *Request) {
	bs := int32(s.cfg.BlockSize)
	st := s.offload.stores[r.InternalID]
	next := 0
	if st != nil {
		next = st.next
	}
	full := next
	for full < len(r.table) {
		if b := &s.pool.blocks[r.table[full]]; b.filled != bs {
			break
		}
		full++
	}
	if full == next {
		return
	}
	need := 0
	for _, id := range r.table[next:full] {
		switch b := &s.pool.blocks[id]; {
		case s.offload.lacks(b):
			need++
		case b.hashed && !s.offload.reuse.eligible(b.hash):
			s.offload.counts.StoresSkipped++ // seen too seldom: vLLM's filter passes it over
		}
	}
	// vLLM's prepare_store chooses the blocks to copy, then makes room
	// for them all or for none, never putting out those of r it passes
	// over, stored already.
	ok, loads, evictRead := true, false, false
	if need > 0 {
		s.protect(r, next, full, true)
		ok, loads = s.offload.roomFor(need)
		evictRead = !ok && loads && s.cfg.Faults.Fires(failpoints.CoreKVEvictWhileLoading)
		if ok || evictRead {
			s.offload.makeRoom(need, evictRead)
		}
		s.protect(r, next, full, false)
	}
	if !ok && !evictRead { // cannot store: the next step tries again
		s.offload.counts.StoreFailures++
		if !r.storeWaits {
			r.storeWaits = true
			s.offload.waits = append(s.offload.waits, StoreWait{R: r, Blocks: need, Loads: loads})
		}
		return
	}
	r.storeWaits = false
	if st == nil {
		st = &kvStore{r: r}
		s.offload.stores[r.InternalID] = st
	}
	st.next = full
	if need == 0 {
		return
	}
	from := len(st.copies)
	for i := next; i < full; i++ {
		if b := &s.pool.blocks[r.table[i]]; s.offload.lacks(b) {
			st.copies = append(st.copies, storedBlock{at: i, hash: b.hash, dst: s.offload.reserve(b.hash)})
		}
	}
	s.offload.touch(r.hashes[:min(full, len(r.hashes))], r.cacheSalt()) // a block filled past the known tokens (async scheduling's placeholder) has no hash yet
	s.offload.jobs++
	j := StoreJob{ID: r.InternalID, Job: s.offload.jobs, from: from, to: len(st.copies)}
	st.jobs = append(st.jobs, j)
	s.offload.started = append(s.offload.started, j)
}

// endStore is a request's end for its store: the blocks its last step
// filled start their copy, and a store with copies in flight holds the
// blocks until they land (vLLM's request_finished asking to delay the
// free); one without completes at once. It reports whether the store
// holds the blocks: then r holds none.
func (s *Scheduler) endStore(r *Request) bool {
	s.storeFilled(r)
	st := s.offload.stores[r.InternalID]
	if st == nil {
		return false
	}
	st.ended = true
	if len(st.jobs) == 0 {
		s.completeStore(st)
		if len(st.copies) > 0 {
			s.offload.done = append(s.offload.done, StoreDone{R: r, Blocks: len(st.copies)})
		}
		return false
	}
	st.blocks = r.table // r has ended: the table is the store's now
	if s.cfg.Faults.Fires(failpoints.CoreKVStoreFreesEarly) {
		st.freed = true
		s.pool.freeAll(st.blocks)
	}
	r.table, r.Blocks, r.cachedBlocks = nil, 0, 0
	return true
}

// flushStore is a request's preemption for its store: vLLM's worker waits
// for a preempted request's copies before its blocks are reused, so they
// read its blocks now; the scheduler completes the store at once when
// none is in flight, else with the output of out, the step being
// scheduled, or, out nil, of the next step (kvStore's flushed,
// completeFlushed).
func (s *Scheduler) flushStore(r *Request, out *SchedulerOutput) {
	st := s.offload.stores[r.InternalID]
	if st == nil {
		return
	}
	for _, j := range st.jobs {
		s.readCopies(st, j, r.table)
	}
	if len(st.jobs) == 0 {
		s.completeStore(st)
		return
	}
	st.flushed, st.flushedOut = true, out
	s.offload.flushed = append(s.offload.flushed, st)
	for _, c := range st.copies {
		if c.dst != nil && s.offload.byHash[c.hash] == c.dst {
			c.dst.Value.(*offloaded).flushed = true
		}
	}
}

// beginStep readies host memory's side of out, the step being scheduled:
// its output reports the stores of requests preempted since the last
// step, and what the last step reported or cut is forgotten.
func (o *kvOffload) beginStep(out *SchedulerOutput) {
	for _, st := range o.flushed {
		if st.flushedOut == nil {
			st.flushedOut = out
		}
	}
	o.reported = false
	if len(o.pendingCut) > 0 {
		clear(o.pendingCut)
		o.pendingCut = o.pendingCut[:0]
	}
}

// completeFlushed completes the stores of requests that so's step
// preempted: the worker waited for their copies before it ran the step,
// and the step's output tells the scheduler (vLLM's store jobs reported
// done with a step's output). Their copies land on the link later and
// find nothing.
func (s *Scheduler) completeFlushed(so *SchedulerOutput) (reported bool) {
	s.offload.flushed = slices.DeleteFunc(s.offload.flushed, func(st *kvStore) bool {
		switch {
		case st.flushedOut != so:
			return false // another step's: its output tells
		case !st.abandoned && s.cfg.Faults.Fires(failpoints.CoreKVStoreForgottenOnPreempt):
			return true // the bug: never told
		}
		st.jobs, st.flushed = st.jobs[:0], false // it leaves the list here
		s.completeStore(st)
		s.offload.done = append(s.offload.done, StoreDone{R: st.r, Blocks: len(st.copies), Preempted: true})
		reported = true
		return true
	})
	return reported
}

// TakeStores returns the copies stores started since the last call, in
// order, for the core to put on the link to host memory, the stores
// completed as their requests ended, and the requests whose filled blocks
// began to wait for room (EngineCore.startStores).
func (s *Scheduler) TakeStores() ([]StoreJob, []StoreDone, []StoreWait) {
	if s.offload == nil || len(s.offload.started)+len(s.offload.done)+len(s.offload.waits) == 0 {
		return nil, nil, nil
	}
	jobs, done, waits := s.offload.started, s.offload.done, s.offload.waits
	s.offload.started, s.offload.done, s.offload.waits = nil, nil, nil
	return jobs, done, waits
}

// CompleteStore lands copy job of the store of the request of internal
// id: the copy reads the blocks it takes, whoever holds them now. The last
// copy of an ended request's store completes it: host memory keeps what
// the copies read under their hashes for loads to find, and the blocks go
// back; a store a reset abandoned keeps nothing. It returns the request
// and how many blocks the copy took, with done set when it completed the
// store; a copy a preemption landed already returns nil.
func (s *Scheduler) CompleteStore(id string, job uint64) (r *Request, n int, done, abandoned bool) {
	st, ok := s.offload.stores[id]
	if !ok {
		return nil, 0, false, false
	}
	k := slices.IndexFunc(st.jobs, func(j StoreJob) bool { return j.Job == job })
	if k < 0 {
		return nil, 0, false, false
	}
	j := st.jobs[k]
	st.jobs = slices.Delete(st.jobs, k, k+1)
	s.offload.counts.StoredBlocks += int64(j.Blocks())
	table := st.r.table
	if st.ended {
		table = st.blocks
	}
	if !st.flushed { // a preempted request's copies read its blocks as it was preempted
		s.readCopies(st, j, table)
	}
	if st.ended && len(st.jobs) == 0 && !st.flushed {
		s.completeStore(st)
		return st.r, j.Blocks(), true, st.abandoned
	}
	return st.r, j.Blocks(), false, st.abandoned
}

// readCopies is copy j of st reading the blocks of table it takes.
func (s *Scheduler) readCopies(st *kvStore, j StoreJob, table []int32) {
	for i := j.from; i < j.to; i++ {
		c := &st.copies[i]
		c.word = s.pool.blocks[table[c.at]].word
	}
}

// completeStore makes what st's copies read loadable, or, abandoned,
// drops it, gives back the blocks it held and forgets it.
func (s *Scheduler) completeStore(st *kvStore) {
	if st.flushed {
		// Completed before the output that was to tell it (its request
		// ended once the copies landed): it leaves the stores that output
		// reports, or it would be completed and told again there, and,
		// found by internal id, take the store of a request that reused
		// the id.
		st.flushed = false
		s.offload.flushed = slices.DeleteFunc(s.offload.flushed, func(f *kvStore) bool { return f == st })
	}
	delete(s.offload.stores, st.r.InternalID)
	for _, c := range st.copies {
		if c.dst == nil || s.offload.byHash[c.hash] != c.dst {
			continue // dropped by a reset since
		}
		if st.abandoned {
			s.offload.remove(c.dst)
			continue
		}
		o := c.dst.Value.(*offloaded)
		s.offload.words[o.slot], o.pending, o.flushed = c.word, false, false
	}
	s.pool.freeAll(st.held())
}

// DropTransfers gives back the blocks of every load and store in flight,
// whose copies will never land: the executor stops. Their requests have
// ended.
func (s *Scheduler) DropTransfers() {
	if s.offload == nil {
		return
	}
	for _, id := range sortedIDs(s.offload.loads) {
		s.offload.loads[id].landed()
		s.releaseEnded(s.offload.loads[id])
	}
	clear(s.offload.loads)
	for _, id := range sortedIDs(s.offload.stores) {
		s.pool.freeAll(s.offload.stores[id].held())
	}
	clear(s.offload.stores)
	clear(s.offload.flushed)
	s.offload.started, s.offload.done, s.offload.flushed = nil, nil, s.offload.flushed[:0]
}

// releaseEnded gives back the blocks an ended request's load held, unless
// core/kv-load-frees-on-abort gave them back at the abort.
func (s *Scheduler) releaseEnded(ld *kvLoad) {
	if !ld.freed {
		s.pool.freeAll(ld.blocks)
	}
}

// endedTransfers returns how many loads and stores in flight belong to
// requests that have ended: they hold their blocks until they land.
func (s *Scheduler) endedTransfers() int {
	n := s.endedStores()
	for _, ld := range s.offload.loads {
		if ld.aborted {
			n++
		}
	}
	return n
}

// sortedIDs returns the ids of copies in order, so that what depends on
// the order (the free queue) does not depend on the map's.
func sortedIDs[T any](copies map[string]T) []string {
	ids := make([]string, 0, len(copies))
	for id := range copies {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// deferred counts the waiting requests whose KV loads from host memory or
// has landed, vLLM's skipped_waiting of WAITING_FOR_REMOTE_KVS: none of
// them counts toward Config.MaxNumSeqs but with
// core/max-num-seqs-counts-deferred.
func (s *Scheduler) deferred() int {
	n := 0
	for _, r := range s.waiting {
		if r.kvLoad != kvNoLoad {
			n++
		}
	}
	return n
}

// loadedAsIs reports whether the KV that landed for r is of its adapter's
// weights as they are: its last loaded block is cached under the hash r
// would give it now. A reload of the adapter meanwhile (its revision is
// in the hash) makes it the old weights' KV.
func (s *Scheduler) loadedAsIs(r *Request) bool {
	i := r.cachedBlocks - 1
	b := &s.pool.blocks[r.table[i]]
	return b.hashed && b.hash == r.hashes[i]^r.cacheSalt()
}

// unload gives back the blocks of a waiting request whose KV landed: a
// reset of the prefix cache that may preempt makes it compute again, as
// it does the running requests.
func (s *Scheduler) unload(r *Request) {
	s.freeBlocks(r)
	r.NumComputed, r.kvLoad = 0, kvNoLoad
}

// DropOffloaded forgets the KV host memory holds: it was computed by the
// weights before a reset or a sleep.
func (s *Scheduler) DropOffloaded() {
	if s.offload != nil {
		s.offload.drop()
	}
}

// coreKV is the core's side of KV offloading: the loads and stores in
// flight, in order of their due times, each landing at the first step
// boundary from it on, and whether the core waits for one.
type coreKV struct {
	copies []pendingCopy
	// loadsEnd and storesEnd are when the link's two directions are free
	// of the copies put on them.
	loadsEnd, storesEnd time.Time
	// stalled: the last step scheduled nothing while nothing ran and a
	// copy was in flight; the core waits for an input or the copy.
	stalled bool
}

// pendingCopy is a KV load or store in flight: its request's internal id,
// when the copy is done, and a store's copy number.
type pendingCopy struct {
	id    string
	due   time.Time
	store bool
	job   uint64
}

// startLoads starts the copies of the loads a step started.
func (c *EngineCore) startLoads(rs []*Request) {
	for _, r := range rs {
		n := len(c.sched.offload.loads[r.InternalID].reads)
		// A load of n blocks takes (2+n)/2 steps, after the loads before it.
		at := laterOf(c.rt.Now(), c.kv.loadsEnd).Add(c.cfg.StepTime * time.Duration(2+n) / 2)
		c.kv.loadsEnd = at
		c.kv.put(pendingCopy{id: r.InternalID, due: at})
		c.emit(Event{Kind: EventKVLoad, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: n})
	}
	c.syncHeld()
}

// startStores starts the copies the stores started (Scheduler.TakeStores):
// syncHeld, which follows every change of the scheduler's requests, calls
// it. The link to host memory carries them the other way from the loads,
// as vLLM's two transfer streams do: a copy of n blocks takes n/2 steps of
// the link after the copies before it, and lands a step after that.
func (c *EngineCore) startStores() {
	jobs, done, waits := c.sched.TakeStores()
	for _, w := range waits {
		r := w.R
		ev := Event{Kind: EventKVStoreWait, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: w.Blocks}
		if w.Loads {
			ev.Text = "loads"
		}
		c.emit(ev)
	}
	for _, d := range done {
		r, how := d.R, "ended"
		if d.Preempted {
			how = "preempted"
		}
		c.emit(Event{Kind: EventKVStored, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: d.Blocks, Finished: true, Text: how})
	}
	for _, j := range jobs {
		r, n := c.sched.offload.stores[j.ID].r, j.Blocks()
		end := laterOf(c.rt.Now(), c.kv.storesEnd).Add(c.cfg.StepTime * time.Duration(n) / 2)
		c.kv.storesEnd = end
		c.kv.put(pendingCopy{id: j.ID, due: end.Add(c.cfg.StepTime), store: true, job: j.Job})
		c.emit(Event{Kind: EventKVStore, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: n})
	}
}

// put puts a copy among those in flight, in order of due time, after
// those due at the same time.
func (k *coreKV) put(p pendingCopy) {
	i := len(k.copies)
	for i > 0 && k.copies[i-1].due.After(p.due) {
		i--
	}
	k.copies = slices.Insert(k.copies, i, p)
}

// laterOf returns the later of two times.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// landCopies lands the loads and stores that are due, as vLLM's scheduler
// learns of them at a step's end (finished_recving, finished_sending).
func (c *EngineCore) landCopies() {
	now := c.rt.Now()
	landed, retried := 0, 0
	for ; landed < len(c.kv.copies) && !c.kv.copies[landed].due.After(now); landed++ {
		if c.landCopy(c.kv.copies[landed]) {
			retried++
		}
	}
	if landed == 0 {
		return
	}
	c.kv.copies = slices.Delete(c.kv.copies, 0, landed)
	if retried < landed || !c.faults.Fires(failpoints.CoreKVLoadRetryLeavesCoreIdle) {
		c.kv.stalled = false
	}
	c.syncHeld()
}

// landCopy lands one copy and tells of it. It reports whether the copy
// was a load that failed and sent its request back to compute
// (kv_load_failure_policy recompute).
func (c *EngineCore) landCopy(p pendingCopy) (retried bool) {
	var ev Event
	var failed *Request // a load that failed ended it: kv_load_failure_policy fail
	if p.store {
		r, n, done, abandoned := c.sched.CompleteStore(p.id, p.job)
		if r == nil {
			return
		}
		ev = Event{Kind: EventKVStored, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: n, Finished: done}
		if abandoned {
			ev.Text = "abandoned"
		}
	} else {
		r, how, n := c.sched.CompleteLoad(p.id)
		if r == nil {
			return
		}
		ev = Event{Kind: EventKVLoaded, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: n, Finished: how == LoadEnded}
		switch {
		case how == LoadAbandoned:
			ev.Text = "abandoned"
		case how == LoadFailed:
			ev.Text, ev.Finished = "failed", r.Status.Finished()
			if ev.Finished {
				failed = r
			} else {
				retried = true
			}
		}
	}
	c.emit(ev)
	if failed != nil {
		c.put([]Frame{c.sched.FinalFrame(failed, FinishError)})
	}
	return retried
}

// waitInput takes the next input, waiting for one; with KV copies in
// flight it waits only until the first is due, and then reports due.
func (c *EngineCore) waitInput() (in Input, ok, due bool) {
	if c.kv == nil || len(c.kv.copies) == 0 {
		in, ok = c.in.Get()
		return in, ok, false
	}
	wait := c.kv.copies[0].due.Sub(c.rt.Now())
	if wait <= 0 {
		return in, true, true
	}
	ctx, cancel := task.WithTimeout(c.rt, context.Background(), wait)
	defer cancel()
	in, err := c.in.GetContext(ctx)
	switch {
	case err == nil:
		return in, true, false
	case errors.Is(err, task.ErrClosed):
		return in, false, false
	}
	return in, true, true // the deadline: the load is due
}

// offloadCounts are host memory's counts and gauges as of the core's last
// change, for the frontend's: any task may read them.
type offloadCounts struct {
	queries, hits, preemptedQueries, preemptedHits          atomic.Int64
	stored, loaded, evicted, storeFailures, skipped, blocks atomic.Int64
	failedLoads                                             atomic.Int64
}

func (p *offloadCounts) publish(st KVOffloadStats) {
	publish(&p.queries, st.Queries)
	publish(&p.hits, st.Hits)
	publish(&p.preemptedQueries, st.PreemptedQueries)
	publish(&p.preemptedHits, st.PreemptedHits)
	publish(&p.stored, st.StoredBlocks)
	publish(&p.loaded, st.LoadedBlocks)
	publish(&p.evicted, st.Evicted)
	publish(&p.storeFailures, st.StoreFailures)
	publish(&p.skipped, st.StoresSkipped)
	publish(&p.failedLoads, st.FailedLoads)
	publish(&p.blocks, int64(st.Blocks))
}

// load returns the counts published, with host memory's size and policy
// from cfg; zero without host memory (p nil).
func (p *offloadCounts) load(cfg Config) KVOffloadStats {
	if p == nil {
		return KVOffloadStats{}
	}
	return KVOffloadStats{Queries: p.queries.Load(), Hits: p.hits.Load(),
		PreemptedQueries: p.preemptedQueries.Load(), PreemptedHits: p.preemptedHits.Load(),
		StoredBlocks: p.stored.Load(), LoadedBlocks: p.loaded.Load(), Evicted: p.evicted.Load(),
		StoreFailures: p.storeFailures.Load(), StoresSkipped: p.skipped.Load(), FailedLoads: p.failedLoads.Load(), Blocks: int(p.blocks.Load()),
		Capacity: cfg.KVOffloadBlocks, Policy: cfg.KVOffloadPolicy}
}
