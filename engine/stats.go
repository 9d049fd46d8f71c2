package engine

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/core"
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
	// MaxLoRAs is the engine's LoRA slots (Config.LoRASlots), 0 with LoRA
	// off, and LoRAAdapters the adapters the core runs or keeps waiting
	// requests of, by id, as of its last change: vllm:lora_requests_info,
	// whose value is At, the time of the snapshot on the engine's clock
	// (vLLM's is the wall time of its last update), so that a router can
	// take the latest.
	MaxLoRAs     int
	LoRAAdapters []LoRAAdapterStats
	At           time.Time

	// The prefix cache's counts in tokens, with Config.EnablePrefixCaching
	// (core.SchedulerStats): a preempted request's lookups as it resumes
	// are counted apart, and, as in vLLM, not exported.
	PrefixCacheQueries          int64 // vllm:prefix_cache_queries_total
	PrefixCacheHits             int64 // vllm:prefix_cache_hits_total
	PrefixCachePreemptedQueries int64
	PrefixCachePreemptedHits    int64

	// KVOffload is host memory's counts and gauges, with
	// Config.KVOffloadBlocks (zero without): the external prefix cache's
	// queries and hits (vllm:external_prefix_cache_queries_total and
	// _hits_total), the blocks copied each way
	// (llmdst:kv_offload_blocks_total{transfer_type="GPU_to_CPU"} and
	// "CPU_to_GPU"), those put out for room
	// (vllm:kv_offload_block_eviction_total{policy=…}), the stores that
	// found none (vllm:kv_offload_allocation_failure_total), the blocks a
	// store threshold passed over (vllm:kv_offload_stores_skipped_total),
	// the loads that landed with a block invalid
	// (llmdst:kv_offload_failed_loads_total, Config.KVLoadFailurePolicy),
	// and the blocks held of host memory's (llmdst:kv_offload_used_blocks,
	// llmdst:kv_offload_num_blocks). See core.KVOffloadStats.
	KVOffload KVOffloadStats

	// SpecDecoding is speculative decoding's counts, with
	// Config.NumSpeculativeTokens (zero without): the drafts verified
	// (vllm:spec_decode_num_drafts_total), their tokens
	// (vllm:spec_decode_num_draft_tokens_total), the tokens accepted
	// (vllm:spec_decode_num_accepted_tokens_total) and, by position in a
	// draft, how often its token was
	// (vllm:spec_decode_num_accepted_tokens_per_pos_total{position=…}).
	// See core.SpecDecodingStats.
	SpecDecoding SpecDecodingStats

	// DataParallelSize is the engine's cores (Config.DataParallelSize, 1
	// for one): the cores' gauges and counts above are their sums, as a
	// dashboard sums vLLM's per-engine series, and KVNumBlocks counts a
	// null block a core. Cores holds each core's, by rank, with several
	// (nil with one).
	DataParallelSize int
	Cores            []CoreStats
}

// CoreStats are one data-parallel core's gauges and counts, as of its
// last change, and the frontend's counts of the requests routed to it:
// what vLLM labels engine="N". A stale frame is counted to the core that
// sent it.
type CoreStats struct {
	RequestsRunning, RequestsWaiting                           int
	Preemptions                                                int64
	KVUsedBlocks, KVNumBlocks                                  int
	KVLeakedBlocks                                             int
	PrefixCacheQueries, PrefixCacheHits                        int64
	PrefixCachePreemptedQueries, PrefixCachePreemptedHits      int64
	PromptTokens, GenerationTokens, StaleFramesDropped         int64
	FinishedStop, FinishedLength, FinishedAbort, FinishedError int64
	KVOffload                                                  KVOffloadStats
	SpecDecoding                                               SpecDecodingStats
}

// SpecDecodingStats are speculative decoding's counts; see
// core.SpecDecodingStats.
type SpecDecodingStats = core.SpecDecodingStats

// KVOffloadStats are host memory's counts and gauges; see
// core.KVOffloadStats.
type KVOffloadStats = core.KVOffloadStats

// coreStats sets in cs a core's gauges and counts as it last published
// them.
func coreStats(c *core.EngineCore, cs *CoreStats) {
	st := c.Stats()
	cs.RequestsRunning, cs.RequestsWaiting, cs.Preemptions = st.Running, st.Waiting, st.Preemptions
	cs.KVUsedBlocks, cs.KVNumBlocks, cs.KVLeakedBlocks = st.KVUsedBlocks, st.KVNumBlocks, c.KVLeaked()
	cs.PrefixCacheQueries, cs.PrefixCacheHits = st.PrefixCacheQueries, st.PrefixCacheHits
	cs.PrefixCachePreemptedQueries, cs.PrefixCachePreemptedHits = st.PrefixCachePreemptedQueries, st.PrefixCachePreemptedHits
	cs.KVOffload = st.KVOffload
	cs.SpecDecoding = st.SpecDecoding
}

