# Tenure developer tasks. `make test` is what CI runs (.ci/run).
#
# The repository holds several Go modules: the core (the root: generics, jobs, worker, db/...,
# cron, tenuretest, cmd/tenuregen), the integrations tenureprom, tenureotel, tenureui and
# tenurenats, the CLI cmd/tenure, examples and bench, each with its own go.mod. go.work lists
# them all; in workspace mode the pattern github.com/tenureq/tenure/... matches the packages of
# every module, which is what PKGS is (./... alone would be the core's packages only).
#
# Tests need PostgreSQL; the harness (internal/pgtest) finds or starts one by itself:
# $TEST_DATABASE_URL, else a trusting server on 127.0.0.1:5432, else a throwaway cluster
# started from the local PostgreSQL binaries (set TENURE_PGSERVER_SKIP_DEFAULT=1 to force it).

SHELL := /bin/bash
GO    ?= go
SQLC  ?= $(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1

# The full suite runs with the race detector. On a slow machine: make test RACE=
RACE         ?= -race
TEST_TIMEOUT ?= 20m
TEST_FLAGS   ?=
PKGS         ?= github.com/tenureq/tenure/...
# The modules of the repository (directories with a go.mod); go.work must list each one.
MODULES      := . bench cmd/tenure examples tenurenats tenureotel tenureprom tenureui
# make test runs every package but the fault matrix, which has its own target (make chaos,
# run by .ci/run after make test, without -race: its recovery bounds are timings).
TEST_PKGS    ?= $(shell $(GO) list $(PKGS) | grep -v /internal/faults)

.PHONY: all generate check-generated check-mod vet fmt-check test test-short test-newcomer migrate demo bench bench-fairness bench-compare bench-scaling

all: test

## generate: regenerate with sqlc every package sqlc.yaml lists, each from db/schema.sql and its
## queries file: db/gen (the core's statements, db/queries.sql) and the integrations' own
## packages tenureui/internal/uidb, tenureprom/internal/promdb and tenurenats/internal/natsdb
## (their queries.sql next to the generated code)
generate:
	$(SQLC) generate

## check-generated: fail when db/gen, tenureui/internal/uidb, tenureprom/internal/promdb or
## tenurenats/internal/natsdb is not what sqlc produces from the SQL (sqlc diff covers every
## package of sqlc.yaml; that db/migrations reproduces db/schema.sql is checked by the
## db/migrations tests)
check-generated:
	@$(SQLC) diff || { echo "generated sqlc code is stale: run 'make generate' and commit the result" >&2; exit 1; }
	@$(GO) run ./cmd/tenuregen -check -dir examples/shop/shopjobs || { echo "examples/shop/shopjobs/tenure_gen.go is stale: run 'go generate ./examples/...'" >&2; exit 1; }

## check-mod: fail when a module's go.mod/go.sum is not what `go mod tidy` leaves (each module
## on its own, GOWORK=off, as a user who requires it resolves it)
check-mod:
	@for m in $(MODULES); do \
		( cd $$m && GOWORK=off $(GO) mod tidy -diff >/dev/null ) \
			|| { echo "$$m/go.mod is not tidy: run 'cd $$m && GOWORK=off go mod tidy'" >&2; exit 1; }; \
	done

## vet: go vet every package of every module
vet:
	$(GO) vet $(PKGS)

## fmt-check: fail when a Go file is not gofmt-formatted
fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$out" ]; then echo "not gofmt-formatted:" >&2; echo "$$out" >&2; exit 1; fi

## test: check-generated, check-mod, vet, then the whole suite of every module against real PostgreSQL
test: check-generated check-mod vet
	$(GO) test $(RACE) -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) $(TEST_PKGS)
	$(MAKE) --no-print-directory fleet

