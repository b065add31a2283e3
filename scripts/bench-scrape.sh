#!/usr/bin/env bash
# Scrape cost, side by side: pgwal-advisor and Debian's prometheus-postgres-exporter watching one
# throwaway cluster, each loaded by wrk on loopback (50 connections, 10 s) in interleaved rounds.
# Figures only, not a test: about 2 minutes with the defaults (5 rounds).
#
#   scripts/bench-scrape.sh                 # defaults
#   scripts/bench-scrape.sh --rounds 9 --gzip=false
#
# Needs PostgreSQL's server binaries (make deps), wrk and prometheus-postgres-exporter; the last
# two are installed here from Debian when missing (as root), with a policy-rc.d that keeps the
# exporter's packaged service from starting. The measuring is `pgwal-lab bench-scrape`
# (internal/lab/scrapebench); everything it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v prometheus-postgres-exporter >/dev/null 2>&1 || missing+=(prometheus-postgres-exporter)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bench-scrape: missing ${missing[*]}: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "bench-scrape: apt-get install ${missing[*]}" >&2
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

go build -o bin/pgwal-advisor ./cmd/pgwal-advisor
go build -o bin/pgwal-lab ./cmd/pgwal-lab
bin/pgwal-lab bench-scrape --bin bin/pgwal-advisor "$@"
