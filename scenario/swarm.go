package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// Swarm draws a whole workload from the seed, swarm-testing style: each
// run enables a random subset of features, so that features that mask each
// other get runs without each other. A small pool of ids makes reuse
// common — right after an abort, a cancel and a finish; every output kind,
// stop tokens and stop strings, single and batch aborts, clients walking
// away, WaitIdle, and engine configurations that force preemption, chunked
// prefill, one frame per output chunk, a model that ends sequences on its
// own, and no step latency; half the time, one to three armed failpoints
// (unless the options arm their own); a quarter of the time, Delta outputs
// batched by a stream interval; a third of the time, requests of two
// or three sequences (parallel sampling) among the others; and, a third of
// the time, the priority scheduling policy: each request draws a priority,
// half of them a long MaxTokens too, and half of those runs go under KV
// pressure, so that priority decides whom to preempt; and, a third of the
// time, prefix caching with small KV blocks, so that reused prompts, the
// sequences of a request and preempted requests find blocks cached — half
// of those runs with a system prompt every request shares, half under KV
// pressure, so that cached blocks are evicted and handed out again, and
// half with chunked prefill under a token budget of 8; and, a third of the
// time, chat turns: half of a client's requests continue the conversation
// of its request before (its prompt, the first tokens the model answers,
// new words), so that blocks of another request's output are found
// cached; and, a third of the time, async scheduling, so that adds and
// aborts reach the core with a step in flight and a stopped request
// computes a token that is dropped; and, a third of the time, pausing:
// each op of a client's script has one chance in six to be, instead of
// its request, a pause of the engine (PauseGeneration, of a drawn mode —
// abort, wait, keep — and KeepCache), a few steps paused, and the resume,
// so that pauses abort, outlive and freeze the other clients' requests,
// and overlap each other; and, a quarter of the time, data parallelism:
// two or three engine cores behind the frontend, and in half of those
// runs a third of the requests name the core they go to
// (DataParallelRank), so that the load balancer routes the others around
// them, aborts and pauses reach cores apart, and a model that dies kills
// one core of several; and, in half the runs with prefix caching, KV
// offloading to a host memory of 4 to 31 blocks, half of it under vLLM's
// ARC policy, so that the blocks requests give back are stored step by
// step and loaded back while requests are aborted, reused, preempted and
// paused. The interval,
// sequences, priorities, prefix caching, chat turns, async scheduling,
// pausing, data parallelism and offloading are each drawn from a stream
// of their own, so that every other draw of a seed is what it was before
// they existed. Options that change the engine's configuration
// (Options.Engine, simrun's -config) are honoured: priorities are drawn
// only for the priority policy, and a request refused as invalid under
// them — too long for a cache they shrank — is the engine doing its job.
var Swarm = &Scenario{
	Name:            "swarm",
	Summary:         "a whole workload drawn from the seed: reuse, aborts, cancels, stops, preemption (swarm testing)",
	DefaultStrategy: "chaos",
	Run:             swarm,
	Targets:         props.SetOf(props.StaleFrameAfterReuse, props.AbortAfterReuse),
}

func init() { Register(Swarm) }

// streamSequences is the stream of the seed that swarm draws parallel
// sampling from ("SEQUENCE").
const streamSequences uint64 = 0x53455155454e4345

// streamPriority is the stream of the seed that swarm draws the priority
// policy, the requests' priorities and their long MaxTokens from
// ("PRIORITY").
const streamPriority uint64 = 0x5052494f52495459

// streamInterval is the stream of the seed that swarm draws a Delta
// stream interval from ("INTERVAL").
const streamInterval uint64 = 0x494e54455256414c

// streamPrefix is the stream of the seed that swarm draws prefix
// caching, its block size, a shared system prompt and KV pressure from
// ("PREFIXCA").
const streamPrefix uint64 = 0x5052454649584341

// streamChat is the stream of the seed that swarm draws chat turns from
// ("CHATTURN").
const streamChat uint64 = 0x4348415454555246

