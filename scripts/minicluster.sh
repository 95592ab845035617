#!/usr/bin/env bash
# minicluster.sh - a real multi-node Slurm 22.05 cluster (1 slurmctld + N slurmd)
# on ONE Debian 12 host, no systemd needed (daemons started by hand, as root).
#
# Each node is a separate slurmd process started with `slurmd -N nX`; all nodes
# share NodeAddr=127.0.0.1 and each listens on its own port (17001, 17002, ...).
# Jobs really run (slurmstepd -> your script, as the submitting user).
# Scheduler: sched/backfill with bf_interval=1, select/linear (whole nodes).
#
# Usage:
#   minicluster.sh install            # apt-get update + install munge slurmctld slurmd slurm-client (if missing)
#   minicluster.sh install-acct       # apt-get install slurmdbd mariadb-server (optional)
#   minicluster.sh start [N]          # start munged+slurmctld+N slurmd and wait until all N are idle;
#                                     # a cluster already running with this configuration is left
#                                     # alone (idempotent), one with another (node count, PREEMPT...)
#                                     # is restarted
#   minicluster.sh status             # daemons, sinfo, squeue; rc=0 only if slurmctld answers
#   minicluster.sh stop               # cancel jobs, shut daemons down, kill leftovers by PID (idempotent)
#   minicluster.sh clean              # stop + remove state/logs/config
#   minicluster.sh users [u1 u2 ..]   # useradd -m test users (default: alice bob), idempotent
#   minicluster.sh conf               # only (re)write and print slurm.conf
#   minicluster.sh stop-ctld          # stop slurmctld only (slurmd keep running): failure tests
#   minicluster.sh start-ctld         # start slurmctld again with its saved state
#
# Several clusters can run side by side with distinct LAB, CTLD_PORT and
# PORT_BASE (and LINK_ETC=0; clients then need SLURM_CONF=$LAB/etc/slurm.conf).
# Job output dir writable by every user: $LAB/shared (mode 1777)
#
# Tunables (environment):
#   LAB=$LAB      base dir (config in $LAB/etc, state/logs/spool in $LAB/run)
#   NODES=8                number of nodes (n1..nN)  [also first arg of start]
#   CPUS=1                 CPUs per node (any value; SlurmdParameters=config_overrides)
#   MEM=1000               RealMemory per node (MB)
#   PORT_BASE=17000        node nX listens on PORT_BASE+X
#   CTLD_PORT=6817
#   AUTH=munge|none        auth/munge (default) or auth/none+cred/none (no munged)
#   MUNGE_LOCK=/run/lock/harvest-minicluster-munge.lock
#                          machine-wide lock: munged is shared by every cluster on the
#                          machine; it is started, and stopped with the last cluster,
#                          under this lock, so clusters may start and stop at once
#   MIN_JOB_AGE=60         seconds a finished job stays visible in squeue/scontrol
#   SCHED_PARAMS=...       SchedulerParameters (default below)
#   PRIORITY=basic|multifactor
#   LINK_ETC=1             symlink /etc/slurm/slurm.conf -> $LAB/etc/slurm.conf
#                          (so every user/shell finds the config without SLURM_CONF)
#   KEEP_STATE=0           1 = do not wipe StateSaveLocation on start (job ids continue)
#   EXTRA_CONF=            extra lines appended to slurm.conf
#   PREEMPT=0              1 = add a preemptible partition over the same nodes for harvest
#                          pilots: PreemptType=preempt/partition_prio, batch gets
#                          PriorityTier=PREEMPT_TIER_HIGH and PreemptMode=OFF, the new
#                          partition PREEMPT_PARTITION gets PriorityTier=1 and:
#   PREEMPT_PARTITION=harvest  its name
#   PREEMPT_MODE=CANCEL        its PreemptMode (CANCEL or REQUEUE)
#   PREEMPT_GRACE=0            its GraceTime in seconds (SIGTERM at preemption, SIGKILL after)
#   PREEMPT_TIER_HIGH=10       batch's PriorityTier (must be above 1)
#   PREEMPT_YOUNGEST=1         1 = add preempt_youngest_first to SchedulerParameters: SLURM
#                              preempts the youngest pilots first and keeps the oldest, where
#                              the pilots' master usually runs (0: SLURM's default order, the
#                              oldest first, a master hand-over at most preemptions)
#   JOBCOMP=0              1 = JobCompType=jobcomp/filetxt: slurmctld appends a line per finished
#                          job (submit, start, end to the second) to JOBCOMP_LOC (no database)
#   JOBCOMP_LOC=$LAB/run/log/jobcomp.log
#   ACCT=0                 1 = also run MariaDB + slurmdbd (sacct works; fair-share
#                          priority across users works). Needs:
#                          apt-get install slurmdbd mariadb-server   (or: install-acct)
#                          implies AUTH=munge, PRIORITY=multifactor (fair-share weights)
#   ACCT_USERS="root alice bob"  users given an association (account 'research')
#   MYSQL_PORT=3307        private mariadbd (datadir $LAB/run/mysql, TCP 127.0.0.1)
set -euo pipefail

