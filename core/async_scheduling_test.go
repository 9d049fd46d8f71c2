package core_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// pipeline steps a Scheduler as EngineCore does under AsyncScheduling: a
// step is scheduled and handed to the model, and only then is the output
// of the step before it applied.
type pipeline struct {
	s   *core.Scheduler
	so  *core.SchedulerOutput // the step in flight
	tok []int
	// copies are the KV loads from host memory and stores to it in
	// flight, in order of start (Config.KVOffloadBlocks).
	copies []copyInFlight
}

// copyInFlight is a KV load or a store's copy in flight, by its
// request's internal id and the copy's number.
type copyInFlight struct {
	id    string
	store bool
	job   uint64
}

// step schedules and samples a step and applies the one in flight, or,
// when nothing more can be scheduled, ends a request that could never fit
// and applies the one in flight alone. It returns the frames applied.
func (p *pipeline) step() []core.Frame {
	var so *core.SchedulerOutput
	if p.s.HasRequests() {
		so = p.s.Schedule()
		p.started(so)
	}
	if so != nil && len(so.Scheduled) > 0 {
		tok := p.s.Sample(so, core.ToyModel{})
		var frames []core.Frame
		if p.so != nil {
			frames = p.s.UpdateFromOutput(p.so, p.tok)
		}
		p.so, p.tok = so, tok
		return frames
	}
	p.s.RejectUnschedulable() // a request that cannot fit even alone
	if p.so != nil {
		frames := p.s.UpdateFromOutput(p.so, p.tok)
		p.so = nil
		return frames
	}
	return nil
}

// started notes the loads a step started.
func (p *pipeline) started(so *core.SchedulerOutput) {
	p.inFlight()
	for _, r := range so.Loads {
		p.copies = append(p.copies, copyInFlight{id: r.InternalID})
	}
}

// inFlight returns the copies in flight, with the stores' copies started
// since the last call, less those a preemption landed.
func (p *pipeline) inFlight() []copyInFlight {
	jobs, _, _ := p.s.TakeStores()
	for _, j := range jobs {
		p.copies = append(p.copies, copyInFlight{id: j.ID, store: true, job: j.Job})
	}
	p.copies = slices.DeleteFunc(p.copies, func(c copyInFlight) bool { return c.store && !p.s.StoreCopyInFlight(c.id, c.job) })
	return p.copies
}

// holds reports whether a copy in flight is the ended request of internal
// id's, or its store, which a preemption flushed, waits for the output of
// the step that preempted it: the scheduler refuses the id until then.
func (p *pipeline) holds(id string) bool {
	return p.s.StoreFlushed(id) || slices.ContainsFunc(p.inFlight(), func(c copyInFlight) bool { return c.id == id })
}

// land lands the oldest copy in flight, if there is one.
func (p *pipeline) land() bool {
	if len(p.inFlight()) == 0 {
		return false
	}
	if c := p.copies[0]; c.store {
		p.s.CompleteStore(c.id, c.job)
	} else {
		p.s.CompleteLoad(c.id)
	}
	p.copies = p.copies[1:]
	return true
}

func (p *pipeline) drain(t *testing.T) {
	t.Helper()
	for steps := 0; p.s.HasRequests() || p.so != nil; steps++ {
		require.Less(t, steps, 10000, "the scheduler does not converge")
		p.step()
		require.NoError(t, p.s.CheckBlocks())
	}
}

func asyncSched(cfg core.Config) *core.Scheduler {
	cfg.AsyncScheduling = true
	return newSched(cfg)
}

