package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/internal/shell"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// engineSetting is one -config KEY=VALUE, its value spelt canonically (a
// number without sign or leading zeros, a duration as Go prints it), so
// that two spellings of one setting are one setting wherever settings are
// compared: a replay's, a merge's, a compare variant's.
type engineSetting struct {
	key, value string
	set        func(*engine.Config)
}

func (s engineSetting) String() string { return s.key + "=" + s.value }

// configKey is a key -config takes.
type configKey struct {
	name string
	// doc says what the value must be, in its units, and what the engine
	// does with it: the flag's help and the sentence of a bad value.
	want, does string
	// parse returns the value's canonical spelling and what it sets, or
	// an error that says what was wrong with it.
	parse func(v string) (string, func(*engine.Config), error)
}

// configKeys are the keys -config takes, sorted by name: the order of the
// flag's help and of a run's settings wherever they are written.
var configKeys = []configKey{
	{"async-scheduling", "on or off", "vLLM's --async-scheduling (AsyncScheduling): the core schedules a step while the model runs the one before it, so adds and aborts reach it with a step in flight",
		onOff(func(c *engine.Config, on bool) { c.AsyncScheduling = on })},
	{"block-size", "a whole number of tokens ≥ 1", "tokens in a KV block (BlockSize; the engine's default 16)",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.BlockSize = n })},
	{"data-parallel-size", fmt.Sprintf("a whole number of cores from 1 to %d", engine.MaxDataParallelSize), "vLLM's --data-parallel-size (DataParallelSize; the default 1): that many engine cores behind the one frontend, each with its own scheduler and caches; a request goes to the least loaded, its aborts to the core that holds it, and every control call to every core",
		intValue(1, engine.MaxDataParallelSize, func(c *engine.Config, n int) { c.DataParallelSize = n })},
	{"draft-miss-odds", "a whole number ≥ 1", "with num-speculative-tokens, how often the draft model misses the model's token: one token in this many (the default 4; 1: every draft token wrong)",
		func(v string) (string, func(*engine.Config), error) {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n < 1 {
				return "", nil, errBadValue
			}
			return strconv.FormatUint(n, 10), func(c *engine.Config) {
				c.Draft = core.DraftModel{MissOdds: n} // its target the engine's model
			}, nil
		}},
	{"enable-lora", "on or off", "vLLM's --enable-lora (EnableLoRA): requests may run with a LoRA adapter; off, a request with one is refused (multi-lora's are then skipped)",
		onOff(func(c *engine.Config, on bool) { c.EnableLoRA = on })},
	{"kv-load-failure-policy", "fail or recompute", "vLLM's kv_load_failure_policy (KVLoadFailurePolicy), for a scenario or setting with host memory: a request whose load from host memory failed (-failpoint core/kv-load-fails) ends with an error (fail, the default) or computes the failed block and what follows again (recompute)",
		named([]engine.KVLoadFailurePolicy{engine.LoadFailureFail, engine.LoadFailureRecompute}, func(c *engine.Config, p engine.KVLoadFailurePolicy) { c.KVLoadFailurePolicy = p })},
	{"kv-offload-blocks", "a whole number of blocks ≥ 0", "vLLM's --kv-offloading-size with --kv-offloading-backend native (KVOffloadBlocks), in KV blocks, with prefix-caching=on: host memory keeps the full blocks requests give back, and a request whose prompt continues with them waits while they load back instead of computing them; 0 (the default) off",
		intValue(0, math.MaxInt, func(c *engine.Config, n int) { c.KVOffloadBlocks = n })},
	{"kv-offload-max-recompute-pending-tokens", "a whole number of tokens ≥ 0", "vLLM's max_recompute_pending_tokens of its CPU offloading (KVOffloadMaxRecomputePendingTokens), for a scenario or setting with host memory: a waiting request whose hit there ends with at most this many tokens of blocks a preempted request's store still copies computes them again rather than wait for the store (HIT_PENDING); 0 (the default) always waits",
		intValue(0, math.MaxInt, func(c *engine.Config, n int) { c.KVOffloadMaxRecomputePendingTokens = n })},
	{"kv-offload-policy", "lru or arc", "vLLM's eviction_policy of its CPU offloading (KVOffloadPolicy), for a scenario or setting with host memory (kv-offload-blocks): lru (the default) puts out the least recently used block first; arc, an adaptive replacement cache, keeps the blocks used again apart from those used once and moves the share of each by the ghosts of those it put out",
		named([]engine.KVOffloadPolicy{engine.OffloadLRU, engine.OffloadARC}, func(c *engine.Config, p engine.KVOffloadPolicy) { c.KVOffloadPolicy = p })},
	{"kv-offload-store-threshold", "a whole number of sightings ≥ 0", "vLLM's store_threshold of its CPU offloading (KVOffloadStoreThreshold), for a scenario or setting with host memory: a block is stored there only once the lookups of waiting requests have seen it this many times; below 2 (the default 0) every block is",
		intValue(0, math.MaxInt, func(c *engine.Config, n int) { c.KVOffloadStoreThreshold = n })},
	{"kv-offload-tracker-size", "a whole number of blocks ≥ 1", "vLLM's max_tracker_size (KVOffloadTrackerSize; the default 64000), with kv-offload-store-threshold: how many blocks' sightings it counts, the least recently seen forgotten first",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.KVOffloadTrackerSize = n })},
	{"max-cpu-loras", "a whole number of adapters ≥ 1", "vLLM's --max-cpu-loras (MaxCPULoRAs; the default max-loras), with enable-lora=on: the most LoRA adapters the executor keeps loaded, least recently used out first unless pinned; at least max-loras",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.MaxCPULoRAs = n })},
	{"max-loras", "a whole number of adapters ≥ 1", "vLLM's --max-loras (MaxLoRAs; the default 1, multi-lora draws 1 to 3), with enable-lora=on: the most LoRA adapters one step's batch uses; a request of another adapter waits for a slot",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.MaxLoRAs = n })},
	{"max-model-len", fmt.Sprintf("a whole number of tokens from 2 to %d", core.MaxModelLenMax),
		"the longest sequence, prompt and output (MaxModelLen; the default 131072): a longer request is refused, and generation stops there",
		intValue(2, core.MaxModelLenMax, func(c *engine.Config, n int) { c.MaxModelLen = n })},
	{"max-num-batched-tokens", "a whole number of tokens ≥ 1", "the token budget of one step (MaxNumBatchedTokens; the default 8192), at least max-num-seqs",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.MaxNumBatchedTokens = n })},
	{"max-num-seqs", "a whole number of requests ≥ 1", "the most requests running at once (MaxNumSeqs; the default 256)",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.MaxNumSeqs = n })},
	{"num-blocks", fmt.Sprintf("a whole number of blocks from 2 to %d", core.NumBlocksMax),
		"the KV cache in blocks, vLLM's num_gpu_blocks, one of them the null block (NumBlocks; the default holds two sequences of max-model-len): when it runs out the scheduler preempts",
		intValue(2, core.NumBlocksMax, func(c *engine.Config, n int) { c.NumBlocks = n })},
	{"num-speculative-tokens", "a whole number of tokens from 0 to 64", "vLLM's speculative decoding with a draft model, its num_speculative_tokens (NumSpeculativeTokens; 0, the default, off): a draft model proposes each running request's next tokens and the step after computes them, keeping those the model agrees with and one more; with async scheduling the model proposes the drafts as it samples and the scheduler gives placeholders for them",
		intValue(0, 64, func(c *engine.Config, n int) { c.NumSpeculativeTokens = n })},
	{"output-chunk-size", "a whole number of frames ≥ 1", "frames the output handler processes before it yields (OutputChunkSize; the default 128)",
		intValue(1, math.MaxInt, func(c *engine.Config, n int) { c.OutputChunkSize = n })},
	{"policy", "fcfs or priority", "vLLM's --scheduling-policy (SchedulingPolicy): fcfs serves requests in order of arrival, priority by their priority, and each preempts the request it would serve last",
		named([]engine.SchedulingPolicy{engine.PolicyFCFS, engine.PolicyPriority}, func(c *engine.Config, p engine.SchedulingPolicy) { c.SchedulingPolicy = p })},
	{"prefix-caching", "on or off", "vLLM's --enable-prefix-caching (EnablePrefixCaching): a request whose prompt starts with full KV blocks computed before takes them from the cache",
		onOff(func(c *engine.Config, on bool) { c.EnablePrefixCaching = on })},
	{"scheduler-reserve-full-isl", "on or off", "vLLM's --scheduler-reserve-full-isl (ReserveFullSequence; vLLM's default on, the engine's off): a waiting request is admitted only when the KV blocks of its whole sequence are free, not only those of its prompt's first chunk",
		onOff(func(c *engine.Config, on bool) { c.ReserveFullSequence = on })},
	{"step-time", "a positive Go duration of at most 1h, such as 200µs or 2ms, or none", "the model's latency per step in virtual time (StepTime; the default 1ms, most scenarios 200µs); none: steps take no time (a starvation window, a length of virtual time, may then last its cap of 10000 decisions, and a seed far longer: the run warns); at most an hour a step, so that a seed's virtual time stays far within the simulator's 292 years",
		func(v string) (string, func(*engine.Config), error) {
			if v == "none" {
				return v, func(c *engine.Config) { c.StepTime = engine.NoStepTime }, nil
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > time.Hour {
				return "", nil, errBadValue
			}
			return d.String(), func(c *engine.Config) { c.StepTime = d }, nil
		}},
	{"stream-interval", "a whole number of tokens ≥ 0", "tokens a Delta output waits for, vLLM's --stream-interval (StreamInterval; 0 or 1: an output per token)",
		intValue(0, math.MaxInt, func(c *engine.Config, n int) { c.StreamInterval = n })},
}

