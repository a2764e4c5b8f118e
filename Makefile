# idem — run `make help` for the targets.
.DEFAULT_GOAL := help
GO ?= go

.PHONY: help run build image test vet tidy fmt bench

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

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# `work` is every package of every module in go.work; ./... would be the
# library's module alone.
vet: ## go vet, the gofmt check, staticcheck, and docs that point nowhere outside the repository
	$(GO) vet work
	@test -z "$$(gofmt -l .)" || (echo "gofmt would change:"; gofmt -l .; exit 1)
	$(GO) run $(STATICCHECK) work
	@! git grep -n -I -e 'DESIGN\.md' -e '\.\./shared' -- . ':!Makefile' || (echo "the repository's text must stand alone"; exit 1)

tidy: ## go mod tidy in every module (scripts/tidy)
	scripts/tidy

fmt: ## gofmt every Go file
	gofmt -w .

bench: ## run the benchmarks beside their pgbench ceilings (see docs/benchmarks.md)
	bench/run
