#!/usr/bin/env bash
# Readies docker for tests/container_test.ts on a fresh machine of this kind: the daemon
# (Debian's docker.io, installed with apt when `dockerd` is missing, started in the
# background when no daemon answers) and a base image (debian:bookworm-slim when it can be
# pulled, else scripts/docker_base_image.sh builds dynamo-deno/base:bookworm from Debian
# packages). Exits non-zero, saying why, when docker cannot be readied; the test then skips
# with the reason.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "[setup_docker] $*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io (apt)"
  if ! { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }; then
    log "could not install docker.io"
    exit 1
  fi
fi
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /tmp/dynamo-dockerd.log)"
  ($SUDO dockerd >/tmp/dynamo-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    log "dockerd did not start: $(tail -n 3 /tmp/dynamo-dockerd.log 2>/dev/null)"
    exit 1
  fi
fi
if docker image inspect debian:bookworm-slim >/dev/null 2>&1 ||
  docker image inspect dynamo-deno/base:bookworm >/dev/null 2>&1; then
  exit 0
fi
if timeout 60 docker pull -q debian:bookworm-slim >/dev/null 2>&1; then exit 0; fi
log "Docker Hub unreachable: building dynamo-deno/base:bookworm from Debian packages (about 2 minutes)"
bash scripts/docker_base_image.sh >/dev/null
