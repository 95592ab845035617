#!/usr/bin/env bash
# Installs the Debian packages harvest's tests and demo need (idempotent).
set -euo pipefail
PKGS="munge slurmctld slurmd slurm-client gcc libc6-dev sqlite3 ca-certificates chromium jq rpm bindfs fuse3 postgresql"
# the runtime libraries of the HTCondor build in ../shared/htcondor (scripts/minipool.sh)
PKGS="$PKGS libssl3 libsqlite3-0 libuuid1 libpcre2-8-0 libgomp1 libstdc++6"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  [ "$(id -u)" = 0 ] || { echo "need root to install:$missing" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d keeps the packages' postinst from starting daemons: the
  # mini-cluster starts its own.
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; trap 'rm -f /usr/sbin/policy-rc.d' EXIT; fi
  apt-get install -y -qq --no-install-recommends $missing
fi
echo "deps: ok ($PKGS)"
