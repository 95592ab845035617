#!/usr/bin/env bash
# minipool.sh - a real HTCondor 25.14 personal pool on ONE Debian 12 host:
# condor_master with a collector, a negotiator, a schedd and N startds, each
# startd standing in for one execute node (its own name, its own Machine
# host name nX.<basename of LAB>, its own execute directory). HTCondor is not packaged
# in Debian 12: the build comes from ../shared/htcondor/ beside the clone
# (see its README), unpacked into $LAB/release.
#
# Usage:
#   minipool.sh start [N]     # start the pool with N nodes and wait until condor_status
#                             # shows them all; a pool already running with the same
#                             # configuration is left alone, one with another is restarted
#   minipool.sh status        # daemons, condor_status, condor_q; rc=0 only if the collector answers
#   minipool.sh stop          # remove every job, shut the daemons down (idempotent)
#   minipool.sh clean         # stop + remove $LAB
#   minipool.sh env           # print the variables a shell needs to use the pool (eval "$(...)")
#   minipool.sh conf          # only (re)write and print the configuration
#
# As root (CI), HTCondor runs its daemons under CONDOR_IDS, an ordinary
# account (CONDOR_USER, created if missing): jobs that root submits run as
# that account, jobs of other users (runuser -u alice -- condor_submit) as
# those users. A job's files must be readable by the account it runs as.
#
# Several pools can run side by side with distinct POOL_LAB and COLLECTOR_PORT
# (the second one: POOL_LAB=$POOL_LAB-b COLLECTOR_PORT=+100). Clients need the
# pool's CONDOR_CONFIG, its bin/ in PATH and its lib/ in LD_LIBRARY_PATH
# (minipool.sh env prints them).
#
# Tunables (environment):
#   POOL_LAB=/var/tmp/harvest-condor   the pool's directory (release, config, local state)
#   NODES=4               execute nodes, one startd each (also the first arg of start)
#   CPUS=1                CPUs of each node
#   MEM=1000              memory of each node (MB)
#   SLOTS=partitionable   partitionable: one partitionable slot per node (as most
#                         sites run); static: CPUS static slots of one CPU per node
#   COLLECTOR_PORT=19618  the collector's port (the other daemons take free ports)
#   CONDOR_USER=condor    the account of CONDOR_IDS when started as root
#   HTCONDOR_DIST=<repo>/../shared/htcondor   where the build's tarball is
#   WAIT_SLOTS=60         seconds start waits for the slots
#   EXTRA_CONF=           extra lines appended to the configuration
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
LAB=${POOL_LAB:-/var/tmp/harvest-condor}
NODES=${NODES:-4}
CPUS=${CPUS:-1}
MEM=${MEM:-1000}
SLOTS=${SLOTS:-partitionable}
COLLECTOR_PORT=${COLLECTOR_PORT:-19618}
CONDOR_USER=${CONDOR_USER:-condor}
HTCONDOR_DIST=${HTCONDOR_DIST:-$REPO/../shared/htcondor}
EXTRA_CONF=${EXTRA_CONF:-}
TARBALL_GLOB='htcondor-*-x86_64.tar.xz'
RUNTIME_PKGS="libssl3 libsqlite3-0 libuuid1 libpcre2-8-0 libgomp1 libstdc++6"

REL=$LAB/release/htcondor
LOCAL=$LAB/local
CONF=$LAB/condor_config
export CONDOR_CONFIG=$CONF
export LD_LIBRARY_PATH=$REL/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$REL/bin:$REL/sbin:$PATH

