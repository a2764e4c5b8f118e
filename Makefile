# idem — run `make help` for the targets.
.DEFAULT_GOAL := help
GO ?= go

.PHONY: help run build image test vet fmt bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

run: ## run idem serve on the embedded defaults (SQLite in ./idem-data)
	$(GO) run ./cmd/idem serve

build: ## build the idem binary into ./bin/idem
	$(GO) build -o bin/idem ./cmd/idem

image: ## build the container image idem:VERSION and idem:latest with podman (docs/operations.md)
	scripts/image

test: ## run every test with -race against a real PostgreSQL (started if needed)
	scripts/test

vet: ## go vet and gofmt check
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || (gofmt -l .; exit 1)

bench: ## run the benchmarks beside their pgbench ceilings (see docs/benchmarks.md)
	bench/run
