package scenario_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
)

// TestKVOffloadPassesOnTheFixedEngine: the engine as it is passes
// kv-offload under chaos, its default, and under a starved engine core,
// whose loads land late: every token is the model's, the KV loaded from
// host memory included, and every block goes back.
func TestKVOffloadPassesOnTheFixedEngine(t *testing.T) {
	assertPasses(t, scenario.KVOffload, "chaos", "starve:engine-core")
}

// TestKVOffloadCatchesAnAbortThatGivesTheLoadsBlocksBack plants
// core/kv-load-frees-on-abort: a reader that gives up while its KV loads
// gives its blocks back at once, a request takes them, and the copy lands
// over its KV (0.5% of the first 2,000 seeds; the load lands after an
// abort in 7.8% of them, mostly before anyone took the blocks).
func TestKVOffloadCatchesAnAbortThatGivesTheLoadsBlocksBack(t *testing.T) {
	assertCaughtOnlyAs(t, scenario.KVOffload, "chaos", withFailpoint("core/kv-load-frees-on-abort=return"), props.ModelTokens)
}

// TestKVOffloadCatchesAResetThatKeepsTheOffloadedKV plants vLLM's default,
// core/reset-keeps-offloaded-kv: the trainer's reset leaves the KV of the
// old weights in host memory, and a later reader loads it (31% of the
// first 2,000 seeds; the trainer runs in half).
func TestKVOffloadCatchesAResetThatKeepsTheOffloadedKV(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.KVOffload, "chaos", withFailpoint("core/reset-keeps-offloaded-kv=return"), props.ModelTokens)
	assert.Greater(t, n, int(pauseSeeds())/5, "the planted bug was caught on too few seeds")
}

// TestKVOffloadCatchesAStoreThatFreesEarly plants core/kv-store-frees-early:
// a request that ends gives its blocks back while the last copies of its
// store to host memory are in flight, another request writes them, and
// the store keeps that KV under the ended request's hashes for a later
// reader to load (15% of the first 2,000 seeds).
func TestKVOffloadCatchesAStoreThatFreesEarly(t *testing.T) {
	n := assertCaughtOnlyAs(t, scenario.KVOffload, "chaos", withFailpoint("core/kv-store-frees-early=return"), props.ModelTokens)
	assert.Greater(t, n, int(pauseSeeds())/10, "the planted bug was caught on too few seeds")
}

// TestKVOffloadCatchesALoadForgottenOnAbort plants
// core/kv-load-forgotten-on-abort: a reader gives up while its KV loads,
// and when the load lands host memory is not told. The next reader of the
// document waits for that load for ever: the run deadlocks with its
// request accepted and never ended (4.1% of the first 2,000 seeds, seed
// 10 first). Where no reader asks again, the count that outlived its load
// is what the KV check finds after Close (2.9%, seed 8 first).
func TestKVOffloadCatchesALoadForgottenOnAbort(t *testing.T) {
	counts, first := sweepFailures(t, scenario.KVOffload, "chaos", pauseSeeds(), withFailpoint("core/kv-load-forgotten-on-abort=return"))
	assert.Positive(t, counts[props.EndsExactlyOnce], "no reader waited for ever: %v", counts)
	assert.Positive(t, counts[props.KVBlocksAccounted], "no count outlived its load unseen: %v", counts)
	for p, n := range counts {
		assert.Contains(t, []string{props.EndsExactlyOnce, props.KVBlocksAccounted}, p, "%d failure(s) of another kind, first seed %d", n, first[p])
	}
}

