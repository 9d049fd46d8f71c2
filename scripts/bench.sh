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
# The commit measured, taken before anything is built: "-dirty" after it
# when files other than the two this script writes differ from it,
# untracked ones too.
code=$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)
if [ "$code" != unknown ] && [ -n "$(git status --porcelain -- . ':!docs/PERFORMANCE.md' ':!scripts/perfdoc/runs.tsv')" ]; then
	code="$code-dirty"
fi
export GOGC=400 # as simrun runs its sweeps
# The benchmarks are built with the profile simrun is built with (go build
# picks up cmd/simrun/default.pgo; make pgo writes it), so that they measure
# what a sweep runs. PGO=off measures without it.
PGO=${PGO:-$(pwd)/cmd/simrun/default.pgo}

# Each package's benchmarks are built once, then every benchmark runs once
# per round, COUNT rounds: this machine's speed drifts over minutes, and
# spreading a benchmark's counts over the whole run keeps one slow spell
# from moving all of them.
bin=$(pwd)/$OUT/bin
mkdir -p "$bin"
for pkg in sim scenario engine task failpoints; do
	$GO test -c -pgo="$PGO" -o "$bin/$pkg.test" "./$pkg"
done
bench() { # PKG ARGS...: one round of a package's benchmarks, from its directory
	local pkg=$1
	shift
	(cd "$pkg" && "$bin/$pkg.test" -test.run '^$' "$@")
}
for round in $(seq "$COUNT"); do
	echo "bench: round $round of $COUNT" >&2
	bench sim -test.bench 'BenchmarkSwitch|BenchmarkYieldSwitch|BenchmarkRawSwitch|BenchmarkDecision|BenchmarkRun200|BenchmarkRunPooled' -test.benchmem
	bench scenario -test.bench 'BenchmarkSeed$|BenchmarkScale' -test.benchmem -test.cpu 1
	bench scenario -test.bench 'BenchmarkSeedParallel' -test.benchmem -test.cpu 1,2
	bench engine -test.bench 'BenchmarkThroughput|BenchmarkVirtualTime' -test.benchmem
	bench task -test.bench 'BenchmarkRealYield'
	bench failpoints -test.bench 'BenchmarkDisarmed'
done | tee "$OUT/bench.txt"

$GO build -pgo="$PGO" -o bin/simrun ./cmd/simrun
$GO test -c -pgo="$PGO" -o bin/engine.test ./engine
# The real-runtime founding test on the legacy engine, as 40 processes at a
# time, counting the copies that opened the race's window; then the
# simulator on the same case. Both exit 1 when they find a failure.
bin/simrun stress -p 40 -rounds 5 -json -env LLMDST_LEGACY=1 -targets stale-frame-after-reuse -- \
	bin/engine.test -test.run '^TestAbortReuseRealRuntime$' -test.count=1 >"$OUT/stress.json" || [ $? -eq 1 ]
bin/simrun sweep -scenario abort-reuse -legacy -seeds 1-100000 -json -quiet -out "$OUT" >"$OUT/sweep.json" || [ $? -eq 1 ]
# What a legacy seed's CPU goes to, from a sweep of its own on one worker
# (a profile would slow the one measured above), every function listed. A
# profile that fails costs the document its paragraph, not the run.
rm -f "$OUT/sweep.prof" "$OUT/sweep-top.txt"
profile=()
if { bin/simrun sweep -scenario abort-reuse -legacy -seeds 1-100000 -j 1 -quiet -check-determinism 0 -out "$OUT" \
	-cpuprofile "$OUT/sweep.prof" >/dev/null || [ $? -eq 1 ]; } &&
	$GO tool pprof -top -nodecount=1000000 -nodefraction=0 -edgefraction=0 bin/simrun "$OUT/sweep.prof" >"$OUT/sweep-top.txt"; then
	profile=(-profile "$OUT/sweep-top.txt")
else
	echo "bench: the legacy sweep's profile failed; PERFORMANCE.md goes without it" >&2
fi
# Every schedule of the same case within 1, 2 and 3 departures on the fixed
# engine, and within 3 on the legacy one, which fails there.
for d in 1 2 3; do
	bin/simrun explore -scenario abort-reuse -delays "$d" -json -quiet -out "$OUT" >"$OUT/explore-fixed-$d.json"
done
bin/simrun explore -scenario abort-reuse -legacy -delays 3 -json -quiet -out "$OUT" >"$OUT/explore-legacy-3.json" || [ $? -eq 1 ]

# The run's headline figures join every run's before it in
# scripts/perfdoc/runs.tsv, named by the commit measured (above).
$GO run ./scripts/perfdoc -pgo "$PGO" -bench "$OUT/bench.txt" -stress "$OUT/stress.json" -sweep "$OUT/sweep.json" "${profile[@]}" \
	-explore "$OUT/explore-*.json" -runs scripts/perfdoc/runs.tsv -record -code "$code" >"$OUT/PERFORMANCE.md"
mv "$OUT/PERFORMANCE.md" docs/PERFORMANCE.md
$BENCHSTAT "$OUT/bench.txt"
echo "bench: wrote docs/PERFORMANCE.md"
