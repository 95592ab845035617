#!/usr/bin/env bash
# Runs every Go fuzz target of the repository for a short time each.
# Usage: scripts/fuzz.sh [DURATION]   (default 5s per target)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5s}
n=0
while IFS=: read -r file name; do
  pkg=./$(dirname "$file")
  echo "fuzz $pkg $name ($T)"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$T" "$pkg" >/tmp/fuzz-$name.log 2>&1 || { cat /tmp/fuzz-$name.log; exit 1; }
  n=$((n+1))
done < <(grep -rHoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)' . | sed -E 's#^\./##; s#:func #:#' | sort)
echo "fuzz: $n targets, no failures"
