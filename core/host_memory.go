package core

import (
	"container/list"
	"math"
	"strconv"
)

// KVOffloadPolicy is how host memory chooses the blocks it puts out to
// make room for a store, the cache policy of vLLM's CPU offloading
// manager (kv_connector_extra_config's "eviction_policy").
type KVOffloadPolicy uint8

const (
	// OffloadLRU puts out the least recently used block first: vLLM's
	// "lru", the default and the zero value.
	OffloadLRU KVOffloadPolicy = iota
	// OffloadARC is vLLM's "arc", an adaptive replacement cache: the
	// blocks stored and not used since (T1) apart from those used again
	// (T2), each least recently used first, and ghost lists of the hashes
	// put out of each (B1, B2), as long as host memory at most. Room is
	// made in T1 while it holds at least its target size, else in T2. A
	// use of a block of T1 moves it to T2 (one still on its way stays in
	// T1), and a use of a ghost moves the target: up for one of B1, down
	// for one of B2, by the other list's length over its own, at least 1.
	OffloadARC
)

// KVLoadFailurePolicy is what the scheduler does with a request whose
// load from host memory failed, vLLM's kv_load_failure_policy.
type KVLoadFailurePolicy uint8

const (
	// LoadFailureFail ends the request with an error: vLLM's "fail", its
	// default and the zero value.
	LoadFailureFail KVLoadFailurePolicy = iota
	// LoadFailureRecompute keeps the blocks that loaded before the first
	// that failed and computes the rest again: vLLM's "recompute".
	LoadFailureRecompute
)

// String returns the policy's name as vLLM's kv_load_failure_policy takes
// it.
func (p KVLoadFailurePolicy) String() string {
	switch p {
	case LoadFailureFail:
		return "fail"
	case LoadFailureRecompute:
		return "recompute"
	}
	return "KVLoadFailurePolicy(" + strconv.Itoa(int(p)) + ")"
}

// String returns the policy's name as vLLM's eviction_policy takes it.
func (p KVOffloadPolicy) String() string {
	switch p {
	case OffloadLRU:
		return "lru"
	case OffloadARC:
		return "arc"
	}
	return "KVOffloadPolicy(" + strconv.Itoa(int(p)) + ")"
}

// KVOffloadStats are host memory's counts since the start and its
// gauges, as vLLM's offloading connector and CPU offloading manager
// report them.
//
// Queries and Hits are vLLM's connector_prefix_cache_stats, in tokens:
// each time a waiting request is admitted or starts to load, the tokens
// the GPU's prefix cache did not give it go to the queries and those of
// them host memory gave it to the hits, as vLLM's scheduler records them
// once the request's blocks are allocated — a request host memory has
// nothing for counts too, a request that waits for room does not, and
// one whose KV landed is not counted again. A preempted request's are
// counted apart, as the prefix cache's (SchedulerStats).
type KVOffloadStats struct {
	Queries, Hits                   int64
	PreemptedQueries, PreemptedHits int64
	// StoredBlocks and LoadedBlocks are the blocks copies took into host
	// memory and back as they landed, whatever became of their requests
	// (vLLM's transfer counts, GPU_to_CPU and CPU_to_GPU).
	StoredBlocks, LoadedBlocks int64
	// Evicted are the blocks put out to make room for a store (vLLM's
	// block evictions, by policy); a reset that forgets host memory puts
	// out none.
	Evicted int64
	// StoreFailures are the times a step's blocks found no room, each a
	// prepare_store that could not make it (vLLM's allocation failures):
	// a request whose blocks wait several steps counts at each.
	StoreFailures int64
	// StoresSkipped are the blocks a store passed over because lookups
	// had seen them fewer times than Config.KVOffloadStoreThreshold
	// (vLLM's stores_skipped): a step's blocks that found no room and
	// are passed to the next step count again there.
	StoresSkipped int64
	// FailedLoads are the loads that landed with a block the connector
	// reported invalid (core/kv-load-fails), each a request vLLM's
	// scheduler ended with an error or rescheduled to compute again
	// (Config.KVLoadFailurePolicy).
	FailedLoads int64
	// Blocks is what host memory holds or has on its way now, of
	// Capacity (Config.KVOffloadBlocks), under Policy.
	Blocks, Capacity int
	Policy           KVOffloadPolicy
}

