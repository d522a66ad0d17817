// KvMetricsAggregator in one process: what getMetrics reports, and its start-up deadline
// and retry when its event subscription does not come up.

import assert from "node:assert/strict";
import { within } from "../../tests/_helpers/backends.ts";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { DynamoError, TimeoutError } from "../../runtime/errors.ts";
import fc from "fast-check";
import {
  type KvMetrics,
  KvMetricsAggregator,
  KvMetricsPublisher,
  parseLoadMetrics,
} from "./metrics.ts";
import { LOAD_METRICS } from "./protocols.ts";
import { fakeReadiness } from "./_test_support.ts";

const metrics = (kvActiveBlocks: number): KvMetrics => ({
  requestActiveSlots: 1,
  requestTotalSlots: 8,
  kvActiveBlocks,
  kvTotalBlocks: 100,
  numRequestsWaiting: 0,
  gpuCacheUsagePerc: kvActiveBlocks / 100,
  gpuPrefixCacheHitRate: 0,
});

Deno.test("KvMetricsAggregator.getMetrics gives up on a subscription that never gets ready, naming it", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const hang = Promise.withResolvers<void>();
    fakeReadiness(comp, LOAD_METRICS, () => hang.promise);
    const aggregator = new KvMetricsAggregator(comp, { readyTimeoutMs: 20 });
    await assert.rejects(
      () => within(aggregator.getMetrics(), 5000, "getMetrics to give up"),
      (err: unknown) =>
        err instanceof TimeoutError &&
        /KvMetricsAggregator of ns\/c was not ready after 20 ms: still waiting for the load_metrics event subscription of ns\/c$/
          .test(err.message),
    );
    hang.resolve(); // later calls go on once it is ready
    assert.deepEqual(await aggregator.getMetrics(), { endpoints: [] });
    await aggregator.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvMetricsAggregator subscribes again when its subscription failed to start", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const publisher = new KvMetricsPublisher();
    publisher.publish(metrics(5));
    await publisher.createEndpoint(rt.namespace("ns").component("c"));
    const comp = rt.namespace("ns").component("c");
    let fail = true;
    const counter = fakeReadiness(
      comp,
      LOAD_METRICS,
      () => fail ? Promise.reject(new Error("flush failed")) : Promise.resolve(),
    );
    const aggregator = new KvMetricsAggregator(comp);
    await assert.rejects(
      () => aggregator.getMetrics(),
      (err: unknown) =>
        err instanceof DynamoError &&
        /KvMetricsAggregator of ns\/c cannot subscribe to load_metrics events: flush failed/
          .test(err.message),
    );
    fail = false;
    const first = await aggregator.getMetrics(); // the worker is scraped
    assert.equal(counter.subscribed, 2);
    assert.deepEqual(first.endpoints.map((e) => e.kv_active_blocks), [5]);
    // Pushes come through the new subscription.
    publisher.publish(metrics(7));
    const deadline = Date.now() + 5000;
    for (;;) {
      const { endpoints } = await aggregator.getMetrics();
      if (endpoints[0]?.kv_active_blocks === 7) break;
      if (Date.now() > deadline) throw new Error("timed out waiting for the pushed metrics");
      await new Promise((r) => setTimeout(r, 5));
    }
    publisher.close();
    await aggregator.close();
  } finally {
    await rt.shutdown();
  }
});

const wire = (kvActiveBlocks: number, workerId: string) => ({
  worker_id: workerId,
  request_active_slots: 1,
  request_total_slots: 8,
  kv_active_blocks: kvActiveBlocks,
  kv_total_blocks: 100,
  num_requests_waiting: 0,
  gpu_cache_usage_perc: 0.5,
  gpu_prefix_cache_hit_rate: 0,
});

Deno.test("load metrics within bounds pass the door unchanged; anything else is refused", () => {
  const count = fc.nat();
  const fraction = fc.double({ min: 0, max: 1, noNaN: true });
  fc.assert(
    fc.property(
      fc.record({
        worker_id: fc.string({ maxLength: 40 }),
        request_active_slots: count,
        request_total_slots: count,
        kv_active_blocks: count,
        kv_total_blocks: count,
        num_requests_waiting: count,
        gpu_cache_usage_perc: fraction,
        gpu_prefix_cache_hit_rate: fraction,
      }, { noNullPrototype: true }),
      (m) => assert.deepEqual(parseLoadMetrics(m), { ok: true, metrics: m }),
    ),
    { numRuns: 300 },
  );
  // Random JSON values and single-field corruptions never throw and never pass a bad number.
  const bad = fc.oneof(
    fc.constantFrom(NaN, Infinity, -Infinity, -1, 0.5, 2 ** 60, "3", null, true),
    fc.anything(),
  );
  fc.assert(
    fc.property(fc.anything(), fc.constantFrom(...Object.keys(wire(0, "w"))), bad, (v, k, x) => {
      for (const value of [v, { ...wire(3, "w"), [k]: x }]) {
        const r = parseLoadMetrics(value);
        if (!r.ok) continue;
        for (const [f, n] of Object.entries(r.metrics)) {
          if (f === "worker_id") continue;
          assert.ok(typeof n === "number" && Number.isFinite(n) && n >= 0, `${f}=${n}`);
        }
        assert.ok(r.metrics.gpu_cache_usage_perc <= 1 && r.metrics.gpu_prefix_cache_hit_rate <= 1);
      }
    }),
    { numRuns: 500 },
  );
  for (const [k, v] of [["kv_active_blocks", Infinity], ["gpu_cache_usage_perc", 1.5]] as const) {
    assert.equal(parseLoadMetrics({ ...wire(3, "w"), [k]: v }).ok, false, k);
  }
  // Unknown fields are not carried past the door.
  const r = parseLoadMetrics({ ...wire(3, "w"), extra: "x" });
  assert.ok(r.ok && !("extra" in r.metrics));
});

