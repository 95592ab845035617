#!/usr/bin/env bash
# The whole harvest system end to end on the real SLURM mini-cluster:
# agent + queue, background jobs of alice and bob, harvest jobs of carol and
# dave, the master's pilot scancelled and a worker killed with SIGKILL
# mid-run, two busy pilots released, then the next master's pilot killed
# with SIGKILL. Prints a summary (utilisation, throughput, failover time,
# dispatch stall after the kill -9, re-executions, attempts charged by
# faults, tasks lost and duplicated) and fails if a check fails.
# Usage: scripts/e2e-slurm.sh [e2e flags, see: go run ./scripts/e2e -h]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "e2e-slurm.sh: run as root (it starts SLURM daemons and submits as test users)" >&2; exit 1; }
scripts/deps.sh >/dev/null
# One run at a time per cluster: the real-SLURM tests take the same lock.
lock=${LAB:-/var/tmp/harvest-slurm}.lock
# -o: the lock stays with flock itself, not with what the e2e starts (a
# daemon that scripts/minicluster.sh restarts would hold it for good).
exec flock -o -w 900 "$lock" go run ./scripts/e2e "$@"
