#!/usr/bin/env bash
# Regenerates the measured figures of docs/sim.md: the thesis submit lists
# (24 nodes) and one-month windows of the KTH-SP2 and SDSC-SP2 traces.
# Usage: scripts/sim-report.sh [WORKLOADS_DIR]   (default ../shared/workloads)
# Prints markdown tables on stdout; progress on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-../shared/workloads}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BIN=$TMP/harvest
go build -o "$BIN" ./cmd/harvest

sim() { "$BIN" sim --json "$@"; }
pct() { jq -r "$1 * 10000 | round / 100" <<<"$2"; }

echo "### Thesis submit lists (24 nodes, harvest while idle, 60 s tasks)"
echo
echo "| list | mode | utilisation | useful utilisation | harvest nodes held (avg) | harvest nodes busy (avg) | calibration waits, finish - submit (min) | foreign mean wait (s) |"
echo "|---|---|---|---|---|---|---|---|"
for n in 1 2; do
  f=$W/thesis-submit-list-$n.txt
  for m in baseline "harvest" "harvest --keep-recommended" "harvest --no-recommend"; do
    echo "thesis $n $m" >&2
    # shellcheck disable=SC2086
    r=$(sim --workload "$f" --nodes 24 --mode $m --harvest-while-idle --task-seconds 60)
    waits=$(jq -r '[.harvest.jobs[] | if .finish_s == null then "-" else ((.finish_s - .submit_s) / 60 * 10 | round / 10 | tostring) end] | join(" / ")' <<<"$r")
    jq -r --arg n "$n" --arg m "$m" --arg w "$waits" \
      '"| \($n) | \($m) | \(.utilization*10000|round/100)% | \(.useful_utilization*10000|round/100)% | \(.harvest.node_seconds/.span_s*100|round/100) | \(.harvest.useful_node_seconds/.span_s*100|round/100) | \($w) | \(.foreign.mean_wait_s|round) |"' <<<"$r"
  done
done
echo
echo "### Production traces, one-month windows, unlimited backlog of 300 s tasks"
echo
echo "| trace | window (days from trace start) | mode | pilots started | baseline idle node-h | harvested: held / useful (% of idle) | lost task-h | foreign node-h in window: baseline -> mode | foreign mean wait (s): baseline -> mode | jobs started later than baseline by > 70 s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
month=2592000
for spec in "KTH-SP2-1996-2.1-cln.swf.gz 100 599850" "SDSC-SP2-1998-4.2-cln.swf.gz 128 566129"; do
  set -- $spec
  f=$W/$1 nodes=$2 start=$3
  for k in 2 5 8; do
    from=$((start + k * month)) to=$((start + (k + 1) * month))
    win="--workload $f --nodes $nodes --from $from --to $to"
    echo "$1 window $k baseline" >&2
    # shellcheck disable=SC2086
    base=$(sim $win --mode baseline --jobs-csv "$TMP/base.csv")
    idle=$(jq -r '(1 - .utilization) * .nodes * .span_s' <<<"$base")
    bwait=$(jq -r '.foreign.mean_wait_s|round' <<<"$base")
    bfns=$(jq -r '.foreign.node_seconds/3600|round' <<<"$base")
    for m in "harvest" "harvest --keep-recommended" "harvest --no-recommend" "fixed --fixed-limit 1h" "fixed --fixed-limit 10m"; do
      echo "$1 window $k $m" >&2
      # shellcheck disable=SC2086
      r=$(sim $win --mode $m --harvest-backlog 1000000000 --task-seconds 300 --jobs-csv "$TMP/mode.csv")
      late=$(join -t, <(grep ',foreign,' "$TMP/base.csv" | sort) <(grep ',foreign,' "$TMP/mode.csv" | sort) |
        awk -F, '$5 != "" { n++; if ($11 == "" || $11 - $5 > 70) l++ } END { printf "%d of %d", l, n }')
      jq -r --arg t "${1%%-cln*}" --arg k "$((k * 30))-$(((k + 1) * 30))" --arg m "$m" --argjson idle "$idle" --arg bw "$bwait" --arg late "$late" --arg bfns "$bfns" \
        '"| \($t) | \($k) | \($m) | \(.harvest.pilots) | \($idle/3600|round) | \(.harvest.node_seconds/$idle*1000|round/10)% / \(.harvest.useful_node_seconds/$idle*1000|round/10)% | \(.harvest.lost_task_seconds/3600|round) | \($bfns) -> \(.foreign.node_seconds/3600|round) | \($bw) -> \(.foreign.mean_wait_s|round) | \($late) |"' <<<"$r"
    done
  done
done
