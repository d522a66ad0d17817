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
// - out=openai in front of two such echo servers: the same round trip, reasoning, logprobs
//   and usage pass through the upstream engine, streamed and not; its card comes from the
//   upstreams' /v1/models (tokenizer unknown), and TTFT, ITL and token counts are measured;
// - llama.cpp on the real SmolLM2-135M: the same shapes, logprob values (greedy picks the best
//   alternative), seed repeatability, and a forced tool choice. SmolLM2 has no tool format and
//   the engine does not constrain decoding, so that case checks the answer's shape, and any
//   call's, without requiring a call.
// Skipped, with a message, only where PyPI (Python client, SmolLM2) cannot be reached.

import assert from "node:assert/strict";
import { metricValue, MODEL as ECHO_MODEL, startDynamoRun } from "./_helpers/dynamo_run.ts";
import { runDeno } from "./_helpers/process.ts";
import { builtinTestModel } from "../mod.ts";
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

/** Options of {@linkcode conform}. */
interface ConformOptions {
  /** More checks on the running server, after the clients. */
  after?: (url: string, output: () => string) => Promise<void>;
  /** More environment for `dynamo run`. */
  env?: Record<string, string>;
  /**
   * Run the clients one after the other: a real engine batches requests that arrive together,
   * and a batch may round differently, so the seed case's two answers could differ.
   */
  oneClientAtATime?: boolean;
}

/** `dynamo run` with `args`, both clients over `cases`, then the server stopped. */
async function conform(
  args: string[],
  model: string,
  cases: readonly string[],
  options: ConformOptions = {},
): Promise<void> {
  const run = await startDynamoRun(args, options.env);
  try {
    const clients = py.python ? ["npm", "python"] as const : ["npm"] as const;
    if (options.oneClientAtATime) {
      for (const c of clients) await runClient(c, run.url, model, cases);
    } else {
      await Promise.all(clients.map((c) => runClient(c, run.url, model, cases)));
    }
    await options.after?.(run.url, run.output);
  } catch (err) {
    throw new Error(`${(err as Error).message}\n--- dynamo run output ---\n${run.output()}`);
  } finally {
    await run.stop();
  }
}

const SHAPES = [
  "chat",
  "stream",
  "completions",
  "completions_stream",
  "models",
  "n_choices",
  "logprobs",
  "fields",
  "errors",
];

Deno.test({
  name: "both openai clients conform against dynamo run out=mocker",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: () =>
    conform(["out=mocker", "--speedup-ratio", "100"], ECHO_MODEL, [
      ...SHAPES,
      "seed",
      "seed_differs",
      "json_schema_refused",
      "responses",
      "responses_stream",
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
      ["tools", "tools_stream", "reasoning", "stop", "errors"],
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
      ["out=llamacpp", smol.path!, "--dyn-tool-call-parser", "hermes", "--embedding"],
      "SmolLM2-135M-Instruct.Q4_1",
      [
        ...SHAPES,
        "seed",
        "tool_shape",
        "tools_forced",
        "json_schema",
        "embeddings",
        "responses",
        "responses_stream",
      ],
      { oneClientAtATime: true },
    ),
});

Deno.test({
  name: "both openai clients conform through out=openai in front of two upstream servers",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const parsers = ["--dyn-tool-call-parser", "hermes", "--dyn-reasoning-parser", "qwen3"];
    const upstreams = await Promise.all([startDynamoRun(parsers), startDynamoRun(parsers)]);
    try {
      await conform(
        // MODEL left out: the card names the one model the upstreams list.
        [`out=openai:${upstreams[0]!.url}`, "--upstream", upstreams[1]!.url],
        ECHO_MODEL,
        [...SHAPES, "tools", "tools_stream", "reasoning", "stop"],
        {
          after: async (url, output) => {
            assert.match(output(), /model registered model=Qwen3-0\.6B input=text upstreams=2/);
            assert.match(output(), /tokenizer="?unknown/);
            const ttft = "dynamo_frontend_time_to_first_token_seconds_count";
            const model = { model: ECHO_MODEL };
            assert.ok(await metricValue(url, ttft, model) > 0, "TTFT measured");
            assert.ok(
              await metricValue(url, "dynamo_frontend_inter_token_latency_seconds_count", model) >
                0,
              "ITL measured",
            );
            assert.ok(
              await metricValue(url, "dynamo_frontend_output_sequence_tokens_sum", model) > 0,
              "output tokens counted from the upstreams' usage",
            );
            for (const u of upstreams) {
              assert.ok(await metricValue(u.url, ttft, model) > 0, `${u.url} served requests too`);
            }
          },
          env: { DYN_LOG: "info" },
        },
      );
    } finally {
      await Promise.all(upstreams.map((u) => u.stop()));
    }
  },
});

Deno.test("out=openai with no upstream answering and no MODEL to name says so; --upstream needs it", async () => {
  const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (closed.addr as Deno.NetAddr).port;
  closed.close(); // nothing listens there now
  const cli = `${ROOT}cli/main.ts`;
  const down = await runDeno(
    [cli, "run", "in=http", `out=openai:http://127.0.0.1:${port}`, "--http-port", "0"],
    { DYN_LOG: "warn", NO_COLOR: "1" },
  );
  assert.equal(down.code, 1, down.stderr);
  assert.match(down.stderr, /cannot read the model list \(GET \/v1\/models\) of any upstream/);
  assert.match(down.stderr, /name MODEL to start before the upstream does/);
  const misplaced = await runDeno(
    [cli, "run", "in=http", "out=echo", "--upstream", "http://127.0.0.1:1"],
    { DYN_LOG: "warn", NO_COLOR: "1" },
  );
  assert.equal(misplaced.code, 2);
  assert.match(misplaced.stderr, /--upstream applies to out=openai only/);
});

Deno.test({
  name:
    "out=openai describes a model the upstream loaded from a folder here with that folder's tokenizer",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    // A vLLM-like upstream: /v1/models names the folder it loaded the model from (`root`).
    const folder = await builtinTestModel();
    const upstream = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      (req) =>
        new URL(req.url).pathname === "/v1/models"
          ? Response.json({
            object: "list",
            data: [{ id: "served-name", object: "model", root: folder, max_model_len: 2048 }],
          })
          : Response.json({ error: { message: "not here" } }, { status: 404 }),
    );
    const run = await startDynamoRun([`out=openai:http://127.0.0.1:${upstream.addr.port}`], {
      DYN_LOG: "info",
    });
    try {
      assert.match(run.output(), /upstream model folder found here/);
      // The folder's card (its tokenizer, so a token count of its own), the upstream's
      // name and context length.
      assert.match(run.output(), /model registered model=served-name input=text context=2048/);
      const models = await (await fetch(`${run.url}/v1/models`)).json();
      assert.deepEqual(models.data.map((m: { id: string }) => m.id), ["served-name"]);
    } finally {
      await run.stop();
      await upstream.shutdown();
    }
  },
});
