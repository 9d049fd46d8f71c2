#!/usr/bin/env bash
# make pgo: write cmd/simrun/default.pgo, the CPU profile that simrun is
# built with (profile-guided optimisation: go build picks up default.pgo in
# a main package's directory). The profile is of what simrun spends its
# time on — sweeps of every scenario on both engines, the simulator's
# switch — and of the engine on goroutines, since the profile also guides
# the engine's code in the binaries built with it. make bench builds its
# benchmarks with the same profile. Run it again when the hot paths change
# much; a stale profile costs speed, never correctness.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
OUT=${OUT:-out/pgo}
mkdir -p "$OUT"
rm -f "$OUT"/*.prof
export GOGC=400 # as simrun runs its sweeps

# Profiled without the old profile, so that it does not steer the new one.
$GO build -pgo=off -o "$OUT/simrun" ./cmd/simrun
sweep() { # NAME ARGS...: one sweep, on one worker, profiled; failures are expected of the legacy engine
	local name=$1
	shift
	"$OUT/simrun" sweep -j 1 -quiet -check-determinism 0 -out "$OUT" -cpuprofile "$OUT/$name.prof" "$@" >/dev/null || [ $? -eq 1 ]
}
sweep abort-reuse -scenario abort-reuse -seeds 1-150000
sweep abort-reuse-legacy -scenario abort-reuse -legacy -seeds 1-50000
sweep swarm -scenario swarm -seeds 1-40000
sweep parallel -scenario parallel-abort-reuse -seeds 1-20000
for pkg in sim engine; do
	$GO test -c -pgo=off -o "$OUT/$pkg.test" "./$pkg"
done
(cd sim && "../$OUT/sim.test" -test.run '^$' -test.bench 'BenchmarkSwitch|BenchmarkYieldSwitch|BenchmarkDecision' -test.benchtime 1s -test.cpuprofile "../$OUT/switch.prof" >/dev/null)
(cd engine && "../$OUT/engine.test" -test.run '^$' -test.bench 'BenchmarkThroughput|BenchmarkVirtualTime' -test.benchtime 1s -test.cpuprofile "../$OUT/engine.prof" >/dev/null)

$GO tool pprof -proto "$OUT"/*.prof >"$OUT/default.pgo"

# A disarmed failpoint must stay an inlined atomic load: a profile that
# finds a failpoint's slow path hot may inline it into Fires or Stall and
# make them too big to inline at their call sites (a call, 3 ns, at each).
inlined() { # PROFILE PKG: the failpoint calls the compiler inlines into PKG
	$GO build -pgo="$1" -gcflags="github.com/llmdst/llmdst/$2=-m" -o /dev/null "./$2" 2>&1 |
		grep -c 'inlining call to failpoints.(\*Set).\(Stall\|Fires\)' || true
}
for pkg in core engine; do
	off=$(inlined off "$pkg")
	on=$(inlined "$OUT/default.pgo" "$pkg")
	if [ "$on" -lt "$off" ]; then
		echo "pgo: with the new profile $pkg inlines $on failpoint calls, $off without: keep the slow path out of line (//go:noinline); cmd/simrun/default.pgo left as it was" >&2
		exit 1
	fi
done
cp "$OUT/default.pgo" cmd/simrun/default.pgo
echo "pgo: wrote cmd/simrun/default.pgo from $(ls "$OUT"/*.prof | wc -l) profiles"
