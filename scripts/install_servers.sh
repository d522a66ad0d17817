#!/usr/bin/env bash
# Installs etcd and nats-server (Debian packages `etcd-server`, `nats-server`) when they are not
# there, for the test command and the benchmarks that start them. Exits 0 when both are there
# afterwards, 1 otherwise. The packages' own services are not needed: tests and benchmarks start
# their own servers on free loopback ports.
set -uo pipefail

have_servers() {
  command -v etcd >/dev/null 2>&1 &&
    { command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; }
}

if have_servers; then exit 0; fi
SUDO=""
# Plain sudo, as the test command always used: a user at a terminal is asked for the password.
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing etcd-server and nats-server (apt)" >&2
# Another apt run may hold the lock: wait for it (up to 5 minutes) rather than fail.
if ! { $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq &&
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    etcd-server nats-server; } >&2; then
  echo "ERROR: could not install etcd-server/nats-server with apt-get" >&2
  exit 1
fi
have_servers
