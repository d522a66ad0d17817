// Tests of the `dynamo` command, run as a subprocess the way users run it; the
// instances/call tests serve the hello_world worker on real etcd + NATS.

import assert from "node:assert/strict";
import { DistributedRuntime } from "../mod.ts";
import { serveWorker } from "../examples/hello_world/worker.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";
import { runDeno, type RunResult } from "./_helpers/process.ts";
import { startDynamoRun } from "./_helpers/dynamo_run.ts";

/** Empty values make DistributedRuntime.fromEnv() pick the embedded default. */
const ROOT = new URL("..", import.meta.url).pathname;
const EMBEDDED_ENV = { ETCD_ENDPOINTS: "", NATS_SERVER: "" };

/** Runs `dynamo ...args` (cli/main.ts) from the repository root; killed after `timeoutMs`. */
function dynamo(
  args: string[],
  env: Record<string, string> = EMBEDDED_ENV,
  timeoutMs = 30_000,
): Promise<RunResult> {
  return runDeno(["cli/main.ts", ...args], env, timeoutMs);
}

function jsonLines(stdout: string): unknown[] {
  return stdout.trim().split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

Deno.test("dynamo --help lists the subcommands and exits 0", async () => {
  for (const args of [["--help"], ["help"], ["-h"]]) {
    const run = await dynamo(args);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /Usage: dynamo <command>/);
    assert.match(run.stdout, /instances/);
    assert.match(run.stdout, /call/);
  }
});

Deno.test("dynamo help call shows the call subcommand's usage", async () => {
  const run = await dynamo(["help", "call"]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /Usage: dynamo call NAMESPACE\/COMPONENT\/ENDPOINT 'JSON'/);
  assert.match(run.stdout, /--timeout-ms/);
});

Deno.test("dynamo --version prints the version from deno.json", async () => {
  const version = (JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)) as { version: string })
    .version;
  const run = await dynamo(["--version"]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, new RegExp(`^dynamo ${version.replaceAll(".", "\\.")} `));
});

Deno.test("dynamo rejects an unknown subcommand with exit code 2", async () => {
  const run = await dynamo(["frobnicate"]);
  assert.equal(run.code, 2);
  assert.equal(run.stdout, "");
  assert.match(run.stderr, /unknown command "frobnicate"/);
  assert.match(run.stderr, /dynamo --help/);
});

Deno.test("dynamo without a subcommand prints usage on stderr and exits 2", async () => {
  const run = await dynamo([]);
  assert.equal(run.code, 2);
  assert.match(run.stderr, /Usage: dynamo <command>/);
});

Deno.test("dynamo rejects unknown flags and bad arguments with exit code 2", async () => {
  const cases: [string[], RegExp][] = [
    [["--bogus"], /Unknown option '--bogus'/],
    [["instances", "--bogus"], /Unknown option '--bogus'/],
    [["instances", "a/b/c/d"], /NAMESPACE\[\/COMPONENT/],
    [["call", "a/b/c"], /needs an endpoint path and a JSON request/],
    [["call", "a/b", "{}"], /NAMESPACE\/COMPONENT\/ENDPOINT/],
    [["call", "a/b/c", "{not json"], /not valid JSON/],
    [["call", "a/b/c", "{}", "--timeout-ms", "soon"], /--timeout-ms must be a whole number/],
    [["call", "a/b/c", "{}", "--instance"], /argument missing/],
    [["run", "out=mocker", "--kv-fetch-ms-per-block", "fast"], /--kv-fetch-ms-per-block must be/],
    [["run", "out=mocker", "--kv-fetch-ms-per-block=-1"], /--kv-fetch-ms-per-block must be/],
    [["run", "out=mocker", "--host-kv-blocks=-1"], /--host-kv-blocks must be a whole number/],
    [["run", "out=mocker", "--host-kv-blocks="], /--host-kv-blocks must be a whole number/],
    [
      ["bench", "--synthetic", "no-sharing", "--out", "/tmp/x", "--host-kv-blocks", "1.5"],
      /--host-kv-blocks must be a whole number >= 0/,
    ],
    [
      ["bench", "--synthetic", "no-sharing", "--out", "/tmp/x", "--kv-fetch-ms-per-block", "x"],
      /--kv-fetch-ms-per-block must be/,
    ],
  ];
  for (const [args, message] of cases) {
    const run = await dynamo(args);
    assert.equal(run.code, 2, `dynamo ${args.join(" ")} should exit 2:\n${run.stderr}`);
    assert.match(run.stderr, message, `dynamo ${args.join(" ")}`);
  }
});

Deno.test("dynamo instances on the embedded default finds nothing and says so", async () => {
  const run = await dynamo(["instances"]);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout, "");
  assert.match(run.stderr, /no instances under v1\/instances\//);
  const json = await dynamo(["instances", "--json"]);
  assert.equal(json.code, 0, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout), []);
});