// addCore adds a core's gauges and counts to the engine's.
func (s *Stats) addCore(c CoreStats) {
	s.RequestsRunning += c.RequestsRunning
	s.RequestsWaiting += c.RequestsWaiting
	s.Preemptions += c.Preemptions
	s.KVUsedBlocks += c.KVUsedBlocks
	s.KVNumBlocks += c.KVNumBlocks
	s.KVLeakedBlocks += c.KVLeakedBlocks
	s.PrefixCacheQueries += c.PrefixCacheQueries
	s.PrefixCacheHits += c.PrefixCacheHits
	s.PrefixCachePreemptedQueries += c.PrefixCachePreemptedQueries
	s.PrefixCachePreemptedHits += c.PrefixCachePreemptedHits
	s.PromptTokens += c.PromptTokens
	s.GenerationTokens += c.GenerationTokens
	s.StaleFramesDropped += c.StaleFramesDropped
	s.FinishedStop += c.FinishedStop
	s.FinishedLength += c.FinishedLength
	s.FinishedAbort += c.FinishedAbort
	s.FinishedError += c.FinishedError
	s.KVOffload.Add(c.KVOffload)
	s.SpecDecoding.Add(c.SpecDecoding)
}

// KVCacheUsage is the share of the core's usable KV blocks in use, as
// Stats.KVCacheUsage.
func (c CoreStats) KVCacheUsage() float64 {
	return Stats{KVUsedBlocks: c.KVUsedBlocks, KVNumBlocks: c.KVNumBlocks}.KVCacheUsage()
}

// counters are what the frontend counts itself, under its lock, of one
// core's requests; the rest of CoreStats is the core's.
type counters struct {
	PromptTokens, GenerationTokens, StaleFramesDropped         int64
	FinishedStop, FinishedLength, FinishedAbort, FinishedError int64
}

// into sets the counters in a core's stats.
func (c *counters) into(cs *CoreStats) {
	cs.PromptTokens, cs.GenerationTokens, cs.StaleFramesDropped = c.PromptTokens, c.GenerationTokens, c.StaleFramesDropped
	cs.FinishedStop, cs.FinishedLength, cs.FinishedAbort, cs.FinishedError = c.FinishedStop, c.FinishedLength, c.FinishedAbort, c.FinishedError
}

// LoRAAdapterStats are the requests of one LoRA adapter the core runs
// and keeps waiting; Name is the last a request gave its id.
type LoRAAdapterStats struct {
	Name             string
	ID               int
	Running, Waiting int
}

// Stats returns a snapshot of the counters. Running, waiting, preemptions,
// KV usage and the prefix cache's counts are the core's as of its last change: an abort that leaves
// the core idle sends no batch, yet empties the running gauge.
func (e *AsyncLLM) Stats() Stats {
	lc := e.loraCounts()
	var s Stats
	var one [1]CoreStats
	cores := one[:]
	if len(e.cores) > 1 {
		s.Cores = make([]CoreStats, len(e.cores))
		cores = s.Cores
	}
	// Once Close returned nothing changes the frontend's counts: every
	// request has ended and every task with it, and a new one is refused.
	// They are read without the lock then, which takes no step of a
	// simulated run (scenario.Outcome.Stats).
	locked := !e.ended.Load()
	if locked {
		e.mu.Lock()
	}
	s.LoRAAdapters = loraAdapters(lc, e.loraNames)
	for i := range cores {
		e.countsOf(int32(i)).into(&cores[i])
	}
	if locked {
		e.mu.Unlock()
	}
	s.MaxLoRAs, s.At, s.DataParallelSize = e.ccfg.MaxLoRAs, e.rt.Now(), len(e.cores)
	for i, c := range e.cores {
		coreStats(c.c, &cores[i])
		s.addCore(cores[i])
	}
	if v := e.sleep.Load(); v > 0 {
		s.Sleeping, s.SleepLevel = true, int(v-1)
	}
	return s
}

// Metric is one named value.
type Metric struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// KVCacheUsage is the share of the usable KV blocks in use, from 0 to 1
// (vllm:kv_cache_usage_perc): KVUsedBlocks over KVNumBlocks−1, as vLLM's
// BlockPool.get_usage leaves its null block out of the total, so that a
// cache whose every usable block is held reads 1 (with several cores,
// less a null block each).
func (s Stats) KVCacheUsage() float64 {
	usable := s.KVNumBlocks - max(s.DataParallelSize, 1) // a null block a core
	if usable <= 0 {
		return 0
	}
	return float64(s.KVUsedBlocks) / float64(usable)
}

