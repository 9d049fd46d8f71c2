package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
