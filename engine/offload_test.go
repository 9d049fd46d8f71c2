package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// offloadConfig is a cache of 15 usable blocks of 4 tokens, with host
// memory for 32 of them: a 22-token prompt's blocks are put out of the
// GPU by two prompts of 24 and come back from host memory. faults,
// unless empty, are armed in it.
func offloadConfig(t *testing.T, faults string) engine.Config {
	cfg := engine.Config{EnablePrefixCaching: true, BlockSize: 4, NumBlocks: 16, KVOffloadBlocks: 32, StepTime: 200 * time.Microsecond}
	if faults != "" {
		cfg.Faults = rttest.Armed(t, faults)
	}
	return cfg
}

// fill24 are prompts of 24 words that share nothing with pauseLong.
var fill24 = [2]string{
	strings.Repeat("red green blue ", 8),
	strings.Repeat("north south east west ", 6),
}

// putOut runs the two prompts of fill24 at once, which put most of
// pauseLong's blocks out of the GPU's prefix cache into host memory.
func putOut(t *testing.T, rt task.Runtime, e *engine.AsyncLLM) {
	g := task.NewGroup(rt, "fillers")
	for i, prompt := range fill24 {
		g.Go("filler", func() {
			r, err := e.AddRequest("fill-"+string(rune('a'+i)), prompt, engine.Params{MaxTokens: 4, IgnoreEOS: true})
			require.NoError(t, err)
			assert.Equal(t, want(prompt, 4), tokensOf(engine.Cumulative, drain(t, r)))
		})
	}
	g.Wait()
}

// loadingRequest runs a request of pauseLong and then putOut, so that the
// GPU's prefix cache keeps the prompt's first block and host memory the
// others, then adds id, a request of pauseLong with p, and lets 50µs
// pass: its KV is loading from host memory.
func loadingRequest(t *testing.T, rt task.Runtime, e *engine.AsyncLLM, id string, p engine.Params) *engine.Request {
	t.Helper()
	r, err := e.AddRequest("first", pauseLong, engine.Params{MaxTokens: 4, IgnoreEOS: true})
	require.NoError(t, err)
	drain(t, r)
	putOut(t, rt, e)
	r, err = e.AddRequest(id, pauseLong, p)
	require.NoError(t, err)
	rt.Sleep(50 * time.Microsecond)
	return r
}

// offloadRun runs body on an engine of cfg under chaos, with the checker
// (checkedRun), and counts the KV loads the core started and those that
// landed after their request ended.
func offloadRun(t *testing.T, seed uint64, cfg engine.Config, body func(rt task.Runtime, e *engine.AsyncLLM)) (c *props.Checker, loads, late int, err error) {
	also := cfg.Observer
	cfg.Observer = func(ev engine.Event) {
		if also != nil {
			also(ev)
		}
		switch {
		case ev.Kind == core.EventKVLoad:
			loads++
		case ev.Kind == core.EventKVLoaded && ev.Finished:
			late++
		}
	}
	c, err = checkedRun(t, seed, sim.Chaos(), cfg, body)
	return c, loads, late, err
}

// TestKVOffloadLoadsWhatTheGPUCachePutOut: a prompt's blocks, put out of
// the GPU's prefix cache by others, come back from host memory for the
// next request of it, which waits for the load and samples its own
// tokens; every block goes back. Without offloading the same run loads
// nothing.
func TestKVOffloadLoadsWhatTheGPUCachePutOut(t *testing.T) {
	for _, offload := range []bool{true, false} {
		cfg := offloadConfig(t, "")
		if !offload {
			cfg.KVOffloadBlocks = 0
		}
		for seed := uint64(1); seed <= 8; seed++ {
			c, loads, _, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
				p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
				run := func(id, prompt string) {
					r, err := e.AddRequest(id, prompt, p)
					require.NoError(t, err)
					assert.Equal(t, want(prompt, 4), tokensOf(engine.Cumulative, drain(t, r)), "seed %d %s", seed, id)
				}
				run("first", pauseLong)
				putOut(t, rt, e)
				run("again", pauseLong)
			})
			require.NoError(t, err, "seed %d", seed)
			require.NoError(t, c.Finish(), "seed %d", seed)
			if offload {
				assert.Equal(t, 1, loads, "seed %d: the second run of the prompt loads its blocks", seed)
			} else {
				assert.Zero(t, loads, "seed %d", seed)
			}
		}
	}
}