// TestAForgottenLoadsHangIsNamedADeadlock: kv-offload's seed 10 under
// core/kv-load-forgotten-on-abort ends with every task blocked; the
// request it left unended is the failure, whose mode and message say it
// was found at a deadlock, and the error names the blocked tasks.
func TestAForgottenLoadsHangIsNamedADeadlock(t *testing.T) {
	_, err := reachedWith(t, scenario.KVOffload, scenario.Options{Seed: 10, Failpoints: []string{"core/kv-load-forgotten-on-abort=return"}})
	var v *props.Violation
	require.ErrorAs(t, err, &v)
	assert.Equal(t, props.EndsExactlyOnce, v.Property)
	assert.Equal(t, "each-request-ends-exactly-once (at a deadlock)", sim.Signature(err))
	assert.Contains(t, err.Error(), "was accepted but never ended (at a deadlock: every task blocked)")
	var dl *sim.DeadlockError
	require.ErrorAs(t, err, &dl)
	assert.Contains(t, err.Error(), `task 1 "engine-core" waits at "core-input.get"`)
}

// TestKVOffloadCatchesAnEvictionWhileALoadReads plants
// core/kv-evict-while-loading: host memory puts out blocks a load still
// reads to make room for a store, whose copy lands in their slots before
// the load does. With host memory of 4 blocks, kv-offload's seed 52 is the
// first of 2,000 it fails (0.8% of them; 0.1% with the scenario's own
// host memory): a reader samples from KV that is not
// its document's. Without the bug it passes, having waited where the bug
// put the blocks out.
func TestKVOffloadCatchesAnEvictionWhileALoadReads(t *testing.T) {
	const seed = 52
	small := func(c *engine.Config) { c.KVOffloadBlocks = 4 }
	_, err := reachedWith(t, scenario.KVOffload, scenario.Options{Seed: seed, Engine: small, Failpoints: []string{"core/kv-evict-while-loading=return"}})
	var v *props.Violation
	if assert.ErrorAs(t, err, &v, "seed %d passed with the bug planted", seed) {
		assert.Equal(t, props.ModelTokens, v.Property)
	}
	reached, err := reachedWith(t, scenario.KVOffload, scenario.Options{Seed: seed, Engine: small})
	assert.NoError(t, err)
	assert.True(t, reached.Has(props.KVStoreWaitedForLoads), "the store waited for the loads")
}

// TestEveryEvictionWhileALoadReadsOpenedItsWindow: with host memory of 4
// blocks, kv-offload's seeds that fail under core/kv-evict-while-loading
// are among those whose run on the engine as it is reaches
// kv-store-waited-for-loads: the two runs are one until a store finds the
// room a step needs held by loads, which the engine waits for and the bug
// puts out. (3 of the first 300 seeds fail, 6 reach it.)
func TestEveryEvictionWhileALoadReadsOpenedItsWindow(t *testing.T) {
	small := func(c *engine.Config) { c.KVOffloadBlocks = 4 }
	failed, opened := 0, 0
	for seed := uint64(1); seed <= situationSeeds()/2; seed++ {
		set, err := reachedWith(t, scenario.KVOffload, scenario.Options{Seed: seed, Engine: small})
		require.NoError(t, err, "seed %d", seed)
		window := set.Has(props.KVStoreWaitedForLoads)
		if window {
			opened++
		}
		set, err = reachedWith(t, scenario.KVOffload, scenario.Options{Seed: seed, Engine: small, Failpoints: []string{"core/kv-evict-while-loading=return"}})
		if err != nil {
			failed++
			assert.True(t, window, "seed %d fails with the bug (%v) and never waited for a load without it", seed, err)
			assert.False(t, set.Has(props.KVStoreWaitedForLoads), "seed %d waited for a load with the bug planted", seed)
		}
	}
	assert.Positive(t, failed, "no seed caught the planted bug")
	assert.GreaterOrEqual(t, opened, failed)
}

