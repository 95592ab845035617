#!/usr/bin/env bash
# Runs every test of harvest: unit tests, short fuzz runs, the real-SLURM
# integration tests on a local mini-cluster, and the end-to-end scenario.
# Installs what it needs from Debian's packages (root), so it works on a
# fresh Debian 12 machine. Usage: scripts/test.sh [--quick]
#   --quick   unit tests only (no apt, no SLURM, no fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1

step() { printf '\n=== %s (%s)\n' "$*" "$(date +%T)"; }
export PATH=$PATH:/usr/local/go/bin:$HOME/go/bin
scripts/check-go.sh # the Go of go.mod, before anything is installed

if [ "$QUICK" = 0 ]; then
  step "installing Debian packages"
  scripts/deps.sh
fi

step "build"
go build -o bin/harvest ./cmd/harvest
export PATH=$ROOT/bin:$PATH

step "vet"
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
[ -z "$unformatted" ] || { echo "gofmt needed on: $unformatted" >&2; exit 1; }

if [ "$QUICK" = 0 ]; then
  step "staticcheck and deadcode (zero findings)"
  # Pinned versions from the Go module proxy, installed next to the build.
  GOBIN=$ROOT/bin/tools go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
  GOBIN=$ROOT/bin/tools go install golang.org/x/tools/cmd/deadcode@v0.52.0
  bin/tools/staticcheck ./...
  dead=$(bin/tools/deadcode -test ./...)
  [ -z "$dead" ] || { echo "deadcode: unreachable functions:"; echo "$dead"; exit 1; } >&2
fi

if [ "$QUICK" = 1 ]; then
  step "unit tests"
  go test ./...
  echo "skipped in --quick: the queue's suites on PostgreSQL (HARVEST_TEST_DB=postgres; scripts/test.sh without --quick runs them)"
  exit 0
fi

step "starting the SLURM mini-cluster"
# The tests use two clusters side by side (internal/slurmtest): this one,
# and $LAB-b with ports +100, started on first use. Those this run starts
# are stopped when it ends, pass or fail (HARVEST_KEEP_CLUSTERS=1 keeps
# them for a look); a cluster already running before (the demo's) is left
# running.
LAB=${LAB:-/var/tmp/harvest-slurm}
cluster_b() { LAB=$LAB-b CTLD_PORT=$((${CTLD_PORT:-6817} + 100)) PORT_BASE=$((${PORT_BASE:-17000} + 100)) LINK_ETC=0 "$@"; }
ran_a=0 ran_b=0 ran_pool=0
LAB=$LAB scripts/minicluster.sh status >/dev/null 2>&1 && ran_a=1
cluster_b scripts/minicluster.sh status >/dev/null 2>&1 && ran_b=1
stop_clusters() {
  [ "${HARVEST_KEEP_CLUSTERS:-0}" = 1 ] && return 0
  step "stopping the mini-clusters this run started"
  [ "$ran_b" = 1 ] || cluster_b scripts/minicluster.sh stop >/dev/null 2>&1 || echo "could not stop $LAB-b" >&2
  [ "$ran_a" = 1 ] || LAB=$LAB scripts/minicluster.sh stop >/dev/null 2>&1 || echo "could not stop $LAB" >&2
  [ "$ran_pool" = 1 ] || scripts/minipool.sh stop >/dev/null 2>&1 || echo "could not stop the HTCondor pool" >&2
}
trap stop_clusters EXIT
scripts/minicluster.sh users >/dev/null
LAB=$LAB scripts/minicluster.sh start 8

step "starting the HTCondor personal pool"
# scripts/minipool.sh: HTCondor 25.14 from ../shared/htcondor, 4 startds
# as 4 nodes (/var/tmp/harvest-condor, collector port 19618), up in about
# 10 s; stopped at exit like the clusters. The real-HTCondor tests
# (HARVEST_HTCONDOR_TESTS=1: the adapter's, the e2e harvest) take turns on it.
scripts/minipool.sh status >/dev/null 2>&1 && ran_pool=1
scripts/minipool.sh start 4

step "all tests, real SLURM included"
# Packages that use a mini-cluster hold its lock (internal/slurmtest); with
# HARVEST_SLURM_LABS=2 a test takes whichever of two clusters is free (the
# second, $LAB-b with ports +100, starts on first use), so two packages'
# real-SLURM tests run at once. -p 4: those packages mostly wait on the
# clusters' real time, and with go test's default of one package per core
# a two-cluster test waiting for both locks would hold one of the 2 slots.
# The tests that need both clusters at once (slurmtest.RequireTwo) run in the
# next step, when no other package holds either (HARVEST_SLURM_TWO=later).
HARVEST_SLURM_TWO=later HARVEST_HTCONDOR_TESTS=1 HARVEST_SLURM_LABS=2 HARVEST_REQUIRE_BROWSER=1 HARVEST_REQUIRE_FUSE=1 HARVEST_SLURM_TESTS=1 go test -p 4 -timeout 20m ./... 2>&1 | tee /tmp/harvest-test.log
status=${PIPESTATUS[0]}
passed=$(grep -c '^ok ' /tmp/harvest-test.log || true)
failed=$(grep -c '^FAIL[[:space:]]' /tmp/harvest-test.log || true)
echo "packages: $passed passed, $failed failed"
[ "$status" = 0 ] || exit "$status"