// TestAnAbortWhileKVLoadsKeepsTheBlocksUntilItLands: a request aborted
// while its KV loads keeps its blocks until the copy lands, so the
// request added behind it never gets one the copy then overwrites; with
// core/kv-load-frees-on-abort it does, and samples from another's KV.
func TestAnAbortWhileKVLoadsKeepsTheBlocksUntilItLands(t *testing.T) {
	run := func(seed uint64, faults string) (*props.Checker, int, error) {
		cfg := offloadConfig(t, faults)
		c, _, late, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
			doomed := loadingRequest(t, rt, e, "doomed", p)
			e.Abort("doomed")
			_, _ = readAll(doomed)
			// 48 tokens: 12 blocks, the 9 free ones and 3 of those the
			// aborted request held, 2 of them the load's.
			next, err := e.AddRequest("next", strings.Repeat("one two three four ", 11), p)
			require.NoError(t, err)
			_, _ = readAll(next)
			require.NoError(t, e.WaitIdle(context.Background()))
		})
		return c, late, err
	}
	late := 0
	for seed := uint64(1); seed <= 16; seed++ {
		c, l, err := run(seed, "")
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		late += l
	}
	require.Positive(t, late, "some seeds abort the request while its KV loads")
	caught := 0
	for seed := uint64(1); seed <= 16; seed++ {
		c, _, err := run(seed, "core/kv-load-frees-on-abort=return")
		require.NoError(t, err, "seed %d", seed)
		if v := (*props.Violation)(nil); errors.As(c.Finish(), &v) {
			caught++
		}
	}
	t.Logf("caught on %d of 16 seeds", caught)
	assert.Positive(t, caught, "the copy lands in the blocks of the request behind")
}

// TestAResetDropsTheOffloadedKV: a reset of the prefix cache stands for a
// weight update, and the KV in host memory was computed by the old
// weights: the engine drops it with the cache, and the next request of
// the prompt computes it again. With core/reset-keeps-offloaded-kv,
// vLLM's default (reset_connector=False), it loads the stale KV and
// samples from it.
func TestAResetDropsTheOffloadedKV(t *testing.T) {
	run := func(seed uint64, faults string) (*props.Checker, int, error) {
		cfg := offloadConfig(t, faults)
		c, loads, _, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
			r, err := e.AddRequest("first", pauseLong, p)
			require.NoError(t, err)
			drain(t, r)
			require.NoError(t, e.WaitIdle(context.Background())) // its store to host memory landed
			reset, err := e.ResetPrefixCache(context.Background(), false)
			require.NoError(t, err)
			require.True(t, reset, "nothing runs")
			r, err = e.AddRequest("again", pauseLong, p)
			require.NoError(t, err)
			_, _ = readAll(r)
		})
		return c, loads, err
	}
	for seed := uint64(1); seed <= 4; seed++ {
		c, loads, err := run(seed, "")
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		assert.Zero(t, loads, "seed %d: nothing is left to load", seed)

		c, loads, err = run(seed, "core/reset-keeps-offloaded-kv=return")
		require.NoError(t, err, "seed %d", seed)
		assert.Equal(t, 1, loads, "seed %d: the stale KV is loaded", seed)
		var v *props.Violation
		require.ErrorAs(t, c.Finish(), &v, "seed %d", seed)
		assert.Equal(t, props.ModelTokens, v.Property, "seed %d", seed)
	}
}