// TestTheStoryTellsAKVLoad: kv-offload's seed 7 stores the batch job's KV
// to host memory, completes the store once the job ended and its copy
// landed, and loads it back for a reader; another reader's blocks are
// stored as its steps fill them, the copy landing before it ends, and the
// store completes as it ends with no copy in flight. The story says when
// each copy starts and when it lands. Earlier, reader-3#8 is preempted
// with the copy of its block in flight; the scheduler learns it landed
// only from the step's output, and holds reader-3#8 back until then
// (vLLM's connector defers a request whose own transfer jobs are in
// flight), then admits it; the story tells each.
func TestTheStoryTellsAKVLoad(t *testing.T) {
	told := storyOf(t, scenario.KVOffload, 7)
	assertToldInOrder(t, told,
		"starts to copy 6 block(s) of batch-0#9's KV to host memory",
		"lands the last copy of batch-0#9's KV, 6 block(s): its store is complete, host memory holds it, and its blocks go back",
		"starts to load 5 block(s) of reader-0#12's KV from host memory: it waits for them",
		"lands the 5 block(s) of KV loaded for reader-0#12: it waits to be admitted with them",
		"starts to copy 2 block(s) of reader-3-aside#15's KV to host memory",
		"lands a copy of 2 block(s) of reader-3-aside#15's KV in host memory: a load finds them once the request ended and its last copy landed",
		"completes the store of reader-3-aside#15's KV as it ends, no copy in flight: host memory holds its 2 block(s) for loads to find")
	assertToldInOrder(t, told,
		"starts to copy 1 block(s) of reader-3#8's KV to host memory",
		"preempts reader-3#8 to free KV blocks",
		"holds reader-3#8 back: a preempted request's store to host memory, of its KV, still has copies in flight, and it waits for the last to land",
		"reaches kv-load-waited-for-a-store",
		"learns from the step's output that the copies of preempted reader-3#8's KV landed: its store is complete, host memory holds its 1 block(s) for loads to find",
		"admits reader-3#8 from the prefix cache: its first 24 token(s) are in cached blocks")
}

// TestKVOffloadCatchesAStoreForgottenOnPreempt plants
// core/kv-store-forgotten-on-preempt: the report that a preempted
// request's store landed is lost, its blocks stay on their way to host
// memory for ever, and the request, which waits for its own store, never
// ends (each-request-ends-exactly-once, at a deadlock): 44.0% of
// kv-offload's first 2,000 seeds, seed 1 first — the class of vLLM's
// #49829, where HIT_PENDING has no deadline.
func TestKVOffloadCatchesAStoreForgottenOnPreempt(t *testing.T) {
	assertCaughtOnlyAs(t, scenario.KVOffload, "chaos", withFailpoint("core/kv-store-forgotten-on-preempt=return"), props.EndsExactlyOnce)
}

// TestKVOffloadCatchesAFailedBlockLeftInThePrefixCache plants
// core/kv-load-caches-invalid-blocks with half the loads failing
// (core/kv-load-fails) under vLLM's kv_load_failure_policy recompute: the
// failed block stays in the GPU's prefix cache, and a request that finds
// it there before its owner computes it again samples from KV that is not
// its prompt's (token-i-is-the-models-token-i): 1.8% of kv-offload's first
// 2,000 seeds, seed 49 first — the class of vLLM's #53298. Fixed, the same
// faults fail no seed.
func TestKVOffloadCatchesAFailedBlockLeftInThePrefixCache(t *testing.T) {
	loadsFail := func(bug bool) func(uint64) scenario.Options {
		return func(seed uint64) scenario.Options {
			o := scenario.Options{Seed: seed, Failpoints: []string{"core/kv-load-fails=1/2*return"},
				Engine: func(c *engine.Config) { c.KVLoadFailurePolicy = engine.LoadFailureRecompute }}
			if bug {
				o.Failpoints = append(o.Failpoints, "core/kv-load-caches-invalid-blocks=return")
			}
			return o
		}
	}
	counts, first := sweepFailures(t, scenario.KVOffload, "chaos", pauseSeeds(), loadsFail(false))
	assert.Empty(t, counts, "fixed, first seeds %v", first)
	assertCaughtOnlyAs(t, scenario.KVOffload, "chaos", loadsFail(true), props.ModelTokens)
}

