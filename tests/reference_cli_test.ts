// The reference's command-line vocabulary, as our commands take it: its environment
// variables and flags with the same meaning (DYN_HTTP_PORT, DYN_ROUTER_MODE, DYN_NAMESPACE,
// --no-kv-events, DYN_LOG's filter syntax, DYN_LOGGING_JSONL, ...), a clear error for its
// flags we do not implement, and a worker from the command line
// (`dynamo run in=dyn://NAMESPACE.COMPONENT.ENDPOINT out=ENGINE`) that a `dynamo frontend`
// on the same etcd + NATS serves.

import assert from "node:assert/strict";
import { parseHttpFlags } from "../cli/frontend.ts";
import { parseDynInput } from "../cli/run.ts";
import { logSettingsFromEnv } from "../runtime/logger.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { type ChildHandle, runDeno, spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const CLI = new URL("../cli/main.ts", import.meta.url).pathname;
const env = (vars: Record<string, string>) => (name: string) => vars[name];
const HOST = { host: "127.0.0.1" };

Deno.test("the reference's DYN_* variables stand in for the flags; a flag wins", () => {
  const parsed = parseHttpFlags(
    "frontend",
    {},
    HOST,
    env({
      DYN_HTTP_PORT: "8123",
      DYN_HTTP_HOST: "0.0.0.0",
      DYN_ROUTER_MODE: "kv",
      DYN_ROUTER_TEMPERATURE: "0.5",
      DYN_ACTIVE_DECODE_BLOCKS_THRESHOLD: "0.9",
      DYN_ACTIVE_PREFILL_TOKENS_THRESHOLD: "4096",
      DYN_ROUTER_REPLICA_SYNC: "true",
      DYN_ROUTER_USE_KV_EVENTS: "false",
      DYN_NAMESPACE: "prod",
    }),
  );
  assert.equal(parsed.port, 8123);
  assert.equal(parsed.hostname, "0.0.0.0");
  assert.equal(parsed.routerMode, "kv");
  assert.equal(parsed.namespace, "prod");
  assert.deepEqual(parsed.kvRouter, {
    temperature: 0.5,
    activeDecodeBlocksThreshold: 0.9,
    activePrefillTokensThreshold: 4096,
    replicaSync: true,
    useKvEvents: false,
  });
  const flagged = parseHttpFlags(
    "frontend",
    { "http-port": "9000", "router-mode": "round-robin", "router-kv-events": true },
    HOST,
    env({ DYN_HTTP_PORT: "8123", DYN_ROUTER_MODE: "kv", DYN_ROUTER_TEMPERATURE: "0.5" }),
  );
  assert.equal(flagged.port, 9000);
  assert.equal(flagged.routerMode, "round-robin");
  // A deployment-wide kv setting in the environment is unused by round-robin, not an error.
  assert.deepEqual(flagged.kvRouter, {});
  assert.deepEqual(
    parseHttpFlags("frontend", { "router-mode": "kv", "no-kv-events": true }, HOST, env({}))
      .kvRouter,
    { useKvEvents: false },
  );
});

Deno.test("bad values and the reference's modes we lack get errors that name their source", () => {
  const cases: [Record<string, string | boolean>, Record<string, string>, RegExp][] = [
    [{}, { DYN_HTTP_PORT: "eighty" }, /DYN_HTTP_PORT must be 0\.\.65535/],
    [
      {},
      { DYN_ROUTER_MODE: "least-loaded" },
      /DYN_ROUTER_MODE least-loaded is a router mode of the reference/,
    ],
    [
      { "router-mode": "power-of-two" },
      {},
      /--router-mode power-of-two is a router mode of the reference/,
    ],
    [
      {},
      { DYN_ROUTER_MODE: "kv", DYN_ROUTER_TEMPERATURE: "-1" },
      /DYN_ROUTER_TEMPERATURE must be a finite number/,
    ],
    [{}, { DYN_ROUTER_REPLICA_SYNC: "perhaps" }, /DYN_ROUTER_REPLICA_SYNC must be true or false/],
    [
      { "router-mode": "kv", "kv-events": true, "no-kv-events": true },
      {},
      /--kv-events and --no-kv-events contradict/,
    ],
    [{ "no-kv-events": true }, {}, /--no-kv-events applies to --router-mode kv only/],
    [{}, { DYN_NAMESPACE: "a.b" }, /DYN_NAMESPACE must be letters, digits/],
  ];
  for (const [values, vars, pattern] of cases) {
    assert.throws(() => parseHttpFlags("frontend", values, HOST, env(vars)), pattern);
  }
});

Deno.test("DYN_LOG takes the reference's filter syntax; DYN_LOGGING_JSONL makes JSON lines", () => {
  assert.deepEqual(logSettingsFromEnv({}), { level: "info", json: false });
  assert.deepEqual(logSettingsFromEnv({ DYN_LOG: "debug" }), { level: "debug", json: false });
  assert.deepEqual(logSettingsFromEnv({ DYN_LOG: "TRACE" }), { level: "debug", json: false });
  assert.equal(
    logSettingsFromEnv({ DYN_LOG: "warn,dynamo_runtime=debug,h2=error" }).level,
    "debug",
  );
  assert.equal(logSettingsFromEnv({ DYN_LOG: "error,tokio=trace" }).level, "error");
  assert.equal(logSettingsFromEnv({ DYN_LOG: "off" }).level, "off");
  assert.equal(logSettingsFromEnv({ DYN_LOGGING_JSONL: "true" }).json, true);
  assert.equal(logSettingsFromEnv({ DYN_LOG_JSON: "1" }).json, true);
  assert.throws(
    () => logSettingsFromEnv({ DYN_LOG: "info,dynamo=loud" }),
    /"dynamo=loud" is not a level/,
  );
  assert.throws(() => logSettingsFromEnv({ DYN_LOG: "=debug" }), /not a level/);
});

