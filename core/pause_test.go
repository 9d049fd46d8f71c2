package core_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// ---- The scheduler's pause states ----

// ignoring is a request of maxTokens tokens that no EOS stops.
func ignoring(id string, inc uint64, prompt []int, maxTokens int) *core.Request {
	r := req(id, prompt, core.SamplingParams{MaxTokens: maxTokens, IgnoreEOS: true})
	r.Incarnation = inc
	return r
}

// idsOf returns the requests' internal ids, in order.
func idsOf(rs []*core.Request) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.InternalID)
	}
	return ids
}

// scheduledReqs returns the ids a step schedules, in its order.
func scheduledReqs(so *core.SchedulerOutput) []string {
	var ids []string
	for _, sc := range so.Scheduled {
		ids = append(ids, sc.Req.InternalID)
	}
	return ids
}

// TestPausedAllSchedulesNothing: under PausedAll a running and a waiting
// request get no step, the scheduler reports no work though it holds
// both, and after the resume both run to the tokens they would have had.
func TestPausedAllSchedulesNothing(t *testing.T) {
	s := newSched(core.Config{MaxNumSeqs: 1})
	a := ignoring("a", 1, seq(1, 3), 10)
	b := ignoring("b", 2, seq(20, 3), 10)
	require.NoError(t, s.AddRequest(a))
	require.NoError(t, s.AddRequest(b))
	stepChecked(t, s)
	require.Equal(t, core.StatusRunning, a.Status)
	require.Equal(t, core.StatusWaiting, b.Status)
	computed, output := a.NumComputed, len(a.Output)

	s.SetPauseState(core.PausedAll)
	require.Equal(t, core.PausedAll, s.PauseState())
	require.False(t, s.HasWork(), "nothing can be scheduled under PausedAll")
	require.True(t, s.HasRequests(), "the requests stay live")
	for range 3 {
		so := s.Schedule()
		require.Empty(t, so.Scheduled)
		require.Empty(t, so.Preempted)
		require.Zero(t, so.TotalTokens)
		require.Empty(t, s.UpdateFromOutput(so, s.Sample(so, core.ToyModel{})))
		_, rejected := s.RejectUnschedulable()
		require.False(t, rejected)
	}
	require.Equal(t, computed, a.NumComputed)
	require.Len(t, a.Output, output)
	require.Equal(t, core.StatusRunning, a.Status)
	require.Equal(t, core.StatusWaiting, b.Status)
	require.NoError(t, s.CheckBlocks())

	s.SetPauseState(core.Unpaused)
	require.True(t, s.HasWork())
	require.Equal(t, []string{"a"}, scheduledReqs(stepChecked(t, s)), "the frozen request goes on")
	drainAll(t, s)
	require.Equal(t, sampled(a, 10), a.Output)
	require.Equal(t, sampled(b, 10), b.Output)
}

// TestPausedNewSchedulesOnlyTheRunning: under PausedNew the running request
// runs to its end, while a preempted request and a new one wait, even once
// the cache is empty; after the resume both run, the preempted one first.
func TestPausedNewSchedulesOnlyTheRunning(t *testing.T) {
	// 3 usable blocks of 2 tokens: a's second step leaves none for b's.
	s := newSched(core.Config{BlockSize: 2, NumBlocks: 4})
	a := ignoring("a", 1, []int{1, 2}, 4)
	b := ignoring("b", 2, []int{3, 4}, 4)
	require.NoError(t, s.AddRequest(a))
	require.NoError(t, s.AddRequest(b))
	stepChecked(t, s)
	so := stepChecked(t, s)
	require.Equal(t, []string{"b"}, idsOf(so.Preempted), "a's second step leaves no block for b's")
	require.Equal(t, core.StatusPreempted, b.Status)
	c := ignoring("c", 3, []int{5, 6}, 2)
	require.NoError(t, s.AddRequest(c))

	s.SetPauseState(core.PausedNew)
	require.Equal(t, core.PausedNew, s.PauseState())
	steps := 0
	for !a.Status.Finished() {
		require.True(t, s.HasWork(), "a runs")
		so := stepChecked(t, s)
		require.Equal(t, []string{"a"}, scheduledReqs(so), "only the running request is scheduled")
		require.Empty(t, so.Preempted)
		steps++
		require.Less(t, steps, 10)
	}
	require.Equal(t, sampled(a, 4), a.Output)
	require.Zero(t, s.Stats().KVUsedBlocks, "the cache is empty")
	require.False(t, s.HasWork(), "what waits is held back")
	require.True(t, s.HasRequests())
	so = stepChecked(t, s)
	require.Empty(t, so.Scheduled, "neither the preempted nor the new request is admitted")
	_, rejected := s.RejectUnschedulable()
	require.False(t, rejected)
	require.Equal(t, core.StatusPreempted, b.Status)
	require.Equal(t, core.StatusWaiting, c.Status)

	s.SetPauseState(core.Unpaused)
	require.True(t, s.HasWork())
	require.Equal(t, []string{"b", "c"}, scheduledReqs(stepChecked(t, s)))
	drainAll(t, s)
	require.Equal(t, sampled(b, 4), b.Output)
	require.Equal(t, sampled(c, 2), c.Output)
}

// TestHasWorkFollowsThePauseState: every request counts when unpaused, the
// running ones under PausedNew, none under PausedAll.
func TestHasWorkFollowsThePauseState(t *testing.T) {
	states := []core.PauseState{core.Unpaused, core.PausedNew, core.PausedAll}
	tests := []struct {
		name             string
		running, waiting int
		want             []bool // by state, in the order of states
	}{
		{"empty", 0, 0, []bool{false, false, false}},
		{"waiting", 0, 2, []bool{true, false, false}},
		{"running", 1, 0, []bool{true, true, false}},
		{"both", 1, 1, []bool{true, true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSched(core.Config{MaxNumSeqs: max(1, tt.running)})
			for i := range tt.running + tt.waiting {
				require.NoError(t, s.AddRequest(ignoring(fmt.Sprint(i), uint64(i+1), []int{i + 1}, 5)))
				if i+1 == tt.running {
					stepChecked(t, s) // the first admitted run; the rest wait
				}
			}
			st := s.Stats()
			require.Equal(t, tt.running, st.Running)
			require.Equal(t, tt.waiting, st.Waiting)
			for i, state := range states {
				s.SetPauseState(state)
				require.Equal(t, tt.want[i], s.HasWork(), "%s", state)
				require.Equal(t, tt.running+tt.waiting > 0, s.HasRequests(), "%s", state)
			}
		})
	}
}

