import assert from "node:assert/strict";
import { FrontendMetrics } from "./metrics.ts";

function valueOf(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  assert.ok(line, `no line ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
}

Deno.test("FrontendMetrics.observeRoute counts decisions, prompt and cached blocks per worker", async () => {
  const metrics = new FrontendMetrics();
  metrics.observeRoute({ instanceId: "w1", overlapBlocks: 0, requestBlocks: 4 });
  metrics.observeRoute({ instanceId: "w1", overlapBlocks: 3, requestBlocks: 4 });
  metrics.observeRoute({ instanceId: "w2", overlapBlocks: 0, requestBlocks: 0 });
  const text = await metrics.render();
  const p = "dynamo_frontend_router_";
  assert.equal(valueOf(text, `${p}decisions_total{worker_id="w1"}`), 2);
  assert.equal(valueOf(text, `${p}decisions_total{worker_id="w2"}`), 1);
  assert.equal(valueOf(text, `${p}prompt_blocks_total{worker_id="w1"}`), 8);
  assert.equal(valueOf(text, `${p}cached_blocks_total{worker_id="w1"}`), 3);
  assert.equal(valueOf(text, `${p}cached_blocks_total{worker_id="w2"}`), 0);
  // Hit rates 0, 0.75 and 0 (a prompt shorter than a block).
  assert.equal(valueOf(text, "dynamo_frontend_kv_hit_rate_count"), 3);
  assert.equal(valueOf(text, "dynamo_frontend_kv_hit_rate_sum"), 0.75);
  assert.equal(valueOf(text, 'dynamo_frontend_kv_hit_rate_bucket{le="0"}'), 2);
  assert.equal(valueOf(text, 'dynamo_frontend_kv_hit_rate_bucket{le="0.8"}'), 3);
});

Deno.test("FrontendMetrics names follow Prometheus conventions: counters end in _total", async () => {
  const metrics = new FrontendMetrics();
  const text = await metrics.render();
  const types = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)];
  assert.ok(types.length > 10);
  for (const [, name, type] of types) {
    if (type === "counter") assert.match(name!, /_total$/, `counter ${name}`);
    else assert.doesNotMatch(name!, /_total$/, `${type} ${name}`);
  }
});

Deno.test("FrontendMetrics.include renders another registry after the frontend's own", async () => {
  const metrics = new FrontendMetrics();
  const workers = {
    contentType: "text/plain",
    setDefaultLabels() {},
    metrics: () => Promise.resolve("w_total 3"),
  };
  metrics.include(workers);
  const text = await metrics.render();
  assert.match(text, /^# TYPE dynamo_frontend_requests_total counter$/m);
  assert.ok(text.endsWith("\nw_total 3\n"), text.slice(-200));
});
