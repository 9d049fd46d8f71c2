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

// TestAStagedWakeUpResumesOnceTheKVCacheIsBack is the colocated RL loop
// over the core: a sleeps in the middle of its tokens (level 1, keep: its
// KV is released with the executor's memory, so it is preempted to compute
// again), b arrives while the engine sleeps, a resume is refused, and the
// wake-up is staged: the weights first, which leaves the core paused, then
// the KV cache, which resumes it. Nothing steps from the sleep to the
// second wake-up, and a and b end with the model's tokens. With
// core/partial-wake-resumes, vLLM's #44395, the first wake-up resumes and
// b's first step is a forward pass into the released KV cache: the core
// dies of it.
func TestAStagedWakeUpResumesOnceTheKVCacheIsBack(t *testing.T) {
	pa, pb := seq(1, 9), seq(40, 6)
	const n = 20
	run := func(t *testing.T, cfg core.Config) *pauseLog {
		cfg.BlockSize, cfg.EnablePrefixCaching = 4, true
		l := &pauseLog{}
		cfg.Observer = func(e core.Event) { l.events = append(l.events, e) }
		l.outs = drive(t, cfg, func(rt task.Runtime, c *core.EngineCore) {
			addIgnoring(c, "a", 1, pa, n)
			rt.Sleep(5 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputSleep, Call: 1, Level: 1, Mode: core.PauseKeep})
			rt.Sleep(10 * time.Millisecond)
			addIgnoring(c, "b", 2, pb, n)
			c.Send(core.Input{Kind: core.InputResume, Call: 2})
			c.Send(core.Input{Kind: core.InputWakeUp, Call: 3, Tags: core.SleepWeights})
			c.Send(core.Input{Kind: core.InputIsPaused, Call: 4})
			rt.Sleep(20 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputWakeUp, Call: 5, Tags: core.SleepKVCache})
			rt.Sleep(100 * time.Millisecond)
			addIgnoring(c, "c", 3, pa, n)
			rt.Sleep(100 * time.Millisecond)
			c.Send(core.Input{Kind: core.InputShutdown})
		})
		return l
	}
	both(t, func(t *testing.T, async bool) {
		l := run(t, core.Config{AsyncScheduling: async})
		for _, o := range l.outs {
			require.NoError(t, o.Dead)
		}
		_, slept := l.reply(t, 1)
		require.True(t, slept.Paused)
		require.True(t, slept.Asleep, "the sleep replies once the executor sleeps")
		_, refused := l.reply(t, 2)
		require.True(t, refused.Asleep, "the resume is refused")
		require.True(t, refused.Paused)
		_, partial := l.reply(t, 4)
		require.True(t, partial.Paused, "the weights alone do not resume")
		require.True(t, partial.Asleep)
		wokeAt, woke := l.reply(t, 5)
		require.False(t, woke.Paused)
		require.False(t, woke.Asleep)

		sleep, second := l.event(t, core.EventSleep, 1), l.event(t, core.EventWakeUp, 5)
		require.Equal(t, core.SleepAll, core.SleepTags(l.events[sleep].Held))
		require.Equal(t, core.SleepAll, core.SleepTags(l.events[l.event(t, core.EventResumeRefused, 2)].Held))
		first := l.event(t, core.EventWakeUp, 3)
		require.False(t, l.events[first].Finished, "the first wake-up leaves the core paused")
		require.Equal(t, core.SleepKVCache, core.SleepTags(l.events[first].Held))
		require.True(t, l.events[second].Finished)
		require.Zero(t, l.count(core.EventStep, sleep, second), "nothing steps while the executor sleeps")
		require.Equal(t, []string{"a"}, l.ids(core.EventPreempt, -1, sleep), "the sleep's reset preempted a")

		require.Less(t, l.frames("a")[0].at, wokeAt, "a ran before the sleep")
		require.Equal(t, toks(pa, n), l.tokens("a"))
		require.Greater(t, l.frames("b")[0].at, wokeAt, "b waited for the wake-up")
		require.Equal(t, toks(pb, n), l.tokens("b"))
		require.Equal(t, 8, hitOf(t, l, "c"), "c found what a cached after the wake-up")
		require.Equal(t, toks(pa, n), l.tokens("c"))
	})

	t.Run("sleep-keeps-prefix-cache", func(t *testing.T) {
		l := run(t, core.Config{Faults: rttest.Armed(t, failpoints.CoreSleepKeepsPrefixCache.Name+"=return")})
		sleep := l.event(t, core.EventSleep, 1)
		require.Empty(t, l.ids(core.EventPreempt, -1, sleep), "the bug leaves a frozen, its blocks held")
		want, got := toks(pa, n), l.tokens("a")
		before := 0
		for before < len(got) && got[before] == want[before] {
			before++
		}
		require.Positive(t, before, "a's tokens before the sleep")
		require.Less(t, before, n, "a went on from the released KV")
		require.Equal(t, 8, hitOf(t, l, "c"), "c found a's blocks, cached before the sleep")
		require.NotEqual(t, want, l.tokens("c"), "and attended KV that is gone")
		require.Equal(t, toks(pb, n), l.tokens("b"), "b shares nothing with them")
	})

	t.Run("partial-wake-resumes", func(t *testing.T) {
		l := run(t, core.Config{Faults: rttest.Armed(t, failpoints.CorePartialWakeResumes.Name+"=return")})
		first := l.event(t, core.EventWakeUp, 3)
		require.True(t, l.events[first].Finished, "the bug resumes with the KV cache asleep")
		dead := -1
		for i, e := range l.events {
			if e.Kind == core.EventDead {
				dead = i
			}
		}
		require.Greater(t, dead, first, "the core died after the wake-up")
		require.Contains(t, l.events[dead].Err.Error(), "illegal memory access")
		require.Contains(t, l.events[dead].Err.Error(), "kv_cache asleep")
		require.Equal(t, core.EventStep, l.events[dead-1].Kind, "of the step it ran")
	})
}

// hitOf returns the tokens id found cached when it was admitted.
func hitOf(t *testing.T, l *pauseLog, id string) int {
	t.Helper()
	for _, e := range l.events {
		if e.Kind == core.EventPrefixHit && e.InternalID == id {
			return e.Held
		}
	}
	return 0
}
