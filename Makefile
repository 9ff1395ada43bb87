# orderly — `make` lists the targets.
.DEFAULT_GOAL := help
LINT_VERSION := v2.15.0

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

serve: ## run the server on ./orderly.db, :8080
	go run ./cmd/orderly serve

test: ## run every test with the race detector
	go test -race ./...

simulate: ## drive 3000 orders at 300/s against an in-process server and check the invariants
	go run ./cmd/orderly simulate --orders 3000 --rate 300

bench: ## run the Go benchmarks (burst close on SQLite)
	go test -run '^$$' -bench . -benchmem ./...

bench-sim: ## the simulate matrix of BENCHMARKS.md (needs PostgreSQL and MariaDB running)
	scripts/bench.sh 3000 300

lint: ## gofmt, go vet and golangci-lint
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...
	golangci-lint version 2>/dev/null | grep -q $(LINT_VERSION:v%=%) || go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(LINT_VERSION)
	golangci-lint run ./...

ci: ## what CI runs
	bash .ci/run

.PHONY: help serve test simulate bench bench-sim lint ci
