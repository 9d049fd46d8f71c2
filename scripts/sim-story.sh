#!/usr/bin/env bash
# The founding story, end to end: real processes of the legacy engine's
# founding test hardly ever open the race's window; under the simulator the
# legacy engine fails the founding test on many seeds, one failure is
# replayed from its schedule file, and the fixed engine passes large sweeps
# and every schedule of the founding case within a bound. Each step checks
# its exit code.
set -euo pipefail
cd "$(dirname "$0")/.."

SIMRUN=${SIMRUN:-bin/simrun}
ENGINE_TEST=${ENGINE_TEST:-bin/engine.test} # go test -c ./engine
REAL_ROUNDS=${REAL_ROUNDS:-3}
OUT=${OUT:-out}
LEGACY_SEEDS=${LEGACY_SEEDS:-1-10000}
FIXED_SEEDS=${FIXED_SEEDS:-1-100000}
SWARM_SEEDS=${SWARM_SEEDS:-1-20000}
MIN_REACHED=${MIN_REACHED:-1000} # seeds that must reach each target of steps 3 and 4
EXPLORE_DELAYS=${EXPLORE_DELAYS:-3} # departures from the calm schedule step 5 explores
mkdir -p "$OUT"

step() { printf '\n== %s\n\n' "$*"; }
expect() { # expect CODE CMD...: run CMD, fail unless it exits with CODE
	local want=$1 code=0
	shift
	"$@" || code=$?
	if [ "$code" -ne "$want" ]; then
		echo "sim-story: '$*' exited $code, expected $want" >&2
		exit 1
	fi
}

step "0. Real processes: the legacy engine's founding test on goroutines, 40 processes at a time for $REAL_ROUNDS rounds, counting the copies that opened the race's window"
# A real copy fails now and then (exit 1); only a command that cannot run
# (exit 2) stops the story.
code=0
LLMDST_LEGACY=1 "$SIMRUN" stress -p 40 -rounds "$REAL_ROUNDS" -quiet -targets stale-frame-after-reuse -- \
	"$ENGINE_TEST" -test.run '^TestAbortReuseRealRuntime$' -test.count=1 || code=$?
if [ "$code" -gt 1 ]; then
	echo "sim-story: stress exited $code" >&2
	exit 1
fi

step "1. The legacy engine (routes by the caller's request id) runs the founding test, abort-reuse, over seeds $LEGACY_SEEDS"
expect 1 "$SIMRUN" sweep -scenario abort-reuse -legacy -seeds "$LEGACY_SEEDS" -out "$OUT" -quiet | tee "$OUT/legacy-sweep.txt"
first=$(sed -n "s/^  first failing seed: \([0-9]*\).*/\1/p" "$OUT/legacy-sweep.txt")
if [ -z "$first" ]; then
	echo "sim-story: the legacy sweep reported no failing seed" >&2
	exit 1
fi

step "2. Replay seed $first from its schedule file: the same failure, the same trace hash, told as a story"
expect 1 "$SIMRUN" replay -story "$OUT/abort-reuse-legacy-seed$first.schedule"

step "3. The fixed engine (one internal id per incarnation) runs the same test over seeds $FIXED_SEEDS, and must reach the race's window on $MIN_REACHED of them"
expect 0 "$SIMRUN" sweep -scenario abort-reuse -seeds "$FIXED_SEEDS" -min-reached "$MIN_REACHED" -out "$OUT" -quiet

step "4. The fixed engine under swarm: workloads drawn from the seed, seeds $SWARM_SEEDS, each reuse window reached on $MIN_REACHED of them"
expect 0 "$SIMRUN" sweep -scenario swarm -seeds "$SWARM_SEEDS" -min-reached "$MIN_REACHED" -out "$OUT" -quiet

step "5. Every schedule of the founding case within $EXPLORE_DELAYS departures from starve:output-handler's calm one: the legacy engine fails within them, the fixed engine passes them all"
expect 1 "$SIMRUN" explore -scenario abort-reuse -legacy -delays "$EXPLORE_DELAYS" -out "$OUT"
expect 0 "$SIMRUN" explore -scenario abort-reuse -delays "$EXPLORE_DELAYS" -out "$OUT"

printf '\nsim-story: the race is found and replayed on the legacy engine, and absent from the fixed one through thousands of openings of its window and every schedule within %s departures.\n' "$EXPLORE_DELAYS"