## test-short: the suite without -race, skipping the slow tests (-short)
test-short:
	$(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

## test-newcomer: the path of a fresh clone on a machine whose PostgreSQL is installed but not
## running: the harness ignores 127.0.0.1:5432 and $$TEST_DATABASE_URL and starts its own
## throwaway clusters; the -short suite (no race detector) plus the README's fresh-module test
## and the query-plan tests, which depend on what a fresh server's planner does
test-newcomer:
	env -u TEST_DATABASE_URL -u DATABASE_URL TENURE_PGSERVER_SKIP_DEFAULT=1 \
		$(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	env -u TEST_DATABASE_URL -u DATABASE_URL TENURE_PGSERVER_SKIP_DEFAULT=1 \
		$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run 'TestReadme|Plan' . ./jobs/ ./worker/ ./tenureprom/ ./tenureui/

## chaos: the fault-injection matrix (internal/faults: PostgreSQL restarts and crashes, killed
## backends and workers, network cuts, pool exhaustion, retry storm, row locks, read-only, roles;
## ~4 min; see docs/reliability.md). Not part of `make test`'s -short runs: the tests skip under -short.
.PHONY: chaos
chaos:
	$(GO) test -count=1 -timeout 20m -skip '^TestFleetSilentCut$$' ./internal/faults/

## fleet: the fleet scenario of the fault matrix alone (TestFleetSilentCut, ~20 s): 3 worker
## hosts as network namespaces on a bridge, one PostgreSQL, one host's link cut silently for
## 2.5 leases, healed (docs/reliability.md row 14). Needs root and iproute2; skips otherwise.
## `make test` runs it after the suite (`make chaos` skips it).
.PHONY: fleet
fleet:
	$(GO) test -count=1 -timeout 5m -run TestFleetSilentCut -v ./internal/faults/

## soak: 4 worker processes, 20,000 effect jobs, random SIGKILL / SIGSTOP+SIGCONT of the workers
## for 2 minutes, then drain: 0 lost, 0 wrong, 0 stuck, effects once (~4 min; docs/reliability.md)
.PHONY: soak
soak:
	TENURE_SOAK=1 $(GO) test -count=1 -timeout 30m -run TestSoak -v ./internal/faults/

## migrate: apply pending migrations to $$DATABASE_URL (or pass ARGS='-database-url URL')
migrate:
	$(GO) run ./cmd/tenure migrate up $(ARGS)

# ---------------------------------------------------------------------------------------
# Demo and benchmark targets (demo, bench, bench-compare, bench-fairness) go below.
# ---------------------------------------------------------------------------------------

## bench-compare: Tenure vs River on the same PostgreSQL, fresh database per run, then how
## Tenure's cost grows (bench-scaling) (see bench/README.md). BENCH_QUICK=1 for a shortened
## run of both (measured 2026-12-01 on the shared 2-CPU machine: 1 min 54 s at load 1-4; under
## load ~11 compare alone 1 min 59 s and scaling ~50 s); BENCH_SCENARIOS=a,b and BENCH_REPS=N
## select compare's runs.
.PHONY: bench-compare
bench-compare:
	cd bench && $(GO) run ./cmd/compare
	$(MAKE) --no-print-directory bench-scaling

## bench-scaling: throughput and claim latency against ready backlog, finished rows, queues and
## worker slots, and a 30-minute soak at 70% of capacity (~1 h in all; BENCH_QUICK=1: < 1 min;
## ARGS='-sweeps backlog,soak -soak-duration 10m'; see bench/README.md)
.PHONY: bench-scaling
bench-scaling:
	cd bench && $(GO) run ./cmd/scaling $(ARGS)

## demo: the main job: the example shop service (finds or starts PostgreSQL; ~25 s)
demo:
	$(GO) run ./examples/shop $(ARGS)

## bench: engine and enqueue benchmarks (burn-down, pickup latency, claim latency with 1M
## finished rows, bulk and single enqueue)
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./worker/
	$(GO) test -run '^$$' -bench . -benchtime 20x -timeout 20m ./jobs/

## bench-fairness: the starvation benchmark (high 50/s + normal 20/s offered, 60/s capacity,
## time-compressed x10) under strict, aging, quota and deadline policies; fails when a
## promised bound on normal's oldest ready age breaks; then the tenant benchmark (tenant A's
## 100,000 queued jobs against ten light tenants, strict vs Fairness.FairShare).
## ARGS='-duration 30s -tenant-backlog 20000' to shorten, -tenant-backlog 0 to skip tenants.
## Then the flow-control proofs (issue 16; -limits=false to skip, ~7 min): 4 worker processes x
## 10 slots under no limit / MaxRunning 40 / 80 / 25 interleaved (-limits-rounds 2,
## -limits-duration 30s each: throughput, max running from the table every 10 ms and from the
## handlers' intervals), limit 1 per key with a child SIGKILLed every 2-4 s, and a rate limit
## of 50/s offered 5x for -limits-rate-duration 60s (starts per 1 s window).
## Only the proofs: ARGS='-policies "" -tenant-backlog 0 -out results/limits.json'
## (bench/results/limits-2026-12-01.md).
bench-fairness:
	cd bench && $(GO) run ./cmd/fairness -out results/fairness.json $(ARGS)

## bench-workflows: workflows and sequences against the same jobs without dependencies, each
## pair in the same run on a production-like PostgreSQL it starts (bench/cmd/workflows): a
## 1 -> 100,000 -> 1 fan-out/fan-in, 1,000 10-task workflows, 10,000 sequence keys x 3 jobs,
## release latency vs plain pickup (~8 min under load). Quick: ARGS='-fanout 10000
## -workflows 200 -seq-keys 1000 -latency-duration 5s'; -server url to use the local server.
.PHONY: bench-workflows
bench-workflows:
	cd bench && $(GO) run ./cmd/workflows -out results/workflows-latest.json $(ARGS)

## bench-whentomove: what the queue costs the database next to a business write per job (an
## order INSERT + the handler's UPDATE): WAL and server CPU per 1,000 jobs, business alone vs
## Tenure vs JetStream via the outbox vs JetStream direct (docs/guide.md §8; needs NATS with
## JetStream on 127.0.0.1:4222 for the js-* variants; ~3 min). ARGS='-rates 200 -duration 4s'
.PHONY: bench-whentomove
bench-whentomove:
	cd bench && $(GO) run ./cmd/whentomove $(ARGS)

## bench-relay: the outbox relay's throughput into NATS JetStream (tenurenats; needs a NATS
## server with JetStream on 127.0.0.1:4222 or $$TENURE_NATS_URL; a 20,000-row backlog per case)
.PHONY: bench-relay
bench-relay:
	$(GO) test -run '^$$' -bench RelayThroughput -benchtime 20000x ./tenurenats/
