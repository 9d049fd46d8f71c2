package core_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/llmdst/llmdst/core"
)

// TestBlocksProperty drives a bare Scheduler, with prefix caching on or
// off, through random workloads of prompts that share prefixes, in a cache
// of small blocks and few of them (so that requests are preempted and
// cached blocks evicted), with aborts between steps. After every step the
// block pool's invariants hold (CheckBlocks) and every request's tokens
// are those the model samples for it: a block-management bug would make
// the model read someone else's KV and sample wrong tokens. At the end
// every request has ended.
func TestBlocksProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := core.Config{
			BlockSize:           rapid.IntRange(2, 4).Draw(t, "blockSize"),
			NumBlocks:           rapid.IntRange(3, 16).Draw(t, "numBlocks"),
			MaxNumSeqs:          rapid.IntRange(1, 4).Draw(t, "maxNumSeqs"),
			EnablePrefixCaching: rapid.Bool().Draw(t, "caching"),
			SchedulingPolicy:    core.SchedulingPolicy(rapid.IntRange(0, 1).Draw(t, "policy")),
		}
		cfg.MaxNumBatchedTokens = rapid.IntRange(cfg.MaxNumSeqs, 16).Draw(t, "maxNumBatchedTokens")
		s := core.NewScheduler(cfg.WithDefaults())
		prefixes := [][]int{seq(1, 12), seq(3, 12), {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}}
		var all []*core.Request
		check := func(when string) {
			if err := s.CheckBlocks(); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			for _, r := range all {
				if want := sampled(r, len(r.Output)); !slices.Equal(want, r.Output) {
					t.Fatalf("%s: request %s (index %d, prompt %v) sampled %v, want %v", when, r.InternalID, r.Index, r.Prompt, r.Output, want)
				}
			}
		}
		step := func() {
			so := s.Schedule()
			if len(so.Scheduled) == 0 {
				s.RejectUnschedulable()
				return
			}
			s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
		}
		actions := rapid.IntRange(1, 40).Draw(t, "actions")
		for i := range actions {
			switch rapid.IntRange(0, 5).Draw(t, "action") {
			case 0, 1: // add a request, or the sequences of a parallel one
				base := prefixes[rapid.IntRange(0, len(prefixes)-1).Draw(t, "prefix")]
				prompt := slices.Clone(base[:rapid.IntRange(0, len(base)).Draw(t, "shared")])
				prompt = append(prompt, rapid.SliceOfN(rapid.IntRange(1, 6), 0, 6).Draw(t, "suffix")...)
				if len(prompt) == 0 {
					prompt = []int{1}
				}
				p := core.SamplingParams{MaxTokens: rapid.IntRange(1, 8).Draw(t, "maxTokens")}
				n := rapid.IntRange(1, 3).Draw(t, "n")
				prio := rapid.IntRange(0, 2).Draw(t, "priority")
				for idx := range n {
					r := &core.Request{InternalID: fmt.Sprintf("%d_r%d", idx, i), ExternalID: fmt.Sprint("r", i), Incarnation: uint64(i), Index: idx,
						Prompt: prompt, Params: p}
					if cfg.SchedulingPolicy == core.PolicyPriority {
						r.Priority = prio
					}
					if err := s.AddRequest(r); err != nil {
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
			default:
				step()
			}
			check(fmt.Sprintf("after action %d", i))
		}
		for steps := 0; s.HasRequests(); steps++ {
			if steps > 2000 {
				t.Fatalf("%d requests still live after %d steps", s.NumRequests(), steps)
			}
			step()
			check(fmt.Sprintf("draining, step %d", steps))
		}
		for _, r := range all {
			if !r.Status.Finished() {
				t.Fatalf("request %s did not end: %s", r.InternalID, r.Status)
			}
		}
	})
}
