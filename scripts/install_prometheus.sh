#!/usr/bin/env bash
# Installs the Prometheus server (Debian package `prometheus`) when it is not on PATH, for
# tests/prometheus_test.ts. Exits 0 when `prometheus` is there afterwards, 1 otherwise.
# The package's own service is not needed: the test starts its own server.
set -uo pipefail

if command -v prometheus >/dev/null 2>&1; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
echo "installing prometheus (apt)" >&2
# Another apt run may hold the lock: wait for it (up to 5 minutes) rather than fail.
if ! { $SUDO apt-get -o DPkg::Lock::Timeout=300 update -qq &&
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends prometheus; } >&2; then
  echo "ERROR: could not install prometheus with apt-get" >&2
  exit 1
fi
command -v prometheus >/dev/null 2>&1
