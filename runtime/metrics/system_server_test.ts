import assert from "node:assert/strict";
import { InvalidArgumentError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { dynamoWorker } from "../worker.ts";
import { RuntimeMetrics } from "./runtime_metrics.ts";
import { startSystemServer, systemServerFromEnv } from "./system_server.ts";

Deno.test("systemServerFromEnv reads the reference's DYN_SYSTEM_* variables", () => {
  assert.equal(systemServerFromEnv({}), undefined);
  assert.equal(systemServerFromEnv({ DYN_SYSTEM_PORT: "-1" }), undefined);
  assert.deepEqual(systemServerFromEnv({ DYN_SYSTEM_PORT: "8081" }), {
    hostname: "0.0.0.0",
    port: 8081,
  });
  assert.deepEqual(systemServerFromEnv({ DYN_SYSTEM_PORT: "0", DYN_SYSTEM_HOST: "127.0.0.1" }), {
    hostname: "127.0.0.1",
    port: 0,
  });
  assert.deepEqual(systemServerFromEnv({ DYN_SYSTEM_ENABLED: "true" }), {
    hostname: "0.0.0.0",
    port: 0,
  });
  assert.equal(
    systemServerFromEnv({ DYN_SYSTEM_ENABLED: "false", DYN_SYSTEM_PORT: "8081" }),
    undefined,
  );
  for (const bad of ["80a", "70000", "-2", "1.5"]) {
    assert.throws(
      () => systemServerFromEnv({ DYN_SYSTEM_PORT: bad }),
      (e: unknown) => e instanceof InvalidArgumentError && e.message.includes(bad),
    );
  }
  assert.throws(
    () => systemServerFromEnv({ DYN_SYSTEM_ENABLED: "yes" }),
    (e: unknown) => e instanceof InvalidArgumentError && e.message.includes("DYN_SYSTEM_ENABLED"),
  );
});

Deno.test("the system server answers /metrics, /health and /live, and nothing else", async () => {
  const metrics = new RuntimeMetrics();
  metrics.endpoint("ns", "backend", "generate");
  let problem: string | undefined;
  const server = await startSystemServer({
    hostname: "127.0.0.1",
    port: 0,
    registry: metrics.registry,
    notReady: () => problem,
  });
  try {
    const m = await fetch(`${server.url}/metrics`);
    assert.equal(m.status, 200);
    assert.match(m.headers.get("content-type") ?? "", /^text\/plain/);
    assert.match(await m.text(), /^dynamo_component_requests_total\{.*\} 0$/m);
    const h = await fetch(`${server.url}/health`);
    assert.deepEqual([h.status, await h.json()], [200, { status: "ready" }]);
    problem = "shutting down";
    const sick = await fetch(`${server.url}/health`);
    assert.deepEqual([sick.status, await sick.json()], [503, {
      status: "notready",
      message: "shutting down",
    }]);
    const live = await fetch(`${server.url}/live`);
    assert.deepEqual([live.status, await live.json()], [200, { status: "live" }]);
    const missing = await fetch(`${server.url}/v1/models`);
    assert.equal(missing.status, 404);
    assert.match((await missing.json()).error, /\/v1\/models/);
    const post = await fetch(`${server.url}/metrics`, { method: "POST" });
    assert.equal(post.status, 405);
    await post.body?.cancel();
  } finally {
    await server.close();
  }
});

Deno.test("dynamoWorker serves the runtime's metrics and the process's on DYN_SYSTEM_PORT", async () => {
  const infos: { msg: string; fields: Record<string, unknown> }[] = [];
  const logger: Logger = {
    debug() {},
    info: (msg, fields = {}) => void infos.push({ msg, fields }),
    warn() {},
    error() {},
    child: () => logger,
  };
  const text = await dynamoWorker(async (runtime) => {
    const endpoint = runtime.namespace("ns").component("backend").endpoint("generate");
    const serving = endpoint.serveEndpoint(async function* () {
      yield 1;
    });
    const client = await endpoint.client();
    await client.waitForInstances({ timeoutMs: 5000 });
    for await (const _ of await client.roundRobin({})) { /* one item */ }
    await client.close();
    const url = infos.find((i) => i.msg === "system server listening")?.fields.url;
    assert.equal(typeof url, "string");
    const res = await fetch(`${url}/metrics`);
    const body = await res.text();
    await runtime.shutdown();
    await serving;
    return body;
  }, {
    env: { DYN_SYSTEM_PORT: "0", DYN_SYSTEM_HOST: "127.0.0.1" },
    logger,
    signals: [],
  });
  assert.match(
    text,
    /^dynamo_component_requests_total\{dynamo_namespace="ns",dynamo_component="backend",dynamo_endpoint="generate"\} 1$/m,
  );
  assert.match(text, /^process_cpu_seconds_total \d/m);
  assert.match(text, /^process_resident_memory_bytes \d/m);
  assert.match(text, /^nodejs_eventloop_lag_seconds \d/m);
});

Deno.test("dynamoWorker refuses a bad DYN_SYSTEM_PORT before it builds a runtime", async () => {
  await assert.rejects(
    dynamoWorker(() => Promise.resolve(), { env: { DYN_SYSTEM_PORT: "http" }, signals: [] }),
    (e: unknown) => e instanceof InvalidArgumentError && e.message.includes("DYN_SYSTEM_PORT"),
  );
});
