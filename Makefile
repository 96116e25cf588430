# Synchro developer tasks. `make` (or `make help`) lists them.

GO         ?= go
TEST_FLAGS ?= -count=1 -timeout 45m
BENCH_ARGS ?=
FUZZTIME   ?= 5m
PG_MAJORS  ?= 16 17 18
# The ./tests files CI also runs on the newer majors (scripts/test-shard): those touching
# what changes between majors: the replication protocol, slots and decoders, snapshots,
# catalogs and server views, roles and privileges, DDL and tuple identity.
MATRIX_CI_FILES ?= ^(ack_edges|baseline|bootstrap_snapshot|composite_key|contract_signature|ddl_edges|decoder_.*|fence.*|goose|health|hostile|image|install.*|observe_edges|privilege_edges|protocol_edges|readiness|registry.*|render_bomb|reset.*|runner_.*|security|sentinel|server_library|session_.*|upgrade|xid.*)_test\.go$$
MARQUEE_KILLS    ?= 200
MARQUEE_RESTARTS ?= 20

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: dev
dev: ## Run a private PostgreSQL with Synchro and a demo schema (./.synchro-dev)
	$(GO) run ./cmd/synchro dev

.PHONY: test
test: ## Run every test (starts its own PostgreSQL; no server needed)
	$(GO) test $(TEST_FLAGS) ./...

.PHONY: test-matrix
test-matrix: ## Run every test but the marquee and protocol-edge packages (PostgreSQL 15 only: CI time) once per major in PG_MAJORS (16 17 18; binaries from scripts/fetch-pg)
	@failed=""; for m in $(PG_MAJORS); do \
	  bin="$$(scripts/fetch-pg $$m)" || exit 1; \
	  echo "test-matrix: PostgreSQL $$m: SYNCHRO_PG_BIN=$$bin"; start=$$(date +%s); \
	  if SYNCHRO_PG_BIN="$$bin" $(GO) test $(TEST_FLAGS) $$($(GO) list ./... | grep -v -e '/tests/marquee$$' -e '/tests/protocol$$'); then r=passed; else r=FAILED; failed="$$failed $$m"; fi; \
	  echo "test-matrix: PostgreSQL $$m $$r in $$(( $$(date +%s) - start ))s"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-matrix: failed on PostgreSQL$$failed"; exit 1; fi

.PHONY: test-matrix-ci
test-matrix-ci: ## CI's form of test-matrix: internal/pgcluster on each major in PG_MAJORS; the other packages and the version-sensitive ./tests files (MATRIX_CI_FILES) split round-robin, one shard per major (scripts/test-shard)
	@failed=""; n=$(words $(PG_MAJORS)); k=0; for m in $(PG_MAJORS); do \
	  bin="$$(scripts/fetch-pg $$m)" || exit 1; \
	  shard="$$(scripts/test-shard tests $$n $$k '$(MATRIX_CI_FILES)')" || exit 1; \
	  pkgs="$$($(GO) list ./... | grep -v -e '/tests$$' -e '/tests/marquee$$' -e '/tests/protocol$$' -e '/internal/pgcluster$$' | LC_ALL=C sort | awk -v n=$$n -v k=$$k '(NR - 1) % n == n - 1 - k')"; \
	  echo "test-matrix-ci: PostgreSQL $$m: SYNCHRO_PG_BIN=$$bin, package and ./tests shard $$k of $$n"; start=$$(date +%s); \
	  if SYNCHRO_PG_BIN="$$bin" $(GO) test $(TEST_FLAGS) ./internal/pgcluster $$pkgs && \
	     SYNCHRO_PG_BIN="$$bin" $(GO) test $(TEST_FLAGS) ./tests -run "$$shard"; then r=passed; else r=FAILED; failed="$$failed $$m"; fi; \
	  echo "test-matrix-ci: PostgreSQL $$m $$r in $$(( $$(date +%s) - start ))s"; k=$$((k + 1)); \
	done; \
	if [ -n "$$failed" ]; then echo "test-matrix-ci: failed on PostgreSQL$$failed"; exit 1; fi

