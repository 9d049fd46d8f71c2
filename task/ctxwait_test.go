package task_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/rttest"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/task"
)

// ctxStrategies are the strategies the properties of the context-aware
// waits run under, each for ctxSeeds seeds.
var ctxStrategies = []sim.Strategy{sim.Random(), sim.PCT(3), sim.Chaos()}

const ctxSeeds = 40

// TestGetContextTakesAnItemPutWhileItWaits: an item that comes before the
// context is done is returned, with or without a context that can be done.
func TestGetContextTakesAnItemPutWhileItWaits(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for i, ctx := range []context.Context{ctx, context.Background()} {
			q := task.NewQueue[int](rt, task.QueueName("q"))
			g := task.NewGroup(rt, "g")
			g.Go("producer", func() {
				rt.Sleep(time.Millisecond)
				q.Put(i + 7)
			})
			v, err := q.GetContext(ctx)
			require.NoError(t, err)
			assert.Equal(t, i+7, v)
			g.Wait()
		}
	})
}

// TestGetContextGivesUpWhenTheContextIsDone: a context done while
// GetContext waits ends it with ctx.Err() (not the cause), having taken
// nothing: the item put afterwards is still there.
func TestGetContextGivesUpWhenTheContextIsDone(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		q := task.NewQueue[int](rt, task.QueueName("q"))
		ctx, cancel := context.WithCancelCause(context.Background())
		g := task.NewGroup(rt, "g")
		g.Go("canceller", func() {
			rt.Sleep(time.Millisecond)
			cancel(errCause)
		})
		v, err := q.GetContext(ctx)
		assert.Equal(t, context.Canceled, err)
		assert.Equal(t, errCause, context.Cause(ctx))
		assert.Zero(t, v)
		g.Wait()
		q.Put(1)
		assert.Equal(t, 1, q.Len())
		v, ok := q.TryGet()
		assert.True(t, ok)
		assert.Equal(t, 1, v)
	})
}

// TestContextCallsWithAContextAlreadyDone: a done context wins over an
// item, room or a permit that is there: the call returns ctx.Err() and
// changes nothing.
func TestContextCallsWithAContextAlreadyDone(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		expired, cancel2 := task.WithTimeout(rt, context.Background(), 0)
		defer cancel2()
		for _, c := range []struct {
			ctx context.Context
			err error
		}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
			q := task.NewQueue[int](rt, task.QueueName("q"))
			q.Put(1)
			_, err := q.GetContext(c.ctx)
			assert.Equal(t, c.err, err, "GetContext")
			assert.Equal(t, 1, q.Len(), "GetContext with a done context took the item")
			assert.Equal(t, c.err, q.PutContext(c.ctx, 2), "PutContext, unbounded")
			bq := task.NewQueue[int](rt, task.QueueName("bq"), task.QueueBound(2))
			assert.Equal(t, c.err, bq.PutContext(c.ctx, 2), "PutContext, bounded with room")
			assert.Equal(t, 1, q.Len(), "PutContext with a done context queued its item")
			assert.Zero(t, bq.Len(), "PutContext with a done context queued its item")
			q.Close()
			_, err = q.GetContext(c.ctx)
			assert.Equal(t, c.err, err, "GetContext of a closed queue")
			assert.Equal(t, c.err, q.PutContext(c.ctx, 3), "PutContext to a closed queue")

			s := task.NewSemaphore(rt, "slots", 1)
			assert.Equal(t, c.err, s.AcquireContext(c.ctx))
			assert.Zero(t, s.Held(), "AcquireContext with a done context took a permit")
		}
	})
}