Deno.test("dynamo call fails with exit code 1 when no instance appears in time", async () => {
  const run = await dynamo(["call", "nobody/here/generate", "{}", "--timeout-ms", "200"]);
  assert.equal(run.code, 1);
  assert.match(run.stderr, /TimeoutError: no 1 instance\(s\) of nobody\/here\/generate/);
});

Deno.test({
  name: "dynamo instances and dynamo call reach a worker on etcd and NATS",
  ignore: !haveServers(),
  async fn(t) {
    const servers = await startServers();
    const env = { ...servers.env };
    let worker: DistributedRuntime | undefined;
    let serving: Promise<void> | undefined;
    try {
      worker = await DistributedRuntime.connect({
        ...servers.runtimeOptions,
      });
      serving = serveWorker(worker);
      const client = await worker.namespace("hello_world").component("YourWorker")
        .endpoint("generate").client();
      await client.waitForInstances({ timeoutMs: 10_000 });
      const id = worker.instanceId;

      await t.step("dynamo instances lists the worker's instance", async () => {
        const run = await dynamo(["instances"], env);
        assert.equal(run.code, 0, run.stderr);
        assert.equal(run.stdout.trim(), `hello_world/YourWorker/generate  ${id}`);
      });

      await t.step("dynamo instances filters by path and prints JSON records", async () => {
        const run = await dynamo(["instances", "hello_world/YourWorker", "--json"], env);
        assert.equal(run.code, 0, run.stderr);
        // The reference's record: instance_id the u64 as a number, our hex id in dynamo_deno.
        const records = JSON.parse(run.stdout) as {
          instance_id: number;
          endpoint: string;
          dynamo_deno: { instance_id: string };
        }[];
        assert.deepEqual(records.map((r) => [r.endpoint, r.dynamo_deno.instance_id]), [[
          "generate",
          id,
        ]]);
        assert.equal(records[0]!.instance_id, Number(BigInt(`0x${id}`)));
        const other = await dynamo(["instances", "hello"], env);
        assert.equal(other.stdout, "", "a namespace prefix must match whole names only");
      });

      await t.step("dynamo call prints one JSON line per streamed item", async () => {
        const run = await dynamo(
          ["call", "hello_world/YourWorker/generate", '{"text":"a b"}'],
          env,
        );
        assert.equal(run.code, 0, run.stderr);
        assert.deepEqual(jsonLines(run.stdout), [{ text: "a" }, { text: "b" }]);
      });

      await t.step("dynamo call --instance sends to the named instance", async () => {
        const run = await dynamo(
          ["call", "hello_world/YourWorker/generate", '{"text":"x y z"}', "--instance", id],
          env,
        );
        assert.equal(run.code, 0, run.stderr);
        assert.deepEqual(jsonLines(run.stdout), [{ text: "x" }, { text: "y" }, { text: "z" }]);
      });

      await t.step("dynamo call --instance with an unknown id times out with exit 1", async () => {
        const run = await dynamo(
          [
            "call",
            "hello_world/YourWorker/generate",
            "{}",
            "--instance",
            "abc",
            "--timeout-ms",
            "300",
          ],
          env,
        );
        assert.equal(run.code, 1);
        assert.match(
          run.stderr,
          /instance abc of hello_world\/YourWorker\/generate did not appear/,
        );
      });

      await t.step("dynamo call reports a handler's error with exit code 1", async () => {
        const run = await dynamo(["call", "hello_world/YourWorker/generate", '{"nope":1}'], env);
        assert.equal(run.code, 1);
        assert.equal(run.stdout, "");
        assert.match(
          run.stderr,
          /the handler failed with TypeError: request.text must be a string/,
        );
      });
    } finally {
      await worker?.shutdown();
      await serving;
      await servers.stop();
    }
  },
});