// TestAPauseWaitsForAKVLoadToLand: a pause, or a sleep, taken while a
// request's KV loads takes effect once the copy landed, whatever its
// mode; the request then runs to its own tokens (or ends, aborted), and
// every block goes back. A sleep drops the KV in host memory with the
// KV cache: the prompt's next request computes it, the checker holding
// every token to the model's.
func TestAPauseWaitsForAKVLoadToLand(t *testing.T) {
	for _, mode := range []engine.PauseMode{engine.PauseAbort, engine.PauseWait, engine.PauseKeep} {
		for _, sleep := range []bool{false, true} {
			for seed := uint64(1); seed <= 4; seed++ {
				c, loads, _, err := offloadRun(t, seed, offloadConfig(t, ""), func(rt task.Runtime, e *engine.AsyncLLM) {
					ctx := context.Background()
					p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
					r := loadingRequest(t, rt, e, "loads", p)
					if sleep {
						require.NoError(t, e.Sleep(ctx, engine.SleepOptions{Level: 1, Mode: mode}))
						require.NoError(t, e.WakeUp(ctx))
					} else {
						require.NoError(t, e.PauseGeneration(ctx, engine.PauseOptions{Mode: mode}))
						require.NoError(t, e.ResumeGeneration(ctx))
					}
					outs, err := readAll(r)
					require.NoError(t, err)
					if mode != engine.PauseAbort {
						assert.Equal(t, want(pauseLong, 4), tokensOf(engine.Cumulative, outs), "seed %d mode %v sleep %v", seed, mode, sleep)
					}
					// After a sleep, host memory holds nothing of the KV
					// before it: the prompt computes again.
					r, err = e.AddRequest("after", pauseLong, p)
					require.NoError(t, err)
					drain(t, r)
				})
				require.NoError(t, err, "seed %d mode %v sleep %v", seed, mode, sleep)
				require.NoError(t, c.Finish(), "seed %d mode %v sleep %v", seed, mode, sleep)
				assert.GreaterOrEqual(t, loads, 1, "seed %d mode %v sleep %v", seed, mode, sleep)
			}
		}
	}
}

// TestAResetThatMayPreemptAbandonsTheLoadsInFlight: a reset of the prefix
// cache that may preempt never fails for a KV load in flight: what the
// copy brings is of the weights before it, so the load is abandoned, and
// once it lands its request gives its blocks back and computes its
// prompt again, to its own tokens (the checker holds them to the model's
// in every seed, the reset landing before, during or after the load).
func TestAResetThatMayPreemptAbandonsTheLoadsInFlight(t *testing.T) {
	abandoned := 0
	for seed := uint64(1); seed <= 8; seed++ {
		cfg := offloadConfig(t, "")
		cfg.Observer = func(ev engine.Event) {
			if ev.Kind == core.EventKVLoaded && ev.Text == "abandoned" {
				abandoned++
			}
		}
		c, loads, _, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			ctx := context.Background()
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
			r := loadingRequest(t, rt, e, "loads", p)
			reset, err := e.ResetPrefixCache(ctx, true)
			require.NoError(t, err)
			assert.True(t, reset, "seed %d: a reset that may preempt succeeds", seed)
			assert.Equal(t, want(pauseLong, 4), tokensOf(engine.Cumulative, drain(t, r)), "seed %d", seed)
		})
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		assert.LessOrEqual(t, loads, 2, "seed %d: a second load after the abandoned one, at most", seed)
	}
	assert.Positive(t, abandoned, "in some seeds the reset comes while the load is in flight")
}

// TestAReloadWhileKVLoadsComputesAgain: an adapter's weights reloaded in
// place while a request of it loads its KV make that KV the old weights':
// the request gives the loaded blocks back when it would be admitted and
// computes its prompt again, the checker holding its tokens to the new
// revision's.
func TestAReloadWhileKVLoadsComputesAgain(t *testing.T) {
	loads := 0
	for seed := uint64(1); seed <= 8; seed++ {
		cfg := offloadConfig(t, "")
		cfg.EnableLoRA = true
		c, n, _, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			ctx := context.Background()
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true, LoRA: &engine.LoRARequest{Name: "policy", ID: 1}}
			r, err := e.AddRequest("first", pauseLong, p)
			require.NoError(t, err)
			drain(t, r)
			putOut(t, rt, e)
			r, err = e.AddRequest("loads", pauseLong, p)
			require.NoError(t, err)
			rt.Sleep(50 * time.Microsecond)
			require.NoError(t, e.AddLoRA(ctx, engine.LoRARequest{Name: "policy", ID: 1, LoadInplace: true}))
			drain(t, r)
		})
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		loads += n
	}
	assert.GreaterOrEqual(t, loads, 4, "the second request of the adapter loads its KV in most seeds")
}

