#!/usr/bin/env bash
# Checks that the Go on the PATH builds harvest: at least the version of
# go.mod's `go` line, the one place the version is stated. scripts/demo.sh
# and scripts/test.sh run it first, before anything is installed: a Go
# older than that line would try to download a newer toolchain, which an
# offline machine cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
need=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' go.mod)
[ -n "$need" ] || { echo "check-go: no 'go' line in go.mod" >&2; exit 1; }
fix="install Go $need or newer from https://go.dev/dl/ (Debian 12's golang package is too old) and put its bin directory on the PATH"
if ! command -v go >/dev/null; then
  echo "harvest needs Go $need or newer (go.mod) and no 'go' is on the PATH: $fix" >&2
  exit 1
fi
# Outside the module, so that an old go reports itself instead of
# fetching the toolchain go.mod asks for.
have=$(cd / && GOTOOLCHAIN=local go env GOVERSION 2>/dev/null || true)
have=${have#go}
if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
  if [ -n "${GOTOOLCHAIN:-}" ] && [ "$GOTOOLCHAIN" != local ]; then
    echo "go: $(command -v go) is Go ${have:-unknown}; GOTOOLCHAIN=$GOTOOLCHAIN lets it fetch Go $need (needs network)" >&2
    exit 0
  fi
  echo "harvest needs Go $need or newer (go.mod), but $(command -v go) is Go ${have:-of unknown version}: $fix; or, with network access, set GOTOOLCHAIN=go$need to let go download it" >&2
  exit 1
fi
echo "go: $have (go.mod needs $need or newer)"
