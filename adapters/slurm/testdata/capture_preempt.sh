#!/usr/bin/env bash
# capture_preempt.sh - regenerate the preemption, --time-min and EndTime
# fixtures (preempt_*.txt) from a minicluster, with the commands the adapter
# runs. Run as root from the repository root, with your cluster's LAB,
# CTLD_PORT, PORT_BASE and LINK_ETC=0 exported:
#   adapters/slurm/testdata/capture_preempt.sh
# It restarts that cluster with 4 nodes three times (no preemption; a
# preemptible partition "harvest" with GraceTime=0; the same with
# GraceTime=30 and then with preempt_send_user_signal) and leaves it stopped.
set -euo pipefail
cd "$(dirname "$0")"
MC=../../../scripts/minicluster.sh
export LAB=${LAB:-/var/tmp/harvest-slurm}
export SLURM_CONF=$LAB/etc/slurm.conf
S=$LAB/shared
sub() { local u=$1; shift; runuser -u "$u" -- env SLURM_CONF="$SLURM_CONF" sbatch --parsable -D "$S" -o /dev/null "$@"; }
job() { scontrol -o show job "$1"; }
# stamp TIME: scontrol's local-time format, in UTC as the adapter sends it.
stamp() { TZ=UTC date -d "@$1" +%Y-%m-%dT%H:%M:%S; }

$MC users >/dev/null
$MC stop >/dev/null 2>&1 || true

# 1. No preemption: the config the adapter reads says so.
PREEMPT=0 $MC start 4
scontrol show config >preempt_config_off.txt
scontrol -o show partition >preempt_partitions_off.txt

# 2. A preemptible partition with GraceTime=0, first with SLURM's own
# preemption order (the oldest pilots first), then as minicluster.sh sets
# it up by default (SchedulerParameters=preempt_youngest_first).
PREEMPT=1 PREEMPT_GRACE=0 PREEMPT_YOUNGEST=0 $MC start 4
scontrol show config >preempt_config_on.txt
PREEMPT=1 PREEMPT_GRACE=0 $MC start 4
scontrol show config >preempt_config_youngest.txt
scontrol -a -o show partition >preempt_partitions_on.txt

# --time-min on 22.05: backfill starts the job with TimeLimit = TimeMin, even
# in a 10-minute hole (A ends in 10 min, B waits for all 4 nodes).
A=$(sub alice -J A_hole -N3 -t 10 --wrap 'sleep 600')
sleep 1
B=$(sub alice -J B_all -N4 -t 5 --wrap 'sleep 10')
sleep 1
P=$(sub bob -J harvest-pilot -N1 -t 30 --time-min=2 --wrap 'sleep 600')
sleep 3
job "$P" >preempt_job_timemin.txt

# EndTime: the owner pulls the end in; extending and another user's update fail.
now=$(date +%s)
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$P" EndTime="$(stamp $((now + 3600)))" \
  >/dev/null 2>preempt_endtime_extend.stderr || true
runuser -u alice -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$P" EndTime="$(stamp $((now + 45)))" \
  >/dev/null 2>preempt_endtime_other_user.stderr || true
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$P" EndTime="$(stamp $((now + 45)))"
job "$P" >preempt_job_shrunk.txt
# ...and what scontrol says for a pending job, a time in the past, an
# unknown id and a finished job.
Q=$(sub bob -J harvest-pilot -N4 -t 5 --wrap 'sleep 600')
sleep 1
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$Q" EndTime="$(stamp $((now + 60)))" \
  >/dev/null 2>preempt_endtime_pending.stderr || true
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$P" EndTime="$(stamp $((now - 60)))" \
  >/dev/null 2>preempt_endtime_past.stderr || true
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId=999999 EndTime="$(stamp $((now + 60)))" \
  >/dev/null 2>preempt_endtime_unknown.stderr || true
scancel "$A" "$B" "$P" "$Q"
sleep 2
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$P" EndTime="$(stamp $((now + 60)))" \
  >/dev/null 2>preempt_endtime_finished.stderr || true

# Pilots in the preemptible partition, a foreign job that preempts two of
# them, alice's job queued in the preemptible partition, a floor pilot in
# batch whose end bob pulls in; then the snapshot's squeue commands.
for i in 1 2 3; do sub bob -J harvest-pilot -p harvest -N1 -t 30 --wrap 'sleep 600' >/dev/null; done
FLOOR=$(sub bob -J harvest-pilot -N1 -t 30 --wrap 'sleep 600')
sleep 2
F=$(sub alice -J F_two -N2 -t 5 --wrap 'sleep 600')
L=$(sub alice -J L_low -p harvest -N1 -t 5 --wrap 'sleep 600')
sleep 2
now=$(date +%s)
runuser -u bob -- env SLURM_CONF="$SLURM_CONF" TZ=UTC scontrol update JobId="$FLOOR" EndTime="$(stamp $((now + 300)))"
STATES=PENDING,RUNNING,CONFIGURING,COMPLETING
SLURM_TIME_FORMAT=%s squeue -a -h -r -p batch,harvest -t $STATES -o '%i|%u|%T|%r|%D|%N|%l|%V|%S|%Q|%P' >preempt_squeue_jobs.txt
squeue -a -h -r -p batch,harvest -u bob -n harvest-pilot -t $STATES -o %i >preempt_squeue_pilots.txt
SLURM_TIME_FORMAT=%s squeue -a -h -r -p batch,harvest -u bob -n harvest-pilot -t RUNNING -o '%i|%e' >preempt_squeue_pilot_ends.txt
echo "now=$now F=$F L=$L FLOOR=$FLOOR" >preempt_ids.txt
scancel -u bob; scancel "$F" "$L"

# 3. GraceTime=30: without preempt_send_user_signal the batch script gets no
# signal at preemption; with it (and --signal=B:TERM@N) it gets SIGTERM.
PREEMPT=1 PREEMPT_GRACE=30 PREEMPT_YOUNGEST=0 $MC start 4
scontrol -a -o show partition >preempt_partitions_grace.txt
scontrol show config >preempt_config_grace_nosignal.txt
PREEMPT=1 PREEMPT_GRACE=30 PREEMPT_YOUNGEST=0 EXTRA_CONF=SlurmctldParameters=preempt_send_user_signal $MC start 4
scontrol show config >preempt_config_grace_signal.txt
$MC stop >/dev/null 2>&1
echo "fixtures written to $(pwd)"
