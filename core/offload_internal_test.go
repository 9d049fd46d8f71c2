package core

import (
	"container/list"
	"slices"
	"testing"

	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostMemoryKeepsTheMostRecentlyUsedBlocks: host memory holds its
// capacity in blocks, putting out the least recently used first, never
// one a store is still copying in; a use moves a block to the back.
func TestHostMemoryKeepsTheMostRecentlyUsedBlocks(t *testing.T) {
	o := newKVOffload(Config{KVOffloadBlocks: 3})
	held := func() []uint64 {
		var hs []uint64
		for e := o.lru.Front(); e != nil; e = e.Next() {
			hs = append(hs, e.Value.(*offloaded).hash)
		}
		return hs
	}
	land := func(hash, word uint64) {
		e := o.byHash[hash].Value.(*offloaded)
		o.words[e.slot], e.pending = word, false
	}
	for h := uint64(1); h <= 3; h++ {
		require.NotNil(t, store(o, h))
	}
	assert.Nil(t, store(o, 4), "every block is on its way: no room")
	_, ok := o.ready(1)
	assert.False(t, ok, "a block on its way is not loadable")
	land(1, 10)
	land(2, 20)
	o.lru.MoveToBack(o.byHash[1]) // a use
	assert.Equal(t, []uint64{2, 3, 1}, held())
	require.NotNil(t, store(o, 4), "2 goes: 3 is still on its way")
	assert.Equal(t, []uint64{3, 1, 4}, held())
	assert.NotContains(t, o.byHash, uint64(2))
	got, ok := o.ready(1)
	require.True(t, ok)
	assert.Equal(t, uint64(10), o.word(got))
	o.drop()
	assert.Empty(t, held())
	assert.Empty(t, o.byHash)
}

// store makes room for a block and reserves it, as a store of one block
// does, or returns nil without room.
func store(o *kvOffload, hash uint64) *list.Element {
	if ok, _ := o.roomFor(1); !ok {
		return nil
	}
	o.makeRoom(1, false)
	return o.reserve(hash)
}

// TestConfigRefusesOffloadingWithoutPrefixCaching: host memory finds
// blocks by the prefix cache's hashes.
func TestConfigRefusesOffloadingWithoutPrefixCaching(t *testing.T) {
	assert.EqualError(t, Config{KVOffloadBlocks: 4}.WithDefaults().Validate(), "core: KVOffloadBlocks is 4 but prefix caching is off: offloaded blocks are found by the prefix cache's hashes")
	assert.EqualError(t, Config{KVOffloadBlocks: -1, EnablePrefixCaching: true}.WithDefaults().Validate(), "core: KVOffloadBlocks must be ≥ 0 (0: offloading off), got -1")
	assert.NoError(t, Config{KVOffloadBlocks: 4, EnablePrefixCaching: true}.WithDefaults().Validate())
	assert.NoError(t, Config{KVOffloadBlocks: 4, EnablePrefixCaching: true, KVOffloadPolicy: OffloadARC}.WithDefaults().Validate())
	assert.NoError(t, Config{KVOffloadPolicy: OffloadARC}.WithDefaults().Validate(), "no host memory: the policy has no effect")
	assert.EqualError(t, Config{KVOffloadStoreThreshold: -1}.WithDefaults().Validate(), "core: KVOffloadStoreThreshold must be ≥ 0 (below 2: every block stored), got -1")
	assert.EqualError(t, Config{KVOffloadTrackerSize: -3}.WithDefaults().Validate(), "core: KVOffloadTrackerSize must be ≥ 0 (0: 64000), got -3")
	assert.EqualError(t, Config{KVOffloadMaxRecomputePendingTokens: -4}.WithDefaults().Validate(), "core: KVOffloadMaxRecomputePendingTokens must be ≥ 0 (0: always wait for a pending store), got -4")
	assert.EqualError(t, Config{KVOffloadBlocks: 4, EnablePrefixCaching: true, KVOffloadPolicy: 7}.WithDefaults().Validate(), "core: unknown KVOffloadPolicy 7: want OffloadLRU or OffloadARC")
	assert.EqualError(t, Config{KVLoadFailurePolicy: 2}.WithDefaults().Validate(), "core: unknown KVLoadFailurePolicy 2: want LoadFailureFail or LoadFailureRecompute")
	assert.Equal(t, []string{"fail", "recompute", "KVLoadFailurePolicy(2)"}, []string{LoadFailureFail.String(), LoadFailureRecompute.String(), KVLoadFailurePolicy(2).String()})
}

// TestABlockOnItsWayToHostMemoryIsNotLoadableEarly: a request's full
// blocks start their copies to host memory as its steps fill them, and no
// load finds them until the request ended and the last copy landed. A
// request of the same prompt that ends meanwhile copies nothing of them
// (they are on their way) and puts nothing in host memory at once.
func TestABlockOnItsWayToHostMemoryIsNotLoadableEarly(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 16, EnablePrefixCaching: true, KVOffloadBlocks: 8})
	s, step := o.s, o.step
	add := func(id string) *Request { return o.add(id, 1, 4) }
	loadable := func(st *kvStore) (n int) {
		for _, c := range st.copies {
			if _, ok := s.offload.ready(c.hash); ok {
				n++
			}
		}
		return n
	}
	a := add("a")
	step() // the prompt: blocks 0 and 1 full
	require.Len(t, o.jobs, 1)
	assert.Equal(t, StoreJob{ID: "a", Job: 1, from: 0, to: 2}, o.jobs[0])
	st := s.offload.stores["a"]
	r, n, done, _ := s.CompleteStore("a", 1)
	assert.Equal(t, a, r)
	assert.Equal(t, 2, n)
	assert.False(t, done, "a still runs")
	assert.Zero(t, loadable(st), "a still runs: its store is not complete")
	for !a.Status.Finished() {
		step()
	}
	require.Len(t, o.jobs, 2, "a's last step filled block 2")
	assert.Equal(t, StoreJob{ID: "a", Job: 2, from: 2, to: 3}, o.jobs[1])
	assert.Zero(t, a.Blocks, "a's store holds its blocks until the copy lands")
	assert.Equal(t, 3, s.Stats().KVUsedBlocks)

	b := add("b")
	for !b.Status.Finished() {
		step()
	}
	assert.Len(t, o.jobs, 2, "b's blocks are in host memory or on their way")
	assert.Zero(t, loadable(st), "b's end made a's blocks loadable before a's store landed")
	r, n, done, abandoned := s.CompleteStore("a", 2)
	assert.Equal(t, a, r)
	assert.Equal(t, 1, n)
	assert.True(t, done)
	assert.False(t, abandoned)
	assert.Equal(t, 3, loadable(st), "a's store landed")
	assert.Zero(t, s.Stats().KVUsedBlocks)
	assert.NoError(t, s.CheckBlocks())
}

