package core

import "slices"

// The model reads the KV it is given. A real forward pass writes each
// scheduled token's keys and values into the request's blocks, and its
// attention reads them back from whatever blocks the block table names: a
// block-management bug (a block handed out while a request still holds it,
// a cached hash whose block was overwritten) gives the request someone
// else's KV, and a GPU samples garbage from it rather than failing. So
// here: each block holds a word, the digest of the sequence up to its last
// slot written as the writer computed it from what it read, and how many
// slots are written; a request whose blocks do not hold its own sequence
// samples with a key derived from what it read, and the checker sees
// wrong tokens.
//
// Reading every block at every step would cost a request its whole block
// table a token. Instead a request reads every block when it is admitted
// (it may have taken cached blocks it did not write) and whenever a write
// overwrote a block that another request held (kvEpoch counts those); at
// other steps it reads only the slot its new tokens follow, which is as
// good: no block it holds changed since it last read them all.
//
// A reset of the prefix cache is what a trainer calls after it updated the
// weights, so that no request goes on from KV the old weights computed
// (the stale KV of lmdeploy's #4917 and vllm-omni's #6739). The model takes
// a reset that succeeds as that update, and a sleep as the release of the
// KV cache's memory: each word is stamped with the generation of the KV it
// was written in (Scheduler.kvStamp, 0 until the first reset or sleep),
// and a request that reads KV written before one reads garbage. The tokens
// a request samples from its own KV do not depend on the weights, so that
// what the checker expects stays the model's.
//
// A LoRA adapter's weights compute other KV than the base model's: the
// words a request writes and expects are mixed with its adapter's
// (Request.loraSalt, 0 for the base model), and the prefix cache keys its
// blocks with it (Request.cacheSalt), so that a request of one adapter
// never takes another's blocks, as vLLM's block hashes take the adapter
// among their extra keys; one that did would read garbage.

// digestSeed is the digest of the empty sequence: the parent of a
// request's first block, vLLM's NONE_HASH.
const digestSeed uint64 = 0x243f6a8885a308d3

// digestToken chains token t onto d, the digest of the tokens before it.
// A prefix's digest is the prefix cache's hash of the block it ends: it
// stands for every token before it, as vLLM's chained block hashes do.
func digestToken(d uint64, t int) uint64 {
	return splitmix64(d + uint64(t+1)*0x9E3779B97F4A7C15)
}

// digest extends r's block hashes and tail over the tokens it has not yet
// digested: the prompt when it is added, then each sampled token.
func (s *Scheduler) digest(r *Request) {
	bs := s.cfg.BlockSize
	d := r.tail
	next := (len(r.hashes) + 1) * bs // the end of the first block not yet full
	for n := r.NumTokens(); r.hashed < n; {
		d = digestToken(d, r.tokenAt(r.hashed))
		r.hashed++
		if r.hashed == next {
			if len(r.hashes) == cap(r.hashes) {
				r.hashes = slices.Grow(r.hashes, max(1, s.roomFor(r)-len(r.hashes)))
			}
			r.hashes = append(r.hashes, d)
			next += bs
		}
	}
	r.tail = d
}

// digestAt returns the digest of r's tokens up to position q (from 0),
// which must be known or sampled: O(1) at a block's end and at the end of
// the known sequence, else O(BlockSize).
func (s *Scheduler) digestAt(r *Request, q int) uint64 {
	if q < 0 {
		return digestSeed
	}
	if q >= r.hashed-1 { // the known sequence's end, or a token sampled past it
		d := r.tail
		for p := r.hashed; p <= q; p++ {
			d = digestToken(d, r.tokenAt(p))
		}
		return d
	}
	bs := s.cfg.BlockSize
	full := (q + 1) / bs
	if full*bs == q+1 {
		return r.hashes[full-1]
	}
	d := digestSeed
	if full > 0 {
		d = r.hashes[full-1]
	}
	for p := full * bs; p <= q; p++ {
		d = digestToken(d, r.tokenAt(p))
	}
	return d
}

// garbage mixes what a request read into a nonzero digest that is not
// the one it expected.
func garbage(read, want uint64) uint64 {
	return splitmix64(read^want^0xA0761D6478BD642F) | 1
}