// TestKVOffloadCatchesAFailedBlockKeptInHostMemory plants
// core/kv-load-failed-block-kept, vLLM's before its #49328 (its #49176):
// with every load failing under kv_load_failure_policy recompute, a
// request whose load of its prompt's first block failed looks up again,
// finds the block host memory kept, and loads it again, for ever: seed 49
// runs into the step limit (6 of the first 200 seeds do, at ten million
// decisions each, some of them a minute of wall time). Fixed, host memory forgets a block
// whose load failed, the request computes it, and seed 49 passes, as do
// all of the first 2,000 seeds (56 ran into the step limit before).
func TestKVOffloadCatchesAFailedBlockKeptInHostMemory(t *testing.T) {
	const seed, steps = 49, 200_000
	var sl *sim.StepLimitError
	assert.ErrorAs(t, recomputeRun(t, seed, steps, "core/kv-load-fails=return", "core/kv-load-failed-block-kept=return"), &sl,
		"the request loads its failed block again and again")
	assert.NoError(t, recomputeRun(t, seed, steps, "core/kv-load-fails=return"))
}

// recomputeRun runs a seed of kv-offload under kv_load_failure_policy
// recompute with the failpoints armed, within steps decisions (0: the
// simulator's limit).
func recomputeRun(t *testing.T, seed uint64, steps int64, failpoints ...string) error {
	t.Helper()
	o := scenario.Options{Seed: seed, Failpoints: failpoints,
		Engine: func(c *engine.Config) { c.KVLoadFailurePolicy = engine.LoadFailureRecompute }}
	prog, out := scenario.KVOffload.Program(o)
	res := sim.Run(sim.Options{Seed: seed, Strategy: defaultStrategy(t, scenario.KVOffload), StepsMax: steps, NoRecord: true}, prog)
	return out.Err(res.Err)
}

// TestKVOffloadCatchesARetryLeftOnAnIdleCore plants
// core/kv-load-retry-leaves-core-idle, local-inference-lab/vllm's #191:
// under kv_load_failure_policy recompute, with half the loads failing, a
// request whose load was the only thing in flight goes back to compute
// when it fails, and the core keeps the stall it took for the load and
// waits for an input. Seed 15: batch-0's last request waits for ever with
// every task blocked (202 of the first 2,000 seeds deadlock so). Fixed,
// seed 15 passes, as do all of the first 2,000.
func TestKVOffloadCatchesARetryLeftOnAnIdleCore(t *testing.T) {
	const seed, fails = 15, "core/kv-load-fails=1/2*return"
	err := recomputeRun(t, seed, 0, fails, "core/kv-load-retry-leaves-core-idle=return")
	var dl *sim.DeadlockError
	require.ErrorAs(t, err, &dl, "the core waits for an input, the request for the core")
	assert.ErrorContains(t, err, `"batch-0" (incarnation 8) was accepted but never ended`)
	assert.ErrorContains(t, err, `"engine-core" waits at "core-input.get"`)
	assert.NoError(t, recomputeRun(t, seed, 0, fails))
}

// TestKVOffloadCatchesDeferredRequestsCountedTowardMaxNumSeqs plants
// core/max-num-seqs-counts-deferred, the class of vLLM's #53130: the
// requests whose KV loads or landed count toward max_num_seqs, and once
// they fill it with nothing running no step admits anything again. Seed
// 33 (one seat, reader-1's load landed): the core's guard kills it, and
// every request ends with the error (6.5% of the first 2,000 seeds).
// Fixed, seed 33 passes.
func TestKVOffloadCatchesDeferredRequestsCountedTowardMaxNumSeqs(t *testing.T) {
	run := func(seed uint64, fps ...string) error {
		_, err := reachedWith(t, scenario.KVOffload, scenario.Options{Seed: seed, Failpoints: fps})
		return err
	}
	err := run(33, "core/max-num-seqs-counts-deferred=return")
	require.Error(t, err)
	assert.ErrorContains(t, err, "the engine core is dead")
	assert.ErrorContains(t, err, "none running or in flight, and none could be scheduled")
	assert.NoError(t, run(33))
}