// TestAStepsBlocksAreStoredAllOrNone: host memory makes room for all the
// blocks a step filled or stores none of them, and then the request's
// next step tries again from the same block, as vLLM's connector does
// when prepare_store finds no room: the copy that finally starts covers
// every block from the first.
func TestAStepsBlocksAreStoredAllOrNone(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 3})
	s, step, add := o.s, o.step, o.add
	a := add("a", 1, 4)
	b := add("b", 101, 8)
	step() // both prompts: blocks 0 and 1 of each full
	require.Equal(t, []StoreJob{{ID: "a", Job: 1, from: 0, to: 2}}, o.jobs, "room for a's two; then one is left, not two for b's")
	require.Equal(t, []StoreWait{{R: b, Blocks: 2}}, o.waits, "b's two blocks wait, and it is told")
	for !a.Status.Finished() {
		step()
	}
	require.Len(t, o.jobs, 2, "a's last step filled its block 2, which has room")
	assert.Equal(t, StoreJob{ID: "a", Job: 2, from: 2, to: 3}, o.jobs[1])
	assert.NotContains(t, s.offload.stores, "b", "no room for b's blocks yet: its store has not begun")
	assert.Len(t, o.waits, 1, "b is told once while its blocks wait")
	for _, j := range o.jobs {
		_, _, _, _ = s.CompleteStore(j.ID, j.Job)
	}
	step() // a's blocks landed: they can be put out for b's
	require.Len(t, o.jobs, 3)
	bj := o.jobs[2]
	assert.Equal(t, "b", bj.ID)
	assert.Equal(t, 0, bj.from, "b's copy starts at its first block")
	assert.Equal(t, 3, bj.Blocks(), "b's three full blocks, its prompt's among them")
	assert.False(t, b.storeWaits, "b's blocks no longer wait")
	var bHashes []uint64
	for _, c := range s.offload.stores["b"].copies {
		bHashes = append(bHashes, c.hash)
	}
	for !b.Status.Finished() {
		step()
	}
	for _, j := range o.jobs[2:] {
		_, _, _, _ = s.CompleteStore(j.ID, j.Job)
	}
	for e := s.offload.lru.Front(); e != nil; e = e.Next() {
		assert.False(t, e.Value.(*offloaded).pending)
	}
	var held []uint64
	for e := s.offload.lru.Front(); e != nil; e = e.Next() {
		held = append(held, e.Value.(*offloaded).hash)
	}
	assert.Equal(t, []uint64{bHashes[2], bHashes[1], bHashes[0]}, held, "b's blocks, its first the most recently used")
	assert.NoError(t, s.CheckBlocks())
}

// TestHostMemoryKeepsTheBlocksALoadReads: a block a load in flight reads
// is not put out to make room, as vLLM's prepare_store passes over a
// block whose ref_cnt a prepare_load raised until its complete_load: a
// step's blocks that would need it wait for the load to land.
func TestHostMemoryKeepsTheBlocksALoadReads(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 2})
	s, step, add := o.s, o.step, o.add
	a := add("a", 1, 1)
	step()
	require.True(t, a.Status.Finished())
	require.Equal(t, []StoreJob{{ID: "a", Job: 1, from: 0, to: 2}}, o.jobs)
	_, _, done, _ := s.CompleteStore("a", 1)
	require.True(t, done, "a's store landed: host memory holds its two prompt blocks")
	s.pool.resetCache() // the GPU forgets them: a's prompt again must load

	b := add("b", 1, 4)
	c := add("c", 101, 4)
	step() // b's load starts; c computes its prompt and fills two blocks
	require.Contains(t, s.offload.loads, "b", "b loads a's blocks from host memory")
	for e := s.offload.lru.Front(); e != nil; e = e.Next() {
		assert.Equal(t, int32(1), e.Value.(*offloaded).reads, "b's load reads each block once")
	}
	assert.Len(t, o.jobs, 1, "no room for c's blocks: the two there are read by b's load")
	assert.Equal(t, []StoreWait{{R: c, Blocks: 2, Loads: true}}, o.waits, "the loads keep the room c needs")
	held := map[uint64]bool{}
	for _, b := range s.offload.loads["b"].reads {
		held[b.hash] = true
		_, ok := s.offload.ready(b.hash)
		assert.True(t, ok, "the blocks b's load reads are still there")
	}

	s.offload.lru.Front().Value.(*offloaded).reads++
	assert.ErrorContains(t, s.CheckBlocks(), "loads reading it", "the check counts the loads in flight")
	s.offload.lru.Front().Value.(*offloaded).reads--

	aWords := map[uint64]uint64{}
	for _, b := range s.offload.loads["b"].reads {
		aWords[b.hash] = s.offload.word(b)
	}

	r, how, n := s.CompleteLoad("b")
	require.Equal(t, b, r)
	require.Equal(t, LoadLanded, how)
	require.Equal(t, 2, n)
	for e := s.offload.lru.Front(); e != nil; e = e.Next() {
		assert.Zero(t, e.Value.(*offloaded).reads, "the load landed: nothing reads host memory")
	}
	for j, h := range b.hashes {
		assert.Equal(t, aWords[h^b.cacheSalt()], s.pool.blocks[b.table[j]].word, "b's block %d holds a's KV", j)
	}
	step() // b runs; c's two blocks now put out those b read
	require.Len(t, o.jobs, 2)
	assert.Equal(t, StoreJob{ID: "c", Job: 2, from: 0, to: 2}, o.jobs[1])
	for h := range held {
		assert.NotContains(t, s.offload.byHash, h, "put out for c's blocks")
	}
}

// offloadRun steps a scheduler with KV offloading as the core would,
// minus the link: the copies each step starts and the waits it tells are
// kept for the test to land and look at, and the blocks are checked.
type offloadRun struct {
	t     *testing.T
	s     *Scheduler
	jobs  []StoreJob
	waits []StoreWait
}

func newOffloadRun(t *testing.T, cfg Config) *offloadRun {
	return &offloadRun{t: t, s: NewScheduler(cfg.WithDefaults())}
}

func (o *offloadRun) step() {
	so := o.s.Schedule()
	o.s.UpdateFromOutput(so, o.s.Sample(so, ToyModel{}))
	started, _, waited := o.s.TakeStores()
	o.jobs = append(o.jobs, started...)
	o.waits = append(o.waits, waited...)
	require.NoError(o.t, o.s.CheckBlocks())
}

// seq returns the n tokens from, from+1, …, a prompt.
func seq(from, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = from + i
	}
	return p
}

// add adds a request of a 9-token prompt first, first+1, ….
func (o *offloadRun) add(id string, first, maxTokens int) *Request {
	r := &Request{InternalID: id, ExternalID: id, Prompt: seq(first, 9), Params: SamplingParams{MaxTokens: maxTokens, IgnoreEOS: true}}
	require.NoError(o.t, o.s.AddRequest(r))
	return r
}

