# tollgate — make run (the stack on loopback), make test (every suite), make bench.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
GOTEST_FLAGS ?=
BINS := bin/tollgate-controlplane bin/tollgate-demo-s3
# the build's version (git describe, else the VERSION file, else "dev"), linked into both binaries
VERSION := $(shell scripts/version.sh)
LDFLAGS := -X tollgate/internal/version.Version=$(VERSION)

.PHONY: all deps build web run up down test lint api-doc settings-doc test-lua test-go test-fuzz test-web test-e2e test-integration bench clean install dist

all: build

deps:
	@scripts/install-deps.sh

# the admin console (web/dist, embedded by the control plane; see web/embed.go), built only when
# one of its sources is newer than the last build's web/dist/index.html: make run / make up on an
# unchanged tree do not type-check and bundle it again (t/makefile_test.go)
WEB_SRC := $(shell find web/src web/public web/scripts -type f 2>/dev/null) web/index.html \
	web/package.json web/package-lock.json web/vite.config.ts $(wildcard web/tsconfig*.json)

web: web/dist/index.html

web/dist/index.html: $(WEB_SRC) | deps
	cd web && npm run build

build: deps web
	@mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./controlplane/cmd/tollgate-controlplane ./demo/cmd/tollgate-demo-s3
	@scripts/build-backend.sh

run: build
	@scripts/stack.sh run

up: build
	@scripts/stack.sh up

down:
	@scripts/stack.sh down

lint: deps
	luacheck -q lua t/lua t/nginx redis-scripts
	promtool check rules deploy/prometheus/tollgate-alerts.yml
	promtool test rules deploy/prometheus/tollgate-alerts_test.yml
	@test -z "$$(gofmt -l controlplane demo internal t bench sim docs *.go)" || { gofmt -l controlplane demo internal t bench sim docs *.go; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) test -count=1 -run TestAPIDocListsTheRoutes ./controlplane/internal/api
	$(GO) test -count=1 ./docs

# rewrite the route table of docs/api.md from the OpenAPI document (make lint checks it)
api-doc:
	$(GO) test -count=1 -run TestAPIDocListsTheRoutes ./controlplane/internal/api -update-api-doc

# docs/settings.md and nginx/tollgate_env.conf from the settings schemas (lua/tollgate/settings.lua,
# controlplane/internal/config); test-go fails while they are not current
settings-doc:
	$(GO) test -count=1 -run '^TestSettingsDoc$$' ./controlplane/internal/config -update

test-lua: deps
	busted --lua=luajit -o utfTerminal t/lua

# unit and package tests (real redis-server where they need Redis)
test-go: deps
	$(GO) test -count=1 $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v -E '/t(/|$$)')

# each go test -fuzz target (of controlplane/ and internal/) for FUZZTIME; go test fuzzes one
# target per run
FUZZTIME ?= 3s
test-fuzz: deps
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' controlplane internal | xargs -n1 dirname | sort -u); do \
	  for fz in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz ./$$dir $$fz ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$fz\$$" -fuzztime $(FUZZTIME) ./$$dir 2>&1 | grep -v '^redis: ' | tail -n 3; \
	    test $${PIPESTATUS[0]} -eq 0; \
	  done; \
	done

# integration suites: real nginx + real redis-server; one package at a time (they load the CPU)
test-integration: build
	$(GO) test -count=1 -p 1 -timeout 30m -v $(GOTEST_FLAGS) ./t/... 2>&1 | tee .test-integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go' ; test $${PIPESTATUS[0]} -eq 0

# the console: type check (vue-tsc -b), Vitest units, production build and its size budget
test-web: deps
	cd web && npm run --silent build && npx vitest run && npm run --silent size

# the console in Debian's Chromium against a real stack it starts (web/e2e; screenshots in
# web/e2e/artifacts)
test-e2e: build
	cd web && npm run --silent e2e

test: lint test-lua test-go test-fuzz test-web test-e2e test-integration
	@echo "make test: all suites passed"

# the throughput table, then the large-object table (BENCH_BIG=0 skips it; BENCH_BIG_FLAGS takes
# its flags, e.g. "-size 67108864 -rounds 1" for a smoke run)
BENCH_BIG ?= 1
bench: build
	$(GO) run ./bench/cmd/tollgate-bench $(BENCH_FLAGS)
	@if [ "$(BENCH_BIG)" != "0" ]; then $(GO) run ./bench/cmd/tollgate-bigbench $(BENCH_BIG_FLAGS); fi

# make bench also prints the instructions per request under callgrind (needs valgrind): (b), (b)
# with 10 and 100 rules, (d) and (e) over plain nginx, the JIT's traces, and the JSON line of the
# figures (docs/development.md); make bench-callgrind alone prints only that table
.PHONY: bench-callgrind
bench: bench-callgrind
bench-callgrind: build
	$(GO) run ./bench/cmd/tollgate-callgrind -rules 0,10,100 -json $(CALLGRIND_FLAGS)

# The FHS install layout (docs/deploy.md): binaries in $(PREFIX)/bin, the gateway's Lua, nginx
# includes and Redis scripts in $(PREFIX)/share/tollgate, settings in $(SYSCONFDIR)/tollgate
# (kept when present), the control plane's unit and nginx's drop-in in $(UNITDIR). Builds
# nothing: run `make build` first (make install as root should not run npm or go).
PREFIX ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
DESTDIR ?=
BIN_DIR ?= $(CURDIR)/bin
install:
	@DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" SYSCONFDIR="$(SYSCONFDIR)" UNITDIR="$(UNITDIR)" \
	  VERSION="$(VERSION)" BIN_DIR="$(BIN_DIR)" scripts/install.sh

# dist/tollgate-<version>-linux-amd64.tar.gz and its .sha256: the install tree of PREFIX=/usr
# (binaries, Lua, includes, Redis scripts, units, settings examples) plus deploy/ and the
# console's files, with SHA256SUMS inside; see docs/deploy.md
dist: build
	@VERSION="$(VERSION)" scripts/dist.sh

clean:
	rm -rf bin dist .run .test-integration.log