// TestPausedSchedulerRejectsNothing: a request that can never fit is
// rejected when unpaused, and not while paused, where it waits.
func TestPausedSchedulerRejectsNothing(t *testing.T) {
	for _, state := range []core.PauseState{core.PausedNew, core.PausedAll} {
		t.Run(state.String(), func(t *testing.T) {
			s := newSched(core.Config{BlockSize: 4, NumBlocks: 2}) // one usable block
			huge := ignoring("huge", 1, seq(1, 12), 5)
			require.NoError(t, s.AddRequest(huge))
			s.SetPauseState(state)
			for range 2 {
				require.Empty(t, s.Schedule().Scheduled)
				r, rejected := s.RejectUnschedulable()
				require.False(t, rejected)
				require.Nil(t, r)
			}
			got, ok := s.Get("huge")
			require.True(t, ok, "it waits for the resume")
			require.Same(t, huge, got)
			require.Equal(t, core.StatusWaiting, huge.Status)

			s.SetPauseState(core.Unpaused)
			require.Empty(t, s.Schedule().Scheduled)
			r, rejected := s.RejectUnschedulable()
			require.True(t, rejected, "unpaused, the head that can never fit is rejected")
			require.Same(t, huge, r)
			require.Equal(t, core.StatusFinishedError, huge.Status)
			require.False(t, s.HasRequests())
		})
	}
}

// TestResetPrefixCachePreemptsTheRunning: a reset without resetRunning fails
// and changes nothing while requests run; with it every running request is
// preempted, ahead of what waited and oldest first, every block is free
// and none is cached, and the preempted requests, computed again, find
// none of their own blocks and end with their tokens.
func TestResetPrefixCachePreemptsTheRunning(t *testing.T) {
	s := newSched(core.Config{BlockSize: 4, NumBlocks: 64, MaxNumSeqs: 3, EnablePrefixCaching: true})
	a := ignoring("a", 1, seq(1, 9), 6)
	b := ignoring("b", 2, seq(100, 9), 6)
	c := ignoring("c", 3, seq(200, 9), 6)
	w := ignoring("w", 4, seq(300, 9), 6)
	for _, r := range []*core.Request{a, b, c, w} {
		require.NoError(t, s.AddRequest(r))
	}
	stepChecked(t, s)
	stepChecked(t, s)
	running := []*core.Request{a, b, c}
	tables := map[string][]int32{}
	for _, r := range running {
		require.Equal(t, core.StatusRunning, r.Status)
		require.Equal(t, 3, r.Blocks, "%s: 10 tokens computed", r.InternalID)
		tables[r.InternalID] = slices.Clone(r.BlockTable())
		_, hashed := s.BlockHash(r.BlockTable()[0])
		require.True(t, hashed, "%s's first block is cached", r.InternalID)
	}
	require.Equal(t, core.StatusWaiting, w.Status)
	before := s.Stats()

	got, ok := s.ResetPrefixCache(false)
	require.False(t, ok, "requests hold blocks")
	require.Nil(t, got)
	require.Equal(t, before, s.Stats())
	for _, r := range running {
		require.Equal(t, core.StatusRunning, r.Status)
		require.Equal(t, tables[r.InternalID], r.BlockTable())
		_, hashed := s.BlockHash(r.BlockTable()[0])
		require.True(t, hashed, "%s's first block is still cached", r.InternalID)
	}
	require.NoError(t, s.CheckBlocks())

	got, ok = s.ResetPrefixCache(true)
	require.True(t, ok)
	require.Equal(t, idsOf(running), idsOf(got), "the preempted requests, oldest first")
	for _, r := range running {
		require.Equal(t, core.StatusPreempted, r.Status)
		require.Zero(t, r.NumComputed)
		require.Zero(t, r.Blocks)
		require.Equal(t, 1, r.Preemptions)
	}
	st := s.Stats()
	require.Zero(t, st.Running)
	require.Equal(t, 4, st.Waiting)
	require.Zero(t, st.KVUsedBlocks, "every block is free")
	require.Equal(t, before.Preemptions+3, st.Preemptions)
	require.NoError(t, s.CheckBlocks())
	free := s.FreeQueue()
	for _, r := range running {
		for _, id := range tables[r.InternalID] { // every block handed out
			require.Contains(t, free, id)
			_, hashed := s.BlockHash(id)
			require.False(t, hashed, "block %d is still cached", id)
		}
	}

	so := stepChecked(t, s)
	require.Equal(t, []string{"a", "b", "c"}, scheduledReqs(so), "the preempted requests come back oldest first, ahead of w")
	for _, sc := range so.Scheduled {
		require.Zero(t, sc.Cached, "%s found a block cached", sc.Req.InternalID)
		require.Zero(t, sc.Start, sc.Req.InternalID)
		require.Equal(t, 9+2, sc.NumTokens, "%s computes its prompt and two tokens again", sc.Req.InternalID)
	}
	require.Zero(t, s.Stats().PrefixCachePreemptedHits)
	require.Positive(t, s.Stats().PrefixCachePreemptedQueries)
	require.Equal(t, core.StatusWaiting, w.Status)
	drainAll(t, s)
	for _, r := range []*core.Request{a, b, c, w} {
		require.Equal(t, sampled(r, 6), r.Output, r.InternalID)
	}
}

