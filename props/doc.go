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
//     same), and call Finish once the engine is closed.
//  3. Report Err (or Finish's error): a *Violation naming the property.
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
//	if err := c.Finish(); err != nil {
//		return err
//	}
package props