// TestKVOffloadCatchesALandedRequestHeldBehindABlockedOne plants
// core/kv-loaded-waits-behind-blocked, the class of vLLM's #45387: a
// request whose KV landed from host memory waits behind one that cannot be
// admitted (seed 13: batch-0, preempted back to the head of the queue while
// reader-0's load was in flight), holding the blocks that one needs, with
// nothing running. Each step schedules nothing; the core's guard kills it
// at the first such step, and every request ends with the error (6.4% of
// the first 2,000 seeds) — before the guard the core span without a
// scheduling point, and the simulator named each such seed a hang only
// after a minute of wall time. Fixed, seed 13 passes.
func TestKVOffloadCatchesALandedRequestHeldBehindABlockedOne(t *testing.T) {
	const bug = "core/kv-loaded-waits-behind-blocked=return"
	run := func(seed uint64, fps ...string) error {
		// Without the guard the core would spin without a scheduling
		// point: reachedWith's HangAfter fails the test with its stack.
		_, err := reachedWith(t, scenario.KVOffload, scenario.Options{Seed: seed, Failpoints: fps})
		return err
	}
	err := run(13, bug)
	require.Error(t, err)
	assert.ErrorContains(t, err, "the engine core is dead")
	assert.ErrorContains(t, err, "core: 2 waiting requests, none running or in flight, and none could be scheduled")
	require.NoError(t, run(13))

	caught := 0
	for seed := range pauseSeeds() {
		err := run(seed+1, bug)
		if err == nil {
			continue
		}
		caught++
		if !assert.ErrorContains(t, err, "none running or in flight, and none could be scheduled", "seed %d failed otherwise", seed+1) {
			break
		}
	}
	assert.Positive(t, caught, "no seed caught it")
}

// TestControlMixWithHostMemoryPasses: control-mix's resets of the prefix
// cache preempt requests between steps, some with copies of their stores
// to host memory in flight. The next step reports those stores, and when
// it schedules nothing, holding the preempted request back for its own
// store, the core runs the step after it, which admits the request: with
// the store left to the output of the step before the reset (under async
// scheduling, one that had come back already) 0.4% of these seeds
// deadlocked (seed 356 first), and with a step of nothing that reported it
// but left the core waiting for an input 0.5% (seed 138 first).
func TestControlMixWithHostMemoryPasses(t *testing.T) {
	withHostMemory := func(seed uint64) scenario.Options {
		return scenario.Options{Seed: seed, Engine: func(c *engine.Config) {
			c.EnablePrefixCaching, c.KVOffloadBlocks, c.NumBlocks = true, 8, 40
		}}
	}
	counts, first := sweepFailures(t, scenario.ControlMix, "chaos", pauseSeeds(), withHostMemory)
	assert.Empty(t, counts, "first seeds %v", first)
}

// TestTheRLScenariosDrawHostMemory: live-reload, control-mix and the
// other RL and LoRA loops draw host memory in an eighth of their seeds
// (drawHostMemory), so that their resets meet the KV offloaded before
// them: with core/reset-keeps-offloaded-kv, vLLM's default of keeping it,
// a request loads KV of the old weights — 12.1% of live-reload's first
// 4,000 seeds, nearly every one that drew host memory, and 9.6% of
// control-mix's — and a preempted request's store reported under a reset
// (TestControlMixWithHostMemoryPasses) is on every sweep's path.
func TestTheRLScenariosDrawHostMemory(t *testing.T) {
	for _, sc := range []*scenario.Scenario{scenario.LiveReload, scenario.ControlMix} {
		assertCaughtOnlyAs(t, sc, "chaos", withFailpoint("core/reset-keeps-offloaded-kv=return"), props.ModelTokens)
	}
}