// TestAnEndedRequestHoldsItsBlocksUntilItsStoreLands: a request's full
// blocks are copied to host memory as its steps fill them — the prompt's
// five, then the sixth its decoding fills — and once it ended they stay
// in use until the last copy lands, as vLLM's scheduler delays the free
// until finished_sending: a reset of the prefix cache that may not
// preempt is refused meanwhile, as blocks are in use; WaitIdle waits for
// the store. The next request of the prompt loads what the store brought,
// unless the reset came after the store landed and dropped it.
func TestAnEndedRequestHoldsItsBlocksUntilItsStoreLands(t *testing.T) {
	refusedInFlight := 0
	for seed := uint64(1); seed <= 8; seed++ {
		var stores []int // blocks, copy by copy
		stored, completed, reset := 0, 0, false
		cfg := offloadConfig(t, "")
		cfg.Observer = func(ev engine.Event) {
			switch ev.Kind {
			case core.EventKVStore:
				stores = append(stores, ev.Held)
			case core.EventKVStored:
				stored++
				if ev.Finished {
					completed++
				}
			case core.EventCacheReset:
				reset = ev.Finished
				if len(stores) > stored {
					assert.False(t, ev.Finished, "seed %d: a reset with a store in flight: its blocks are in use", seed)
					refusedInFlight++
				}
			}
		}
		c, loads, _, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
			r, err := e.AddRequest("first", pauseLong, p)
			require.NoError(t, err)
			drain(t, r)
			_, err = e.ResetPrefixCache(context.Background(), false)
			require.NoError(t, err)
			require.NoError(t, e.WaitIdle(context.Background()))
			assert.Equal(t, []int{5, 1}, stores, "seed %d: the 5 full blocks of pauseLong's 23 tokens, then the one its first tokens fill", seed)
			assert.Equal(t, 2, stored, "seed %d: WaitIdle waits for the store", seed)
			assert.Equal(t, 1, completed, "seed %d: the last copy completes the store", seed)
			assert.Zero(t, e.Stats().KVUsedBlocks, "seed %d", seed)
			putOut(t, rt, e)
			r, err = e.AddRequest("again", pauseLong, p)
			require.NoError(t, err)
			assert.Equal(t, want(pauseLong, 4), tokensOf(engine.Cumulative, drain(t, r)), "seed %d", seed)
		})
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
		if reset {
			assert.Zero(t, loads, "seed %d: the reset dropped what the store brought", seed)
		} else {
			assert.Equal(t, 1, loads, "seed %d: the second run of the prompt loads what the store brought", seed)
		}
	}
	assert.Positive(t, refusedInFlight, "some seeds reset while the store is in flight")
}

// TestAStoreKeepsTheBlocksUntilItLands: the blocks of an ended request
// stay its store's until the copy lands, so a request added behind it
// never overwrites what the store reads; with core/kv-store-frees-early
// they go back at the end, a long prompt takes and writes them, the store
// keeps that KV under the ended request's hashes, and the next request of
// its prompt loads it and samples from another's KV.
func TestAStoreKeepsTheBlocksUntilItLands(t *testing.T) {
	run := func(seed uint64, faults string) (*props.Checker, error) {
		cfg := offloadConfig(t, faults)
		c, _, _, err := offloadRun(t, seed, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
			putOut(t, rt, e) // every block used once: the next are taken from the freed
			require.NoError(t, e.WaitIdle(context.Background()))
			r, err := e.AddRequest("first", pauseLong, p)
			require.NoError(t, err)
			drain(t, r)
			// 48 tokens: 12 blocks, more than the 8 the store leaves free.
			next, err := e.AddRequest("next", strings.Repeat("one two three four ", 11), p)
			require.NoError(t, err)
			_, _ = readAll(next)
			require.NoError(t, e.WaitIdle(context.Background()))
			putOut(t, rt, e)
			again, err := e.AddRequest("again", pauseLong, p)
			require.NoError(t, err)
			_, _ = readAll(again)
		})
		return c, err
	}
	for seed := uint64(1); seed <= 16; seed++ {
		c, err := run(seed, "")
		require.NoError(t, err, "seed %d", seed)
		require.NoError(t, c.Finish(), "seed %d", seed)
	}
	caught := 0
	for seed := uint64(1); seed <= 16; seed++ {
		c, err := run(seed, "core/kv-store-frees-early=return")
		require.NoError(t, err, "seed %d", seed)
		var v *props.Violation
		if errors.As(c.Finish(), &v) {
			assert.Equal(t, props.ModelTokens, v.Property, "seed %d", seed)
			caught++
		}
	}
	t.Logf("caught on %d of 16 seeds", caught)
	assert.Positive(t, caught, "the store reads the blocks the request behind wrote")
}

