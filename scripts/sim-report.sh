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
echo "| trace | window (days from trace start) | mode | pilots started | baseline idle node-h | harvested: held / useful (% of idle) | lost task-h | foreign node-h in window: baseline -> mode | foreign mean wait (s): baseline -> mode | started > 70 s later / earlier than baseline | blocked by pilots: jobs / hours / p99 / max (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
month=2592000
# shift BASE.csv RUN.csv: foreign jobs started > 70 s later (or not at all) / earlier.
shift_counts() {
  join -t, <(grep ',foreign,' "$1" | sort) <(grep ',foreign,' "$2" | sort) |
    awk -F, '$5 != "" { n++; if ($11 == "" || $11 - $5 > 70) l++; else if ($5 - $11 > 70) e++ } END { printf "%d / %d of %d", l, e, n }'
}
SCHED=$TMP/sched.md MODELS=$TMP/models.md
: >"$SCHED"; : >"$MODELS"
for spec in "KTH-SP2-1996-2.1-cln.swf.gz 100 599850" "SDSC-SP2-1998-4.2-cln.swf.gz 128 566129"; do
  set -- $spec
  f=$W/$1 nodes=$2 start=$3
  for k in 2 5 8; do
    from=$((start + k * month)) to=$((start + (k + 1) * month))
    win="--workload $f --nodes $nodes --from $from --to $to"
    t=${1%%-cln*} days="$((k * 30))-$(((k + 1) * 30))"
    echo "$1 window $k baseline" >&2
    # shellcheck disable=SC2086
    base=$(sim $win --mode baseline --jobs-csv "$TMP/base.csv")
    idle=$(jq -r '(1 - .utilization) * .nodes * .span_s' <<<"$base")
    bwait=$(jq -r '.foreign.mean_wait_s|round' <<<"$base")
    bfns=$(jq -r '.foreign.node_seconds/3600|round' <<<"$base")
    jq -r --arg t "$t" --arg k "$days" '"| \($t) | \($k) | baseline | \(.foreign.bounded_slowdown.mean*10|round/10) | \(.foreign.users.count) | \(.foreign.users.mean_nuwt*100|round/100) | \(.foreign.users.fairness|round) | - | - |"' <<<"$base" >>"$SCHED"
    # The noise floor: the same baseline with a scheduler 1 s slower.
    # shellcheck disable=SC2086
    sim $win --mode baseline --latency 1s --jobs-csv "$TMP/noise.csv" >/dev/null
    echo "| $t | $days | baseline --latency 1s (noise floor) | - | - | - | - | - | - | $(shift_counts "$TMP/base.csv" "$TMP/noise.csv") | - |"
    for m in "harvest" "harvest --keep-recommended" "harvest --no-recommend" "fixed --fixed-limit 1h" "fixed --fixed-limit 10m"; do
      echo "$1 window $k $m" >&2
      # shellcheck disable=SC2086
      r=$(sim $win --mode $m --harvest-backlog 1000000000 --task-seconds 300 --jobs-csv "$TMP/mode.csv")
      late=$(shift_counts "$TMP/base.csv" "$TMP/mode.csv")
      jq -r --arg t "$t" --arg k "$days" --arg m "$m" --argjson idle "$idle" --arg bw "$bwait" --arg late "$late" --arg bfns "$bfns" \
        '"| \($t) | \($k) | \($m) | \(.harvest.pilots) | \($idle/3600|round) | \(.harvest.node_seconds/$idle*1000|round/10)% / \(.harvest.useful_node_seconds/$idle*1000|round/10)% | \(.harvest.lost_task_seconds/3600|round) | \($bfns) -> \(.foreign.node_seconds/3600|round) | \($bw) -> \(.foreign.mean_wait_s|round) | \($late) | \(.foreign.blocked_by_pilots as $b | "\($b.jobs) / \($b.sum_s/3600*10|round/10) / \($b.p99_s) / \($b.max_s)") |"' <<<"$r"
      if [ "$m" = harvest ]; then
        jq -r --arg t "$t" --arg k "$days" '"| \($t) | \($k) | harvest | \(.foreign.bounded_slowdown.mean*10|round/10) | \(.foreign.users.count) | \(.foreign.users.mean_nuwt*100|round/100) | \(.foreign.users.fairness|round) | \(.harvest.bounded_slowdown.mean|round) | \(.harvest.users.mean_nuwt*100|round/100) |"' <<<"$r" >>"$SCHED"
      fi
    done
    for mo in "" "--warm" "--warm --reservations 100" "--warm --priority multifactor"; do
      echo "$1 window $k model [$mo]" >&2
      # shellcheck disable=SC2086
      r=$(sim $win --mode baseline $mo)
      jq -r --arg t "$t" --arg k "$days" --arg m "${mo:-cold start (default)}" \
        '.foreign.recorded as $r | "| \($t) | \($k) | \($m) | \($r.jobs) | \($r.mean_wait_s|round) | \($r.sim_mean_wait_s|round) | \($r.sim_mean_wait_s/$r.mean_wait_s*100|round/100) | \($r.pearson*100|round/100) | \($r.spearman*100|round/100) |"' <<<"$r" >>"$MODELS"
    done
  done
done
echo
echo "### Schedule figures (Klusáček 2011): bounded slowdown (10 s), per-user NUWT, fairness F"
echo
echo "| trace | window | mode | foreign mean bounded slowdown | foreign users | foreign mean NUWT | foreign F | harvest tasks' mean bounded slowdown | harvest NUWT |"
echo "|---|---|---|---|---|---|---|---|---|"
cat "$SCHED"
echo
echo "### Models against the waits the traces recorded (baseline)"
echo
echo "| trace | window | model | jobs | recorded mean wait (s) | simulated mean wait (s) | simulated / recorded | Pearson | Spearman |"
echo "|---|---|---|---|---|---|---|---|---|"
cat "$MODELS"
