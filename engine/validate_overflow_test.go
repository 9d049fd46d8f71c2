package engine_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestHugeMaxTokensIsCheckedAgainstTheCache: a MaxTokens so large that
// prompt plus MaxTokens overflows an int ("no limit but the model length")
// is checked against the KV cache like any other: a request whose model
// length needs more blocks than the cache has is refused up front, not
// accepted and ended later with reason error after a share of its tokens.
func TestHugeMaxTokensIsCheckedAgainstTheCache(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		e := newEngine(t, rt, engine.Config{MaxModelLen: 64, BlockSize: 4, NumBlocks: 8})
		defer e.Close()
		for _, n := range []int{math.MaxInt, math.MaxInt - 1, math.MaxInt/2 + 1} {
			r, err := e.AddRequest("huge", "hello", engine.Params{MaxTokens: n, Output: engine.Delta})
			if err == nil {
				outs := drain(t, r)
				t.Fatalf("MaxTokens %d was accepted; the request ended with reason %q after %d tokens", n, last(outs).FinishReason, len(tokensOf(engine.Delta, outs)))
			}
			require.ErrorIs(t, err, engine.ErrInvalidRequest)
			assert.Contains(t, err.Error(), "needs 16 KV blocks of 4 tokens for 64 tokens (prompt and MaxTokens), but the cache has only 7 usable (8 blocks, one of them vLLM's null block)")
		}
		// The model length is what bounds a request that fits the cache:
		// its 16 tokens fill the 4 usable blocks of 5.
		big := newEngine(t, rt, engine.Config{MaxModelLen: 16, BlockSize: 4, NumBlocks: 5})
		defer big.Close()
		outs := drain(t, add(t, big, "fits", "hello", engine.Params{MaxTokens: math.MaxInt, Output: engine.Delta}))
		assert.Equal(t, want("hello", 15), tokensOf(engine.Delta, outs))
		assert.Equal(t, engine.FinishLength, last(outs).FinishReason)
	})
}