// TestContextCallsOfAClosedQueue: GetContext returns what is queued, then
// ErrClosed; PutContext is refused with ErrClosed; and Close ends both
// while they wait.
func TestContextCallsOfAClosedQueue(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		q := task.NewQueue[int](rt, task.QueueName("q"), task.QueueBound(2))
		require.NoError(t, q.PutContext(ctx, 1))
		require.NoError(t, q.PutContext(context.Background(), 2))
		g := task.NewGroup(rt, "g")
		g.Go("putter", func() {
			assert.Equal(t, task.ErrClosed, q.PutContext(ctx, 3), "PutContext waiting for room across Close")
		})
		rt.Sleep(time.Millisecond)
		q.Close()
		g.Wait()
		assert.Equal(t, task.ErrClosed, q.PutContext(ctx, 4))
		for _, want := range []int{1, 2} {
			v, err := q.GetContext(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, v)
		}
		for _, ctx := range []context.Context{ctx, context.Background()} {
			v, err := q.GetContext(ctx)
			assert.Equal(t, task.ErrClosed, err)
			assert.Zero(t, v)
		}

		empty := task.NewQueue[int](rt, task.QueueName("empty"))
		for range 2 {
			g.Go("getter", func() {
				_, err := empty.GetContext(ctx)
				assert.Equal(t, task.ErrClosed, err, "GetContext waiting for an item across Close")
			})
		}
		rt.Sleep(time.Millisecond)
		empty.Close()
		g.Wait()
	})
}

// TestPutContextWaitsForRoom: on a full bounded queue PutContext waits
// until a Get makes room, or gives up when its context is done, leaving the
// queue as it was; on an unbounded queue it never waits.
func TestPutContextWaitsForRoom(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		q := task.NewQueue[int](rt, task.QueueName("q"), task.QueueBound(1))
		q.Put(1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		results := task.NewQueue[error](rt, task.QueueName("results"))
		g := task.NewGroup(rt, "g")
		g.Go("putter", func() { results.Put(q.PutContext(ctx, 2)) })
		rt.Sleep(time.Millisecond)
		_, early := results.TryGet()
		require.False(t, early, "PutContext returned while the queue was full")
		v, _ := q.Get()
		assert.Equal(t, 1, v)
		err, _ := results.Get()
		require.NoError(t, err)
		g.Wait()

		ctx2, cancel2 := context.WithCancel(context.Background())
		g.Go("canceller", func() {
			rt.Sleep(time.Millisecond)
			cancel2()
		})
		assert.Equal(t, context.Canceled, q.PutContext(ctx2, 3))
		g.Wait()
		assert.Equal(t, 1, q.Len())
		v, _ = q.TryGet()
		assert.Equal(t, 2, v, "the refused item is not queued")

		u := task.NewQueue[int](rt, task.QueueName("u"))
		for i := range 100 {
			require.NoError(t, u.PutContext(ctx, i))
		}
		assert.Equal(t, 100, u.Len())
	})
}

// TestAcquireContextWaitsForARelease: AcquireContext with every permit
// held waits for a Release, or gives up when its context is done, holding
// nothing then.
func TestAcquireContextWaitsForARelease(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		s := task.NewSemaphore(rt, "slots", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		require.NoError(t, s.AcquireContext(ctx))
		results := task.NewQueue[error](rt, task.QueueName("results"))
		g := task.NewGroup(rt, "g")
		g.Go("waiter", func() { results.Put(s.AcquireContext(ctx)) })
		rt.Sleep(time.Millisecond)
		_, early := results.TryGet()
		require.False(t, early, "AcquireContext returned while the only permit was held")
		s.Release()
		err, _ := results.Get()
		require.NoError(t, err)
		g.Wait()
		assert.Equal(t, 1, s.Held())

		ctx2, cancel2 := context.WithCancel(context.Background())
		g.Go("canceller", func() {
			rt.Sleep(time.Millisecond)
			cancel2()
		})
		assert.Equal(t, context.Canceled, s.AcquireContext(ctx2))
		g.Wait()
		assert.Equal(t, 1, s.Held(), "a cancelled AcquireContext took a permit")
		s.Release()
		assert.Zero(t, s.Held())
	})
}

