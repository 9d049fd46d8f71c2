package core_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/task"
)

// preq is a request of incarnation inc, its arrival, and priority prio.
func preq(id string, inc uint64, prio int, prompt []int, maxTokens int) *core.Request {
	r := req(id, prompt, core.SamplingParams{MaxTokens: maxTokens})
	r.Incarnation, r.Priority = inc, prio
	return r
}

// stepOut is what one step scheduled, copied: the scheduler reuses its
// output.
type stepOut struct {
	scheduled map[string]int // tokens by internal id
	preempted []string
	total     int
}

// step runs one step of s and appends the tokens it sampled to got.
func step(s *core.Scheduler, got map[string][]int) stepOut {
	so := s.Schedule()
	o := stepOut{scheduled: map[string]int{}, total: so.TotalTokens}
	for _, sc := range so.Scheduled {
		o.scheduled[sc.Req.InternalID] = sc.NumTokens
	}
	for _, r := range so.Preempted {
		o.preempted = append(o.preempted, r.InternalID)
	}
	for _, f := range s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{})) {
		got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
	}
	return o
}

// untilPreemption steps s until a step preempts, and returns that step.
func untilPreemption(t *testing.T, s *core.Scheduler, got map[string][]int) stepOut {
	t.Helper()
	for steps := 0; ; steps++ {
		require.Less(t, steps, 100, "nothing was preempted")
		if o := step(s, got); len(o.preempted) > 0 {
			return o
		}
	}
}

// finish runs s to its end, appending to got, and checks that every
// request got exactly its tokens: preemption recomputes, it loses nothing.
func finish(t *testing.T, s *core.Scheduler, got map[string][]int, want map[string][]int) {
	t.Helper()
	rest, _, _ := run(t, s, core.ToyModel{}, 1000)
	for id, ts := range rest {
		got[id] = append(got[id], ts...)
	}
	assert.Equal(t, want, got)
	assert.Zero(t, s.Stats().KVUsedBlocks, "every block is freed")
}

// admissionOrder runs s to its end and returns the order in which its
// requests were first scheduled.
func admissionOrder(t *testing.T, s *core.Scheduler) []string {
	t.Helper()
	var order []string
	seen := map[string]bool{}
	for steps := 0; s.HasRequests(); steps++ {
		require.Less(t, steps, 1000, "the scheduler does not converge")
		so := s.Schedule()
		for _, sc := range so.Scheduled {
			if !seen[sc.Req.InternalID] {
				seen[sc.Req.InternalID] = true
				order = append(order, sc.Req.InternalID)
			}
		}
		s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{}))
	}
	return order
}

func TestSchedulingPolicyNamesAndValidation(t *testing.T) {
	assert.Equal(t, "fcfs", core.PolicyFCFS.String())
	assert.Equal(t, "priority", core.PolicyPriority.String())
	assert.Equal(t, "SchedulingPolicy(7)", core.SchedulingPolicy(7).String())
	assert.Equal(t, core.PolicyFCFS, core.Config{}.WithDefaults().SchedulingPolicy, "FCFS is the default")
	require.NoError(t, core.Config{SchedulingPolicy: core.PolicyPriority}.WithDefaults().Validate())
	assert.EqualError(t, core.Config{SchedulingPolicy: 7}.WithDefaults().Validate(),
		"core: unknown SchedulingPolicy 7: want PolicyFCFS or PolicyPriority")
}

