// Indexer units in one process: the approximate indexer's TTL on an injected clock, and
// the event-id bookkeeping of KvIndexer.

import assert from "node:assert/strict";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { computeBlockHashesSync } from "./hashing.ts";
import { ApproxKvIndexer, KvIndexer } from "./indexer.ts";
import type { KvCacheEventData, RouterEvent } from "./protocols.ts";

const toks = (n: number, salt = 0) => Array.from({ length: n }, (_, i) => i * 17 + salt);

Deno.test("ApproxKvIndexer counts a routed request's blocks as cached until the TTL", async () => {
  let now = 1000;
  const ix = new ApproxKvIndexer(4, { ttlMs: 100, now: () => now });
  ix.recordRouted(toks(12), "w1");
  ix.recordRouted(toks(6), "w2"); // one full block
  assert.deepEqual(
    (await ix.findMatchesForRequest(toks(12))).scores,
    new Map([["w1", 3], ["w2", 1]]),
  );
  now = 1099;
  assert.equal((await ix.findMatchesForRequest(toks(12))).scores.size, 2);
  now = 1100;
  assert.deepEqual((await ix.findMatchesForRequest(toks(12))).scores, new Map());
  assert.equal(ix.tree.size, 0);
});

Deno.test("ApproxKvIndexer keeps re-routed blocks alive for a fresh TTL", async () => {
  let now = 0;
  const ix = new ApproxKvIndexer(4, { ttlMs: 100, now: () => now });
  ix.recordRouted(toks(12), "w1");
  now = 60;
  ix.recordRouted(toks(8), "w1"); // the first two blocks again
  now = 120; // the third block expired; the first two were refreshed at 60
  assert.deepEqual((await ix.findMatchesForRequest(toks(12))).scores, new Map([["w1", 2]]));
  now = 160;
  assert.deepEqual((await ix.findMatchesForRequest(toks(12))).scores, new Map());
});

Deno.test("ApproxKvIndexer.removeWorker forgets the worker at once", async () => {
  const ix = new ApproxKvIndexer(4);
  ix.recordRouted(toks(8), "w1");
  ix.removeWorker("w1");
  assert.deepEqual((await ix.findMatchesForRequest(toks(8))).scores, new Map());
  ix.expire(); // its queued expiries are ignored
});

function stored(worker: string, id: number, t: number[]): RouterEvent {
  const { local, sequence } = computeBlockHashesSync(t, 4);
  const data: KvCacheEventData = {
    stored: {
      parent_hash: null,
      blocks: local.map((tokens_hash, i) => ({ block_hash: sequence[i]!, tokens_hash })),
    },
  };
  return { worker_id: worker, event: { event_id: id, data } };
}

Deno.test("KvIndexer drops duplicate events and starts over when a publisher does", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const ix = new KvIndexer(rt.namespace("ns").component("c"), 4);
    await ix.ready;
    ix.applyEvent(stored("w", 1, toks(8)));
    assert.equal(ix.tree.blockCount("w"), 2);
    ix.applyEvent(stored("w", 2, toks(12)));
    assert.equal(ix.tree.blockCount("w"), 3);
    ix.applyEvent(stored("w", 2, toks(16))); // a duplicate id: ignored
    assert.equal(ix.tree.blockCount("w"), 3);
    ix.applyEvent(stored("w", 1, toks(4, 5))); // id 1 again: the worker restarted
    assert.equal(ix.tree.blockCount("w"), 1);
    assert.deepEqual((await ix.findMatchesForRequest(toks(8))).scores, new Map());
    await ix.close();
  } finally {
    await rt.shutdown();
  }
});

Deno.test("KvIndexer drops a worker that never answers its resync requests", async () => {
  const rt = await DistributedRuntime.connect();
  try {
    const ix = new KvIndexer(rt.namespace("ns").component("c"), 4, {
      resyncTimeoutMs: 10,
      resyncAttempts: 2,
    });
    await ix.ready;
    ix.applyEvent(stored("ghost", 7, toks(8))); // met mid-stream: resync, buffered
    assert.deepEqual(ix.pendingResyncs, ["ghost"]);
    assert.equal(ix.tree.blockCount("ghost"), 0);
    const deadline = Date.now() + 5000;
    while (ix.pendingResyncs.length > 0) {
      if (Date.now() > deadline) throw new Error("timed out waiting for the resync to give up");
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(ix.tree.blockCount("ghost"), 0); // the buffered event was not applied
    // Its next event starts a new resync rather than being applied blindly.
    ix.applyEvent(stored("ghost", 8, toks(8)));
    assert.deepEqual(ix.pendingResyncs, ["ghost"]);
    assert.equal(ix.tree.blockCount("ghost"), 0);
    await ix.close();
  } finally {
    await rt.shutdown();
  }
});
