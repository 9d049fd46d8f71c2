# llmdst — every tool a target needs is fetched by the target itself.
GO        ?= go
BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
PKGS      := ./...

.PHONY: all test test-plain lint fmt-check vet cc bench bench-ab pgo sim simrun e2e fuzz rapid docs

all: test

## test: formatting, vet, and every test under the race detector. Without
## the PGO profile: cmd/simrun's tests would build every package a second
## time with it, which doubles the build from an empty cache, for no test's
## sake (make bench measures the PGO build)
test: lint cc
	$(GO) test -race -count=1 -pgo=off $(PKGS)

## cc: the race detector needs cgo, so a C compiler: Debian's gcc is
## installed when there is none
cc:
	@command -v "$$($(GO) env CC)" >/dev/null 2>&1 || { \
		echo "cc: installing Debian's gcc, which go test -race needs"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y gcc libc6-dev; }

## test-plain: every test without the race detector
test-plain:
	$(GO) test -count=1 -pgo=off $(PKGS)

## lint: gofmt and go vet
lint: fmt-check vet

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags e2e ./e2e

## simrun: build the CLI into bin/
simrun:
	$(GO) build -o bin/simrun ./cmd/simrun

## sim: the founding story end to end: real processes that hardly ever
## open the race's window, then the race found and replayed on the legacy
## engine, absent from the fixed engine over large sweeps
sim: simrun
	$(GO) test -c -o bin/engine.test ./engine
	./scripts/sim-story.sh

## docs: run the shell sessions shown in README.md and docs/TRIAGE.md again
## and write their real output back (review with git diff)
docs:
	$(GO) run ./scripts/rundoc README.md docs/TRIAGE.md

## pgo: write cmd/simrun/default.pgo, the CPU profile simrun (and make
## bench) is built with, from sweeps of every scenario and the benchmarks
## of the switch and the engine
pgo:
	GO=$(GO) ./scripts/pgo.sh

## bench: the performance benchmarks, 6 counts each (out/bench/bench.txt,
## which benchstat compares), a stress of real processes against a sweep,
## and docs/PERFORMANCE.md written from them; the run's headline figures
## join every run's before it in scripts/perfdoc/runs.tsv
bench:
	GO=$(GO) BENCHSTAT="$(BENCHSTAT)" ./scripts/bench.sh

## bench-ab: what a change buys: the benchmarks BENCH of AB_PKGS built from
## BASE (a git revision, HEAD by default: the uncommitted changes) and from
## the working tree, run in alternation COUNT rounds, compared by benchstat
## (out/bench-ab/base.txt and head.txt)
BASE    ?= HEAD
BENCH   ?= BenchmarkYieldSwitch|BenchmarkSeedParallel
AB_PKGS ?= ./sim ./scenario
COUNT   ?= 6
bench-ab:
	GO=$(GO) BENCHSTAT="$(BENCHSTAT)" $(GO) run ./scripts/benchab -base '$(BASE)' -bench '$(BENCH)' -count $(COUNT) $(AB_PKGS)

## fuzz: run every fuzz target for FUZZTIME each (new findings land in
## testdata/fuzz/, to be committed as regression inputs)
FUZZTIME ?= 30s
FUZZ_TARGETS := ./sim:FuzzParseSchedule ./engine:FuzzDetokenizer ./engine:FuzzAddRequest ./engine:FuzzAddLoRARequest ./engine:FuzzLoRACalls
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	done

## rapid: every rapid property at RAPID_CHECKS cases each (100000 by
## default), from RAPID_SEED (0: rapid draws one and prints it), for a
## nightly job: a few minutes of it find what sweeps of millions of seeds
## do not. A failure leaves a fail file in its package's testdata/rapid,
## which rapid replays first from then on: commit it with the mend.
RAPID_CHECKS ?= 100000
RAPID_SEED   ?= 0
RAPID_TESTS  := TestBlocksProperty.*|TestLoRAPinsProperty|TestControlCallsAgainstAModel|TestEngineAgainstASequentialModel|TestReusedIDsNeverSeeAnotherIncarnationsTokens|TestDeterminism|TestFoundingRaceUnderDrawnSchedules|TestTheTextOfAnyRequestIsItsTokensDecoding
rapid:
	$(GO) test -count=1 -timeout 4h -run '^($(RAPID_TESTS))$$' ./core ./props -rapid.checks=$(RAPID_CHECKS) -rapid.seed=$(RAPID_SEED)

## e2e: draw the HTML timeline of a failing legacy seed, open it in headless
## Chromium (Debian's, installed here when missing) and check what is drawn.
## Not part of test: it needs a browser.
E2E_DIR ?= out/e2e
e2e: simrun
	@command -v chromium >/dev/null 2>&1 || { \
		echo "e2e: installing Debian's chromium"; \
		if [ "$$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	@mkdir -p $(E2E_DIR)
	./bin/simrun run -scenario abort-reuse -seed 1 -legacy -out $(E2E_DIR) -html $(E2E_DIR)/timeline.html; \
		code=$$?; [ $$code -eq 1 ] || { echo "e2e: want seed 1 of the legacy engine to fail (exit 1), got exit $$code"; exit 1; }
	LLMDST_E2E_HTML=$(abspath $(E2E_DIR)/timeline.html) $(GO) test -tags e2e -count=1 -v ./e2e
