package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/task"
)

// TestAPanicIsReportedWhenTheRunEndsInItsDeferredCall: a task panics (or
// calls runtime.Goexit) and a deferred Close reaches a scheduling point;
// main returns meanwhile. The panic began, so the run fails with it, under
// either switcher, whenever the task got as far as panicking.
func TestAPanicIsReportedWhenTheRunEndsInItsDeferredCall(t *testing.T) {
	for _, goexit := range []bool{false, true} {
		for _, sw := range []Switcher{SwitchPull, SwitchChan} {
			endedUnder := 0
			for seed := uint64(0); seed < 100; seed++ {
				began, closed, endedUnder1 := false, false, false
				res := Run(Options{Seed: seed, switcher: sw}, func(rt task.Runtime) error {
					q := task.NewQueue[int](rt, task.QueueName("results"))
					rt.Go("worker", func() {
						defer func() { q.Close(); closed = true }() // Close takes the queue's lock: a scheduling point
						began = true
						if goexit {
							runtime.Goexit()
						}
						panic("worker failed")
					})
					q.TryGet()
					endedUnder1 = began && !closed
					return nil
				})
				if !began {
					require.NoError(t, res.Err, "seed %d: the worker never ran", seed)
					continue
				}
				if endedUnder1 {
					endedUnder++
				}
				var pe *PanicError
				require.ErrorAs(t, res.Err, &pe, "%s seed %d goexit %v", sw, seed, goexit)
				assert.Equal(t, "worker", pe.Task)
				assert.Equal(t, goexit, pe.Goexit)
				if !goexit {
					assert.Equal(t, "worker failed", pe.Value)
					assert.Contains(t, string(pe.Stack), "drain_test")
				}
			}
			assert.Positive(t, endedUnder, "%s goexit %v: some runs end while the deferred Close waits at its lock", sw, goexit)
		}
	}
}

// TestADeadlockDoesNotHideAPanic: the panicking task's deferred call waits
// for a lock that main holds while main waits forever. The run reports the
// deadlock and the panic that began before it.
func TestADeadlockDoesNotHideAPanic(t *testing.T) {
	for _, sw := range []Switcher{SwitchPull, SwitchChan} {
		res := Run(Options{Seed: 1, switcher: sw}, func(rt task.Runtime) error {
			mu := rt.NewMutex("state")
			never := task.NewQueue[int](rt, task.QueueName("never"))
			mu.Lock()
			rt.Go("worker", func() {
				defer func() { mu.Lock(); mu.Unlock() }()
				panic("worker failed")
			})
			never.Get()
			return nil
		})
		var dl *DeadlockError
		require.ErrorAs(t, res.Err, &dl, sw)
		var pe *PanicError
		require.ErrorAs(t, res.Err, &pe, sw)
		assert.Equal(t, "worker failed", pe.Value)
	}
}

// TestARecoveredPanicIsNotReportedWhenTheRunEndsUnderIt: a task recovers
// its panic and then reaches a scheduling point; the run ends there. The
// task handled its panic, so the run does not fail.
func TestARecoveredPanicIsNotReportedWhenTheRunEndsUnderIt(t *testing.T) {
	for _, sw := range []Switcher{SwitchPull, SwitchChan} {
		endedUnder := 0
		for seed := uint64(0); seed < 100; seed++ {
			recovered, done := false, false
			res := Run(Options{Seed: seed, switcher: sw}, func(rt task.Runtime) error {
				mu := rt.NewMutex("log")
				rt.Go("worker", func() {
					defer func() {
						if r := recover(); r != nil {
							recovered = true
							mu.Lock() // a scheduling point after the recover
							mu.Unlock()
							done = true
						}
					}()
					panic("handled")
				})
				rt.Yield("main")
				if recovered && !done {
					endedUnder++
				}
				return nil
			})
			require.NoError(t, res.Err, "%s seed %d", sw, seed)
		}
		assert.Positive(t, endedUnder, "%s: some runs end while the recovering call waits at its lock", sw)
	}
}

// TestADrainingTaskThatSpinsIsStopped: a deferred call of a panicking task
// spins on Yield, which returns at once after the run ended. It is stopped
// after drainCallsMax calls, and the panic is still reported, by its stack.
func TestADrainingTaskThatSpinsIsStopped(t *testing.T) {
	for _, sw := range []Switcher{SwitchPull, SwitchChan} {
		res := Run(Options{Seed: 1, switcher: sw}, func(rt task.Runtime) error {
			began := false
			rt.Go("worker", func() {
				defer func() {
					for {
						rt.Yield("retry")
					}
				}()
				began = true
				panic("worker failed")
			})
			for !began {
				rt.Yield("main")
			}
			return nil
		})
		var pe *PanicError
		require.ErrorAs(t, res.Err, &pe, sw)
		assert.Equal(t, "worker", pe.Task)
		assert.Equal(t, lostPanic, pe.Value)
		assert.Contains(t, string(pe.Stack), "drain_test")
	}
}

// TestAnUnwoundTasksDeferredCallThatWaitsIsStopped: main returns while a
// producer sleeps; the unwind stops the producer, and its deferred call
// waits for the queue to be drained, polling Len and Yield, which return at
// once now that nothing else runs. It is stopped after drainCallsMax calls,
// the task's other deferred calls still run, Run returns, and its warnings
// say which task spun; a deferred call that waits on a Lock is stopped too.
func TestAnUnwoundTasksDeferredCallThatWaitsIsStopped(t *testing.T) {
	for _, sw := range []Switcher{SwitchPull, SwitchChan} {
		for _, poll := range []string{"len", "lock"} {
			outer := false
			res := Run(Options{Seed: 1, switcher: sw}, func(rt task.Runtime) error {
				q := task.NewQueue[int](rt, task.QueueName("jobs"))
				mu := rt.NewMutex("flag")
				drained := false
				rt.Go("producer", func() {
					defer func() { outer = true }()
					defer func() {
						for {
							if poll == "len" && q.Len() == 0 {
								return
							}
							mu.Lock()
							d := drained
							mu.Unlock()
							if poll == "lock" && d {
								return
							}
							rt.Yield("producer.drain")
						}
					}()
					for i := 0; ; i++ {
						q.Put(i)
						rt.Sleep(time.Millisecond)
					}
				})
				rt.Sleep(5 * time.Millisecond)
				return nil
			})
			require.NoError(t, res.Err, "%s %s", sw, poll)
			assert.True(t, outer, "%s %s: the producer's other deferred call ran", sw, poll)
			require.Len(t, res.Warnings, 1, "%s %s", sw, poll)
			assert.Contains(t, res.Warnings[0], `task 1 "producer", unwound as the run ended, went on calling the runtime in a deferred call`)
		}
	}
}
