package core_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
)

// TestBlockPoolOrder checks vLLM's free queue order: blocks never handed
// out first, in order of id, then freed blocks in the order they were
// freed; a touched block leaves the middle of the queue; the null block
// (0) is never handed out.
func TestBlockPoolOrder(t *testing.T) {
	type op struct {
		kind string // pop, free, touch
		id   int32  // for free and touch; for pop, the id expected
	}
	tests := []struct {
		name      string
		numBlocks int
		ops       []op
		order     []int32
	}{
		{"untouched in order of id", 5, nil, []int32{1, 2, 3, 4}},
		{"pops from the head", 5, []op{{"pop", 1}, {"pop", 2}}, []int32{3, 4}},
		{"freed go to the tail, in order of freeing", 5,
			[]op{{"pop", 1}, {"pop", 2}, {"pop", 3}, {"free", 2}, {"free", 1}}, []int32{4, 2, 1}},
		{"freed come after every untouched block", 6,
			[]op{{"pop", 1}, {"free", 1}, {"pop", 2}}, []int32{3, 4, 5, 1}},
		{"after the untouched, the first freed goes first", 4,
			[]op{{"pop", 1}, {"pop", 2}, {"pop", 3}, {"free", 3}, {"free", 1}, {"pop", 3}}, []int32{1}},
		{"touch takes a free block out of the middle", 5,
			[]op{{"pop", 1}, {"pop", 2}, {"pop", 3}, {"free", 1}, {"free", 2}, {"free", 3}, {"touch", 2}}, []int32{4, 1, 3}},
		{"touch of the head and the tail", 5,
			[]op{{"pop", 1}, {"pop", 2}, {"pop", 3}, {"pop", 4}, {"free", 1}, {"free", 2}, {"free", 3}, {"touch", 1}, {"touch", 3}}, []int32{2}},
		{"a block held twice is free after both let go", 3,
			[]op{{"pop", 1}, {"touch", 1}, {"free", 1}}, []int32{2}},
		{"the null block is never handed out", 3,
			[]op{{"pop", 1}, {"pop", 2}, {"free", 1}, {"free", 2}, {"pop", 1}, {"pop", 2}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := core.NewBlockPool(core.Config{NumBlocks: tt.numBlocks}.WithDefaults())
			for _, o := range tt.ops {
				switch o.kind {
				case "pop":
					require.Equal(t, o.id, p.Pop())
				case "free":
					p.Free(o.id)
				case "touch":
					p.Touch(o.id)
				}
			}
			assert.Equal(t, tt.order, p.Order())
			assert.Equal(t, len(tt.order), p.NumFree())
		})
	}
}

// TestBlockPoolIsLazy checks that a pool of the default cache, 16,385
// blocks, knows only the blocks it has handed out.
func TestBlockPoolIsLazy(t *testing.T) {
	p := core.NewBlockPool(core.Config{}.WithDefaults())
	assert.Equal(t, 1, p.Len(), "the null block alone")
	assert.Equal(t, core.DefaultNumBlocks-1, p.NumFree())
	p.Pop()
	assert.Equal(t, 2, p.Len())
}

// TestEvictionDropsTheHash checks that a cached block handed out for new
// content leaves the cache, and that core/kv-keep-evicted-hash plants the
// bug of leaving it there.
func TestEvictionDropsTheHash(t *testing.T) {
	for _, armed := range []bool{false, true} {
		t.Run(map[bool]string{false: "disarmed", true: "armed"}[armed], func(t *testing.T) {
			cfg := core.Config{NumBlocks: 3, EnablePrefixCaching: true}
			if armed {
				cfg.Faults = rttest.Armed(t, failpoints.CoreKVKeepEvictedHash.Name+"=return")
			}
			p := core.NewBlockPool(cfg.WithDefaults())
			a, b := p.Pop(), p.Pop()
			p.Cache(a, 7)
			p.Cache(b, 8)
			p.Free(a)
			p.Free(b)
			got, ok := p.Lookup(7)
			require.True(t, ok, "a freed cached block stays cached")
			require.Equal(t, a, got)
			require.Equal(t, a, p.Pop(), "the first freed is the first handed out")
			_, ok = p.Lookup(7)
			assert.Equal(t, armed, ok, "its hash is dropped, unless the bug is planted")
			got, ok = p.Lookup(8)
			assert.True(t, ok, "the other cached block stays")
			assert.Equal(t, b, got)
		})
	}
}

// TestDuplicateHashes checks that two blocks cached under one hash are
// both kept, a lookup finds the first, and evicting it leaves the second.
func TestDuplicateHashes(t *testing.T) {
	p := core.NewBlockPool(core.Config{NumBlocks: 4, EnablePrefixCaching: true}.WithDefaults())
	a, b, c := p.Pop(), p.Pop(), p.Pop()
	p.Cache(a, 7)
	p.Cache(b, 7)
	p.Cache(c, 7)
	got, _ := p.Lookup(7)
	assert.Equal(t, a, got)
	p.Free(b)
	p.Free(a)
	require.Equal(t, b, p.Pop())
	got, _ = p.Lookup(7)
	assert.Equal(t, a, got, "evicting the second leaves the first")
	require.Equal(t, a, p.Pop())
	got, ok := p.Lookup(7)
	assert.True(t, ok)
	assert.Equal(t, c, got, "evicting the first leaves the third")
}
