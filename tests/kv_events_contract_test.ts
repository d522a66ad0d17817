// KV events and load metrics across runtimes, on every backend in BACKENDS: publisher ->
// indexer end to end, resync after a gap or a late start, worker removal, and the
// metrics aggregator.

import assert from "node:assert/strict";
import {
  type Component,
  computeBlockHashesSync,
  type DistributedRuntime,
  KvEventPublisher,
  KvIndexer,
  KvMetricsAggregator,
  KvMetricsPublisher,
} from "../mod.ts";
import { type Backend, BACKENDS, eventually, within } from "./_helpers/backends.ts";

type Case = (b: Backend) => Promise<void>;

const BS = 4;
const tokens = (n: number, salt = 0) => Array.from({ length: n }, (_, i) => i * 31 + salt);

/** A worker runtime: an endpoint in discovery and a KV event publisher. */
async function worker(b: Backend) {
  const rt = await b.runtime();
  const component = rt.namespace("kv").component("backend");
  component.endpoint("generate").serveEndpoint(async function* () {}).catch(() => {});
  const pub = new KvEventPublisher(component, { workerId: rt.instanceId, kvBlockSize: BS });
  await within(pub.ready, 5000, "the publisher's resync subscription");
  return { rt, component, pub, id: rt.instanceId };
}

/** Stores the blocks of `toks` on `pub` with their real sequence hashes as block hashes. */
function store(pub: KvEventPublisher, toks: number[]) {
  const { sequence } = computeBlockHashesSync(toks, BS);
  return pub.publishStored({
    tokenIds: toks,
    numBlockTokens: sequence.map(() => BS),
    blockHashes: sequence,
    parentHash: null,
  });
}

async function indexerOn(rt: DistributedRuntime, opts = {}) {
  const ix = new KvIndexer(rt.namespace("kv").component("backend"), BS, opts);
  await within(ix.ready, 5000, "the indexer to start");
  return ix;
}

async function scoresOf(ix: KvIndexer, toks: number[]) {
  const scores = (await ix.findMatchesForRequest(toks, 0)).scores;
  return Object.fromEntries([...scores].sort(([a], [b]) => (a < b ? -1 : 1)));
}