Deno.test("KvMetricsAggregator drops invalid pushes and keeps the worker's last valid metrics", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const publisher = new KvMetricsPublisher();
    await publisher.createEndpoint(comp);
    publisher.publish(metrics(5));
    const aggregator = new KvMetricsAggregator(comp);
    assert.deepEqual((await aggregator.getMetrics()).endpoints.map((e) => e.kv_active_blocks), [5]);
    const send = (text: string) => comp.publishEvent(LOAD_METRICS, new TextEncoder().encode(text));
    // JSON's 1e999 parses to Infinity; a NaN-free but negative count; not JSON at all.
    await send(
      JSON.stringify(wire(7, rt.instanceId)).replace(
        '"kv_active_blocks":7',
        '"kv_active_blocks":1e999',
      ),
    );
    await send(JSON.stringify({ ...wire(7, rt.instanceId), num_requests_waiting: -4 }));
    await send("{not json");
    await within(
      (async () => {
        while (aggregator.invalidMessages < 3) await new Promise((r) => setTimeout(r, 5));
      })(),
      5000,
      "3 refused load-metrics messages",
    );
    const [m] = (await aggregator.getMetrics()).endpoints;
    assert.equal(m?.kv_active_blocks, 5);
    assert.equal(m?.num_requests_waiting, 0);
    publisher.close();
    await aggregator.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("pass timing and the fetch rate pass the door within bounds, and age as they wait", async () => {
  const ok = { ...wire(3, "w"), pass_ms_left: 40, pass_prefill_tokens: 512 };
  assert.deepEqual(parseLoadMetrics({ ...ok, kv_fetch_ms_per_block: 0.084 }), {
    ok: true,
    metrics: { ...ok, kv_fetch_ms_per_block: 0.084 },
  });
  const host = { kv_host_blocks: 12, kv_host_total_blocks: 64 };
  assert.deepEqual(parseLoadMetrics({ ...ok, ...host }), { ok: true, metrics: { ...ok, ...host } });
  for (
    const [k, v] of [
      ["pass_ms_left", -1],
      ["pass_ms_left", 1e9],
      ["pass_prefill_tokens", 1.5],
      ["kv_fetch_ms_per_block", Infinity],
      ["kv_fetch_ms_per_block", "0.1"],
      ["kv_host_blocks", -3],
      ["kv_host_total_blocks", 2.5],
    ] as const
  ) {
    assert.equal(parseLoadMetrics({ ...ok, [k]: v }).ok, false, `${k}=${v}`);
  }
  assert.throws(
    () => new KvMetricsPublisher().publish({ ...metrics(1), passMsLeft: NaN }),
    /passMsLeft/,
  );

  const rt = await DistributedRuntime.connect();
  try {
    const comp = rt.namespace("ns").component("c");
    const publisher = new KvMetricsPublisher();
    await publisher.createEndpoint(comp);
    const aggregator = new KvMetricsAggregator(comp);
    await aggregator.getMetrics();
    const id = rt.instanceId;
    publisher.publish(metrics(1));
    await waitUntil(() => aggregator.latest(id) !== undefined);
    assert.equal(aggregator.passTiming(id), undefined, "no pass timing published");
    publisher.publish({ ...metrics(1), passMsLeft: 50, passPrefillTokens: 300 });
    await waitUntil(() => aggregator.latest(id)?.pass_ms_left === 50);
    const now = performance.now();
    const timing = aggregator.passTiming(id, now)!;
    assert.equal(timing.prefillTokens, 300);
    assert.equal(timing.passMs, 50); // announced as the pass starts: its whole length
    assert.ok(timing.msLeft <= 50 && timing.msLeft > 30, `${timing.msLeft}`);
    // 20 ms later, 20 ms less; long after, none left.
    assert.ok(Math.abs(aggregator.passTiming(id, now + 20)!.msLeft - (timing.msLeft - 20)) < 1e-9);
    assert.equal(aggregator.passTiming(id, now + 1000)!.msLeft, 0);
    await aggregator.close();
    publisher.close();
  } finally {
    await rt.shutdown();
  }
});

async function waitUntil(check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 2));
  assert.ok(check(), "timed out");
}
