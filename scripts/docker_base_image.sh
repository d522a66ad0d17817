#!/usr/bin/env bash
# Makes the Dockerfile's base image from Debian packages where Docker Hub cannot be reached:
#   scripts/docker_base_image.sh [TAG]     (default dynamo-deno/base:bookworm)
#   docker build --build-arg BASE_IMAGE=dynamo-deno/base:bookworm -t dynamo-deno .
# A minimal bookworm root file system (mmdebstrap, from deb.debian.org, with the security
# suite the Rust stage needs), imported with `docker import`. The host's own CA
# certificates (/usr/local/share/ca-certificates/*.crt, e.g. a TLS-intercepting egress
# proxy's) are trusted inside it too, so the build's downloads pass the same proxy.
# Needs root, docker and mmdebstrap (installed with apt when missing).
set -euo pipefail

tag="${1:-dynamo-deno/base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org}"

if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "[docker_base_image] installing mmdebstrap (apt)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
fi
work="$(mktemp -d -t dynamo-base.XXXXXX)"
trap 'rm -rf "$work"' EXIT
hooks=()
for crt in /usr/local/share/ca-certificates/*.crt; do
  [ -f "$crt" ] || continue
  hooks+=(--customize-hook="copy-in $crt /usr/local/share/ca-certificates/")
done
if [ "${#hooks[@]}" -gt 0 ]; then
  hooks+=(--customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null')
fi
mmdebstrap --quiet --variant=minbase --include=ca-certificates "${hooks[@]}" bookworm "$work/rootfs.tar" \
  "deb $mirror/debian bookworm main" \
  "deb $mirror/debian bookworm-updates main" \
  "deb $mirror/debian-security bookworm-security main"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' \
  "$work/rootfs.tar" "$tag" >/dev/null
echo "$tag"