// waitTimeouts are the three waits, each on a full or empty resource,
// ended by a deadline.
var waitTimeouts = map[string]func(rt task.Runtime, ctx context.Context) error{
	"GetContext": func(rt task.Runtime, ctx context.Context) error {
		_, err := task.NewQueue[int](rt).GetContext(ctx)
		return err
	},
	"PutContext": func(rt task.Runtime, ctx context.Context) error {
		q := task.NewQueue[int](rt, task.QueueBound(1))
		q.Put(0)
		return q.PutContext(ctx, 1)
	},
	"AcquireContext": func(rt task.Runtime, ctx context.Context) error {
		s := task.NewSemaphore(rt, "slots", 1)
		s.Acquire()
		return s.AcquireContext(ctx)
	},
}

// TestContextWaitsEndAtTheDeadline: a WithTimeout context ends each wait
// with context.DeadlineExceeded on both runtimes, and under the simulator
// at exactly the virtual deadline.
func TestContextWaitsEndAtTheDeadline(t *testing.T) {
	rttest.Both(t, func(t *testing.T, rt task.Runtime) {
		for name, wait := range waitTimeouts {
			ctx, cancel := task.WithTimeout(rt, context.Background(), time.Millisecond)
			assert.Equal(t, context.DeadlineExceeded, wait(rt, ctx), name)
			cancel()
		}
	})
	for _, st := range []sim.Strategy{sim.Random(), sim.PCT(3)} {
		for seed := uint64(1); seed <= 5; seed++ {
			for name, wait := range waitTimeouts {
				res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error {
					ctx, cancel := task.WithTimeout(rt, context.Background(), time.Second)
					defer cancel()
					assert.Equal(t, context.DeadlineExceeded, wait(rt, ctx), name)
					assert.Equal(t, sim.Epoch.Add(time.Second), rt.Now(), "%s returned at the wrong time, %s seed %d", name, st, seed)
					return nil
				})
				require.NoError(t, res.Err, "%s, %s seed %d", name, st, seed)
				assert.Equal(t, time.Second, res.Elapsed, "%s, %s seed %d", name, st, seed)
			}
		}
	}
}

// passOnProgram is the window in which a waiter that gives up holds the
// one wake-up meant for another: first and second wait (in that order),
// the first with a context; release makes what they wait for available
// once (a Put, a Get or a Release, each of which wakes one waiter) and at
// once main cancels the first's context. Whether the first was woken and
// then gave up, or gave up first, the second, which waits with a plain
// call (plain) or a context never done, must get what is available; if
// the first swallowed the wake-up, the second waits forever.
func passOnProgram(t *testing.T, rt task.Runtime, plain bool,
	first func(ctx context.Context) error, second func(ctx context.Context, plain bool) error, release func(),
) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, cancelLive := context.WithCancel(context.Background())
	defer cancelLive()
	g := task.NewGroup(rt, "waiters")
	g.Go("first", func() { assert.Equal(t, context.Canceled, first(ctx), "the first waiter") })
	rt.Sleep(time.Millisecond) // the first waits before the second
	g.Go("second", func() { assert.NoError(t, second(live, plain), "the second waiter") })
	rt.Sleep(time.Millisecond)
	if task.IsReal(rt) {
		// Nothing keeps the first from taking what release makes
		// available before the cancel: the window is the simulator's.
		cancel()
		release()
	} else {
		release()
		cancel() // no scheduling point between the two
	}
	g.Wait()
	return nil
}