// streamAsync is the stream of the seed that swarm draws async scheduling
// from ("ASYNCSCH").
const streamAsync uint64 = 0x4153594e43534348

// streamPause is the stream of the seed that swarm draws pausing, the
// pauses' modes, KeepCache and lengths from ("PAUSEGEN").
const streamPause uint64 = 0x504155534547454e

// streamDataParallel is the stream of the seed that swarm draws data
// parallelism, its cores and the requests' ranks from ("DATAPARL").
const streamDataParallel uint64 = 0x444154415041524c

// streamOffload is the stream of the seed that swarm draws KV offloading,
// its host memory and its policy from ("OFFLOADS").
const streamOffload uint64 = 0x4f46464c4f414453

// streamSpec is the stream of the seed that swarm draws speculative
// decoding from ("SPECDECD").
const streamSpec uint64 = 0x5350454344454344

// drawSpec draws speculative decoding into cfg in a quarter of the runs,
// from the seed's stream "SPECDECD", so that the draws before it keep
// their runs: one to four draft tokens a step, from a draft model that
// misses the model's token one time in one to eight (every time: drafts
// all rejected). It returns the stream for further draws, or nil when it
// drew none.
func drawSpec(x *Run, cfg *engine.Config) *sim.PCGChooser {
	sp := sim.NewPCGChooser(x.Opts.Seed, streamSpec)
	if sp.Intn(4) != 0 {
		return nil
	}
	cfg.NumSpeculativeTokens = 1 + sp.Intn(4)
	cfg.Draft = core.DraftModel{MissOdds: uint64(1 + sp.Intn(8))}
	return sp
}

// drawHostMemory draws KV offloading into cfg, whose prefix caching is on,
// in an eighth of the runs, from the seed's stream "OFFLOADS", so that the
// draws before it keep their runs (and not in the seeds the tests and docs
// name): host memory of 8 to 24 blocks, under LRU or ARC, and a GPU cache
// of 24 to 48 blocks unless one was drawn already. The RL and LoRA
// scenarios draw it so that their resets, pauses and weight updates meet
// stores and loads in flight: a reset preempts between steps, and a
// request whose store it caught waits for the next step to report it.
func drawHostMemory(x *Run, cfg *engine.Config) {
	hm := sim.NewPCGChooser(x.Opts.Seed, streamOffload)
	if hm.Intn(8) != 2 {
		return
	}
	cfg.KVOffloadBlocks = 8 + hm.Intn(17)
	if hm.Intn(2) == 0 {
		cfg.KVOffloadPolicy = engine.OffloadARC
	}
	if cfg.NumBlocks == 0 {
		// A GPU cache of 24 to 48 blocks, which the longest request fits
		// (pause-resume's): its blocks go out to host memory and come back.
		cfg.NumBlocks = 24 + hm.Intn(25)
	}
}

// chatTurnTokensMax bounds a chat turn's prompt and MaxTokens together, so
// that it fits every cache swarm draws (kv-pressure's holds 124 tokens).
const chatTurnTokensMax = 100

// swarmSystemPrompt is what every prompt of a run that shares one starts
// with: ten words, whole blocks of every block size swarm draws for prefix
// caching, and some more.
const swarmSystemPrompt = "you are a helpful assistant who answers in few words "

// swarmCacheBlockSizes are the block sizes of the runs with prefix caching
// on a configuration of the default size: small enough that swarm's
// prompts fill whole blocks.
var swarmCacheBlockSizes = []int{2, 4, 8}

// swarmPriorities are the priorities a request draws under the priority
// policy: one more urgent than the default, the default, and two less.
var swarmPriorities = []int{-1, 0, 1, 2}

// swarmConfig is one of the engine configurations swarm draws from.
type swarmConfig struct {
	name string
	cfg  engine.Config
}