// TestTheStoryTellsAFailedLoad: kv-offload fails a quarter of the loads
// in an eighth of its seeds. Seed 34 draws kv_load_failure_policy
// recompute: reader-2's load lands with its last block failed, and it
// computes from there to its length; seed 89 draws fail: reader-2 ends
// with an error and no token, and the caller gets it.
func TestTheStoryTellsAFailedLoad(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.KVOffload, 34),
		"lands the 6 block(s) of KV loaded for reader-2#12, the last failed (the connector reports it invalid): it computes the failed one and what follows again",
		"reaches kv-load-failed",
		"finishes reader-2#12: length, 3 token(s)")
	assertToldInOrder(t, storyOf(t, scenario.KVOffload, 89),
		"lands the 4 block(s) of KV loaded for reader-2#6, the last failed (the connector reports it invalid): it ends with an error (kv_load_failure_policy fail)",
		"finishes reader-2#6: error, 0 token(s)",
		"reader-2        takes the final output of reader-2#6: 0 token(s), error")
}

// TestTheStoryTellsAStoreThatWaitsForRoom: kv-offload's seed 3 draws a
// host memory smaller than the GPU's cache; a reader's filled block
// finds no room while the batch job's copies are on their way, and is
// copied a later step, once they landed.
func TestTheStoryTellsAStoreThatWaitsForRoom(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.KVOffload, 3),
		"starts to copy 4 block(s) of batch-0#1's KV to host memory",
		"finds no room in host memory for 1 block(s) of reader-1-aside#3's KV, too many of its blocks on their way there: they wait for a later step",
		"lands the last copy of batch-0#1's KV, 1 block(s): its store is complete, host memory holds it, and its blocks go back",
		"starts to copy 1 block(s) of reader-1-aside#3's KV to host memory")
}

// TestTheStoryTellsAStoreThatWaitsForALoad: in kv-offload's seed 109 a
// reader's blocks find host memory full of blocks a load reads, the load
// of a reader that gave up meanwhile; they are copied once it landed. The
// checker marks the window core/kv-evict-while-loading fails in.
func TestTheStoryTellsAStoreThatWaitsForALoad(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.KVOffload, 109),
		"starts to load 5 block(s) of reader-1#11's KV from host memory: it waits for them",
		"processes the abort of reader-1#11: the core drops it",
		"finds no room in host memory for 2 block(s) of reader-2-aside#10's KV, blocks there being loaded back, kept until the loads land: they wait for a later step",
		"reaches kv-store-waited-for-loads: host memory had no room for a step's blocks but what loads in flight read",
		"lands the 5 block(s) of KV loaded for reader-1#11, which has ended: its blocks go back now",
		"starts to copy 3 block(s) of reader-2-aside#10's KV to host memory")
}

// TestTheStoryTellsAReaderThatWaitsForAnothersLoad: in kv-offload's seed
// 4 two readers ask of the document, which host memory holds; the second
// waits for the first's load rather than load it again, and is admitted
// on the blocks it cached.
func TestTheStoryTellsAReaderThatWaitsForAnothersLoad(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.KVOffload, 4),
		"starts to load 6 block(s) of reader-2#8's KV from host memory: it waits for them",
		"holds reader-0#9 back: a load in flight reads blocks of its KV in host memory, which it waits for instead of loading them again",
		"reaches kv-load-waited-for-a-load: a waiting request waited for another request's load of blocks it would load from host memory",
		"lands the 6 block(s) of KV loaded for reader-2#8: it waits to be admitted with them",
		"admits reader-0#9 from the prefix cache: its first 24 token(s) are in cached blocks")
}

// TestTheStoryTellsReadersHeldBackByALoad: kv-offload's seed 33 runs one
// request at a time; while reader-1's load is in flight, the two readers
// who ask next are held back before they look in host memory (the
// connector's back-pressure), and one is admitted on the blocks the load
// cached once it landed.
func TestTheStoryTellsReadersHeldBackByALoad(t *testing.T) {
	assertToldInOrder(t, storyOf(t, scenario.KVOffload, 33),
		"starts to load 1 block(s) of reader-1#8's KV from host memory: it waits for them",
		"holds reader-0#9 back before it looks in host memory: as many loads are in flight as requests may run, and it waits for one to land",
		"reaches kv-load-held-back: a waiting request was held back",
		"holds reader-2#10 back before it looks in host memory: as many loads are in flight as requests may run, and it waits for one to land",
		"lands the 1 block(s) of KV loaded for reader-1#8: it waits to be admitted with them",
		"admits reader-2#10 from the prefix cache: its first 20 token(s) are in cached blocks")
}

