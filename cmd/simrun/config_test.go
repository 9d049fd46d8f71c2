package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/scenario"
)

func TestParseConfigSortsByKeySpellsCanonicallyAndTheLastWins(t *testing.T) {
	settings, err := parseConfig([]string{"prefix-caching=on", "step-time=0.2ms", "block-size=+04", "policy=priority", "block-size=2", "step-time=none", "async-scheduling=on"})
	require.NoError(t, err)
	assert.Equal(t, []string{"async-scheduling=on", "block-size=2", "policy=priority", "prefix-caching=on", "step-time=none"}, settingStrings(settings))

	var cfg engine.Config
	for _, s := range settings {
		s.set(&cfg)
	}
	assert.Equal(t, engine.Config{BlockSize: 2, SchedulingPolicy: engine.PolicyPriority, EnablePrefixCaching: true, AsyncScheduling: true, StepTime: -1}, cfg)

	settings, err = parseConfig([]string{"step-time=0.2ms", "block-size=16", "max-num-seqs=3", "max-num-batched-tokens=8", "num-blocks=9", "max-model-len=64",
		"stream-interval=0", "output-chunk-size=1", "prefix-caching=off", "policy=fcfs", "async-scheduling=off", "max-loras=03", "enable-lora=off", "max-cpu-loras=04", "kv-offload-blocks=0", "data-parallel-size=02", "kv-offload-max-recompute-pending-tokens=08", "kv-load-failure-policy=fail", "kv-offload-policy=lru", "kv-offload-store-threshold=0", "kv-offload-tracker-size=064", "num-speculative-tokens=03", "draft-miss-odds=02", "scheduler-reserve-full-isl=off"})
	require.NoError(t, err)
	assert.Equal(t, []string{"async-scheduling=off", "block-size=16", "data-parallel-size=2", "draft-miss-odds=2", "enable-lora=off", "kv-load-failure-policy=fail", "kv-offload-blocks=0", "kv-offload-max-recompute-pending-tokens=8", "kv-offload-policy=lru", "kv-offload-store-threshold=0", "kv-offload-tracker-size=64", "max-cpu-loras=4", "max-loras=3", "max-model-len=64", "max-num-batched-tokens=8", "max-num-seqs=3", "num-blocks=9", "num-speculative-tokens=3", "output-chunk-size=1",
		"policy=fcfs", "prefix-caching=off", "scheduler-reserve-full-isl=off", "step-time=200µs", "stream-interval=0"}, settingStrings(settings))
	cfg = engine.Config{EnablePrefixCaching: true, AsyncScheduling: true, ReserveFullSequence: true, SchedulingPolicy: engine.PolicyPriority, StreamInterval: 3, EnableLoRA: true, KVOffloadBlocks: 8, KVOffloadPolicy: engine.OffloadARC, KVOffloadStoreThreshold: 3, KVLoadFailurePolicy: engine.LoadFailureRecompute}
	for _, s := range settings {
		s.set(&cfg)
	}
	assert.Equal(t, engine.Config{StepTime: 200 * time.Microsecond, BlockSize: 16, MaxNumSeqs: 3, MaxNumBatchedTokens: 8, NumBlocks: 9, MaxModelLen: 64, OutputChunkSize: 1, MaxLoRAs: 3, MaxCPULoRAs: 4, DataParallelSize: 2, KVOffloadTrackerSize: 64,
		KVOffloadMaxRecomputePendingTokens: 8, NumSpeculativeTokens: 3, Draft: core.DraftModel{MissOdds: 2}}, cfg,
		"the settings replace the scenario's own, off and fcfs and 0 included")
	assert.Equal(t, len(configKeys), len(settings), "every key is tested")
}

