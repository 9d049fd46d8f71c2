package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBatchesTooSmallForAStepAreNotKept: a final frame put alone comes in a
// batch of room 1. Kept, it would be handed out first and turned down by
// every step of two frames or more, which would then allocate again.
func TestBatchesTooSmallForAStepAreNotKept(t *testing.T) {
	hits := 0
	for range 20 { // the race detector's sync.Pool drops a quarter of what it is given
		small := &Outputs{Frames: make([]Frame, 1)}
		small.Release()
		big, room := newBatch(minBatchRoom)
		big.Frames = room
		big.Release()
		out, room := newBatch(2)
		assert.NotSame(t, small, out)
		if out == big {
			hits++
		}
		out.Frames = room
		out.Release()
	}
	assert.Positive(t, hits, "a released batch with room comes back")
}

// TestBigBatchesAreNotKept: a step of many requests is cheaper to allocate
// afresh than to clear on one core and fill on another, and a big batch
// kept would be wasted on small steps.
func TestBigBatchesAreNotKept(t *testing.T) {
	for range 20 {
		big, room := newBatch(256)
		big.Frames = room[:256]
		big.Release()
		out, _ := newBatch(2)
		assert.NotSame(t, big, out)
		again, _ := newBatch(256)
		assert.NotSame(t, big, again)
	}
}