// TestKVOffloadOnTheLegacyEngineFailsOnlyByReuse: the legacy engine, whose
// core takes the caller's ids, fails kv-offload by its own reuse race
// alone: a reader that asks again under its id while its ended request's
// KV still loads is refused in the core (vLLM keeps that request until the
// load lands), and no block is lost to the load of one incarnation taken
// for another's.
func TestKVOffloadOnTheLegacyEngineFailsOnlyByReuse(t *testing.T) {
	counts, first := sweepFailures(t, scenario.KVOffload, "chaos", pauseSeeds(), func(seed uint64) scenario.Options {
		return scenario.Options{Seed: seed, Legacy: true}
	})
	assert.NotEmpty(t, counts, "the legacy engine's reuse race")
	for _, p := range []string{props.KVBlocksAccounted, props.ModelTokens} {
		assert.Zero(t, counts[p], "%s: first seed %d (simrun run -scenario kv-offload -legacy -seed N)", p, first[p])
	}
}

// TestKVOffloadRunsEveryPathOfHostMemory: kv-offload's runs under each
// policy, host memory of 4 blocks, do put blocks out, find no room for a
// step's blocks, load blocks back and hit host memory, as the engines'
// counters say once each run closed them; and the counters agree with
// each other: no more hits than queries, no more blocks held than host
// memory has, every block loaded back a hit. A sweep of it that passed
// went down those paths.
func TestKVOffloadRunsEveryPathOfHostMemory(t *testing.T) {
	for _, c := range []struct {
		policy    engine.KVOffloadPolicy
		threshold int
	}{{engine.OffloadLRU, 0}, {engine.OffloadARC, 0}, {engine.OffloadLRU, 2}} {
		name := fmt.Sprintf("%s, store threshold %d", c.policy, c.threshold)
		var sum engine.KVOffloadStats
		for seed := uint64(1); seed <= 60; seed++ {
			opts := scenario.Options{Seed: seed, Stats: true, Engine: func(cfg *engine.Config) {
				cfg.KVOffloadBlocks, cfg.KVOffloadPolicy, cfg.KVOffloadStoreThreshold = 4, c.policy, c.threshold
			}}
			prog, out := scenario.KVOffload.Program(opts)
			res := sim.Run(sim.Options{Seed: seed, Strategy: defaultStrategy(t, scenario.KVOffload), NoRecord: true, NoHash: true}, prog)
			require.NoError(t, out.Err(res.Err), "%s seed %d", name, seed)
			require.Len(t, out.Stats, 1, "kv-offload makes one engine")
			st := out.Stats[0].KVOffload
			assert.Equal(t, c.policy, st.Policy, "seed %d", seed)
			assert.Equal(t, 4, st.Capacity, "seed %d", seed)
			assert.LessOrEqual(t, st.Hits, st.Queries, "seed %d", seed)
			assert.LessOrEqual(t, st.Blocks, st.Capacity, "seed %d", seed)
			assert.LessOrEqual(t, st.LoadedBlocks*4, st.Hits+st.PreemptedHits, "seed %d: a block loaded is 4 tokens hit", seed)
			if c.threshold < 2 {
				assert.Zero(t, st.StoresSkipped, "seed %d: no threshold, nothing passed over", seed)
			}
			sum.Add(st)
		}
		assert.Positive(t, sum.Evicted, "%s: blocks put out for room", name)
		assert.Positive(t, sum.StoreFailures, "%s: steps whose blocks found no room", name)
		assert.Positive(t, sum.LoadedBlocks, "%s: blocks loaded back", name)
		assert.Positive(t, sum.StoredBlocks, "%s: blocks stored", name)
		if c.threshold >= 2 {
			assert.Positive(t, sum.StoresSkipped, "%s: blocks seen too seldom passed over", name)
		}
		t.Logf("%s over 60 seeds: %+v", name, sum)
	}
}