func TestBadConfigIsExitTwoWithAClearMessage(t *testing.T) {
	keys := "async-scheduling, block-size, data-parallel-size, draft-miss-odds, enable-lora, kv-load-failure-policy, kv-offload-blocks, kv-offload-max-recompute-pending-tokens, kv-offload-policy, kv-offload-store-threshold, kv-offload-tracker-size, max-cpu-loras, max-loras, max-model-len, max-num-batched-tokens, max-num-seqs, num-blocks, num-speculative-tokens, output-chunk-size, policy, prefix-caching, scheduler-reserve-full-isl, step-time, stream-interval"
	cases := []struct{ setting, want string }{
		{"prefix-caching", "-config prefix-caching: want KEY=VALUE, such as prefix-caching=on; the keys are " + keys},
		{"cache=on", `-config cache=on: unknown key "cache": want one of ` + keys},
		{"prefix-caching=yes", `-config prefix-caching=yes: prefix-caching must be on or off, got "yes"`},
		{"policy=FCFS", `-config policy=FCFS: policy must be fcfs or priority, got "FCFS"`},
		{"block-size=0", `-config block-size=0: block-size must be a whole number of tokens ≥ 1, got "0"`},
		{"num-blocks=1", `-config num-blocks=1: num-blocks must be a whole number of blocks from 2 to 2147483647, got "1"`},
		{"data-parallel-size=0", `-config data-parallel-size=0: data-parallel-size must be a whole number of cores from 1 to 64, got "0"`},
		{"max-num-seqs=x", `-config max-num-seqs=x: max-num-seqs must be a whole number of requests ≥ 1, got "x"`},
		{"max-num-batched-tokens=0", `-config max-num-batched-tokens=0: max-num-batched-tokens must be a whole number of tokens ≥ 1, got "0"`},
		{"max-model-len=536870913", `-config max-model-len=536870913: max-model-len must be a whole number of tokens from 2 to 536870912, got "536870913"`},
		{"stream-interval=-1", `-config stream-interval=-1: stream-interval must be a whole number of tokens ≥ 0, got "-1"`},
		{"output-chunk-size=0", `-config output-chunk-size=0: output-chunk-size must be a whole number of frames ≥ 1, got "0"`},
		{"step-time=0", `-config step-time=0: step-time must be a positive Go duration of at most 1h, such as 200µs or 2ms, or none, got "0"`},
		{"step-time=2", `-config step-time=2: step-time must be a positive Go duration of at most 1h, such as 200µs or 2ms, or none, got "2"`},
		{"step-time=2000000h", `-config step-time=2000000h: step-time must be a positive Go duration of at most 1h, such as 200µs or 2ms, or none, got "2000000h"`},
		{"enable-lora=1", `-config enable-lora=1: enable-lora must be on or off, got "1"`},
		{"max-loras=0", `-config max-loras=0: max-loras must be a whole number of adapters ≥ 1, got "0"`},
		{"max-cpu-loras=0", `-config max-cpu-loras=0: max-cpu-loras must be a whole number of adapters ≥ 1, got "0"`},
		{"kv-offload-policy=LRU", `-config kv-offload-policy=LRU: kv-offload-policy must be lru or arc, got "LRU"`},
		{"kv-load-failure-policy=retry", `-config kv-load-failure-policy=retry: kv-load-failure-policy must be fail or recompute, got "retry"`},
		{"kv-offload-store-threshold=-1", `-config kv-offload-store-threshold=-1: kv-offload-store-threshold must be a whole number of sightings ≥ 0, got "-1"`},
		{"kv-offload-tracker-size=0", `-config kv-offload-tracker-size=0: kv-offload-tracker-size must be a whole number of blocks ≥ 1, got "0"`},
		{"num-speculative-tokens=65", `-config num-speculative-tokens=65: num-speculative-tokens must be a whole number of tokens from 0 to 64, got "65"`},
		{"draft-miss-odds=0", `-config draft-miss-odds=0: draft-miss-odds must be a whole number ≥ 1, got "0"`},
		// The engine's own refusal, before anything runs.
		{"max-num-batched-tokens=4", "-config: core: MaxNumBatchedTokens (4) must be ≥ MaxNumSeqs (256): each running request takes a token of a step's budget (on the engine's defaults for the keys not given)"},
		{"max-loras=2", "-config: engine: MaxLoRAs is 2 but LoRA is off: set EnableLoRA to serve LoRA adapters (on the engine's defaults for the keys not given)"},
		{"max-cpu-loras=2", "-config: engine: MaxCPULoRAs is 2 but LoRA is off: set EnableLoRA to serve LoRA adapters (on the engine's defaults for the keys not given)"},
	}
	for _, c := range cases {
		for _, cmd := range [][]string{
			{"run", "-scenario", "abort-reuse"},
			{"sweep", "-scenario", "abort-reuse", "-seeds", "1-2"},
			{"shrink", "-scenario", "abort-reuse"},
			{"compare", "-scenario", "abort-reuse", "-seeds", "1-2"},
		} {
			code, out, errOut := simrun(t, append(cmd, "-out", t.TempDir(), "-config", c.setting)...)
			assert.Equal(t, 2, code, "%v %s: %s", cmd, c.setting, errOut)
			assert.Contains(t, errOut, c.want, "%v", cmd)
			assert.Empty(t, out, "%v %s: nothing ran", cmd, c.setting)
		}
	}
	// Settings the engine takes together pass its check.
	code, _, errOut := simrun(t, "run", "-scenario", "abort-reuse", "-out", t.TempDir(), "-config", "max-num-batched-tokens=4", "-config", "max-num-seqs=4")
	assert.Equal(t, 0, code, errOut)
	// So do settings the engine's defaults refuse but the scenario's own
	// configuration takes on every seed: kv-offload turns prefix caching
	// on, multi-lora LoRA, and prefix-chat runs 4 requests at most.
	for _, c := range [][]string{
		{"kv-offload", "kv-offload-blocks=2"},
		{"multi-lora", "max-cpu-loras=3"},
		{"prefix-chat", "max-num-batched-tokens=4"},
	} {
		code, out, errOut := simrun(t, "run", "-scenario", c[0], "-seed", "2", "-schedule-out", "-", "-config", c[1])
		assert.Equal(t, 0, code, "%v: %s%s", c, out, errOut)
	}
	// But not a scenario that draws the rest from the seed: pause-resume
	// draws prefix caching, and its seeds without it would fail.
	for _, cmd := range [][]string{{"run", "-seed", "2"}, {"compare", "-seeds", "1-20", "-a", "", "-b", ""}, {"sweep", "-seeds", "1-20"}} {
		code, out, errOut := simrun(t, append([]string{cmd[0], "-scenario", "pause-resume", "-out", t.TempDir(), "-config", "kv-offload-blocks=8"}, cmd[1:]...)...)
		assert.Equal(t, 2, code, "%v: %s%s", cmd, out, errOut)
		assert.Contains(t, errOut, "KVOffloadBlocks is 8 but EnablePrefixCaching is off", "%v", cmd)
	}
}

