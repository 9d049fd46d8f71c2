package core_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/sim"
)

// TestBlocksProperty drives a bare Scheduler, with prefix caching on or
// off and async scheduling on or off, through random workloads of prompts
// that share prefixes, in a cache of small blocks and few of them (so that
// requests are preempted and cached blocks evicted), with aborts between
// steps — with async scheduling, while a step is in flight — and ids of
// ended requests used again, as the core sees them under legacy routing.
// After every step the block pool's invariants hold (CheckBlocks), every
// live request has a placeholder for each step in flight that samples for
// it, and every request's tokens are those the model samples for it: a
// block-management bug would make the model read someone else's KV and
// sample wrong tokens, and an output applied to the wrong request would
// give it someone else's. At the end every request has ended.
func TestBlocksProperty(t *testing.T) { rapid.Check(t, blocksProperty(false, false, false)) }

// TestBlocksPropertyWithResets is TestBlocksProperty with resets of the
// prefix cache among the actions, with or without preempting the running
// requests: under async scheduling with a step in flight, whose outputs
// for the requests it preempts are dropped — a live request's placeholders
// and the outputs it will drop then add up to the steps in flight that
// sample for it. (A test of its own, so that TestBlocksProperty's saved
// failures keep drawing the actions they were found with.)
func TestBlocksPropertyWithResets(t *testing.T) { rapid.Check(t, blocksProperty(true, false, false)) }

// TestBlocksPropertyWithLoRA is TestBlocksProperty with 1 to 3 LoRA slots
// and each request of one of four adapters or of the base model: every
// request still samples its own adapter's tokens (so no request reads KV
// another adapter wrote, through the prefix cache or otherwise), no step
// schedules more adapters than the slots, and every request still ends,
// however long it waited for a slot.
func TestBlocksPropertyWithLoRA(t *testing.T) { rapid.Check(t, blocksProperty(true, true, false)) }

// TestBlocksPropertyWithOffload is TestBlocksPropertyWithResets with
// prefix caching on and KV offloading to host memory of 1 to 16 blocks,
// the loads it starts landing among the actions, in order of start:
// requests whose KV loads hold the blocks of their whole sequence, an
// aborted one until its load lands, every request still samples its own
// tokens from the KV it loaded, and every request still ends. In two
// thirds of the cases a third or half of the loads fail
// (core/kv-load-fails), under either load-failure policy: a request that
// computes again samples its own tokens, one that fails ends, and no block
// is lost (a planted core/kv-load-caches-invalid-blocks fails within 30
// cases).
func TestBlocksPropertyWithOffload(t *testing.T) { rapid.Check(t, blocksProperty(true, false, true)) }