// Add adds o's counts and gauges to s's, as a dashboard sums the series
// of several cores; the policy is o's.
func (s *KVOffloadStats) Add(o KVOffloadStats) {
	s.Queries += o.Queries
	s.Hits += o.Hits
	s.PreemptedQueries += o.PreemptedQueries
	s.PreemptedHits += o.PreemptedHits
	s.StoredBlocks += o.StoredBlocks
	s.LoadedBlocks += o.LoadedBlocks
	s.Evicted += o.Evicted
	s.StoreFailures += o.StoreFailures
	s.StoresSkipped += o.StoresSkipped
	s.FailedLoads += o.FailedLoads
	s.Blocks += o.Blocks
	s.Capacity += o.Capacity
	s.Policy = o.Policy
}

// stats returns host memory's counts and gauges.
func (o *kvOffload) stats() KVOffloadStats {
	st := o.counts
	st.Blocks, st.Capacity, st.Policy = o.held(), o.capacity, o.policy
	return st
}

// recordLookup counts a lookup of r, admitted or loading, whose prefix
// the GPU's cache gave local tokens and host memory external: vLLM's
// connector_prefix_cache_stats.record, which skips a lookup with nothing
// past the GPU's hits.
func (o *kvOffload) recordLookup(r *Request, local, external int) {
	q := int64(r.NumTokens() - local)
	switch {
	case q == 0:
	case r.Preemptions > 0:
		o.counts.PreemptedQueries += q
		o.counts.PreemptedHits += int64(external)
	default:
		o.counts.Queries += q
		o.counts.Hits += int64(external)
	}
}

// ghostList is an ARC ghost list: hashes of blocks put out, oldest first.
type ghostList struct {
	order list.List // of uint64
	at    map[uint64]*list.Element
}

func (g *ghostList) len() int { return g.order.Len() }

// add puts h at the back, dropping the oldest beyond capacity.
func (g *ghostList) add(h uint64, capacity int) {
	if g.at == nil {
		g.at = map[uint64]*list.Element{}
	}
	g.at[h] = g.order.PushBack(h)
	for g.order.Len() > capacity {
		delete(g.at, g.order.Remove(g.order.Front()).(uint64))
	}
}

// use moves h to the back and reports whether the list has it.
func (g *ghostList) use(h uint64) bool {
	e, ok := g.at[h]
	if ok {
		g.order.MoveToBack(e)
	}
	return ok
}

func (g *ghostList) remove(h uint64) {
	if e, ok := g.at[h]; ok {
		g.order.Remove(e)
		delete(g.at, h)
	}
}

func (g *ghostList) clear() {
	g.order.Init()
	clear(g.at)
}

// reuseTracker counts the lookups that saw each block, by its salted
// hash, to store only the blocks seen often enough: vLLM's
// FilterReusedOffloadingManager (kv_connector_extra_config's
// "store_threshold" and "max_tracker_size"). A lookup of a waiting
// request sees every full block past its GPU hits, held by host memory
// or not; a store passes over the blocks seen fewer than threshold
// times, which host memory then neither holds for the request nor makes
// room for. The counts are of at most size hashes, the least recently
// seen forgotten first; a reset of host memory keeps them, as vLLM's
// filter has no reset of its own: they count token sequences, not KV.
type reuseTracker struct {
	threshold int32
	size      int
	order     list.List                // of *sighting, least recently seen first
	seen      map[uint64]*list.Element // hash → its entry in order
}

// sighting is how many lookups saw the block of hash.
type sighting struct {
	hash uint64
	n    int32
}

// newReuseTracker returns the tracker for Config's threshold and size,
// nil when the threshold stores every block (below 2, as vLLM's).
func newReuseTracker(threshold, size int) *reuseTracker {
	if threshold < 2 {
		return nil
	}
	if size == 0 {
		size = DefaultKVOffloadTrackerSize
	}
	return &reuseTracker{threshold: int32(min(threshold, math.MaxInt32)), size: size, seen: map[uint64]*list.Element{}}
}

// record counts a lookup that saw the blocks of hashes, each salted.
func (t *reuseTracker) record(hashes []uint64, salt uint64) {
	for _, h := range hashes {
		h ^= salt
		if e, ok := t.seen[h]; ok {
			t.order.MoveToBack(e)
			if c := e.Value.(*sighting); c.n < math.MaxInt32 {
				c.n++
			}
			continue
		}
		if t.order.Len() >= t.size {
			delete(t.seen, t.order.Remove(t.order.Front()).(*sighting).hash)
		}
		t.seen[h] = t.order.PushBack(&sighting{hash: h, n: 1})
	}
}