// TestResetPrefixCacheDropsTheHashes: a request with the prompt of one
// before it finds that one's blocks cached, whether it finished or was
// running and was aborted, unless the prefix cache was reset in between.
func TestResetPrefixCacheDropsTheHashes(t *testing.T) {
	hit := func(t *testing.T, finished, reset bool) int {
		s := newSched(core.Config{BlockSize: 4, EnablePrefixCaching: true})
		a := ignoring("a", 1, seq(1, 9), 5)
		require.NoError(t, s.AddRequest(a))
		if finished {
			drainAll(t, s)
			if reset {
				_, ok := s.ResetPrefixCache(false)
				require.True(t, ok, "nothing runs")
			}
		} else {
			stepChecked(t, s)
			stepChecked(t, s)
			require.Equal(t, core.StatusRunning, a.Status)
			if reset {
				_, ok := s.ResetPrefixCache(false)
				require.False(t, ok, "a runs")
				got, ok := s.ResetPrefixCache(true)
				require.True(t, ok)
				require.Equal(t, []string{"a"}, idsOf(got))
			}
			s.FinishRequests([]string{"a"}, core.StatusFinishedAborted)
		}
		require.False(t, s.HasRequests())
		require.Zero(t, s.Stats().KVUsedBlocks)
		require.NoError(t, s.CheckBlocks())
		d := ignoring("d", 2, seq(1, 9), 2)
		require.NoError(t, s.AddRequest(d))
		so := stepChecked(t, s)
		require.Len(t, so.Scheduled, 1)
		sc := so.Scheduled[0]
		require.Equal(t, int64(sc.Cached), s.Stats().PrefixCacheHits)
		require.Equal(t, 9-sc.Cached, sc.NumTokens)
		drainAll(t, s)
		require.Equal(t, sampled(d, 2), d.Output)
		return sc.Cached
	}
	for _, finished := range []bool{true, false} {
		t.Run(map[bool]string{true: "finished", false: "running"}[finished], func(t *testing.T) {
			require.Equal(t, 8, hit(t, finished, false), "without a reset the two full blocks are found")
			require.Zero(t, hit(t, finished, true), "after a reset nothing is found")
		})
	}
}

// TestAResetMakesTheKVBeforeItStale: a reset that succeeds stands for the
// weight update a trainer follows it with, and the model stamps KV with the
// weights it was written under. The fixed reset leaves nothing to read the
// old KV: the running request is preempted and computes its sequence again,
// and a later request with its prompt hits the blocks written since; both
// sample the model's tokens. core/reset-clears-nothing reports success and
// changes nothing: the running request goes on from the old KV and the
// later one hits it, and their tokens after the reset are not the model's —
// where, were KV not stamped, they would be, and the bug unseen.
func TestAResetMakesTheKVBeforeItStale(t *testing.T) {
	prompt := seq(1, 9)
	const n, before = 12, 3
	want := toks(prompt, n)
	run := func(t *testing.T, bug bool) (a, d *core.Request, cached int) {
		cfg := core.Config{BlockSize: 4, EnablePrefixCaching: true}
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreResetClearsNothing.Name+"=return")
		}
		s := newSched(cfg)
		a = ignoring("a", 1, prompt, n)
		require.NoError(t, s.AddRequest(a))
		for len(a.Output) < before {
			stepChecked(t, s)
		}
		preempted, ok := s.ResetPrefixCache(true)
		require.True(t, ok, "the reset reports success")
		if bug {
			require.Empty(t, preempted, "the bug preempts nothing")
		} else {
			require.Equal(t, []string{"a"}, idsOf(preempted))
		}
		drainAll(t, s)
		d = ignoring("d", 2, prompt, n)
		require.NoError(t, s.AddRequest(d))
		so := stepChecked(t, s)
		require.Len(t, so.Scheduled, 1)
		cached = so.Scheduled[0].Cached // so is the scheduler's, reused
		drainAll(t, s)
		return a, d, cached
	}

	a, d, cached := run(t, false)
	require.Equal(t, want, a.Output, "a computed again from the new weights")
	require.Equal(t, 8, cached, "d found the blocks a wrote after the reset")
	require.Equal(t, want, d.Output)

	a, d, cached = run(t, true)
	require.Equal(t, want[:before], a.Output[:before], "a's tokens before the reset")
	require.NotEqual(t, want[before:], a.Output[before:], "a went on from the old weights' KV")
	require.Equal(t, 8, cached, "d found the blocks a wrote before the reset")
	require.NotEqual(t, want, d.Output, "d sampled from them")
}

// ---- The core's pauses ----

// pauseLog is what a core run under the simulator put on its output queue
// and told its observer.
type pauseLog struct {
	outs   []*core.Outputs
	events []core.Event
}

// seenFrame is a frame and the index of its batch in the run.
type seenFrame struct {
	at int
	f  core.Frame
}

func drivePause(t *testing.T, cfg core.Config, feed func(rt task.Runtime, c *core.EngineCore)) *pauseLog {
	t.Helper()
	l := &pauseLog{}
	l.run(t, cfg, feed)
	return l
}

// run drives a core under the simulator (drive), logging into l as it goes.
func (l *pauseLog) run(t *testing.T, cfg core.Config, feed func(rt task.Runtime, c *core.EngineCore)) {
	t.Helper()
	cfg.Observer = func(e core.Event) { l.events = append(l.events, e) }
	l.outs = drive(t, cfg, feed)
	for _, o := range l.outs {
		require.NoError(t, o.Dead)
	}
}

func addIgnoring(c *core.EngineCore, id string, inc uint64, prompt []int, maxTokens int) {
	c.Send(core.Input{Kind: core.InputAdd, Req: ignoring(id, inc, prompt, maxTokens)})
}

// reply returns the index of the batch carrying call's reply, the only one.
func (l *pauseLog) reply(t *testing.T, call uint64) (int, core.Reply) {
	t.Helper()
	at, got := -1, core.Reply{}
	for i, o := range l.outs {
		if r := o.Reply; r != nil {
			if r.Call == call {
				require.Equal(t, -1, at, "call %d replied twice", call)
				at, got = i, *r
			}
		}
	}
	require.NotEqual(t, -1, at, "call %d got no reply", call)
	return at, got
}