async function expectScores(ix: KvIndexer, toks: number[], want: Record<string, number>) {
  let last: Record<string, number> = {};
  want = Object.fromEntries(Object.entries(want).sort(([a], [b]) => (a < b ? -1 : 1)));
  try {
    await eventually(
      async () => JSON.stringify(last = await scoresOf(ix, toks)) === JSON.stringify(want),
      5000,
      `scores ${JSON.stringify(want)}`,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last saw ${JSON.stringify(last)}`);
  }
}

/** Makes the next publishes of `component` vanish (a lost event), until restored. */
function dropEvents(component: Component): () => void {
  const c = component as unknown as { publishEvent: Component["publishEvent"] };
  c.publishEvent = () => Promise.resolve();
  return () => delete (c as Partial<typeof c>).publishEvent;
}

const cases: Record<string, Case> = {
  async "stored, removed and cleared events reach an indexer in another runtime"(b) {
    const w = await worker(b);
    const ix = await indexerOn(await b.runtime());
    const t = tokens(16);
    await store(w.pub, t);
    await expectScores(ix, t, { [w.id]: 4 });
    const { sequence } = computeBlockHashesSync(t, BS);
    await w.pub.publishRemoved([sequence[3]!]);
    await expectScores(ix, t, { [w.id]: 3 });
    await w.pub.publishCleared();
    await expectScores(ix, t, {});
    await ix.close();
  },

  async "each worker scores the prefix it holds"(b) {
    const [w1, w2] = [await worker(b), await worker(b)];
    const ix = await indexerOn(await b.runtime());
    const t = tokens(24);
    await store(w1.pub, t.slice(0, 8));
    await store(w2.pub, t);
    await store(w2.pub, tokens(8, 7)); // an unrelated prefix
    await expectScores(ix, t, { [w1.id]: 2, [w2.id]: 6 });
    await ix.close();
  },

  async "an indexer started after the workers loads their state by resync"(b) {
    const w = await worker(b);
    const t = tokens(20);
    await store(w.pub, t);
    const { sequence } = computeBlockHashesSync(t, BS);
    await w.pub.publishRemoved([sequence[4]!]);
    const ix = await indexerOn(await b.runtime());
    await expectScores(ix, t, { [w.id]: 4 });
    // and follows the worker's later events
    await store(w.pub, t);
    await expectScores(ix, t, { [w.id]: 5 });
    await ix.close();
  },

  async "a lost event is detected by its id and the worker's state resynchronised"(b) {
    const w = await worker(b);
    const ix = await indexerOn(await b.runtime(), { resyncTimeoutMs: 1000 });
    const t = tokens(16);
    await store(w.pub, t.slice(0, 8));
    await expectScores(ix, t, { [w.id]: 2 });
    const restore = dropEvents(w.component);
    await store(w.pub, t); // lost: blocks 3 and 4
    restore();
    await w.pub.publishStored({
      tokenIds: tokens(4, 99),
      numBlockTokens: [BS],
      blockHashes: [12345n],
    }); // id 3: the gap shows
    await expectScores(ix, t, { [w.id]: 4 });
    assert.equal(ix.tree.blockCount(w.id), 5);
    await ix.close();
  },

  async "a worker that leaves discovery leaves the indexer"(b) {
    const [w1, w2] = [await worker(b), await worker(b)];
    const ix = await indexerOn(await b.runtime());
    const t = tokens(8);
    await store(w1.pub, t);
    await store(w2.pub, t);
    await expectScores(ix, t, { [w1.id]: 2, [w2.id]: 2 });
    await w1.rt.shutdown();
    await expectScores(ix, t, { [w2.id]: 2 });
    assert.equal(ix.tree.blockCount(w1.id), 0);
    await ix.close();
  },

  async "the metrics aggregator reports live workers' latest metrics"(b) {
    const base = {
      requestActiveSlots: 0,
      requestTotalSlots: 1024,
      kvActiveBlocks: 0,
      kvTotalBlocks: 1024,
      numRequestsWaiting: 0,
      gpuCacheUsagePerc: 0,
      gpuPrefixCacheHitRate: 0,
    };
    const workers: { rt: DistributedRuntime; m: KvMetricsPublisher }[] = [];
    for (let i = 0; i < 2; i++) {
      const rt = await b.runtime();
      const m = new KvMetricsPublisher();
      await within(
        m.createEndpoint(rt.namespace("kv").component("backend")),
        5000,
        "createEndpoint",
      );
      m.publish({ ...base, kvActiveBlocks: 10 + i });
      workers.push({ rt, m });
    }
    const router = await b.runtime();
    const agg = new KvMetricsAggregator(router.namespace("kv").component("backend"));
    const ids = workers.map((w) => w.rt.instanceId).sort();
    const { endpoints } = await within(agg.getMetrics(), 5000, "metrics");
    assert.deepEqual(endpoints.map((e) => e.worker_id), ids);
    for (const e of endpoints) {
      const i = workers.findIndex((w) => w.rt.instanceId === e.worker_id);
      assert.equal(e.kv_active_blocks, 10 + i);
      assert.equal(e.request_total_slots, 1024);
    }
    // a pushed update shows up (positional form, as the seeds call it)
    workers[0]!.m.publish(3, 1024, 77, 1024, 5, 0.5, 0.25);
    await eventually(
      async () =>
        (await agg.getMetrics()).endpoints.find((e) => e.worker_id === workers[0]!.rt.instanceId)
          ?.kv_active_blocks === 77,
      5000,
      "the update to reach the aggregator",
    );
    await workers[1]!.rt.shutdown();
    await eventually(
      async () => (await agg.getMetrics()).endpoints.length === 1,
      5000,
      "the stopped worker to leave the metrics",
    );
    await agg.close();
  },
};

for (const backend of BACKENDS) {
  Deno.test({
    name: `KV events and metrics on ${backend.name}`,
    ignore: !backend.available,
    async fn(t) {
      for (const [name, run] of Object.entries(cases)) {
        await t.step(name, async () => {
          const b = await backend.open();
          try {
            await run(b);
          } finally {
            await b.close();
          }
        });
      }
    },
  });
}
