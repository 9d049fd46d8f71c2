// Package task is the seam between concurrent code and the thing that runs it.
//
// Code written against Runtime — starting tasks with Go, blocking on a Mutex,
// a Cond or a Queue, sleeping, yielding — runs unchanged on real goroutines
// (Real) and under the deterministic simulator (package sim), which runs one
// task at a time and decides at every scheduling point who runs next.
//
// The current task is implicit: a Runtime acts on whichever task calls it, so
// no task handle is threaded through the code.
//
// The caller's duties:
//
//  1. Never use the go statement, channels, select, time's global clock,
//     runtime.Gosched or sync.Mutex, sync.RWMutex, sync.Cond or sync.Once
//     between tasks; use Runtime.Go, Queue, Mutex, RWMutex, Cond, Once,
//     Runtime.Sleep and the Runtime's clock instead. A buffered channel's
//     backpressure is a Queue made with QueueBound; a channel used as a
//     semaphore is a Semaphore. A select that waits for
//     one of them or gives up when a context is done (case <-ctx.Done())
//     is Queue.GetContext, Queue.PutContext or Semaphore.AcquireContext,
//     which return ctx.Err(), or ErrClosed for a closed queue; any other
//     wait on a context is AfterContext broadcasting the Cond waited on.
//     Use WithTimeout or WithDeadline rather than context's, whose
//     deadlines are on the wall clock, which the simulator's virtual time
//     never reaches.
//  2. Name every scheduling point after what happens there
//     ("frontend.abort.after-state-removed"): names appear in traces and in
//     shrunk schedules.
//  3. Build shared data structures once on Mutex and Cond, as Queue, Group,
//     Semaphore, RWMutex and Once are, so one implementation serves both
//     worlds. Those take their monitor from the Runtime, so they are made
//     with their New functions: unlike the sync types, a zero value is not
//     ready for use, and its methods panic saying so.
//  4. Call a Runtime only from the tasks it started; a foreign goroutine must
//     not call into a simulated Runtime.
//  5. Mark with Reach the situations a race needs ("refresh.raced-close"):
//     under the simulator a run lists the ones it reached, so that passing
//     seeds can show they opened the window; on Real it does nothing, but
//     in a process started with LLMDST_REACHED=FILE (ReachedEnv, which
//     simrun stress sets for every copy), where it logs each name once.
//
// Usage:
//
//	rt := task.Real()
//	q := task.NewQueue[int](rt, task.QueueName("jobs"))
//	g := task.NewGroup(rt, "workers")
//	g.Go("worker", func() {
//		for v, ok := q.Get(); ok; v, ok = q.Get() {
//			fmt.Println(v)
//		}
//	})
//	q.Put(1)
//	q.Close()
//	g.Wait()
package task
