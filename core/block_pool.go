package core

import (
	"slices"

	"github.com/llmdst/llmdst/failpoints"
)

// blockNone is "no block" in the pool's links; block 0 is the null block,
// which is never in a list, so 0 can mean none.
const blockNone int32 = 0

// kvBlock is one KV block: vLLM's KVCacheBlock (reference count, hash, free
// queue links) and, for the model, what the forward pass wrote in it.
type kvBlock struct {
	ref        int32 // requests that hold it
	prev, next int32 // its neighbours in the freed list, while it is free
	dup        int32 // the next cached block with the same hash, in order of caching
	// filled is the slots written, from the first, and word the digest
	// of the sequence up to the last of them, as the writer computed it
	// from what it read (kv.go).
	filled int32
	hashed bool // it is in the cache under hash
	hash   uint64
	word   uint64
	// taker is the incarnation of the last request that took the block
	// (pop, touch), for the message of a leak (CheckBlocks): never read
	// otherwise.
	taker uint64
}

// blocksRoom is the room for blocks a scheduler starts with, in the
// scheduler itself: a simulated run hands out a few dozen, and a fresh
// engine per seed must not pay an allocation for each doubling. 31, not
// 32, keeps the scheduler within the allocator's 2,304-byte size class
// (the benchmarked scenarios never take a 32nd block).
const blocksRoom = 31

// blockPool is vLLM's BlockPool: the cache's NumBlocks blocks, of which
// block 0 is the null block and never handed out, a free queue in vLLM's
// order, reference counts and, with prefix caching, the map from a full
// block's hash to the cached blocks. One code path serves both modes:
// caching only adds the hashes.
//
// vLLM's free queue starts as every block in order of id, hands out from
// its head and takes freed blocks at its tail, so the ids never handed out
// are always ahead of every freed block. The pool keeps them as a counter
// (fresh) and the freed blocks as an intrusive doubly-linked list in
// blocks, which grows only as ids are handed out: a pool costs nothing in
// proportion to NumBlocks until its blocks are used.
type blockPool struct {
	numBlocks int32 // the cache, the null block included
	caching   bool
	faults    *failpoints.Set

	blocks     []kvBlock // by id, up to the highest id handed out; blocks[0] is the null block
	fresh      int32     // the next id never handed out; ids from it to numBlocks are the queue's head
	head, tail int32     // the freed list, in queue order after the never-used ids
	numFree    int       // the free queue's length: never-used and freed blocks

	cached map[uint64]int32 // hash → the first cached block with it; nil until a block is cached
}

// newBlockPool returns a pool whose blocks start in room.
func newBlockPool(cfg Config, room []kvBlock) blockPool {
	p := blockPool{numBlocks: int32(cfg.NumBlocks), caching: cfg.EnablePrefixCaching, faults: cfg.Faults,
		fresh: 1, numFree: cfg.UsableBlocks()}
	p.blocks = append(room[:0], kvBlock{}) // the null block
	return p
}

// pop hands out the block at the head of the free queue to incarnation
// taker, evicting its hash if it has one; the caller has checked that one
// is free.
func (p *blockPool) pop(taker uint64) int32 {
	var id int32
	if p.fresh < p.numBlocks {
		id = p.fresh
		p.fresh++
		p.blocks = append(p.blocks, kvBlock{})
	} else {
		id = p.head
		if id == blockNone {
			panic("core: block pool: no free block to hand out")
		}
		p.unlink(id)
		if p.blocks[id].hashed {
			p.evict(id)
		}
	}
	p.numFree--
	p.blocks[id].ref++
	p.blocks[id].taker = taker
	return id
}

// evict drops a free cached block's hash as the block is handed out for
// new content: vLLM's _maybe_evict_cached_block. Armed, the failpoint
// core/kv-keep-evicted-hash leaves the map's entry behind, so that a later
// lookup hits a block whose content was overwritten.
func (p *blockPool) evict(id int32) {
	if p.faults.Fires(failpoints.CoreKVKeepEvictedHash) {
		b := &p.blocks[id]
		b.hashed, b.dup = false, blockNone
		return
	}
	p.uncache(id)
}