.PHONY: test-timing
test-timing: ## Protocol tests whose verdict is a server timeout (alone: not under make test's parallel load)
	SYNCHRO_TIMING_TESTS=1 $(GO) test -count=1 ./tests/protocol -run '^TestStatusUpdatesWhileHeldBack$$' -v

.PHONY: marquee
marquee: ## Crash-injection marquee at full size (MARQUEE_KILLS=200 runner deaths at fault points, MARQUEE_RESTARTS=20 PostgreSQL crashes); docs/reliability.md
	$(GO) test -count=1 -timeout 60m -v ./tests/marquee -run '^TestMarquee$$' -marquee.kills=$(MARQUEE_KILLS) -marquee.restarts=$(MARQUEE_RESTARTS)

.PHONY: chaos
chaos: ## Chaos tests at full size: concurrent writers, pushes, pulls, rebuilds, compaction, runner stops and SIGKILLs, registry changes, both decoders (make test runs only TestChaosShort, 4 s with a fixed seed)
	$(GO) test -count=1 -timeout 30m -v ./tests -run '^TestChaos' -chaos -chaos.dur=25s -chaos.full

.PHONY: fuzz
fuzz: ## Fuzz campaigns, FUZZTIME each (default 5m); commit every finding under testdata/fuzz with a fix
	$(GO) test ./runner/decode/pgoutput -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runner/decode -run '^$$' -fuzz '^FuzzParseMessages$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runner/decode -run '^$$' -fuzz '^FuzzFenceFastPath$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runner/decode -run '^$$' -fuzz '^FuzzFenceCompact$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runner/decode/wal2json -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./runner/decode/wal2json -run '^$$' -fuzz '^FuzzFastPath$$' -fuzztime $(FUZZTIME)
	$(GO) test ./tests -run '^$$' -fuzz '^FuzzReaderToken$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x
	$(GO) test ./tests -run '^$$' -fuzz '^FuzzPushInput$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 100x

.PHONY: generate
generate: ## Regenerate gen/ from queries/ with sqlc
	$(GO) tool sqlc generate

.PHONY: schema
schema: ## Regenerate docs/schema.sql, the installed schema synchro with its privileges
	$(GO) run ./cmd/synchro-schema -out docs/schema.sql

.PHONY: verify
verify: ## Check generated code, the schema snapshot, vet, go.mod tidiness and formatting
	$(GO) tool sqlc diff
	$(GO) run ./cmd/synchro-schema -check docs/schema.sql
	$(GO) vet ./...
	$(GO) vet -tags synchrofaults ./internal/fault/ ./runner/... ./cmd/synchro/
	$(GO) mod tidy -diff
	@unformatted="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

.PHONY: bench
bench: ## Run the benchmark harness (BENCH_ARGS are passed through)
	$(GO) run ./cmd/synchro-bench $(BENCH_ARGS)

.PHONY: bench-groups
bench-groups: ## Consumer-group read vs pull of the same changes, 100,000-transaction backlog (issue 11)
	$(GO) run ./cmd/synchro-bench --suite groups --groups-txns 100000 --repeat 3

.PHONY: bench-decoders
bench-decoders: ## Materialized row events/s under wal2json against pgoutput, same run (docs/decoders.md)
	$(GO) run ./cmd/synchro-bench --suite materialize --decoder pgoutput,wal2json --repeat 3 --mat-small-txns 2000 --mat-big-txns 20 --no-profile

.PHONY: bench-quick
bench-quick: ## Short same-run ratios (CI); fails below half of docs/benchmarks.md's figures
	$(GO) run ./cmd/synchro-bench --suite materialize --decoder pgoutput --repeat 3 --mat-small-txns 10000 --mat-big-txns 20 --mat-dep-txns 0 --no-profile --check docs/benchmarks.md