// TestAStoreIntoTheSlotsALoadReadsCorruptsIt plants
// core/kv-evict-while-loading: host memory, short of room for c's blocks,
// puts out the two b's load reads; c ends, its copy lands in their slots,
// and b's load, landing after it, brings back c's KV under a's hashes.
// b's next step reads KV that is not its prompt's.
func TestAStoreIntoTheSlotsALoadReadsCorruptsIt(t *testing.T) {
	cfg := Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 2}
	cfg.Faults = rttest.Armed(t, failpoints.CoreKVEvictWhileLoading.Name+"=return")
	o := newOffloadRun(t, cfg)
	s := o.s
	o.offloadAndForget()

	b := o.add("b", 1, 4)
	c := o.add("c", 101, 1)
	o.step() // b's load starts; c fills two blocks, puts out a's and ends
	require.Contains(t, s.offload.loads, "b")
	require.True(t, c.Status.Finished())
	require.Equal(t, []StoreJob{{ID: "a", Job: 1, from: 0, to: 2}, {ID: "c", Job: 2, from: 0, to: 2}}, o.jobs, "the bug makes room for c at once")
	assert.Empty(t, o.waits)
	cStore := s.offload.stores["c"]
	_, _, done, _ := s.CompleteStore("c", 2)
	require.True(t, done, "c's copy lands before b's load")
	_, how, _ := s.CompleteLoad("b")
	require.Equal(t, LoadLanded, how)
	// a's blocks went out last first (vLLM's touch makes the first the
	// most recent) and c's copies took the slots last put out first
	// (vLLM's free list): c's first copy took the slot of a's first block.
	for j, c := range cStore.copies {
		assert.Equal(t, c.word, s.pool.blocks[b.table[j]].word, "b's block %d holds c's KV", j)
	}
	o.step()
	assert.NotZero(t, b.kvGarbage, "b's step reads KV that is not its prompt's")
}

// TestALoadAResetAbandonedLandsAfterItsSlotsAreTakenAgain: a reset drops
// host memory while the load of an aborted request reads two of its
// slots; a new store takes one again before the load lands. The
// load still writes what the slots hold into its blocks, which go back,
// and nothing of it is cached or kept.
func TestALoadAResetAbandonedLandsAfterItsSlotsAreTakenAgain(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 2})
	s := o.s
	o.abortedLoad()
	_, ok := s.ResetPrefixCache(true)
	require.True(t, ok, "a reset that may preempt abandons the load")
	require.Zero(t, s.offload.lru.Len(), "the reset dropped host memory")
	c := &Request{InternalID: "c", ExternalID: "c", Prompt: []int{101, 102, 103, 104, 105}, Params: SamplingParams{MaxTokens: 1, IgnoreEOS: true}}
	require.NoError(t, s.AddRequest(c))
	o.step() // c's one block takes the first slot b's load reads
	require.Equal(t, StoreJob{ID: "c", Job: 2, from: 0, to: 1}, o.jobs[1])
	_, _, done, _ := s.CompleteStore("c", 2)
	require.True(t, done)
	_, how, n := s.CompleteLoad("b")
	assert.Equal(t, LoadEnded, how)
	assert.Equal(t, 2, n)
	assert.Zero(t, s.Stats().KVUsedBlocks, "b's blocks went back")
	require.NoError(t, s.CheckBlocks())
}

// abortedLoad offloads a's blocks and forgets them (offloadAndForget), then
// starts b's load of them and aborts b with the load in flight.
func (o *offloadRun) abortedLoad() {
	o.offloadAndForget()
	o.add("b", 1, 4)
	o.step()
	require.Contains(o.t, o.s.offload.loads, "b")
	o.s.FinishRequests([]string{"b"}, StatusFinishedAborted)
}

// offloadAndForget runs a request "a" of prompt 1…9 to its end, lands its
// store of the prompt's two blocks in host memory, and has the GPU's
// cache forget them: the next request of that prompt loads them back.
func (o *offloadRun) offloadAndForget() {
	o.add("a", 1, 1)
	o.step()
	_, _, done, _ := o.s.CompleteStore("a", 1)
	require.True(o.t, done, "a's store landed")
	o.s.pool.resetCache()
}

// TestALookupIsAUseOfTheBlocksHostMemoryHolds: the scheduler's lookup of
// a waiting request makes a use of every block of its that host memory
// holds, from its last to its first, as vLLM's get_num_new_matched_tokens
// touches them before its lookup, even when nothing is loaded: here the
// GPU's cache still holds them all. The blocks of another request, stored
// later but not looked up since, go out first.
func TestALookupIsAUseOfTheBlocksHostMemoryHolds(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 4})
	s := o.s
	held := func() []uint64 {
		var hs []uint64
		for e := s.offload.lru.Front(); e != nil; e = e.Next() {
			hs = append(hs, e.Value.(*offloaded).hash)
		}
		return hs
	}
	hashes := func(r *Request) []uint64 {
		return []uint64{r.hashes[0] ^ r.cacheSalt(), r.hashes[1] ^ r.cacheSalt()}
	}
	landAll := func() {
		for _, j := range o.jobs {
			_, _, _, _ = s.CompleteStore(j.ID, j.Job)
		}
		o.jobs = nil
	}
	a := o.add("a", 1, 1)
	o.step()
	landAll()
	x := o.add("x", 101, 1)
	o.step()
	landAll()
	ah, xh := hashes(a), hashes(x)
	require.Equal(t, []uint64{ah[1], ah[0], xh[1], xh[0]}, held(), "each store a use, its first block the most recent")

	b := o.add("b", 1, 1) // a's prompt, every block of it a hit in the GPU's cache
	o.step()
	require.True(t, b.Status.Finished())
	assert.Empty(t, s.offload.loads, "nothing to load: the GPU's cache had it all")
	assert.Empty(t, o.jobs, "nothing to store: host memory holds b's blocks")
	assert.Equal(t, []uint64{xh[1], xh[0], ah[1], ah[0]}, held(), "b's lookup used a's blocks, the first the most recent")

	c := o.add("c", 201, 1)
	o.step()
	require.Equal(t, []StoreJob{{ID: "c", Job: 3, from: 0, to: 2}}, o.jobs)
	for _, h := range xh {
		assert.NotContains(t, s.offload.byHash, h, "x's blocks, the least recently used, went out for c's")
	}
	for _, h := range ah {
		assert.Contains(t, s.offload.byHash, h, "a's blocks, used by b's lookup, stay")
	}
	assert.Equal(t, []uint64{ah[1], ah[0], hashes(c)[1], hashes(c)[0]}, held())
}

// TestAStoreKeepsTheBlocksItPassesOver: a step's store does not put out,
// to make room for the blocks it copies, those of its request host memory
// holds already, as vLLM's prepare_store keeps them out of the blocks it
// may evict: with host memory full of a's two blocks, b, whose prompt
// starts with a's, finds no room for its third and waits; a's stay.
func TestAStoreKeepsTheBlocksItPassesOver(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 2})
	s := o.s
	a := o.add("a", 1, 1)
	o.step()
	for _, j := range o.jobs {
		_, _, _, _ = s.CompleteStore(j.ID, j.Job)
	}
	require.True(t, a.Status.Finished())
	aHashes := []uint64{a.hashes[0] ^ a.cacheSalt(), a.hashes[1] ^ a.cacheSalt()}

	prompt := make([]int, 13) // a's first two blocks and one more
	for i := range prompt {
		prompt[i] = 1 + i
	}
	b := &Request{InternalID: "b", ExternalID: "b", Prompt: prompt, Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}
	require.NoError(t, s.AddRequest(b))
	o.step()
	assert.Len(t, o.jobs, 1, "no copy of b's third block")
	assert.Equal(t, []StoreWait{{R: b, Blocks: 1}}, o.waits, "its room would have been a block b passes over")
	for _, h := range aHashes {
		_, ok := s.offload.ready(h)
		assert.True(t, ok, "a's blocks, b's first two, stay in host memory")
	}
}