Deno.test("dynamo bench with a missing trace file says which traces ship, in one line, exit 2", async () => {
  const run = await dynamo(["bench", "--trace", "no/such/trace.jsonl", "--out", "/tmp/x"]);
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /no trace file no\/such\/trace\.jsonl/);
  assert.match(run.stderr, /bench\/data\/mooncake_sample\.jsonl/);
  assert.doesNotMatch(run.stderr, /\n\s+at /, "no stack trace");
});

Deno.test("dynamo bench --simulate on a trace sharing nothing: no NaN, and results.json names kv's cost", async () => {
  const out = await Deno.makeTempDir({ prefix: "dynamo-bench-" });
  const bench = async (...extra: string[]) => {
    const run = await dynamo([
      "bench",
      ...["--synthetic", "no-sharing,seed=1", "--simulate", "--router-modes", "kv"],
      ...["--max-requests", "20", "--out", out, ...extra],
    ]);
    assert.equal(run.code, 0, run.stderr);
    return {
      stdout: run.stdout,
      results: JSON.parse(await Deno.readTextFile(`${out}/results.json`)),
    };
  };
  try {
    const plain = await bench();
    assert.doesNotMatch(plain.stdout, /NaN/);
    assert.match(plain.stdout, /kv prefix hit rate: 0\.0% \(the trace's prompts share no prefix\)/);
    assert.equal(plain.results.kv_cost, "predicted-ttft");
    // Nothing is shared, so no request may report a cached token.
    assert.equal(plain.results.modes.kv.cached_over_ceiling, 0);
    assert.equal(plain.results.kv_overlap_score_weight, null);
    assert.equal(plain.results.kv_queued_prefill_weight, null);
    const weighted = await bench("--kv-overlap-score-weight", "4");
    assert.equal(weighted.results.kv_cost, "weighted");
    assert.equal(weighted.results.kv_overlap_score_weight, 4);
    // The mockers' peer KV fetch rate is recorded: the default, a given one, or off.
    assert.equal(plain.results.kv_fetch_ms_per_block, 0.084);
    assert.equal(
      (await bench("--kv-fetch-ms-per-block", "0.5")).results.kv_fetch_ms_per_block,
      0.5,
    );
    assert.equal(
      (await bench("--kv-fetch-ms-per-block", "off")).results.kv_fetch_ms_per_block,
      null,
    );
    // And the host tier's size: the mocker's default (4 per GPU block), or a given one.
    assert.equal(plain.results.host_kv_blocks, 4 * 16384);
    assert.equal((await bench("--host-kv-blocks", "0")).results.host_kv_blocks, 0);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("dynamo run --cors-allow-origin answers preflights (even with an API key) and marks responses", async () => {
  const run = await startDynamoRun(["--cors-allow-origin", "https://app.example"], {
    DYN_HTTP_API_KEY: "sekret",
  });
  try {
    const pre = await fetch(`${run.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: { origin: "https://app.example", "access-control-request-method": "POST" },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get("access-control-allow-origin"), "https://app.example");
    await pre.body?.cancel();
    const models = await fetch(`${run.url}/v1/models`, {
      headers: { origin: "https://app.example", authorization: "Bearer sekret" },
    });
    assert.equal(models.status, 200);
    assert.equal(models.headers.get("access-control-allow-origin"), "https://app.example");
    await models.body?.cancel();
  } finally {
    await run.stop();
  }
  const bad = await dynamo(["run", "in=http", "out=echo", "--cors-allow-origin", "app.example"]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--cors-allow-origin takes \* or origins like https:\/\/app\.example/);
});
