#!/usr/bin/env bash
# Sets everything up on a fresh Debian 12 machine and runs a demo harvest:
#   1. installs SLURM (munge, slurmctld, slurmd, slurm-client) from Debian's packages,
#   2. builds harvest and installs it as /usr/local/bin/harvest (BIN),
#   3. starts a real 8-node SLURM cluster on this machine (scripts/minicluster.sh), with a
#      preemptible partition for the pilots (PREEMPT=1; PREEMPT=0 runs without it: polling give-back),
#   4. starts `harvest agent` (policy loop + queue on /run/harvest/queue.sock, SOCKET),
#   5. submits background batch jobs for alice and bob that leave a hole,
#      one of which ends early so the nodes must be given back (SLURM preempts the pilots),
#   6. submits a harvest job for carol (200 sub-datasets) and waits for it with a progress bar,
#   7. shows the result, the agent's decisions (`harvest explain`) and where to look next.
# The agent keeps running afterwards; `scripts/demo.sh stop` stops it and the cluster.
# Usage: scripts/demo.sh [run|stop]   (as root)
# Several demos can run side by side: LAB (and minicluster.sh's CTLD_PORT,
# PORT_BASE, LINK_ETC, SLURM_CONF, PREEMPT), STATE, PORT, SOCKET and BIN move the
# cluster, the agent's state, its TCP port, its Unix socket and the
# directory harvest is installed in.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LAB=${LAB:-/var/tmp/harvest-slurm}
DEMO=$LAB/shared/demo
STATE=${STATE:-/var/tmp/harvest-demo}
PORT=${PORT:-8470}
SOCKET=${SOCKET:-/run/harvest/queue.sock}
BIN=${BIN:-/usr/local/bin}
# The pilots go to a preemptible partition SLURM preempts the moment a
# foreign job needs their nodes (the agent's --give-back auto finds it).
export PREEMPT=${PREEMPT:-1}
export HARVEST_QUEUE=unix://$SOCKET # for the harvest commands below
export PATH=$BIN:$PATH:/usr/local/go/bin

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (it installs packages and starts SLURM daemons)" >&2; exit 1; }

# stop_agent: stop the demo's agent and wait until it has exited (it folds
# its queue and closes the database on the way out). The pid file may be
# stale: a PID that is not a `harvest agent` any more is left alone.
stop_agent() {
  local pid i
  pid=$(cat $STATE/agent.pid 2>/dev/null || true)
  if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "harvest agent "; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "agent $pid still running after 10 s: kill -9" >&2; kill -9 "$pid"; }
  fi
  rm -f $STATE/agent.pid
}

stop() {
  stop_agent
  scripts/minicluster.sh stop >/dev/null 2>&1 || true
  echo "demo stopped"
}
case "${1:-run}" in
  stop) stop; exit 0 ;;
  run) ;;
  *) echo "usage: scripts/demo.sh [run|stop]" >&2; exit 2 ;;
esac
scripts/check-go.sh # the Go of go.mod, before anything is installed

say "1/7 Debian packages"
scripts/deps.sh

say "2/7 build"
go build -o bin/harvest ./cmd/harvest
install -D -m 0755 bin/harvest $BIN/harvest
harvest version

say "3/7 SLURM mini-cluster (8 nodes, backfill scheduler$([ "$PREEMPT" = 1 ] && echo ", preemptible partition for the pilots"))"
scripts/minicluster.sh users alice bob carol >/dev/null
scripts/minicluster.sh start 8
scancel -u alice >/dev/null 2>&1 || true; scancel -u bob >/dev/null 2>&1 || true
scancel -n harvest-pilot >/dev/null 2>&1 || true
sinfo

say "4/7 harvest agent"
stop_agent
rm -rf $STATE $DEMO; mkdir -p $STATE $DEMO/state $DEMO/pilots; chmod 755 $DEMO
nohup harvest agent --state-dir $STATE --shared-dir $DEMO/state --listen 127.0.0.1:$PORT --socket $SOCKET \
  --allowed-root $LAB/shared --poll 2s --margin 30s --mini-time 10s \
  --pilot-command "$BIN/harvest pilot" --pilot-output "$DEMO/pilots/pilot-%j.out" \
  --dump-snapshots $STATE/rounds >$STATE/agent.log 2>&1 &
echo $! > $STATE/agent.pid
for _ in $(seq 50); do [ -S $SOCKET ] && break; sleep 0.1; done
[ -S $SOCKET ] || { cat $STATE/agent.log; exit 1; }
echo "agent pid $(cat $STATE/agent.pid), log $STATE/agent.log"

say "5/7 other users' batch jobs: 5 of 8 nodes busy, a 6-node job waits for sim-a (limit 3 min, done after 20 s): 3 nodes are a hole"
runuser -u alice -- sbatch -Q -D /tmp -o /dev/null -J sim-a -N 3 -t 3 --wrap "sleep 20"
runuser -u bob   -- sbatch -Q -D /tmp -o /dev/null -J sim-b -N 2 -t 5 --wrap "sleep 240"
runuser -u alice -- sbatch -Q -D /tmp -o /dev/null -J big   -N 6 -t 2 --wrap "sleep 30"
sleep 2
squeue

say "6/7 carol harvests a dataset of 200 sub-datasets (batches of 5, 0.5 s per task)"
for i in $(seq -w 1 200); do mkdir -p $DEMO/carol/dataset/sample$i; echo "sample $i" > $DEMO/carol/dataset/sample$i/reads.txt; done
chown -R carol $DEMO/carol
echo '$ harvest submit dataset --batch-size 5 --wait -- /bin/sh -c "sleep 0.5; wc -c {input}/reads.txt > {output}"'
cd $DEMO/carol
runuser -u carol -- env HARVEST_QUEUE=$HARVEST_QUEUE harvest submit dataset --batch-size 5 --wait -- /bin/sh -c 'sleep 0.5; wc -c {input}/reads.txt > {output}'
cd "$ROOT"

say "7/7 results"
runuser -u carol -- env HARVEST_QUEUE=$HARVEST_QUEUE harvest jobs
out=$(runuser -u carol -- env HARVEST_QUEUE=$HARVEST_QUEUE harvest status 1 --json | sed -n 's/.*"output_dir": *"\([^"]*\)".*/\1/p')
echo "outputs: $(ls "$out" | wc -l) files in $out, e.g.: $(cat "$out/sample001")"
echo; echo '# harvest explain --last 12 --acting     # the agent tells where it dumps its rounds'
harvest explain --last 12 --acting || true
echo
squeue
cat <<MSG

The agent is still running: try
  harvest users                      # fair-share standing
  harvest admin nodes                # floor and cap of pilot nodes (root is admin on the socket)
  curl -s --unix-socket $SOCKET http://x/metrics | grep ^harvest_ | head
  scripts/demo.sh stop               # stop the agent and the cluster
MSG
