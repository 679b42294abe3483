# Every target runs from a clean checkout; `make test` is what CI runs.
GO ?= go
# Every module of go.work: in workspace mode ./... stops at a nested module's
# go.mod, so the targets name each module's tree.
MODULES := $(shell $(GO) list -m -f '{{.Dir}}')
PKGS := $(addsuffix /...,$(MODULES))

.PHONY: test test-short lint services tools demo bench fuzz chaos chaos-long model model-long model-bug

## test: start the services the tests need, then vet, format-check and run every test with -race
test: services lint
	$(GO) test -race -count=1 -timeout 40m $(PKGS)

## test-short: quick loop while coding (no race detector, long tests skipped)
test-short:
	$(GO) test -short -count=1 $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# each module on its own go.mod (GOWORK=off): what a user of that module
	@# builds, its siblings served from this tree by a file:// module proxy
	@# at the version the go.mod files require (docs/development.md, "Releases")
	@GO=$(GO) bash scripts/gowork-off.sh $(GO) vet ./...

## services: install the tools the tests need, start PostgreSQL, NATS and MariaDB if they are down (idempotent)
services: tools
	@bash scripts/services.sh

## tools: install SPIN and gcc for the protocol model when missing (idempotent)
tools:
	@bash scripts/tools.sh

demo:
	$(GO) run ./cmd/mensageria demo

bench: services
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m $(PKGS)

## fuzz: every fuzz target for FUZZTIME each (default 30s)
fuzz: services
	@bash scripts/fuzz.sh

## chaos: the fault-injection suite, short profile, verbose, on PostgreSQL and on MariaDB (docs/reliability.md)
chaos: services
	$(GO) test -count=1 -v -run 'TestChaos(MariaDB)?$$' -timeout 25m ./cmd/mensageria/internal/chaos/

## chaos-long: the fault-injection suite with 1,000,000 messages
chaos-long: services
	MENSAGERIA_CHAOS_MESSAGES=1000000 $(GO) test -count=1 -v -run 'TestChaos$$' -timeout 4h ./cmd/mensageria/internal/chaos/

## model: check the protocol model within the bounds of `make test`, with its figures (docs/model/README.md)
model: tools
	$(GO) test -count=1 -v -run 'TestModel$$|TestEveryStateChangeIsModelled' ./tests/model/

## model-bug: show that every deliberate bug of the model is caught
model-bug: tools
	$(GO) test -count=1 -v -run 'TestModelCatchesBugs' ./tests/model/

## model-long: check the protocol model within the longer bounds (minutes, a few GB)
model-long: tools
	$(GO) test -tags modellong -count=1 -v -run 'TestModelLong' -timeout 3h ./tests/model/
