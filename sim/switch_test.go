package sim

import (
	"iter"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

// calm never preempts: the task at a point goes on while it can, so the
// baton moves only when a task blocks or exits.
type calm struct{}

func (calm) String() string           { return "calm" }
func (calm) NewPolicy(Chooser) Policy { return calm{} }
func (calm) Pick(*View) Decision      { return Pick(0) }

// pingPong passes n items from main to an echo task and back through two
// queues: two task switches per item.
func pingPong(n int) func(rt task.Runtime) error {
	return func(rt task.Runtime) error {
		there := task.NewQueue[int](rt, task.QueueName("there"), task.QueueCapacity(4))
		back := task.NewQueue[int](rt, task.QueueName("back"), task.QueueCapacity(4))
		rt.Go("echo", func() {
			for v, ok := there.Get(); ok; v, ok = there.Get() {
				back.Put(v)
			}
			back.Close()
		})
		for i := 0; i < n; i++ {
			there.Put(i)
			back.Get()
		}
		there.Close()
		back.Get()
		return nil
	}
}

func TestSwitchersMakeTheSameRuns(t *testing.T) {
	programs := map[string]func(rt task.Runtime) error{
		"ping-pong": pingPong(50),
		"sleepers": func(rt task.Runtime) error {
			g := task.NewGroup(rt, "g")
			for i := 0; i < 4; i++ {
				g.Go("sleeper", func() { rt.Sleep(time.Duration(i) * time.Millisecond); rt.Yield("after") })
			}
			g.Wait()
			return nil
		},
		"panic": func(rt task.Runtime) error {
			rt.Go("parked", func() { rt.Sleep(time.Hour) })
			rt.Go("bomb", func() { panic("boom") })
			rt.Sleep(time.Minute)
			return nil
		},
		"goexit": func(rt task.Runtime) error {
			rt.Go("quitter", func() { runtime.Goexit() })
			rt.Sleep(time.Minute)
			return nil
		},
		"crowd": crowd,
	}
	for name, p := range programs {
		for seed := uint64(0); seed < 30; seed++ {
			a := Run(Options{Seed: seed, Strategy: Chaos(), switcher: SwitchPull}, p)
			b := Run(Options{Seed: seed, Strategy: Chaos(), switcher: SwitchChan}, p)
			assert.Equal(t, a.TraceHash, b.TraceHash, "%s seed %d", name, seed)
			assert.Equal(t, a.Err == nil, b.Err == nil, "%s seed %d", name, seed)
			if name == "crowd" {
				assert.NoError(t, a.Err, "seed %d", seed)
				assert.Greater(t, a.Switches, a.Steps/2, "seed %d: the baton moves at most decisions", seed)
			}
		}
	}
}

// crowd is many tasks that yield, sleep, contend for a lock, pass items
// along a queue, start tasks and end at different times: deep chains of
// hand-offs, tasks that end while others wait in the chain, and a run that
// ends with tasks parked everywhere.
func crowd(rt task.Runtime) error {
	mu := rt.NewMutex("shared")
	q := task.NewQueue[int](rt, task.QueueName("items"))
	shared := 0
	for i := range 12 {
		rt.Go("worker", func() {
			for j := range 3 + i%4 {
				rt.Yield("work")
				mu.Lock()
				shared++
				if j%2 == 0 {
					rt.Yield("holding")
				}
				mu.Unlock()
				if (i+j)%3 == 0 {
					q.Put(i)
				}
				if (i+j)%5 == 0 {
					rt.Go("child", func() { rt.Yield("child"); q.Put(-1) })
				}
				rt.Sleep(time.Duration(i%3) * time.Millisecond)
			}
		})
	}
	rt.Go("reader", func() {
		for {
			if _, ok := q.Get(); !ok {
				return
			}
		}
	})
	rt.Go("parked", func() { rt.Sleep(time.Hour) }) // still parked when main returns
	rt.Sleep(50 * time.Millisecond)
	q.Close()
	rt.Yield("done")
	return nil
}

func TestPingPongSwitchesTwicePerItem(t *testing.T) {
	res := Run(Options{Strategy: calm{}}, pingPong(100))
	require.NoError(t, res.Err)
	assert.InDelta(t, 200, res.Switches, 4)
}

// BenchmarkSwitch is a two-task ping-pong through a Queue under a strategy
// that never preempts; ns/switch is the cost of one baton pass with the
// queue operations around it.
func BenchmarkSwitch(b *testing.B) {
	for _, sw := range []Switcher{SwitchPull, SwitchChan} {
		b.Run(sw.String(), func(b *testing.B) {
			b.ReportAllocs()
			const items = 10_000 // per run: long enough that setup is noise
			var switches int64
			for done := 0; done < b.N; done += items {
				res := Run(Options{Strategy: calm{}, switcher: sw}, pingPong(min(items, b.N-done)))
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				switches += res.Switches
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(switches), "ns/switch")
		})
	}
}

// alternate switches at every decision: the cost of a decision and a baton
// pass with nothing else around it.
type alternate struct{}

func (alternate) String() string           { return "alternate" }
func (alternate) NewPolicy(Chooser) Policy { return alternate{} }
func (alternate) Pick(v *View) Decision {
	if len(v.Candidates) > 1 {
		return Pick(1)
	}
	return Pick(0)
}

// BenchmarkYieldSwitch is two tasks that only yield, under a strategy that
// hands the baton over at every yield. The "-sweep" cases run as a sweep's
// seeds do, without recording the schedule or hashing the trace.
func BenchmarkYieldSwitch(b *testing.B) {
	cases := []struct {
		name string
		opts Options
	}{
		{"pull", Options{switcher: SwitchPull}},
		{"chan", Options{switcher: SwitchChan}},
		{"pull-sweep", Options{switcher: SwitchPull, NoRecord: true, NoHash: true}},
		{"chan-sweep", Options{switcher: SwitchChan, NoRecord: true, NoHash: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			const yields = 10_000
			var switches int64
			for done := 0; done < b.N; done += 2 * yields {
				n := min(yields, (b.N-done+1)/2)
				opts := c.opts
				opts.Strategy = alternate{}
				res := Run(opts, func(rt task.Runtime) error {
					rt.Go("other", func() {
						for i := 0; i < n; i++ {
							rt.Yield("other")
						}
					})
					for i := 0; i < n; i++ {
						rt.Yield("main")
					}
					return nil
				})
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				switches += res.Switches
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(switches), "ns/switch")
		})
	}
}

// BenchmarkRawSwitch is the floor under BenchmarkSwitch: a bare handoff
// between two goroutines, with nothing of the simulator around it.
func BenchmarkRawSwitch(b *testing.B) {
	b.Run("pull", func(b *testing.B) {
		next, stop := iter.Pull(func(yield func(int) bool) {
			for i := 0; yield(i); i++ {
			}
		})
		defer stop()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			next()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/switch")
	})
	b.Run("handoff", func(b *testing.B) {
		// Two coroutines that resume each other, as sched.stop's chain
		// does, each switch behind a Yield called through an interface,
		// and a decision that only picks the other: the simulator's
		// hand-off with nothing else of the simulator.
		h := &handoff{}
		var y yielder = h
		n := b.N / 2
		body := func() {
			for range n {
				y.Yield("point")
			}
		}
		for i := range h.co {
			c := &h.co[i]
			c.next, c.stop = iter.Pull(func(yield func(struct{}) bool) {
				c.yield = yield
				body()
			})
			defer c.stop()
		}
		b.ResetTimer()
		h.co[0].next()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(max(h.switches, 1)), "ns/switch")
	})
	b.Run("chan", func(b *testing.B) {
		ping, pong := make(chan int), make(chan int)
		go func() {
			for v := range ping {
				pong <- v
			}
			close(pong)
		}()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ping <- i
			<-pong
		}
		b.StopTimer()
		close(ping)
		<-pong
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/switch")
	})
}