// uncache takes a cached block out of the cache: out of its hash's chain
// of blocks, and the hash off the block.
func (p *blockPool) uncache(id int32) {
	b := &p.blocks[id]
	b.hashed = false
	next := b.dup
	b.dup = blockNone
	first, ok := p.cached[b.hash]
	switch {
	case !ok:
	case first == id && next == blockNone:
		delete(p.cached, b.hash)
	case first == id:
		p.cached[b.hash] = next
	default:
		for c := first; c != blockNone; c = p.blocks[c].dup {
			if p.blocks[c].dup == id {
				p.blocks[c].dup = next
				break
			}
		}
	}
}

// free drops a reference to id; a block no request holds goes to the tail
// of the free queue, keeping its hash until it is handed out again.
func (p *blockPool) free(id int32) {
	b := &p.blocks[id]
	b.ref--
	if b.ref > 0 {
		return
	}
	b.prev, b.next = p.tail, blockNone
	if p.tail == blockNone {
		p.head = id
	} else {
		p.blocks[p.tail].next = id
	}
	p.tail = id
	p.numFree++
}

// freeAll drops a reference to each block of a table, the last first, as
// vLLM frees a request's blocks in reverse so that its tail, the least
// likely to be shared, is evicted first.
func (p *blockPool) freeAll(table []int32) {
	for _, id := range slices.Backward(table) {
		p.free(id)
	}
}

// touch takes a reference to a cached block that incarnation taker hits,
// taking it out of the free queue if no request held it.
func (p *blockPool) touch(id int32, taker uint64) {
	b := &p.blocks[id]
	if b.ref == 0 {
		p.unlink(id)
		p.numFree--
	}
	b.ref++
	b.taker = taker
}

// unlink takes id out of the freed list.
func (p *blockPool) unlink(id int32) {
	b := &p.blocks[id]
	if b.prev == blockNone {
		p.head = b.next
	} else {
		p.blocks[b.prev].next = b.next
	}
	if b.next == blockNone {
		p.tail = b.prev
	} else {
		p.blocks[b.next].prev = b.prev
	}
	b.prev, b.next = blockNone, blockNone
}

// cache puts a full block in the cache under hash. A block of the same hash
// may be cached already (two requests filled the same prefix apart): as
// vLLM does not deduplicate, both are kept, and a lookup finds the first.
func (p *blockPool) cache(id int32, hash uint64) {
	b := &p.blocks[id]
	b.hashed, b.hash, b.dup = true, hash, blockNone
	if p.cached == nil {
		p.cached = make(map[uint64]int32)
	}
	first, ok := p.cached[hash]
	if !ok {
		p.cached[hash] = id
		return
	}
	c := first
	for c != id && p.blocks[c].dup != blockNone {
		c = p.blocks[c].dup
	}
	if c != id { // a hash left behind by a planted bug can name id already
		p.blocks[c].dup = id
	}
}

// lookup returns the first cached block with hash.
func (p *blockPool) lookup(hash uint64) (int32, bool) {
	id, ok := p.cached[hash]
	return id, ok
}

// order returns the free queue from head to tail, for tests.
func (p *blockPool) order() []int32 {
	var q []int32
	for id := p.fresh; id < p.numBlocks; id++ {
		q = append(q, id)
	}
	for id := p.head; id != blockNone; id = p.blocks[id].next {
		q = append(q, id)
	}
	return q
}

// resetCache drops every hash, as vLLM's reset_prefix_cache does once no
// request holds a block: the blocks stay where they are in the free queue,
// their content unfound.
func (p *blockPool) resetCache() {
	for i := range p.blocks {
		b := &p.blocks[i]
		b.hashed, b.dup = false, blockNone
	}
	clear(p.cached)
}
