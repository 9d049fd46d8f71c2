package engine

import (
	"fmt"
	"io"
)

// Stats are the engine's counters, named after vLLM's metrics.
type Stats struct {
	RequestsRunning    int   // vllm:num_requests_running
	RequestsWaiting    int   // vllm:num_requests_waiting
	PromptTokens       int64 // vllm:prompt_tokens_total
	GenerationTokens   int64 // vllm:generation_tokens_total
	Preemptions        int64 // vllm:num_preemptions_total
	StaleFramesDropped int64 // llmdst:stale_frames_dropped_total: frames for a request the frontend no longer holds
	FinishedStop       int64 // vllm:request_success_total{finished_reason="stop"}
	FinishedLength     int64 // vllm:request_success_total{finished_reason="length"}
	FinishedAbort      int64 // vllm:request_success_total{finished_reason="abort"}
	FinishedError      int64 // vllm:request_success_total{finished_reason="error"}
	KVUsedBlocks       int   // blocks requests hold: the null block is never counted
	KVNumBlocks        int   // the whole cache, Config.NumBlocks (vLLM's num_gpu_blocks), null block included
	// KVLeakedBlocks (llmdst:kv_leaked_blocks) is the most KV blocks the
	// core has found in use while it held no request: blocks that outlived
	// the requests that took them, which the cache has lost for good. 0 in
	// a correct engine; anything else is a bug worth an alert
	// (core.EventKVLeak names the first block and its taker).
	KVLeakedBlocks int
	// Sleeping and SleepLevel are the engine's sleep as its last Sleep or
	// WakeUp to return left it (vllm:engine_sleep_state): asleep at the
	// level Sleep was given, or awake — after any wake-up, a staged one's
	// first too, as vLLM records it (IsSleeping asks the core).
	Sleeping   bool
	SleepLevel int

	// The prefix cache's counts in tokens, with Config.EnablePrefixCaching
	// (core.SchedulerStats): a preempted request's lookups as it resumes
	// are counted apart, and, as in vLLM, not exported.
	PrefixCacheQueries          int64 // vllm:prefix_cache_queries_total
	PrefixCacheHits             int64 // vllm:prefix_cache_hits_total
	PrefixCachePreemptedQueries int64
	PrefixCachePreemptedHits    int64
}

// Stats returns a snapshot of the counters. Running, waiting, preemptions,
// KV usage and the prefix cache's counts are the core's as of its last change: an abort that leaves
// the core idle sends no batch, yet empties the running gauge.
func (e *AsyncLLM) Stats() Stats {
	e.mu.Lock()
	s := e.stats
	e.mu.Unlock()
	cs := e.core.Stats()
	s.RequestsRunning, s.RequestsWaiting, s.Preemptions = cs.Running, cs.Waiting, cs.Preemptions
	s.KVUsedBlocks, s.KVNumBlocks, s.KVLeakedBlocks = cs.KVUsedBlocks, cs.KVNumBlocks, e.core.KVLeaked()
	s.PrefixCacheQueries, s.PrefixCacheHits = cs.PrefixCacheQueries, cs.PrefixCacheHits
	s.PrefixCachePreemptedQueries, s.PrefixCachePreemptedHits = cs.PrefixCachePreemptedQueries, cs.PrefixCachePreemptedHits
	if v := e.sleep.Load(); v > 0 {
		s.Sleeping, s.SleepLevel = true, int(v-1)
	}
	return s
}

// Metric is one named value.
type Metric struct {
	Name  string
	Value float64
}

// KVCacheUsage is the share of the usable KV blocks in use, from 0 to 1
// (vllm:kv_cache_usage_perc): KVUsedBlocks over KVNumBlocks−1, as vLLM's
// BlockPool.get_usage leaves its null block out of the total, so that a
// cache whose every usable block is held reads 1.
func (s Stats) KVCacheUsage() float64 {
	usable := s.KVNumBlocks - 1
	if usable <= 0 {
		return 0
	}
	return float64(s.KVUsedBlocks) / float64(usable)
}

// Metrics returns the counters under vLLM's metric names, in a fixed order.
func (s Stats) Metrics() []Metric {
	return []Metric{
		{"vllm:num_requests_running", float64(s.RequestsRunning)},
		{"vllm:num_requests_waiting", float64(s.RequestsWaiting)},
		{"vllm:prompt_tokens_total", float64(s.PromptTokens)},
		{"vllm:generation_tokens_total", float64(s.GenerationTokens)},
		{"vllm:num_preemptions_total", float64(s.Preemptions)},
		{"vllm:kv_cache_usage_perc", s.KVCacheUsage()},
		{`vllm:request_success_total{finished_reason="stop"}`, float64(s.FinishedStop)},
		{`vllm:request_success_total{finished_reason="length"}`, float64(s.FinishedLength)},
		{`vllm:request_success_total{finished_reason="abort"}`, float64(s.FinishedAbort)},
		{`vllm:request_success_total{finished_reason="error"}`, float64(s.FinishedError)},
		{"llmdst:stale_frames_dropped_total", float64(s.StaleFramesDropped)},
		{"llmdst:kv_leaked_blocks", float64(s.KVLeakedBlocks)},
		{"vllm:prefix_cache_queries_total", float64(s.PrefixCacheQueries)},
		{"vllm:prefix_cache_hits_total", float64(s.PrefixCacheHits)},
		{`vllm:engine_sleep_state{sleep_state="awake"}`, flag(!s.Sleeping)},
		{`vllm:engine_sleep_state{sleep_state="weights_offloaded"}`, flag(s.Sleeping && s.SleepLevel == 1)},
		{`vllm:engine_sleep_state{sleep_state="discard_all"}`, flag(s.Sleeping && s.SleepLevel == 2)},
	}
}

// flag is a gauge's 1 or 0.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WritePrometheus writes the metrics in the Prometheus text format.
func (s Stats) WritePrometheus(w io.Writer) error {
	for _, m := range s.Metrics() {
		if _, err := fmt.Fprintf(w, "%s %g\n", m.Name, m.Value); err != nil {
			return err
		}
	}
	return nil
}