// TestPriorityAdmitsByPriorityThenArrival: one request runs at a time, so
// the order of admission is the waiting queue's: by priority, lower first,
// then by arrival — incarnation, then sequence — whatever order the core
// got them in. Under FCFS the same requests go in the order they came.
func TestPriorityAdmitsByPriorityThenArrival(t *testing.T) {
	add := func(s *core.Scheduler) {
		seq1 := preq("p0-inc2-seq1", 2, 0, []int{5}, 2)
		seq1.Index = 1
		for _, r := range []*core.Request{
			preq("urgent-latest", 6, -1, []int{1}, 2),
			preq("p2", 1, 2, []int{2}, 2),
			preq("p0-inc4", 4, 0, []int{3}, 2),
			preq("p1", 3, 1, []int{4}, 2),
			seq1,
			preq("p0-inc2", 2, 0, []int{5}, 2),
		} {
			require.NoError(t, s.AddRequest(r))
		}
	}
	s := newSched(core.Config{MaxNumSeqs: 1, SchedulingPolicy: core.PolicyPriority})
	add(s)
	assert.Equal(t, []string{"urgent-latest", "p0-inc2", "p0-inc2-seq1", "p0-inc4", "p1", "p2"}, admissionOrder(t, s))

	s = newSched(core.Config{MaxNumSeqs: 1})
	add(s)
	assert.Equal(t, []string{"urgent-latest", "p2", "p0-inc4", "p1", "p0-inc2-seq1", "p0-inc2"}, admissionOrder(t, s), "FCFS reads no priority")
}

// TestPriorityTiesKeepArrivalOrder: requests of one priority go in order
// of arrival; requests of one key — which the engine never makes, its
// incarnations being unique — in the order they were added.
func TestPriorityTiesKeepArrivalOrder(t *testing.T) {
	s := newSched(core.Config{MaxNumSeqs: 1, SchedulingPolicy: core.PolicyPriority})
	for _, r := range []*core.Request{
		preq("inc3", 3, 1, []int{1}, 2),
		preq("inc1", 1, 1, []int{2}, 2),
		preq("inc2", 2, 1, []int{3}, 2),
		preq("same-a", 0, 1, []int{4}, 2),
		preq("same-b", 0, 1, []int{5}, 2),
		preq("same-c", 0, 1, []int{6}, 2),
	} {
		require.NoError(t, s.AddRequest(r))
	}
	assert.Equal(t, []string{"same-a", "same-b", "same-c", "inc1", "inc2", "inc3"}, admissionOrder(t, s))
}

// TestPriorityPreemptsTheLeastUrgentNotTheNewest: a, b and c run, c the
// newest; when a needs a block and none is free, FCFS preempts c, the
// newest, but the priority policy preempts b, whose priority is the
// lowest (its value the greatest), though it is neither the newest nor
// the one asking. Everyone still gets exactly their tokens.
//
// With blocks of 4 tokens: a (3 prompt tokens) and b (1) run from step 1,
// c (1) from step 2; b takes its second block at step 5, c at step 6, and
// a asks for its third at step 7 with all six usable blocks taken (the
// cache's seven less the null block).
func TestPriorityPreemptsTheLeastUrgentNotTheNewest(t *testing.T) {
	for _, c := range []struct {
		policy core.SchedulingPolicy
		victim string
		ran    map[string]int
	}{
		{core.PolicyFCFS, "c", map[string]int{"a": 1, "b": 1}},
		{core.PolicyPriority, "b", map[string]int{"a": 1, "c": 1}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			s := newSched(core.Config{BlockSize: 4, NumBlocks: 7, SchedulingPolicy: c.policy})
			got := map[string][]int{}
			require.NoError(t, s.AddRequest(preq("a", 1, 0, []int{1, 2, 3}, 10)))
			require.NoError(t, s.AddRequest(preq("b", 2, 1, []int{4}, 10)))
			step(s, got)
			require.NoError(t, s.AddRequest(preq("c", 3, 0, []int{5}, 10)))
			o := untilPreemption(t, s, got)
			assert.Equal(t, []string{c.victim}, o.preempted)
			assert.Equal(t, c.ran, o.scheduled)
			assert.Equal(t, 2, o.total)
			finish(t, s, got, map[string][]int{"a": toks([]int{1, 2, 3}, 10), "b": toks([]int{4}, 10), "c": toks([]int{5}, 10)})
			assert.Equal(t, int64(1), s.Stats().Preemptions)
		})
	}
}

// toks returns the toy model's first n tokens for prompt.
func toks(prompt []int, n int) []int { return core.Tokens(core.ToyModel{}, prompt, n) }