// TestDraftTokensRunWhereAScenarioDrawsAsyncScheduling: kv-offload draws
// async scheduling in half its seeds; -config num-speculative-tokens
// runs draft tokens with it there, and every seed passes.
func TestDraftTokensRunWhereAScenarioDrawsAsyncScheduling(t *testing.T) {
	code, out, errOut := simrun(t, "sweep", "-scenario", "kv-offload", "-seeds", "1-40", "-out", t.TempDir(), "-config", "num-speculative-tokens=2")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "failures: 0/40")
}

// TestConfigTheScenarioRefusesIsExitTwo: settings the engine takes on its
// defaults but not over the scenario's own configuration (prefix-chat's
// budget of 12 tokens a step against 20 requests at once) are bad input,
// said before anything runs, not a failure of every seed.
func TestConfigTheScenarioRefusesIsExitTwo(t *testing.T) {
	assertRefusedBeforeAnythingRuns(t, "max-num-seqs=20", "-config max-num-seqs=20: prefix-chat's own configuration with these settings is refused by the engine: core: MaxNumBatchedTokens (12) must be ≥ MaxNumSeqs (20)",
		[]string{"run", "-scenario", "prefix-chat"},
		[]string{"sweep", "-scenario", "prefix-chat", "-seeds", "1-2"},
		[]string{"compare", "-scenario", "prefix-chat", "-seeds", "1-2"})
	code, _, errOut := simrun(t, "run", "-scenario", "prefix-chat", "-out", t.TempDir(), "-config", "max-num-seqs=20", "-config", "max-num-batched-tokens=20")
	assert.Equal(t, 0, code, "taken together they fit: %s", errOut)
}

// assertRefusedBeforeAnythingRuns runs each command with -config setting
// and asserts that it exits 2 with want on standard error and prints
// nothing: the settings were refused before any seed ran.
func assertRefusedBeforeAnythingRuns(t *testing.T, setting, want string, cmds ...[]string) {
	t.Helper()
	for _, cmd := range cmds {
		code, out, errOut := simrun(t, append(cmd, "-out", t.TempDir(), "-config", setting)...)
		assert.Equal(t, 2, code, "%v: %s", cmd, errOut)
		assert.Contains(t, errOut, want, "%v", cmd)
		assert.Empty(t, out, "%v: nothing ran", cmd)
	}
}