// kvWrite is the forward pass's write of r's n scheduled tokens from
// position start: it reads what r's blocks hold before them and writes each
// token's KV, which is right only if what it read was. It leaves in
// r.kvGarbage what went wrong.
func (s *Scheduler) kvWrite(r *Request, start, n int) {
	bs := s.cfg.BlockSize
	end := start + n
	var bad uint64
	if r.kvChecked != s.kvEpoch+1 {
		bad = s.kvReadAll(r, start)
		r.kvChecked = s.kvEpoch + 1
	}
	// What the first new token's KV is computed from: the slot before it.
	read := digestSeed
	if start > 0 {
		i := (start - 1) / bs
		b := &s.pool.blocks[r.table[i]]
		read = b.word
		want := r.kvLast // what r wrote last step, as a decode follows it
		if r.kvLastAt != start {
			want = s.digestAt(r, start-1)
		}
		want ^= s.kvStamp ^ r.loraSalt
		if bad == 0 && (read != want || int(b.filled) != start-i*bs) {
			bad = garbage(read, want)
		}
	}
	for p := start; p < end; {
		i := p / bs
		j := p - i*bs
		stop := min(end, (i+1)*bs)
		b := &s.pool.blocks[r.table[i]]
		if j < int(b.filled) && b.ref > 1 {
			// The write overwrites slots another holder may have read:
			// whoever holds a block must read them all again.
			s.kvEpoch++
			r.kvChecked = s.kvEpoch + 1
		}
		d := s.digestAt(r, stop-1)
		want := d ^ s.kvStamp ^ r.loraSalt
		if j > 0 && j != int(b.filled) && bad == 0 {
			// It chains from a slot the block's word does not describe:
			// one never written, or one overwritten since.
			bad = garbage(b.word, want)
		}
		if bad == 0 {
			b.word = want
		} else {
			bad = garbage(bad, want)
			b.word = bad
		}
		b.filled = int32(stop - i*bs)
		p = stop
		r.kvLast = d
	}
	r.kvLastAt = end
	r.kvGarbage = bad
}

// kvRead is what attention reads for r, which samples this step after
// position end−1: every block again if a write overwrote a held block
// since r last read them. It reports the digest r samples with: its key,
// or garbage.
func (s *Scheduler) kvRead(r *Request, end int) uint64 {
	if r.kvChecked != s.kvEpoch+1 {
		if bad := s.kvReadAll(r, end); bad != 0 {
			r.kvGarbage = bad
		}
		r.kvChecked = s.kvEpoch + 1
	}
	if r.kvGarbage != 0 {
		return splitmix64(r.key ^ r.kvGarbage)
	}
	return r.key
}

// kvReadAll reads r's blocks for positions [0, end) and returns 0 when they
// hold r's sequence, else garbage from the first block that does not.
func (s *Scheduler) kvReadAll(r *Request, end int) uint64 {
	bs := s.cfg.BlockSize
	for i := 0; i*bs < end; i++ {
		b := &s.pool.blocks[r.table[i]]
		last := min(end, (i+1)*bs) - 1
		want := s.digestAt(r, last) ^ s.kvStamp ^ r.loraSalt
		if b.word != want || int(b.filled) != last-i*bs+1 {
			return garbage(b.word, want)
		}
	}
	return 0
}

// kvRollback takes r's KV back to its first end tokens after a step's
// verification rejected draft tokens past them (Config.NumSpeculativeTokens).
// A GPU leaves the rejected drafts' KV in their slots, past what r
// computed, and the next step overwrites it; what r reads chains from
// position end−1, whose KV the step wrote right. The model keeps a word
// a block, which the drafts' writes took past end−1: the block holding
// end−1 describes it again, as its own slots do — garbage still if what r
// read was.
func (s *Scheduler) kvRollback(r *Request, end int) {
	if end <= 0 {
		return
	}
	bs := s.cfg.BlockSize
	i := (end - 1) / bs
	b := &s.pool.blocks[r.table[i]]
	want := s.digestAt(r, end-1) ^ s.kvStamp ^ r.loraSalt
	if r.kvGarbage != 0 {
		want = garbage(r.kvGarbage, want)
	}
	b.word, b.filled = want, int32(end-i*bs)
}