// TestContextWaitersPassOnAWakeupTheyTook: the window of passOnProgram,
// for each of the three waits, over many schedules. A waiter that gives
// up without passing on the wake-up it took strands the second: a
// *sim.DeadlockError.
func TestContextWaitersPassOnAWakeupTheyTook(t *testing.T) {
	cases := map[string]func(t *testing.T, rt task.Runtime, plain bool) error{
		"GetContext": func(t *testing.T, rt task.Runtime, plain bool) error {
			q := task.NewQueue[int](rt, task.QueueName("q"))
			return passOnProgram(t, rt, plain,
				func(ctx context.Context) error { _, err := q.GetContext(ctx); return err },
				func(ctx context.Context, plain bool) error {
					if plain {
						if _, ok := q.Get(); !ok {
							return task.ErrClosed
						}
						return nil
					}
					_, err := q.GetContext(ctx)
					return err
				},
				func() { q.Put(1) })
		},
		"PutContext": func(t *testing.T, rt task.Runtime, plain bool) error {
			q := task.NewQueue[int](rt, task.QueueName("q"), task.QueueBound(1))
			q.Put(0)
			return passOnProgram(t, rt, plain,
				func(ctx context.Context) error { return q.PutContext(ctx, 1) },
				func(ctx context.Context, plain bool) error {
					if plain {
						if !q.Put(2) {
							return task.ErrClosed
						}
						return nil
					}
					return q.PutContext(ctx, 2)
				},
				func() { q.Get() })
		},
		"AcquireContext": func(t *testing.T, rt task.Runtime, plain bool) error {
			s := task.NewSemaphore(rt, "slots", 1)
			s.Acquire()
			return passOnProgram(t, rt, plain,
				func(ctx context.Context) error { return s.AcquireContext(ctx) },
				func(ctx context.Context, plain bool) error {
					if plain {
						s.Acquire()
						return nil
					}
					return s.AcquireContext(ctx)
				},
				s.Release)
		},
	}
	for name, program := range cases {
		for _, plain := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/plain=%v", name, plain), func(t *testing.T) {
				// The simulator first: a stranded waiter it reports as a
				// deadlock hangs the real runtime.
				for _, st := range ctxStrategies {
					for seed := uint64(1); seed <= ctxSeeds; seed++ {
						res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error { return program(t, rt, plain) })
						require.NoError(t, res.Err, "sim %s seed %d", st, seed)
					}
				}
				require.NoError(t, program(t, task.Real(), plain), "real runtime")
			})
		}
	}
}

// ctxErr reports whether err is what a context-aware wait returns when its
// context is done.
func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// inFlight holds the cancel functions of the waits in flight, in the
// order they began, so that a task can cancel the one most likely to hold
// a wake-up right after it gave one: the oldest, which Signal wakes first.
type inFlight struct {
	mu      task.Mutex
	next    int
	cancels map[int]context.CancelFunc
}

func newInFlight(rt task.Runtime, name string) *inFlight {
	return &inFlight{mu: rt.NewMutex(name), cancels: map[int]context.CancelFunc{}}
}

// track returns a context derived from ctx that cancelOne or cancelAll
// may cancel until done is called.
func (f *inFlight) track(ctx context.Context) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	id := f.next
	f.next++
	f.cancels[id] = cancel
	f.mu.Unlock()
	return ctx, func() {
		f.mu.Lock()
		delete(f.cancels, id)
		f.mu.Unlock()
		cancel()
	}
}

// cancelOne cancels the oldest wait in flight, or now and then another.
func (f *inFlight) cancelOne(rng *rand.Rand) {
	f.mu.Lock()
	ids := slices.Sorted(maps.Keys(f.cancels))
	if len(ids) > 0 {
		i := 0
		if rng.IntN(4) == 0 {
			i = rng.IntN(len(ids))
		}
		f.cancels[ids[i]]()
	}
	f.mu.Unlock()
}

func (f *inFlight) cancelAll() {
	f.mu.Lock()
	for _, cancel := range f.cancels {
		cancel()
	}
	f.mu.Unlock()
}

// impatientCtx is the context of a task that waits once and gives up:
// every third one (by i) has a short deadline, the others can only be
// cancelled, through f.
func impatientCtx(rt task.Runtime, f *inFlight, i int, rng *rand.Rand) (_ context.Context, done func()) {
	if i%3 == 0 {
		return task.WithTimeout(rt, context.Background(), time.Duration(1+rng.IntN(6))*time.Microsecond)
	}
	return f.track(context.Background())
}

// episodes is how many fresh queues or semaphores one run of a give-ups
// property goes through. A wake-up swallowed by a task that gave up is
// rescued by whatever wakes the waiters next (another Put, Get or
// Release, or another context done), so it shows as a deadlock when it
// comes last, and it can come last once in each episode.
const episodes = 4

