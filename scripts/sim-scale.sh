#!/bin/sh
# The scale targets of docs/sim.md (issue 34): harvest sim on generated
# months of a 5,000-node, 16-core machine (30,000 jobs) and a 1,024-node,
# 8-core machine (75,000 jobs), drawn from KTH-SP2, in every mode, each
# run's CPU time and peak RSS as harvest sim reports them on stderr.
# Nodes have cores, shared by the jobs (--cores-per-node); WHOLE=1 runs the
# whole-node model instead (--procs-per-node: jobs rounded up to nodes).
#   scripts/sim-scale.sh [WORKLOADS_DIR] [HARVEST_BINARY]
# One line per run: machine, mode, CPU s, peak RSS MB, utilisation.
set -eu
dir=${1:-../shared/workloads}
bin=${2:-harvest}
src=$dir/KTH-SP2-1996-2.1-cln.swf.gz
harvest='--harvest-backlog 1000000000 --task-seconds 300'
per=--cores-per-node
[ "${WHOLE:-0}" = 1 ] && per=--procs-per-node
run() { # label, then harvest sim's arguments
	label=$1
	shift
	err=$(mktemp)
	util=$("$bin" sim --workload "$src" "$@" 2>"$err" | sed -n 's/^utilisation *\([0-9.]*%\).*/\1/p')
	sed -n 's/^sim: \([0-9.]*\) s of CPU.*peak RSS \([0-9]*\) MB/\1 \2/p' "$err" | {
		read -r cpu rss
		printf '%s\t%s\t%s\t%s\n' "$label" "$cpu" "$rss" "$util"
	}
	rm -f "$err"
}
printf 'run\tCPU s\tpeak RSS MB\tutilisation\n'
for m in "5000 16 30000" "1024 8 75000"; do
	set -- $m
	nodes=$1 ppn=$2 jobs=$3
	gen="--generate $jobs --nodes $nodes $per $ppn"
	# Warm: 33 days of jobs, the last 30 replayed, the first 3 running
	# or queued at the start (the drawn jobs' recorded waits).
	warm="--generate $((jobs * 33 / 30)) --generate-days 33 --nodes $nodes $per $ppn --from 259200 --to 2851200 --warm"
	run "${nodes}x$ppn baseline" $gen --mode baseline
	for gb in polling preemption preemption-sizing; do
		run "${nodes}x$ppn harvest $gb" $gen --mode harvest --give-back $gb $harvest
	done
	run "${nodes}x$ppn baseline --warm" $warm --mode baseline
	run "${nodes}x$ppn harvest polling --warm" $warm --mode harvest $harvest
done