var swarmConfigs = []swarmConfig{
	{"default", engine.Config{StepTime: FoundingStepTime}},
	kvPressure,
	{"small-batch", engine.Config{StepTime: FoundingStepTime, MaxNumSeqs: 2, MaxNumBatchedTokens: 6}},
	{"chunk-1", engine.Config{StepTime: FoundingStepTime, OutputChunkSize: 1}},
	{"eos", engine.Config{StepTime: FoundingStepTime, Model: core.ToyModel{EOSOdds: 6}}},
	{"no-latency", engine.Config{StepTime: engine.NoStepTime}},
}

// kvPressure is the configuration that preempts most.
var kvPressure = swarmConfig{"kv-pressure", engine.Config{StepTime: FoundingStepTime, BlockSize: 4, NumBlocks: 32}}

// features a run may enable.
type features struct {
	abort, batchAbort, cancel, walkAway, stopTokens, stopStrings, minTokens, waitIdle, long, faults bool
}

func drawFeatures(x *Run) features {
	on := func() bool { return x.Rand.Intn(2) == 1 }
	return features{abort: on(), batchAbort: on(), cancel: on(), walkAway: on(), stopTokens: on(),
		stopStrings: on(), minTokens: on(), waitIdle: on(), long: on(), faults: on()}
}

// drawFaults arms one to three failpoints, and how, from the seed: delays
// and reorderings at drawn ratios or counts, and now and then a model that
// dies after a drawn number of steps.
func drawFaults(x *Run) []string {
	r := x.Rand
	delays := []string{"100", "400", "1600", "6400"}
	ratios := []string{"1/8*", "1/2*", "", "3*", "2*off->"}
	// Faults of host memory are kv-offload's to draw: the list stays as
	// it was before them, and so do swarm's draws.
	points := slices.DeleteFunc(failpoints.All(), func(p *failpoints.Point) bool { return p == failpoints.CoreKVLoadFails })
	var specs []string
	seen := map[string]bool{}
	for n := 1 + r.Intn(3); n > 0; n-- {
		p := points[r.Intn(len(points))]
		if seen[p.Name] {
			continue
		}
		seen[p.Name] = true
		mod := ratios[r.Intn(len(ratios))]
		switch p {
		case failpoints.ModelPanic:
			specs = append(specs, fmt.Sprintf("%s=%d*off->panic(the model fell over)", p.Name, 5+r.Intn(200)))
		case failpoints.AbortAfterAdd, failpoints.ClientAbandon:
			specs = append(specs, p.Name+"="+mod+"return")
		default:
			specs = append(specs, p.Name+"="+mod+"return("+delays[r.Intn(len(delays))]+")")
		}
	}
	return specs
}

var swarmPrompts = []string{"hello", "the quick brown fox", "one two three four five six seven eight nine ten eleven twelve", "water"}

