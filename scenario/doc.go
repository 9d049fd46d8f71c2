// Package scenario holds named, seedable workloads that drive the engine
// under the simulator: abort-reuse (the founding race report's test,
// ported line by line), swarm (a whole workload drawn from the seed), and
// the smaller cases found since. simrun runs them by name.
//
// A Scenario's Program builds the function sim.Run runs. Every run gets a
// fresh props.Checker wired to the engine's observer and to the simulator's
// trace, and returns an error naming the violated property, or the
// scenario's own check that failed.
//
// The caller's duties:
//
//  1. Look a scenario up with Lookup (or range over All).
//  2. Build the program with Program(Options{...}); run it with sim.Run,
//     with the scenario's DefaultStrategy unless told otherwise.
//  3. After the run, Outcome.Checker holds the checker of the last run, for
//     reports (Checker.Reached: the situations it reached, to set beside
//     the scenario's Targets); Outcome.Err joins what the run and the
//     checker found.
//
// Usage:
//
//	s, _ := scenario.Lookup("abort-reuse")
//	prog, outcome := s.Program(scenario.Options{Legacy: true})
//	st, _ := sim.ParseStrategy(s.DefaultStrategy)
//	res := sim.Run(sim.Options{Seed: 42, Strategy: st}, prog)
//	if err := outcome.Err(res.Err); err != nil {
//		fmt.Println(err)
//	}
package scenario