// TestHostMemoryIsCounted: the engine reports host memory's traffic under
// vLLM's metric names. first's 23 tokens, then the fillers' 24 each, are
// looked up with nothing cached anywhere; again finds its first block in
// the GPU's cache and the next four in host memory: 19 tokens queried,
// 16 of them hits, four blocks loaded back. Eighteen blocks were stored,
// six of each prompt's; host memory of 32 put none out and always found
// room. Without host memory none of it is reported.
func TestHostMemoryIsCounted(t *testing.T) {
	for _, offload := range []bool{true, false} {
		cfg := offloadConfig(t, "")
		if !offload {
			cfg.KVOffloadBlocks = 0
		}
		var st engine.Stats
		c, _, _, err := offloadRun(t, 1, cfg, func(rt task.Runtime, e *engine.AsyncLLM) {
			drain(t, loadingRequest(t, rt, e, "again", engine.Params{MaxTokens: 4, IgnoreEOS: true}))
			require.NoError(t, e.WaitIdle(context.Background()))
			st = e.Stats()
		})
		require.NoError(t, err)
		require.NoError(t, c.Finish())
		var b strings.Builder
		require.NoError(t, st.WritePrometheus(&b))
		if !offload {
			assert.Zero(t, st.KVOffload)
			assert.NotContains(t, b.String(), "kv_offload")
			assert.NotContains(t, b.String(), "external_prefix_cache")
			continue
		}
		assert.Equal(t, engine.KVOffloadStats{Queries: 23 + 24 + 24 + 19, Hits: 16, StoredBlocks: 18, LoadedBlocks: 4,
			Blocks: 18, Capacity: 32, Policy: engine.OffloadLRU}, st.KVOffload)
		assert.Contains(t, b.String(), "vllm:external_prefix_cache_queries_total 90\nvllm:external_prefix_cache_hits_total 16\n")
		assert.Contains(t, b.String(), `llmdst:kv_offload_blocks_total{transfer_type="GPU_to_CPU"} 18`+"\n"+`llmdst:kv_offload_blocks_total{transfer_type="CPU_to_GPU"} 4`+"\n")
		assert.Contains(t, b.String(), `vllm:kv_offload_block_eviction_total{policy="lru"} 0`+"\nvllm:kv_offload_allocation_failure_total 0\nvllm:kv_offload_stores_skipped_total 0\n")
		assert.Contains(t, b.String(), "llmdst:kv_offload_used_blocks 18\nllmdst:kv_offload_num_blocks 32\n")
		assert.Equal(t, int64(4), st.PrefixCacheHits, "the GPU's cache gave again its first block")
	}
}

