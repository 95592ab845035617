#!/bin/sh
# The agent and its pilots run as the system account "harvest" (the
# units' User=): made here unless the site made it already (e.g. in LDAP,
# to give it the same uid on the compute nodes).
set -e
if ! getent group harvest >/dev/null; then
  groupadd --system harvest
fi
if ! getent passwd harvest >/dev/null; then
  useradd --system --gid harvest --home-dir /var/lib/harvest --no-create-home \
    --shell /usr/sbin/nologin --comment "harvest agent and pilots" harvest
fi