// TestARCPutsOutByRecencyAndFrequency: under OffloadARC a block stored
// and not used since is in T1, one used since in T2; room is made in T1
// while it holds at least its target size, else in T2, and a use of a
// hash put out moves the target, as vLLM's ARC policy does.
func TestARCPutsOutByRecencyAndFrequency(t *testing.T) {
	o := newKVOffload(Config{KVOffloadBlocks: 3, KVOffloadPolicy: OffloadARC})
	keys := func(l *list.List) []uint64 {
		var hs []uint64
		for e := l.Front(); e != nil; e = e.Next() {
			hs = append(hs, e.Value.(*offloaded).hash)
		}
		return hs
	}
	ghosts := func(g *ghostList) []uint64 {
		var hs []uint64
		for e := g.order.Front(); e != nil; e = e.Next() {
			hs = append(hs, e.Value.(uint64))
		}
		return hs
	}
	land := func(h uint64) { o.byHash[h].Value.(*offloaded).pending = false }
	use := func(h uint64) { o.touch([]uint64{h}, 0) }
	for h := uint64(1); h <= 3; h++ {
		require.NotNil(t, store(o, h))
	}
	use(1)
	assert.Equal(t, []uint64{2, 3, 1}, keys(&o.lru), "a block on its way is not used twice: it stays in T1")
	assert.Zero(t, o.t2.Len())
	land(1)
	land(2)
	land(3)
	use(1)
	assert.Equal(t, []uint64{2, 3}, keys(&o.lru))
	assert.Equal(t, []uint64{1}, keys(&o.t2), "used again: T2")

	require.NotNil(t, store(o, 4))
	assert.Equal(t, []uint64{3, 4}, keys(&o.lru), "T1 holds at least its target, 0: its oldest goes")
	assert.Equal(t, []uint64{2}, ghosts(&o.ghosts[0]))
	use(2)
	assert.Equal(t, 1.0, o.target, "a use of B1's ghost: T1 should have been larger")

	land(4)
	use(3)
	use(4) // T1 is empty, T2 holds 1, 3, 4
	assert.Zero(t, o.lru.Len())
	require.NotNil(t, store(o, 5))
	assert.Equal(t, []uint64{3, 4}, keys(&o.t2), "T1 is below its target: T2's oldest goes")
	assert.Equal(t, []uint64{1}, ghosts(&o.ghosts[1]))
	use(1)
	assert.Equal(t, 0.0, o.target, "a use of B2's ghost: T1 should have been smaller, by |B1|/|B2| = 1")

	use(2)
	use(2) // the target is 2 now, and T1 holds only 5: room comes from T2 alone
	assert.Equal(t, 2.0, o.target)
	land(5)
	require.NoError(t, o.check())
	o.byHash[3].Value.(*offloaded).reads++ // as loads in flight would
	o.byHash[4].Value.(*offloaded).reads++
	ok, loads := o.roomFor(1)
	assert.False(t, ok, "T2's blocks are read and T1 is below its target: no room, though 5 could go, as vLLM's ARC finds none")
	assert.True(t, loads, "there would be but for the loads")
	assert.ErrorContains(t, o.check(), "loads reading it", "the check counts the loads in flight")

	o.drop()
	assert.Zero(t, o.held())
	assert.Zero(t, o.ghosts[0].len()+o.ghosts[1].len())
	assert.Zero(t, o.target)
}

// TestHostMemoryCountsItsTraffic: host memory of two blocks holds a's;
// b's lookup finds them (9 tokens queried, 8 hits) and loads them, and
// c's (9 queried, none hit) is admitted; c's two filled blocks find no
// room while b's load reads the two there: a failure. Once the load
// landed, c's next step puts them out, and b, whose blocks they were,
// finds no room for its own behind c's copy: a second failure.
func TestHostMemoryCountsItsTraffic(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 2})
	s := o.s
	o.offloadAndForget()
	want := KVOffloadStats{Queries: 9, StoredBlocks: 2, Blocks: 2, Capacity: 2}
	require.Equal(t, want, s.Stats().KVOffload, "a's 9 tokens found nothing anywhere; its two blocks were stored")

	o.add("b", 1, 4)
	o.add("c", 101, 4)
	o.step()
	require.Contains(t, s.offload.loads, "b")
	want.Queries, want.Hits, want.StoreFailures = 9+9+9, 8, 1
	require.Equal(t, want, s.Stats().KVOffload)
	_, _, n := s.CompleteLoad("b")
	require.Equal(t, 2, n)
	o.step()
	want.LoadedBlocks, want.Evicted, want.StoreFailures = 2, 2, 2
	assert.Equal(t, want, s.Stats().KVOffload, "counted once admitted: b's admission after its load is not a lookup")
	require.Len(t, o.waits, 2)
	assert.Equal(t, []string{"c", "b"}, []string{o.waits[0].R.InternalID, o.waits[1].R.InternalID}, "c waited for the load, then b for c's copy")

	r := &Request{Prompt: make([]int, 9), Preemptions: 1}
	s.offload.recordLookup(r, 4, 4)
	want.PreemptedQueries, want.PreemptedHits = 5, 4
	assert.Equal(t, want, s.Stats().KVOffload, "a preempted request's lookups are counted apart")
}

// TestAStoreThresholdStoresOnlyBlocksLookupsSawOften: with vLLM's
// store_threshold of 2, a's blocks, seen by one lookup, are passed over;
// b, the same prompt after the GPU's cache forgot it, is the second
// lookup to see them, and its store copies them. A GPU hit is no
// sighting: c, whose prompt the GPU's cache still holds, sees nothing,
// and d's blocks, seen once, are passed over. A tracker of one hash
// forgets the first block as the second is seen: nothing is stored.
func TestAStoreThresholdStoresOnlyBlocksLookupsSawOften(t *testing.T) {
	cfg := Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 4, KVOffloadStoreThreshold: 2}
	o := newOffloadRun(t, cfg)
	s := o.s
	o.add("a", 1, 1)
	o.step()
	require.Empty(t, o.jobs, "a's blocks were seen once: no copy")
	want := KVOffloadStats{Queries: 9, StoresSkipped: 2, Capacity: 4}
	require.Equal(t, want, s.Stats().KVOffload)

	s.pool.resetCache()
	o.add("b", 1, 1)
	o.step()
	require.Len(t, o.jobs, 1, "b's lookup was the second to see the blocks: they are stored")
	assert.Equal(t, 2, o.jobs[0].Blocks())
	want.Queries, want.Blocks = 18, 2
	require.Equal(t, want, s.Stats().KVOffload)
	_, _, done, _ := s.CompleteStore("b", o.jobs[0].Job)
	require.True(t, done)

	o.add("c", 1, 1) // a GPU hit of both blocks: nothing past it to look up
	o.add("d", 101, 1)
	o.step()
	assert.Len(t, o.jobs, 1, "neither c nor d stored a block")
	want.Queries, want.Hits, want.StoredBlocks, want.StoresSkipped = 18+1+9, 0, 2, 2+2
	assert.Equal(t, want, s.Stats().KVOffload, "d's two blocks were passed over; c's are held already")
	for h := range s.offload.byHash {
		assert.Equal(t, int32(2), s.offload.reuse.count(h), "c's lookup did not count")
	}

	cfg.KVOffloadTrackerSize = 1
	o = newOffloadRun(t, cfg)
	o.add("a", 1, 1)
	o.step()
	o.s.pool.resetCache()
	o.add("b", 1, 1)
	o.step()
	assert.Empty(t, o.jobs, "a tracker of one hash forgot each block before its second sighting")
	assert.Equal(t, int64(4), o.s.Stats().KVOffload.StoresSkipped)
	assert.Len(t, o.s.offload.reuse.seen, 1)
}

