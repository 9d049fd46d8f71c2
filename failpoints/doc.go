// Package failpoints is the catalogue of named faults that can be injected
// into the engine, and their activation: on the real runtime through
// github.com/pingcap/failpoint's registry (so GO_FAILPOINTS works), and
// under the simulator through run-scoped sets that keep every fault
// deterministic, so a failing seed still replays.
//
// Engine code calls a Set's methods (Stall, Fires, Value) at each named
// place. A disarmed failpoint costs one atomic load.
//
// The term grammar is pingcap's — terms chained with "->", each an action
// (off, return(VALUE), panic) after any number of modifiers, counts "N*",
// all of which must allow it — and, for run sets, an integer-ratio
// probability "K/N*" drawn from the run's seeded chooser, as a modifier
// too: 1/4*2*return fires at most twice, each time with probability 1/4. Under the simulator pingcap's "N%" (global math/rand), "sleep"
// (wall time) and "pause" (a resume from outside) would break replay: a run
// set refuses them with an error that says what to write instead. Delays
// are values in microseconds (or quoted Go durations, as return("5ms")),
// slept on the runtime's clock: virtual under the simulator. Arming a
// failpoint, in either kind of set, refuses a value its terms do not
// allow: a negative or unreadable delay, or any value for one that only
// fires.
//
// The caller's duties:
//
//  1. In a test on the real runtime, arm a failpoint with Scoped (it is
//     disarmed at cleanup) or Enable/Disable; or set GO_FAILPOINTS with the
//     full names (simrun list -failpoints shows them). This package, not
//     pingcap's init, reads GO_FAILPOINTS at start (internal/fpenv hides
//     it from pingcap's) and arms each spec, another package's too; a spec
//     it cannot take (not NAME=TERMS, a name under the module's path that
//     is not in the catalogue, a value Enable refuses, terms pingcap
//     cannot parse) stops the process with one line on standard error and
//     exit code 2.
//  2. Under the simulator, build a Set per run with NewSet from "name=term"
//     specs and a chooser from the run's seed, and give it to the engine
//     (engine.Config.Faults).
//  3. Treat an armed failpoint as a fault the engine must survive: every
//     accepted request still ends, with its tokens or a clear error. The
//     bugs (Bugs, Point.Bug) are the exception: each plants a bug on
//     purpose, for a checker to catch, and All and Names leave them out.
//
// Usage:
//
//	failpoints.Scoped(t, failpoints.CoreStallBeforeAbort.Name, "return(500)")
//
//	set, err := failpoints.NewSet(sim.NewPCGChooser(seed, sim.StreamFaults),
//		"core/stall-before-abort=2*return(400)", "core/model-panic=1/50*panic")
//	e, _ := engine.New(engine.Config{Runtime: rt, Faults: set})
package failpoints