// TestAsyncSchedulingSchedulesAheadOnAPlaceholder follows one request: its
// second step is scheduled before the first's token is applied, computing
// the placeholder the first samples, and the model samples its second
// token after the first all the same; no step is scheduled past MaxTokens.
func TestAsyncSchedulingSchedulesAheadOnAPlaceholder(t *testing.T) {
	s := asyncSched(core.Config{})
	a := req("a", []int{1, 2, 3}, core.SamplingParams{MaxTokens: 3, IgnoreEOS: true})
	require.NoError(t, s.AddRequest(a))
	want := sampled(a, 3)

	so1 := s.Schedule()
	require.Equal(t, []core.Scheduled{{Req: a, Start: 0, NumTokens: 3, Sample: true}}, so1.Scheduled)
	assert.Equal(t, 3, a.NumComputed, "NumComputed counts the step as it is scheduled")
	assert.Equal(t, 1, a.Placeholders)
	tok1 := s.Sample(so1, core.ToyModel{})

	so2 := s.Schedule()
	require.Equal(t, []core.Scheduled{{Req: a, Start: 3, NumTokens: 1, Sample: true}}, so2.Scheduled, "the placeholder is computed before its token is known")
	assert.Equal(t, 2, a.Placeholders)
	tok2 := s.Sample(so2, core.ToyModel{})
	assert.Equal(t, want[:2], []int{tok1[0], tok2[0]}, "the model samples after the token the scheduler has not seen")
	assert.Empty(t, a.Output)

	f1 := s.UpdateFromOutput(so1, tok1)
	require.Len(t, f1, 1)
	assert.Equal(t, want[:1], a.Output)
	assert.Equal(t, 1, a.Placeholders)

	so3 := s.Schedule()
	require.Equal(t, []core.Scheduled{{Req: a, Start: 4, NumTokens: 1, Sample: true}}, so3.Scheduled)
	tok3 := s.Sample(so3, core.ToyModel{})
	s.UpdateFromOutput(so2, tok2)
	assert.Empty(t, s.Schedule().Scheduled, "the step in flight samples the last token: no step past MaxTokens")
	f3 := s.UpdateFromOutput(so3, tok3)
	require.Len(t, f3, 1)
	assert.True(t, f3[0].Finished)
	assert.Equal(t, core.FinishLength, f3[0].Reason)
	assert.Equal(t, want, a.Output)
	assert.False(t, s.HasRequests())
	require.NoError(t, s.CheckBlocks())
}

// TestAsyncSchedulingDropsTheStepAfterAStop is vLLM's extra token (#29355):
// the scheduler cannot know that the token in flight stops the request,
// so the request computes one step more, whose token is dropped.
func TestAsyncSchedulingDropsTheStepAfterAStop(t *testing.T) {
	s := asyncSched(core.Config{})
	a := req("a", []int{1, 2, 3}, core.SamplingParams{MaxTokens: 10, IgnoreEOS: true})
	a.Params.StopTokenIDs = []int{sampled(a, 2)[1]}
	require.NoError(t, s.AddRequest(a))
	p := &pipeline{s: s}

	var frames []core.Frame
	var sos []*core.SchedulerOutput
	for s.HasRequests() || p.so != nil {
		frames = append(frames, p.step()...)
		if p.so != nil {
			sos = append(sos, p.so)
		}
		require.Less(t, len(sos), 10)
	}
	require.Len(t, sos, 3, "prefill, the stop token, and one step more")
	assert.Equal(t, 1, scheduledTokens(sos[2], a))
	assert.Equal(t, sampled(a, 2), a.Output, "the extra step's token is dropped")
	require.Len(t, frames, 2)
	assert.True(t, frames[1].Finished)
	assert.Equal(t, core.FinishStop, frames[1].Reason)
	assert.Equal(t, a.Params.StopTokenIDs[0], frames[1].StopReason)
}

// TestAsyncSchedulingGivesAnOutputToTheRequestItScheduled is vLLM's #42492:
// a request is aborted with a step in flight and a new one takes its id
// before the step's output comes back. The output is the old request's
// and is dropped; core/async-output-by-id plants the upstream bug, which
// gives it to the new request: a token not its own, and then, with no step
// scheduled for it in between, a core that dies on its count of
// placeholders.
func TestAsyncSchedulingGivesAnOutputToTheRequestItScheduled(t *testing.T) {
	for _, armed := range []bool{false, true} {
		t.Run(map[bool]string{false: "disarmed", true: "armed"}[armed], func(t *testing.T) {
			cfg := core.Config{}
			if armed {
				cfg.Faults = rttest.Armed(t, failpoints.CoreAsyncOutputByID.Name+"=return")
			}
			s := asyncSched(cfg)
			old := req("x", seq(1, 4), core.SamplingParams{MaxTokens: 5, IgnoreEOS: true})
			require.NoError(t, s.AddRequest(old))
			so1 := s.Schedule()
			tok1 := s.Sample(so1, core.ToyModel{})
			s.FinishRequests([]string{"x"}, core.StatusFinishedAborted)
			fresh := req("x", seq(50, 4), core.SamplingParams{MaxTokens: 3, IgnoreEOS: true})
			require.NoError(t, s.AddRequest(fresh))
			so2 := s.Schedule()
			tok2 := s.Sample(so2, core.ToyModel{})

			f1 := s.UpdateFromOutput(so1, tok1)
			if !armed {
				assert.Empty(t, f1, "the aborted request's output goes nowhere")
				assert.Empty(t, fresh.Output)
				p := &pipeline{s: s, so: so2, tok: tok2}
				p.drain(t)
				assert.Equal(t, sampled(fresh, 3), fresh.Output)
				return
			}
			require.Len(t, f1, 1)
			assert.Equal(t, tok1[0], fresh.Output[0], "the new request took the old one's token")
			assert.NotEqual(t, sampled(fresh, 1), fresh.Output)
			assert.PanicsWithValue(t, `core: request "x" (incarnation 0) got an output of a step that did not schedule it: no output placeholder left`,
				func() { s.UpdateFromOutput(so2, tok2) })
		})
	}
}