// TestHostMemoryIsCountedCoreByCore: with several cores each core's host
// memory is a series of its own, labelled with its rank before the
// metric's own labels, and the engine's counts are their sums.
func TestHostMemoryIsCountedCoreByCore(t *testing.T) {
	c0 := engine.KVOffloadStats{Queries: 9, Hits: 8, StoredBlocks: 2, Evicted: 1, StoreFailures: 3, Blocks: 2, Capacity: 4, Policy: engine.OffloadARC}
	c1 := engine.KVOffloadStats{Queries: 5, LoadedBlocks: 2, Evicted: 2, StoresSkipped: 6, Blocks: 1, Capacity: 4, Policy: engine.OffloadARC}
	var s engine.Stats
	s.DataParallelSize = 2
	s.Cores = []engine.CoreStats{{KVOffload: c0}, {KVOffload: c1}}
	s.KVOffload.Add(c0)
	s.KVOffload.Add(c1)
	assert.Equal(t, engine.KVOffloadStats{Queries: 14, Hits: 8, StoredBlocks: 2, LoadedBlocks: 2, Evicted: 3, StoreFailures: 3, StoresSkipped: 6, Blocks: 3, Capacity: 8, Policy: engine.OffloadARC}, s.KVOffload)
	ms := s.Metrics()
	assert.Contains(t, ms, engine.Metric{Name: `vllm:kv_offload_block_eviction_total{engine="0",policy="arc"}`, Value: 1})
	assert.Contains(t, ms, engine.Metric{Name: `vllm:kv_offload_block_eviction_total{engine="1",policy="arc"}`, Value: 2})
	assert.Contains(t, ms, engine.Metric{Name: `vllm:external_prefix_cache_hits_total{engine="0"}`, Value: 8})
	assert.Contains(t, ms, engine.Metric{Name: `llmdst:kv_offload_blocks_total{engine="1",transfer_type="CPU_to_GPU"}`, Value: 2})
	assert.Contains(t, ms, engine.Metric{Name: `vllm:kv_offload_allocation_failure_total{engine="0"}`, Value: 3})
	assert.Contains(t, ms, engine.Metric{Name: `vllm:kv_offload_stores_skipped_total{engine="1"}`, Value: 6})
	for _, m := range ms {
		assert.NotEqual(t, "vllm:external_prefix_cache_queries_total", m.Name, "no sum beside the cores' series")
	}
}

// TestAFailedKVLoadEndsWithAnErrorOrComputesAgain: the second request of a
// prompt whose blocks come back from host memory, with every load's last
// block failing (core/kv-load-fails), ends with FinishError and no token
// under vLLM's kv_load_failure_policy fail, and samples the model's tokens
// under recompute, which computes the failed block again — simulated under
// chaos, and on goroutines. Host memory counts the failed load
// (llmdst:kv_offload_failed_loads_total).
func TestAFailedKVLoadEndsWithAnErrorOrComputesAgain(t *testing.T) {
	for _, policy := range []engine.KVLoadFailurePolicy{engine.LoadFailureFail, engine.LoadFailureRecompute} {
		cfg := offloadConfig(t, "core/kv-load-fails=return")
		cfg.KVLoadFailurePolicy = policy
		body := func(rt task.Runtime, e *engine.AsyncLLM) {
			p := engine.Params{MaxTokens: 4, IgnoreEOS: true}
			drain(t, add(t, e, "first", pauseLong, p))
			putOut(t, rt, e)
			outs := drain(t, add(t, e, "again", pauseLong, p))
			end := last(outs)
			require.True(t, end.Finished)
			st := e.Stats()
			assert.Equal(t, int64(1), st.KVOffload.FailedLoads, "%s", policy)
			assert.Contains(t, st.Metrics(), engine.Metric{Name: "llmdst:kv_offload_failed_loads_total", Value: 1})
			if policy == engine.LoadFailureFail {
				assert.Equal(t, engine.FinishError, end.FinishReason, "%s", policy)
				assert.Empty(t, end.TokenIDs)
			} else {
				assert.Equal(t, want(pauseLong, 4), tokensOf(engine.Cumulative, outs), "%s", policy)
			}
		}
		for seed := uint64(1); seed <= 8; seed++ {
			failed := 0
			cfg := cfg
			cfg.Observer = func(ev engine.Event) {
				if ev.Kind == core.EventKVLoaded && ev.Text == "failed" {
					failed++
				}
			}
			c, err := checkedRun(t, seed, sim.Chaos(), cfg, body)
			require.NoError(t, err, "seed %d", seed)
			require.NoError(t, c.Finish(), "seed %d", seed)
			assert.Equal(t, 1, failed, "seed %d %s: the one load failed", seed, policy)
		}
		body(task.Real(), newEngine(t, task.Real(), cfg))
	}
}
