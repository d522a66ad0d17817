// ApproxKvIndexer units: the TTL of routed blocks on an injected clock.

import assert from "node:assert/strict";
import { ApproxKvIndexer } from "./approx_indexer.ts";

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
