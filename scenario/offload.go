package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/props"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// streamOffloadPolicy is the stream of the seed that kv-offload draws
// host memory's policy and store threshold from ("OFFPOLCY").
const streamOffloadPolicy uint64 = 0x4f4646504f4c4359

// KVOffload is a document-question service with KV offloading to host
// memory (vLLM's --kv-offloading-backend native), in a KV cache of 4-token
// blocks too small to keep the shared document cached while a batch job
// streams through it:
//
//	readers (2 to 4)  turns of the document and a question of their own;
//	                  half give up a drawn while after sending, which often
//	                  falls while the document's KV loads back from host
//	                  memory, and then ask again at once under the same id,
//	                  or ask the question alone, or nothing
//	batch             long prompts of their own, which put the document's
//	                  blocks out of the GPU's cache (into host memory)
//	trainer           in half the seeds, a weight update: a reset of the
//	                  prefix cache, retried until nothing holds a block
//
// The scheduler gives a request whose KV loads its blocks at once and
// keeps it waiting until the copy lands; an aborted one keeps them until
// then too, or the copy overwrites the KV of the request that took them
// (core/kv-load-frees-on-abort). A request's blocks are stored to host
// memory as its steps fill them, and one that ends keeps them until its
// last copies land, or they read the KV of the request that took them
// (core/kv-store-frees-early). A reset drops what host memory holds, or a
// later reader loads KV the old weights computed
// (core/reset-keeps-offloaded-kv, vLLM's default). Host memory keeps the
// blocks a load reads until it lands, or a store's copy overwrites them
// (core/kv-evict-while-loading); a store that waits for them is the
// situation kv-store-waited-for-loads, rare here (0.2% of the first 2,000
// seeds, in the quarter with small host memory), so not a target. Readers
// of the document whose blocks another's load brings back wait for it
// rather than load them again (kv-load-waited-for-a-load, a target), and
// once a load lands host memory is told, whether its reader gave up or
// not, or the next reader of its blocks waits for ever
// (core/kv-load-forgotten-on-abort: the run deadlocks). Every
// token must be the model's. Async scheduling in half the seeds, the
// priority policy in a quarter, and in a quarter host memory smaller than
// the GPU's cache, where a step's blocks often find no room and are
// stored a later step; in half, from a stream of its own, host memory
// puts out blocks by vLLM's ARC policy rather than least recently used
// first, in a quarter stores only blocks two lookups saw (vLLM's
// store_threshold), in an eighth runs one request at a time, where a
// load in flight holds back every waiting request (kv-load-held-back),
// in a sixth decodes with one to three draft tokens (speculative
// decoding), and in a quarter computes again a pending tail of a hit of
// one or two blocks rather than wait for a preempted request's store
// (vLLM's max_recompute_pending_tokens, kv-pending-computed-again), and in
// an eighth fails a quarter of its loads from host memory (vLLM's
// invalid_block_ids, kv-load-failed), half of those seeds under
// kv_load_failure_policy recompute and half under fail.
var KVOffload = &Scenario{
	Name:            "kv-offload",
	Summary:         "readers of a shared document whose KV loads back from host memory while they give up, a batch job and a weight update (KV offloading)",
	DefaultStrategy: "chaos",
	Run:             kvOffload,
	Targets:         props.SetOf(props.KVLoadedFromHost, props.KVLoadLandedAfterAbort, props.KVLoadWaitedForALoad),
}

func init() { Register(KVOffload) }

