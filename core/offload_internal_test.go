package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostMemoryKeepsTheMostRecentlyUsedBlocks: host memory holds its
// capacity in blocks, putting out the least recently used first; a block
// put again, or a load of it, is a use.
func TestHostMemoryKeepsTheMostRecentlyUsedBlocks(t *testing.T) {
	o := newKVOffload(3)
	held := func() []uint64 {
		var hs []uint64
		for e := o.lru.Front(); e != nil; e = e.Next() {
			hs = append(hs, e.Value.(*offloaded).hash)
		}
		return hs
	}
	o.put(1, 10)
	o.put(2, 20)
	o.put(3, 30)
	o.put(1, 11) // a use, and the newer word
	assert.Equal(t, []uint64{2, 3, 1}, held())
	o.put(4, 40) // 2 goes
	assert.Equal(t, []uint64{3, 1, 4}, held())
	assert.NotContains(t, o.byHash, uint64(2))
	assert.Equal(t, uint64(11), o.byHash[1].Value.(*offloaded).word)
	o.drop()
	assert.Empty(t, held())
	assert.Empty(t, o.byHash)
}

// TestConfigRefusesOffloadingWithoutPrefixCaching: host memory finds
// blocks by the prefix cache's hashes.
func TestConfigRefusesOffloadingWithoutPrefixCaching(t *testing.T) {
	assert.EqualError(t, Config{KVOffloadBlocks: 4}.WithDefaults().Validate(), "core: KVOffloadBlocks is 4 but prefix caching is off: offloaded blocks are found by the prefix cache's hashes")
	assert.EqualError(t, Config{KVOffloadBlocks: -1, EnablePrefixCaching: true}.WithDefaults().Validate(), "core: KVOffloadBlocks must be ≥ 0 (0: offloading off), got -1")
	assert.NoError(t, Config{KVOffloadBlocks: 4, EnablePrefixCaching: true}.WithDefaults().Validate())
}

// TestABlockOnItsWayToHostMemoryIsNotLoadableEarly: a request that ends
// while another's store still copies its blocks in (the same prompt, the
// same hashes) starts no store of its own, and puts nothing in host
// memory at once: the blocks stay unloadable until the first store lands.
func TestABlockOnItsWayToHostMemoryIsNotLoadableEarly(t *testing.T) {
	s := NewScheduler(Config{BlockSize: 4, NumBlocks: 16, EnablePrefixCaching: true, KVOffloadBlocks: 8}.WithDefaults())
	run := func(id string) {
		r := &Request{InternalID: id, ExternalID: id, Prompt: []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, Params: SamplingParams{MaxTokens: 4, IgnoreEOS: true}}
		require.NoError(t, s.AddRequest(r))
		for i := 0; !r.Status.Finished(); i++ {
			require.Less(t, i, 20, "%s never ended", id)
			so := s.Schedule()
			s.UpdateFromOutput(so, s.Sample(so, ToyModel{}))
		}
	}
	loadable := func(st *kvStore) (n int) {
		for _, c := range st.copies {
			if _, ok := s.offload.ready(c.hash); ok {
				n++
			}
		}
		return n
	}
	run("a")
	require.Equal(t, []string{"a"}, s.TakeStores())
	st := s.offload.stores["a"]
	require.Len(t, st.copies, 3, "the 12 tokens of a's full blocks")
	assert.Zero(t, loadable(st), "a's store has not landed")
	run("b")
	assert.Empty(t, s.TakeStores(), "b's blocks are on their way already")
	assert.Zero(t, loadable(st), "b's end made a's blocks loadable before a's store landed")
	r, n, abandoned := s.CompleteStore("a")
	assert.Equal(t, "a", r.InternalID)
	assert.Equal(t, 3, n)
	assert.False(t, abandoned)
	assert.Equal(t, 3, loadable(st), "a's store landed")
	assert.NoError(t, s.CheckBlocks())
}
