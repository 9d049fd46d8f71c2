package core

import (
	"container/list"
	"fmt"
	"slices"
)

// CheckKV reports the first way the core's KV blocks disagree with the
// requests it holds (Scheduler.CheckBlocks), or nil. The blocks are the
// core loop's own: call it before Run or after Run returned.
func (c *EngineCore) CheckKV() error { return c.sched.CheckBlocks() }

// CheckBlocks reports the first way the KV block pool disagrees with the
// requests the scheduler holds, or nil. It checks that every block's
// reference count is the number of live requests' tables that hold it (a
// block held by no request is a leak); the free queue holds exactly the
// blocks no request holds, each once, its links consistent, and numFree
// counts it; the null block is never held or free; a cached block is in
// the map under its hash, and the map names only cached blocks; each
// request's table covers its computed tokens (and, with speculative
// decoding, at most the drafts it rejected past them) and its first cachedBlocks
// blocks are cached under its hashes. With KV offloading, host memory
// holds at most its capacity, each block once under its hash, and each
// block's count of loads reading it is the loads in flight that read it.
// It reads the whole pool: for tests and for the end of a run, not for
// every step of a serving engine.
func (s *Scheduler) CheckBlocks() error {
	p := &s.pool
	bs := s.cfg.BlockSize
	refs := make([]int32, len(p.blocks))
	live := append(slices.Clone(s.running), s.waiting...)
	for _, r := range live {
		if r.Blocks != len(r.table) {
			return fmt.Errorf("request %s: Blocks %d, table of %d", r.InternalID, r.Blocks, len(r.table))
		}
		if r.kvLoad != kvNoLoad {
			// Its KV loads, or landed: it holds the blocks of its whole
			// sequence (offload.go).
			if want := s.cfg.BlocksFor(min(r.NumTokens(), s.cfg.MaxModelLen)); len(r.table) != want {
				return fmt.Errorf("request %s, whose KV loads or landed: %d blocks for a sequence of %d tokens, want %d", r.InternalID, len(r.table), r.NumTokens(), want)
			}
		} else if want := s.cfg.BlocksFor(r.NumComputed); len(r.table) != want {
			// With speculative decoding a request keeps the blocks a step
			// took for the drafts it rejected, as vLLM's does: its next
			// step writes them. With AsyncScheduling a step took blocks
			// for the drafts of the step before it as if kept too.
			k := s.cfg.NumSpeculativeTokens
			if s.cfg.AsyncScheduling {
				k *= 2
			}
			if k == 0 || len(r.table) < want || len(r.table) > s.cfg.BlocksFor(r.NumComputed+k) {
				return fmt.Errorf("request %s (%s): %d blocks for %d computed tokens, want %d", r.InternalID, r.Status, len(r.table), r.NumComputed, want)
			}
		}
		if r.hashed != r.NumTokens() || len(r.hashes) != r.NumTokens()/bs {
			return fmt.Errorf("request %s: %d tokens hashed, %d block hashes, for %d tokens", r.InternalID, r.hashed, len(r.hashes), r.NumTokens())
		}
		if r.cachedBlocks > len(r.table) {
			return fmt.Errorf("request %s: %d cached blocks of %d", r.InternalID, r.cachedBlocks, len(r.table))
		}
		for i, id := range r.table {
			if id <= 0 || int(id) >= len(p.blocks) {
				return fmt.Errorf("request %s holds block %d, outside 1..%d", r.InternalID, id, len(p.blocks)-1)
			}
			refs[id]++
			if i < r.cachedBlocks && (!p.blocks[id].hashed || p.blocks[id].hash != r.hashes[i]^r.cacheSalt()) {
				return fmt.Errorf("request %s: its cached block %d (#%d) is not cached under its hash", r.InternalID, id, i)
			}
		}
	}
	if s.offload != nil {
		if err := s.offload.check(); err != nil {
			return err
		}
		for _, ld := range s.offload.loads {
			if ld.aborted && !ld.freed {
				for _, id := range ld.blocks { // held until the load lands
					refs[id]++
				}
			}
		}
		for _, st := range s.offload.stores {
			for _, id := range st.held() { // until the store lands
				refs[id]++
			}
		}
	}
	if b := p.blocks[0]; b.ref != 0 || b.hashed {
		return fmt.Errorf("the null block is held (%d) or cached (%v)", b.ref, b.hashed)
	}
	inList := make([]bool, len(p.blocks))
	n, prev := 0, blockNone
	for id := p.head; id != blockNone; id = p.blocks[id].next {
		if id <= 0 || int(id) >= len(p.blocks) || inList[id] {
			return fmt.Errorf("free list: block %d out of range or listed twice", id)
		}
		if p.blocks[id].prev != prev {
			return fmt.Errorf("free list: block %d's prev is %d, want %d", id, p.blocks[id].prev, prev)
		}
		inList[id] = true
		prev = id
		n++
	}
	if p.tail != prev {
		return fmt.Errorf("free list: tail %d, last %d", p.tail, prev)
	}
	if int(p.fresh) != len(p.blocks) {
		return fmt.Errorf("%d blocks known, %d handed out", len(p.blocks), p.fresh)
	}
	if want := n + int(p.numBlocks-p.fresh); p.numFree != want {
		return fmt.Errorf("numFree %d, free queue %d", p.numFree, want)
	}
	for id := 1; id < len(p.blocks); id++ {
		b := p.blocks[id]
		if b.ref > 0 && refs[id] == 0 {
			return fmt.Errorf("block %d is held by no request, its reference count %d: a leak (last taken by incarnation %d, #%d in a story)", id, b.ref, b.taker, b.taker)
		}
		if b.ref != refs[id] {
			return fmt.Errorf("block %d: ref %d, held by %d requests", id, b.ref, refs[id])
		}
		if (b.ref == 0) != inList[id] {
			return fmt.Errorf("block %d: ref %d, in the free list %v", id, b.ref, inList[id])
		}
		if b.hashed {
			found := false
			for c, ok := p.cached[b.hash]; ok && c != blockNone; c = p.blocks[c].dup {
				found = found || c == int32(id)
			}
			if !found {
				return fmt.Errorf("block %d is cached but not in the map under its hash", id)
			}
		}
	}
	hashes := make([]uint64, 0, len(p.cached))
	for h := range p.cached {
		hashes = append(hashes, h)
	}
	slices.Sort(hashes)
	for _, h := range hashes {
		for c := p.cached[h]; c != blockNone; c = p.blocks[c].dup {
			if b := p.blocks[c]; !b.hashed || b.hash != h {
				return fmt.Errorf("the map names block %d under a hash it does not have", c)
			}
		}
	}
	return nil
}

