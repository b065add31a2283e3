#!/usr/bin/env bash
# Builds pgwal-advisor's .deb (make package): the binary, the systemd unit, /etc/default as a
# conffile, the state and probe directories, and maintainer scripts that create the
# pgwal-advisor system user (deploy/package). The packager is nfpm, run from the Go module
# proxy at a pinned version, so nothing else needs installing.
#
# Usage: scripts/package.sh [OUTDIR]   (default dist/); VERSION overrides git describe.
# Prints the .deb's path. Exit status 3 with one line when nfpm cannot be had.
set -euo pipefail

NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0
GO=${GO:-go}

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)}

# A Debian version starts with a digit and has no hyphen outside the revision: v1.2.0-3-gabc
# becomes 1.2.0.3.gabc, an untagged abc1234-dirty 0.0.0+git.abc1234.dirty.
deb_version=${version#v}
deb_version=${deb_version//-/.}
case $deb_version in
[0-9]*) ;;
*) deb_version=0.0.0+git.$deb_version ;;
esac

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Static, so that the package depends on nothing but what its scripts use (and no libc is
# mapped beside the daemon); -s -w as make build (Makefile: panics keep their stack traces).
(cd "$root" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w -X main.version=$version" -o "$stage/pgwal-advisor" ./cmd/pgwal-advisor)
# The unit as deploy/systemd has it, with the packaged binary's path.
sed 's#/usr/local/bin/pgwal-advisor#/usr/bin/pgwal-advisor#g' "$root/deploy/systemd/pgwal-advisor.service" > "$stage/pgwal-advisor.service"
grep -q '^ExecStart=/usr/bin/pgwal-advisor ' "$stage/pgwal-advisor.service" || {
	echo "package: deploy/systemd/pgwal-advisor.service has no ExecStart=/usr/local/bin/pgwal-advisor to point at /usr/bin" >&2
	exit 1
}

# go install fetches nfpm once (the module cache keeps it); without the proxy it cannot.
if ! GOBIN=$stage "$GO" install "$NFPM" 2>"$stage/nfpm.log"; then
	echo "package: cannot build nfpm ($NFPM) from the Go module proxy: $(tail -n 1 "$stage/nfpm.log"); check GOPROXY and the network, or put nfpm in the module cache" >&2
	exit 3
fi
deb=$out/pgwal-advisor_${deb_version}_amd64.deb
rm -f "$deb"
cp "$root/deploy/systemd/pgwal-advisor.default" "$root/deploy/systemd/apply.conf" "$stage/"
cp "$root/deploy/prometheus/alerts.yml" "$root/deploy/prometheus/recording.yml" "$root/deploy/prometheus/scrape.yml" \
	"$root/deploy/grafana/pgwal-advisor.json" "$root/deploy/grafana/pgwal-advisor-fleet.json" "$stage/"
cp "$root/deploy/package/postinst" "$root/deploy/package/prerm" "$root/deploy/package/postrm" "$stage/"
(cd "$stage" && PGWAL_PKG_VERSION=$deb_version \
	./nfpm package --config "$root/deploy/package/nfpm.yaml" --packager deb --target "$deb" >/dev/null)
echo "$deb"