// TestABoundedWaitForAPendingStoreFreesItsReadersButNotItsRequest: under
// core/kv-store-forgotten-on-preempt, kv-offload's seed 35 draws vLLM's
// max_recompute_pending_tokens: reader-0, whose hit ends with two blocks
// of the store never reported, computes them again rather than wait, but
// reader-2, preempted with that store in flight, waits for its own store
// for ever, as vLLM's connector defers a request whose own transfer jobs
// are in flight whatever the bound: the run still ends at a deadlock.
// Without the bound reader-0 waits too.
func TestABoundedWaitForAPendingStoreFreesItsReadersButNotItsRequest(t *testing.T) {
	run := func(bound int) (string, error) {
		opts := scenario.Options{Seed: 35, Failpoints: []string{"core/kv-store-forgotten-on-preempt=return"}}
		if bound >= 0 {
			opts.Engine = func(c *engine.Config) { c.KVOffloadMaxRecomputePendingTokens = bound }
		}
		prog, out := scenario.KVOffload.Program(opts)
		res := sim.Run(sim.Options{Seed: 35, Strategy: defaultStrategy(t, scenario.KVOffload), Trace: true}, prog)
		var b strings.Builder
		require.NoError(t, scenario.WriteStory(&b, res.Trace))
		return b.String(), out.Err(res.Err)
	}
	told, err := run(-1) // as the seed draws it
	var v *props.Violation
	require.ErrorAs(t, err, &v)
	assert.Equal(t, props.EndsExactlyOnce, v.Property)
	assert.True(t, v.AtDeadlock)
	assert.Contains(t, v.Error(), `"reader-2" (incarnation 10) was accepted but never ended`)
	assertToldInOrder(t, told,
		"preempts reader-2#10 to free KV blocks",
		"holds reader-2#10 back: a preempted request's store to host memory, of its KV, still has copies in flight, and it waits for the last to land",
		"computes 2 block(s) of reader-0#13's KV again rather than wait for a preempted request's store to host memory, which still copies them",
		"reaches kv-pending-computed-again")

	told, err = run(0)
	require.ErrorAs(t, err, &v)
	assert.True(t, v.AtDeadlock)
	assert.NotContains(t, told, "kv-pending-computed-again")
	assert.Contains(t, told, "holds reader-0#13 back: a preempted request's store")
}

// TestRequestsTheSettingsMakeTooLargeAreSkipped: prefix-chat and kv-offload
// draw their requests' sizes from the seed, so that settings a smaller KV
// cache or model length than theirs (simrun's -config) make the engine
// refuse some requests on some seeds: each such refusal is right, and the
// run goes on without that request rather than fail. Found by a hunt:
// block-size=3 failed 15.8% of prefix-chat's seeds, max-model-len=40 4% of
// kv-offload's.
func TestRequestsTheSettingsMakeTooLargeAreSkipped(t *testing.T) {
	for _, c := range []struct {
		s   *scenario.Scenario
		set func(*engine.Config)
	}{
		{scenario.PrefixChat, func(c *engine.Config) { c.BlockSize = 3 }},
		{scenario.PrefixChat, func(c *engine.Config) { c.MaxModelLen = 24 }},
		{scenario.KVOffload, func(c *engine.Config) { c.MaxModelLen = 40 }},
		{scenario.KVOffload, func(c *engine.Config) { c.NumBlocks = 10 }},
	} {
		counts, first := sweepFailures(t, c.s, c.s.DefaultStrategy, 300, func(seed uint64) scenario.Options {
			return scenario.Options{Seed: seed, Engine: c.set}
		})
		assert.Empty(t, counts, "%s: failures by property, first seeds %v", c.s.Name, first)
	}
}