// Metrics returns the counters under vLLM's metric names, in a fixed
// order; with several cores, each core's series labelled engine="N" in
// place of their sum.
func (s Stats) Metrics() []Metric {
	var ms []Metric
	add := func(name string, v float64) { ms = append(ms, Metric{name, v}) }
	// A core's series: the sum with one core, else each core's, labelled
	// with its rank, engine="N", first among its labels, as vLLM labels
	// them.
	ofCores := func(name string, sum float64, v func(CoreStats) float64) {
		if s.Cores == nil {
			add(name, sum)
			return
		}
		base, labels, _ := strings.Cut(name, "{")
		if labels != "" {
			labels = "," + labels
		} else {
			labels = "}"
		}
		for i, c := range s.Cores {
			add(base+`{engine="`+strconv.Itoa(i)+`"`+labels, v(c))
		}
	}
	ofCores("vllm:num_requests_running", float64(s.RequestsRunning), func(c CoreStats) float64 { return float64(c.RequestsRunning) })
	ofCores("vllm:num_requests_waiting", float64(s.RequestsWaiting), func(c CoreStats) float64 { return float64(c.RequestsWaiting) })
	ofCores("vllm:prompt_tokens_total", float64(s.PromptTokens), func(c CoreStats) float64 { return float64(c.PromptTokens) })
	ofCores("vllm:generation_tokens_total", float64(s.GenerationTokens), func(c CoreStats) float64 { return float64(c.GenerationTokens) })
	ofCores("vllm:num_preemptions_total", float64(s.Preemptions), func(c CoreStats) float64 { return float64(c.Preemptions) })
	ofCores("vllm:kv_cache_usage_perc", s.KVCacheUsage(), CoreStats.KVCacheUsage)
	ofCores(`vllm:request_success_total{finished_reason="stop"}`, float64(s.FinishedStop), func(c CoreStats) float64 { return float64(c.FinishedStop) })
	ofCores(`vllm:request_success_total{finished_reason="length"}`, float64(s.FinishedLength), func(c CoreStats) float64 { return float64(c.FinishedLength) })
	ofCores(`vllm:request_success_total{finished_reason="abort"}`, float64(s.FinishedAbort), func(c CoreStats) float64 { return float64(c.FinishedAbort) })
	ofCores(`vllm:request_success_total{finished_reason="error"}`, float64(s.FinishedError), func(c CoreStats) float64 { return float64(c.FinishedError) })
	ofCores("llmdst:stale_frames_dropped_total", float64(s.StaleFramesDropped), func(c CoreStats) float64 { return float64(c.StaleFramesDropped) })
	ofCores("llmdst:kv_leaked_blocks", float64(s.KVLeakedBlocks), func(c CoreStats) float64 { return float64(c.KVLeakedBlocks) })
	ofCores("vllm:prefix_cache_queries_total", float64(s.PrefixCacheQueries), func(c CoreStats) float64 { return float64(c.PrefixCacheQueries) })
	ofCores("vllm:prefix_cache_hits_total", float64(s.PrefixCacheHits), func(c CoreStats) float64 { return float64(c.PrefixCacheHits) })
	if s.KVOffload.Capacity > 0 { // as vLLM's connector metrics, only with host memory
		ofCores("vllm:external_prefix_cache_queries_total", float64(s.KVOffload.Queries), func(c CoreStats) float64 { return float64(c.KVOffload.Queries) })
		ofCores("vllm:external_prefix_cache_hits_total", float64(s.KVOffload.Hits), func(c CoreStats) float64 { return float64(c.KVOffload.Hits) })
		ofCores(`llmdst:kv_offload_blocks_total{transfer_type="GPU_to_CPU"}`, float64(s.KVOffload.StoredBlocks), func(c CoreStats) float64 { return float64(c.KVOffload.StoredBlocks) })
		ofCores(`llmdst:kv_offload_blocks_total{transfer_type="CPU_to_GPU"}`, float64(s.KVOffload.LoadedBlocks), func(c CoreStats) float64 { return float64(c.KVOffload.LoadedBlocks) })
		ofCores(`vllm:kv_offload_block_eviction_total{policy="`+s.KVOffload.Policy.String()+`"}`, float64(s.KVOffload.Evicted), func(c CoreStats) float64 { return float64(c.KVOffload.Evicted) })
		ofCores("vllm:kv_offload_allocation_failure_total", float64(s.KVOffload.StoreFailures), func(c CoreStats) float64 { return float64(c.KVOffload.StoreFailures) })
		ofCores("vllm:kv_offload_stores_skipped_total", float64(s.KVOffload.StoresSkipped), func(c CoreStats) float64 { return float64(c.KVOffload.StoresSkipped) })
		ofCores("llmdst:kv_offload_failed_loads_total", float64(s.KVOffload.FailedLoads), func(c CoreStats) float64 { return float64(c.KVOffload.FailedLoads) })
		ofCores("llmdst:kv_offload_used_blocks", float64(s.KVOffload.Blocks), func(c CoreStats) float64 { return float64(c.KVOffload.Blocks) })
		ofCores("llmdst:kv_offload_num_blocks", float64(s.KVOffload.Capacity), func(c CoreStats) float64 { return float64(c.KVOffload.Capacity) })
	}
	if len(s.SpecDecoding.AcceptedPerPos) > 0 { // as vLLM's, only with speculative decoding
		ofCores("vllm:spec_decode_num_drafts_total", float64(s.SpecDecoding.Drafts), func(c CoreStats) float64 { return float64(c.SpecDecoding.Drafts) })
		ofCores("vllm:spec_decode_num_draft_tokens_total", float64(s.SpecDecoding.DraftTokens), func(c CoreStats) float64 { return float64(c.SpecDecoding.DraftTokens) })
		ofCores("vllm:spec_decode_num_accepted_tokens_total", float64(s.SpecDecoding.AcceptedTokens), func(c CoreStats) float64 { return float64(c.SpecDecoding.AcceptedTokens) })
		for i, n := range s.SpecDecoding.AcceptedPerPos {
			ofCores(`vllm:spec_decode_num_accepted_tokens_per_pos_total{position="`+strconv.Itoa(i)+`"}`, float64(n), func(c CoreStats) float64 { return float64(c.SpecDecoding.AcceptedPerPos[i]) })
		}
	}
	add(`vllm:engine_sleep_state{sleep_state="awake"}`, flag(!s.Sleeping))
	add(`vllm:engine_sleep_state{sleep_state="weights_offloaded"}`, flag(s.Sleeping && s.SleepLevel == 1))
	add(`vllm:engine_sleep_state{sleep_state="discard_all"}`, flag(s.Sleeping && s.SleepLevel == 2))
	if s.MaxLoRAs > 0 { // as vLLM's, only with LoRA on
		add(s.loraInfo(), float64(s.At.UnixNano())/1e9)
	}
	return ms
}