// queueGiveUps is the property of GetContext and PutContext with tasks
// that give up, over a few episodes: see queueEpisode.
func queueGiveUps(rt task.Runtime, seed uint64, bound int) error {
	for e := range episodes {
		if err := queueEpisode(rt, seed*episodes+uint64(e), bound); err != nil {
			return fmt.Errorf("episode %d: %w", e, err)
		}
	}
	return nil
}

// queueEpisode: main puts a few items and, right after each, has the
// oldest waiting impatient consumer give up; a consumer takes items until
// the queue is closed and drained and, right after each, has the oldest
// waiting impatient producer give up; impatient consumers and producers
// wait once each, with contexts that expire or that are cancelled so;
// patient producers put with contexts never done. Every item whose put
// succeeded is taken exactly once, no refused item is taken, and the
// queue is closed only once every accepted item is taken, so that an
// item left behind while a consumer waits, or room while a producer
// waits, is a deadlock, not rescued by Close.
func queueEpisode(rt task.Runtime, seed uint64, bound int) error {
	const (
		items      = 3 // main's
		impatients = 3 // of each kind
		patients   = 2 // producers, besides main
	)
	opts := []task.QueueOption{task.QueueName("jobs")}
	if bound > 0 {
		opts = append(opts, task.QueueBound(bound))
	}
	q := task.NewQueue[int](rt, opts...)
	live, cancelLive := context.WithCancel(context.Background())
	defer cancelLive()
	rng := rand.New(rand.NewPCG(seed, 0))

	mu := rt.NewMutex("tally")
	tallied := rt.NewCond(mu)
	accepted := map[int]bool{}
	refused := map[int]bool{}
	taken := map[int]int{}
	var failure error
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		tallied.Broadcast()
		mu.Unlock()
	}
	put := func(v int, ctx context.Context, plain bool) error {
		var err error
		if plain {
			if !q.Put(v) {
				err = task.ErrClosed
			}
		} else {
			err = q.PutContext(ctx, v)
		}
		mu.Lock()
		switch {
		case err == nil:
			accepted[v] = true
		case ctxErr(err):
			refused[v] = true
		}
		mu.Unlock()
		return err
	}
	take := func(v int) {
		mu.Lock()
		taken[v]++
		tallied.Broadcast()
		mu.Unlock()
	}
	waitingConsumers := newInFlight(rt, "consumers-in-flight")
	waitingProducers := newInFlight(rt, "producers-in-flight")

	consumers := task.NewGroup(rt, "consumers")
	consumers.Go("consumer", func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		for n := 0; ; n++ {
			var v int
			var err error
			if n%3 == 2 {
				var ok bool
				if v, ok = q.Get(); !ok {
					err = task.ErrClosed
				}
			} else {
				v, err = q.GetContext(live)
			}
			if errors.Is(err, task.ErrClosed) {
				return
			}
			if err != nil {
				fail(fmt.Errorf("the patient consumer: %v", err))
				return
			}
			take(v)
			waitingProducers.cancelOne(rng) // right as room is made
		}
	})
	for i := range impatients {
		consumers.Go("impatient-consumer", func() {
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			ctx, done := impatientCtx(rt, waitingConsumers, i, rng)
			v, err := q.GetContext(ctx)
			done()
			switch {
			case err == nil:
				take(v)
			case !ctxErr(err) && !errors.Is(err, task.ErrClosed): // it may come after Close
				fail(fmt.Errorf("an impatient consumer: %v", err))
			}
		})
	}
	producers := task.NewGroup(rt, "producers")
	for i := range patients + impatients {
		producers.Go("producer", func() {
			rng := rand.New(rand.NewPCG(seed, uint64(200+i)))
			rt.Sleep(time.Duration(rng.IntN(3)) * time.Microsecond)
			v := 100 + i
			if i < patients {
				if err := put(v, live, i == 0); err != nil {
					fail(fmt.Errorf("a patient producer's put of %d: %v", v, err))
				}
				return
			}
			ctx, done := impatientCtx(rt, waitingProducers, i, rng)
			err := put(v, ctx, false)
			done()
			if err != nil && !ctxErr(err) {
				fail(fmt.Errorf("an impatient producer's PutContext of %d: %v", v, err))
			}
		})
	}
	rt.Sleep(time.Duration(rng.IntN(3)) * time.Microsecond)
	for v := range items {
		if err := put(v, live, v == 1); err != nil {
			fail(fmt.Errorf("main's put of %d: %v", v, err))
		}
		waitingConsumers.cancelOne(rng) // right as an item is put
	}

	producers.Wait()
	mu.Lock()
	for len(taken) < len(accepted) && failure == nil {
		tallied.Wait("tally.wait")
	}
	mu.Unlock()
	waitingConsumers.cancelAll()
	q.Close()
	consumers.Wait()

	if failure != nil {
		return failure
	}
	if n := q.Len(); n != 0 {
		return fmt.Errorf("%d items left in the queue", n)
	}
	for v, n := range taken {
		if n != 1 {
			return fmt.Errorf("item %d taken %d times", v, n)
		}
		if !accepted[v] {
			return fmt.Errorf("item %d taken, but its PutContext was refused (refused: %v)", v, refused[v])
		}
	}
	for v := range accepted {
		if taken[v] == 0 {
			return fmt.Errorf("item %d accepted but never taken", v)
		}
	}
	if want := items + patients + impatients; len(accepted)+len(refused) != want {
		return fmt.Errorf("%d accepted and %d refused of %d puts", len(accepted), len(refused), want)
	}
	return nil
}