// TestAsyncSchedulingAppliesTheTokenOfAPreemptedRequest: a request
// preempted while a step of it is in flight takes that step's token, as
// vLLM's update_from_output gives it to any request not finished: the
// model computed it before the preemption freed the blocks.
func TestAsyncSchedulingAppliesTheTokenOfAPreemptedRequest(t *testing.T) {
	s := asyncSched(core.Config{BlockSize: 2, NumBlocks: 4})
	a := req("a", []int{1, 2}, core.SamplingParams{MaxTokens: 3, IgnoreEOS: true})
	b := req("b", []int{3, 4}, core.SamplingParams{MaxTokens: 3, IgnoreEOS: true})
	require.NoError(t, s.AddRequest(a))
	require.NoError(t, s.AddRequest(b))
	p := &pipeline{s: s}
	assert.Empty(t, p.step(), "both prompts run in the first step")
	f := p.step()
	require.Equal(t, core.StatusPreempted, b.Status, "a's next block leaves none for b's")
	assert.Equal(t, 1, scheduledTokens(p.so, a))
	require.Len(t, f, 2, "the first step's output reaches both")
	assert.Equal(t, "b", f[1].InternalID)
	assert.Equal(t, sampled(b, 1), b.Output)
	assert.Zero(t, b.Placeholders)
	require.NoError(t, s.CheckBlocks())
	p.drain(t)
	assert.Equal(t, sampled(a, 3), a.Output)
	assert.Equal(t, sampled(b, 3), b.Output)
}

// TestEngineCoreAsyncSchedulingOverlapsSteps runs requests through the core
// with and without async scheduling: the same tokens and finishes, and with
// it the second step starts before the first's output is on the queue.
func TestEngineCoreAsyncSchedulingOverlapsSteps(t *testing.T) {
	run := func(async bool) ([]core.Frame, []string) {
		var order []string
		cfg := core.Config{AsyncScheduling: async, StepTime: 10 * time.Millisecond, BlockSize: 2, NumBlocks: 9, MaxNumBatchedTokens: 6, MaxNumSeqs: 3}
		cfg.Observer = func(e core.Event) {
			switch e.Kind {
			case core.EventStep:
				order = append(order, fmt.Sprint("start ", e.Step))
			case core.EventFrameEmitted:
				order = append(order, fmt.Sprint("output ", e.Step))
			}
		}
		outs := drive(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			for i, p := range [][]int{seq(1, 5), seq(10, 3), seq(20, 7), seq(1, 6)} {
				c.Send(core.Input{Kind: core.InputAdd, Req: &core.Request{InternalID: fmt.Sprint(i), Prompt: p, Incarnation: uint64(i + 1),
					Params: core.SamplingParams{MaxTokens: 4 + i, StopTokenIDs: []int{7}}}})
			}
			rt.Sleep(time.Second)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		return frames(outs), order
	}
	tokens := func(fs []core.Frame) map[string][]int {
		got := map[string][]int{}
		for _, f := range fs {
			got[f.InternalID] = append(got[f.InternalID], f.NewTokens...)
			if f.Finished {
				got[f.InternalID] = append(got[f.InternalID], -1, int(len(f.Reason)))
			}
		}
		return got
	}
	syncFrames, syncOrder := run(false)
	asyncFrames, asyncOrder := run(true)
	assert.Equal(t, tokens(syncFrames), tokens(asyncFrames))
	assert.Equal(t, []string{"start 1", "output 1", "start 2"}, syncOrder[:3])
	assert.Equal(t, []string{"start 1", "start 2", "output 1"}, asyncOrder[:3])
}
