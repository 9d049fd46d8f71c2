// Package timeline draws a simulated run as a self-contained HTML page:
// one lane per task, a bar for each stretch a task runs, the scheduling
// decisions as the horizontal axis (as sim.WritePerfetto lays them out)
// with virtual time written above it, the strategy's starvation windows
// shaded on their victims' lanes, application events as markers and flow
// arrows from the annotation that starts each flow to the ones that end
// it. The paths a caller marks — a stale frame — are drawn in red; each
// situation the run first reached (task.Reach: a race's window opening) is
// a green marker on the lane of the task that reached it.
//
// The page needs nothing from the network: the drawing is inline SVG,
// styled by inline CSS, with a few lines of inline script to summarise it,
// scroll to the highlighted path and hide routine flows. Every element a
// reader or a test looks for has a stable id or class: the lane of a task
// is a group with id "lane-<task>" and class "lane"; "run", "switch",
// "starve", "event", "frame-flow", "stale" and "wait" name the rest.
//
// A long run stays usable: at most Options.StepsMax decisions are drawn
// (the window ends where the run ended, or holds the first highlighted
// event), events of one task at one decision share a marker, at most
// Options.FlowsMax routine flows are drawn, and the page says what it left
// out.
//
// The caller's duties:
//
//  1. Run with sim.Options.Trace set, so that sim.Result.Trace holds
//     every decision and event.
//  2. Say which annotations end a path to highlight (Options.Highlight);
//     the package knows nothing of engines or frames beyond
//     sim.FlowAnnotation.
//  3. Put what identifies the run — scenario, seed, strategy, the error —
//     in Options.Header and Options.Error.
//
// Usage:
//
//	res := sim.Run(sim.Options{Seed: 1, Trace: true}, prog)
//	err := timeline.Write(f, res.Trace, timeline.Options{
//		Header:    []timeline.Field{{Key: "seed", Value: "1"}},
//		Error:     errString(res.Err),
//		Highlight: func(a sim.Annotation) bool { return strings.Contains(a.String(), "STALE") },
//	})
package timeline
