// KvMetricsAggregator in one process: what getMetrics reports, and its start-up deadline
// and retry when its event subscription does not come up.

import assert from "node:assert/strict";
import { within } from "../../tests/_helpers/backends.ts";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { DynamoError, TimeoutError } from "../../runtime/errors.ts";
import { type KvMetrics, KvMetricsAggregator, KvMetricsPublisher } from "./metrics.ts";
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
