package core

import (
	"fmt"
	"slices"
)

// FreeQueue returns the pool's free queue, head first.
func (s *Scheduler) FreeQueue() []int32 { return s.pool.order() }

// BlockHash reports the hash of a cached block.
func (s *Scheduler) BlockHash(id int32) (uint64, bool) {
	b := s.pool.blocks[id]
	return b.hash, b.hashed
}

// BlockRef returns a block's reference count.
func (s *Scheduler) BlockRef(id int32) int { return int(s.pool.blocks[id].ref) }

// Discard returns the outputs of steps in flight the request will drop.
func (r *Request) Discard() int { return r.discard }

// BlockHashes returns a request's block hashes.
func (r *Request) BlockHashes() []uint64 { return r.hashes }

// NewBlockPool returns a bare pool for tests of its order.
func NewBlockPool(cfg Config) *BlockPool {
	p := newBlockPool(cfg, nil)
	return &BlockPool{p: &p}
}

// BlockPool wraps the pool for tests.
type BlockPool struct{ p *blockPool }

func (b *BlockPool) Pop() int32                    { return b.p.pop(0) }
func (b *BlockPool) Free(id int32)                 { b.p.free(id) }
func (b *BlockPool) Touch(id int32)                { b.p.touch(id, 0) }
func (b *BlockPool) Cache(id int32, h uint64)      { b.p.cache(id, h) }
func (b *BlockPool) Lookup(h uint64) (int32, bool) { return b.p.lookup(h) }
func (b *BlockPool) Order() []int32                { return b.p.order() }
func (b *BlockPool) NumFree() int                  { return b.p.numFree }
func (b *BlockPool) Len() int                      { return len(b.p.blocks) }

// DebugState describes the queues, for a failing test's message.
func (s *Scheduler) DebugState() string {
	out := fmt.Sprintf("free %d; loads %d; requests and ended loads %d\n", s.pool.numFree, s.TransfersInFlight(), s.NumRequests())
	for _, r := range s.running {
		out += fmt.Sprintf("  running %s computed %d/%d table %d load %d\n", r.InternalID, r.NumComputed, r.NumTokens(), len(r.table), r.kvLoad)
	}
	for _, r := range s.waiting {
		out += fmt.Sprintf("  waiting %s computed %d/%d table %d load %d status %s\n", r.InternalID, r.NumComputed, r.NumTokens(), len(r.table), r.kvLoad, r.Status)
	}
	return out
}

// StoreFlushed reports whether the store of the request of internal id is
// a preempted request's, whose copies hold no blocks and which the output
// of the step that preempted it completes.
func (s *Scheduler) StoreFlushed(id string) bool {
	st, ok := s.offload.stores[id]
	return ok && st.flushed
}

// StoreCopyInFlight reports whether copy job of the store of internal id
// has not landed: a preemption lands its request's copies at once.
func (s *Scheduler) StoreCopyInFlight(id string, job uint64) bool {
	st, ok := s.offload.stores[id]
	return ok && slices.ContainsFunc(st.jobs, func(j StoreJob) bool { return j.Job == job })
}
