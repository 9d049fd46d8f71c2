#!/usr/bin/env bash
# make bench: run the performance benchmarks, stress the real-runtime
# founding test against a sweep of the same case, and write
# docs/PERFORMANCE.md from what was measured.
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT=${COUNT:-6}
OUT=${OUT:-out/bench}
GO=${GO:-go}
BENCHSTAT=${BENCHSTAT:-"$GO run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"}
mkdir -p "$OUT"
export GOGC=400 # as simrun runs its sweeps

{
	$GO test -run '^$' -bench 'BenchmarkSwitch|BenchmarkYieldSwitch|BenchmarkRawSwitch|BenchmarkDecision|BenchmarkRun200|BenchmarkRunPooled' -benchmem -count "$COUNT" ./sim
	$GO test -run '^$' -bench 'BenchmarkSeed$|BenchmarkScale' -benchmem -cpu 1 -count "$COUNT" ./scenario
	$GO test -run '^$' -bench 'BenchmarkSeedParallel' -benchmem -cpu 1,2 -count "$COUNT" ./scenario
	$GO test -run '^$' -bench 'BenchmarkThroughput|BenchmarkVirtualTime' -benchmem -count "$COUNT" ./engine
	$GO test -run '^$' -bench 'BenchmarkRealYield' -count "$COUNT" ./task
	$GO test -run '^$' -bench 'BenchmarkDisarmed' -count "$COUNT" ./failpoints
} | tee "$OUT/bench.txt"

$GO build -o bin/simrun ./cmd/simrun
$GO test -c -o bin/engine.test ./engine
# The real-runtime founding test on the legacy engine, as 40 processes at a
# time; then the simulator on the same case. Both exit 1 when they find a
# failure.
bin/simrun stress -p 40 -rounds 5 -json -env LLMDST_LEGACY=1 -- \
	bin/engine.test -test.run '^TestAbortReuseRealRuntime$' -test.count=1 >"$OUT/stress.json" || [ $? -eq 1 ]
bin/simrun sweep -scenario abort-reuse -legacy -seeds 1-100000 -json -quiet -out "$OUT" >"$OUT/sweep.json" || [ $? -eq 1 ]

$GO run ./scripts/perfdoc -bench "$OUT/bench.txt" -stress "$OUT/stress.json" -sweep "$OUT/sweep.json" >docs/PERFORMANCE.md
$BENCHSTAT "$OUT/bench.txt"
echo "bench: wrote docs/PERFORMANCE.md"