// pausedThenResumed returns the indices of the batches carrying the
// replies to pause call pause, which took effect (paused), and to resume
// call resume, which came after it.
func (l *pauseLog) pausedThenResumed(t *testing.T, pause, resume uint64) (pauseAt, resumeAt int) {
	t.Helper()
	pauseAt, pr := l.reply(t, pause)
	require.True(t, pr.Paused, "pause %d took effect", pause)
	resumeAt, rr := l.reply(t, resume)
	require.False(t, rr.Paused)
	require.Greater(t, resumeAt, pauseAt, "the pause replied before the resume")
	return pauseAt, resumeAt
}

func (l *pauseLog) frames(id string) []seenFrame {
	var fs []seenFrame
	for i, o := range l.outs {
		for _, f := range o.Frames {
			if f.InternalID == id {
				fs = append(fs, seenFrame{i, f})
			}
		}
	}
	return fs
}

func (l *pauseLog) tokens(id string) []int {
	var got []int
	for _, f := range l.frames(id) {
		got = append(got, f.f.NewTokens...)
	}
	return got
}

// final returns id's final frame: its last, and its only finished one.
func (l *pauseLog) final(t *testing.T, id string) seenFrame {
	t.Helper()
	fs := l.frames(id)
	require.NotEmpty(t, fs, "%s has no frame", id)
	for _, f := range fs[:len(fs)-1] {
		require.False(t, f.f.Finished, "%s finished before its last frame", id)
	}
	last := fs[len(fs)-1]
	require.True(t, last.f.Finished, "%s did not finish", id)
	return last
}

// event returns the index of the only event of kind for call.
func (l *pauseLog) event(t *testing.T, kind core.EventKind, call uint64) int {
	t.Helper()
	at := -1
	for i, e := range l.events {
		if e.Kind == kind && e.Call == call {
			require.Equal(t, -1, at, "two %s events for call %d", kind, call)
			at = i
		}
	}
	require.NotEqual(t, -1, at, "no %s event for call %d", kind, call)
	return at
}

// finalEvent returns the index of the event of id's final frame.
func (l *pauseLog) finalEvent(t *testing.T, id string) int {
	t.Helper()
	for i, e := range l.events {
		if e.Kind == core.EventFrameEmitted && e.InternalID == id && e.Finished {
			return i
		}
	}
	require.Failf(t, "no final frame event", "%s", id)
	return -1
}

// count returns the events of kind strictly between from and to.
func (l *pauseLog) count(kind core.EventKind, from, to int) int {
	n := 0
	for _, e := range l.events[from+1 : to] {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// ids returns the internal ids of the events of kind strictly between from
// and to, in order.
func (l *pauseLog) ids(kind core.EventKind, from, to int) []string {
	var ids []string
	for _, e := range l.events[from+1 : to] {
		if e.Kind == kind {
			ids = append(ids, e.InternalID)
		}
	}
	return ids
}

// both runs a test of the core without and with async scheduling.
func both(t *testing.T, test func(t *testing.T, async bool)) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "async"}[async], func(t *testing.T) { test(t, async) })
	}
}

// TestPauseAbortEndsWhatTheCoreHolds: an abort pause ends the running and
// the waiting requests, each with one final abort frame, and replies after
// them; no step runs until the resume, and a request added after the pause
// waits for it.
func TestPauseAbortEndsWhatTheCoreHolds(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		l := drivePause(t, core.Config{AsyncScheduling: async, MaxNumSeqs: 2}, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, seq(1, 4), 1000)
			addIgnoring(c, "b", 2, seq(10, 4), 1000)
			addIgnoring(c, "w", 3, seq(20, 4), 5) // waits: two run at most
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseAbort})
			addIgnoring(c, "d", 4, seq(30, 4), 5)
			rt.Sleep(20 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputResume, Call: 2})
			rt.Sleep(50 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		pauseAt, resumeAt := l.pausedThenResumed(t, 1, 2)

		for _, id := range []string{"a", "b", "w"} {
			fin := l.final(t, id)
			require.Equal(t, core.FinishAbort, fin.f.Reason, id)
			require.Less(t, fin.at, pauseAt, "%s's abort frame comes before the pause's reply", id)
			require.Len(t, l.tokens(id), fin.f.Position, id)
		}
		for _, id := range []string{"a", "b"} {
			n := len(l.tokens(id))
			require.Positive(t, n, "%s ran before the pause", id)
			require.Less(t, n, 1000, id)
			require.Equal(t, toks(seq(map[string]int{"a": 1, "b": 10}[id], 4), n), l.tokens(id), id)
		}
		require.Len(t, l.frames("w"), 1, "w never ran: its abort frame is all")

		for _, f := range l.frames("d") {
			require.Greater(t, f.at, resumeAt, "d waits for the resume")
		}
		require.Equal(t, core.FinishLength, l.final(t, "d").f.Reason)
		require.Equal(t, toks(seq(30, 4), 5), l.tokens("d"))

		pause, done, resume := l.event(t, core.EventPause, 1), l.event(t, core.EventPauseDone, 1), l.event(t, core.EventResume, 2)
		require.Equal(t, "abort", l.events[pause].Text)
		require.Less(t, pause, done)
		require.Less(t, done, resume)
		require.Zero(t, l.count(core.EventStep, pause, resume), "no step while paused")
		for _, id := range []string{"a", "b", "w"} {
			require.Less(t, l.finalEvent(t, id), done, id)
		}
	})
}

