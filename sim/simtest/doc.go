// Package simtest runs a program written against task.Runtime under the
// simulator as a Go test: over many seeds and strategies, and, when a seed
// fails, with what a person needs to act on it.
//
//	func TestTellers(t *testing.T) {
//		simtest.Check(t, simtest.Config{Targets: []string{"teller.raced"}}, program)
//	}
//
// Check runs Config.Seeds seeds (1000 by default) on every core, the seeds
// taking turns at the strategies: random, pct:3, chaos, and the starving of
// each task the program starts, since a race that needs one thread to fall
// behind shows only when it is starved. The lowest failing seed fails the
// test, whatever the number of workers, with
//
//   - its error, strategy and decisions;
//   - its schedule shrunk to the fewest preemptions that still fail the
//     same way (sim.Shrink, sim.Signature), saved as
//     testdata/simtest/TEST/seed-N-STRATEGY.schedule;
//   - the end of the shrunk run's trace: who ran, who was withheld, where;
//     all of it drawn as a timeline page (package timeline) and written as
//     a Perfetto trace, under LLMDST_SIM_OUT or the temporary directory;
//   - the command that runs that seed again:
//     LLMDST_SIM_SEED=N LLMDST_SIM_STRATEGY=S go test -run '^TEST$' PKG.
//
// Saved schedules run first in every later Check of the same test, under
// sim.Guided (which follows a schedule as far as changed code allows), so
// an interleaving found once stays a regression test: commit them, as
// rapid's fail files. The first seed and one in a hundred run twice, and
// a run that differs from itself (the wall clock, a map's order, state
// kept between runs) fails as nondeterministic. A sweep that passes says
// which situations (task.Reach) its seeds reached, and fails when one of
// Config.Targets was never reached: passing seeds that never opened a
// race's window prove nothing of it.
//
// Config.Explore turns a sample into a bound: the first seed runs first
// under every schedule within that many departures from each strategy's
// calm one (sim.Explore; pct cannot be walked), and a failing schedule is
// reported, shrunk and saved as a seed's is. For a program of a few tasks,
// every interleaving within two or three departures takes seconds, and
// the log says which walks were complete.
//
// The environment overrides the configuration, for the command a failure
// prints and for longer sweeps in a nightly job: LLMDST_SIM_SEED (one seed,
// no saved schedules), LLMDST_SIM_SEEDS (how many), LLMDST_SIM_FIRST_SEED
// (where they start: set from the date, each night sweeps seeds no night
// before it swept; the default strategies stay those of
// Config.FirstSeed's runs), LLMDST_SIM_STRATEGY
// (one strategy for every seed), LLMDST_SIM_DRAWS (with LLMDST_SIM_SEED: a
// schedule of a walk, as its draws, in place of the seed's own), and
// LLMDST_SIM_OUT (where failing runs are drawn: a CI job's artifacts
// directory).
//
// A seed that never gives the baton back (a loop without a scheduling
// point, a block on a real channel) cannot be stopped: after
// Config.Options.HangAfter, a minute by default, the test binary panics
// with a *sim.HangError naming the seed, its strategy and where the task
// is stuck, for LLMDST_SIM_SEED and LLMDST_SIM_STRATEGY to run it alone; a
// schedule of a walk that hangs is named by its draws too, for
// LLMDST_SIM_DRAWS.
//
// A program that draws a workload draws it from the seed
// (sim.NewPCGChooser(seed, sim.StreamWorkload), the seed from sim.Seed), so
// that a seed is the same workload and the same interleaving every time.
// For workloads drawn and shrunk by rapid, run sim.Run inside rapid.Check
// with props.RapidChooser instead.
package simtest