// count returns how many lookups saw the block of hash, of those it
// still counts.
func (t *reuseTracker) count(hash uint64) int32 {
	if e, ok := t.seen[hash]; ok {
		return e.Value.(*sighting).n
	}
	return 0
}

// eligible reports whether a store may copy the block of hash: lookups
// saw it often enough, or nothing filters the stores (t nil).
func (t *reuseTracker) eligible(hash uint64) bool {
	return t == nil || t.count(hash) >= t.threshold
}

// held returns how many blocks host memory holds or has on their way.
func (o *kvOffload) held() int { return o.lru.Len() + o.t2.Len() }

// listOf returns the list that holds b.
func (o *kvOffload) listOf(b *offloaded) *list.List {
	if b.t2 {
		return &o.t2
	}
	return &o.lru
}

// reserve takes a slot for a block a store copies in, pending until it
// lands, in room makeRoom made: a slot never taken since the last drop
// first, then the last put out (vLLM's allocation). It returns the
// block's entry.
func (o *kvOffload) reserve(hash uint64) *list.Element {
	var slot int32
	if int(o.taken) < o.capacity {
		slot = o.taken
		o.taken++
		if int(slot) == len(o.words) {
			o.words = append(o.words, 0)
		}
	} else {
		n := len(o.free)
		slot, o.free = o.free[n-1], o.free[:n-1]
	}
	e := o.lru.PushBack(&offloaded{hash: hash, slot: slot, pending: true})
	o.byHash[hash] = e
	if o.policy == OffloadARC {
		o.ghosts[0].remove(hash)
		o.ghosts[1].remove(hash)
	}
	return e
}

// remove puts e out of host memory, its slot free for the next block:
// a store a reset abandoned keeps nothing (vLLM's failed complete_store).
func (o *kvOffload) remove(e *list.Element) *offloaded {
	b := e.Value.(*offloaded)
	o.listOf(b).Remove(e)
	delete(o.byHash, b.hash)
	o.free = append(o.free, b.slot)
	return b
}

// forgetFailed forgets b, a block whose load failed, as vLLM's tiers
// mark their lookup verdict for it a miss (its #49328, for its #49176):
// the next lookup, its request's again or another's, does not find it
// and computes it, rather than load it and fail again, for ever if the
// failure lasts. A block a reset dropped, or the store of a block of the
// same hash that took its place, stays; so does b while something pins it.
func (o *kvOffload) forgetFailed(b *offloaded) {
	if e := o.byHash[b.hash]; e != nil && e.Value.(*offloaded) == b && !b.pinned() {
		o.remove(e)
	}
}

// evict puts e out to make room; under ARC its hash joins the ghost list
// of the list it left.
func (o *kvOffload) evict(e *list.Element) {
	o.counts.Evicted++
	if b := o.remove(e); o.policy == OffloadARC {
		g := &o.ghosts[0]
		if b.t2 {
			g = &o.ghosts[1]
		}
		g.add(b.hash, o.capacity)
	}
}

// touch makes a use of the blocks host memory holds, or has on their
// way, under hashes, each salted: vLLM's touch, which goes from the last
// to the first, so that the first is the most recent and the last put
// out first. Under ARC a use of a ghost moves T1's target.
func (o *kvOffload) touch(hashes []uint64, salt uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i] ^ salt
		e := o.byHash[h]
		switch {
		case e == nil:
			if o.policy == OffloadARC {
				o.ghostUse(h)
			}
		case o.policy != OffloadARC:
			o.lru.MoveToBack(e)
		default:
			switch b := e.Value.(*offloaded); {
			case b.t2:
				o.t2.MoveToBack(e)
			case b.pending: // just stored: not a second use
				o.lru.MoveToBack(e)
			default:
				o.lru.Remove(e)
				b.t2 = true
				o.byHash[h] = o.t2.PushBack(b)
			}
		}
	}
}

// ghostUse is ARC's use of a block it put out: one of B1 says T1 should
// have been larger, one of B2 smaller.
func (o *kvOffload) ghostUse(h uint64) {
	b1, b2 := &o.ghosts[0], &o.ghosts[1]
	switch {
	case b1.use(h):
		o.target = min(o.target+max(1, float64(b2.len())/float64(b1.len())), float64(o.capacity))
	case b2.use(h):
		o.target = max(o.target-max(1, float64(b1.len())/float64(b2.len())), 0)
	}
}

