#!/usr/bin/env bash
# Builds the harvest packages a site installs: dist/harvest_VERSION_amd64.deb
# (Debian, Ubuntu) and dist/harvest-VERSION.x86_64.rpm (RHEL family), with
# nfpm (github.com/goreleaser/nfpm, pinned, from the Go module proxy). Each
# holds the binary (static: runs on any x86-64 Linux, whatever its glibc),
# the systemd units, the example configuration under /etc/harvest/, the man
# pages and bash/zsh completion generated from the binary itself, and the
# docs; installing makes the system user `harvest`. Usage:
#   scripts/package.sh [OUTDIR]      # default: dist
#   VERSION=1.2.0 scripts/package.sh # default: the version in internal/version + the commit
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-dist}
NFPM_VERSION=v2.45.2
export PATH=$PATH:/usr/local/go/bin

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit=$commit-dirty
if [ -z "${VERSION:-}" ]; then
  # 0.1.0-dev -> 0.1.0~dev.20261126.abcdef012345: sorts before 0.1.0 in dpkg and rpm.
  base=$(sed -n 's/^var Version = "\(.*\)"$/\1/p' internal/version/version.go)
  day=$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date +%Y%m%d)
  VERSION=${base/-/\~}.$day.${commit%-dirty}
fi
case $VERSION in *[!A-Za-z0-9.~+]*) echo "package.sh: VERSION $VERSION may hold only letters, digits and . ~ + (rpm and dpkg both)" >&2; exit 2 ;; esac

stage=$OUT/stage
rm -rf "$stage" && mkdir -p "$stage/doc"
echo "building harvest $VERSION ($commit)"
# Static, so the one binary runs on RHEL 8 as on Debian 12 (sqlite3 is cgo);
# osusergo/netgo keep glibc's NSS out of it.
pkg=github.com/harvest-hpc/harvest/internal/version
CGO_ENABLED=1 go build -trimpath -tags osusergo,netgo \
  -ldflags "-s -w -X $pkg.Version=$VERSION -X $pkg.Commit=$commit -linkmode external -extldflags -static" \
  -o "$stage/harvest" ./cmd/harvest
"$stage/harvest" __docs "$stage" >/dev/null
gzip -9n "$stage"/man1/*.1
cp README.md "$stage/doc/"
cp docs/*.md "$stage/doc/"

GOBIN=$ROOT/bin/tools go install github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION
export HARVEST_VERSION=$VERSION HARVEST_STAGE=$stage
deb=$OUT/harvest_${VERSION}_amd64.deb
rpm=$OUT/harvest-${VERSION}.x86_64.rpm
rm -f "$deb" "$rpm"
bin/tools/nfpm package --config deploy/nfpm.yaml --packager deb --target "$deb" >/dev/null
bin/tools/nfpm package --config deploy/nfpm.yaml --packager rpm --target "$rpm" >/dev/null
echo "$deb"
echo "$rpm"