step "two clusters at once, and the queue's suites on PostgreSQL"
# The store's suite, its copy to PostgreSQL (queue/dbcopy), the queue's
# conformance suite and the kill -9 durability test again, on PostgreSQL
# (internal/pgtest: a throwaway cluster of Debian's postgresql in
# \$TMPDIR/harvest-pgtest-UID on a Unix socket, started once and reused; a
# schema per test), about 5 minutes of mostly CPU, beside the tests that
# need both SLURM clusters at once (mostly waiting on the clusters' real
# time; about 5 minutes).
HARVEST_TEST_DB=postgres go test -timeout 20m ./queue/store ./queue ./queue/httpapi ./queue/dbcopy > /tmp/harvest-test-pg.log 2>&1 &
pg_pid=$!
two=0
HARVEST_SLURM_LABS=2 HARVEST_SLURM_TESTS=1 go test -timeout 20m -run 'RunSideBySide|RestartAtOnce|TwoRealClusters|TwoAgentsOnOneDatabase' ./internal/slurmtest ./scripts/multisite 2>&1 | tee /tmp/harvest-test-two.log || two=$?
# Two agents on one PostgreSQL database, kill -9 of one (issue 32's run;
# the line above ran it on one shared SQLite file).
[ "$two" = 0 ] && { HARVEST_TEST_DB=postgres HARVEST_SLURM_LABS=2 HARVEST_SLURM_TESTS=1 go test -count=1 -timeout 10m -run 'TwoAgentsOnOneDatabase' -v ./scripts/multisite 2>&1 | grep -E '^(ok|FAIL|---|PASS)|lost|twice|DONE' | tee -a /tmp/harvest-test-two.log || two=$?; }
pg=0
wait "$pg_pid" || pg=$?
echo "--- PostgreSQL:"
cat /tmp/harvest-test-pg.log
[ "$two" = 0 ] || exit "$two"
[ "$pg" = 0 ] || exit "$pg"

# --- benchmark figures (added by the queue helper for issue 17; the lead owns this script) ---
# Reported, not pass/fail: benchmarks, never timed tests, each a few
# seconds (the pull across 10,000 users spends ~20 s storing their jobs
# first). The end-to-end dispatch as the README's headline (50,000 tasks,
# real queue, 1,000 users -> master -> worker processes -> queue, with the
# queue's write transactions), the master alone, the queue's share of
# dispatch in process (one site and two), the master's checkpoint commit
# and core per task, a 1,000-task
# pull across 10,000 users, a 100,000-entry submission (the README's
# 1,000,000-entry figure: `harvest bench submit`, ~80 s with the dataset).
# First the machine's own floor (`harvest bench host`, 20 s): how often
# it stretches a 0.5 ms computation past 5 ms, to read the dispatch's
# slow transactions against.
step "benchmarks (figures only)"
{
  harvest bench host --duration 20s
  harvest bench dispatch
  harvest bench dispatch --in-memory --tasks 20000
  go test ./queue -run '^$' -bench DispatchCycle -benchtime 10000x
  go test ./master -run '^$' -bench 'CheckpointCommit|MasterCore' -benchtime 20000x -benchmem
  go test ./queue -run '^$' -bench 'PullAcrossUsers/users=10000' -benchtime 100x
  harvest bench submit --entries 100000
} 2>&1 | tee /tmp/harvest-bench.log
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (figures scale with it)"
# --- end of the benchmark step ---

step "packages: build, install, check"
# scripts/package.sh builds the .deb and the .rpm; the .deb is installed
# here (dpkg -i), its harvest runs, its units pass systemd-analyze verify
# (no running systemd needed), the .rpm's file list is checked; then the
# package is removed again (the harvest user and /etc/harvest stay).
scripts/package.sh dist >/tmp/harvest-package.log
deb=$(grep '\.deb$' /tmp/harvest-package.log) rpm=$(grep '\.rpm$' /tmp/harvest-package.log)
built=$(sed -n 's/^building harvest \(.*\)$/\1/p' /tmp/harvest-package.log)
dpkg -i "$deb" >/dev/null
installed=$(/usr/bin/harvest version)
echo "$installed"
case $installed in "harvest $built "*) ;; *) echo "installed: $installed; built: $built" >&2; exit 1 ;; esac
systemd-analyze verify /usr/lib/systemd/system/harvest-agent.service /usr/lib/systemd/system/harvest-queue.service
debfiles=$(dpkg-deb -c "$deb" | awk '{print substr($6, 2)}') rpmfiles=$(rpm -qlp "$rpm")
for f in /usr/bin/harvest /etc/harvest/agent.yaml /usr/lib/systemd/system/harvest-agent.service \
  /usr/lib/systemd/system/harvest-queue.service /usr/share/man/man1/harvest-agent.1.gz /usr/share/bash-completion/completions/harvest; do
  grep -qx "$f" <<<"$debfiles" || { echo "the .deb lacks $f" >&2; exit 1; }
  grep -qx "$f" <<<"$rpmfiles" || { echo "the .rpm lacks $f" >&2; exit 1; }
done
dpkg -r harvest >/dev/null

step "short fuzz runs"
# 5,000 executions per target (about 3 minutes for all): a smoke run that
# keeps CI short; `scripts/fuzz.sh 200000x` searches deeper.
scripts/fuzz.sh 5000x

step "end to end on real SLURM"
# The pilots' shared state directory on a bindfs (FUSE) mount without lock
# forwarding, as a cluster file system: no extra run, no extra time.
scripts/e2e-slurm.sh --fuse-state
step "done"
echo "fuzz targets and the end-to-end scenario passed"
echo "packages: $passed passed, 0 failed"
