package core_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/failpoints"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/task"
)

// TestAWeightUpdateHoldsScheduling is an RL trainer's weight update in
// flight, over the core: a runs, the update starts with no pause before
// it, b arrives, a resume and a wait pause come in the middle of it, and
// two batches are written before the finish. Nothing steps from the start
// to the finish: not the resume, not the wait pause lift the hold. The
// wait pause takes effect only once a, frozen by the hold, has run to its
// end after the finish; b waits for the resume after that. With
// core/update-keeps-scheduling (vLLM, which holds nothing) a steps
// between the batches; with core/update-holds-by-pausing the resume in
// the middle lifts the hold.
func TestAWeightUpdateHoldsScheduling(t *testing.T) {
	pa, pb := seq(1, 9), seq(40, 6)
	const n = 20
	run := func(t *testing.T, cfg core.Config) *pauseLog {
		return drivePause(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, pa, n)
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputStartWeightUpdate, Call: 1})
			rt.Sleep(2 * time.Millisecond)
			addIgnoring(c, "b", 2, pb, n)
			c.Send(core.Input{Kind: core.InputUpdateWeights, Call: 2})
			c.Send(core.Input{Kind: core.InputResume, Call: 3})
			rt.Sleep(2 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputPause, Call: 4, Mode: core.PauseWait})
			rt.Sleep(2 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputUpdateWeights, Call: 5})
			rt.Sleep(2 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputFinishWeightUpdate, Call: 6})
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputResume, Call: 7})
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
	}
	both(t, func(t *testing.T, async bool) {
		l := run(t, core.Config{AsyncScheduling: async})
		start, finish := l.event(t, core.EventWeightUpdate, 1), l.event(t, core.EventWeightUpdate, 6)
		require.True(t, l.events[start].Finished)
		require.Equal(t, "finish", l.events[finish].Text)
		require.Equal(t, 2, l.events[finish].Held, "two batches written")
		require.Zero(t, l.count(core.EventStep, start, finish), "nothing steps during the update")
		for _, call := range []uint64{1, 2, 5, 6} {
			_, r := l.reply(t, call)
			require.NoError(t, r.Err, "call %d", call)
		}
		_, resumed := l.reply(t, 3)
		require.False(t, resumed.Paused, "the resume resumed: the hold is no pause")

		finishAt, _ := l.reply(t, 6)
		waitAt, wait := l.reply(t, 4)
		require.True(t, wait.Paused)
		require.Greater(t, waitAt, finishAt, "the wait pause waits for a, which the hold froze")
		require.Greater(t, waitAt, l.final(t, "a").at, "and takes effect once a ended")
		require.Equal(t, toks(pa, n), l.tokens("a"))
		resumeAt, _ := l.reply(t, 7)
		require.Greater(t, l.frames("b")[0].at, resumeAt, "b waited for the wait pause's resume")
		require.Equal(t, toks(pb, n), l.tokens("b"))
	})

	t.Run("update-keeps-scheduling", func(t *testing.T) {
		l := run(t, core.Config{Faults: rttest.Armed(t, failpoints.CoreUpdateKeepsScheduling.Name+"=return")})
		require.Positive(t, l.count(core.EventStep, l.event(t, core.EventWeightUpdate, 1), l.event(t, core.EventWeightUpdate, 6)),
			"vLLM steps over weights half replaced")
	})
	t.Run("update-holds-by-pausing", func(t *testing.T) {
		l := run(t, core.Config{Faults: rttest.Armed(t, failpoints.CoreUpdateHoldsByPausing.Name+"=return")})
		resume, finish := l.event(t, core.EventResume, 3), l.event(t, core.EventWeightUpdate, 6)
		require.Zero(t, l.count(core.EventStep, l.event(t, core.EventWeightUpdate, 1), resume), "held until the resume")
		require.Positive(t, l.count(core.EventStep, resume, finish), "the resume lifted the hold in the middle of the update")
	})
}

// TestAWeightUpdateRefusesWhatItCannotDo: a batch or a finish with no
// update open, a start while one is, and any call while the weights sleep
// are refused with the reason, and change nothing; once the weights are
// awake (the KV cache may sleep on) the update goes through, and the
// core resumes at the KV cache's wake-up. With core/update-while-asleep,
// vLLM's #57853, the start writes into the released weights and the core
// dies.
func TestAWeightUpdateRefusesWhatItCannotDo(t *testing.T) {
	run := func(t *testing.T, cfg core.Config) *pauseLog {
		l := &pauseLog{}
		cfg.Observer = func(e core.Event) { l.events = append(l.events, e) }
		l.outs = drive(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			c.Send(core.Input{Kind: core.InputUpdateWeights, Call: 1})
			c.Send(core.Input{Kind: core.InputFinishWeightUpdate, Call: 2})
			c.Send(core.Input{Kind: core.InputStartWeightUpdate, Call: 3})
			c.Send(core.Input{Kind: core.InputStartWeightUpdate, Call: 4})
			c.Send(core.Input{Kind: core.InputFinishWeightUpdate, Call: 5})
			c.Send(core.Input{Kind: core.InputSleep, Call: 6, Level: 2, Mode: core.PauseKeep})
			rt.Sleep(time.Millisecond)
			c.Send(core.Input{Kind: core.InputStartWeightUpdate, Call: 7})
			c.Send(core.Input{Kind: core.InputWakeUp, Call: 8, Tags: core.SleepWeights})
			c.Send(core.Input{Kind: core.InputStartWeightUpdate, Call: 9})
			c.Send(core.Input{Kind: core.InputUpdateWeights, Call: 10})
			c.Send(core.Input{Kind: core.InputFinishWeightUpdate, Call: 11})
			c.Send(core.Input{Kind: core.InputWakeUp, Call: 12, Tags: core.SleepKVCache})
			rt.Sleep(time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		return l
	}
	l := run(t, core.Config{})
	for call, want := range map[uint64]error{1: core.ErrNoWeightUpdate, 2: core.ErrNoWeightUpdate, 4: core.ErrWeightUpdateActive, 7: core.ErrWeightsAsleep} {
		_, r := l.reply(t, call)
		require.ErrorIs(t, r.Err, want, "call %d", call)
		ev := l.events[l.event(t, core.EventWeightUpdate, call)]
		require.False(t, ev.Finished, "call %d", call)
		require.ErrorIs(t, ev.Err, want, "call %d", call)
	}
	require.Equal(t, core.SleepAll, core.SleepTags(l.events[l.event(t, core.EventWeightUpdate, 7)].Held), "the refusal says what sleeps")
	for _, call := range []uint64{3, 5, 9, 10, 11} {
		_, r := l.reply(t, call)
		require.NoError(t, r.Err, "call %d", call)
	}
	_, kvAsleep := l.reply(t, 11)
	require.True(t, kvAsleep.Asleep, "the update went through with the KV cache asleep")
	_, woke := l.reply(t, 12)
	require.False(t, woke.Paused)
	require.False(t, woke.Asleep)

	t.Run("update-while-asleep", func(t *testing.T) {
		l := run(t, core.Config{Faults: rttest.Armed(t, failpoints.CoreUpdateWhileAsleep.Name+"=return")})
		var dead *core.Outputs
		for _, o := range l.outs {
			if o.Dead != nil {
				dead = o
			}
		}
		require.NotNil(t, dead, "the core died")
		require.ErrorContains(t, dead.Dead, "segmentation fault: start of a weight update")
		require.True(t, l.events[l.event(t, core.EventWeightUpdate, 7)].Finished, "of the start it took asleep")
	})
}