func swarm(x *Run) error {
	sc := swarmConfigs[x.Rand.Intn(len(swarmConfigs))]
	var prios sim.Chooser // nil: FCFS, every request of priority 0
	if p := sim.NewPCGChooser(x.Opts.Seed, streamPriority); p.Intn(3) == 0 {
		prios = p
		if p.Intn(2) == 0 {
			sc = kvPressure // x.Rand's draw stands, so that its later draws do not move
		}
	}
	caching := sim.NewPCGChooser(x.Opts.Seed, streamPrefix)
	system, offload, threshold, arc, oneAtATime := "", 0, 0, false, false
	if caching.Intn(3) != 0 {
		caching = nil
	} else {
		if caching.Intn(2) == 0 {
			system = swarmSystemPrompt
		}
		if caching.Intn(2) == 0 {
			sc = kvPressure // evictions: x.Rand's draw stands, as above
		}
		if o := sim.NewPCGChooser(x.Opts.Seed, streamOffload); o.Intn(2) == 0 {
			// Under KV pressure, so that the blocks host memory keeps are
			// ones the GPU's cache lost, and requests load them back.
			offload, sc = 4+o.Intn(28), kvPressure
			arc = o.Intn(2) == 0
			if o.Intn(4) == 0 {
				threshold = 2 // vLLM's store_threshold: a block seen by one lookup is not stored
			}
			// One request at a time: a load in flight holds back every
			// waiting request (the connector's back-pressure).
			oneAtATime = o.Intn(8) == 0
		}
	}
	f := drawFeatures(x)
	cfg := sc.cfg
	if caching != nil {
		cfg.EnablePrefixCaching = true
		if cfg.BlockSize == 0 {
			cfg.BlockSize = swarmCacheBlockSizes[caching.Intn(len(swarmCacheBlockSizes))]
		}
		if caching.Intn(2) == 0 {
			// Chunked prefill under a small token budget: a request's
			// prefill runs over steps beside others' decodes, so that it
			// can need several blocks in a step where others run.
			cfg.MaxNumSeqs, cfg.MaxNumBatchedTokens = 4, 8
		}
		if x.engineConfig(cfg).EnablePrefixCaching { // the options may turn it off
			cfg.KVOffloadBlocks, cfg.KVOffloadStoreThreshold = offload, threshold
			if oneAtATime {
				cfg.MaxNumSeqs = 1
			}
			if arc {
				cfg.KVOffloadPolicy = engine.OffloadARC
			}
		}
	}
	if prios != nil {
		cfg.SchedulingPolicy = engine.PolicyPriority
	}
	if x.engineConfig(cfg).SchedulingPolicy != engine.PolicyPriority {
		// The options may set the policy over swarm's: priorities are
		// drawn only for an engine that serves by them, since FCFS refuses
		// a request with one.
		prios = nil
	}
	if a := sim.NewPCGChooser(x.Opts.Seed, streamAsync); a.Intn(3) == 0 {
		cfg.AsyncScheduling = true
	}
	if sp := drawSpec(x, &cfg); sp != nil {
		// With async scheduling in a third of these runs.
		if x.engineConfig(cfg).AsyncScheduling && sp.Intn(2) == 0 {
			// A step's budget of about one request's token and drafts:
			// the requests behind the first are passed over, and their
			// draft placeholders must go (vLLM's #46899).
			cfg.MaxNumBatchedTokens = cfg.NumSpeculativeTokens + 1 + sp.Intn(2)
			if cfg.MaxNumSeqs == 0 || cfg.MaxNumSeqs > cfg.MaxNumBatchedTokens {
				cfg.MaxNumSeqs = min(4, cfg.MaxNumBatchedTokens)
			}
		}
	}
	if iv := sim.NewPCGChooser(x.Opts.Seed, streamInterval); iv.Intn(4) == 0 {
		cfg.StreamInterval = 2 + iv.Intn(4) // Delta outputs of 2 to 5 tokens
	}
	var ranks rankDraw // no request names its core
	if d := sim.NewPCGChooser(x.Opts.Seed, streamDataParallel); d.Intn(4) == 0 {
		cfg.DataParallelSize = 2 + d.Intn(2)
		// The options may set the cores over swarm's: a request names a
		// core of the engine it is sent to.
		if n := x.engineConfig(cfg).DataParallelSize; n > 1 && d.Intn(2) == 0 {
			ranks = rankDraw{d, n}
		}
	}
	if f.faults && len(x.Opts.Failpoints) == 0 {
		faults, err := x.faultsWith(drawFaults(x)...)
		if err != nil {
			return fmt.Errorf("swarm drew failpoints it cannot arm: %w", err)
		}
		cfg.Faults = faults
	}
	e, err := x.NewEngine(cfg)
	if err != nil {
		return err
	}
	model := sc.cfg.Model
	if model == nil {
		model = core.ToyModel{}
	}
	ids := []string{"a", "b", "c", "d"}[:2+x.Rand.Intn(3)]
	clients := 1 + x.Rand.Intn(3)
	var seqs sim.Chooser // nil: every request has one sequence
	if s := sim.NewPCGChooser(x.Opts.Seed, streamSequences); s.Intn(3) == 0 {
		seqs = s
	}
	var chat sim.Chooser // nil: no request continues another's conversation
	if c := sim.NewPCGChooser(x.Opts.Seed, streamChat); c.Intn(3) == 0 {
		chat = c
	}
	var pauses sim.Chooser // nil: nobody pauses the engine
	if p := sim.NewPCGChooser(x.Opts.Seed, streamPause); p.Intn(3) == 0 {
		pauses = p
	}
	g := task.NewGroup(x.RT, "clients")
	errs := make([]error, clients)
	for c := 0; c < clients; c++ {
		// Each client draws its script before any runs, so that the
		// workload does not depend on the interleaving.
		script := drawScript(x, f, ids, model, seqs, prios, chat, pauses, ranks, system)
		g.Go("client-"+strconv.Itoa(c), func() { errs[c] = runScript(x, e, script) })
	}
	g.Wait()
	// The scripts take ErrEngineDead as the clear error it is; but only a
	// failpoint that kills the model may kill the engine.
	if died := x.Checker.Dead(); died != nil && !x.engineConfig(cfg).Faults.Armed(failpoints.ModelPanic) {
		errs = append(errs, fmt.Errorf("the engine died, and no failpoint kills the model: %w", died))
	}
	return errors.Join(errs...)
}

