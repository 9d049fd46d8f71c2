// Package triage measures flaky tests on real processes and separates
// their failure modes.
//
// A flaky test fails some of the time, often for more than one reason: the
// founding report's reproducer failed 64 times in 120 runs on two cores,
// 52 times on a CHECK about a count and 12 times because concurrent copies
// overwrote each other's temporary file. Stress runs a command many times
// at once, round after round — optionally alternating with a second build,
// optionally beside CPU load and with a private TMPDIR per copy — and
// reports the failure rate per round and in total with its 95% Wilson
// interval. It groups failures into modes by Signature: the most
// informative error line of a copy's output, with what varies between runs
// (temporary paths, numbers, durations, addresses) masked by Normalize.
// With two variants, CompareModes tests every mode and the totals with
// Fisher's exact test, so "the fix helps" becomes a p-value, and corrects
// the modes' p-values for their number (Holm's method): among several
// modes, one may differ by chance.
//
// The caller's duties:
//
//  1. Give Stress a command whose exit status means something: 0 is a
//     pass, anything else, a signal or running over Timeout is a failure.
//  2. Make fixtures that must fail deterministically read
//     LLMDST_STRESS_VARIANT, LLMDST_STRESS_ROUND and LLMDST_STRESS_COPY;
//     they are also how a failing copy is reproduced alone.
//  3. Cancel ctx to stop a run early: the running copies are killed with
//     their process groups, and the completed rounds are reported. Copies
//     run in process groups of their own, so Ctrl-C at a terminal reaches
//     only this process: cancel ctx on it (signal.NotifyContext).
//  4. Keep Load at most the number of cores you mean to saturate: the load
//     is goroutines of this process, so at most GOMAXPROCS of them burn at
//     once. Report the conditions (WriteTable prints them) with the rates.
//  5. Decide the exit status of your own program from the report; Stress
//     only measures.
//  6. To learn whether the copies went where a failure would be, call
//     task.Reach in the program at a race's window, and name it in
//     StressConfig.Targets: every copy gets LLMDST_REACHED naming a file of
//     its own, and the report counts, per variant, the copies that reached
//     each situation, how many of them failed and the first. A target no
//     copy reached is a race the run says nothing of. With two variants,
//     CompareSituations tests, situation by situation, whether B's copies
//     reached it as often as A's: a fix that passes because it no longer
//     opens the window shows as "gone in B". As the modes' are, the
//     situations' p-values are corrected for their number.
//
// Usage:
//
//	rep, err := triage.Stress(ctx, triage.StressConfig{
//		Parallel: 40, Rounds: 3, PrivateTmp: true,
//		Cmd:   []string{"./build-a/engine_test"},
//		VsCmd: []string{"./build-b/engine_test"},
//	}, nil)
//	if err != nil { ... }
//	rep.WriteTable(os.Stdout)
//	// variant                   round 1  round 2  round 3  total
//	// A: ./build-a/engine_test  11/40    9/40     11/40    31/120 (25.8% [18.8%, 34.3%])
//	// ...
//	json.NewEncoder(f).Encode(rep.Summary())
//	triage.WriteJUnit(junitFile, "stress", rep.JUnitCases())
//
// The statistics stand alone too:
//
//	fmt.Println(triage.Rate{K: 31, N: 120})     // 31/120 = 25.8% [18.8%, 34.3%]
//	p := triage.FisherExact(31, 89, 52, 68)     // 0.0065
package triage
