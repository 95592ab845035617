#!/usr/bin/env bash
# Prints docs/sim.md's give-back table: the same one-month windows of the
# KTH-SP2 and SDSC-SP2 traces as scripts/sim-report.sh, and the CTC-SP2
# month of the polling-harm measurements (days 60-90), each run without
# harvesting (baseline) and with harvesting in every give-back mode
# (`harvest sim --give-back all`: polling, preemption, preemption-sizing;
# no grace), then in both preemption modes with a 30 s grace. Delays are job by
# job against the baseline of the same window; "late vs control" divides a
# mode's late job-hours by the control's (the same baseline with the
# scheduler 1 s slower: what any small perturbation costs).
# LATENCY (default 0s) is the simulated scheduler's reaction latency: SLURM
# backfills every bf_interval (30 s by default), the simulator at once
# unless told; the control is then LATENCY + 1 s. BF_INTERVAL (default 0s:
# every pass backfills) models SLURM's two schedulers: the main one at every
# change, in priority order, stopping at the first job that cannot start,
# and backfill every BF_INTERVAL (SLURM's default bf_interval is 30s).
# BF_BUSY=1 (with BF_INTERVAL) backfills every interval even when nothing
# changed: a site whose job traffic keeps SLURM's backfill thread busy, the
# model issue 33's polling target is judged on (docs/admin.md's table).
# Usage: [LATENCY=30s] [BF_INTERVAL=30s [BF_BUSY=1]] scripts/giveback-sim-report.sh [WORKLOADS_DIR]   (default ../shared/workloads)
# Prints a markdown table on stdout; progress on stderr. About a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-../shared/workloads}
LATENCY=${LATENCY:-0s}
BF_INTERVAL=${BF_INTERVAL:-0s}
BUSY=()
if [ -n "${BF_BUSY:-}" ]; then
  [ "$BF_INTERVAL" != 0s ] || { echo "giveback-sim-report: BF_BUSY needs BF_INTERVAL (e.g. BF_INTERVAL=30s)" >&2; exit 2; }
  BUSY=(--bf-busy)
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BIN=$TMP/harvest
go build -o "$BIN" ./cmd/harvest

echo "Simulated scheduler latency $LATENCY, backfill interval $BF_INTERVAL${BF_BUSY:+ (busy thread)}; the control: the baseline with the latency 1 s longer."
echo
echo "| trace | window (days from trace start) | give-back | pilots started | harvested: held / useful (% of baseline idle) | lost task-h | foreign mean wait (s): baseline -> mode | started later / > 2 s / > 70 s later than baseline | max delay (s) | late job-h (control) | late vs control | blocked by pilots: jobs / hours / max s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
month=2592000
for spec in "KTH-SP2-1996-2.1-cln.swf.gz 100 599850 2,5,8" "SDSC-SP2-1998-4.2-cln.swf.gz 128 566129 2,5,8" "CTC-SP2-1996-3.1-cln.swf.gz 338 0 2"; do
  set -- $spec
  f=$W/$1 nodes=$2 start=$3
  t=${1%%-cln*}
  for k in ${4//,/ }; do
    from=$((start + k * month)) to=$((start + (k + 1) * month))
    days="$((k * 30))-$(((k + 1) * 30))"
    for run in "all" "preemption,preemption-sizing --grace 30s"; do
      echo "$1 window $k --give-back $run" >&2
      # shellcheck disable=SC2086
      "$BIN" sim --json --workload "$f" --nodes "$nodes" --from "$from" --to "$to" --mode harvest \
        --harvest-backlog 1000000000 --task-seconds 300 --latency "$LATENCY" --bf-interval "$BF_INTERVAL" "${BUSY[@]}" --give-back $run >"$TMP/r.json"
      grace=$([ "$run" = all ] && echo "" || echo ", 30 s grace")
      jq -r --arg t "$t" --arg k "$days" --arg g "$grace" '
        .baseline as $b | .control.delays.total_s as $c | ((1 - $b.utilization) * $b.nodes * $b.span_s) as $idle |
        .modes[] | .result as $r | .delays as $d | $r.foreign.blocked_by_pilots as $bl |
        "| \($t) | \($k) | \(.give_back)\($g) | \($r.harvest.pilots) | \($r.harvest.node_seconds/$idle*1000|round/10)% / \($r.harvest.useful_node_seconds/$idle*1000|round/10)% | \($r.harvest.lost_task_seconds/3600|round) | \($b.foreign.mean_wait_s|round) -> \($r.foreign.mean_wait_s|round) | \($d.later) / \($d.later_than_2s) / \($d.later_than_70s) of \($d.jobs) | \($d.max_s) | \($d.total_s/3600*10|round/10) (\($c/3600*10|round/10)) | \(if $c > 0 then "\($d.total_s/$c*100|round/100)x" else "-" end) | \($bl.jobs) / \($bl.sum_s/3600*10|round/10) / \($bl.max_s) |"' "$TMP/r.json"
    done
  done
done