// TestARequestWaitsForTheLoadOfItsBlocks: b and c have the same prompt,
// which host memory holds and the GPU's cache lost. b's load starts; c,
// whose hits it reads, is not given a second load of them, as vLLM's
// connector delays a request whose hit blocks are being loaded: it waits,
// while d, behind it, is admitted. Once b's load landed the GPU's cache
// has the blocks, and c is admitted on them with no load.
func TestARequestWaitsForTheLoadOfItsBlocks(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 4})
	s := o.s
	o.offloadAndForget()
	b, c := o.add("b", 1, 4), o.add("c", 1, 4)
	o.add("d", 101, 4)
	o.step()
	require.Contains(t, s.offload.loads, "b")
	assert.NotContains(t, s.offload.loads, "c", "no second load of the blocks b's reads")
	assert.Equal(t, StatusWaiting, c.Status)
	assert.Equal(t, []*Request{c}, s.out.LoadWaiting, "c is told to wait")
	assert.Equal(t, StatusRunning, s.requests["d"].Status, "d, behind c, was admitted")
	o.step()
	assert.Empty(t, s.out.LoadWaiting, "told once")
	assert.Equal(t, StatusWaiting, c.Status, "still waiting for b's load")
	assert.Equal(t, KVOffloadStats{Queries: 9 + 9 + 9, Hits: 8, StoredBlocks: 2, Blocks: 2 + 2, Capacity: 4}, s.Stats().KVOffload,
		"a delayed lookup is not counted, as vLLM records it once the request is allocated; d stored its two blocks")

	_, how, _ := s.CompleteLoad("b")
	require.Equal(t, LoadLanded, how)
	hits := s.Stats().PrefixCacheHits
	o.step()
	assert.Equal(t, StatusRunning, b.Status)
	assert.Equal(t, StatusRunning, c.Status, "c is admitted on the blocks b's load cached")
	assert.Empty(t, s.offload.loads)
	assert.Equal(t, hits+8, s.Stats().PrefixCacheHits, "c's two blocks came from the GPU's cache")
}

// TestBackPressureHoldsEveryWaitingRequestWhileMaxNumSeqsLoadsAreInFlight:
// with Config.MaxNumSeqs loads in flight, the scheduler holds back every
// waiting request before its lookup of host memory, as vLLM's connector's
// back-pressure returns None while max_num_seqs requests are being
// loaded: c, whose blocks b loads, and g, with nothing in host memory,
// both wait, told once, and neither lookup makes a use of host memory's
// blocks. A load whose request ended counts until it lands. Then c waits
// for b's load, told again for that reason, and g is admitted.
func TestBackPressureHoldsEveryWaitingRequestWhileMaxNumSeqsLoadsAreInFlight(t *testing.T) {
	o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8, MaxNumSeqs: 2})
	s := o.s
	o.add("a", 1, 1)
	o.add("e", 201, 1)
	o.step()
	require.Len(t, o.jobs, 2)
	for _, j := range o.jobs {
		_, _, done, _ := s.CompleteStore(j.ID, j.Job)
		require.True(t, done, "%s's store landed", j.ID)
	}
	s.pool.resetCache()
	order := func() []uint64 {
		var hs []uint64
		for e := s.offload.lru.Front(); e != nil; e = e.Next() {
			hs = append(hs, e.Value.(*offloaded).hash)
		}
		return hs
	}

	b := o.add("b", 1, 4)
	o.add("f", 201, 4)
	c, g := o.add("c", 1, 4), o.add("g", 301, 4)
	o.step()
	require.Contains(t, s.offload.loads, "b")
	require.Contains(t, s.offload.loads, "f")
	assert.Equal(t, []*Request{c, g}, s.out.LoadWaiting, "both held back, c before its blocks' load could delay it")
	assert.Equal(t, loadHeldBack, c.loadHeld)
	assert.Equal(t, loadHeldBack, g.loadHeld)
	before := order()
	hb := b.hashes[0] ^ b.cacheSalt()
	require.NotEqual(t, hb, before[len(before)-1], "f's lookup, after b's, made its blocks the most recent")

	s.FinishRequests([]string{"f"}, StatusFinishedAborted)
	o.step()
	assert.Empty(t, s.out.LoadWaiting, "told once")
	assert.Equal(t, StatusWaiting, g.Status, "f's load, its request ended, still counts until it lands")
	assert.Equal(t, before, order(), "a held-back request's lookup does not run: it makes no use of host memory's blocks")

	_, how, _ := s.CompleteLoad("f")
	require.Equal(t, LoadEnded, how)
	o.step()
	assert.Equal(t, []*Request{c}, s.out.LoadWaiting, "c, looked up now, waits for b's load: told again, for that reason")
	assert.Equal(t, loadDelayed, c.loadHeld)
	assert.Equal(t, StatusRunning, g.Status, "g, with one load in flight, is looked up and admitted")
}

// TestALoadForgottenOnAbortHoldsItsReadersForEver plants
// core/kv-load-forgotten-on-abort: b's load lands after b was aborted and
// its blocks go back, but host memory still counts it reading a's blocks;
// c, whose prompt continues with them, waits for that load at every step
// and is never admitted, and the scheduler does not reject it (it waits
// for a load, not for room). Host memory's check tells the count that
// outlived its load. As the engine is, c loads them itself.
func TestALoadForgottenOnAbortHoldsItsReadersForEver(t *testing.T) {
	for _, planted := range []bool{false, true} {
		cfg := Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 4}
		if planted {
			cfg.Faults = rttest.Armed(t, failpoints.CoreKVLoadForgottenOnAbort.Name+"=return")
		}
		o := newOffloadRun(t, cfg)
		s := o.s
		o.abortedLoad()
		_, how, _ := s.CompleteLoad("b")
		require.Equal(t, LoadEnded, how)
		c := o.add("c", 1, 4)
		for range 3 {
			so := s.Schedule()
			s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		}
		if !planted {
			assert.Contains(t, s.offload.loads, "c", "c loads a's blocks itself")
			require.NoError(t, s.CheckBlocks())
			continue
		}
		assert.Equal(t, StatusWaiting, c.Status)
		assert.Equal(t, loadDelayed, c.loadHeld, "c waits for a load that landed")
		assert.Empty(t, s.offload.loads)
		assert.True(t, s.WaitsForLoad())
		_, rejected := s.RejectUnschedulable()
		assert.False(t, rejected, "a request that waits for a load is not rejected")
		assert.ErrorContains(t, s.CheckBlocks(), "counts 1 loads reading it, 0 in flight do")
	}
}

