# pgwal-advisor: build, test, demo and benchmarks. `make test` is what CI runs; `make check` is
# the fast tier for the edit-test loop.
GO      ?= go
BIN     := bin/pgwal-advisor
LAB     := bin/pgwal-lab
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# -s -w leave out the symbol table and DWARF (28 MB to 19.5 MB on disk); panics still print
# function names and lines (they come from pclntab) and `version` still reads main.version.
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all build deps test test-go check lint demo bench bench-probe clean

all: build

# build builds the daemon (bin/pgwal-advisor, what a database host installs) and the test and
# demo equipment (bin/pgwal-lab: demo, bench, the simulated disk). The daemon is built as the
# package builds it (scripts/package.sh): static, without libc mapped beside it, about 2 MB less
# resident (docs/http.md, "Footprint").
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/pgwal-advisor
	$(GO) build -ldflags "$(LDFLAGS)" -o $(LAB) ./cmd/pgwal-lab

# deps installs what a fresh Debian machine lacks (as root): postgresql, prometheus.
deps:
	@scripts/install-deps.sh

# test is the whole suite: formatting, vet, Go tests (unit and integration against real
# throwaway PostgreSQL clusters and the simulated disk) and the alert rules' promtool tests.
test: deps lint
	$(MAKE) -j2 test-go test-versions

# lint is formatting, vet, staticcheck (pinned in go.mod's tool directive: `go tool` builds it
# from the module cache, nothing to install) and the sizes the house keeps (internal/codesize:
# no non-test file over 500 lines, no function over 80 lines in the core packages).
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) run ./internal/codesize

# test-go runs every package but the version matrix: internal/lab/bench first, as its smoke runs
# of the bench take about 11 minutes and go test starts packages in the order given. Most
# integration tests wait on servers, verification windows and restarts rather than compute, so
# four of a package's parallel tests at a time (the default is GOMAXPROCS, 2 here) keep the CPUs
# busier without crowding them.
test-go:
	$(GO) test -count=1 -parallel 4 -timeout 20m ./internal/lab/bench $$($(GO) list ./... | grep -v -e '/internal/lab/versions$$' -e '/internal/lab/bench$$')

# test-versions is the version matrix (docs/versions.md): collect, check, apply and rollback
# against a throwaway cluster of each PostgreSQL major version from 14 to 18, all at once (about
# two minutes). make deps fetches the versions Debian does not ship. `make test` runs it beside
# test-go (make -j2): it waits on five servers more than it computes.
.PHONY: test-versions
test-versions:
	$(GO) test -count=1 -parallel 5 -timeout 15m -run '^TestVersions$$' ./internal/lab/versions/

# fuzz runs every fuzz target (go test -fuzz) for FUZZTIME each, one at a time on one worker
# (scripts/fuzz.sh): `make test` replays only their seed corpora and the findings kept in
# testdata/fuzz/. FUZZPKGS narrows it, e.g. `make fuzz FUZZPKGS=./collector/... FUZZTIME=10s`.
FUZZTIME ?= 60s
FUZZPKGS ?= ./...
.PHONY: fuzz
fuzz:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh $(FUZZPKGS)

# check is the fast tier: lint and every pure test (rules, parsers, statistics, golden metrics,
# journal, config); tests that need PostgreSQL, FUSE or promtool skip under -short. Under a
# minute, nothing to install. CI runs it before make test, so that a lint or unit failure ends
# the run early.
check: lint
	$(GO) test -short -count=1 -timeout 5m ./...

# demo is the README's main job: a throwaway cluster on the simulated slow disk, seed 001's
# workload, and the advisor finding and fixing the problem.
demo: deps build
	$(LAB) demo

# bench-probe prints the probe's accuracy and cost against pg_test_fsync, side by side on the
# bare disk and on the simulated disk at 1 ms and 4 ms (that part needs root and /dev/fuse).
# It takes about 6 minutes (pg_test_fsync at its default 5 s per test). Options through
# BENCHPROBE_FLAGS, e.g. BENCHPROBE_FLAGS="--json" or "--runs 3 --save bench.json".
bench-probe: build
	$(LAB) bench-probe $(BENCHPROBE_FLAGS)

# bench-fleet measures what a fleet of 100, 500 and 2000 hosts costs the Prometheus that scrapes
# it (docs/fleet.md): one real daemon served under N host identities to a real Prometheus with
# the project's rules, 2 interleaved rounds, about 20 minutes. Options through BENCHFLEET_FLAGS,
# e.g. BENCHFLEET_FLAGS="--format json" or "--hosts 100,1000 --rounds 3".
.PHONY: bench-fleet
bench-fleet: deps build
	$(LAB) bench-fleet $(BENCHFLEET_FLAGS)

# lab-patroni runs seed 001 on a real Patroni pair (Debian's patroni and etcd) twice: through the
# route by hand (TestPatroniPairSwitchover) and by the daemon in apply mode with a restart window
# (TestDaemonThroughPatroniPair), and prints the insert's time before the change, after it on the
# leader, and on the new leader after a switchover (docs/benchmarks.md, "Seed 001 under
# Patroni"). About 5 minutes; it leaves nothing running.
.PHONY: lab-patroni
lab-patroni: deps
	@log=$$(mktemp); PGWAL_PATRONI_INSERT=1 $(GO) test -count=1 -timeout 20m -v -run 'TestPatroniPairSwitchover|TestDaemonThroughPatroniPair' \
		./cmd/pgwal-advisor > $$log 2>&1; status=$$?; grep -E "^(--- |ok|FAIL)|seed 001's insert" $$log; \
		[ $$status -eq 0 ] || tail -50 $$log; rm -f $$log; exit $$status

# bench is the seed benchmark suite (as root, about 80 minutes: the neighbour grid alone takes
# about 35, the commit grid 15): each seed's scenario on the simulated disk, comparing the
# starting, the advisor's, the best grid and the static tuners' configurations. It rewrites
# docs/benchmarks.md with the tables it measured, keeping its hand-written prose. To run it in
# parts on a quiet machine: pgwal-lab bench --scenario ... --format json > part.json for each
# part, then pgwal-lab bench --report part1.json,part2.json --out docs/benchmarks.md.
bench: deps build
	$(LAB) bench --out docs/benchmarks.md

# bench-quick is the suite's smoke test (a few minutes): tiny sizes, few configurations; it tests
# the harness, not the figures.
.PHONY: bench-quick
bench-quick: deps build
	$(LAB) bench --quick

# package builds dist/pgwal-advisor_<version>_amd64.deb (deploy/package): the binary, the systemd
# unit, /etc/default/pgwal-advisor as a conffile, the pgwal-advisor system user (postinst) and
# /var/lib/pgwal-advisor/probe. nfpm comes from the Go module proxy at a pinned version.
.PHONY: package
package:
	@VERSION=$(VERSION) GO=$(GO) scripts/package.sh dist

clean:
	rm -rf bin dist
