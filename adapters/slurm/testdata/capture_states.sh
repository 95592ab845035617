#!/usr/bin/env bash
# capture_states.sh - capture the node states sinfo prints (power saving,
# reboot, maintenance, reservations, drain, fail...) and a hidden
# partition, from a minicluster, with the exact command the adapter runs
# (sinfo -h -N -p P -o '%N|%T|%c'). Run as root from the repository root:
#   adapters/slurm/testdata/capture_states.sh
# It restarts the minicluster of LAB (default /var/tmp/harvest-slurm; set
# LAB, CTLD_PORT, PORT_BASE, LINK_ETC=0 for another) with 8 nodes, power
# saving programs that do nothing, a RebootProgram that does nothing and a
# Hidden=YES partition, and leaves it stopped.
set -euo pipefail
cd "$(dirname "$0")"
MC=../../../scripts/minicluster.sh
export LAB=${LAB:-/var/tmp/harvest-slurm}
export SLURM_CONF=$LAB/etc/slurm.conf
S=$LAB/shared
nodes() { sinfo -h -N -p batch -o '%N|%T|%c'; }
as_alice() { runuser -u alice -- env SLURM_CONF="$SLURM_CONF" "$@"; }
# wait_state NODE STATE: until sinfo shows it (at most 30 s).
wait_state() {
	for _ in $(seq 300); do
		[ "$(sinfo -h -N -n "$1" -p batch -o %T)" = "$2" ] && return 0
		sleep 0.1
	done
	echo "node $1 never reached $2: $(sinfo -h -N -n "$1" -p batch -o %T)" >&2
	return 1
}

$MC users >/dev/null
$MC stop >/dev/null 2>&1 || true
EXTRA_CONF=$'SuspendProgram=/bin/true\nResumeProgram=/bin/true\nSuspendTime=3600\nSuspendTimeout=5\nResumeTimeout=20\nRebootProgram=/bin/true\nPartitionName=hidden Nodes=n[1-8] MaxTime=60 State=UP Hidden=YES' \
	$MC start 8

# A hidden partition, as a user (root sees every partition anyway).
as_alice scontrol -o show partition >scontrol_partitions_user.txt
as_alice scontrol -a -o show partition >scontrol_partitions_user_all.txt
as_alice sinfo -h -N -p hidden -o '%N|%T|%c' >sinfo_hidden_user.txt
as_alice sinfo -a -h -N -p hidden -o '%N|%T|%c' >/dev/null 2>sinfo_hidden_a_p.stderr || true

# Step 1: every node in another state.
scontrol update nodename=n1 state=power_down reason=capture
scontrol update nodename=n2 state=power_down_asap reason=capture
scontrol update nodename=n3 state=drain reason=capture
scontrol update nodename=n4 state=down reason=capture
scontrol update nodename=n5 state=fail reason=capture
scontrol reboot n6
scontrol create reservation reservationname=capture_maint flags=maint nodes=n7 starttime=now duration=10 users=root >/dev/null
scontrol create reservation reservationname=capture_resv nodes=n8 starttime=now duration=10 users=root >/dev/null
wait_state n7 maint
wait_state n8 reserved
nodes >sinfo_states_1.txt # idle% (powering down), drained, down, fail, reboot^, maint, reserved
wait_state n1 'idle~'
nodes >sinfo_states_2.txt # idle~ (powered down)

# Step 2: power n1 up again, drain the powered-down n2, and run a job on
# n3-n5 to see the flags of allocated nodes.
scontrol update nodename=n1 state=power_up
scontrol update nodename=n3,n4,n5 state=resume
nodes >sinfo_states_3.txt # idle# (powering up), idle* (n3/n4 just resumed, not responding yet)
J=$(sbatch --parsable -D "$S" -o /dev/null -w n3,n4,n5 -N3 -t 5 --wrap 'sleep 200')
wait_state n3 allocated
scontrol update nodename=n3 state=power_down
scontrol update nodename=n4 state=drain reason=capture
scontrol update nodename=n5 state=fail reason=capture
scontrol update nodename=n2 state=drain reason=capture
scontrol update nodename=n7 state=down reason=capture
nodes >sinfo_states_4.txt # allocated!, draining, failing, drained~, down$
SLURM_TIME_FORMAT=%s squeue -a -h -r -p batch -t PENDING,RUNNING,CONFIGURING,COMPLETING -o '%i|%u|%T|%r|%D|%N|%l|%V|%S|%Q|%P' >squeue_states_4.txt

scancel "$J"
scontrol delete reservationname=capture_maint
scontrol delete reservationname=capture_resv
$MC stop >/dev/null 2>&1
echo "fixtures written to $(pwd)"
