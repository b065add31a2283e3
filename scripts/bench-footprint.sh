#!/usr/bin/env bash
# Footprint benchmark of `pgwal-advisor run` (issue 5): its idle RSS and CPU side by side with
# Debian's postgres_exporter at one scrape a second (3 interleaved rounds), then its CPU share of
# one core and RSS at the default interval, /metrics latency under 50 concurrent scrapers (wrk),
# and pgbench tps with and without the daemon. Figures only, not a test: about 13 minutes.
#
#   scripts/bench-footprint.sh                      # defaults
#   scripts/bench-footprint.sh --idle.only          # the side-by-side idle table alone, ~7 minutes
#   scripts/bench-footprint.sh --idle.compare old=/tmp/pgwal-advisor.old --idle.only
#   scripts/bench-footprint.sh --steady 120s --pgbench.pairs 5
#
# Needs PostgreSQL's server binaries (make deps), wrk and prometheus-postgres-exporter; the last
# two are installed here from Debian when missing (as root), with a policy-rc.d that keeps the
# exporter's packaged service from starting. The daemon is built as released (make build:
# static, -s -w). The measuring is `pgwal-lab bench-footprint` (internal/lab/footprint, a
# throwaway cluster from internal/lab); everything it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v prometheus-postgres-exporter >/dev/null 2>&1 || missing+=(prometheus-postgres-exporter)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bench-footprint: missing ${missing[*]}: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "bench-footprint: apt-get install ${missing[*]}" >&2
  policy=/usr/sbin/policy-rc.d
  own_policy=
  if [ ! -e "$policy" ]; then
    # The benchmark starts its own exporter on a free port; the packaged service would watch
    # nothing and hold port 9187.
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    own_policy=1
  fi
  trap '[ -n "$own_policy" ] && rm -f "$policy"' EXIT
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

make --no-print-directory build >/dev/null
bin/pgwal-lab bench-footprint --bin bin/pgwal-advisor "$@"
