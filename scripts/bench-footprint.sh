#!/usr/bin/env bash
# Footprint benchmark of `pgwal-advisor run` (issue 5): CPU share of one core and RSS at the
# default interval, /metrics latency under 50 concurrent scrapers (wrk), and pgbench tps with
# and without the daemon. Figures only, not a test: it takes about 6 minutes.
#
#   scripts/bench-footprint.sh                      # defaults
#   scripts/bench-footprint.sh --steady 120s --pgbench.pairs 5
#
# Needs PostgreSQL's server binaries (make deps) and wrk (installed here when missing and run
# as root on Debian). The measuring is `pgwal-lab bench-footprint` (internal/lab/footprint, a
# throwaway cluster from internal/lab); everything it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bench-footprint: apt-get install wrk" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null
  else
    echo "bench-footprint: wrk is missing: apt-get install wrk" >&2
    exit 1
  fi
fi

go build -o bin/pgwal-advisor ./cmd/pgwal-advisor
go build -o bin/pgwal-lab ./cmd/pgwal-lab
bin/pgwal-lab bench-footprint --bin bin/pgwal-advisor "$@"
