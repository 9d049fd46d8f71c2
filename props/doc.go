// Package props holds the invariants of the engine and the checkers that
// verify them over the engine's event stream. The same Checker serves the
// scenarios, the rapid property tests and simrun.
//
// The invariant the project exists for: a request incarnation receives only
// tokens that the core generated for that incarnation, and a reused id's new
// request runs to its own normal finish — whatever the interleaving,
// whatever the faults. Every frame carries the incarnation that produced it,
// so a stale token is caught by provenance when it is delivered, not only by
// a wrong count at the end.
//
// The caller's duties:
//
//  1. Make a Checker with NewChecker and pass its Observe as the engine's
//     Config.Observer (or call Observe from an observer of your own).
//  2. Tell it which requests the caller itself aborted or cancelled
//     (Observe sees Abort events; Cancel and context cancellation look the
//     same), and, once the engine is closed, call CheckKV with it (its KV
//     blocks, which no event shows, must all be accounted for) and Finish.
//  3. Report Err (or Finish's error): a *Violation naming the property.
//
// The checker also records the situations a run reached (Situation,
// Checker.Reached): the windows the properties are about — a frame of an
// ended incarnation reaching the output processor while a newer
// incarnation of its id is live, an abort meant for an ended incarnation
// reaching the core while a newer one is there — and the engine's rare
// paths. A passing run says nothing of a race whose window it never
// opened: simrun counts the seeds that reached each situation, so that a
// clean sweep shows where it went. Every failure of the legacy engine's
// id routing is a run that reached one of its reuse windows; the fixed
// engine reaches them as often and passes. Checker.Observer follows an
// engine on either runtime, handing the situations on to task.Reach: the
// engine's own tests give it every engine they make, on goroutines too,
// and a process started with LLMDST_REACHED logs what it reached for
// simrun stress to count.
//
// Two choosers put a schedule in rapid's hands. RapidChooser draws as the
// program asks, so rapid shrinks the schedule along with the workload.
// RapidSchedule draws a whole schedule before the run, so a fail file
// rapid wrote for one program replays validly against another: the legacy
// engine's counterexample in testdata/rapid is replayed against the fixed
// engine by every go test (TestCommittedCounterexamples keeps it honest).
//
// Usage:
//
//	c := props.NewChecker(core.ToyModel{})
//	c.SetModelLen(core.DefaultMaxModelLen) // the engine's, for exact length finishes
//	e, _ := engine.New(engine.Config{Runtime: rt, Observer: c.Observe})
//	// ... drive the engine ...
//	e.Close()
//	c.CheckKV(e)
//	if err := c.Finish(); err != nil {
//		return err
//	}
package props
