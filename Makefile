# lockguard: run "make help" for the targets.

GO ?= go

.PHONY: help redis cc chromium test lint demo e2e bench chaos

help: ## List the targets
	@grep -E '^[a-z0-9]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-9s %s\n", $$1, $$2}'

redis: ## Install redis-server and redis-cli if missing (apt-get as root)
	@./scripts/ensure-redis.sh

cc: ## Install a C compiler if cgo is missing (apt-get as root): the race detector needs it
	@GO=$(GO) ./scripts/ensure-cc.sh

chromium: ## Install chromium if missing (apt-get as root), for make e2e
	@./scripts/ensure-chromium.sh

test: redis cc ## Vet, then run every test with the race detector
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 12m ./...

lint: ## Fail on unformatted files, then vet
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

demo: redis ## Run the shop demo
	$(GO) run ./examples/shop/cmd/demo

e2e: redis chromium ## Run the shop's browser test in headless Chromium
	$(GO) test -count=1 -run E2E -tags e2e ./examples/shop/...

bench: redis ## Compare lockguard with other lock libraries
	cd bench && $(GO) run ./cmd/bench

chaos: redis cc ## Run the fault-injection tests, then fuzz key derivation and the Gin middleware
	$(GO) test -race -count=1 -tags chaos -timeout 10m ./internal/chaos/...
	$(GO) test -run '^$$' -fuzz=FuzzKey -fuzztime=150000x ./keyfunc/
	$(GO) test -run '^$$' -fuzz=FuzzMiddleware -fuzztime=10000x ./ginlock/