LAB=${LAB:-/var/tmp/harvest-slurm}
ETC=$LAB/etc
RUN=$LAB/run
CONF=$ETC/slurm.conf
NODES=${NODES:-8}
CPUS=${CPUS:-1}
MEM=${MEM:-1000}
PORT_BASE=${PORT_BASE:-17000}
CTLD_PORT=${CTLD_PORT:-6817}
AUTH=${AUTH:-munge}
MIN_JOB_AGE=${MIN_JOB_AGE:-60}
SCHED_PARAMS=${SCHED_PARAMS:-bf_interval=1,bf_resolution=1,bf_continue,batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000,bf_max_job_test=1000}
PRIORITY=${PRIORITY:-basic}
LINK_ETC=${LINK_ETC:-1}
KEEP_STATE=${KEEP_STATE:-0}
EXTRA_CONF=${EXTRA_CONF:-}
PREEMPT=${PREEMPT:-0}
PREEMPT_PARTITION=${PREEMPT_PARTITION:-harvest}
PREEMPT_MODE=${PREEMPT_MODE:-CANCEL}
PREEMPT_GRACE=${PREEMPT_GRACE:-0}
PREEMPT_TIER_HIGH=${PREEMPT_TIER_HIGH:-10}
PREEMPT_YOUNGEST=${PREEMPT_YOUNGEST:-1}
ACCT=${ACCT:-0}
JOBCOMP=${JOBCOMP:-0}
JOBCOMP_LOC=${JOBCOMP_LOC:-$LAB/run/log/jobcomp.log}
ACCT_USERS=${ACCT_USERS:-root alice bob}
MYSQL_PORT=${MYSQL_PORT:-3307}
DBD_PORT=${DBD_PORT:-6819}
if [ "$ACCT" = 1 ]; then AUTH=munge; PRIORITY=multifactor; fi
export SLURM_CONF=$CONF