// TestConfigThatRefusesTheScenariosRequestsIsExitTwo: settings under which
// the engine refuses the scenario's own requests (a cache of 39 usable
// blocks against abort-reuse's requests of 100,000 tokens) are bad input
// too, said before anything runs; a sweep of several scenarios skips the
// scenarios they do not suit, says so, and sweeps the others.
func TestConfigThatRefusesTheScenariosRequestsIsExitTwo(t *testing.T) {
	assertRefusedBeforeAnythingRuns(t, "num-blocks=40", "abort-reuse's own requests are refused by the engine with these settings: engine: invalid request: the request needs 6251 KV blocks",
		[]string{"run", "-scenario", "abort-reuse"},
		[]string{"sweep", "-scenario", "abort-reuse", "-seeds", "1-2"},
		[]string{"sweep", "-scenario", "abort-reuse,parallel-abort-reuse", "-seeds", "1-2"})

	code, out, errOut := simrun(t, "sweep", "-scenario", "abort-reuse,prefix-chat", "-seeds", "1-20", "-out", t.TempDir(), "-config", "block-size=2", "-config", "num-blocks=40")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "simrun sweep: skipping abort-reuse: -config block-size=2 -config num-blocks=40: abort-reuse's own requests are refused")
	assert.NotContains(t, out, "sweep abort-reuse:")
	assert.Contains(t, out, "sweep of 2 scenarios: 20 seeds in ")
	assert.Contains(t, out, "  passed: prefix-chat\n  skipped (the -config settings do not suit them): abort-reuse\n")

	code, _, errOut = simrun(t, "run", "-scenario", "prefix-chat", "-out", t.TempDir(), "-config", "block-size=2", "-config", "num-blocks=40")
	assert.Equal(t, 0, code, "settings that suit the scenario run: %s", errOut)
}

func TestConfigHelpDocumentsEveryKey(t *testing.T) {
	for _, cmd := range []string{"run", "sweep", "shrink", "compare"} {
		code, _, errOut := simrun(t, cmd, "-h")
		require.Equal(t, 0, code)
		assert.Contains(t, errOut, "-config KEY=VALUE", cmd)
		for _, k := range configKeys {
			assert.Contains(t, errOut, "  "+k.name+": "+k.want+"; ", "%s -h documents -config %s", cmd, k.name)
		}
	}
}

// TestConfigDocsNameEveryKey: the package doc and the README list the keys
// in prose of their own; a key added to configKeys must reach both.
func TestConfigDocsNameEveryKey(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "\n## simrun\n")
	require.True(t, ok, "the README has a simrun section")
	section, _, _ = strings.Cut(section, "\n## ")
	for _, k := range configKeys {
		assert.Contains(t, string(doc), "//   - "+k.name+"=", "doc.go documents -config %s", k.name)
		assert.Contains(t, section, "`"+k.name, "the README's simrun section names -config %s", k.name)
	}
}

// TestConfigPrefixCachingShowsInTheStory: abort-reuse's prompts are one
// token, which never fills a block; swarm's seed 2 does not draw prefix
// caching itself, and its prompts span blocks of 2 tokens.
func TestConfigPrefixCachingShowsInTheStory(t *testing.T) {
	dir := t.TempDir()
	code, plain, _ := simrun(t, "run", "-scenario", "swarm", "-seed", "2", "-story", "-out", dir)
	require.Equal(t, 0, code, plain)
	assert.NotContains(t, plain, "from the prefix cache")
	assert.Contains(t, plain, "swarm seed 2, strategy chaos, fixed engine: ok", "no -config, no word of it")

	code, out, _ := simrun(t, "run", "-scenario", "swarm", "-seed", "2", "-story", "-out", dir, "-config", "prefix-caching=on", "-config", "block-size=2")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "swarm seed 2, strategy chaos, fixed engine, config block-size=2 prefix-caching=on: ok")
	assert.Contains(t, out, "from the prefix cache")
	assert.NotEqual(t, between(plain, "trace hash ", "\n"), between(out, "trace hash ", "\n"))

	code, out, _ = simrun(t, "run", "-scenario", "swarm", "-seed", "2", "-json", "-out", dir, "-config", "prefix-caching=on", "-config", "block-size=2")
	require.Equal(t, 0, code, out)
	var j runJSON
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	assert.Equal(t, []string{"block-size=2", "prefix-caching=on"}, j.Config)
	code, out, _ = simrun(t, "run", "-scenario", "swarm", "-seed", "2", "-json", "-out", dir)
	require.Equal(t, 0, code, out)
	assert.NotContains(t, out, `"config"`, "no -config, no field: JSON consumers see what they saw")
}