// op is one step of a client's script.
type op struct {
	kind    opKind
	id      string
	prompt  string
	params  engine.Params
	reads   int      // outputs to read before acting
	targets []string // batch abort
	pause   int      // steps of the engine to sleep after the op
	// opPause: how to pause generation, and the steps of the engine to
	// stay paused before the resume.
	gen    engine.PauseOptions
	paused int
}

type opKind uint8

const (
	opDrain    opKind = iota // add, read to the end
	opAbort                  // add, read some, Abort(id), read to the end
	opCancel                 // add, read some, Cancel, read to the end
	opWalkAway               // Generate, stop ranging after some outputs
	opBatch                  // add, read some, Abort(several ids)
	opWaitIdle               // WaitIdle
	opPause                  // PauseGeneration, sleep, ResumeGeneration
)

// rankDraw draws the data-parallel ranks requests name, of cores cores;
// a nil chooser draws none.
type rankDraw struct {
	sim.Chooser
	cores int
}

func drawScript(x *Run, f features, ids []string, model core.Model, seqs, prios, chat, pauses sim.Chooser, ranks rankDraw, system string) []op {
	r := x.Rand
	n := 2 + r.Intn(5)
	kinds := []opKind{opDrain}
	if f.abort {
		kinds = append(kinds, opAbort)
	}
	if f.cancel {
		kinds = append(kinds, opCancel)
	}
	if f.walkAway {
		kinds = append(kinds, opWalkAway)
	}
	if f.batchAbort {
		kinds = append(kinds, opBatch)
	}
	if f.waitIdle {
		kinds = append(kinds, opWaitIdle)
	}
	script := make([]op, 0, n)
	for i := 0; i < n; i++ {
		o := op{id: ids[r.Intn(len(ids))], prompt: system + swarmPrompts[r.Intn(len(swarmPrompts))], reads: r.Intn(4)}
		o.params = engine.Params{MaxTokens: 1 + r.Intn(12), Output: engine.OutputKind(r.Intn(3))}
		o.kind = kinds[r.Intn(len(kinds))]
		if f.long && o.kind != opDrain && r.Intn(2) == 0 {
			o.params.MaxTokens = 40 + r.Intn(60) // long enough to be cut short
		}
		var ts []int
		if f.stopTokens || f.stopStrings {
			ts = core.Tokens(model, core.Tokenizer{}.Encode(o.prompt), o.params.MaxTokens)
		}
		if f.minTokens && r.Intn(3) == 0 {
			o.params.MinTokens = r.Intn(o.params.MaxTokens + 1)
		}
		if f.stopTokens && r.Intn(3) == 0 {
			o.params.StopTokenIDs = []int{ts[r.Intn(len(ts))]}
		}
		if f.stopStrings && r.Intn(3) == 0 {
			word := strings.TrimSpace(core.Tokenizer{}.Piece(ts[r.Intn(len(ts))]))
			if word != "" {
				o.params.Stop = []string{" " + word}
				if r.Intn(2) == 0 && len(word) > 2 {
					o.params.Stop = []string{word[1:], "no such words"}
				}
			}
		}
		if f.waitIdle && r.Intn(8) == 0 {
			o.pause = 1 + r.Intn(3)
		}
		if seqs != nil && seqs.Intn(3) == 0 {
			o.params.N = 2 + seqs.Intn(2)
		}
		if prios != nil {
			o.params.Priority = swarmPriorities[prios.Intn(len(swarmPriorities))]
			if prios.Intn(2) == 0 {
				// Long requests side by side run the cache out: priority
				// then decides whom to preempt. MinTokens and the stops
				// drawn for the shorter request still hold.
				o.params.MaxTokens = max(o.params.MaxTokens, 40+prios.Intn(60))
			}
		}
		if chat != nil && i > 0 && chat.Intn(2) == 0 {
			// Last, so that the turn fits the MaxTokens drawn above.
			o.prompt = nextTurn(model, script[i-1], o, chat)
		}
		if ranks.Chooser != nil && ranks.Intn(3) == 0 {
			o.params.DataParallelRank = new(ranks.Intn(ranks.cores))
		}
		if o.kind == opBatch {
			for _, id := range ids {
				if r.Intn(2) == 0 || id == o.id {
					o.targets = append(o.targets, id)
				}
			}
		}
		if pauses != nil && pauses.Intn(6) == 0 {
			// Last, so that every draw above is what it was: the op's
			// request, drawn all the same, is not sent (a later chat turn
			// may still continue its conversation).
			o.kind = opPause
			o.gen = engine.PauseOptions{Mode: engine.PauseMode(pauses.Intn(3)), KeepCache: pauses.Intn(2) == 0}
			o.paused = 1 + pauses.Intn(5)
		}
		script = append(script, o)
	}
	return script
}