// TestQueueContextGiveUpsLoseNothing runs queueGiveUps over many seeds and
// strategies, unbounded and bounded: nothing lost, nothing duplicated, no
// one stranded.
func TestQueueContextGiveUpsLoseNothing(t *testing.T) {
	for _, bound := range []int{0, 1, 3} {
		for _, st := range ctxStrategies {
			for seed := uint64(1); seed <= ctxSeeds; seed++ {
				res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error { return queueGiveUps(rt, seed, bound) })
				require.NoError(t, res.Err, "sim %s seed %d, bound %d", st, seed, bound)
			}
		}
		require.NoError(t, queueGiveUps(task.Real(), 1, bound), "real runtime, bound %d", bound)
	}
}

// semaphoreGiveUps is the property of AcquireContext with acquirers that
// give up, over a few episodes: see semaphoreEpisode.
func semaphoreGiveUps(rt task.Runtime, seed uint64, permits int) error {
	for e := range episodes {
		if err := semaphoreEpisode(rt, seed*episodes+uint64(e), permits); err != nil {
			return fmt.Errorf("episode %d: %w", e, err)
		}
	}
	return nil
}

// semaphoreEpisode: main holds every permit while patient workers and
// impatient acquirers line up, then releases them; whoever releases a
// permit has the oldest waiting impatient acquirer give up right after.
// Impatient acquirers wait once, with a context that expires or is
// cancelled so; patient workers wait with a plain Acquire or a context
// never done. The semaphore never admits more than n at once, every
// permit comes back, and no acquirer waits while a permit is free (the
// run would end in a deadlock).
func semaphoreEpisode(rt task.Runtime, seed uint64, permits int) error {
	const (
		workers    = 2
		impatients = 3
	)
	s := task.NewSemaphore(rt, "slots", permits)
	for range permits {
		s.Acquire()
	}
	live, cancelLive := context.WithCancel(context.Background())
	defer cancelLive()
	rng := rand.New(rand.NewPCG(seed, 0))
	mu := rt.NewMutex("tally")
	inside, most := 0, 0
	var failure error
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		mu.Unlock()
	}
	waiting := newInFlight(rt, "in-flight")
	// hold runs the critical section of an acquirer that got a permit.
	hold := func(rng *rand.Rand) {
		mu.Lock()
		inside++
		most = max(most, inside)
		mu.Unlock()
		rt.Sleep(time.Duration(rng.IntN(2)) * time.Microsecond)
		mu.Lock()
		inside--
		mu.Unlock()
		s.Release()
		waiting.cancelOne(rng) // right as a permit is released
	}

	patient := task.NewGroup(rt, "workers")
	for w := range workers {
		patient.Go("worker", func() {
			rng := rand.New(rand.NewPCG(seed, uint64(1+w)))
			rt.Sleep(time.Duration(rng.IntN(2)) * time.Microsecond)
			if w == 0 {
				s.Acquire()
			} else if err := s.AcquireContext(live); err != nil {
				fail(fmt.Errorf("a worker's AcquireContext: %v", err))
				return
			}
			hold(rng)
		})
	}
	impatient := task.NewGroup(rt, "impatients")
	for i := range impatients {
		impatient.Go("impatient", func() {
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			rt.Sleep(time.Duration(rng.IntN(2)) * time.Microsecond)
			ctx, done := impatientCtx(rt, waiting, i, rng)
			err := s.AcquireContext(ctx)
			done()
			if err != nil {
				if !ctxErr(err) {
					fail(fmt.Errorf("an impatient AcquireContext: %v", err))
				}
				return
			}
			hold(rng)
		})
	}
	rt.Sleep(time.Duration(1+rng.IntN(2)) * time.Microsecond)
	for range permits {
		s.Release()
		waiting.cancelOne(rng)
	}
	patient.Wait()
	waiting.cancelAll()
	impatient.Wait()
	if failure != nil {
		return failure
	}
	if most > permits {
		return fmt.Errorf("%d tasks held a permit at once, %d permits", most, permits)
	}
	if h := s.Held(); h != 0 {
		return fmt.Errorf("%d permits still held", h)
	}
	for range permits {
		if !s.TryAcquire() {
			return fmt.Errorf("a permit was lost")
		}
	}
	return nil
}