// TestPriorityVictimScheduledThisStepIsUnscheduled: b, the least urgent,
// runs first and is scheduled before a, behind it, runs out of blocks; b
// is then preempted and its share of the step undone: it is not in the
// step, and its token goes back to the budget, where c, still in chunked
// prefill, takes it. FCFS preempts c, the newest, instead.
//
// With blocks of 16 tokens and a budget of 7: b (1 prompt token) runs
// from step 1, a (3) and c (80) from step 2, c prefilling 5 tokens a step
// beside the decodes of a and b; at step 16 a asks for its second block
// with all seven usable blocks taken (eight less the null block), and c,
// with 68 tokens computed, has room in its
// fifth block for the 6 tokens it gets.
func TestPriorityVictimScheduledThisStepIsUnscheduled(t *testing.T) {
	for _, c := range []struct {
		policy core.SchedulingPolicy
		victim string
		ran    map[string]int
	}{
		{core.PolicyFCFS, "c", map[string]int{"b": 1, "a": 1}},
		{core.PolicyPriority, "b", map[string]int{"a": 1, "c": 6}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			s := newSched(core.Config{BlockSize: 16, NumBlocks: 8, MaxNumSeqs: 3, MaxNumBatchedTokens: 7, SchedulingPolicy: c.policy})
			got := map[string][]int{}
			require.NoError(t, s.AddRequest(preq("b", 1, 1, []int{1}, 20)))
			step(s, got)
			prompt := make([]int, 80)
			for i := range prompt {
				prompt[i] = i + 1
			}
			require.NoError(t, s.AddRequest(preq("a", 2, 0, []int{2, 3, 4}, 20)))
			require.NoError(t, s.AddRequest(preq("c", 3, 0, prompt, 2)))
			o := untilPreemption(t, s, got)
			assert.Equal(t, []string{c.victim}, o.preempted)
			assert.Equal(t, c.ran, o.scheduled)
			total := 0
			for _, n := range o.scheduled {
				total += n
			}
			assert.Equal(t, total, o.total, "the step's total counts only what it scheduled")
			finish(t, s, got, map[string][]int{"a": toks([]int{2, 3, 4}, 20), "b": toks([]int{1}, 20), "c": toks(prompt, 2)})
		})
	}
}

// TestPriorityVictimIsTheRequestAsking: x, the least urgent, runs first;
// when it needs a block and none is free, it is its own victim, and the
// step stops there: y, behind it, is not scheduled either, and runs in the
// next step. FCFS preempts y instead.
//
// With blocks of 4 tokens and two of them usable (three, the null block
// aside): x (3 prompt tokens) runs from
// step 1, y (1) from step 2, and x asks for its second block at step 3.
func TestPriorityVictimIsTheRequestAsking(t *testing.T) {
	for _, c := range []struct {
		policy core.SchedulingPolicy
		victim string
		ran    map[string]int
	}{
		{core.PolicyFCFS, "y", map[string]int{"x": 1}},
		{core.PolicyPriority, "x", map[string]int{}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			s := newSched(core.Config{BlockSize: 4, NumBlocks: 3, SchedulingPolicy: c.policy})
			got := map[string][]int{}
			require.NoError(t, s.AddRequest(preq("x", 1, 1, []int{1, 2, 3}, 4)))
			step(s, got)
			require.NoError(t, s.AddRequest(preq("y", 2, 0, []int{4}, 3)))
			o := untilPreemption(t, s, got)
			assert.Equal(t, []string{c.victim}, o.preempted)
			assert.Equal(t, c.ran, o.scheduled)
			if c.policy == core.PolicyPriority {
				assert.Equal(t, map[string]int{"y": 1}, step(s, got).scheduled, "y runs in the next step")
			}
			finish(t, s, got, map[string][]int{"x": toks([]int{1, 2, 3}, 4), "y": toks([]int{4}, 3)})
		})
	}
}

