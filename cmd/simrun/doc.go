// Command simrun runs llmdst's scenarios under the deterministic simulator
// and triages flaky tests: run one seed, sweep many, replay a recorded
// failure, shrink it, compare two builds, stress real processes.
//
// Usage:
//
//	simrun list [-failpoints | -situations | -properties] [-json]
//	simrun run     -scenario abort-reuse -seed 42 [-strategy S] [-legacy] [-config K=V] [-story] [-trace F.json] [-html F.html] [-metrics] [-json]
//	simrun sweep   -scenario abort-reuse -seeds 1-100000 [-strategy S] [-legacy] [-config K=V] [-j N] [-shard I/N] [-for D] [-stop-after N] [-targets LIST] [-min-reached N] [-json] [-junit F.xml]
//	simrun sweep   -scenario all -seeds 1-10000 -for 10m [-junit F.xml]        # or -scenario swarm,control-mix
//	simrun explore -scenario abort-reuse -seed 1 -delays 3 [-strategy S] [-legacy] [-config K=V] [-j N] [-shard I/N] [-max-runs N] [-for D] [-story] [-html F.html] [-json]
//	simrun explore -scenario swarm -seeds 1-1000 -delays 1
//	simrun explore -scenario all -seeds 1-100 -delays 1 -for 30m
//	simrun run     -scenario abort-reuse -seed 1 -legacy -draws 24:2,25:5,62:1
//	simrun replay  [-story] [-trace F.json] [-html F.html] [-metrics] FILE.schedule
//	simrun shrink  -scenario abort-reuse -seed 42 -legacy [-config K=V] [-reach SITUATION] [-story] [-html F.html]
//	simrun compare -scenario abort-reuse -seeds 1-10000 -a '-legacy' -b '' [-targets LIST] [-min-reached N]
//	simrun compare -scenario swarm -seeds 1-10000 -a '-config policy=priority' -b ''
//	simrun compare -scenario all -seeds 1-2000 -a '' -b '-failpoint NAME=return'
//	simrun merge   [-json] [-min-reached N] shard-*.json
//	simrun stress  -p 40 -rounds 3 [-for D] [-vs 'CMD B'] [-load N] [-private-tmp] [-env K=V] [-targets LIST] [-min-reached N] -- CMD ARGS
//
// -strategy takes random, pct:D[:K], chaos[:MAX], starve:PREFIX[:MAX] or
// replay:FILE; without it the scenario's default applies. pct:D spreads
// its D-1 change points over the first K decisions, K being the median
// length of seeds 1-16 under random unless given; it is named pct:D:K in
// what simrun prints. -failpoint
// NAME=TERMS (repeatable) arms a failpoint in every run, and so does each
// of GO_FAILPOINTS's specs (full names, separated by ";"); a GO_FAILPOINTS
// that package failpoints refuses is bad input, refused at start, before
// any command runs. Every failure
// prints the command that replays it and writes its schedule file,
// OUT/SCENARIO-ENGINE-seedN.schedule, with a tag of the -failpoint and
// -config settings after ENGINE when there are any (so that runs of other
// settings into one directory keep each other's files); sweep,
// stress and compare report each failure mode apart, with its rate, Wilson
// interval, first occurrence and a command that reproduces it; stress and
// compare test each mode's difference between A and B on its own and,
// among several, say whether it holds once their p-values are corrected
// for their number (Holm's method, triage.CompareModes). A failure
// mode of the simulator is the property that broke and where it was
// detected, without the numbers, the request and the data-parallel rank
// of the core (engine-core-dp1 after core-aborts-dp1.lock is engine-core
// after core-aborts.lock): the first failing seed's error names them. A sweep
// given -for (a wall-time budget) or -stop-after (a number of failures),
// or interrupted (Ctrl-C, SIGTERM), stops taking seeds early and reports
// the seeds that ran, the first ones of -seeds; stress given -for starts no
// round once the budget is spent. An interrupted compare reports each
// variant's sweep as far as it went, and no comparison.
//
// sweep's -scenario may name several scenarios, separated by commas, or
// all of them as all: each is swept in turn over the same seeds, as a
// sweep of it alone would be, and the sweep fails if any of them does.
// The settings are checked against every scenario before any runs. -for
// is the whole sweep's budget, each scenario taking an equal share of
// what the ones before it left; -stop-after counts each scenario's
// failures, and -min-reached holds each to its own targets (one that
// names none has none to reach). A seed that hangs ends the sweep with its
// scenario: its worker is left behind, and the scenarios after it are
// reported as not run. The text ends with the scenarios that failed and those that
// passed, -json prints an object a scenario (a stream that merge reads,
// shard by shard and scenario by scenario), and -junit writes a suite a
// scenario into one report.
//
// compare's -scenario takes the same: each scenario is compared in turn,
// as alone, both variants running it (a variant may not name its own),
// -for shared the same way and halved between A and B within a share.
// The text ends with the scenarios B is worse in, better in and not
// significantly different in, by the test of all failures, with the
// modes that differ; -json prints an object a scenario, with its name,
// and -junit a suite a scenario. Each scenario is tested on its own at
// p < 0.05: among many, a difference near that may be chance, and the
// total corrects the p-values for their number by Holm's method
// (triage.Holm), saying in which scenarios a difference holds and in
// which it may be chance.
//
// explore runs one seed's workload under every schedule that departs from
// the strategy's calm one at most -delays times (sim.Explore): a task
// other than the one that would go on, a starvation window opened, a
// window longer than the shortest, each is a departure. It stops at the
// first failure in depth-first order, the same on any -j, and writes its
// schedule to OUT/SCENARIO-ENGINE-seedN-explored.schedule, which replay
// and shrink take; a walk that ends says every schedule within the bound
// passed, which a sweep, sampling, cannot say. The founding race takes
// three departures under starve:output-handler: the legacy engine fails
// within them, and the fixed engine passes all 1,100,372. PCT, whose draws
// are priorities, and replay:FILE cannot be explored. -seeds walks one
// seed after another, each as -seed walks it, and stops at the first that
// fails: a scenario that draws its workload from the seed (swarm,
// pause-resume, live-reload, colocate, weight-sync, multi-lora,
// lora-reload, control-mix, kv-offload) is a different program for each. -shard I/N
// runs one share of a walk, the schedules whose first departure is at a
// draw numbered I-1 modulo N, for a CI matrix; merge adds the shards'
// -json up to the whole walk. -for D stops a walk at a budget of wall time.
// -scenario takes a comma-separated list, or all: each scenario's seeds
// are walked in turn, as a walk of it alone would be, each with an equal
// share of the -for budget the ones before it left; the text ends with the
// scenarios that failed, passed and stopped short, -json writes an object
// a scenario, the exit code is the worst, and -shard splits one
// scenario's walk only.
// explore names a schedule by its departures, "draws 24:2,25:5,62:1" (the
// 24th draw answered 2, …, every other 0), which run -draws follows in
// place of the seed's draws. A schedule that runs past -seed-timeout is
// reported as run reports a hang, with the stuck task's stack and the run
// -draws command that runs it again.
//
// Every run is held to the properties of package props (list -properties
// says what each promises); a failure names the one it violated. Seeds
// that pass say nothing of a race whose window none of them opened.
// The checker records the situations each run reached (props.Situation:
// the windows the properties are about, such as a frame of an ended
// incarnation reaching the output processor while the reused id's new
// incarnation is live; list -situations lists them); run prints them, and
// sweep, merge and compare count the seeds that reached each, with the
// scenario's targets (Scenario.Targets, or -targets) first. A sweep warns
// when no seed reached a target, and -min-reached N fails it (exit 1) when
// one was reached in fewer than N seeds. compare's -targets replaces both
// variants' targets, and its -min-reached fails it when either variant
// reached one in fewer than N seeds, whether or not a seed failed, naming
// the variant: a B that passes because it no longer opens the race's
// window has not fixed the race. shrink -reach SITUATION shrinks a run to
// the simplest that still reaches the situation and still passes, or fails
// the same way: the simplest opening of a race's window.
//
// stress runs real processes, so it counts situations as the program
// names them: every copy gets LLMDST_REACHED, a file of its own to which
// task.Reach on the real runtime appends each name the copy reaches, and
// stress counts, per variant, the copies that reached each situation, how
// many of them failed and the first, with -targets LIST (any names) first
// and a line for each target no copy reached. -min-reached N fails it
// (exit 1) when a variant reached a target in fewer than N copies, naming
// the variant, whether or not a copy failed. With -vs, the two variants
// are compared situation by situation as they are failure mode by failure
// mode (Fisher's exact test, corrected for the situations compared by
// Holm's method).
//
// -config KEY=VALUE (repeatable) sets the engine configuration under test
// in every engine a run makes, over the scenario's own settings, swarm's
// draws included (engine.Config's fields, vLLM's flags):
//
//   - async-scheduling=on|off: AsyncScheduling, vLLM's
//     --async-scheduling; the core schedules a step while the model runs
//     the one before it, so adds and aborts reach it with a step in flight.
//   - prefix-caching=on|off: EnablePrefixCaching, vLLM's
//     --enable-prefix-caching; a request whose prompt starts with full KV
//     blocks computed before takes them from the cache.
//   - policy=fcfs|priority: SchedulingPolicy, vLLM's --scheduling-policy,
//     spelt as vLLM spells it; requests are served in order of arrival or
//     of priority, and the one that would be served last is preempted.
//   - block-size=N: BlockSize, tokens in a KV block, N ≥ 1 (default 16).
//   - num-blocks=N: NumBlocks, the KV cache in blocks, vLLM's
//     num_gpu_blocks, one of them the null block, N ≥ 2 (default: two
//     sequences of max-model-len); when it runs out the scheduler preempts.
//   - max-num-seqs=N: MaxNumSeqs, requests running at once, N ≥ 1
//     (default 256).
//   - max-num-batched-tokens=N: MaxNumBatchedTokens, the token budget of a
//     step, N ≥ 1 and at least max-num-seqs (default 8192).
//   - max-model-len=N: MaxModelLen, the longest sequence in tokens, prompt
//     and output, from 2 to 2^29 (default 131072).
//   - stream-interval=N: StreamInterval, vLLM's --stream-interval, tokens
//     a Delta output waits for, N ≥ 0 (0 or 1: an output per token).
//   - output-chunk-size=N: OutputChunkSize, frames the output handler
//     processes before it yields, N ≥ 1 (default 128).
//   - step-time=D: StepTime, the model's latency per step in virtual time,
//     a positive Go duration (200µs, 2ms), or none for steps that take no
//     time (default 1ms; most scenarios set 200µs).
//   - data-parallel-size=N: DataParallelSize, vLLM's
//     --data-parallel-size, engine cores behind the one frontend, from 1
//     to 64 (default 1): a request goes to the least loaded, its aborts to
//     the core that holds it, and every control call to every core.
//   - enable-lora=on|off: EnableLoRA, vLLM's --enable-lora; requests may
//     run with a LoRA adapter; off, a request with one is refused.
//   - kv-offload-blocks=N: KVOffloadBlocks, vLLM's --kv-offloading-size
//     (native backend) in KV blocks, with prefix-caching=on: host memory
//     keeps the full blocks requests give back, and a request whose
//     prompt continues with them waits while they load back (0: off, the
//     default).
//   - kv-load-failure-policy=fail|recompute: KVLoadFailurePolicy, vLLM's
//     kv_load_failure_policy, for host memory a scenario or
//     kv-offload-blocks gives: a request whose load from host memory
//     failed (-failpoint core/kv-load-fails) ends with an error (fail, the
//     default) or computes the failed block and what follows again.
//   - kv-offload-max-recompute-pending-tokens=N: KVOffloadMaxRecomputePendingTokens,
//     vLLM's max_recompute_pending_tokens, for host memory a scenario or
//     kv-offload-blocks gives: a waiting request whose hit there ends with
//     at most N tokens of blocks a preempted request's store still copies
//     computes them again rather than wait for the store (HIT_PENDING);
//     it never shortens a request's wait for its own store (kv-offload
//     draws 4 or 8 in a quarter of its runs; 0, the default, always waits).
//   - kv-offload-policy=lru|arc: KVOffloadPolicy, vLLM's eviction_policy
//     of its CPU offloading, for host memory a scenario or kv-offload-blocks
//     gives: lru (the default) puts out the least recently used block
//     first; arc, an adaptive replacement cache, keeps blocks used again
//     apart from those used once (kv-offload and swarm draw it in half the
//     runs that have host memory).
//   - kv-offload-store-threshold=N: KVOffloadStoreThreshold, vLLM's
//     store_threshold, for host memory a scenario or kv-offload-blocks
//     gives: a block is stored there only once the lookups of waiting
//     requests have seen it N times; below 2 (the default 0) every block
//     is.
//   - kv-offload-tracker-size=N: KVOffloadTrackerSize, vLLM's
//     max_tracker_size, the blocks whose sightings the threshold counts,
//     least recently seen forgotten first (default 64000).
//   - max-loras=N: MaxLoRAs, vLLM's --max-loras, the most adapters one
//     step's batch uses, N ≥ 1 with enable-lora=on (default 1); a request
//     of another adapter waits for a slot.
//   - max-cpu-loras=N: MaxCPULoRAs, vLLM's --max-cpu-loras, the most
//     adapters the executor keeps loaded, least recently used out first
//     unless pinned, at least max-loras (default max-loras).
//   - num-speculative-tokens=N: NumSpeculativeTokens, vLLM's speculative
//     decoding with a draft model, from 0 (off, the default) to 64: a draft
//     model proposes each running request's next N tokens, the step after
//     computes them, and those the model agrees with are kept with one
//     more, with async scheduling or without (swarm, live-reload,
//     colocate, weight-sync and the LoRA scenarios draw draft tokens in a
//     quarter of their runs, kv-offload in a sixth).
//   - draft-miss-odds=N: with num-speculative-tokens, the draft model
//     misses the model's token one time in N, N ≥ 1 (default 4; 1: every
//     draft token wrong).
//   - scheduler-reserve-full-isl=on|off: ReserveFullSequence, vLLM's
//     --scheduler-reserve-full-isl (on by default there, off here): a
//     waiting request is admitted only when the KV blocks of its whole
//     sequence are free, not only those of its prompt's first chunk.
//
// A key given again replaces its value, and a compare variant's replaces
// a common one. The settings are checked before anything runs: a
// combination the engine refuses on its defaults is bad input, in the
// engine's words, unless the scenario's own configuration takes it on its
// first 16 seeds (kv-offload-blocks=2 suits kv-offload, which turns prefix
// caching on, not pause-resume, which draws it); so are settings the
// scenario's configuration refuses, and settings under which it refuses the
// scenario's own requests (num-blocks=40 against abort-reuse's requests of
// 100,000 tokens), as seed 1 shows them; a sweep of several scenarios
// skips those they do not suit, says so, and sweeps the others. A
// scenario that draws its settings or requests from the seed may still
// meet a refusal on other seeds: a drawn configuration the settings make
// invalid (max-num-seqs above swarm's small-batch budget of 6 tokens) is,
// in a sweep, a seed counted apart with a warning (compare keeps it a
// failure of its variant, named by the engine's sentence, so that its
// seeds stay paired), and a drawn request they make too
// large (prefix-chat's and kv-offload's under a smaller cache or model
// length) is left out of the run. The settings, sorted by key, are part of everything that names
// a run: the schedule file's meta (simrun replay runs them, and -strategy
// replay:FILE refuses a run under others), the header of run, sweep and
// compare, the commands printed to run a seed again, the -json output's
// "config" field (absent without -config) and the JUnit report; merge
// refuses shards of other settings.
//
// A seed that has made no scheduling decision for -seed-timeout of wall
// time (10 seconds by default) is a hang: a task loops without a scheduling point, or blocks on
// something the simulator cannot see (one that goes on deciding, however
// long, is left to the step limit). It fails with that task's stack,
// every goroutine's stack goes to OUT/SCENARIO-ENGINE-seedN.stacks.txt, and
// a sweep stops there.
//
// Exit codes: 0 when everything passed, 1 when a failure was found (for
// replay, a run that failed or whose trace hash is not the one its
// schedule recorded), 2 for bad usage or bad input, with a sentence saying
// what was wrong.
package main