// TestPauseWaitDrainsTheRunning: a wait pause lets the running requests
// run to their ends and replies once they are done, without a resume;
// the request that waited and one added after the pause get no frame
// until the resume, then run to their ends.
func TestPauseWaitDrainsTheRunning(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		l := drivePause(t, core.Config{AsyncScheduling: async, MaxNumSeqs: 2}, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, seq(1, 4), 20)
			addIgnoring(c, "b", 2, seq(10, 4), 30)
			addIgnoring(c, "w", 3, seq(20, 4), 5)
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseWait})
			addIgnoring(c, "d", 4, seq(30, 4), 5)
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputResume, Call: 2})
			rt.Sleep(50 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		pauseAt, resumeAt := l.pausedThenResumed(t, 1, 2)

		pause, done, resume := l.event(t, core.EventPause, 1), l.event(t, core.EventPauseDone, 1), l.event(t, core.EventResume, 2)
		require.Equal(t, "wait", l.events[pause].Text)
		lastFinal := 0
		for id, n := range map[string]int{"a": 20, "b": 30} {
			fin := l.final(t, id)
			require.Equal(t, core.FinishLength, fin.f.Reason, id)
			require.Less(t, fin.at, pauseAt, "%s's last frame comes before the pause's reply", id)
			require.Equal(t, toks(seq(map[string]int{"a": 1, "b": 10}[id], 4), n), l.tokens(id), id)
			ev := l.finalEvent(t, id)
			require.Greater(t, ev, pause, "%s was running at the pause", id)
			lastFinal = max(lastFinal, ev)
		}
		require.Less(t, lastFinal, done)
		require.Zero(t, l.count(core.EventStep, lastFinal, done), "the pause took effect as the running requests ended")
		require.Less(t, done, resume)
		require.Zero(t, l.count(core.EventStep, done, resume), "no step while paused")
		for id, from := range map[string]int{"w": 20, "d": 30} {
			fs := l.frames(id)
			require.NotEmpty(t, fs, id)
			for _, f := range fs {
				require.Greater(t, f.at, resumeAt, "%s waits for the resume", id)
			}
			require.Equal(t, core.FinishLength, l.final(t, id).f.Reason, id)
			require.Equal(t, toks(seq(from, 4), 5), l.tokens(id), id)
		}
	})
}

// TestPauseKeepFreezesAndResumes: a keep pause freezes the running requests
// where they are: no step runs from the pause to the resume, and after it
// the requests end with the tokens of a run never paused. With ClearCache
// the frozen requests are preempted at the pause, newest first, and find
// nothing cached when they come back.
func TestPauseKeepFreezesAndResumes(t *testing.T) {
	prompts := map[string][]int{"a": seq(1, 9), "b": seq(50, 9), "d": seq(100, 9)}
	lengths := map[string]int{"a": 30, "b": 30, "d": 5}
	cfgFor := func(async bool) core.Config {
		return core.Config{AsyncScheduling: async, BlockSize: 4, MaxNumSeqs: 4, EnablePrefixCaching: true}
	}
	both(t, func(t *testing.T, async bool) {
		ref := drivePause(t, cfgFor(async), func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, prompts["a"], lengths["a"])
			addIgnoring(c, "b", 2, prompts["b"], lengths["b"])
			addIgnoring(c, "d", 3, prompts["d"], lengths["d"])
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		for id, p := range prompts {
			require.Equal(t, toks(p, lengths[id]), ref.tokens(id), id)
		}
		for _, clearCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("clear=%v", clearCache), func(t *testing.T) {
				var st core.SchedulerStats
				l := drivePause(t, cfgFor(async), func(rt task.Runtime, c *core.EngineCore) {
					addIgnoring(c, "a", 1, prompts["a"], lengths["a"])
					addIgnoring(c, "b", 2, prompts["b"], lengths["b"])
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseKeep, ClearCache: clearCache})
					addIgnoring(c, "d", 3, prompts["d"], lengths["d"])
					rt.Sleep(50 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputResume, Call: 2})
					rt.Sleep(100 * time.Millisecond)
					st = c.Stats()
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				pauseAt, resumeAt := l.pausedThenResumed(t, 1, 2)

				pause, done, resume := l.event(t, core.EventPause, 1), l.event(t, core.EventPauseDone, 1), l.event(t, core.EventResume, 2)
				require.Equal(t, "keep", l.events[pause].Text)
				require.Less(t, pause, done)
				require.Less(t, done, resume)
				require.Zero(t, l.count(core.EventStep, pause, resume), "no step from the pause to the resume")

				for _, id := range []string{"a", "b"} {
					fs := l.frames(id)
					before := 0
					for _, f := range fs {
						if f.at < pauseAt {
							before++
						}
					}
					require.Positive(t, before, "%s ran before the pause", id)
					require.Less(t, before, lengths[id], "%s was frozen before its end", id)
					fin := l.final(t, id)
					require.Greater(t, fin.at, resumeAt, "%s ends after the resume", id)
					require.Equal(t, core.FinishLength, fin.f.Reason, id)
				}
				for _, f := range l.frames("d") {
					require.Greater(t, f.at, resumeAt, "d waits for the resume")
				}
				for id := range prompts {
					require.Equal(t, ref.tokens(id), l.tokens(id), "%s: the tokens of a run never paused", id)
				}

				preempted := l.ids(core.EventPreempt, pause, done)
				require.Equal(t, preempted, l.ids(core.EventPreempt, -1, len(l.events)), "preemptions only at the pause")
				require.Empty(t, l.ids(core.EventPrefixHit, -1, len(l.events)), "nothing is found cached")
				if clearCache {
					// The reset preempts the frozen requests, each once,
					// newest first, as a step's preemptions are told.
					require.Equal(t, []string{"b", "a"}, preempted, "the reset preempts the frozen requests")
					require.Equal(t, int64(2), st.Preemptions)
					require.Positive(t, st.PrefixCachePreemptedQueries, "they looked their blocks up as they came back")
					require.Zero(t, st.PrefixCachePreemptedHits, "and found none")
				} else {
					require.Empty(t, preempted)
					require.Zero(t, st.Preemptions)
				}
			})
		}
	})
}

// TestPauseClearCacheResetsThePrefixCache: after a wait pause that clears
// the cache, a request with the prompt of one that ran before finds none
// of its blocks; after one that keeps it, it finds them.
func TestPauseClearCacheResetsThePrefixCache(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		for _, clearCache := range []bool{false, true} {
			t.Run(fmt.Sprintf("clear=%v", clearCache), func(t *testing.T) {
				l := drivePause(t, core.Config{AsyncScheduling: async, BlockSize: 4, EnablePrefixCaching: true}, func(rt task.Runtime, c *core.EngineCore) {
					addIgnoring(c, "a", 1, seq(1, 9), 3)
					rt.Sleep(20 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseWait, ClearCache: clearCache})
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputResume, Call: 2})
					addIgnoring(c, "d", 2, seq(1, 9), 3)
					rt.Sleep(20 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				require.Less(t, l.finalEvent(t, "a"), l.event(t, core.EventPause, 1), "a ended before the pause")
				var hits []int
				for _, e := range l.events {
					if e.Kind == core.EventPrefixHit {
						require.Equal(t, "d", e.InternalID)
						hits = append(hits, e.Held)
					}
				}
				if clearCache {
					require.Empty(t, hits, "the reset dropped a's blocks")
				} else {
					require.Equal(t, []int{8}, hits, "d finds a's two full blocks")
				}
				require.Equal(t, toks(seq(1, 9), 3), l.tokens("d"))
			})
		}
	})
}