// TestAPreemptedRequestsStoreHoldsItsReadersUntilTheStepReportsIt: a's
// first step starts the copy of its two full blocks to host memory; a is
// preempted with the copy in flight. The worker waits for the copy before
// the blocks are reused, but the scheduler learns it landed only from the
// output of the step after (vLLM's store jobs reported done): until then
// a, whose own store is in flight, and b, whose prompt would load a's
// blocks (vLLM's HIT_PENDING), both wait. A step of nothing reports it as
// well: then a loads its blocks back, and b waits for that load. Under
// core/kv-store-forgotten-on-preempt the report is lost and both wait for
// ever, the class of vLLM's #49829.
func TestAPreemptedRequestsStoreHoldsItsReadersUntilTheStepReportsIt(t *testing.T) {
	run := func(t *testing.T, cfg Config) (*offloadRun, *Request, *Request) {
		cfg.BlockSize, cfg.NumBlocks, cfg.EnablePrefixCaching, cfg.KVOffloadBlocks = 4, 32, true, 8
		o := newOffloadRun(t, cfg)
		s := o.s
		a := o.add("a", 1, 4)
		o.step() // the prompt: blocks 0 and 1 full, their copy in flight
		require.Len(t, o.jobs, 1)
		s.preempt(a, nil)
		require.True(t, s.offload.stores["a"].flushed)
		s.pool.resetCache() // the GPU's cache lost a's blocks: b looks in host memory
		b := o.add("b", 1, 4)
		so := s.Schedule()
		assert.Empty(t, so.Scheduled)
		assert.Equal(t, []*Request{a, b}, so.LoadWaiting, "a waits for its own store, b for a's blocks")
		assert.Equal(t, loadPending, a.loadHeld)
		assert.Equal(t, loadPending, b.loadHeld)
		return o, a, b
	}
	t.Run("fixed", func(t *testing.T) {
		o, a, b := run(t, Config{})
		assert.NotContains(t, o.s.offload.stores, "a", "the step of nothing reported the copy")
		o.step()
		assert.Contains(t, o.s.offload.loads, "a", "a loads its blocks back from host memory")
		assert.Equal(t, kvLoading, a.kvLoad)
		assert.Equal(t, loadDelayed, b.loadHeld, "b waits for a's load of them")
	})
	t.Run("bug", func(t *testing.T) {
		o, a, b := run(t, Config{Faults: rttest.Armed(t, failpoints.CoreKVStoreForgottenOnPreempt.Name+"=return")})
		for range 5 {
			o.step()
		}
		assert.Equal(t, StatusPreempted, a.Status, "a waits for its store for ever")
		assert.Equal(t, StatusWaiting, b.Status)
		assert.True(t, o.s.WaitsForLoad(), "nothing is rejected: they wait for a store")
	})
}

// ready returns the block host memory holds under hash for a load to read:
// held, not on its way.
func (o *kvOffload) ready(hash uint64) (*offloaded, bool) {
	b, ok := o.lookup(hash)
	if !ok || b.pending {
		return nil, false
	}
	return b, true
}

// TestAShortPendingTailIsComputedAgainRatherThanWaitedFor: vLLM's
// max_recompute_pending_tokens (Config.KVOffloadMaxRecomputePendingTokens)
// bounds HIT_PENDING's wait. b's prompt is a's, whose store of its two
// full blocks a preemption left in flight: with room for both blocks'
// tokens b computes them at once rather than wait, with room for one
// block's it waits; a waits for its own store either way. When the first
// block of the hit is ready in host memory, another request's, b loads it
// and computes the pending one. b's tokens are the model's throughout.
func TestAShortPendingTailIsComputedAgainRatherThanWaitedFor(t *testing.T) {
	preempted := func(t *testing.T, max int) (*offloadRun, *Request) {
		o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8, KVOffloadMaxRecomputePendingTokens: max})
		a := o.add("a", 1, 4)
		o.step() // the prompt: blocks 0 and 1 full, their copy in flight
		require.Len(t, o.jobs, 1)
		o.s.preempt(a, nil)
		require.True(t, o.s.offload.stores["a"].flushed)
		o.s.pool.resetCache() // the GPU's cache lost a's blocks: b looks in host memory
		return o, a
	}
	t.Run("both blocks", func(t *testing.T) {
		o, a := preempted(t, 8)
		b := o.add("b", 1, 4)
		so := o.s.Schedule()
		require.Len(t, so.Scheduled, 1)
		assert.Same(t, b, so.Scheduled[0].Req, "b is admitted at once")
		assert.Equal(t, 0, so.Scheduled[0].Start, "b computes its prompt from its first token")
		assert.Equal(t, []PendingCut{{R: b, Blocks: 2}}, o.s.PendingCut())
		assert.Equal(t, []*Request{a}, so.LoadWaiting, "a waits for its own store")
		assert.Empty(t, so.Loads)
		o.s.UpdateFromOutput(so, o.s.Sample(so, ToyModel{}))
		require.NoError(t, o.s.CheckBlocks())
		for range 8 {
			o.step()
		}
		assert.Equal(t, Tokens(ToyModel{}, b.Prompt, 4), b.Output)
		assert.Equal(t, Tokens(ToyModel{}, a.Prompt, 4), a.Output, "a loaded its blocks back once its store was reported")
	})
	t.Run("one block's tokens", func(t *testing.T) {
		o, a := preempted(t, 7)
		b := o.add("b", 1, 4)
		so := o.s.Schedule()
		assert.Empty(t, so.Scheduled)
		assert.Empty(t, o.s.PendingCut())
		assert.Equal(t, []*Request{a, b}, so.LoadWaiting, "8 tokens pending are more than 7: b waits")
		assert.Equal(t, loadPending, b.loadHeld)
	})
	t.Run("a ready block before the pending one", func(t *testing.T) {
		for _, max := range []int{4, 3} {
			o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8, KVOffloadMaxRecomputePendingTokens: max})
			s := o.s
			c := o.add("c", 1, 1) // blocks 0 and 1 of 1…9, stored as c ends
			o.step()
			require.True(t, c.Status.Finished())
			_, _, done, _ := s.CompleteStore("c", 1)
			require.True(t, done)
			prompt := []int{1, 2, 3, 4, 50, 51, 52, 53, 54} // c's first block, then its own
			a := &Request{InternalID: "a", ExternalID: "a", Prompt: prompt, Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}
			require.NoError(t, s.AddRequest(a))
			o.step() // a's block 1 is copied; host memory holds block 0 already
			require.Len(t, o.jobs, 2)
			assert.Equal(t, StoreJob{ID: "a", Job: 2, from: 0, to: 1}, o.jobs[1])
			s.preempt(a, nil)
			s.pool.resetCache()
			b := &Request{InternalID: "b", ExternalID: "b", Prompt: slices.Clone(prompt), Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}
			require.NoError(t, s.AddRequest(b))
			so := s.Schedule()
			if max < 4 {
				assert.Empty(t, so.Loads, "max %d: 4 tokens pending are more", max)
				assert.Equal(t, loadPending, b.loadHeld)
				continue
			}
			assert.Equal(t, []*Request{b}, so.Loads, "b loads the ready block")
			assert.Equal(t, []PendingCut{{R: b, Blocks: 1}}, o.s.PendingCut())
			require.Contains(t, s.offload.loads, "b")
			assert.Len(t, s.offload.loads["b"].reads, 1)
			s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
			_, how, n := s.CompleteLoad("b")
			require.Equal(t, LoadLanded, how)
			assert.Equal(t, 1, n)
			assert.Equal(t, 4, b.NumComputed, "b computes from its second block")
			for range 8 {
				o.step()
			}
			assert.Equal(t, Tokens(ToyModel{}, prompt, 4), b.Output)
			assert.Zero(t, b.kvGarbage)
		}
	})
}