// recordWithConfig records the legacy engine's failure of abort-reuse seed
// 11 under -config: a seed that fails with the settings.
func recordWithConfig(t *testing.T, dir string) (file, out string) {
	t.Helper()
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "11", "-legacy", "-out", dir,
		"-config", "step-time=1ms", "-config", "prefix-caching=on")
	require.Equal(t, 1, code, out)
	return onlyFile(t, dir, "abort-reuse-legacy-*-seed11.schedule"), out
}

// onlyFile returns the one file in dir whose name matches pattern.
func onlyFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, pattern))
	require.NoError(t, err)
	require.Len(t, files, 1, "files named %s in %s", pattern, dir)
	return files[0]
}

// TestSchedulesOfOtherSettingsHaveNamesOfTheirOwn: a seed's schedule file
// under -failpoint or -config is named with a tag of its settings, so that
// runs of other settings into one directory keep each other's files; with
// neither, it is named as it always was.
func TestSchedulesOfOtherSettingsHaveNamesOfTheirOwn(t *testing.T) {
	dir := t.TempDir()
	for _, extra := range [][]string{
		nil,
		{"-config", "step-time=1ms"},
		{"-config", "prefix-caching=on"},
		{"-failpoint", "core/stall-mid-step=1/2*return(400)"},
	} {
		args := append([]string{"run", "-scenario", "abort-reuse", "-seed", "11", "-legacy", "-out", dir}, extra...)
		code, out, _ := simrun(t, args...)
		require.Equal(t, 1, code, out)
	}
	files, err := filepath.Glob(filepath.Join(dir, "abort-reuse-legacy*-seed11.schedule"))
	require.NoError(t, err)
	assert.Len(t, files, 4, "one file a set of settings: %v", files)
	assert.FileExists(t, filepath.Join(dir, "abort-reuse-legacy-seed11.schedule"), "no settings, no tag")
	for _, f := range files {
		code, out, _ := simrun(t, "replay", f)
		assert.Equal(t, 1, code, "%s replays its own run: %s", f, out)
		assert.Contains(t, out, "(the same as recorded)", f)
	}
}

func TestAFailureRecordedWithConfigReplaysTheSame(t *testing.T) {
	dir := t.TempDir()
	file, out := recordWithConfig(t, dir)
	assert.Contains(t, out, "abort-reuse seed 11, strategy starve:output-handler, legacy engine, config prefix-caching=on step-time=1ms: FAIL")
	assert.Contains(t, out, "replay: simrun replay "+file)
	hash := between(out, "trace hash ", "\n")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), "meta \"config\" \"prefix-caching=on\"\nmeta \"config\" \"step-time=1ms\"\n", "one meta a setting, sorted by key")

	code, out, _ := simrun(t, "replay", file)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "legacy engine, config prefix-caching=on step-time=1ms: FAIL")
	assert.Contains(t, out, "trace hash "+hash+" (the same as recorded)")

	// Without the settings the seed runs another run.
	code, out, _ = simrun(t, "run", "-scenario", "abort-reuse", "-seed", "11", "-legacy", "-out", t.TempDir())
	require.Equal(t, 1, code, out)
	assert.NotContains(t, out, hash)

	// The command printed to run the seed again carries the settings.
	sp, err := (&specFlags{scenario: "abort-reuse", legacy: true, config: repeated{"step-time=1ms", "prefix-caching=on"}}).spec()
	require.NoError(t, err)
	runCmd := sp.runCommand(11, "starve:output-handler")
	assert.Equal(t, "simrun run -scenario abort-reuse -seed 11 -strategy starve:output-handler -legacy -config prefix-caching=on -config step-time=1ms", runCmd)
	argv, err := splitCommand(runCmd)
	require.NoError(t, err)
	code, out, _ = simrun(t, append(argv[1:], "-out", t.TempDir())...)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "trace hash "+hash+"\n")
}

