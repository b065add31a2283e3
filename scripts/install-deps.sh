#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to run pgwal-advisor's tests and demo:
# PostgreSQL's server binaries (initdb, pg_ctl, pgbench, pg_test_fsync) and Prometheus
# (promtool and a server for the end-to-end test), Chromium (the landing page's browser test),
# PgBouncer (the transaction-pooler test), sysbench (the lab's second OLTP load), Patroni, etcd and repmgr (the HA manager tests),
# the loop-device tools, npm, and through it the other PostgreSQL major versions the version
# matrix runs (scripts/install-pg-versions.sh, cached once per machine). It only acts as root
# with apt-get; otherwise it says what is missing and lets the tests skip or fail with their own
# clear messages.
set -euo pipefail

here=$(dirname "$0")
# Whatever apt-get did or did not do, the other PostgreSQL versions come from npm.
trap '"$here/install-pg-versions.sh"' EXIT

need=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v pg_config >/dev/null 2>&1; then
  need+=(postgresql)
fi
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  need+=(prometheus)
fi
for tool in losetup:mount mkfs.ext4:e2fsprogs npm:npm chromium:chromium pgbouncer:pgbouncer sysbench:sysbench patroni:patroni etcd:etcd-server; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
# repmgr's library and binaries go beside Debian's server (postgresql-N-repmgr, through the
# repmgr package).
if ! ls /usr/lib/postgresql/*/bin/repmgr >/dev/null 2>&1; then
  need+=(repmgr)
fi
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: missing ${need[*]}; run as root on Debian/Ubuntu to install them (apt-get install ${need[*]})" >&2
  exit 0
fi
echo "install-deps: apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The packages' own services are not wanted: tests start their own throwaway servers.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d; "$here/install-pg-versions.sh"' EXIT
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