// runScript plays a client's script. A request the client adds must end:
// with a finished output, or, for the engine refusing it, a clear error.
func runScript(x *Run, e *engine.AsyncLLM, script []op) error {
	for i, o := range script {
		if x.Failed() {
			return nil
		}
		switch o.kind {
		case opWaitIdle:
			if err := e.WaitIdle(context.Background()); err != nil && !errors.Is(err, engine.ErrEngineDead) {
				return fmt.Errorf("op %d: WaitIdle: %w", i, err)
			}
			continue
		case opPause:
			if err := pauseFor(x, e, o); err != nil {
				return fmt.Errorf("op %d: %w", i, err)
			}
			continue
		case opWalkAway:
			n := 0
			for _, err := range e.Generate(context.Background(), o.id, o.prompt, o.params) {
				if err != nil {
					if errors.Is(err, engine.ErrDuplicateRequestID) || errors.Is(err, engine.ErrEngineDead) || refusedByOptions(x, err) {
						break
					}
					return fmt.Errorf("op %d: Generate(%s): %w", i, o.id, err)
				}
				if n++; n > o.reads {
					break // the client walks away: Generate cancels the request
				}
			}
			continue
		}
		r, err := e.AddRequest(o.id, o.prompt, o.params)
		if errors.Is(err, engine.ErrDuplicateRequestID) || refusedByOptions(x, err) {
			continue // another client holds the id: fine, and common
		}
		if errors.Is(err, engine.ErrEngineDead) {
			return nil // a failpoint killed the model: later calls fail fast, as they should
		}
		if err != nil {
			return fmt.Errorf("op %d: AddRequest(%s): %w", i, o.id, err)
		}
		finished := false
		for k := 0; k < o.reads && o.kind != opDrain && !finished; k++ {
			out, err := r.Next()
			if errors.Is(err, engine.ErrEngineDead) {
				return nil // the request ended with the clear error it should
			}
			if err != nil {
				return fmt.Errorf("op %d: %s: %w", i, o.id, err)
			}
			finished = out.Finished
		}
		switch o.kind {
		case opAbort:
			e.Abort(o.id)
		case opCancel:
			r.Cancel()
		case opBatch:
			e.Abort(o.targets...)
		}
		_, last, err := x.drain(r)
		if errors.Is(err, errStopped) || errors.Is(err, engine.ErrEngineDead) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("op %d: %s: %w", i, o.id, err)
		}
		if !finished && !last.Finished {
			return fmt.Errorf("op %d: %s (incarnation %d) ended without a finished output", i, o.id, r.Incarnation())
		}
		if o.pause > 0 {
			x.RT.Sleep(time.Duration(o.pause) * FoundingStepTime)
		}
	}
	return nil
}