// failedLoad offloads a's two blocks of 1…9 and forgets them
// (offloadAndForget), then starts b's load of them with
// core/kv-load-fails armed and lands it: its last block failed.
func failedLoad(t *testing.T, policy KVLoadFailurePolicy, faults ...string) (*offloadRun, *Request) {
	cfg := Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8,
		KVLoadFailurePolicy: policy, SchedulingPolicy: PolicyPriority}
	cfg.Faults = rttest.Armed(t, faults...)
	o := newOffloadRun(t, cfg)
	o.offloadAndForget()
	b := o.add("b", 1, 4)
	o.step()
	require.Contains(t, o.s.offload.loads, "b")
	r, how, n := o.s.CompleteLoad("b")
	require.Same(t, b, r)
	require.Equal(t, LoadFailed, how)
	require.Equal(t, 2, n, "both blocks landed, the last of them invalid")
	require.NoError(t, o.s.CheckBlocks())
	return o, b
}

// TestAFailedLoadEndsItsRequestOrComputesFromTheFailedBlock: a load whose
// last block failed (core/kv-load-fails) ends its request with an error
// under vLLM's kv_load_failure_policy fail, its blocks back and nothing of
// them cached; under recompute the request keeps the block before the
// failed one, computes from there, and samples the model's tokens.
func TestAFailedLoadEndsItsRequestOrComputesFromTheFailedBlock(t *testing.T) {
	fails := failpoints.CoreKVLoadFails.Name + "=return"
	t.Run("fail", func(t *testing.T) {
		o, b := failedLoad(t, LoadFailureFail, fails)
		assert.Equal(t, StatusFinishedError, b.Status)
		assert.Zero(t, o.s.Stats().KVUsedBlocks, "b's blocks went back")
		assert.Empty(t, o.s.lookup(b, nil), "nothing of the load is cached")
	})
	t.Run("recompute", func(t *testing.T) {
		o, b := failedLoad(t, LoadFailureRecompute, fails)
		assert.Equal(t, StatusWaiting, b.Status)
		assert.Equal(t, 4, b.NumComputed, "b computes from its failed block")
		assert.Len(t, o.s.lookup(b, nil), 1, "the block before the failed one is cached, not the failed one")
		so := o.s.Schedule()
		require.Len(t, so.Scheduled, 1)
		assert.Equal(t, 4, so.Scheduled[0].Start)
		o.s.UpdateFromOutput(so, o.s.Sample(so, ToyModel{}))
		for range 4 {
			o.step()
		}
		assert.Zero(t, b.kvGarbage)
		assert.Equal(t, Tokens(ToyModel{}, b.Prompt, 4), b.Output)
	})
	onlyBlock := func(t *testing.T, bug bool) {
		// A load of one block from the prompt's first: nothing before the
		// failed block, so b gives its blocks back and looks up again, as
		// vLLM does. Host memory forgot the block whose load failed
		// (vLLM's #49328): b computes it, where a second load would fail
		// too, and a third, for ever (its #49176, planted as
		// core/kv-load-failed-block-kept) — every load fails here.
		cfg := Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8, KVLoadFailurePolicy: LoadFailureRecompute}
		faults := []string{failpoints.CoreKVLoadFails.Name + "=return"}
		if bug {
			faults = append(faults, failpoints.CoreKVLoadFailedBlockKept.Name+"=return")
		}
		cfg.Faults = rttest.Armed(t, faults...)
		o := newOffloadRun(t, cfg)
		s := o.s
		prompt := []int{1, 2, 3, 4, 5}
		a := &Request{InternalID: "a", ExternalID: "a", Prompt: prompt, Params: SamplingParams{MaxTokens: 1, IgnoreEOS: true}}
		require.NoError(t, s.AddRequest(a))
		o.step()
		_, _, done, _ := s.CompleteStore("a", 1)
		require.True(t, done)
		s.pool.resetCache()
		b := &Request{InternalID: "b", ExternalID: "b", Prompt: slices.Clone(prompt), Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}
		require.NoError(t, s.AddRequest(b))
		o.step()
		_, how, n := s.CompleteLoad("b")
		require.Equal(t, LoadFailed, how)
		require.Equal(t, 1, n)
		assert.Zero(t, b.NumComputed)
		assert.Zero(t, b.Blocks, "b gave its blocks back")
		assert.Zero(t, s.Stats().KVUsedBlocks)
		if bug {
			assert.Equal(t, 1, s.offload.held(), "host memory kept the failed block")
			for i := range 5 {
				o.step()
				require.Contains(t, s.offload.loads, "b", "b loads the block it failed to load again (%d)", i)
				_, how, _ := s.CompleteLoad("b")
				require.Equal(t, LoadFailed, how)
			}
			assert.Equal(t, int64(6), s.Stats().KVOffload.FailedLoads)
			assert.Empty(t, b.Output, "b never gets a token")
			return
		}
		assert.Zero(t, s.offload.held(), "host memory forgot the failed block")
		so := s.Schedule()
		assert.NotContains(t, s.offload.loads, "b", "b looked up again and found nothing to load")
		require.Len(t, so.Scheduled, 1)
		assert.Zero(t, so.Scheduled[0].Start, "b computes its prompt from its first token")
		s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		for range 6 {
			o.step()
		}
		assert.Equal(t, Tokens(ToyModel{}, prompt, 4), b.Output)
		assert.Equal(t, int64(1), s.Stats().KVOffload.FailedLoads)
	}
	t.Run("recompute of a load's only block", func(t *testing.T) { onlyBlock(t, false) })
	t.Run("recompute of a load's only block, the failed block kept", func(t *testing.T) { onlyBlock(t, true) })
}

// TestAFailedBlockLeftInThePrefixCacheIsReadByAnother plants
// core/kv-load-caches-invalid-blocks (the class of vLLM's #53298): under
// recompute the failed block is cached with the one before it; b, whose
// load it was, gives up before computing it again, and c, a request of the
// same prompt, finds both in the GPU's prefix cache and samples from KV
// that is not its prompt's. Fixed, c finds the first alone, computes the
// second, which host memory forgot when its load failed, and its tokens
// are the model's.
func TestAFailedBlockLeftInThePrefixCacheIsReadByAnother(t *testing.T) {
	for _, bug := range []bool{false, true} {
		faults := []string{failpoints.CoreKVLoadFails.Name + "=1*return"} // c's load does not fail
		if bug {
			faults = append(faults, failpoints.CoreKVLoadCachesInvalidBlocks.Name+"=return")
		}
		o, b := failedLoad(t, LoadFailureRecompute, faults...)
		require.Equal(t, []*Request{b}, o.s.FinishRequests([]string{"b"}, StatusFinishedAborted))
		require.NoError(t, o.s.CheckBlocks())
		c := &Request{InternalID: "c", ExternalID: "c", Prompt: slices.Clone(b.Prompt), Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}
		require.NoError(t, o.s.AddRequest(c))
		if !bug {
			assert.Len(t, o.s.lookup(c, nil), 1, "c hits the block before the failed one")
			so := o.s.Schedule()
			assert.Empty(t, o.s.offload.loads, "host memory forgot the failed block: c computes it")
			require.Len(t, so.Scheduled, 1)
			assert.Equal(t, 4, so.Scheduled[0].Start)
			o.s.UpdateFromOutput(so, o.s.Sample(so, ToyModel{}))
			for range 8 {
				o.step()
			}
			assert.Zero(t, c.kvGarbage)
			assert.Equal(t, Tokens(ToyModel{}, c.Prompt, 4), c.Output)
			continue
		}
		assert.Len(t, o.s.lookup(c, nil), 2, "the failed block is cached too")
		so := o.s.Schedule()
		require.Len(t, so.Scheduled, 1)
		assert.Equal(t, 8, so.Scheduled[0].Start, "c hit both blocks")
		o.s.UpdateFromOutput(so, o.s.Sample(so, ToyModel{}))
		assert.NotZero(t, c.kvGarbage, "c read the failed block's KV")
		assert.NotEqual(t, Tokens(ToyModel{}, c.Prompt, 1), c.Output)
	}
}

