// deno-lint-ignore-file no-console -- a test that prints what the clients reported
// OpenAI conformance: the official npm `openai` client (scripts/conformance/openai_npm.ts) and
// the official Python `openai` package (scripts/conformance/openai_python.py, pinned, installed
// into .dynamo/conformance-venv by scripts/setup_conformance.sh) run the same cases against
// `dynamo run` with three engines:
// - the mocker: answer shapes, usage, logprobs, seed (same seed same answer, another seed
//   another), accepted fields, error shapes;
// - echo with the hermes and qwen3 parsers: the deterministic tool round trip (call, tool
//   result, final answer; streamed and not) and the reasoning split (echo writes its prompt
//   back, so the prompt scripts the answer);
// - llama.cpp on the real SmolLM2-135M: the same shapes, logprob values (greedy picks the best
//   alternative), seed repeatability, and a forced tool choice. SmolLM2 has no tool format and
//   the engine does not constrain decoding, so that case checks the answer's shape, and any
//   call's, without requiring a call.
// Skipped, with a message, only where PyPI (Python client, SmolLM2) cannot be reached.

import assert from "node:assert/strict";
import { MODEL as ECHO_MODEL, startDynamoRun } from "./_helpers/dynamo_run.ts";
import { smolLm2 } from "./_helpers/smollm2.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const NPM_SCRIPT = `${ROOT}scripts/conformance/openai_npm.ts`;
const PY_SCRIPT = `${ROOT}scripts/conformance/openai_python.py`;
/** Each client's run of the cases ends within this. */
const CLIENT_DEADLINE_MS = 120_000;

/** The venv's python, or why the Python client is not there (PyPI unreachable). */
async function conformancePython(): Promise<{ python?: string; reason?: string }> {
  const setup = await new Deno.Command("bash", {
    args: [`${ROOT}scripts/setup_conformance.sh`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (setup.success) return { python: new TextDecoder().decode(setup.stdout).trim() };
  const why = new TextDecoder().decode(setup.stderr).slice(-400);
  const reachable = await fetch("https://pypi.org/simple/openai/", {
    signal: AbortSignal.timeout(10_000),
  }).then((r) => (r.body?.cancel(), true), () => false);
  // PyPI answers, so the failure is ours: fail the tests rather than skip them.
  if (reachable) throw new Error(`scripts/setup_conformance.sh failed with PyPI reachable: ${why}`);
  return { reason: `the Python openai client cannot be installed (PyPI unreachable): ${why}` };
}

const py = await conformancePython();
if (py.reason) console.warn(`conformance_test: Python client skipped: ${py.reason}`);
const smol = await smolLm2();

/** Runs one client over `cases`; asserts it exited 0 and reported `ok` for every case. */
async function runClient(
  client: "npm" | "python",
  baseUrl: string,
  model: string,
  cases: readonly string[],
): Promise<void> {
  const common = ["--base-url", baseUrl, "--model", model, "--cases", cases.join(",")];
  const [cmd, args] = client === "npm"
    ? [Deno.execPath(), ["run", "-A", NPM_SCRIPT, ...common]]
    : [py.python!, [PY_SCRIPT, ...common]];
  const out = await new Deno.Command(cmd, {
    args,
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
    signal: AbortSignal.timeout(CLIENT_DEADLINE_MS),
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  for (const line of text.split("\n")) {
    if (/^(ok|FAIL) /.test(line)) console.log(`  [${client}] ${line}`);
  }
  assert.equal(out.code, 0, `${client} client failed:\n${text}`);
  for (const name of cases) {
    assert.match(text, new RegExp(`^ok ${name}: `, "m"), `${client}: no "ok ${name}" in\n${text}`);
  }
}

/** `dynamo run` with `args`, both clients over `cases`, then the server stopped. */
async function conform(args: string[], model: string, cases: readonly string[]): Promise<void> {
  const run = await startDynamoRun(args);
  try {
    await runClient("npm", run.url, model, cases);
    if (py.python) await runClient("python", run.url, model, cases);
  } catch (err) {
    throw new Error(`${(err as Error).message}\n--- dynamo run output ---\n${run.output()}`);
  } finally {
    await run.stop();
  }
}

const SHAPES = ["chat", "stream", "completions", "logprobs", "fields", "errors"];

Deno.test({
  name: "both openai clients conform against dynamo run out=mocker",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: () =>
    conform(["out=mocker", "--speedup-ratio", "100"], ECHO_MODEL, [
      ...SHAPES,
      "seed",
      "seed_differs",
    ]),
});

Deno.test({
  name: "both openai clients make a tool round trip and get the reasoning split (echo engine)",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: () =>
    conform(
      ["out=echo", "--dyn-tool-call-parser", "hermes", "--dyn-reasoning-parser", "qwen3"],
      ECHO_MODEL,
      ["tools", "tools_stream", "reasoning", "errors"],
    ),
});

Deno.test({
  name: `both openai clients conform against dynamo run out=llamacpp on SmolLM2${
    smol.path ? "" : ` (skipped: ${smol.reason})`
  }`,
  ignore: smol.path === undefined,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: () =>
    conform(
      ["out=llamacpp", smol.path!, "--dyn-tool-call-parser", "hermes"],
      "SmolLM2-135M-Instruct.Q4_1",
      [...SHAPES, "seed", "tool_shape"],
    ),
});