// TestResumeWhileAWaitPauseDrains: a resume that comes while a wait pause
// waits for a running request overtakes the pause: the pause replies at
// once with Resumed set, before the resume's own reply, and never takes
// effect (no pause-done event, no reset); the request the pause held back
// runs at once beside the one still draining, both to their ends.
func TestResumeWhileAWaitPauseDrains(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		l := drivePause(t, core.Config{AsyncScheduling: async, MaxNumSeqs: 4}, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, seq(1, 4), 40)
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseWait})
			rt.Sleep(2 * time.Millisecond)
			addIgnoring(c, "d", 2, seq(10, 4), 10)
			rt.Sleep(3 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputResume, Call: 2})
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		resumeAt, rr := l.reply(t, 2)
		require.False(t, rr.Paused)
		require.False(t, rr.Resumed, "only a pause is overtaken")
		pauseAt, pr := l.reply(t, 1)
		require.True(t, pr.Resumed, "the resume overtook the pause")
		require.False(t, pr.Paused)
		require.Less(t, pauseAt, resumeAt, "the overtaken pause replies as the resume is taken, first")

		aFin, dFin := l.final(t, "a"), l.final(t, "d")
		require.Greater(t, aFin.at, pauseAt, "a still ran when the pause was overtaken")
		dFrames := l.frames("d")
		require.Greater(t, dFrames[0].at, resumeAt, "d waited for the resume")
		require.Less(t, dFrames[0].at, aFin.at, "d ran while a still ran: the engine runs during the drain")
		require.Greater(t, dFin.at, resumeAt)
		require.Equal(t, toks(seq(1, 4), 40), l.tokens("a"))
		require.Equal(t, toks(seq(10, 4), 10), l.tokens("d"))

		pause, resume := l.event(t, core.EventPause, 1), l.event(t, core.EventResume, 2)
		require.Less(t, pause, resume)
		require.Zero(t, l.count(core.EventPauseDone, -1, len(l.events)), "the overtaken pause never took effect")
	})
}

// TestAbortWhileHeldByAPause: requests a pause holds back, one that waited
// before it and one added after it, are aborted during the pause: they
// are gone, with no frame at all (the shutdown would end whatever the
// core still held with one), and the running request ends as usual.
func TestAbortWhileHeldByAPause(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		for _, mode := range []core.PauseMode{core.PauseWait, core.PauseKeep} {
			t.Run(mode.String(), func(t *testing.T) {
				var heldBefore, heldAfter int
				l := drivePause(t, core.Config{AsyncScheduling: async, MaxNumSeqs: 1}, func(rt task.Runtime, c *core.EngineCore) {
					addIgnoring(c, "a", 1, seq(1, 4), 30)
					addIgnoring(c, "w", 2, seq(10, 4), 5) // waits: one runs at most
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: mode})
					addIgnoring(c, "d", 3, seq(20, 4), 5)
					rt.Sleep(2 * time.Millisecond)
					heldBefore = c.Held()
					c.SendAbort([]string{"w", "d"})
					rt.Sleep(5 * time.Millisecond)
					heldAfter = c.Held()
					c.Send(core.Input{Kind: core.InputResume, Call: 2})
					rt.Sleep(100 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				require.Equal(t, 3, heldBefore)
				require.Equal(t, 1, heldAfter)
				require.Empty(t, l.frames("w"))
				require.Empty(t, l.frames("d"))
				// An abort reaches the core on two queues: the second finds
				// nothing to end (incarnation 0).
				ended := map[string]uint64{}
				pause, resume := l.event(t, core.EventPause, 1), l.event(t, core.EventResume, 2)
				for i, e := range l.events {
					if e.Kind == core.EventCoreAbort && e.Incarnation != 0 {
						require.NotContains(t, ended, e.InternalID, "%s ended twice", e.InternalID)
						require.Greater(t, i, pause)
						require.Less(t, i, resume)
						ended[e.InternalID] = e.Incarnation
					}
				}
				require.Equal(t, map[string]uint64{"w": 2, "d": 3}, ended)
				require.Equal(t, core.FinishLength, l.final(t, "a").f.Reason)
				require.Equal(t, toks(seq(1, 4), 30), l.tokens("a"))
			})
		}
	})
}

// TestIsPausedAnswersThePauseState: IsPaused answers false before a pause,
// true from the pause on, whether or not it took effect, and false after
// the resume; the pause's own reply says whether the core was paused
// when it took effect.
func TestIsPausedAnswersThePauseState(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		for _, mode := range []core.PauseMode{core.PauseAbort, core.PauseWait, core.PauseKeep} {
			t.Run(mode.String(), func(t *testing.T) {
				l := drivePause(t, core.Config{AsyncScheduling: async}, func(rt task.Runtime, c *core.EngineCore) {
					addIgnoring(c, "a", 1, seq(1, 4), 20)
					rt.Sleep(3 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputIsPaused, Call: 1})
					rt.Sleep(time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 2, Mode: mode})
					c.Send(core.Input{Kind: core.InputIsPaused, Call: 3})
					rt.Sleep(5 * time.Millisecond) // abort and keep took effect; wait drains a
					c.Send(core.Input{Kind: core.InputIsPaused, Call: 4})
					c.Send(core.Input{Kind: core.InputResume, Call: 5})
					c.Send(core.Input{Kind: core.InputIsPaused, Call: 6})
					rt.Sleep(50 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				want := map[uint64]bool{1: false, 3: true, 4: true, 5: false, 6: false}
				prev := -1
				for _, call := range []uint64{1, 3, 4, 5, 6} {
					at, r := l.reply(t, call)
					require.Equal(t, want[call], r.Paused, "call %d", call)
					require.Greater(t, at, prev, "call %d replies in order", call)
					prev = at
				}
				// The wait pause is still draining a at the resume, which
				// overtakes it; the others took effect at once.
				_, r := l.reply(t, 2)
				require.Equal(t, mode != core.PauseWait, r.Paused)
				require.Equal(t, mode == core.PauseWait, r.Resumed)
			})
		}
	})
}

