package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/clock"
	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// TestTimerResetAsTimeTimer: a timer's Reset, on the wall clock and on the
// simulator's, moves a pending callback, arms a fired or stopped one again,
// and reports whether it was pending, as time.Timer's Reset does.
func TestTimerResetAsTimeTimer(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		mu := rt.NewMutex("fired")
		var fired []time.Duration
		start := rt.Now()
		note := func() { mu.Lock(); fired = append(fired, rt.Now().Sub(start)); mu.Unlock() }
		count := func() int { mu.Lock(); defer mu.Unlock(); return len(fired) }

		tm := rt.AfterFunc(time.Hour, note)
		r, ok := tm.(clock.Resetter)
		require.True(t, ok, "%T is a clock.Resetter", tm)
		assert.True(t, r.Reset(20*time.Millisecond), "a pending timer: Reset reports true")
		for count() < 1 {
			rt.Sleep(5 * time.Millisecond)
		}
		assert.False(t, r.Reset(10*time.Millisecond), "a fired timer: Reset reports false, and arms it again")
		for count() < 2 {
			rt.Sleep(5 * time.Millisecond)
		}
		require.False(t, r.Reset(time.Hour), "it fired again")
		assert.True(t, tm.Stop(), "Stop after Reset stops the reset timer")
		assert.False(t, r.Reset(10*time.Millisecond), "a stopped timer: Reset reports false, and arms it again")
		for count() < 3 {
			rt.Sleep(5 * time.Millisecond)
		}
		assert.False(t, tm.Stop(), "it fired")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, fired, 3, "no firing was lost or doubled")
		assert.GreaterOrEqual(t, fired[0], 20*time.Millisecond, "the first firing came after the Reset's delay, not the hour")
		assert.Less(t, fired[0], time.Hour)
	})
}

// TestTimerResetOrdersAfterEarlierTimers: under the simulator a reset timer
// due at the same instant as others fires after those made before the
// Reset, as timers fire in deadline then creation order.
func TestTimerResetOrdersAfterEarlierTimers(t *testing.T) {
	var order []string
	res := sim.Run(sim.Options{Seed: 3}, func(rt task.Runtime) error {
		mu := rt.NewMutex("order")
		add := func(s string) func() { return func() { mu.Lock(); order = append(order, s); mu.Unlock() } }
		first := rt.AfterFunc(time.Millisecond, add("reset"))
		rt.AfterFunc(2*time.Millisecond, add("b"))
		first.(clock.Resetter).Reset(2 * time.Millisecond)
		rt.Sleep(10 * time.Millisecond)
		return nil
	})
	require.NoError(t, res.Err)
	assert.Equal(t, []string{"b", "reset"}, order)
}
