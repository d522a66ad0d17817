#!/usr/bin/env bash
# Installs the official Python OpenAI client (or, with `aiperf`, NVIDIA's aiperf benchmark
# client) into a venv under .dynamo/, once, pinned, and prints the venv's python.
#
#   bash scripts/setup_conformance.sh          # .dynamo/conformance-venv: openai
#   bash scripts/setup_conformance.sh aiperf   # .dynamo/aiperf-venv: aiperf (pulls openai too)
#
# Two venvs: the conformance test needs only the small client; aiperf brings ~1 GB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OPENAI_VERSION="3.51.0"
AIPERF_VERSION="0.13.0"
case "${1:-openai}" in
openai)
  venv="$root/.dynamo/conformance-venv"
  pins=("openai==$OPENAI_VERSION")
  check=(-c "import openai; assert openai.__version__ == '$OPENAI_VERSION', openai.__version__")
  ;;
aiperf)
  venv="$root/.dynamo/aiperf-venv"
  pins=("aiperf==$AIPERF_VERSION")
  check=(-m aiperf --version)
  ;;
*)
  echo "usage: setup_conformance.sh [openai|aiperf], got $1" >&2
  exit 2
  ;;
esac
stamp="$venv/.installed-${pins[0]}"
if [ -f "$stamp" ]; then
  echo "$venv/bin/python"
  exit 0
fi
echo "[conformance] installing ${pins[*]} into $venv (first run only)..." >&2
# A venv another run left half made is made again.
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
"$venv/bin/python" "${check[@]}" >/dev/null
touch "$stamp"
echo "$venv/bin/python"