// TestPauseRepliesDirect: with Input.Direct the replies go to it, in the
// order the core makes them, the pause's once its abort frames are out,
// and none travels on the output queue; without, each travels there.
func TestPauseRepliesDirect(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
				type got struct {
					r      core.Reply
					events int // the events before it
				}
				var replies []got
				l := &pauseLog{}
				l.run(t, core.Config{AsyncScheduling: async}, func(rt task.Runtime, c *core.EngineCore) {
					var d func(core.Reply)
					if direct {
						d = func(r core.Reply) { replies = append(replies, got{r, len(l.events)}) }
					}
					addIgnoring(c, "a", 1, seq(1, 4), 1000)
					addIgnoring(c, "b", 2, seq(10, 4), 1000)
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseAbort, Direct: d})
					rt.Sleep(5 * time.Millisecond) // the steps in flight end first
					c.Send(core.Input{Kind: core.InputIsPaused, Call: 2, Direct: d})
					rt.Sleep(time.Millisecond)
					c.Send(core.Input{Kind: core.InputResume, Call: 3, Direct: d})
					rt.Sleep(time.Millisecond)
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				for _, id := range []string{"a", "b"} {
					require.Equal(t, core.FinishAbort, l.final(t, id).f.Reason, id)
				}
				want := []core.Reply{{Call: 1, Paused: true}, {Call: 2, Paused: true}, {Call: 3, Paused: false}}
				if !direct {
					require.Empty(t, replies)
					for _, w := range want {
						_, r := l.reply(t, w.Call)
						require.Equal(t, w, r)
					}
					return
				}
				for _, o := range l.outs {
					require.Nil(t, o.Reply, "a direct reply does not travel on the output queue")
				}
				require.Len(t, replies, len(want))
				for i, w := range want {
					require.Equal(t, w, replies[i].r)
				}
				pauseReply := replies[0].events
				require.Less(t, l.event(t, core.EventPauseDone, 1), pauseReply)
				for _, id := range []string{"a", "b"} {
					require.Less(t, l.finalEvent(t, id), pauseReply, "%s's abort frame was put before the pause's reply", id)
				}
				require.Less(t, l.event(t, core.EventResume, 3), replies[2].events)
			})
		}
	})
}

// TestPauseWhilePausedPausesAgain: an abort pause while a first pause
// holds the core ends what that one froze or let run and what waited, and
// both pauses reply, the first before the second: a keep pause at once, a
// wait pause, still waiting for its running request, only with the second,
// after the abort frames. After the resume a new request runs.
func TestPauseWhilePausedPausesAgain(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		for _, first := range []core.PauseMode{core.PauseKeep, core.PauseWait} {
			t.Run(first.String(), func(t *testing.T) {
				l := drivePause(t, core.Config{AsyncScheduling: async}, func(rt task.Runtime, c *core.EngineCore) {
					addIgnoring(c, "a", 1, seq(1, 4), 1000)
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: first})
					addIgnoring(c, "d", 2, seq(10, 4), 5)
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 2, Mode: core.PauseAbort})
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputResume, Call: 3})
					addIgnoring(c, "e", 3, seq(20, 4), 5)
					rt.Sleep(50 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				firstAt, fr := l.reply(t, 1)
				abortAt, ar := l.reply(t, 2)
				resumeAt, _ := l.reply(t, 3)
				require.True(t, fr.Paused)
				require.True(t, ar.Paused)
				require.Less(t, firstAt, abortAt)
				require.Less(t, abortAt, resumeAt)
				for _, id := range []string{"a", "d"} {
					fin := l.final(t, id)
					require.Equal(t, core.FinishAbort, fin.f.Reason, id)
					require.Less(t, fin.at, abortAt, id)
					if first == core.PauseKeep {
						require.Greater(t, fin.at, firstAt, "%s lived through the keep pause", id)
					} else {
						require.Less(t, fin.at, firstAt, "the wait pause took effect once %s was gone", id)
					}
				}
				require.Len(t, l.frames("d"), 1, "d never ran")
				pause1, pause2 := l.event(t, core.EventPause, 1), l.event(t, core.EventPause, 2)
				done1, done2 := l.event(t, core.EventPauseDone, 1), l.event(t, core.EventPauseDone, 2)
				resume := l.event(t, core.EventResume, 3)
				require.Less(t, done1, done2)
				require.Less(t, done2, resume)
				if first == core.PauseKeep {
					require.Less(t, done1, pause2, "the keep pause took effect at once")
					require.Zero(t, l.count(core.EventStep, pause1, resume), "no step while paused")
				} else {
					require.Greater(t, done1, pause2, "the wait pause was still waiting for a")
					require.Positive(t, l.count(core.EventStep, pause1, pause2), "a ran during the wait pause")
					require.Zero(t, l.count(core.EventStep, pause2, resume), "no step after the abort pause")
				}
				require.Equal(t, toks(seq(20, 4), 5), l.tokens("e"))
				for _, f := range l.frames("e") {
					require.Greater(t, f.at, resumeAt)
				}
			})
		}
	})
}

