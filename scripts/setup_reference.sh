#!/usr/bin/env bash
# Installs the reference system (ai-dynamo 1.6.1 from PyPI) into .dynamo/reference-venv, once,
# and prints the venv's python. Its frontend and mocker need no GPU.
#
# `pip install ai-dynamo==1.6.1` fails on a machine that reaches only PyPI: its dependency
# aisimulate==0.13.0 is a stub that downloads the real wheel from pypi.nvidia.com. Nothing the
# frontend and the mocker run imports it (both start and serve without it), so this installs
# ai-dynamo without dependencies and every other dependency of it, pinned as 1.6.1 declares them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.dynamo/reference-venv"
stamp="$venv/.ai-dynamo-1.6.1"
if [ -f "$stamp" ]; then
  echo "$venv/bin/python"
  exit 0
fi
# Tests running in parallel may all ask at once: one installs, the others wait for it.
if command -v flock >/dev/null; then
  mkdir -p "$root/.dynamo"
  exec 9>"$root/.dynamo/.reference-venv.lock"
  flock -w 1200 9
  if [ -f "$stamp" ]; then
    echo "$venv/bin/python"
    exit 0
  fi
fi
echo "[reference] installing ai-dynamo 1.6.1 into $venv (first run only)..." >&2
python3 -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
"${pip[@]}" "ai-dynamo-runtime==1.6.1" "aiohttp>=3.14.3,<4.0" "certifi>=2026.10.19" \
  "kubernetes>=32.0.1,<33.0.0" "msgspec>=0.19.0" "prometheus-client>=0.23.1,<1.0" \
  "pyzmq>=26.0.0" "redis>=6.2.0,<9.0.0" "tqdm>=4.0.0" "transformers>=4.56.0" \
  "typing-extensions>=4.10.0" "zstandard>=0.23.0,<1.0" >&2
"${pip[@]}" --no-deps "ai-dynamo==1.6.1" >&2
"$venv/bin/python" -m dynamo.frontend --help >/dev/null
touch "$stamp"
echo "$venv/bin/python"