// loraCounts are the core's LoRA counts, or the cores' added up.
func (e *AsyncLLM) loraCounts() core.LoRACounts {
	if len(e.cores) == 1 {
		return e.cores[0].c.LoRACounts()
	}
	var all core.LoRACounts
	add := func(dst *map[int]int, src map[int]int) {
		for id, n := range src {
			if *dst == nil {
				*dst = make(map[int]int)
			}
			(*dst)[id] += n
		}
	}
	for _, c := range e.cores {
		lc := c.c.LoRACounts()
		add(&all.Running, lc.Running)
		add(&all.Waiting, lc.Waiting)
	}
	return all
}

// loraAdapters lists the adapters of lc by id, named by names.
func loraAdapters(lc core.LoRACounts, names map[int]string) []LoRAAdapterStats {
	if len(lc.Running)+len(lc.Waiting) == 0 {
		return nil
	}
	ids := slices.Collect(maps.Keys(lc.Running))
	for id := range lc.Waiting {
		if _, ok := lc.Running[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]LoRAAdapterStats, len(ids))
	for i, id := range ids {
		out[i] = LoRAAdapterStats{Name: names[id], ID: id, Running: lc.Running[id], Waiting: lc.Waiting[id]}
	}
	return out
}

// loraInfo is vllm:lora_requests_info's name and labels: the slots and the
// names of the adapters with requests running and waiting, in order of id.
func (s Stats) loraInfo() string {
	var running, waiting []string
	for _, a := range s.LoRAAdapters {
		if a.Running > 0 {
			running = append(running, a.Name)
		}
		if a.Waiting > 0 {
			waiting = append(waiting, a.Name)
		}
	}
	return fmt.Sprintf(`vllm:lora_requests_info{max_lora="%d",running_lora_adapters=%q,waiting_lora_adapters=%q}`,
		s.MaxLoRAs, strings.Join(running, ","), strings.Join(waiting, ","))
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
		// The shortest spelling that reads back as the value: %g's six
		// digits would cut a timestamp to the quarter hour.
		if _, err := fmt.Fprintf(w, "%s %s\n", m.Name, strconv.FormatFloat(m.Value, 'g', -1, 64)); err != nil {
			return err
		}
	}
	return nil
}
