#!/usr/bin/env bash
# One harvest on two real SLURM mini-clusters: a queue hosted by site a's
# agent, site b's agent using it with an agent token, one user's job spread
# over both; a slow site, and a contended file server with and without the
# capacity rule. Prints where the tasks ran, makespans, pilots, tasks lost
# and run twice.
# Usage: LAB=... CTLD_PORT=... PORT_BASE=... LAB_B=... CTLD_PORT_B=... PORT_BASE_B=... \
#        scripts/multisite.sh [flags, see: go run ./scripts/multisite -h]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "multisite.sh: run as root (it starts SLURM daemons and submits as carol)" >&2; exit 1; }
lab=${LAB:-/var/tmp/harvest-slurm}
lab_b=${LAB_B:-$lab-b}
# One run at a time per cluster: the real-SLURM tests take the same locks,
# always in this order.
exec 8>"$lab.lock" 9>"$lab_b.lock"
flock -w 900 8
flock -w 900 9
exec go run ./scripts/multisite "$@"