log() { printf '[minicluster %s] %s\n' "$(date +%T.%3N)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

cmd_install_acct() {
  local t0; t0=$(now)
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    slurmdbd mariadb-server >/dev/null
  log "install-acct took $(elapsed "$t0") s"
}

PKGS="munge slurmctld slurmd slurm-client"

missing_pkgs() {
  local p out=""
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || out+="$p "
  done
  printf '%s' "$out"
}

cmd_install() {
  local t0 miss; t0=$(now)
  miss=$(missing_pkgs)
  if [ -z "$miss" ]; then log "already installed: $PKGS"; return 0; fi
  log "installing: $miss"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PKGS >/dev/null
  [ -z "$(missing_pkgs)" ] || die "still missing after apt-get install: $(missing_pkgs)"
  log "install took $(elapsed "$t0") s"
}

# The Debian 'slurm-wlm-emulator' package (front-end build) registers higher
# priority alternatives for slurmd/slurmctld/slurmstepd. Force the normal build.
fix_alternatives() {
  local a
  for a in slurmd slurmctld; do
    if [ -x /usr/sbin/$a-wlm-emulator ] && [ "$(readlink -f /usr/sbin/$a)" != "/usr/sbin/$a-wlm" ]; then
      update-alternatives --set $a /usr/sbin/$a-wlm >/dev/null
      log "alternatives: $a -> /usr/sbin/$a-wlm (emulator build disabled)"
    fi
  done
}

# check_preempt: refuse preemption settings slurmctld would reject or
# silently misread, before anything is written or stopped.
check_preempt() {
  case "$PREEMPT" in 0|1) ;; *) die "PREEMPT must be 0 or 1, got '$PREEMPT'" ;; esac
  [ "$PREEMPT" = 1 ] || return 0
  case "$PREEMPT_MODE" in CANCEL|REQUEUE) ;; *) die "PREEMPT_MODE must be CANCEL or REQUEUE, got '$PREEMPT_MODE'" ;; esac
  case "$PREEMPT_GRACE" in ''|*[!0-9]*) die "PREEMPT_GRACE must be whole seconds, got '$PREEMPT_GRACE'" ;; esac
  case "$PREEMPT_YOUNGEST" in 0|1) ;; *) die "PREEMPT_YOUNGEST must be 0 or 1, got '$PREEMPT_YOUNGEST'" ;; esac
  case "$PREEMPT_TIER_HIGH" in ''|*[!0-9]*|0|1) die "PREEMPT_TIER_HIGH must be an integer above 1, got '$PREEMPT_TIER_HIGH'" ;; esac
  case "$PREEMPT_PARTITION" in batch|''|*[!A-Za-z0-9_-]*) die "PREEMPT_PARTITION must be a partition name other than batch, got '$PREEMPT_PARTITION'" ;; esac
}

# render_conf: slurm.conf on stdout, without the generated-at header line.
render_conf() {
  local host auth_lines prio_lines acct_lines preempt_lines='' batch_tier='' jobcomp_lines='JobCompType=jobcomp/none'
  local sched_params=$SCHED_PARAMS
  host=$(hostname -s)
  if [ "$JOBCOMP" = 1 ]; then
    jobcomp_lines=$'JobCompType=jobcomp/filetxt\nJobCompLoc='"$JOBCOMP_LOC"
  fi
  if [ "$AUTH" = none ]; then
    auth_lines=$'AuthType=auth/none\nCredType=cred/none'
  else
    auth_lines=$'AuthType=auth/munge\nCredType=cred/munge'
  fi
  if [ "$PRIORITY" = multifactor ]; then
    prio_lines='PriorityType=priority/multifactor'
    if [ "$ACCT" = 1 ]; then
      # fair-share/age factors need slurmdbd; fast decay+recalc for tests
      prio_lines+=$'\nPriorityWeightFairshare=100000\nPriorityWeightAge=100\nPriorityMaxAge=0-1\nPriorityDecayHalfLife=0-0:30\nPriorityCalcPeriod=1\nPriorityUsageResetPeriod=NONE'
    fi
  else
    prio_lines='PriorityType=priority/basic'
  fi
  if [ "$ACCT" = 1 ]; then
    acct_lines=$'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort='"$DBD_PORT"$'\nAccountingStorageEnforce=associations\nJobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=30'
  else
    acct_lines=$'AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none'
  fi
  if [ "$PREEMPT" = 1 ]; then
    # partition_prio needs no slurmdbd. PreemptExemptTime=0: a pilot is
    # preemptible from its first second.
    preempt_lines=$'PreemptType=preempt/partition_prio\nPreemptMode='"$PREEMPT_MODE"$'\nPreemptExemptTime=0'
    batch_tier=" PriorityTier=${PREEMPT_TIER_HIGH} PreemptMode=OFF"
    # SLURM preempts the oldest pilots first by default (equal keys keep
    # the job list's order), and the master usually runs on the oldest:
    # each preemption then forced a master hand-over (docs/admin.md).
    case ",$sched_params," in
      *,preempt_youngest_first,*) ;;
      *) [ "$PREEMPT_YOUNGEST" = 1 ] && sched_params+=,preempt_youngest_first ;;
    esac
  fi
  cat <<EOF
