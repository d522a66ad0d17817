import assert from "node:assert/strict";
import { DistributedRuntime, EmbeddedCluster } from "../../runtime/mod.ts";
import { NoInstancesError } from "../../runtime/errors.ts";
import { KvRouter, type OverlapLookup } from "./router.ts";

/** An indexer whose overlaps the test sets. */
function fixedOverlaps(scores: Map<string, number> = new Map()): OverlapLookup & {
  scores: Map<string, number>;
} {
  return {
    scores,
    findMatchesForRequest: () => Promise.resolve({ scores }),
  };
}

async function fleet(n: number, opts: { gate?: Promise<void> } = {}) {
  const cluster = new EmbeddedCluster();
  const runtimes: DistributedRuntime[] = [];
  const served: string[] = [];
  for (let i = 0; i < n; i++) {
    const rt = await DistributedRuntime.connect({ embedded: cluster });
    runtimes.push(rt);
    const endpoint = rt.namespace("ns").component("worker").endpoint("generate");
    const id = rt.leaseId;
    endpoint.serveEndpoint(async function* (req: unknown) {
      served.push(id);
      yield { token_ids: [1] };
      await opts.gate;
      yield {
        token_ids: [2, 3],
        finish_reason: "length",
        prompt: (req as { token_ids: number[] }).token_ids.length,
      };
    }).catch(() => {});
  }
  const front = await DistributedRuntime.connect({ embedded: cluster });
  const endpoint = front.namespace("ns").component("worker").endpoint("generate");
  const client = await endpoint.client();
  await client.waitForInstances({ count: n, timeoutMs: 3000 });
  return {
    endpoint,
    client,
    ids: runtimes.map((r) => r.leaseId),
    served,
    async close() {
      await client.close();
      await front.shutdown();
      await Promise.all(runtimes.map((r) => r.shutdown()));
    },
  };
}

const tokens = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

Deno.test("KvRouter sends a request to the worker holding its prefix", async () => {
  const f = await fleet(3);
  const indexer = fixedOverlaps();
  const router = new KvRouter(f.endpoint, { blockSize: 16, indexer, client: f.client });
  try {
    indexer.scores.set(f.ids[2]!, 4);
    const decision = await router.findBestMatch(tokens(64));
    assert.deepEqual(decision, { instanceId: f.ids[2], overlapBlocks: 4 });
    const stream = await router.generate({ token_ids: tokens(64) });
    assert.equal(stream.instanceId, f.ids[2]);
    const out = [];
    for await (const item of stream) out.push(item);
    assert.equal(out.length, 2);
    assert.deepEqual(f.served, [f.ids[2]]);
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter spreads requests with no cached prefix by predicted load, and forgets finished ones", async () => {
  const gate = Promise.withResolvers<void>();
  const f = await fleet(3, { gate: gate.promise });
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
  });
  try {
    const streams = [];
    for (let i = 0; i < 3; i++) streams.push(await router.generate({ token_ids: tokens(32) }));
    // Each pick saw the others' load: one request per worker.
    assert.deepEqual(new Set(streams.map((s) => s.instanceId)).size, 3);
    for (const id of f.ids) assert.equal(router.load(id).requests, 1);
    gate.resolve();
    await Promise.all(streams.map(async (s) => {
      for await (const _ of s) { /* drain */ }
    }));
    for (const id of f.ids) {
      assert.deepEqual(router.load(id), { activeBlocks: 0, prefillBlocks: 0, requests: 0 });
    }
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter's load book sees prefill end and decode grow", async () => {
  const gate = Promise.withResolvers<void>();
  const f = await fleet(1, { gate: gate.promise });
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
  });
  try {
    const stream = await router.generate({ token_ids: tokens(32) });
    const it = stream[Symbol.asyncIterator]();
    assert.deepEqual(router.load(f.ids[0]!), { activeBlocks: 2, prefillBlocks: 2, requests: 1 });
    await it.next(); // first token: prefill done, 33 tokens = 3 blocks
    assert.deepEqual(router.load(f.ids[0]!), { activeBlocks: 3, prefillBlocks: 0, requests: 1 });
    gate.resolve();
    while (!(await it.next()).done) { /* drain */ }
    assert.equal(router.load(f.ids[0]!).requests, 0);
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter takes a custom cost function's pick, and rejects a worker that does not exist", async () => {
  const f = await fleet(2);
  let seen = 0;
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(new Map([[f.ids[0]!, 2]])),
    client: f.client,
    costFunction: ({ candidates, tokenLength }) => {
      seen = tokenLength;
      // Prefer the worker with the least overlap, to prove the function decides.
      return [...candidates].sort((a, b) => a.overlapBlocks - b.overlapBlocks)[0]!.workerId;
    },
  });
  const bad = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
    costFunction: () => "nope",
  });
  try {
    assert.equal((await router.findBestMatch(tokens(40))).instanceId, f.ids[1]);
    assert.equal(seen, 40);
    await assert.rejects(() => bad.findBestMatch(tokens(40)), /not one of/);
  } finally {
    await router.close();
    await bad.close();
    await f.close();
  }
});

Deno.test("KvRouter fails clearly with no instances, and validates its options", async () => {
  const f = await fleet(1);
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
  });
  try {
    await assert.rejects(
      () => router.findBestMatch(tokens(4), { instances: ["0"] }),
      NoInstancesError,
    );
    assert.throws(
      () => new KvRouter(f.endpoint, { blockSize: 0, indexer: fixedOverlaps() }),
      /blockSize must be a positive integer, got 0/,
    );
    assert.throws(
      () => new KvRouter(f.endpoint, { blockSize: 16, temperature: -1, indexer: fixedOverlaps() }),
      /temperature must be >= 0/,
    );
  } finally {
    await router.close();
    await f.close();
  }
});
