# llmdst — every tool a target needs is fetched by the target itself.
GO        ?= go
BENCHSTAT ?= $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
PKGS      := ./...

.PHONY: all test test-plain lint fmt-check vet bench sim simrun

all: test

## test: formatting, vet, and every test under the race detector
test: lint
	$(GO) test -race -count=1 $(PKGS)

## test-plain: every test without the race detector
test-plain:
	$(GO) test -count=1 $(PKGS)

## lint: gofmt and go vet
lint: fmt-check vet

fmt-check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

## simrun: build the CLI into bin/
simrun:
	$(GO) build -o bin/simrun ./cmd/simrun

## sim: the founding story end to end: the race found and replayed on the
## legacy engine, absent from the fixed engine over large sweeps
sim: simrun
	./scripts/sim-story.sh

## bench: every benchmark, 6 counts, in a form benchstat compares
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 $(PKGS) | tee bench.txt
	$(BENCHSTAT) bench.txt
