package core

import (
	"fmt"
	"slices"
)

// CheckBlocks checks the block pool against the requests' block tables;
// see checkBlocks.
func (s *Scheduler) CheckBlocks() error { return s.checkBlocks() }

// FreeQueue returns the pool's free queue, head first.
func (s *Scheduler) FreeQueue() []int32 { return s.pool.order() }

// BlockHash reports the hash of a cached block.
func (s *Scheduler) BlockHash(id int32) (uint64, bool) {
	b := s.pool.blocks[id]
	return b.hash, b.hashed
}

// BlockRef returns a block's reference count.
func (s *Scheduler) BlockRef(id int32) int { return int(s.pool.blocks[id].ref) }

// BlockHashes returns a request's block hashes.
func (r *Request) BlockHashes() []uint64 { return r.hashes }

// NewBlockPool returns a bare pool for tests of its order.
func NewBlockPool(cfg Config) *BlockPool {
	p := newBlockPool(cfg, nil)
	return &BlockPool{p: &p}
}

// BlockPool wraps the pool for tests.
type BlockPool struct{ p *blockPool }

func (b *BlockPool) Pop() int32                    { return b.p.pop() }
func (b *BlockPool) Free(id int32)                 { b.p.free(id) }
func (b *BlockPool) Touch(id int32)                { b.p.touch(id) }
func (b *BlockPool) Cache(id int32, h uint64)      { b.p.cache(id, h) }
func (b *BlockPool) Lookup(h uint64) (int32, bool) { return b.p.lookup(h) }
func (b *BlockPool) Order() []int32                { return b.p.order() }
func (b *BlockPool) NumFree() int                  { return b.p.numFree }
func (b *BlockPool) Len() int                      { return len(b.p.blocks) }

// checkBlocks checks the invariants of the block pool: every block's
// reference count is the number of live requests' tables that hold it;
// the free queue holds exactly the blocks no request holds, each once,
// its links consistent, and numFree counts it; the null block is never
// held or free; a cached block is in the map under its hash, and the map
// names only cached blocks; each request's table covers its computed
// tokens and its first cachedBlocks blocks are cached under its hashes.
func (s *Scheduler) checkBlocks() error {
	p := &s.pool
	bs := s.cfg.BlockSize
	refs := make([]int32, len(p.blocks))
	live := append(slices.Clone(s.running), s.waiting...)
	for _, r := range live {
		if r.Blocks != len(r.table) {
			return fmt.Errorf("request %s: Blocks %d, table of %d", r.InternalID, r.Blocks, len(r.table))
		}
		if want := s.cfg.BlocksFor(r.NumComputed); len(r.table) != want {
			return fmt.Errorf("request %s (%s): %d blocks for %d computed tokens, want %d", r.InternalID, r.Status, len(r.table), r.NumComputed, want)
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
			if i < r.cachedBlocks && (!p.blocks[id].hashed || p.blocks[id].hash != r.hashes[i]) {
				return fmt.Errorf("request %s: its cached block %d (#%d) is not cached under its hash", r.InternalID, id, i)
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