// pauseFor pauses the engine as o says, sleeps o.paused steps and resumes
// it; every pause is resumed, whatever the pause returned, so that nobody
// waits for ever. ErrEngineDead is the clear error it should be.
func pauseFor(x *Run, e *engine.AsyncLLM, o op) error {
	ctx := context.Background()
	// Another client's resume may overtake the pause: ErrResumed says so.
	err := e.PauseGeneration(ctx, o.gen)
	if err != nil && !errors.Is(err, engine.ErrEngineDead) && !errors.Is(err, engine.ErrResumed) {
		err = fmt.Errorf("PauseGeneration(%s, keep cache %t): %w", o.gen.Mode, o.gen.KeepCache, err)
	} else {
		err = nil
	}
	x.RT.Sleep(time.Duration(o.paused) * FoundingStepTime)
	if rerr := e.ResumeGeneration(ctx); rerr != nil && !errors.Is(rerr, engine.ErrEngineDead) {
		err = errors.Join(err, fmt.Errorf("ResumeGeneration: %w", rerr))
	}
	return err
}

// refusedByOptions reports whether the engine refused a request as
// invalid under a configuration the options changed (simrun's -config): a
// smaller KV cache or model length than swarm's workload was drawn for
// refuses its longest requests, with a clear error, as it should. Without
// options swarm's configurations fit every request it draws, and a
// refusal is a failure.
func refusedByOptions(x *Run, err error) bool {
	return x.Opts.Engine != nil && errors.Is(err, engine.ErrInvalidRequest)
}

// joinUnrefused joins the clients' errors but for the refusals of
// requests the options made too large (refusedByOptions): a scenario that
// draws its requests from the seed meets them on some seeds of a setting
// and not on others, and a client whose request was refused has nothing
// more to check.
func joinUnrefused(x *Run, errs []error) error {
	for i, err := range errs {
		if refusedByOptions(x, err) {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// nextTurn returns the prompt of o as the next turn of the conversation of
// prev, as a chat client sends it: prev's prompt, the first tokens the
// model answers it with, and o's own words, so that the prefix cache holds
// blocks of prev's sequence, output included, for o to find. It keeps o's
// prompt when the turn would not fit chatTurnTokensMax.
func nextTurn(model core.Model, prev, o op, chat sim.Chooser) string {
	tok := core.Tokenizer{}
	before := tok.Encode(prev.prompt)
	k := 1 + chat.Intn(prev.params.MaxTokens)
	if len(before)+k+len(tok.Encode(o.prompt))+o.params.MaxTokens > chatTurnTokensMax {
		return o.prompt
	}
	sp := prev.params.Sampling()
	answer := core.Sampled(model, before, k, &sp, core.EOSTokenID)
	if i := slices.Index(answer, core.EOSTokenID); i >= 0 {
		answer = answer[:i] // the answer ends there
	}
	return prev.prompt + tok.Decode(answer) + " " + o.prompt
}
