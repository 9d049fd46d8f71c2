package core

import (
	"container/list"
	"context"
	"errors"
	"slices"
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
// The model of it: host memory holds Config.KVOffloadBlocks blocks, least
// recently used out first; a block goes there as a request gives it back
// (finished, aborted or preempted), if it is full, written and cached; a
// load starts when a waiting request would be admitted and reserves the
// blocks of its whole sequence at once, so that it never waits for room
// once its KV landed; a load of n blocks takes (2+n)/2 steps' time
// (Config.StepTime), loads one after another, and lands at the first step
// boundary after, the core waiting for it when nothing else can run.

// kvLoadState is where a request is in a load: none, waiting for its KV
// to land, or landed and waiting to be admitted.
type kvLoadState uint8

const (
	kvNoLoad kvLoadState = iota
	kvLoading
	kvLoaded
)

// kvOffload is the scheduler's host memory for KV and its loads in
// flight, made when Config.KVOffloadBlocks is set.
type kvOffload struct {
	capacity int
	byHash   map[uint64]*list.Element // hash → its entry in lru
	lru      list.List                // of *offloaded, least recently used first
	loads    map[string]*kvLoad       // by the internal id of the request that started it
}

// offloaded is one block's KV in host memory: the word a block holds
// (kv.go), under the hash of the prefix it ends.
type offloaded struct {
	hash, word uint64
}

// kvLoad is a copy of KV from host memory into a request's blocks: the
// words it copies into the blocks of the request's table from start on,
// under the hashes the blocks are cached by once they land.
type kvLoad struct {
	r       *Request
	start   int
	words   []uint64
	hashes  []uint64
	aborted bool    // r ended while the copy was in flight
	blocks  []int32 // r's table when it ended: what the copy writes and then gives back
	freed   bool    // core/kv-load-frees-on-abort gave blocks back at the abort
	// abandoned: a reset of the prefix cache came while the copy was in
	// flight; what it copies is of the weights before, and r computes
	// again once it landed.
	abandoned bool
}

func newKVOffload(capacity int) *kvOffload {
	return &kvOffload{capacity: capacity, byHash: map[uint64]*list.Element{}, loads: map[string]*kvLoad{}}
}

// put keeps a block's KV in host memory as the most recently used,
// putting the least recently used out when it is full.
func (o *kvOffload) put(hash, word uint64) {
	if e, ok := o.byHash[hash]; ok {
		e.Value.(*offloaded).word = word
		o.lru.MoveToBack(e)
		return
	}
	if o.lru.Len() == o.capacity {
		old := o.lru.Remove(o.lru.Front()).(*offloaded)
		delete(o.byHash, old.hash)
	}
	o.byHash[hash] = o.lru.PushBack(&offloaded{hash: hash, word: word})
}

// drop forgets every block host memory holds.
func (o *kvOffload) drop() {
	clear(o.byHash)
	o.lru.Init()
}

// offloadBlocks keeps in host memory the blocks of r's table that are
// full, written and cached, as r gives them back.
func (s *Scheduler) offloadBlocks(r *Request) {
	bs := int32(s.cfg.BlockSize)
	for _, id := range r.table {
		if b := &s.pool.blocks[id]; b.hashed && b.filled == bs {
			s.offload.put(b.hash, b.word)
		}
	}
}

// startLoad starts the load of r's blocks after its GPU hits that host
// memory holds, if there are any and room for its whole sequence; it
// reports whether it started one, and false with room short so that r
// waits (admit's failure). r stays in the waiting queue, skipped until
// the load lands (CompleteLoad).
func (s *Scheduler) startLoad(r *Request, hits []int32) (started, room bool) {
	salt := r.cacheSalt()
	first := len(hits)
	var words []uint64
	for _, h := range r.hashes[first : (r.NumTokens()-1)/s.cfg.BlockSize] {
		e, ok := s.offload.byHash[h^salt]
		if !ok {
			break
		}
		words = append(words, e.Value.(*offloaded).word)
	}
	if len(words) == 0 {
		return false, true
	}
	need := s.cfg.BlocksFor(min(r.NumTokens(), s.cfg.MaxModelLen)) - first
	evictable := 0
	for _, id := range hits {
		if s.pool.blocks[id].ref == 0 {
			evictable++
		}
	}
	if need+evictable > s.pool.numFree {
		return false, false
	}
	ld := &kvLoad{r: r, start: first, words: words, hashes: make([]uint64, len(words))}
	for j := range words {
		h := r.hashes[first+j] ^ salt
		ld.hashes[j] = h
		s.offload.lru.MoveToBack(s.offload.byHash[h]) // a load is a use
	}
	for _, id := range hits {
		s.pool.touch(id, r.Incarnation)
		r.table = append(r.table, id)
	}
	r.cachedBlocks = first
	s.allocate(r, need, first*s.cfg.BlockSize) // caches nothing past the hits
	r.kvLoad = kvLoading
	s.offload.loads[r.InternalID] = ld
	return true, true
}

// waitingHoldBlocks reports whether blocks are held but by running
// requests: by a load in flight, or by a waiting request whose KV landed.
// Then a request that cannot be admitted now may be later: the load gives
// its blocks back, or its request runs and ends.
func (s *Scheduler) waitingHoldBlocks() bool {
	if s.offload == nil {
		return false
	}
	return len(s.offload.loads) > 0 || slices.ContainsFunc(s.waiting, func(r *Request) bool { return r.kvLoad == kvLoaded })
}

// LoadsInFlight returns how many loads have not landed, their requests
// live or ended.
func (s *Scheduler) LoadsInFlight() int {
	if s.offload == nil {
		return 0
	}
	return len(s.offload.loads)
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
	r, n = ld.r, len(ld.words)
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
	for j, h := range ld.hashes {
		s.pool.cache(r.table[ld.start+j], h)
	}
	r.cachedBlocks = ld.start + n
	r.NumComputed = r.cachedBlocks * s.cfg.BlockSize
	r.kvLoad = kvLoaded
	return r, LoadLanded, n
}

// landLoad writes a load's words into the blocks of table it copies into:
// whoever holds them now. A block another request holds makes every
// holder read all its blocks again (kvEpoch), as an overwrite does.
func (s *Scheduler) landLoad(ld *kvLoad, table []int32) {
	bs := int32(s.cfg.BlockSize)
	for j, w := range ld.words {
		b := &s.pool.blocks[table[ld.start+j]]
		if ld.freed && b.ref > 0 {
			s.kvEpoch++
		}
		b.word, b.filled = w, bs
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

// abandonLoads marks every load in flight abandoned, for a reset of the
// prefix cache that may preempt: what the copies bring is of the weights
// before it, and their requests compute again once they landed. It
// returns how many blocks the loads hold until then, each once: the
// sequences of a request share their prompt's hits.
func (s *Scheduler) abandonLoads() int {
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
	slices.Sort(held)
	return len(slices.Compact(held))
}

// DropLoads gives back the blocks of every load in flight, whose copies
// will never land: the executor stops. Their requests have ended.
func (s *Scheduler) DropLoads() {
	if s.offload == nil {
		return
	}
	for _, id := range sortedLoadIDs(s.offload.loads) {
		s.releaseEnded(s.offload.loads[id])
	}
	clear(s.offload.loads)
}

// releaseEnded gives back the blocks an ended request's load held, unless
// core/kv-load-frees-on-abort gave them back at the abort.
func (s *Scheduler) releaseEnded(ld *kvLoad) {
	if !ld.freed {
		s.pool.freeAll(ld.blocks)
	}
}

// endedLoads returns how many loads in flight belong to requests that
// have ended: they hold their blocks until they land.
func (s *Scheduler) endedLoads() int {
	n := 0
	for _, ld := range s.offload.loads {
		if ld.aborted {
			n++
		}
	}
	return n
}

// sortedLoadIDs returns the ids of loads in order, so that what depends on
// the order (the free queue) does not depend on the map's.
func sortedLoadIDs(loads map[string]*kvLoad) []string {
	ids := make([]string, 0, len(loads))
	for id := range loads {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
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

// coreKV is the core's side of KV offloading: the loads in flight, in
// order of start, each landing at the first step boundary from its due
// time on, and whether the core waits for one.
type coreKV struct {
	loads []pendingLoad
	// stalled: the last step scheduled nothing while nothing ran and a
	// load was in flight; the core waits for an input or the load.
	stalled bool
}

// pendingLoad is a KV load in flight: its request's internal id, and when
// the copy is done.
type pendingLoad struct {
	id  string
	due time.Time
}

// startLoads starts the copies of the loads a step started. A copy of n
// blocks takes (2+n)/2 steps' time (Config.StepTime), the copies one
// after another, as they share the link to host memory.
func (c *EngineCore) startLoads(rs []*Request) {
	at := c.rt.Now()
	if n := len(c.kv.loads); n > 0 && c.kv.loads[n-1].due.After(at) {
		at = c.kv.loads[n-1].due
	}
	for _, r := range rs {
		n := len(c.sched.offload.loads[r.InternalID].words)
		at = at.Add(c.cfg.StepTime * time.Duration(2+n) / 2)
		c.kv.loads = append(c.kv.loads, pendingLoad{id: r.InternalID, due: at})
		c.emit(Event{Kind: EventKVLoad, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: n})
	}
	c.syncHeld()
}

// landLoads lands the loads that are due, as vLLM's scheduler learns of
// them at a step's end (finished_recving).
func (c *EngineCore) landLoads() {
	now := c.rt.Now()
	landed := 0
	for landed < len(c.kv.loads) && !c.kv.loads[landed].due.After(now) {
		r, how, n := c.sched.CompleteLoad(c.kv.loads[landed].id)
		if r != nil {
			ev := Event{Kind: EventKVLoaded, RequestID: r.ExternalID, InternalID: r.InternalID, Incarnation: r.Incarnation, Index: r.Index, Held: n, Finished: how == LoadEnded}
			if how == LoadAbandoned {
				ev.Text = "abandoned"
			}
			c.emit(ev)
		}
		landed++
	}
	if landed == 0 {
		return
	}
	c.kv.loads = slices.Delete(c.kv.loads, 0, landed)
	c.kv.stalled = false
	c.syncHeld()
}

// waitInput takes the next input, waiting for one; with KV loads in
// flight it waits only until the first is due, and then reports due.
func (c *EngineCore) waitInput() (in Input, ok, due bool) {
	if c.kv == nil || len(c.kv.loads) == 0 {
		in, ok = c.in.Get()
		return in, ok, false
	}
	wait := c.kv.loads[0].due.Sub(c.rt.Now())
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