// TestPriorityRejectsTheRequestThatCannotFit: x needs more blocks than the
// cache's two usable ones (three, the null block aside) and preempts
// itself with nothing else running; w, more urgent, heads the waiting
// queue, but x is the request that cannot be scheduled, and the one ended.
func TestPriorityRejectsTheRequestThatCannotFit(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, NumBlocks: 3, MaxNumSeqs: 1, SchedulingPolicy: core.PolicyPriority})
	got := map[string][]int{}
	require.NoError(t, s.AddRequest(preq("x", 1, 0, []int{1, 2, 3, 4, 5, 6, 7}, 5)))
	step(s, got)
	require.NoError(t, s.AddRequest(preq("w", 2, -1, []int{8}, 2)))
	o := untilPreemption(t, s, got)
	require.Equal(t, []string{"x"}, o.preempted)
	require.Empty(t, o.scheduled)
	r, ok := s.RejectUnschedulable()
	require.True(t, ok)
	assert.Equal(t, "x", r.InternalID)
	assert.Equal(t, core.StatusFinishedError, r.Status)
	delete(got, "x")
	finish(t, s, got, map[string][]int{"w": toks([]int{8}, 2)})
}

// TestEngineCoreStepsOnAfterAVictimStoppedTheStep: a step that scheduled
// nothing because the request asking was its own victim, with another
// still running, is no stuck core: the next step runs that one. The cache
// has two usable blocks of 4 tokens, as in TestPriorityVictimIsTheRequestAsking.
func TestEngineCoreStepsOnAfterAVictimStoppedTheStep(t *testing.T) {
	var preempted []string
	cfg := core.Config{BlockSize: 4, NumBlocks: 3, SchedulingPolicy: core.PolicyPriority, Observer: func(ev core.Event) {
		if ev.Kind == core.EventPreempt {
			preempted = append(preempted, ev.InternalID)
		}
	}}
	outs := drive(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
		c.Send(core.Input{Kind: core.InputAdd, Req: preq("x", 1, 1, []int{1, 2, 3}, 4)})
		rt.Sleep(time.Millisecond / 2) // during x's first step
		c.Send(core.Input{Kind: core.InputAdd, Req: preq("y", 2, 0, []int{4}, 3)})
		rt.Go("stopper", func() {
			rt.Sleep(time.Second)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
	})
	got := map[string][]int{}
	for _, f := range frames(outs) {
		require.NotEqual(t, core.FinishError, f.Reason, "%s", f.InternalID)
		got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
	}
	for _, o := range outs {
		require.NoError(t, o.Dead)
	}
	assert.Equal(t, []string{"x"}, preempted)
	assert.Equal(t, map[string][]int{"x": toks([]int{1, 2, 3}, 4), "y": toks([]int{4}, 3)}, got)
}

// TestPriorityVictimAmongARequestsSequencesIsTheFirstRunning: two
// sequences of one n=2 request share their priority and, in vLLM, their
// arrival time; when the second needs a block and none is free, vLLM's
// max(running, key=(priority, arrival_time)) keeps the first of equals:
// sequence 0, admitted first, is preempted and sequence 1 gets the block.
func TestPriorityVictimAmongARequestsSequencesIsTheFirstRunning(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, NumBlocks: 4, SchedulingPolicy: core.PolicyPriority})
	got := map[string][]int{}
	s0 := preq("0_r", 1, 0, []int{1, 2, 3}, 10)
	s1 := preq("1_r", 1, 0, []int{1, 2, 3}, 10)
	s1.Index = 1
	require.NoError(t, s.AddRequest(s0))
	require.NoError(t, s.AddRequest(s1))
	o := untilPreemption(t, s, got)
	assert.Equal(t, []string{"0_r"}, o.preempted)
	assert.Equal(t, map[string]int{"1_r": 1}, o.scheduled)
}

// TestPrioritySequencesWaitInTheOrderOfTheirIDs: with equal priority and
// arrival, vLLM's Request.__lt__ compares the ids, strings "INDEX_ID":
// sequence 10 of an n=11 request goes before sequence 1 ('0' sorts before
// '_') and sequence 2.
func TestPrioritySequencesWaitInTheOrderOfTheirIDs(t *testing.T) {
	s := newSched(core.Config{MaxNumSeqs: 1, SchedulingPolicy: core.PolicyPriority})
	for i := range 11 {
		r := preq(fmt.Sprintf("%d_r", i), 1, 0, []int{1}, 1)
		r.Index = i
		require.NoError(t, s.AddRequest(r))
	}
	assert.Equal(t, []string{"0_r", "10_r", "1_r", "2_r", "3_r", "4_r", "5_r", "6_r", "7_r", "8_r", "9_r"}, admissionOrder(t, s))
}