ClusterName=lab
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmUser=root
SlurmdUser=root
${auth_lines}
StateSaveLocation=${RUN}/state
SlurmdSpoolDir=${RUN}/spool/%n
SlurmctldPidFile=${RUN}/slurmctld.pid
SlurmdPidFile=${RUN}/slurmd-%n.pid
SlurmctldLogFile=${RUN}/log/slurmctld.log
SlurmdLogFile=${RUN}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroups / no accounting: works in containers without systemd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
${acct_lines}
${jobcomp_lines}
MpiDefault=none
SwitchType=switch/none
# scheduling
SchedulerType=sched/backfill
SchedulerParameters=${sched_params}
SelectType=select/linear
${prio_lines}
${preempt_lines}
# timers
ReturnToService=2
MinJobAge=${MIN_JOB_AGE}
KillWait=2
InactiveLimit=0
SlurmdTimeout=300
SlurmctldTimeout=120
MessageTimeout=10
# slurmd reports the configured CPUs/RealMemory instead of the real hardware
SlurmdParameters=config_overrides
NodeName=n[1-${NODES}] NodeAddr=127.0.0.1 Port=[$((PORT_BASE+1))-$((PORT_BASE+NODES))] CPUs=${CPUS} RealMemory=${MEM} State=UNKNOWN
PartitionName=batch Nodes=n[1-${NODES}] Default=YES MaxTime=INFINITE State=UP${batch_tier}
EOF
  if [ "$PREEMPT" = 1 ]; then
    echo "PartitionName=${PREEMPT_PARTITION} Nodes=n[1-${NODES}] MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=${PREEMPT_MODE} GraceTime=${PREEMPT_GRACE}"
  fi
  printf '%s\n' "${EXTRA_CONF}"
}

write_conf() {
  check_preempt
  mkdir -p "$ETC"
  { echo "# generated by minicluster.sh $(date -Is)"; render_conf; } >"$CONF"
  if [ "$LINK_ETC" = 1 ]; then
    mkdir -p /etc/slurm
    if [ -e /etc/slurm/slurm.conf ] && [ ! -L /etc/slurm/slurm.conf ]; then
      mv /etc/slurm/slurm.conf /etc/slurm/slurm.conf.minicluster-bak
    fi
    ln -sfn "$CONF" /etc/slurm/slurm.conf
  fi
}

# alive PID: PID (from one of our pid files) is one of our daemons. A pid
# file left by a daemon that died names, once PIDs wrap, some other process,
# which stop must never kill.
alive() {
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
  case "$(cat "/proc/$1/comm" 2>/dev/null)" in
    slurmctld|slurmd|slurmdbd|mariadbd) return 0 ;;
  esac
  return 1
}
pidof_file() { [ -s "$1" ] && cat "$1" || true; }

# munged is one daemon per machine (/run/munge), shared by every cluster
# on it. Starting it, and stopping it when the last cluster stops, happen
# under one machine-wide lock: without it, a cluster that stops while another
# restarts sees no slurmctld, stops munged, and the other's munged start then
# fails on the lock the exiting daemon still holds. The lock is re-entrant in
# this script; daemons started under it get fd 9 closed so they never hold it.
MUNGE_LOCK=${MUNGE_LOCK:-/run/lock/harvest-minicluster-munge.lock}
munge_locked=0
munge_lock() {
  [ "$munge_locked" = 1 ] && return 0
  mkdir -p "$(dirname "$MUNGE_LOCK")"
  exec 9>>"$MUNGE_LOCK"
  flock -w "${MUNGE_LOCK_WAIT:-300}" 9 || die "another minicluster.sh held $MUNGE_LOCK for ${MUNGE_LOCK_WAIT:-300} s"
  munge_locked=1
}
munge_unlock() {
  [ "$munge_locked" = 1 ] || return 0
  flock -u 9; exec 9>&-; munge_locked=0
}

is_munged() { [ -n "${1:-}" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = munged ]; }
munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

# munge_users: SLURM daemons of any cluster on this machine still running
# (a cluster whose slurmctld alone is down for a failover test still has
# slurmd that need munged).
munge_users() {
  local d; for d in slurmctld slurmd slurmdbd; do pgrep -x "$d" 2>/dev/null || true; done | paste -sd, -
}