// TestAResetsPreemptionIsReportedByTheNextStep: a reset of the prefix
// cache preempts a between steps with its store's copy in flight. vLLM's
// worker learns of the preemption with the next scheduler output, whose
// step reports the store: here a step of nothing, which holds a back for
// its own store, reports it (Reported, so that the core runs the next step
// rather than wait for an input), and the step after admits a. Under
// async scheduling the store was once left to the output of the step
// before the reset, which had come back already: a waited for ever.
func TestAResetsPreemptionIsReportedByTheNextStep(t *testing.T) {
	for _, async := range []bool{false, true} {
		o := newOffloadRun(t, Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8, AsyncScheduling: async})
		s := o.s
		a := o.add("a", 1, 4)
		o.step() // the prompt: blocks 0 and 1 full, their copy in flight
		require.Len(t, o.jobs, 1)
		preempted, ok := s.ResetPrefixCache(true)
		require.True(t, ok)
		require.Equal(t, []*Request{a}, preempted)
		require.True(t, s.offload.stores["a"].flushed)
		so := s.Schedule()
		assert.Empty(t, so.Scheduled)
		assert.Equal(t, []*Request{a}, so.LoadWaiting, "a waits for its own store")
		assert.True(t, s.Reported(), "the step of nothing reports it")
		assert.NotContains(t, s.offload.stores, "a")
		so = s.Schedule()
		require.Len(t, so.Scheduled, 1)
		assert.Same(t, a, so.Scheduled[0].Req)
		assert.False(t, s.Reported())
		s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		for range 8 {
			o.step()
		}
		assert.Equal(t, Tokens(ToyModel{}, a.Prompt, 4), a.Output, "async %v", async)
	}
}

// TestALandedRequestGoesBeforeOneThatCannotBeAdmitted: b's KV loads from
// host memory into half the GPU's cache while c runs; c runs out of room
// and preempts itself, back at the head of the queue, and b's load lands.
// c cannot be admitted again while b holds its blocks, and nothing runs to
// give any back: b, whose KV landed, goes first, runs to its end, and c
// follows. Planted, core/kv-loaded-waits-behind-blocked (the class of
// vLLM's #45387) holds b behind c: every step schedules nothing, with
// nothing running and nothing in flight — the state the core's guard kills
// it in rather than spin.
func TestALandedRequestGoesBeforeOneThatCannotBeAdmitted(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := Config{BlockSize: 4, NumBlocks: 7, EnablePrefixCaching: true, KVOffloadBlocks: 8}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreKVLoadedWaitsBehindBlocked.Name+"=return")
		}
		o := newOffloadRun(t, cfg)
		s := o.s
		o.offloadAndForget()
		land := func() { // every store's copies land as soon as they start
			for _, j := range o.jobs {
				_, _, _, _ = s.CompleteStore(j.ID, j.Job)
			}
			o.jobs = o.jobs[:0]
		}
		c := o.add("c", 101, 10)
		o.step()
		land()
		b := o.add("b", 1, 4)
		o.step()
		require.Contains(t, s.offload.loads, "b", "b's load started")
		require.Equal(t, StatusRunning, c.Status)
		for range 8 {
			if c.Status == StatusPreempted {
				break
			}
			o.step()
			land()
		}
		require.Equal(t, StatusPreempted, c.Status, "c ran out of room")
		_, how, _ := s.CompleteLoad("b")
		require.Equal(t, LoadLanded, how)
		so := s.Schedule()
		if bug {
			assertStepsOfNothing(t, s, so, 2, "b waits behind c", "c could run once b gave its blocks back")
			continue
		}
		require.Len(t, so.Scheduled, 1)
		assert.Same(t, b, so.Scheduled[0].Req, "b goes first")
		s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		for range 30 {
			o.step()
			land()
		}
		assert.Equal(t, Tokens(ToyModel{}, b.Prompt, 4), b.Output)
		assert.Equal(t, Tokens(ToyModel{}, c.Prompt, 10), c.Output)
	}
}

// TestARequestWhoseKVLandedDoesNotCountTowardMaxNumSeqs plants
// core/max-num-seqs-counts-deferred, the class of vLLM's #53130: with
// MaxNumSeqs 1, b's KV loads from host memory and lands with nothing
// running. Fixed, a request that waits for its load, or whose load
// landed, takes no seat: b is admitted, and runs to its end. Planted, b
// counts toward the cap itself, the admission loop stops before it, and
// every step schedules nothing with nothing in flight: the state the
// core's guard ends.
func TestARequestWhoseKVLandedDoesNotCountTowardMaxNumSeqs(t *testing.T) {
	for _, bug := range []bool{false, true} {
		cfg := Config{BlockSize: 4, NumBlocks: 32, EnablePrefixCaching: true, KVOffloadBlocks: 8, MaxNumSeqs: 1}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreMaxNumSeqsCountsDeferred.Name+"=return")
		}
		o := newOffloadRun(t, cfg)
		s := o.s
		o.offloadAndForget()
		b := o.add("b", 1, 4)
		o.step()
		require.Contains(t, s.offload.loads, "b", "b's load started (bug %v)", bug)
		_, how, _ := s.CompleteLoad("b")
		require.Equal(t, LoadLanded, how)
		require.Equal(t, 1, s.deferred(), "b waits with its KV landed")
		so := s.Schedule()
		if bug {
			assertStepsOfNothing(t, s, so, 1, "b fills the one seat it waits for", "b fits")
			continue
		}
		require.Len(t, so.Scheduled, 1)
		assert.Same(t, b, so.Scheduled[0].Req)
		s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		for range 8 {
			o.step()
		}
		assert.Equal(t, Tokens(ToyModel{}, b.Prompt, 4), b.Output)
	}
}

// assertStepsOfNothing asserts that so, a step, scheduled nothing (why),
// and so does the next, with nothing running and waiting requests that
// wait for no copy in flight, none of which could never fit (fits): the
// state the core's guard against a step of nothing ends.
func assertStepsOfNothing(t *testing.T, s *Scheduler, so *SchedulerOutput, waiting int, why, fits string) {
	t.Helper()
	assert.Empty(t, so.Scheduled, why)
	s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
	assert.Empty(t, s.Schedule().Scheduled, "and again: nothing will ever run")
	st := s.Stats()
	assert.Zero(t, st.Running)
	assert.Equal(t, waiting, st.Waiting)
	assert.Zero(t, s.TransfersInFlight())
	assert.False(t, s.WaitsForLoad())
	_, rejected := s.RejectUnschedulable()
	assert.False(t, rejected, fits)
}
