// Command simrun runs llmdst's scenarios under the deterministic simulator
// and triages flaky tests: run one seed, sweep many, replay a recorded
// failure, shrink it, compare two builds, stress real processes.
//
// Usage:
//
//	simrun list [-failpoints]
//	simrun run     -scenario abort-reuse -seed 42 [-strategy S] [-legacy] [-story] [-trace F.json] [-html F.html] [-json]
//	simrun sweep   -scenario abort-reuse -seeds 1-100000 [-strategy S] [-legacy] [-j N] [-shard I/N] [-for D] [-stop-after N] [-json] [-junit F.xml]
//	simrun replay  [-story] [-trace F.json] [-html F.html] FILE.schedule
//	simrun shrink  -scenario abort-reuse -seed 42 -legacy [-story] [-html F.html]
//	simrun compare -scenario abort-reuse -seeds 1-10000 -a '-legacy' -b ''
//	simrun merge   shard-*.json
//	simrun stress  -p 40 -rounds 3 [-for D] [-vs 'CMD B'] [-load N] [-private-tmp] [-env K=V] -- CMD ARGS
//
// -strategy takes random, pct:D[:K], chaos[:MAX], starve:PREFIX[:MAX] or
// replay:FILE; without it the scenario's default applies. pct:D spreads
// its D-1 change points over the first K decisions, K being the median
// length of seeds 1-16 under random unless given; it is named pct:D:K in
// what simrun prints. -failpoint
// NAME=TERMS (repeatable) arms a failpoint in every run. Every failure
// prints the command that replays it and writes its schedule file; sweep,
// stress and compare report each failure mode apart, with its rate, Wilson
// interval, first occurrence and a command that reproduces it. A sweep
// given -for (a wall-time budget) or -stop-after (a number of failures),
// or interrupted (Ctrl-C, SIGTERM), stops taking seeds early and reports
// the seeds that ran, the first ones of -seeds; stress given -for starts no
// round once the budget is spent. An interrupted compare reports each
// variant's sweep as far as it went, and no comparison.
//
// A seed that has not ended after -seed-timeout of wall time (a minute by
// default) is a hang: a task loops without a scheduling point, or blocks on
// something the simulator cannot see. It fails with that task's stack,
// every goroutine's stack goes to OUT/SCENARIO-ENGINE-seedN.stacks.txt, and
// a sweep stops there.
//
// Exit codes: 0 when everything passed, 1 when a failure was found, 2 for
// bad usage or bad input, with a sentence saying what was wrong.
package main
