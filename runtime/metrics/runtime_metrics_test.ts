import assert from "node:assert/strict";
import { DistributedRuntime } from "../distributed_runtime.ts";
import { RuntimeMetrics } from "./runtime_metrics.ts";

/** The value of the one exposition line that starts with `series` (name and labels). */
function valueOf(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  assert.ok(line, `no line ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
}

const GEN = 'dynamo_namespace="ns",dynamo_component="backend",dynamo_endpoint="generate"';

Deno.test("RuntimeMetrics shows an endpoint's series at zero before its first request", async () => {
  const metrics = new RuntimeMetrics();
  metrics.endpoint("ns", "backend", "generate");
  const text = await metrics.render();
  assert.equal(valueOf(text, `dynamo_component_requests_total{${GEN}}`), 0);
  assert.equal(valueOf(text, `dynamo_component_inflight_requests{${GEN}}`), 0);
  assert.equal(valueOf(text, `dynamo_component_request_duration_seconds_count{${GEN}}`), 0);
  for (const t of ["deserialization", "response_stream", "generate"]) {
    assert.equal(valueOf(text, `dynamo_component_errors_total{${GEN},error_type="${t}"}`), 0);
  }
  assert.ok(valueOf(text, "dynamo_component_uptime_seconds") >= 0);
});

Deno.test("RuntimeMetrics.setKvStats shows a worker's latest load under the reference's names", async () => {
  const metrics = new RuntimeMetrics();
  const sample = {
    request_active_slots: 3,
    request_total_slots: 64,
    kv_active_blocks: 10,
    kv_total_blocks: 40,
    num_requests_waiting: 2,
    gpu_cache_usage_perc: 0.25,
    gpu_prefix_cache_hit_rate: 0.5,
  };
  metrics.setKvStats("ns", "backend", "w1", { ...sample, kv_active_blocks: 1 });
  metrics.setKvStats("ns", "backend", "w1", sample);
  const text = await metrics.render();
  const w = 'dynamo_namespace="ns",dynamo_component="backend",worker_id="w1"';
  assert.equal(valueOf(text, `dynamo_component_kvstats_active_blocks{${w}}`), 10);
  assert.equal(valueOf(text, `dynamo_component_kvstats_total_blocks{${w}}`), 40);
  assert.equal(valueOf(text, `dynamo_component_kvstats_gpu_cache_usage_percent{${w}}`), 0.25);
  assert.equal(valueOf(text, `dynamo_component_kvstats_gpu_prefix_cache_hit_rate{${w}}`), 0.5);
  assert.equal(valueOf(text, `dynamo_component_worker_request_active_slots{${w}}`), 3);
  assert.equal(valueOf(text, `dynamo_component_worker_request_total_slots{${w}}`), 64);
  assert.equal(valueOf(text, `dynamo_component_worker_num_requests_waiting{${w}}`), 2);
  // A worker without a host tier has no host series; one with it has both.
  assert.doesNotMatch(text, /kvstats_host_blocks\{/);
  metrics.setKvStats("ns", "backend", "w2", {
    ...sample,
    kv_host_blocks: 7,
    kv_host_total_blocks: 160,
  });
  const after = await metrics.render();
  const w2 = 'dynamo_namespace="ns",dynamo_component="backend",worker_id="w2"';
  assert.equal(valueOf(after, `dynamo_component_kvstats_host_blocks{${w2}}`), 7);
  assert.equal(valueOf(after, `dynamo_component_kvstats_host_total_blocks{${w2}}`), 160);
  assert.doesNotMatch(after, new RegExp(`kvstats_host_blocks\\{${w}`));
});

Deno.test("a served endpoint counts requests, failures by error_type and the bytes it moves over TCP", async () => {
  const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "tcp" });
  try {
    const endpoint = runtime.namespace("ns").component("backend").endpoint("generate");
    const serving = endpoint.serveEndpoint(async function* (req: { say: string }) {
      if (req.say === "early") throw new Error("refused before the first item");
      yield { text: "héllo" };
      if (req.say === "late") throw new Error("failed after the first item");
      yield { text: req.say };
    });
    const client = await endpoint.client();
    await client.waitForInstances({ timeoutMs: 5000 });
    const items: unknown[] = [];
    for await (const item of await client.roundRobin({ say: "ok" })) items.push(item);
    assert.deepEqual(items, [{ text: "héllo" }, { text: "ok" }]);
    await assert.rejects(async () => {
      for await (const _ of await client.roundRobin({ say: "early" })) { /* none */ }
    });
    await assert.rejects(async () => {
      for await (const _ of await client.roundRobin({ say: "late" })) { /* one, then the error */ }
    });
    const text = await runtime.metrics.render();
    assert.equal(valueOf(text, `dynamo_component_requests_total{${GEN}}`), 3);
    assert.equal(valueOf(text, `dynamo_component_errors_total{${GEN},error_type="generate"}`), 2);
    assert.equal(valueOf(text, `dynamo_component_inflight_requests{${GEN}}`), 0);
    assert.equal(valueOf(text, `dynamo_component_request_duration_seconds_count{${GEN}}`), 3);
    assert.ok(valueOf(text, `dynamo_component_request_bytes_total{${GEN}}`) > 0);
    // Items sent: héllo twice (ok, late) and "ok" once, as the JSON each frame carried.
    const sent = 2 * JSON.stringify({ text: "héllo" }).length +
      JSON.stringify({ text: "ok" }).length;
    const bytes = valueOf(text, `dynamo_component_response_bytes_total{${GEN}}`);
    assert.ok(bytes >= sent && bytes <= sent + 2, `response bytes ${bytes}, items ${sent}`);
    await client.close();
    await runtime.shutdown();
    await serving;
  } finally {
    await runtime.shutdown();
  }
});

Deno.test("RuntimeMetrics names follow Prometheus conventions: counters end in _total", async () => {
  const metrics = new RuntimeMetrics();
  metrics.endpoint("ns", "backend", "generate");
  const text = await metrics.render();
  const types = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)];
  assert.ok(types.length > 10);
  for (const [, name, type] of types) {
    assert.match(name!, /^dynamo_component_/);
    if (type === "counter") assert.match(name!, /_total$/, `counter ${name}`);
    else assert.doesNotMatch(name!, /_total$/, `${type} ${name}`);
  }
});