type yielder interface{ Yield(point string) }

// handoff is BenchmarkRawSwitch/handoff's pair of coroutines.
type handoff struct {
	co [2]struct {
		next    func() (struct{}, bool)
		stop    func()
		yield   func(struct{}) bool
		inChain bool
	}
	cur, switches int
	point         string
}

func (h *handoff) Yield(point string) {
	me := h.cur
	h.point = point
	next := 1 - me // the decision
	h.cur = next
	h.switches++
	if h.co[next].inChain {
		h.co[me].yield(struct{}{}) // down the chain
	} else {
		h.co[me].inChain = true
		h.co[next].next()
		h.co[me].inChain = false
	}
	h.cur = me
}

// twoTasks200 is a 2-task run of about 200 decisions.
func twoTasks200(rt task.Runtime) error {
	g := task.NewGroup(rt, "g")
	g.Go("worker", func() {
		for i := 0; i < 95; i++ {
			rt.Yield("worker")
		}
	})
	for i := 0; i < 95; i++ {
		rt.Yield("main")
	}
	g.Wait()
	return nil
}

// BenchmarkRun200 measures whole runs of a 2-task, ~200-step program under
// Random: setup, decisions, switches and teardown.
func BenchmarkRun200(b *testing.B) {
	for _, sw := range []Switcher{SwitchPull, SwitchChan} {
		b.Run(sw.String(), func(b *testing.B) {
			b.ReportAllocs()
			var steps int64
			for i := 0; i < b.N; i++ {
				res := Run(Options{Seed: uint64(i), switcher: sw}, twoTasks200)
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				steps += res.Steps
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
			b.ReportMetric(float64(steps)/float64(b.N), "steps/run")
		})
	}
}

func TestPoolReusesGoroutinesAndChangesNothing(t *testing.T) {
	pool := NewPool()
	for seed := uint64(0); seed < 50; seed++ {
		plain := Run(Options{Seed: seed, Strategy: Chaos()}, pingPong(20))
		pooled := Run(Options{Seed: seed, Strategy: Chaos(), Pool: pool}, pingPong(20))
		require.NoError(t, pooled.Err)
		assert.Equal(t, plain.TraceHash, pooled.TraceHash, "seed %d", seed)
	}
	assert.NotEmpty(t, pool.idle, "finished tasks' goroutines wait in the pool")
	assert.LessOrEqual(t, len(pool.idle), 2, "two tasks a run: two goroutines, reused run after run")
	// A panicking task's goroutine is clean once the panic is recovered.
	res := Run(Options{Pool: pool}, func(rt task.Runtime) error {
		rt.Go("bomb", func() { panic("boom") })
		rt.Sleep(time.Second)
		return nil
	})
	require.Error(t, res.Err)
	pool.Close()
	assert.Empty(t, pool.idle)
}

// BenchmarkRunPooled is BenchmarkRun200 with the goroutines of finished
// tasks reused, as a sweep's worker runs.
func BenchmarkRunPooled(b *testing.B) {
	pool := NewPool()
	defer pool.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if res := Run(Options{Seed: uint64(i), Pool: pool}, twoTasks200); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}

// BenchmarkRunPooledHangAfter is BenchmarkRunPooled with a hang watch,
// as simtest runs its seeds: the pool's one watch, reset each run.
func BenchmarkRunPooledHangAfter(b *testing.B) {
	pool := NewPool()
	defer pool.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if res := Run(Options{Seed: uint64(i), Pool: pool, HangAfter: time.Minute}, twoTasks200); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}

// BenchmarkDecision is a scheduling point where the task goes on: the cost
// of a decision with no switch (strategy, record, hash).
func BenchmarkDecision(b *testing.B) {
	for _, st := range []Strategy{calm{}, Random(), Chaos()} {
		b.Run(st.String(), func(b *testing.B) {
			res := Run(Options{Strategy: st, StepsMax: -1}, func(rt task.Runtime) error {
				for i := 0; i < b.N; i++ {
					rt.Yield("point")
				}
				return nil
			})
			if res.Err != nil {
				b.Fatal(res.Err)
			}
		})
	}
}
