package task

// Reacher is implemented by runtimes that record the situations code
// reaches: the simulator lists them in its run's result.
type Reacher interface {
	Reach(name string)
}

// Reach says that the calling task reached a named situation: the window a
// race needs, a rare branch, a recovery path. A run that passes says
// nothing of a race whose window it never opened; under the simulator the
// run's result lists the situations it reached (sim.Result.Reached), so a
// sweep of passing seeds can show that it went where a failure would be —
// FoundationDB's code probes, Antithesis's "sometimes" assertions. On the
// real runtime it does nothing. It is not a scheduling point, and it does
// not change the run: the trace hash is the same with or without it.
func Reach(rt Runtime, name string) {
	// Small enough to be inlined: on the real runtime, production's case,
	// a probe is one comparison.
	if _, real := rt.(realRuntime); !real {
		reach(rt, name)
	}
}

// reach is Reach's simulator side, kept out of line so that Reach stays
// small.
//
//go:noinline
func reach(rt Runtime, name string) {
	if r, ok := rt.(Reacher); ok {
		r.Reach(name)
	}
}