start_munge() {
  [ "$AUTH" = none ] && return 0
  munge_lock
  if munge_works; then
    log "munged already running"; return 0
  fi
  # a munged that does not answer is exiting (or hung): it still holds the
  # socket lock, so wait for it before starting another
  local pid i
  for pid in $(pgrep -x munged 2>/dev/null || true); do
    for i in $(seq 1 50); do is_munged "$pid" || break; sleep 0.1; done
    is_munged "$pid" && { log "munged $pid does not answer: kill -9"; kill -9 "$pid" 2>/dev/null || true; sleep 0.2; }
  done
  [ -s /etc/munge/munge.key ] || { /usr/sbin/mungekey --create 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge; chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged 9>&- || die "munged did not start, see /var/log/munge/munged.log"
  for i in $(seq 1 50); do munge_works && break; sleep 0.1; done
  munge_works || die "munged started but does not answer, see /var/log/munge/munged.log"
  cp /run/munge/munged.pid "$RUN/munged.pid"   # marks: munged was started by us
  log "munged started (pid $(cat "$RUN/munged.pid"))"
}

# stop_munge: stop the munged this cluster started, unless another
# cluster's daemons still use it; wait until it has exited, so that a start
# right after does not meet its lock.
stop_munge() {
  [ -s "$RUN/munged.pid" ] || return 0
  munge_lock
  local pid users i
  pid=$(cat "$RUN/munged.pid")
  users=$(munge_users)
  if [ -n "$users" ]; then
    log "munged $pid left running: SLURM daemons $users use it"
  elif is_munged "$pid"; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do is_munged "$pid" || break; sleep 0.1; done
    is_munged "$pid" && { log "kill -9 munged $pid"; kill -9 "$pid" 2>/dev/null || true; }
    log "munged $pid stopped"
  fi
  rm -f "$RUN/munged.pid"
}

start_acct() {
  [ "$ACCT" = 1 ] || return 0
  command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null || die "run '$0 install-acct' first"
  local db=$RUN/mysql sock=$RUN/mysql.sock i t0; t0=$(now)
  if [ ! -d "$db/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$db" --user=root --skip-test-db \
      --auth-root-authentication-method=socket >"$RUN/log/mariadb-install.log" 2>&1
  fi
  /usr/sbin/mariadbd 9>&- --no-defaults --datadir="$db" --socket="$sock" --port="$MYSQL_PORT" \
    --bind-address=127.0.0.1 --user=root --pid-file="$RUN/mariadbd.pid" \
    --log-error="$RUN/log/mariadbd.log" --innodb-buffer-pool-size=128M \
    --innodb-lock-wait-timeout=900 --skip-log-bin </dev/null >/dev/null 2>&1 &
  for i in $(seq 1 100); do mariadb -S "$sock" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
  mariadb -S "$sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw';
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    FLUSH PRIVILEGES;" || die "mariadb not reachable, see $RUN/log/mariadbd.log"
  log "mariadbd up (pid $(cat "$RUN/mariadbd.pid")) after $(elapsed "$t0") s"
  cat >"$ETC/slurmdbd.conf" <<DBDEOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=${DBD_PORT}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${MYSQL_PORT}
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
PidFile=${RUN}/slurmdbd.pid
LogFile=${RUN}/log/slurmdbd.log
DebugLevel=info
DBDEOF
  chmod 600 "$ETC/slurmdbd.conf"
  [ "$LINK_ETC" = 1 ] && ln -sfn "$ETC/slurmdbd.conf" /etc/slurm/slurmdbd.conf
  slurmdbd 9>&-   # daemonizes; reads slurmdbd.conf next to $SLURM_CONF
  for i in $(seq 1 150); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.1; done
  sacctmgr -n show cluster >/dev/null 2>&1 || die "slurmdbd did not come up, see $RUN/log/slurmdbd.log"
  sacctmgr -i -Q add cluster lab >/dev/null 2>&1 || true
  sacctmgr -i -Q add account research Description=test Organization=lab >/dev/null 2>&1 || true
  local u; for u in $ACCT_USERS; do
    if id "$u" >/dev/null 2>&1; then sacctmgr -i -Q add user "$u" Account=research >/dev/null 2>&1 || true; fi
  done
  log "slurmdbd up (pid $(cat "$RUN/slurmdbd.pid")), users: $(sacctmgr -n -P show assoc format=user | grep -v '^$' | paste -sd, -) after $(elapsed "$t0") s"
}

# node_count_conf: the node count of the running cluster's slurm.conf (0 if none).
node_count_conf() {
  local n
  n=$(sed -n 's/^NodeName=n\[1-\([0-9]*\)\].*/\1/p' "$CONF" 2>/dev/null | head -n1)
  printf '%s' "${n:-0}"
}

# conf_matches: the running cluster's slurm.conf is the one start would write
# (same nodes, ports, preemption settings...), header line aside.
conf_matches() {
  [ -s "$CONF" ] && [ "$(tail -n +2 "$CONF")" = "$(render_conf)" ]
}

any_alive() {
  local f
  for f in "$RUN"/slurmctld.pid "$RUN"/slurmd-*.pid; do
    [ -e "$f" ] && alive "$(pidof_file "$f")" && return 0
  done
  return 1
}

ctld_alive() { alive "$(pidof_file "$RUN/slurmctld.pid")"; }

# wait_idle N: wait until N nodes are idle (up to WAIT_IDLE seconds).
wait_idle() {
  local want=$1 up=0 i deadline
  deadline=$(( $(date +%s) + ${WAIT_IDLE:-30} ))
  while :; do
    up=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$up" -ge "$want" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && break
    sleep 0.1
  done
  sinfo -N >&2 || true
  die "only $up/$want nodes idle after ${WAIT_IDLE:-30} s; see $RUN/log/slurmd-n*.log"
}

start_ctld() {
  local i
  slurmctld -i 9>&-   # daemonizes; -i: ignore unreadable state files
  for i in $(seq 1 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
  scontrol ping >/dev/null 2>&1 || die "slurmctld did not come up, see $RUN/log/slurmctld.log"
}

cmd_start() {
  [ -n "${1:-}" ] && NODES=$1
  case "$NODES" in ''|*[!0-9]*|0) die "node count must be a positive integer, got '$NODES'" ;; esac
  check_preempt
  local t0 i
  t0=$(now)
  command -v slurmctld >/dev/null || die "slurm not installed: run '$0 install'"
  if ctld_alive; then
    if conf_matches && scontrol ping >/dev/null 2>&1; then
      # idempotent: the same cluster is already up; make sure every slurmd is too
      for i in $(seq 1 "$NODES"); do
        alive "$(pidof_file "$RUN/slurmd-n$i.pid")" || { mkdir -p "$RUN/spool/n$i"; slurmd -N "n$i"; log "restarted slurmd n$i"; }
      done
      log "already running with $NODES nodes (SLURM_CONF=$CONF)"
      return 0
    fi
    log "running with $(node_count_conf) nodes and another configuration, $NODES nodes wanted: restarting"
  fi
  # from here until slurmctld is up this cluster needs munged but runs no
  # daemon that shows it: hold the lock so no other cluster stops munged
  munge_lock
  if any_alive; then cmd_stop; fi
  fix_alternatives
  [ "$KEEP_STATE" = 1 ] || rm -rf "$RUN/state" "$RUN/log" "$RUN/spool" "$RUN/mysql"
  mkdir -p "$RUN/state" "$RUN/log" "$RUN/spool"
  chmod 1777 "$RUN/log"
  mkdir -p "$LAB/shared"; chmod 1777 "$LAB/shared"
  write_conf
  start_munge
  start_acct
  start_ctld
  munge_unlock
  log "slurmctld up (pid $(cat "$RUN/slurmctld.pid")) after $(elapsed "$t0") s"
  for i in $(seq 1 "$NODES"); do
    mkdir -p "$RUN/spool/n$i"
    slurmd -N "n$i"    # daemonizes; port comes from NodeName Port=[...]
  done
  wait_idle "$NODES"
  log "cluster up: $NODES nodes idle after $(elapsed "$t0") s (SLURM_CONF=$CONF)"
}

cmd_stop_ctld() {
  local pid i
  pid=$(pidof_file "$RUN/slurmctld.pid")
  alive "$pid" || { log "slurmctld not running"; return 0; }
  kill "$pid"
  for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  alive "$pid" && kill -9 "$pid"
  log "slurmctld $pid stopped (slurmd still running)"
}

cmd_start_ctld() {
  ctld_alive && { log "slurmctld already running"; return 0; }
  [ -s "$CONF" ] || die "no config at $CONF: run '$0 start N' first"
  start_ctld
  log "slurmctld up (pid $(cat "$RUN/slurmctld.pid"))"
}

cmd_status() {
  local f pid s rc=0
  for f in "$RUN"/slurmctld.pid "$RUN"/slurmd-*.pid "$RUN"/munged.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f"); if alive "$pid"; then s=alive; else s=dead; fi
    printf '%-28s pid %-7s %s\n' "$(basename "$f")" "$pid" "$s"
  done
  if scontrol ping >/dev/null 2>&1; then
    sinfo 2>&1 || true
    squeue 2>&1 || true
  else
    echo "slurmctld not reachable (SLURM_CONF=$CONF)"; rc=1
  fi
  return $rc
}

# our_stepd: PIDs of slurmstepd processes started by this cluster's slurmd
# (they inherit SLURM_CONF=$CONF), so another cluster's steps are left alone.
our_stepd() {
  local pid
  for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$CONF" && echo "$pid"
  done
  return 0
}

cmd_stop() {
  local pids=() f pid i ctld jobs
  # collect daemon PIDs first: daemons delete their pid files while shutting down
  for f in "$RUN"/slurmctld.pid "$RUN"/slurmd-*.pid; do
    pid=$(cat "$f" 2>/dev/null || true); [ -n "$pid" ] && pids+=("$pid")
  done
  ctld=$(pidof_file "$RUN/slurmctld.pid" 2>/dev/null || true)
  if alive "$ctld" && scontrol ping >/dev/null 2>&1; then
    # cancel every job (root is SlurmUser => may cancel all users' jobs)
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      scancel $jobs || true
      for i in $(seq 1 50); do [ -z "$(squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
    scontrol shutdown >/dev/null 2>&1 || true   # stops slurmctld and all slurmd
  else
    for pid in "${pids[@]}"; do alive "$pid" && kill "$pid" 2>/dev/null || true; done
  fi
  for i in $(seq 1 50); do
    local left=0; for pid in "${pids[@]}"; do alive "$pid" && left=1; done
    [ $left = 0 ] && break; sleep 0.2
  done
  for pid in "${pids[@]}"; do alive "$pid" && { log "kill -9 $pid"; kill -9 "$pid" 2>/dev/null || true; }; done
  # job steps survive slurmd death; kill this cluster's leftover slurmstepd by PID
  for pid in $(our_stepd); do
    log "killing leftover slurmstepd $pid"; kill -9 "$pid" 2>/dev/null || true
  done
  for f in "$RUN/slurmdbd.pid" "$RUN/mariadbd.pid"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if alive "$pid"; then
      kill "$pid"; for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -9 "$pid"
      log "$(basename "$f" .pid) $pid stopped"
    fi
    rm -f "$f"
  done
  stop_munge
  rm -f "$RUN"/slurmctld.pid "$RUN"/slurmd-*.pid
  log "stopped"
}

cmd_clean() {
  cmd_stop
  rm -rf "$RUN" "$ETC"
  [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$CONF" ] && rm -f /etc/slurm/slurm.conf
  [ -L /etc/slurm/slurmdbd.conf ] && rm -f /etc/slurm/slurmdbd.conf
  if [ -e /etc/slurm/slurm.conf.minicluster-bak ]; then mv /etc/slurm/slurm.conf.minicluster-bak /etc/slurm/slurm.conf; fi
  log "cleaned"
}

cmd_users() {
  local u; [ $# -gt 0 ] || set -- alice bob
  for u in "$@"; do id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"; id "$u"; done
}

case "${1:-}" in
  install) cmd_install ;;
  install-acct) cmd_install_acct ;;
  start)   shift; cmd_start "${1:-}" ;;
  stop)    cmd_stop ;;
  status)  cmd_status ;;
  stop-ctld)  cmd_stop_ctld ;;
  start-ctld) cmd_start_ctld ;;
  clean)   cmd_clean ;;
  users)   shift; cmd_users "$@" ;;
  conf)    write_conf; cat "$CONF" ;;
  *) sed -n '2,48p' "$0"; exit 2 ;;
esac