func kvOffload(x *Run) error {
	r := x.Rand
	cfg := engine.Config{StepTime: FoundingStepTime, EnablePrefixCaching: true, BlockSize: 4,
		NumBlocks: 10 + r.Intn(5), KVOffloadBlocks: 16 + r.Intn(24), MaxNumSeqs: 4, MaxNumBatchedTokens: 16,
		AsyncScheduling: r.Intn(2) == 0}
	if r.Intn(4) == 0 {
		cfg.SchedulingPolicy = engine.PolicyPriority
	}
	if r.Intn(4) == 0 {
		// Host memory smaller than the GPU's cache: a step's blocks
		// often find no room and wait for the next.
		cfg.KVOffloadBlocks = 4 + r.Intn(8)
	}
	pol := sim.NewPCGChooser(x.Opts.Seed, streamOffloadPolicy) // a stream of its own: every other draw stands
	if pol.Intn(2) == 0 {
		cfg.KVOffloadPolicy = engine.OffloadARC
	}
	if pol.Intn(4) == 0 {
		// vLLM's store_threshold: only blocks two lookups saw are
		// stored, the shared document's, not a one-off question's.
		cfg.KVOffloadStoreThreshold = 2
	}
	if pol.Intn(8) == 3 { // an eighth of the seeds, not those the tests and docs name
		// One request runs at a time, and one load in flight holds back
		// every waiting request before its lookup (the connector's
		// back-pressure), a load of a reader that gave up too.
		cfg.MaxNumSeqs = 1
	}
	if pol.Intn(6) == 4 { // a sixth, not the seeds the tests and docs name
		// Speculative decoding: draft tokens computed with the readers'
		// decodes, their blocks rolled back where the model disagrees,
		// while loads and stores of the document run.
		cfg.NumSpeculativeTokens = 1 + pol.Intn(3)
		cfg.Draft = core.DraftModel{MissOdds: uint64(2 + pol.Intn(4))}
	}
	if pol.Intn(4) == 1 {
		// vLLM's max_recompute_pending_tokens: a reader whose hit ends
		// with a block or two of a preempted request's store in flight
		// computes them rather than wait for the store; the preempted
		// request still waits for its own.
		cfg.KVOffloadMaxRecomputePendingTokens = cfg.BlockSize * (1 + pol.Intn(2))
	}
	if pol.Intn(8) == 5 && !x.Faults.Armed(failpoints.CoreKVLoadFails) {
		// A connector whose loads fail now and then (vLLM's
		// invalid_block_ids): the reader ends with an error, or, in half
		// of these seeds, computes the failed block again.
		if pol.Intn(2) == 0 {
			cfg.KVLoadFailurePolicy = engine.LoadFailureRecompute
		}
		faults, err := x.faultsWith(failpoints.CoreKVLoadFails.Name + "=1/4*return")
		if err != nil {
			return err
		}
		cfg.Faults = faults
	}
	e, err := x.NewEngine(cfg)
	if err != nil {
		return err
	}
	words := strings.Fields(core.Tokenizer{}.Decode(seqTokens(1+r.Intn(400), 80)))
	docLen := 16 + r.Intn(9) // 4 to 6 blocks
	doc := strings.Join(words[:docLen], " ")
	// A question leaves room in the cache for the document, its longest
	// answer and a block.
	questionMax := min(13, (cfg.NumBlocks-2)*cfg.BlockSize-docLen-6)
	readers := 2 + r.Intn(3)
	type plan struct {
		turns    int
		waits    []time.Duration // before each turn
		giveUp   []time.Duration // after sending; 0: reads to the end
		then     []int           // after giving up: 0 nothing, 1 asks again at once under the same id, 2 asks an aside
		question []string
		max      []int
	}
	plans := make([]plan, readers)
	for i := range plans {
		p := plan{turns: 2 + r.Intn(3)}
		for t := 0; t < p.turns; t++ {
			p.waits = append(p.waits, time.Duration(r.Intn(12))*FoundingStepTime)
			var give time.Duration
			if r.Intn(2) == 0 { // mostly within the step a load takes
				give = time.Duration(1+r.Intn(5)) * FoundingStepTime / 4
			}
			p.giveUp = append(p.giveUp, give)
			p.then = append(p.then, []int{0, 1, 2, 2}[r.Intn(4)])
			at := 30 + r.Intn(30)
			p.question = append(p.question, strings.Join(words[at:at+2+r.Intn(questionMax-1)], " "))
			p.max = append(p.max, 2+r.Intn(5))
		}
		plans[i] = p
	}
	batch := 1 + r.Intn(3)
	batchWaits := make([]time.Duration, batch)
	batchPrompts := make([]string, batch)
	for i := range batch {
		batchWaits[i] = time.Duration(r.Intn(16)) * FoundingStepTime
		from := 1 + r.Intn(400)
		// At most the cache's usable blocks, its two tokens of output
		// and a block to spare.
		batchPrompts[i] = core.Tokenizer{}.Decode(seqTokens(from, min(24+r.Intn(17), (cfg.NumBlocks-2)*cfg.BlockSize-4)))
	}
	train := r.Intn(2) == 0
	trainWait := time.Duration(4+r.Intn(20)) * FoundingStepTime

	g := task.NewGroup(x.RT, "clients")
	errs := make([]error, readers+batch+1)
	for i, p := range plans {
		id := fmt.Sprintf("reader-%d", i)
		g.Go(id, func() {
			for t := 0; t < p.turns && !x.Failed(); t++ {
				x.RT.Sleep(p.waits[t])
				prompt := doc + " " + p.question[t]
				params := engine.Params{MaxTokens: p.max[t], Output: engine.Delta}
				if p.giveUp[t] == 0 {
					if _, err := x.turn(e, id, prompt, params); err != nil && !refusedByOptions(x, err) {
						errs[i] = err
						return
					}
					continue
				}
				req, err := e.AddRequest(id, prompt, params)
				if refusedByOptions(x, err) {
					continue
				}
				if err != nil {
					errs[i] = fmt.Errorf("AddRequest(%s): %w", id, err)
					return
				}
				x.RT.Sleep(p.giveUp[t])
				e.Abort(id)
				if _, _, err := x.drain(req); err != nil {
					errs[i] = fmt.Errorf("%s: %w", id, err)
					return
				}
				switch p.then[t] {
				case 1:
					_, err = x.turn(e, id, prompt, params)
				case 2: // without the document: blocks of its own, at once
					_, err = x.turn(e, id+"-aside", p.question[t], params)
				}
				if err != nil && !refusedByOptions(x, err) {
					errs[i] = err
					return
				}
			}
		})
	}
	for i := range batch {
		id := fmt.Sprintf("batch-%d", i)
		g.Go(id, func() {
			x.RT.Sleep(batchWaits[i])
			_, errs[readers+i] = x.turn(e, id, batchPrompts[i], engine.Params{MaxTokens: 2 + i})
		})
	}
	if train {
		g.Go("trainer", func() {
			x.RT.Sleep(trainWait)
			// A weight update between turns: the reset is refused while a
			// request holds blocks, so the trainer retries.
			for try := 0; try < 40 && !x.Failed(); try++ {
				ok, err := e.ResetPrefixCache(context.Background(), false)
				if err != nil {
					errs[readers+batch] = fmt.Errorf("ResetPrefixCache: %w", err)
					return
				}
				if ok {
					return
				}
				x.RT.Sleep(FoundingStepTime)
			}
		})
	}
	g.Wait()
	return joinUnrefused(x, errs)
}