func TestRunReplayRefusesAScheduleRecordedWithOtherConfig(t *testing.T) {
	dir := t.TempDir()
	file, _ := recordWithConfig(t, dir)
	plain, _ := recordSeed1(t, dir)
	cases := []struct {
		file   string
		config []string
		want   string
	}{
		{file, nil, "recorded with -config prefix-caching=on -config step-time=1ms, not no -config"},
		{file, []string{"prefix-caching=on", "step-time=2ms"},
			"recorded with -config prefix-caching=on -config step-time=1ms, not -config prefix-caching=on -config step-time=2ms"},
		{plain, []string{"policy=priority"}, "recorded with no -config, not -config policy=priority"},
	}
	for _, c := range cases {
		args := []string{"run", "-out", dir, "-scenario", "abort-reuse", "-legacy", "-strategy", "replay:" + c.file, "-seed", between(c.file, "seed", ".")}
		for _, s := range c.config {
			args = append(args, "-config", s)
		}
		code, out, errOut := simrun(t, args...)
		assert.Equal(t, 2, code, "%v: %s%s", c.config, out, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.config)
		assert.Contains(t, errOut, "or run simrun replay "+c.file, "%v", c.config)
		assert.Empty(t, out)
	}

	// The settings it was recorded with, spelt another way and in another
	// order, replay it.
	code, out, errOut := simrun(t, "run", "-out", dir, "-scenario", "abort-reuse", "-legacy", "-strategy", "replay:"+file, "-seed", "11",
		"-config", "prefix-caching=on", "-config", "step-time=1000us")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "property no-cross-incarnation-delivery violated")
}

func TestReplayOfAScheduleWithAConfigKeyItDoesNotKnow(t *testing.T) {
	dir := t.TempDir()
	file, _ := recordWithConfig(t, dir)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(data), `"step-time=1ms"`, `"warp=9"`, 1)), 0o644))
	code, _, errOut := simrun(t, "replay", file)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `the schedule's config: -config warp=9: unknown key "warp"`)
}

func TestShrinkCarriesTheConfig(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := simrun(t, "shrink", "-scenario", "abort-reuse", "-seed", "11", "-legacy", "-quiet", "-out", dir,
		"-config", "step-time=1ms", "-config", "prefix-caching=on")
	require.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "legacy engine, config prefix-caching=on step-time=1ms")
	file := between(out, "simrun replay ", "\n")
	require.NotEmpty(t, file, out)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Contains(t, string(data), `meta "config" "step-time=1ms"`)
	code, out, _ = simrun(t, "replay", file)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "(the same as recorded)")

	code, _, errOut = simrun(t, "shrink", "-config", "step-time=1ms", file)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "-config does not go with a schedule file")
}

func TestSweepCarriesTheConfig(t *testing.T) {
	dir := t.TempDir()
	code, r := sweepJSON(t, "-scenario", "abort-reuse", "-legacy", "-seeds", "1-20", "-j", "2", "-config", "step-time=1ms", "-config", "prefix-caching=on")
	require.Equal(t, 1, code)
	assert.Equal(t, []string{"prefix-caching=on", "step-time=1ms"}, r.Config)

	code, out, _ := simrun(t, "sweep", "-scenario", "abort-reuse", "-legacy", "-seeds", "1-20", "-j", "2", "-quiet", "-out", dir,
		"-junit", filepath.Join(dir, "r.xml"), "-config", "step-time=1ms", "-config", "prefix-caching=on")
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "sweep abort-reuse: strategy starve:output-handler, legacy engine, config prefix-caching=on step-time=1ms, seeds 1-20\n")
	assert.Contains(t, out, "or run: simrun run -scenario abort-reuse -seed 11 -strategy starve:output-handler -legacy -config prefix-caching=on -config step-time=1ms\n")
	doc := readJUnit(t, filepath.Join(dir, "r.xml"))
	assert.Contains(t, doc.Suites[0].Cases[0].Out, "legacy engine, config prefix-caching=on step-time=1ms")
	assert.Contains(t, doc.Suites[0].Cases[1].Out, "-config prefix-caching=on -config step-time=1ms", "a failing seed's case runs it with the settings")

	// With no -config, no word of it, and no JSON field.
	code, out, _ = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-5", "-quiet", "-out", dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "sweep abort-reuse: strategy starve:output-handler, fixed engine, seeds 1-5\n")
	code, out, _ = simrun(t, "sweep", "-scenario", "abort-reuse", "-seeds", "1-5", "-json", "-out", dir)
	require.Equal(t, 0, code, out)
	assert.NotContains(t, out, `"config"`)
}

func TestMergeRefusesShardsOfAnotherConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := []string{"-legacy", "-config", "step-time=1ms", "-config", "prefix-caching=on"}
	a := shardJSON(t, dir, "a", append([]string{"-seeds", "1-20", "-shard", "1/2"}, cfg...)...)
	b := shardJSON(t, dir, "b", append([]string{"-seeds", "1-20", "-shard", "2/2"}, cfg...)...)
	code, out, errOut := simrun(t, "merge", a, b)
	require.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "legacy engine, config prefix-caching=on step-time=1ms, seeds 1-20")
	assert.Contains(t, out, "or run: simrun run -scenario abort-reuse -seed 11 -strategy starve:output-handler -legacy -config prefix-caching=on -config step-time=1ms\n")
	code, out, errOut = simrun(t, "merge", "-json", a, b)
	require.Equal(t, 1, code, errOut)
	var m mergeResult
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, []string{"prefix-caching=on", "step-time=1ms"}, m.Config)

	plain := shardJSON(t, dir, "plain", "-seeds", "1-20", "-shard", "2/2", "-legacy", "-config", "step-time=1ms")
	code, _, errOut = simrun(t, "merge", a, plain)
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, "cannot merge "+plain+" with "+a+": it has config step-time=1ms, not prefix-caching=on step-time=1ms; shards must come from one sweep")

	// A shard whose settings simrun does not know is refused as such.
	data, err := os.ReadFile(b)
	require.NoError(t, err)
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(string(data), `"step-time=1ms"`, `"warp=9"`, 1)), 0o644))
	code, _, errOut = simrun(t, "merge", a, bad)
	assert.Equal(t, 2, code, errOut)
	assert.Contains(t, errOut, bad+`: its config: -config warp=9: unknown key "warp"`)
}

func TestCompareConfigVariants(t *testing.T) {
	r := compareJSON(t, 0, "-scenario", "swarm", "-seeds", "1-20", "-a", "-config policy=priority", "-b", "")
	assert.Equal(t, []string{"policy=priority"}, r.A.Config)
	assert.Empty(t, r.B.Config)
	assert.Equal(t, "-config policy=priority", r.A.Flags)

	// A variant's setting replaces a common one of the same key, and
	// keeps the others.
	r = compareJSON(t, 1, "-scenario", "abort-reuse", "-seeds", "1-20", "-legacy", "-config", "step-time=1ms", "-config", "prefix-caching=on",
		"-a", "", "-b", "-config step-time=2ms")
	assert.Equal(t, []string{"prefix-caching=on", "step-time=1ms"}, r.A.Config)
	assert.Equal(t, []string{"prefix-caching=on", "step-time=2ms"}, r.B.Config)
	require.NotEmpty(t, r.B.Replay)
	code, out, _ := simrun(t, "replay", strings.TrimPrefix(r.B.Replay, "simrun replay "))
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "config prefix-caching=on step-time=2ms: FAIL")
	assert.Contains(t, out, "(the same as recorded)")

	code, out, _ = simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-4", "-quiet", "-out", t.TempDir(), "-a", "-config policy=priority", "-b", "")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "  A  -config policy=priority abort-reuse, strategy starve:output-handler, fixed engine, config policy=priority\n")
	assert.Contains(t, out, "  B  (no flags)       abort-reuse, strategy starve:output-handler, fixed engine\n")

	code, _, errOut := simrun(t, "compare", "-scenario", "abort-reuse", "-seeds", "1-2", "-b", "-config policy=lottery", "-out", t.TempDir())
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `variant B (-b "-config policy=lottery"): -config policy=lottery: policy must be fcfs or priority, got "lottery"`)
}

// TestASeedWhoseDrawnConfigurationTheSettingsRefuseIsNoFailure: swarm
// draws its engine's configuration from the seed, and seed 306003 draws a
// budget of 2 tokens a step, which -config max-num-seqs=3 makes one the
// engine refuses. The seed tests nothing: the sweep warns of it, with the
// engine's sentence, counts it apart and leaves it out of the rates;
// without the settings the seed runs, and a run of it alone says what the
// engine refused. compare keeps it a failure of its variant, named by the
// sentence, so that its seeds stay paired.
func TestASeedWhoseDrawnConfigurationTheSettingsRefuseIsNoFailure(t *testing.T) {
	code, out, errOut := simrun(t, "sweep", "-scenario", "swarm", "-seeds", "306001-306010", "-out", t.TempDir(), "-config", "max-num-seqs=3")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "1 of them ran nothing: the engine refused the configuration each drew with the -config settings")
	assert.Contains(t, out, "failures: 0/9", "the rate leaves the refused seed out")
	assert.Contains(t, errOut, "simrun sweep: warning, in 1 of 10 seeds (first seed 306003): the engine refuses the configuration swarm drew with -config max-num-seqs=3, and the seed ran nothing (no failure counted): core: MaxNumBatchedTokens (N) must be ≥ MaxNumSeqs (N)")

	code, out, _ = simrun(t, "sweep", "-scenario", "swarm", "-seeds", "306001-306010", "-out", t.TempDir(), "-config", "max-num-seqs=3", "-json")
	assert.Equal(t, 0, code)
	var res sweepResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	assert.Equal(t, uint64(10), res.Seeds)
	assert.Equal(t, uint64(1), res.Refused)
	assert.Zero(t, res.Failures)

	code, out, errOut = simrun(t, "sweep", "-scenario", "swarm", "-seeds", "306003", "-out", t.TempDir())
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "failures: 0/1", "the seed's own configuration runs")
	assert.NotContains(t, errOut, "refuses")

	code, out, _ = simrun(t, "run", "-scenario", "swarm", "-seed", "306003", "-out", t.TempDir(), "-config", "max-num-seqs=3")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "core: MaxNumBatchedTokens (2) must be ≥ MaxNumSeqs (3)")

	code, out, errOut = simrun(t, "compare", "-scenario", "swarm", "-seeds", "306001-306010", "-out", t.TempDir(), "-a", "-config max-num-seqs=3", "-b", "")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "core: MaxNumBatchedTokens (N) must be ≥ MaxNumSeqs (N)", "A's refused seed is its failure")
}