// TestAWaitAfterAKeepLeavesTheFrozenFrozen: a wait pause that comes while
// a keep pause holds the engine does not let the frozen request step: the
// keep's caller was promised no step until a resume. With
// core/pause-last-mode-wins planted (vLLM sets the state it is given) the
// wait pause's PausedNew lets it run to its end before anyone resumed.
func TestAWaitAfterAKeepLeavesTheFrozenFrozen(t *testing.T) {
	both(t, func(t *testing.T, async bool) {
		for _, bug := range []bool{false, true} {
			t.Run(fmt.Sprintf("bug=%v", bug), func(t *testing.T) {
				cfg := core.Config{AsyncScheduling: async}
				if bug {
					cfg.Faults = rttest.Armed(t, failpoints.CorePauseLastModeWins.Name+"=return")
				}
				l := drivePause(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
					addIgnoring(c, "a", 1, seq(1, 4), 20)
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseKeep})
					rt.Sleep(5 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputPause, Call: 2, Mode: core.PauseWait})
					rt.Sleep(50 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputResume, Call: 3})
					rt.Sleep(50 * time.Millisecond)
					c.Send(core.Input{Kind: core.InputShutdown})
				})
				done1, resume := l.event(t, core.EventPauseDone, 1), l.event(t, core.EventResume, 3)
				require.Less(t, done1, resume)
				steps := l.count(core.EventStep, done1, resume)
				fin := l.final(t, "a")
				resumeAt, _ := l.reply(t, 3)
				if bug {
					require.Positive(t, steps, "the wait pause let the frozen request step")
					require.Less(t, fin.at, resumeAt, "it ran to its end before the resume")
					return
				}
				require.Zero(t, steps, "no step between the keep pause taking effect and the resume")
				require.Greater(t, fin.at, resumeAt, "a ends after the resume")
				require.Equal(t, toks(seq(1, 4), 20), l.tokens("a"))
			})
		}
	})
}

// TestAClearingKeepPauseDropsNoTokenUnderAsyncScheduling: under async
// scheduling a keep pause that clears the cache preempts the frozen
// requests at an idle point, with no step of theirs in flight, so they
// drop nothing and end with the tokens of a run never paused. Armed with
// core/reset-discards-unconditionally (vLLM's #42043), each drops the
// first token it samples after the resume and goes on one place early.
func TestAClearingKeepPauseDropsNoTokenUnderAsyncScheduling(t *testing.T) {
	prompt, n := seq(1, 9), 30
	cfg := core.Config{AsyncScheduling: true, BlockSize: 4, MaxNumSeqs: 4, EnablePrefixCaching: true}
	run := func(t *testing.T, bug bool) *pauseLog {
		cfg := cfg
		if bug {
			cfg.Faults = rttest.Armed(t, failpoints.CoreResetDiscardsUnconditionally.Name+"=return")
		}
		return drivePause(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, prompt, n)
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputPause, Call: 1, Mode: core.PauseKeep, ClearCache: true})
			rt.Sleep(50 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputResume, Call: 2})
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
	}
	want := toks(prompt, n)

	l := run(t, false)
	pauseAt, _ := l.pausedThenResumed(t, 1, 2)
	before := 0
	for _, f := range l.frames("a") {
		if f.at < pauseAt {
			before += len(f.f.NewTokens)
		}
	}
	require.Positive(t, before, "a ran before the pause")
	require.Less(t, before, n, "a was frozen before its end")
	require.Equal(t, []string{"a"}, l.ids(core.EventPreempt, -1, len(l.events)), "the reset preempted a")
	require.Equal(t, want, l.tokens("a"), "the tokens of a run never paused")

	bad := run(t, true)
	got := bad.tokens("a")
	require.Equal(t, want[:before], got[:before], "the tokens before the pause")
	require.Equal(t, want[before+1:before+6], got[before:before+5], "the first token after the resume dropped, the next ones a place early")
}

// ---- Resetting the prefix cache while the core runs ----

// TestResetPrefixCacheWhileRunning: a reset without ResetRunning is
// refused while requests run, and changes nothing; with it the core
// preempts the running requests between two steps and replies Reset, and
// they come back to find nothing cached and end with the tokens of a run
// never reset. Under async scheduling a step of theirs is in flight at the
// reset: its tokens, sampled before it, are dropped (EventPreempt's Held)
// and sampled again; kept, each would come twice.
func TestResetPrefixCacheWhileRunning(t *testing.T) {
	prompts := map[string][]int{"a": seq(1, 9), "b": seq(50, 9)}
	const n = 30
	both(t, func(t *testing.T, async bool) {
		cfg := core.Config{AsyncScheduling: async, BlockSize: 4, MaxNumSeqs: 4, EnablePrefixCaching: true}
		var after core.SchedulerStats
		l := drivePause(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, prompts["a"], n)
			addIgnoring(c, "b", 2, prompts["b"], n)
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputResetPrefixCache, Call: 1})
			c.Send(core.Input{Kind: core.InputResetPrefixCache, Call: 2, ResetRunning: true})
			rt.Sleep(100 * time.Millisecond)
			after = c.Stats()
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		_, refused := l.reply(t, 1)
		require.False(t, refused.Reset, "refused while a and b run")
		resetAt, reset := l.reply(t, 2)
		require.True(t, reset.Reset)
		require.False(t, reset.Paused)

		first, second := l.event(t, core.EventCacheReset, 1), l.event(t, core.EventCacheReset, 2)
		require.False(t, l.events[first].Finished)
		require.True(t, l.events[second].Finished)
		require.Equal(t, 2, l.events[second].Held, "it preempted a and b")
		require.Zero(t, l.count(core.EventPreempt, -1, first), "the refused reset preempted nothing")
		var preempted []string
		dropped := 0
		for _, e := range l.events[first+1 : second] {
			require.Equal(t, core.EventPreempt, e.Kind, "between the resets: %s", e)
			preempted = append(preempted, e.InternalID)
			dropped += e.Held
		}
		require.Equal(t, []string{"b", "a"}, preempted, "newest first")
		if async {
			require.Equal(t, 2, dropped, "a step of each was in flight")
		} else {
			require.Zero(t, dropped, "nothing is in flight between two steps")
		}
		require.Equal(t, int64(2), after.Preemptions)
		require.Positive(t, after.PrefixCachePreemptedQueries, "a and b looked their blocks up as they came back")
		require.Zero(t, after.PrefixCachePreemptedHits, "and found none")

		for id, p := range prompts {
			fs := l.frames(id)
			require.Less(t, fs[0].at, resetAt, "%s ran before the reset", id)
			require.Greater(t, l.final(t, id).at, resetAt, "%s ends after it", id)
			require.Equal(t, toks(p, n), l.tokens(id), "%s: the tokens of a run never reset", id)
		}
	})
}