Deno.test("dyn:// inputs: three names, else a usage error with an example", () => {
  assert.deepEqual(parseDynInput("dyn://prod.backend.generate"), {
    namespace: "prod",
    component: "backend",
    endpoint: "generate",
  });
  for (const bad of ["dyn://prod.backend", "dyn://a.b.c.d", "dyn://a..c", "dyn://a/b.c.d"]) {
    assert.throws(() => parseDynInput(bad), /dyn:\/\/NAMESPACE\.COMPONENT\.ENDPOINT/);
  }
});

Deno.test("the commands name the reference's flags they lack, and refuse a worker with no network", async () => {
  const none = { ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_HUB: "" };
  const frontend = await runDeno(
    [CLI, "frontend", "--router-tracking-hash", "public-xxh3-v1"],
    none,
    30_000,
  );
  assert.equal(frontend.code, 2, frontend.stderr);
  assert.match(
    frontend.stderr,
    /--router-tracking-hash is a flag of the reference frontend \(ai-dynamo 1\.6\.1\)/,
  );
  const negated = await runDeno([CLI, "frontend", "--no-load-aware"], none, 30_000);
  assert.match(negated.stderr, /--no-load-aware is a flag of the reference frontend/);
  const worker = await runDeno([CLI, "run", "in=dyn://a.b.c", "out=echo"], none, 30_000);
  assert.equal(worker.code, 2, worker.stderr);
  assert.match(worker.stderr, /in=dyn:\/\/ registers a worker on the network/);
});

/** `dynamo run in=dyn://... out=echo` (or the `out=` in `extra`); resolves once it serves. */
async function startWorker(
  input: string,
  extra: string[],
  servers: Record<string, string>,
): Promise<ChildHandle> {
  const child = spawnDeno(CLI, { ...servers, DYN_LOG: "warn" }, [
    "run",
    input,
    ...(extra.some((a) => a.startsWith("out=")) ? [] : ["out=echo"]),
    ...extra,
  ]);
  await child.waitFor(
    (l) => typeof l.text === "string" && l.text.includes("dynamo worker serving"),
    60_000,
    `the ${input} worker to serve`,
  );
  return child;
}

async function chat(url: string, model: string): Promise<string> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model,
      messages: [{ role: "user", content: "one two three" }],
      max_tokens: 8,
    }),
  });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body.choices[0].message.content as string;
}

Deno.test({
  name:
    "in=dyn:// workers on etcd + NATS: a DYN_NAMESPACE frontend serves its namespace's model only; kv routing without KV events",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const children: ChildHandle[] = [];
    try {
      children.push(
        await startWorker(
          "in=dyn://prod.backend.generate",
          ["--model-name", "prod-model"],
          servers.env,
        ),
        await startWorker(
          "in=dyn://test.backend.generate",
          ["--model-name", "test-model"],
          servers.env,
        ),
        await startWorker(
          "in=dyn://prod.mocker.generate",
          [
            "out=mocker",
            "--num-workers",
            "2",
            "--speedup-ratio",
            "100",
            "--model-name",
            "prod-mocker",
          ],
          servers.env,
        ),
      );
      const frontend = spawnFrontend({
        ...servers.env,
        DYN_LOG: "warn",
        DYN_NAMESPACE: "prod",
        DYN_ROUTER_MODE: "kv",
        DYN_ROUTER_USE_KV_EVENTS: "false",
      });
      children.push(frontend);
      const url = await frontendUrl(frontend, 60_000);
      // The prod model appears; the test namespace's never does.
      let names: string[] = [];
      const deadline = Date.now() + 30_000;
      while (!(names.includes("prod-model") && names.includes("prod-mocker"))) {
        assert.ok(Date.now() < deadline, `prod-model and prod-mocker not both listed: ${names}`);
        await new Promise((r) => setTimeout(r, 200));
        const list = await (await fetch(`${url}/v1/models`)).json();
        names = (list.data as { id: string }[]).map((m) => m.id).sort();
      }
      assert.deepEqual(names, ["prod-mocker", "prod-model"]);
      const health = await (await fetch(`${url}/health`)).json();
      const mockers = health.models.find((m: { name: string }) => m.name === "prod-mocker");
      assert.equal(mockers?.instances, 2, JSON.stringify(health));
      assert.ok((await chat(url, "prod-mocker")).length > 0);
      // Echo answers with the prompt's own text, routed by the approximate KV router.
      assert.match(await chat(url, "prod-model"), /one two three/);
      const other = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "test-model", messages: [{ role: "user", content: "x" }] }),
      });
      assert.equal(other.status, 404, await other.text());
    } finally {
      await Promise.all(children.map((c) => stopChild(c)));
      await servers.stop();
    }
  },
});