// TestARefusalTheScenarioMakesItselfStaysAFailure: test-odd-budget's odd
// seeds start an engine the engine refuses whatever the settings; under
// -config they fail as they do without it, not as seeds the settings
// refused.
func TestARefusalTheScenarioMakesItselfStaysAFailure(t *testing.T) {
	code, out, errOut := simrun(t, "sweep", "-scenario", "test-odd-budget", "-seeds", "2-5", "-out", t.TempDir(), "-config", "max-model-len=1000")
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "failures: 2/4")
	assert.NotContains(t, out, "ran nothing")
	assert.NotContains(t, errOut, "refuses the configuration")
}

func init() {
	scenario.Register(&scenario.Scenario{Name: "test-odd-budget", Summary: "a scenario whose odd seeds but the first start an engine with a budget below its seats", DefaultStrategy: "random",
		Run: func(x *scenario.Run) error {
			cfg := engine.Config{}
			if x.Opts.Seed%2 == 1 && x.Opts.Seed > 1 {
				cfg.MaxNumSeqs, cfg.MaxNumBatchedTokens = 8, 4
			}
			e, err := x.NewEngine(cfg)
			if err != nil {
				return err
			}
			_ = e
			return nil
		}})
}

// TestTheHeaderNamesTheArmedFailpoints: a run, a sweep and a shrink say in
// their first line which failpoints they armed, so that a fixed engine's
// FAIL is read as the planted bug it is.
func TestTheHeaderNamesTheArmedFailpoints(t *testing.T) {
	fp := "core/spec-placeholders-outlive-their-window=return"
	dir := t.TempDir()
	for _, args := range [][]string{
		{"run", "-scenario", "swarm", "-seed", "110", "-failpoint", fp, "-out", dir},
		{"sweep", "-scenario", "swarm", "-seeds", "110", "-failpoint", fp, "-quiet", "-out", dir},
		{"shrink", "-scenario", "swarm", "-seed", "110", "-failpoint", fp, "-quiet", "-out", dir, "-tries", "5"},
	} {
		code, out, errOut := simrun(t, args...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		first, _, _ := strings.Cut(out, "\n")
		assert.Contains(t, first, "fixed engine, failpoints "+fp, "%v", args)
	}
	code, out, _ := simrun(t, "run", "-scenario", "swarm", "-seed", "110", "-schedule-out", "-")
	require.Equal(t, 0, code, out)
	assert.NotContains(t, out, "failpoints")

	// Those GO_FAILPOINTS arms are named too, and said to come from it.
	t.Setenv("GO_FAILPOINTS", failpoints.CoreAbortLeavesRequestRunning.FullName()+"=return")
	for _, args := range [][]string{
		{"run", "-scenario", "abort-reuse", "-seed", "1", "-out", dir},
		{"sweep", "-scenario", "abort-reuse", "-seeds", "1-3", "-quiet", "-out", dir},
	} {
		code, out, errOut := simrun(t, args...)
		require.Equal(t, 1, code, "%v: %s%s", args, out, errOut)
		first, _, _ := strings.Cut(out, "\n")
		assert.Contains(t, first, "fixed engine, failpoints core/abort-leaves-request-running=return (GO_FAILPOINTS)", "%v", args)
	}
}