// What victims may put out: a block neither pinned nor protected, or,
// under core/kv-evict-while-loading, one a load reads as well.
const (
	keepPinned uint8 = iota
	keepPending
)

func evictable(b *offloaded, keep uint8) bool {
	if keep == keepPinned {
		return !b.pinned()
	}
	return !b.pending && !b.protected
}

// victims chooses into o.victim the n blocks the policy would put out, in
// its order, those evictable under keep, as vLLM's evict chooses before
// it puts out any; it reports false, o unchanged, when there are not n.
func (o *kvOffload) victims(n int, keep uint8) bool {
	o.victim = o.victim[:0]
	t1 := o.lru.Len() // T1's size once the blocks chosen from it are out
	e1, e2 := o.lru.Front(), o.t2.Front()
	for len(o.victim) < n {
		var v *list.Element
		if o.policy != OffloadARC || t1 >= int(o.target) {
			for e1 != nil && !evictable(e1.Value.(*offloaded), keep) {
				e1 = e1.Next()
			}
			if e1 != nil {
				v, e1 = e1, e1.Next()
				t1--
			}
		}
		if v == nil {
			for e2 != nil && !evictable(e2.Value.(*offloaded), keep) {
				e2 = e2.Next()
			}
			if e2 == nil {
				return false
			}
			v, e2 = e2, e2.Next()
		}
		o.victim = append(o.victim, v)
	}
	return true
}

// roomFor reports whether host memory has, or can make, room for n more
// blocks. Without room, loads reports whether there would be but for the
// blocks loads in flight read.
func (o *kvOffload) roomFor(n int) (ok, loads bool) {
	need := n - (o.capacity - o.held())
	if need <= 0 || o.victims(need, keepPinned) {
		return true, true
	}
	return false, o.victims(need, keepPending)
}

// makeRoom puts out what room for n more blocks needs, which roomFor
// found, or, evictRead, found but for the loads.
func (o *kvOffload) makeRoom(n int, evictRead bool) {
	need := n - (o.capacity - o.held())
	if need <= 0 {
		return
	}
	keep := keepPinned
	if evictRead {
		keep = keepPending
	}
	if !o.victims(need, keep) {
		panic("core: host memory has no room for " + strconv.Itoa(n) + " block(s), which it found")
	}
	for _, e := range o.victim {
		o.evict(e)
	}
}

// protect marks the blocks of r's table [from, to) host memory holds as
// kept from being put out, or, on false, no longer: vLLM's prepare_store
// keeps the blocks of a store that are stored already, of those passed
// to it: with a store threshold, those lookups saw often enough.
func (s *Scheduler) protect(r *Request, from, to int, on bool) {
	for _, id := range r.table[from:to] {
		if b := &s.pool.blocks[id]; b.hashed && s.offload.reuse.eligible(b.hash) {
			if e := s.offload.byHash[b.hash]; e != nil {
				e.Value.(*offloaded).protected = on
			}
		}
	}
}

// word returns the KV b's slot holds now.
func (o *kvOffload) word(b *offloaded) uint64 { return o.words[b.slot] }

// lacks reports whether a store would copy b: it is cached, lookups saw
// it often enough (a store threshold's), and host memory neither holds
// its KV nor has it on its way.
func (o *kvOffload) lacks(b *kvBlock) bool {
	return b.hashed && o.reuse.eligible(b.hash) && o.byHash[b.hash] == nil
}

// lookup returns the block host memory holds or has on its way under
// hash: a pending one is a store's copy in flight.
func (o *kvOffload) lookup(hash uint64) (*offloaded, bool) {
	e, ok := o.byHash[hash]
	if !ok {
		return nil, false
	}
	return e.Value.(*offloaded), true
}

// drop forgets every block host memory holds, every slot free, and ARC's
// ghosts and target (vLLM's reset_cache); what the slots hold stays
// until a store overwrites it, as a load a reset abandoned may still
// read it.
func (o *kvOffload) drop() {
	clear(o.byHash)
	o.lru.Init()
	o.t2.Init()
	o.ghosts[0].clear()
	o.ghosts[1].clear()
	o.target = 0
	o.free = o.free[:0]
	o.taken = 0
}