log() { printf '[minipool %s] %s\n' "$(date +%T.%3N)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

check_args() {
  case "$NODES" in ''|*[!0-9]*|0) die "node count must be a positive integer, got '$NODES'" ;; esac
  case "$CPUS" in ''|*[!0-9]*|0) die "CPUS must be a positive integer, got '$CPUS'" ;; esac
  case "$MEM" in ''|*[!0-9]*|0) die "MEM must be a positive integer (MB), got '$MEM'" ;; esac
  case "$COLLECTOR_PORT" in ''|*[!0-9]*) die "COLLECTOR_PORT must be a port number, got '$COLLECTOR_PORT'" ;; esac
  case "$SLOTS" in partitionable|static) ;; *) die "SLOTS must be partitionable or static, got '$SLOTS'" ;; esac
  case "$LAB" in /*) ;; *) die "LAB must be an absolute path, got '$LAB'" ;; esac
}

# tarball: the build's tarball, or a clear refusal.
tarball() {
  local t
  [ -d "$HTCONDOR_DIST" ] || die "no HTCondor build: $HTCONDOR_DIST does not exist (set HTCONDOR_DIST to the directory holding $TARBALL_GLOB)"
  t=$(find "$HTCONDOR_DIST" -maxdepth 1 -name "$TARBALL_GLOB" | sort | tail -n1)
  [ -n "$t" ] || die "no HTCondor build: no $TARBALL_GLOB in $HTCONDOR_DIST"
  printf '%s' "$t"
}

missing_pkgs() {
  local p out=""
  for p in $RUNTIME_PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || out+="$p "
  done
  printf '%s' "$out"
}

# install: the Debian runtime packages the build links against.
install_pkgs() {
  local miss; miss=$(missing_pkgs)
  [ -z "$miss" ] && return 0
  [ "$(id -u)" = 0 ] || die "runtime packages missing: $miss(install them as root: apt-get install $miss)"
  log "installing: $miss"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $miss >/dev/null
  miss=$(missing_pkgs)
  [ -z "$miss" ] || die "runtime packages still missing after apt-get install: $miss"
}

# unpack: the build into $LAB/release, again only when the tarball changed.
unpack() {
  local t stamp; t=$(tarball)
  stamp="$(basename "$t") $(stat -c '%s %Y' "$t")"
  if [ -x "$REL/sbin/condor_master" ] && [ "$(cat "$LAB/release/.from" 2>/dev/null)" = "$stamp" ]; then return 0; fi
  rm -rf "$LAB/release"; mkdir -p "$LAB/release"
  tar -xJf "$t" -C "$LAB/release" || die "cannot unpack $t"
  [ -x "$REL/sbin/condor_master" ] || die "$t holds no htcondor/sbin/condor_master"
  chmod -R a+rX "$LAB/release"
  printf '%s\n' "$stamp" >"$LAB/release/.from"
  # a library the build needs and the machine lacks is named here, not at the first start
  local missing
  missing=$(ldd "$REL/sbin/condor_master" "$REL/sbin/condor_startd" "$REL/bin/condor_submit" 2>/dev/null | awk '/not found/ {print $1}' | sort -u | paste -sd' ' -)
  [ -z "$missing" ] || die "the HTCondor build needs libraries this machine lacks: $missing"
  log "unpacked $(basename "$t") into $LAB/release"
}

# ids: uid.gid for CONDOR_IDS when root, creating the account if needed.
ids() {
  if ! id "$CONDOR_USER" >/dev/null 2>&1; then
    useradd -U -M -d /nonexistent -s /usr/sbin/nologin "$CONDOR_USER" || die "cannot create the account $CONDOR_USER"
    log "created the account $CONDOR_USER for CONDOR_IDS"
  fi
  printf '%s.%s' "$(id -u "$CONDOR_USER")" "$(id -g "$CONDOR_USER")"
}

node_names() { local i; for i in $(seq 1 "$NODES"); do printf 'n%s ' "$i"; done; }

# render_conf: the configuration on stdout, without the header line.
render_conf() {
  local n u daemons="MASTER COLLECTOR NEGOTIATOR SCHEDD" slots
  for n in $(node_names); do daemons+=" STARTD_${n^^}"; done
  if [ "$SLOTS" = partitionable ]; then
    slots=$'NUM_SLOTS = 1\nNUM_SLOTS_TYPE_1 = 1\nSLOT_TYPE_1 = 100%\nSLOT_TYPE_1_PARTITIONABLE = True'
  else
    slots="NUM_SLOTS = $CPUS"
  fi
  cat <<EOF
RELEASE_DIR = $REL
LOCAL_DIR = $LOCAL
SBIN = \$(RELEASE_DIR)/sbin
BIN = \$(RELEASE_DIR)/bin
LIB = \$(RELEASE_DIR)/lib
LIBEXEC = \$(RELEASE_DIR)/libexec
LOG = \$(LOCAL_DIR)/log
SPOOL = \$(LOCAL_DIR)/spool
EXECUTE = \$(LOCAL_DIR)/execute
LOCK = \$(LOCAL_DIR)/lock
RUN = \$(LOCAL_DIR)/run
use ROLE: Personal
CONDOR_HOST = 127.0.0.1
NETWORK_INTERFACE = 127.0.0.1
COLLECTOR_HOST = 127.0.0.1:$COLLECTOR_PORT
COLLECTOR_NAME = harvest minipool $LAB
USE_SHARED_PORT = False
# open security: a pool bound to 127.0.0.1 on a test machine only
ALLOW_READ = *
ALLOW_WRITE = *
ALLOW_ADMINISTRATOR = *
ALLOW_NEGOTIATOR = *
ALLOW_DAEMON = *
SEC_DEFAULT_AUTHENTICATION = OPTIONAL
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, CLAIMTOBE
SEC_CLIENT_AUTHENTICATION_METHODS = FS, CLAIMTOBE
MAIL = /bin/true
EOF
  if [ "$(id -u)" = 0 ]; then
    u=$(ids)
    echo "CONDOR_IDS = $u"
  fi
  cat <<EOF
# fast cycles: tests wait on events, these bound how long
UPDATE_INTERVAL = 2
NEGOTIATOR_INTERVAL = 2
NEGOTIATOR_MIN_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = 1
SCHEDD_INTERVAL = 2
STARTER_UPDATE_INTERVAL = 2
PERIODIC_EXPR_INTERVAL = 5
JOB_START_DELAY = 0
SHADOW_QUEUE_UPDATE_INTERVAL = 2
# a claim serves one job: a slot freed by a pilot goes back to the negotiator
CLAIM_WORKLIFE = 0
# jobs keep the host's /tmp and /var/tmp (the pool lives under /var/tmp)
MOUNT_UNDER_SCRATCH =
# every node runs jobs at once, whatever the load of the machine
START = True
SUSPEND = False
PREEMPT = False
KILL = False
WANT_SUSPEND = False
NUM_CPUS = $CPUS
MEMORY = $MEM
$slots
# the nodes: one startd each, with its own name and host name
DAEMON_LIST = $daemons
EOF
  for n in $(node_names); do
    local N=${n^^}
    cat <<EOF
STARTD_$N = \$(STARTD)
STARTD_${N}_ARGS = -local-name $N
$N.STARTD_NAME = $n
$N.NETWORK_HOSTNAME = $n.$(basename "$LAB")
$N.STARTD_LOG = \$(LOG)/StartLog.$n
$N.EXECUTE = \$(EXECUTE)/$n
$N.STARTD_ADDRESS_FILE = \$(LOG)/.startd_address.$n
EOF
  done
  printf '%s\n' "$EXTRA_CONF"
}

write_conf() {
  mkdir -p "$LAB"
  { echo "# generated by minipool.sh $(date -Is)"; render_conf; } >"$CONF"
  chmod a+r "$CONF"
}

conf_matches() { [ -s "$CONF" ] && [ "$(tail -n +2 "$CONF")" = "$(render_conf)" ]; }

# alive PID: PID (from our pid file) is a condor_master.
alive() { [ -n "${1:-}" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = condor_master ]; }
master_pid() { cat "$LOCAL/run/master.pid" 2>/dev/null || true; }

# ours: PIDs of processes of this pool (their CONDOR_CONFIG is ours), so
# another pool's daemons and jobs are left alone.
ours() {
  local p
  for p in /proc/[0-9]*; do
    case "$(cat "$p/comm" 2>/dev/null)" in condor_*) ;; *) continue ;; esac
    { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "CONDOR_CONFIG=$CONF" && echo "${p#/proc/}"
  done
  return 0
}

# slot_count: slots the collector lists (partitionable ones, not the
# dynamic slots carved from them).
slot_count() {
  condor_status -af Name DynamicSlot 2>/dev/null | awk '$2 != "true"' | wc -l
}

# wait_slots: until the collector lists every node's slots, or WAIT_SLOTS.
wait_slots() {
  local want=$1 have=0 deadline
  deadline=$(( $(date +%s) + ${WAIT_SLOTS:-60} ))
  while :; do
    have=$(slot_count)
    [ "$have" -ge "$want" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && break
    sleep 0.2
  done
  condor_status >&2 || true
  die "only $have/$want slots after ${WAIT_SLOTS:-60} s; see $LOCAL/log/MasterLog and StartLog.n*"
}

cmd_start() {
  [ -n "${1:-}" ] && NODES=$1
  check_args
  local t0 want; t0=$(now)
  install_pkgs
  unpack
  if [ "$SLOTS" = partitionable ]; then want=$NODES; else want=$((NODES * CPUS)); fi
  if alive "$(master_pid)"; then
    if conf_matches && [ "$(slot_count)" -ge "$want" ]; then
      log "already running with $NODES nodes (CONDOR_CONFIG=$CONF)"
      return 0
    fi
    log "running with another configuration: restarting"
    cmd_stop
  elif [ -n "$(ours)" ]; then
    cmd_stop
  fi
  rm -rf "$LOCAL"
  mkdir -p "$LOCAL"/{log,spool,lock,run,execute}
  local n; for n in $(node_names); do mkdir -p "$LOCAL/execute/$n"; done
  write_conf
  if [ "$(id -u)" = 0 ]; then
    # the daemons run as CONDOR_USER and check that they own these
    chown -R "$CONDOR_USER:" "$LOCAL"/{log,spool,lock,run,execute}
  fi
  # the master daemonizes and shuts everything down on SIGTERM
  condor_master -pidfile "$LOCAL/run/master.pid" </dev/null >/dev/null 2>&1 || die "condor_master did not start; see $LOCAL/log/MasterLog"
  wait_slots "$want"
  # the schedd answers too (submits would fail before it has started)
  local deadline=$(( $(date +%s) + ${WAIT_SLOTS:-60} ))
  until condor_q -totals >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$deadline" ] && die "the schedd does not answer; see $LOCAL/log/SchedLog"
    sleep 0.2
  done
  log "pool up: $NODES nodes, $want $SLOTS slots after $(elapsed "$t0") s (CONDOR_CONFIG=$CONF)"
}

cmd_stop() {
  local pid i left
  pid=$(master_pid)
  if alive "$pid"; then
    condor_rm -all >/dev/null 2>&1 || true
    # fast shutdown: the master kills the jobs and stops its daemons (a
    # graceful one waits for the jobs' shadows, about 30 s)
    kill -QUIT "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do alive "$pid" || break; sleep 0.2; done
  fi
  left=$(ours)
  if [ -n "$left" ]; then
    log "killing leftover processes: $(echo $left)"
    kill -9 $left 2>/dev/null || true
  fi
  rm -f "$LOCAL/run/master.pid"
  log "stopped"
}

cmd_status() {
  local pid
  pid=$(master_pid)
  if alive "$pid"; then echo "condor_master pid $pid alive (CONDOR_CONFIG=$CONF)"; else echo "condor_master not running (CONDOR_CONFIG=$CONF)"; fi
  condor_status 2>&1 && condor_q -allusers 2>&1 && return 0
  return 1
}

cmd_env() {
  printf 'export CONDOR_CONFIG=%q\nexport PATH=%q:$PATH\nexport LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$CONF" "$REL/bin" "$REL/lib"
}

case "${1:-}" in
  start)  shift; cmd_start "${1:-}" ;;
  stop)   cmd_stop ;;
  status) cmd_status ;;
  clean)  cmd_stop; rm -rf "$LAB"; log "cleaned" ;;
  env)    cmd_env ;;
  conf)   check_args; unpack; write_conf; cat "$CONF" ;;
  *) sed -n '2,41p' "$0"; exit 2 ;;
esac