// check reports the first way host memory disagrees with itself or with
// the loads in flight, or nil.
func (o *kvOffload) check() error {
	if n := o.held(); n > o.capacity || n != len(o.byHash) || n+len(o.free) != int(o.taken) {
		return fmt.Errorf("host memory: %d blocks listed, %d by hash, %d slots taken and %d of them free, capacity %d", n, len(o.byHash), o.taken, len(o.free), o.capacity)
	}
	if o.policy != OffloadARC && o.t2.Len()+o.ghosts[0].len()+o.ghosts[1].len() > 0 {
		return fmt.Errorf("host memory: %d blocks in T2 and %d ghosts, but the policy is %s", o.t2.Len(), o.ghosts[0].len()+o.ghosts[1].len(), o.policy)
	}
	reads := map[*offloaded]int32{}
	for _, ld := range o.loads {
		for _, b := range ld.reads {
			reads[b]++
		}
	}
	for _, l := range []*list.List{&o.lru, &o.t2} {
		for e := l.Front(); e != nil; e = e.Next() {
			b := e.Value.(*offloaded)
			switch {
			case o.byHash[b.hash] != e:
				return fmt.Errorf("host memory: block %#x is not found by its hash", b.hash)
			case o.listOf(b) != l:
				return fmt.Errorf("host memory: block %#x is listed in the wrong list (T2: %t)", b.hash, b.t2)
			case b.t2 && b.pending:
				return fmt.Errorf("host memory: block %#x is in T2 while a store copies it in", b.hash)
			case b.protected:
				return fmt.Errorf("host memory: block %#x is still protected after its store made room", b.hash)
			case b.reads != reads[b]:
				return fmt.Errorf("host memory: block %#x counts %d loads reading it, %d in flight do", b.hash, b.reads, reads[b])
			}
		}
	}
	for i := range o.ghosts {
		g := &o.ghosts[i]
		if g.len() > o.capacity {
			return fmt.Errorf("host memory: ghost list B%d holds %d hashes, more than the capacity %d", i+1, g.len(), o.capacity)
		}
		for e := g.order.Front(); e != nil; e = e.Next() {
			if h := e.Value.(uint64); o.byHash[h] != nil || g.at[h] != e {
				return fmt.Errorf("host memory: ghost %#x of B%d is held, or not found by its hash", h, i+1)
			}
		}
	}
	if o.target < 0 || o.target > float64(o.capacity) {
		return fmt.Errorf("host memory: ARC's target size of T1 is %g, outside [0, %d]", o.target, o.capacity)
	}
	if t := o.reuse; t != nil && (t.order.Len() > t.size || t.order.Len() != len(t.seen)) {
		return fmt.Errorf("host memory: the store threshold counts %d hashes in its order and %d by hash, of %d at most", t.order.Len(), len(t.seen), t.size)
	}
	if c := o.counts; c.Hits > c.Queries || c.PreemptedHits > c.PreemptedQueries {
		return fmt.Errorf("host memory: %d of %d tokens queried hit, %d of %d of preempted requests'", c.Hits, c.Queries, c.PreemptedHits, c.PreemptedQueries)
	}
	return nil
}
