#!/usr/bin/env bash
# giveback-report.sh - measures the give-back modes on the real 8-node
# mini-cluster (TestRealSLURMGiveBackModes, agent/giveback_slurm_test.go)
# and prints a markdown table: per scenario and mode, the time from the
# event that makes the foreign job startable to its start, its delay
# against the same scenario without harvesting, the late job-seconds (every
# measured job's delay against the baseline's, summed: the burst's six
# jobs, one job elsewhere), the task time lost (as the
# tasks recorded it), the pilots SLURM preempted and the pilot ends the
# agent pulled in (--shrink).
# Run as root with your mini-cluster's variables exported (LAB, CTLD_PORT,
# PORT_BASE, LINK_ETC=0, SLURM_CONF); it restarts that cluster with a
# preemptible partition (PREEMPT=1). About 5 minutes.
# Usage: scripts/giveback-report.sh [RUNS]   (default 1; each run is one table)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
export HARVEST_SLURM_TESTS=1
for r in $(seq 1 "$runs"); do
  echo "run $r of $runs" >&2
  out=$(go test -count=1 -timeout 30m -run 'TestRealSLURMGiveBackModes' -v ./agent/ 2>&1) || {
    echo "$out" | tail -40 >&2
    exit 1
  }
  echo
  echo "| scenario | mode | event -> start (s) | delay vs baseline (s) | late job-s | task time lost (s) | pilots preempted | ends pulled in |"
  echo "|---|---|---|---|---|---|---|---|"
  grep -o 'FIGURES .*' <<<"$out" | sed -E 's/^FIGURES //' | awk '
    {
      match($0, /scenario="[^"]*"/); sc = substr($0, RSTART + 10, RLENGTH - 11)
      mode = lat = del = late = lost = pre = shr = ""
      n = split($0, f, " ")
      for (i = 1; i <= n; i++) {
        split(f[i], kv, "=")
        if (kv[1] == "mode") mode = kv[2]
        if (kv[1] == "latency_s") lat = kv[2]
        if (kv[1] == "delay_s") del = kv[2]
        if (kv[1] == "late_s") late = kv[2]
        if (kv[1] == "lost_task_s") lost = kv[2]
        if (kv[1] == "preempted") pre = kv[2]
        if (kv[1] == "shrunk") shr = kv[2]
      }
      if (mode == "baseline") { del = "-"; late = "-"; lost = "-"; pre = "-"; shr = "-" }
      printf "| %s | %s | %.2f | %s | %s | %s | %s | %s |\n", sc, mode, lat, (del == "-" ? "-" : sprintf("%+.2f", del)), (late == "-" ? "-" : sprintf("%.2f", late)), lost, pre, shr
    }'
done
