#!/usr/bin/env bash
# capture.sh - regenerate the real-SLURM fixtures in this directory from a
# minicluster (scripts/minicluster.sh), with the exact commands the adapter
# runs. Run as root from the repository root:
#   adapters/slurm/testdata/capture.sh
# It restarts the default minicluster (LAB=/var/tmp/harvest-slurm) with 4
# nodes and a second partition "short" (MaxTime=30), and leaves it stopped.
set -euo pipefail
cd "$(dirname "$0")"
MC=../../../scripts/minicluster.sh
export LAB=${LAB:-/var/tmp/harvest-slurm}
export SLURM_CONF=$LAB/etc/slurm.conf
S=$LAB/shared
FMT='%i|%u|%T|%r|%D|%N|%l|%V|%S|%Q|%P'
STATES=PENDING,RUNNING,CONFIGURING,COMPLETING
TAG=harvest-pilot

squeue_main() { SLURM_TIME_FORMAT=%s squeue -a -h -r -p "${1:-batch}" -t $STATES -o "$FMT"; }
squeue_pilots() { squeue -a -h -r -p batch -u root -n $TAG -t $STATES -o %i; }
sinfo_nodes() { sinfo -h -N -p "${1:-batch}" -o '%N|%T|%c'; }
sub() { local u=$1; shift; runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" sbatch --parsable -D "$S" -o /dev/null "$@"; }

$MC users >/dev/null
$MC stop >/dev/null 2>&1 || true
EXTRA_CONF='PartitionName=short Nodes=n[1-4] MaxTime=30 DefaultTime=10 State=UP' $MC start 4

sinfo --version >sinfo_version.txt
scontrol -o show partition >scontrol_partitions.txt
sinfo_nodes >sinfo_idle.txt
sinfo -h -N -o '%N|%T|%c' >sinfo_two_partitions.txt
squeue_main >squeue_empty.txt

# Backfill scene: A holds 3 of 4 nodes for 3 min, B needs all 4, so n4 is
# planned for B; C and D queue behind B; P is our pending pilot.
A=$(sub alice -J A_run3 -N3 -t 3 --wrap 'sleep 170')
sleep 1
B=$(sub bob -J B_big4 -N4 -t 2 --wrap 'sleep 100')
C=$(sub bob -J 'C|pipe' -N1 -t 10 --wrap 'sleep 100')
D=$(sub alice -J $'D\nnewline' -N1 --wrap 'sleep 100')
H=$(sub alice -J held -H -N1 -t 5 --wrap 'sleep 100')
P=$(printf '#!/bin/sh\nexec sleep 100\n' | sbatch --parsable -D "$S" -o /dev/null -J $TAG --nodes=1 --no-requeue --time=20 --exclusive --export=NONE)
sleep 3
echo "A=$A B=$B C=$C D=$D H=$H P=$P" >ids_backfill.txt
squeue_main >squeue_backfill.txt
squeue_pilots >squeue_pilots_backfill.txt
sinfo_nodes >sinfo_planned.txt
squeue -h -t all -j "$P" -o '%i|%u|%T|%j' >jobcheck_pilot.txt
squeue -h -t all -j "$D" -o '%i|%u|%T|%j' >jobcheck_newline.txt
squeue -h -t all -j "$C" -o '%i|%u|%T|%j' >jobcheck_foreign.txt
squeue -h -t all -j 999999 -o '%i|%u|%T|%j' >jobcheck_unknown.txt 2>jobcheck_unknown.stderr || true
scancel "$A" "$B" "$C" "$D" "$H" "$P"
squeue_main >squeue_completing.txt
sleep 2
squeue -h -t all -j "$P" -o '%i|%u|%T|%j' >jobcheck_cancelled.txt

# Unlimited jobs: without --time (365 days once running) and --time=UNLIMITED;
# a drained and a down node.
U1=$(sub alice -J U_default -N1 --wrap 'sleep 100')
U2=$(sub bob -J U_unlimited -N1 -t UNLIMITED --wrap 'sleep 100')
scontrol update nodename=n3 state=drain reason="maint test"
scontrol update nodename=n4 state=down reason="dead"
U3=$(sub bob -J U_pending -N2 --wrap 'sleep 100')
sleep 3
echo "U1=$U1 U2=$U2 U3=$U3" >ids_unlimited.txt
squeue_main >squeue_unlimited.txt
sinfo_nodes >sinfo_drained.txt
scancel "$U1" "$U2" "$U3"
scontrol update nodename=n3,n4 state=resume

# sbatch answers.
printf '#!/bin/sh\nexec true\n' | sbatch --parsable -D "$S" -o /dev/null -J $TAG --time=1 >sbatch_parsable.txt
printf '#!/bin/sh\nexec true\n' | sbatch --parsable -D "$S" -o /dev/null -p nope --time=1 >/dev/null 2>sbatch_bad_partition.stderr || true

# Controller down.
$MC stop-ctld >/dev/null 2>&1
SLURM_TIME_FORMAT=%s timeout 20 squeue -a -h -r -p batch -t $STATES -o "$FMT" >/dev/null 2>squeue_ctld_down.stderr || true
printf '#!/bin/sh\nexec true\n' | timeout 20 sbatch --parsable --time=1 >/dev/null 2>sbatch_ctld_down.stderr || true
$MC stop >/dev/null 2>&1
echo "fixtures written to $(pwd)"
