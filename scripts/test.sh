#!/usr/bin/env bash
# The project's test command: installs etcd + NATS if missing, then runs the gates
# (deno fmt --check, deno lint, deno task check, deno task check:docs, deno doc --lint mod.ts)
# and the test suite, and ends with
# "N passed, N failed[, N skipped]". Exits non-zero if anything failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DENO_VERSION="2.9.6"
export NO_COLOR=1                # plain summary lines to parse
export NPM_CONFIG_LOGLEVEL=error # keep npx quiet
export DENO_NO_UPDATE_CHECK=1

section() { printf '\n==> %s\n' "$*"; }

# 1. etcd and nats-server (the real-backend suites are half of what we test: do not pass
# without them).
if ! bash scripts/install_servers.sh; then
  echo "0 passed, 1 failed"
  exit 1
fi

# Prometheus, for the dashboard test (tests/prometheus_test.ts installs it too, and skips
# saying why when it cannot).
bash scripts/install_prometheus.sh || echo "WARNING: no prometheus: the dashboard test will be skipped" >&2
# Docker (daemon and a base image), for the container image test (it skips, saying why, when
# docker cannot be readied).
bash scripts/setup_docker.sh || echo "WARNING: no docker daemon or base image: the container test will be skipped" >&2
# Headless Chromium for tests/bench_report_test.ts (which installs it itself, or skips saying
# why, when this fails).
if ! command -v chromium >/dev/null 2>&1; then
  section "installing chromium (apt)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  { $SUDO apt-get update && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; } ||
    echo "WARNING: could not install chromium with apt: the bench report browser test will try again" >&2
fi

# 2. Deno, through npm (no global install needed). Later steps call the binary directly.
section "deno ${DENO_VERSION}"
if ! DENO="$(npx -y "deno@${DENO_VERSION}" eval 'console.log(Deno.execPath())')" || [ ! -x "$DENO" ]; then
  echo "ERROR: cannot run Deno through 'npx -y deno@${DENO_VERSION}' (is Node/npm installed and the npm registry reachable?)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
"$DENO" --version

# 3. Gates.
failed_gates=()
gate() {
  local name="$1"
  shift
  section "$name"
  if "$@"; then
    echo "$name: ok"
  else
    echo "$name: FAILED"
    failed_gates+=("$name")
  fi
}
gate "deno fmt --check" "$DENO" fmt --check
gate "deno lint" "$DENO" lint
gate "deno task check" "$DENO" task check
# The TypeScript blocks of README.md, the example READMEs and native/README.md compile as shown.
gate "deno task check:docs" "$DENO" task check:docs
gate "deno doc --lint mod.ts" "$DENO" doc --lint mod.ts
# The native transfer library (Rust; its crates and deno_bindgen's CLI are fetched once, then
# it builds offline) and its generated bindings: its tests load it.
if command -v cargo >/dev/null 2>&1; then
  gate "deno task build:native" "$DENO" task build:native
  gate "cargo test (native)" cargo test --offline --quiet --manifest-path native/Cargo.toml
else
  echo "ERROR: cargo not found: the native library cannot be built" >&2
  failed_gates+=("cargo missing")
fi

# 4. Tests: the suite in parallel, then the files that measure latency bounds alone (run
# beside the whole suite on a small machine, their bounds measure the machine's load).
SERIAL_TESTS=(tests/cancel_load_test.ts)
log="$(mktemp -t dynamo-test.XXXXXX)"
trap 'rm -f "$log"' EXIT
passed=0
failed=0
skipped=0
# Deno's summary: "ok | 12 passed (3 steps) | 0 failed | 2 ignored (4s)"; count tests, not steps.
run_tests() {
  section "deno test $*${DYN_REQUEST_PLANE:+ (DYN_REQUEST_PLANE=$DYN_REQUEST_PLANE)}"
  "$DENO" test "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local summary
  summary="$(grep -E '^(ok|FAILED) \| ' "$log" | tail -n 1 || true)"
  count() { printf '%s\n' "$summary" | grep -oE "[0-9]+ $1" | head -n 1 | grep -oE '^[0-9]+' || echo 0; }
  local p f s
  p="$(count passed)"
  f="$(count failed)"
  s="$(count ignored)"
  if [ -z "$summary" ]; then
    echo "no test summary from deno test (exit code $rc): counting the run as one failure"
    f=$((f + 1))
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "deno test exited $rc with no failed tests reported: counting one failure"
    f=1
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + s))
}
ignore="$(IFS=,; echo "${SERIAL_TESTS[*]}")"
run_tests -A --parallel --ignore="$ignore"
run_tests -A "${SERIAL_TESTS[@]}"
# The chaos suite and the cross-process tests once more on the NATS request plane (the run
# above is on the default, TCP); the runtime contract suite covers both planes in one run.
# `deno task test:chaos` runs the chaos suite on both, the cancellation-under-load test included.
NATS_PLANE_TESTS=(tests/chaos_test.ts tests/infra_restart_test.ts tests/shutdown_test.ts
  tests/overload_test.ts tests/hung_worker_test.ts tests/worker_output_test.ts
  tests/malformed_discovery_test.ts tests/reregistration_test.ts tests/security_test.ts
  tests/cross_process_test.ts)
DYN_REQUEST_PLANE=nats run_tests -A --parallel "${NATS_PLANE_TESTS[@]}"

echo
if [ "${#failed_gates[@]}" -gt 0 ]; then
  echo "failed gates (each counted as one failure): ${failed_gates[*]}"
  failed=$((failed + ${#failed_gates[@]}))
fi
line="${passed} passed, ${failed} failed"
if [ "$skipped" -gt 0 ]; then line="${line}, ${skipped} skipped"; fi
echo "$line"
[ "$failed" -eq 0 ]