// errBadValue is a value a key does not take; parseSetting says which.
var errBadValue = errors.New("bad value")

// intValue parses a whole number from lo to hi.
func intValue(lo, hi int, set func(*engine.Config, int)) func(string) (string, func(*engine.Config), error) {
	return func(v string) (string, func(*engine.Config), error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return "", nil, errBadValue
		}
		return strconv.Itoa(n), func(c *engine.Config) { set(c, n) }, nil
	}
}

// named parses one of values by its name (String), as vLLM spells it.
func named[T fmt.Stringer](values []T, set func(*engine.Config, T)) func(string) (string, func(*engine.Config), error) {
	return func(v string) (string, func(*engine.Config), error) {
		for _, p := range values {
			if v == p.String() {
				return v, func(c *engine.Config) { set(c, p) }, nil
			}
		}
		return "", nil, errBadValue
	}
}

// onOff parses on or off.
func onOff(set func(*engine.Config, bool)) func(string) (string, func(*engine.Config), error) {
	return func(v string) (string, func(*engine.Config), error) {
		switch v {
		case "on", "off":
			return v, func(c *engine.Config) { set(c, v == "on") }, nil
		}
		return "", nil, errBadValue
	}
}

// configKeyNames lists the keys, for a sentence.
func configKeyNames() string {
	names := make([]string, len(configKeys))
	for i, k := range configKeys {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// configHelp is the -config flag's help: each key, its values and what
// the engine does with it.
func configHelp() string {
	var b strings.Builder
	b.WriteString("set the engine configuration under test, as `KEY=VALUE`, in every engine a run makes, over the scenario's own settings (repeatable; a key given again replaces its value):")
	for _, k := range configKeys {
		fmt.Fprintf(&b, "\n  %s: %s; %s", k.name, k.want, k.does)
	}
	return b.String()
}

// parseSetting reads one -config KEY=VALUE.
func parseSetting(kv string) (engineSetting, error) {
	key, v, ok := strings.Cut(kv, "=")
	if !ok {
		return engineSetting{}, usagef("-config %s: want KEY=VALUE, such as prefix-caching=on; the keys are %s", shell.Quote(kv), configKeyNames())
	}
	i := slices.IndexFunc(configKeys, func(k configKey) bool { return k.name == key })
	if i < 0 {
		return engineSetting{}, usagef("-config %s: unknown key %q: want one of %s", shell.Quote(kv), key, configKeyNames())
	}
	k := configKeys[i]
	value, set, err := k.parse(v)
	if err != nil {
		return engineSetting{}, usagef("-config %s: %s must be %s, got %q", shell.Quote(kv), key, k.want, v)
	}
	return engineSetting{key: key, value: value, set: set}, nil
}

// parseConfig reads -config settings in the order given: a key given again
// replaces its value, so that a compare variant's setting replaces a common
// one. The settings come back sorted by key, one per key.
func parseConfig(kvs []string) ([]engineSetting, error) {
	var out []engineSetting
	for _, kv := range kvs {
		s, err := parseSetting(kv)
		if err != nil {
			return nil, err
		}
		out = slices.DeleteFunc(out, func(o engineSetting) bool { return o.key == s.key })
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b engineSetting) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

// checkConfig reports the engine's own refusal of the settings, made on
// the engine's default configuration, before anything runs (a usage
// error), or an engine that could not start at all. The scenario's own
// configuration may take what the defaults refuse (kv-offload-blocks with
// a scenario that turns prefix caching on on every seed): spec then asks
// its first seeds (takesSettings).
func checkConfig(settings []engineSetting) error {
	if len(settings) == 0 {
		return nil
	}
	var cfg engine.Config
	for _, s := range settings {
		s.set(&cfg)
	}
	var newErr error
	res := sim.Run(sim.Options{NoRecord: true, NoHash: true}, func(rt task.Runtime) error {
		cfg.Runtime = rt
		e, err := engine.New(cfg)
		if err != nil {
			newErr = err
			return nil
		}
		e.Close()
		return nil
	})
	if newErr != nil {
		return usagef("-config: %v (on the engine's defaults for the keys not given)", newErr)
	}
	if res.Err != nil {
		return fmt.Errorf("-config: starting an engine with the settings: %w", res.Err)
	}
	return nil
}

// settingStrings writes settings as -config takes them.
func settingStrings(settings []engineSetting) []string {
	if len(settings) == 0 {
		return nil
	}
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.String()
	}
	return out
}

// configList names settings in a sentence, as failpointList does
// failpoints.
func configList(settings []string) string {
	if len(settings) == 0 {
		return "no -config"
	}
	return "-config " + strings.Join(settings, " -config ")
}

// engineWords names the engine a run ran, with its settings when -config
// gave some: "fixed engine", "fixed engine, config prefix-caching=on".
func engineWords(engineName string, settings, failpoints []string) string {
	w := engineName + " engine"
	if len(settings) > 0 {
		w += ", config " + strings.Join(settings, " ")
	}
	if len(failpoints) > 0 {
		w += ", failpoints " + strings.Join(failpoints, " ")
	}
	return w
}