// TestSemaphoreContextGiveUpsNeverOverAdmit runs semaphoreGiveUps over many
// seeds and strategies.
func TestSemaphoreContextGiveUpsNeverOverAdmit(t *testing.T) {
	for _, permits := range []int{1, 2} {
		for _, st := range ctxStrategies {
			for seed := uint64(1); seed <= ctxSeeds; seed++ {
				res := sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error { return semaphoreGiveUps(rt, seed, permits) })
				require.NoError(t, res.Err, "sim %s seed %d, %d permits", st, seed, permits)
			}
		}
		require.NoError(t, semaphoreGiveUps(task.Real(), 1, permits), "real runtime, %d permits", permits)
	}
}

// TestContextWaitsReplay: the same seed gives the same run, cancellations
// and deadlines included.
func TestContextWaitsReplay(t *testing.T) {
	programs := map[string]func(rt task.Runtime, seed uint64) error{
		"queue":     func(rt task.Runtime, seed uint64) error { return queueGiveUps(rt, seed, 1) },
		"semaphore": func(rt task.Runtime, seed uint64) error { return semaphoreGiveUps(rt, seed, 1) },
	}
	for name, program := range programs {
		for _, st := range ctxStrategies {
			for seed := uint64(1); seed <= 5; seed++ {
				run := func() sim.Result {
					return sim.Run(sim.Options{Seed: seed, Strategy: st}, func(rt task.Runtime) error { return program(rt, seed) })
				}
				a, b := run(), run()
				require.NoError(t, a.Err, "%s, sim %s seed %d", name, st, seed)
				assert.Equal(t, a.TraceHash, b.TraceHash, "%s, sim %s seed %d", name, st, seed)
				assert.Equal(t, a.Steps, b.Steps, "%s, sim %s seed %d", name, st, seed)
				replay := sim.Run(sim.Options{Strategy: sim.Replay(a.Schedule)}, func(rt task.Runtime) error { return program(rt, seed) })
				require.NoError(t, replay.Err, "%s, replay of sim %s seed %d", name, st, seed)
				assert.Equal(t, a.TraceHash, replay.TraceHash, "%s, replay of sim %s seed %d", name, st, seed)
			}
		}
	}
}
