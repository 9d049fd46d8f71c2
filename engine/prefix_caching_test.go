package engine_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/task"
)

// TestPrefixCachingStats checks that the engine passes EnablePrefixCaching
// to its core and reports vLLM's prefix cache counters: a second request
// with the same prompt of 10 words (10 tokens, blocks of 4) finds 8 of its
// tokens cached, two full blocks (the last token is always computed), and
// gets the same tokens.
func TestPrefixCachingStats(t *testing.T) {
	prompt := "the of and to in is it you that he"
	for _, caching := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[caching], func(t *testing.T) {
			var mu sync.Mutex
			var hits []engine.Event
			observe := func(ev engine.Event) {
				if ev.Kind == core.EventPrefixHit {
					mu.Lock()
					hits = append(hits, ev)
					mu.Unlock()
				}
			}
			e := newEngine(t, task.Real(), engine.Config{BlockSize: 4, EnablePrefixCaching: caching, Observer: observe})
			defer e.Close()
			p := engine.Params{MaxTokens: 3}
			first := tokensOf(engine.Cumulative, drain(t, add(t, e, "a", prompt, p)))
			second := tokensOf(engine.Cumulative, drain(t, add(t, e, "b", prompt, p)))
			assert.Equal(t, want(prompt, 3), first)
			assert.Equal(t, want(prompt, 3), second)
			st := e.Stats()
			var b strings.Builder
			require.NoError(t, st.WritePrometheus(&b))
			mu.Lock()
			defer mu.Unlock()
			if !caching {
				assert.Empty(t, hits)
				assert.Zero(t, st.PrefixCacheQueries)
				assert.Zero(t, st.PrefixCacheHits)
				assert.Contains(t, b.String(), "vllm:prefix_cache_queries_total 0\nvllm:prefix_cache_hits_total 0\n")
				return
			}
			assert.Equal(t, int64(20), st.PrefixCacheQueries, "two lookups of 10 tokens")
			assert.Equal(t, int64(8), st.PrefixCacheHits)
			if assert.Len(t, hits, 1, "only the second request finds anything cached") {
				assert.Equal(t, "b", hits[0].RequestID)
				assert.Equal(t, 8, hits[0].Held)
				assert.Contains(t, hits[0].String(), "core.prefix-hit b (")
				assert.Contains(t, hits[0].String(), "8 token(s) found cached")
			}
			assert.Zero(t, st.PrefixCachePreemptedQueries)
			assert.Zero(t, st.KVUsedBlocks, "cached blocks no request holds are free")
			assert.Contains(t, b.String(), "vllm:prefix_cache_queries_total 20\nvllm:prefix_cache_hits_total 8\n")
			ms := st.Metrics()
			assert.Equal(t, "vllm:prefix_cache_hits_total", ms[len(ms)-4].Name, "metrics are added at the end: the prefix cache's, then the three sleep gauges")
		})
	}
}