// blocksProperty is TestBlocksProperty's body; with resets the actions
// include resets of the prefix cache, with lora the requests have
// adapters, with offload KV goes to host memory and loads back.
func blocksProperty(resets, lora, offload bool) func(t *rapid.T) {
	lastAction := 5
	if resets {
		lastAction = 6
	}
	if offload {
		lastAction = 7
	}
	return func(t *rapid.T) {
		cfg := core.Config{
			BlockSize:           rapid.IntRange(2, 4).Draw(t, "blockSize"),
			NumBlocks:           rapid.IntRange(3, 16).Draw(t, "numBlocks"),
			MaxNumSeqs:          rapid.IntRange(1, 4).Draw(t, "maxNumSeqs"),
			EnablePrefixCaching: rapid.Bool().Draw(t, "caching"),
			AsyncScheduling:     rapid.Bool().Draw(t, "async"),
			SchedulingPolicy:    core.SchedulingPolicy(rapid.IntRange(0, 1).Draw(t, "policy")),
		}
		cfg.MaxNumBatchedTokens = rapid.IntRange(cfg.MaxNumSeqs, 16).Draw(t, "maxNumBatchedTokens")
		if lora {
			cfg.MaxLoRAs = rapid.IntRange(1, 3).Draw(t, "maxLoRAs")
		}
		if offload {
			cfg.EnablePrefixCaching = true
			cfg.KVOffloadBlocks = rapid.IntRange(1, 16).Draw(t, "offloadBlocks")
			cfg.KVOffloadPolicy = core.KVOffloadPolicy(rapid.IntRange(0, 1).Draw(t, "offloadPolicy"))
			cfg.KVOffloadStoreThreshold = rapid.IntRange(0, 3).Draw(t, "storeThreshold")
			cfg.KVOffloadTrackerSize = rapid.IntRange(0, 8).Draw(t, "trackerSize")
			cfg.KVOffloadMaxRecomputePendingTokens = rapid.IntRange(0, 12).Draw(t, "maxRecomputePendingTokens")
			// Loads that fail now and then (core/kv-load-fails), under
			// either of vLLM's kv_load_failure_policy.
			if ratio := []string{"", "1/3*", "1/2*"}[rapid.IntRange(0, 2).Draw(t, "loadFails")]; ratio != "" {
				cfg.KVLoadFailurePolicy = core.KVLoadFailurePolicy(rapid.IntRange(0, 1).Draw(t, "loadFailurePolicy"))
				faults, err := failpoints.NewSet(sim.NewPCGChooser(rapid.Uint64().Draw(t, "faultSeed"), sim.StreamFaults), failpoints.CoreKVLoadFails.Name+"="+ratio+"return")
				if err != nil {
					t.Fatal(err)
				}
				cfg.Faults = faults
			}
		}
		cfg.NumSpeculativeTokens = rapid.IntRange(0, 3).Draw(t, "specTokens")
		cfg.Draft = core.DraftModel{Target: core.ToyModel{}, MissOdds: uint64(rapid.IntRange(1, 4).Draw(t, "draftMissOdds"))}
		s := core.NewScheduler(cfg.WithDefaults())
		prefixes := [][]int{seq(1, 12), seq(3, 12), {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}}
		var all []*core.Request
		p := &pipeline{s: s}
		check := func(when string) {
			if err := s.CheckBlocks(); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			for _, r := range all {
				if want := sampled(r, len(r.Output)); !slices.Equal(want, r.Output) {
					t.Fatalf("%s: request %s (index %d, prompt %v) sampled %v, want %v", when, r.InternalID, r.Index, r.Prompt, r.Output, want)
				}
				if r.Status.Finished() {
					continue
				}
				want := 0 // a step in flight counts its token and its drafts
				if p.so != nil {
					if i := slices.IndexFunc(p.so.Scheduled, func(sc core.Scheduled) bool { return sc.Req == r && sc.Sample }); i >= 0 {
						want = 1 + p.so.Scheduled[i].Drafts
					}
				}
				if r.Placeholders+r.Discard() != want {
					t.Fatalf("%s: request %s has %d placeholders and %d token(s) to drop with %d token(s) in flight sampled for it", when, r.InternalID, r.Placeholders, r.Discard(), want)
				}
			}
		}
		slots := func(so *core.SchedulerOutput) {
			if so != nil && len(adapters(so)) > cfg.MaxLoRAs {
				t.Fatalf("a step scheduled adapters %v with %d LoRA slot(s)", adapters(so), cfg.MaxLoRAs)
			}
		}
		step := func() {
			if cfg.AsyncScheduling {
				p.step()
				slots(p.so)
				return
			}
			so := s.Schedule()
			p.started(so)
			if len(so.Scheduled) == 0 {
				s.RejectUnschedulable()
				return
			}
			slots(so)
			s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
		}
		actions := rapid.IntRange(1, 40).Draw(t, "actions")
		for i := range actions {
			switch rapid.IntRange(0, lastAction).Draw(t, "action") {
			case 0, 1: // add a request, or the sequences of a parallel one
				base := prefixes[rapid.IntRange(0, len(prefixes)-1).Draw(t, "prefix")]
				prompt := slices.Clone(base[:rapid.IntRange(0, len(base)).Draw(t, "shared")])
				prompt = append(prompt, rapid.SliceOfN(rapid.IntRange(1, 6), 0, 6).Draw(t, "suffix")...)
				if len(prompt) == 0 {
					prompt = []int{1}
				}
				sp := core.SamplingParams{MaxTokens: rapid.IntRange(1, 8).Draw(t, "maxTokens")}
				n := rapid.IntRange(1, 3).Draw(t, "n")
				prio := rapid.IntRange(0, 2).Draw(t, "priority")
				adapter := 0
				if lora {
					adapter = rapid.IntRange(0, 4).Draw(t, "lora")
				}
				id := fmt.Sprint("r", i)
				if ended := endedIDs(all, s); len(ended) > 0 && rapid.Bool().Draw(t, "reuse") {
					id = ended[rapid.IntRange(0, len(ended)-1).Draw(t, "reused")]
				}
				for idx := range n {
					r := &core.Request{InternalID: fmt.Sprintf("%d_%s", idx, id), ExternalID: id, Incarnation: uint64(i), Index: idx,
						Prompt: prompt, Params: sp, LoRA: adapter}
					if cfg.SchedulingPolicy == core.PolicyPriority {
						r.Priority = prio
					}
					if err := s.AddRequest(r); err != nil {
						if p.holds(r.InternalID) {
							continue // refused: the ended request of that id still has a load or store in flight
						}
						t.Fatal(err)
					}
					all = append(all, r)
				}
			case 2: // abort a live request
				var live []string
				for _, r := range all {
					if !r.Status.Finished() {
						live = append(live, r.InternalID)
					}
				}
				if len(live) > 0 {
					s.FinishRequests([]string{live[rapid.IntRange(0, len(live)-1).Draw(t, "abort")]}, core.StatusFinishedAborted)
				}
			case 6: // reset the prefix cache
				resetRunning := rapid.Bool().Draw(t, "resetRunning")
				running := s.Stats().Running
				preempted, ok := s.ResetPrefixCache(resetRunning)
				if offload {
					// A load or store in flight, or a waiting request whose
					// KV landed, holds blocks: a reset that may not preempt
					// fails; one that may abandons the copies. A preempted
					// request's store holds none: its copies read them.
					copies := 0
					for _, c := range p.inFlight() {
						if !c.store || !s.StoreFlushed(c.id) {
							copies++
						}
					}
					bad := !ok || len(preempted) != running // a reset that may preempt always succeeds
					if !resetRunning {
						bad = len(preempted) != 0 || ok && (running > 0 || copies > 0)
					}
					if bad {
						t.Fatalf("action %d: ResetPrefixCache(%v) with %d running and %d copies in flight: %d preempted, %v", i, resetRunning, running, copies, len(preempted), ok)
					}
					if ok && copies > 0 {
						break // the abandoned copies hold their blocks until they land
					}
				} else if ok != (resetRunning || running == 0) || len(preempted) != map[bool]int{true: running}[ok] {
					t.Fatalf("action %d: ResetPrefixCache(%v) with %d running: %d preempted, %v", i, resetRunning, running, len(preempted), ok)
				}
				if ok && s.Stats().KVUsedBlocks != 0 {
					t.Fatalf("action %d: %d KV blocks in use after a reset", i, s.Stats().KVUsedBlocks)
				}
			case 7: // a load lands
				p.land()
			default:
				step()
			}
			check(fmt.Sprintf("after action %d", i))
		}
		for steps := 0; s.HasRequests() || p.so != nil; steps++ {
			if steps > 2000 {
				t.Fatalf("%d requests still live after %d steps:\n%s", s.NumRequests(), steps, s.DebugState())
			}
			if p.land() {
				check(fmt.Sprintf("draining, a load landed before step %d", steps))
			}
			step()
			check(fmt.Sprintf("draining, step %d", steps))
		}
		for _, r := range all {
			if !r.Status.Finished() {
				t.Fatalf("request %s did not end: %s", r.InternalID, r.Status)
			}
		}
	}
}

// endedIDs returns the external ids whose every sequence has ended in s,
// sorted, for a new request to take again.
func endedIDs(all []*core.Request, s *core.Scheduler) []string {
	var ids []string
	for _, r := range all {
		if r.Index == 0 && !slices.Contains(ids, r.ExternalID) {
			ids = append(ids, r.ExternalID)
		}
	}
	ended := ids[:0]
	for _, id := range ids {
		live := false
		for idx := 0; idx < 3 && !live; idx++ {
			_, live = s.Get(fmt.Sprintf("%d_%s", idx, id))
		}
		if !live {
			ended = append(ended, id)
		}
	}
	slices.Sort(ended)
	return ended
}
