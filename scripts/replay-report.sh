#!/usr/bin/env bash
# Replays longer windows of the KTH-SP2 and SDSC-SP2 traces on the real SLURM
# mini-cluster (harvest replay: baseline twice, polling, preemption) and prints
# the markdown tables of docs/sim.md ("Replays on the real scheduler").
# Usage: scripts/replay-report.sh [WORKLOADS_DIR] [OUT_DIR]  (as root; about 2 h with the defaults, 30 min with HOURS=2 SCALE=120 DRAIN=4m)
# Environment: LAB, CTLD_PORT, PORT_BASE, LINK_ETC (scripts/minicluster.sh),
# NODES (default 16), SCALE (60), HOURS (trace hours per window, 6), RUNS
# (baseline,baseline,polling,preemption), DRAIN (15m: harvest replay --drain),
# TABLES_ONLY=1 (print the tables of the reports already in OUT_DIR, replay nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-../shared/workloads}
OUT=${2:-$(mktemp -d)}
NODES=${NODES:-16} SCALE=${SCALE:-60} HOURS=${HOURS:-6}
RUNS=${RUNS:-baseline,baseline,polling,preemption} DRAIN=${DRAIN:-15m}
if [ "${TABLES_ONLY:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] || { echo "replay-report.sh: run as root (it submits as the cluster's users)" >&2; exit 1; }
  export LAB=${LAB:-/var/tmp/harvest-slurm}
  export SLURM_CONF=${SLURM_CONF:-$LAB/etc/slurm.conf}
  scripts/minicluster.sh users alice bob carol >/dev/null
  JOBCOMP=1 PREEMPT=1 scripts/minicluster.sh start "$NODES" >&2
  BIN_DIR=$LAB/shared/replay-bin
  mkdir -p "$BIN_DIR" && chmod 755 "$BIN_DIR"
  go build -o "$BIN_DIR/harvest" ./cmd/harvest
  mkdir -p "$OUT"
  echo "Replays of $HOURS trace hours at ${SCALE}x on $NODES nodes (out: $OUT)" >&2

  # Two windows where foreign jobs start at once, one where they queue
  # (SDSC day 100: offered load 1.33 after mapping, a 10 s mean wait at 60x).
  for spec in "KTH-SP2-1996-2.1-cln.swf.gz 6647850 KTH-SP2-1996-2.1 day-70" "SDSC-SP2-1998-4.2-cln.swf.gz 5750129 SDSC-SP2-1998-4.2 day-60" \
    "SDSC-SP2-1998-4.2-cln.swf.gz 8676000 SDSC-SP2-1998-4.2 day-100"; do
    set -- $spec
    from=$2 to=$(($2 + HOURS * 3600)) dir=$OUT/$3-$4
    "$BIN_DIR/harvest" replay --workload "$W/$1" --from "$from" --to "$to" --nodes "$NODES" --scale "$SCALE" \
      --users alice,bob --harvest-user carol --runs "$RUNS" --drain "$DRAIN" --out "$dir" --json >"$dir.json"
  done
fi

echo "#### Real SLURM (harvest replay: the window's trace hours, scale and nodes in the first column)"
echo
echo "| trace, window | jobs (offered load) | run | utilisation | useful | harvested node-s: held / useful | task-s lost | foreign mean / p99 wait (s) | started > 10 s later / earlier than baseline | largest delay (s) | foreign bounded slowdown / mean NUWT / F | harvest tasks' bounded slowdown |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for f in "$OUT"/*.json; do
  name=$(basename "$f" .json)
  jq -r --arg n "$name" '
    .plan as $p | [.runs[] | .kind] as $k |
    .runs | to_entries[] | .value as $r |
    ([$k[0:.key+1][] | select(. == $r.kind)] | length) as $i |
    "| \($n), \(($p.to_s - $p.from_s)/3600) h at \($p.scale)x on \($p.nodes) nodes | \($p.jobs) (\($p.offered_load*100|round/100)) | \($r.kind)\(if $i > 1 then " \($i)" else "" end) | \($r.result.utilization*1000|round/10)% | \($r.result.useful_utilization*1000|round/10)% | \($r.result.harvest.node_seconds) / \($r.result.harvest.useful_node_seconds) | \($r.result.harvest.lost_task_seconds) | \($r.result.foreign.mean_wait_s|round) / \($r.result.foreign.p99_wait_s) | \(if $r.shift_vs_baseline then "\($r.shift_vs_baseline.later) / \($r.shift_vs_baseline.earlier)" else "-" end) | \(if $r.shift_vs_baseline then $r.shift_vs_baseline.max_later_s else "-" end) | \($r.result.foreign.bounded_slowdown.mean*100|round/100) / \($r.result.foreign.users.mean_nuwt*1000|round/1000) / \($r.result.foreign.users.fairness*1000|round/1000) | \(if $r.result.harvest.bounded_slowdown.jobs > 0 then $r.result.harvest.bounded_slowdown.mean*100|round/100 else "-" end) |"' "$f"
done
echo
echo "#### The simulator on the same scaled windows"
echo
echo "| trace, window | run | utilisation: sim / real | foreign mean wait (s): sim / real | sim - real start per job (s): mean / p50 / p90 / max | same second | blocked by pilots (sim, s) | foreign bounded slowdown: sim / real |"
echo "|---|---|---|---|---|---|---|---|"
for f in "$OUT"/*.json; do
  name=$(basename "$f" .json)
  jq -r --arg n "$name" '
    [.runs[] | .kind] as $k |
    .runs | to_entries[] | .value as $r |
    ([$k[0:.key+1][] | select(. == $r.kind)] | length) as $i |
    "| \($n) | \($r.kind)\(if $i > 1 then " \($i)" else "" end) | \($r.sim.utilization*1000|round/10)% / \($r.result.utilization*1000|round/10)% | \($r.sim.foreign.mean_wait_s|round) / \($r.result.foreign.mean_wait_s|round) | \($r.fidelity.mean_s*10|round/10) / \($r.fidelity.p50_s) / \($r.fidelity.p90_s) / \($r.fidelity.max_s) | \($r.fidelity.exact) of \($r.fidelity.jobs) | \($r.sim.foreign.blocked_by_pilots.sum_s) | \($r.sim.foreign.bounded_slowdown.mean*100|round/100) / \($r.result.foreign.bounded_slowdown.mean*100|round/100) |"' "$f"
done
