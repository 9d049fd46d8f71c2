package task_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// The monitors' promises hold under every schedule within a few
// departures from the calm one, not only under the seeds a sweep draws:
// sim.Explore runs them all.

// exploreDelays bounds each exploration: within it, each program below
// has from about a thousand to some ten thousand schedules.
const exploreDelays = 3

func explore(t *testing.T, program func(rt task.Runtime) error) {
	t.Helper()
	res, err := sim.Explore(context.Background(), sim.ExploreOptions{Delays: exploreDelays}, program)
	require.NoError(t, err)
	if res.Failed != nil {
		t.Fatalf("schedule %d of the exploration failed: %v\ndraws %v", res.Runs, res.Failed.Err, res.Draws)
	}
	assert.True(t, res.Complete)
	t.Logf("%d schedules, up to %d draws", res.Runs, res.Deepest)
}

func TestRWMutexExcludesUnderEverySchedule(t *testing.T) {
	explore(t, func(rt task.Runtime) error {
		rw := task.NewRWMutex(rt, "rw")
		readers, writers := 0, 0
		var bad error
		check := func() {
			if bad == nil && (writers > 1 || (writers == 1 && readers > 0)) {
				bad = fmt.Errorf("%d writers and %d readers hold the lock", writers, readers)
			}
		}
		g := task.NewGroup(rt, "users")
		for i := range 2 {
			g.Go(fmt.Sprintf("writer-%d", i), func() {
				rw.Lock()
				writers++
				check()
				rt.Yield("writing")
				writers--
				rw.Unlock()
			})
			g.Go(fmt.Sprintf("reader-%d", i), func() {
				rw.RLock()
				readers++
				check()
				rt.Yield("reading")
				readers--
				rw.RUnlock()
			})
		}
		g.Wait()
		return bad
	})
}

func TestOnceRunsOnceAndDoReturnsAfterItUnderEverySchedule(t *testing.T) {
	explore(t, func(rt task.Runtime) error {
		o := task.NewOnce(rt, "once")
		runs, done := 0, false
		var bad error
		g := task.NewGroup(rt, "callers")
		for i := range 3 {
			g.Go(fmt.Sprintf("caller-%d", i), func() {
				o.Do(func() {
					runs++
					rt.Yield("in-f")
					done = true
				})
				if !done && bad == nil {
					bad = fmt.Errorf("caller-%d's Do returned before f did", i)
				}
			})
		}
		g.Wait()
		if runs != 1 {
			return fmt.Errorf("f ran %d times", runs)
		}
		return bad
	})
}

func TestSemaphoreNeverOverAdmitsUnderEverySchedule(t *testing.T) {
	explore(t, func(rt task.Runtime) error {
		s := task.NewSemaphore(rt, "slots", 2)
		in, most := 0, 0
		g := task.NewGroup(rt, "workers")
		for i := range 4 {
			g.Go(fmt.Sprintf("worker-%d", i), func() {
				s.Acquire()
				in++
				most = max(most, in)
				rt.Yield("holding")
				in--
				s.Release()
			})
		}
		g.Wait()
		if most > 2 {
			return fmt.Errorf("%d held a permit of 2 at once", most)
		}
		if s.Held() != 0 {
			return fmt.Errorf("%d permits still held", s.Held())
		}
		return nil
	})
}

func TestBoundedQueueDeliversEachItemOnceUnderEverySchedule(t *testing.T) {
	explore(t, func(rt task.Runtime) error {
		q := task.NewQueue[int](rt, task.QueueName("jobs"), task.QueueBound(1))
		got := map[int]int{}
		closed := false
		var bad error
		consumers := task.NewGroup(rt, "consumers")
		for i := range 2 {
			consumers.Go(fmt.Sprintf("consumer-%d", i), func() {
				for v, ok := q.Get(); ok; v, ok = q.Get() {
					got[v]++
				}
				if !closed && bad == nil {
					bad = fmt.Errorf("consumer-%d's Get said the queue was closed before Close", i)
				}
			})
		}
		for v := range 3 {
			if !q.Put(v) {
				return fmt.Errorf("Put(%d) refused on an open queue", v)
			}
		}
		closed = true
		q.Close()
		consumers.Wait()
		if bad != nil {
			return bad
		}
		for v := range 3 {
			if got[v] != 1 {
				return fmt.Errorf("item %d delivered %d times: %v", v, got[v], got)
			}
		}
		return nil
	})
}
