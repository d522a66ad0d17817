import assert from "node:assert/strict";
import { within } from "../../tests/_helpers/backends.ts";
import { DistributedRuntime, EmbeddedCluster } from "../../runtime/mod.ts";
import type { Context } from "../../runtime/context.ts";
import { CancelledError, InvalidArgumentError, NoInstancesError } from "../../runtime/errors.ts";
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

async function fleet(
  n: number,
  opts: { gate?: Promise<void>; onStopped?: (ctx: Context) => void } = {},
) {
  const cluster = new EmbeddedCluster();
  const runtimes: DistributedRuntime[] = [];
  const served: string[] = [];
  for (let i = 0; i < n; i++) {
    const rt = await DistributedRuntime.connect({ embedded: cluster });
    runtimes.push(rt);
    const endpoint = rt.namespace("ns").component("worker").endpoint("generate");
    const id = rt.leaseId;
    endpoint.serveEndpoint(async function* (req: unknown, ctx: Context) {
      served.push(id);
      if (opts.onStopped) ctx.onStop(() => opts.onStopped!(ctx));
      yield { token_ids: [1] };
      await Promise.race([opts.gate, ctx.stopped()]);
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

/** `n` token ids from `from` on (prompts from different `from`s share no block). */
const tokens = (n: number, from = 1) => Array.from({ length: n }, (_, i) => i + from);

const idle = { activeBlocks: 0, prefillBlocks: 0, requests: 0, waiting: 0 };

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
    // Different prompts: the same one would count as cached where the first is being prefilled.
    for (let i = 0; i < 3; i++) {
      streams.push(await router.generate({ token_ids: tokens(32, 1 + 1000 * i) }));
    }
    // Each pick saw the others' load: one request per worker.
    assert.deepEqual(new Set(streams.map((s) => s.instanceId)).size, 3);
    for (const id of f.ids) assert.equal(router.load(id).requests, 1);
    gate.resolve();
    await Promise.all(streams.map(async (s) => {
      for await (const _ of s) { /* drain */ }
    }));
    for (const id of f.ids) {
      assert.deepEqual(router.load(id), idle);
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
    assert.deepEqual(router.load(f.ids[0]!), {
      activeBlocks: 2,
      prefillBlocks: 2,
      requests: 1,
      waiting: 1,
    });
    await it.next(); // first token: prefill done, 33 tokens = 3 blocks
    assert.deepEqual(router.load(f.ids[0]!), {
      activeBlocks: 3,
      prefillBlocks: 0,
      requests: 1,
      waiting: 0,
    });
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

Deno.test("KvRouter.findBestMatch books a decision under requestId until it is freed", async () => {
  const f = await fleet(2);
  const routed: [number, string][] = [];
  const indexer = {
    ...fixedOverlaps(),
    recordRouted: (t: ArrayLike<number>, w: string) => void routed.push([t.length, w]),
  };
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer,
    client: f.client,
    random: () => 0,
  });
  try {
    // Without a request id nothing is booked, as before.
    const plain = await router.findBestMatch(tokens(32));
    assert.deepEqual(router.load(plain.instanceId), idle);
    assert.deepEqual(routed, []);

    const first = await router.findBestMatch(tokens(32), { requestId: "r1" });
    assert.deepEqual(router.load(first.instanceId), {
      activeBlocks: 2,
      prefillBlocks: 2,
      requests: 1,
      waiting: 1,
    });
    assert.deepEqual(routed, [[32, first.instanceId]]);
    // The next pick sees that load and goes to the other worker.
    const second = await router.findBestMatch(tokens(32, 1001), { requestId: "r2" });
    assert.notEqual(second.instanceId, first.instanceId);
    await assert.rejects(
      () => router.findBestMatch(tokens(32), { requestId: "r1" }),
      (err: unknown) => err instanceof InvalidArgumentError && /already booked/.test(err.message),
    );
    await assert.rejects(() => router.findBestMatch(tokens(32), { requestId: "" }), /non-empty/);

    router.markPrefillCompleted("r1");
    assert.deepEqual(router.load(first.instanceId), {
      activeBlocks: 2,
      prefillBlocks: 0,
      requests: 1,
      waiting: 0,
    });
    router.addOutputTokens("r1", 1); // 33 tokens: 3 blocks
    assert.equal(router.load(first.instanceId).activeBlocks, 3);
    assert.throws(() => router.addOutputTokens("r1", -1), InvalidArgumentError);
    router.free("r1");
    router.free("r1"); // idempotent
    router.markPrefillCompleted("nope"); // unknown ids are ignored
    assert.deepEqual(router.load(first.instanceId), idle);
    router.free("r2");
    assert.deepEqual(router.load(second.instanceId), idle);
    // A freed id may be booked again.
    await router.findBestMatch(tokens(16), { requestId: "r1" });
    router.free("r1");
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter frees an unread stream when its context is stopped", async () => {
  const gate = Promise.withResolvers<void>();
  const f = await fleet(1, { gate: gate.promise });
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
  });
  try {
    const stream = await router.generate({ token_ids: tokens(32) });
    assert.equal(router.load(f.ids[0]!).requests, 1);
    stream.context.stopGenerating();
    assert.deepEqual(router.load(f.ids[0]!), idle);
    stream.context.kill(); // a second notice changes nothing
    assert.deepEqual(router.load(f.ids[0]!), idle);
  } finally {
    gate.resolve();
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter stops a stream nobody reads or stops, and frees its load", async () => {
  const stopped = Promise.withResolvers<Context>();
  const f = await fleet(1, { gate: new Promise(() => {}), onStopped: stopped.resolve });
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
    unreadStreamTimeoutMs: 20,
  });
  try {
    const stream = await router.generate({ token_ids: tokens(32) });
    assert.equal(router.load(f.ids[0]!).requests, 1);
    // The worker's handler waits forever: only the router's deadline can stop it.
    await within(stopped.promise, 5000, "the router to stop the unread stream on its worker");
    assert.deepEqual(router.load(f.ids[0]!), idle);
    assert.equal(stream.context.isStopped(), true);
    await assert.rejects(
      async () => {
        for await (const _ of stream) { /* nothing */ }
      },
      (err: unknown) => err instanceof CancelledError && /not read within 20 ms/.test(err.message),
    );
    assert.throws(
      () => new KvRouter(f.endpoint, { blockSize: 16, unreadStreamTimeoutMs: 0 }),
      /unreadStreamTimeoutMs must be > 0, got 0/,
    );
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter keeps a stream that is read in time", async () => {
  const gate = Promise.withResolvers<void>();
  const f = await fleet(1, { gate: gate.promise });
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
    unreadStreamTimeoutMs: 20,
  });
  try {
    const stream = await router.generate({ token_ids: tokens(32) });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    // Past the deadline: the stream is being read, so it stays.
    await new Promise((r) => setTimeout(r, 40));
    assert.equal(router.load(f.ids[0]!).requests, 1);
    gate.resolve();
    const rest = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.equal(rest.length, 1);
    assert.deepEqual(router.load(f.ids[0]!), idle);
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter rejects a custom cost that is not a finite number, naming the worker", async () => {
  const f = await fleet(2);
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
    temperature: 0.5,
    costFunction: () => new Map([[f.ids[0]!, 1], [f.ids[1]!, NaN]]),
  });
  try {
    await assert.rejects(
      () => router.findBestMatch(tokens(32)),
      (err: unknown) =>
        err instanceof InvalidArgumentError &&
        new RegExp(`cost function's costs: .*worker "${f.ids[1]}" .* got NaN`).test(err.message),
    );
    assert.throws(
      () => new KvRouter(f.endpoint, { blockSize: 16, overlapScoreWeight: Infinity }),
      /overlapScoreWeight must be finite and >= 0, got Infinity/,
    );
    assert.throws(
      () => new KvRouter(f.endpoint, { blockSize: 16, queuedPrefillWeight: -1 }),
      /queuedPrefillWeight must be finite and >= 0, got -1/,
    );
  } finally {
    await router.close();
    await f.close();
  }
});

Deno.test("KvRouter sends a prompt whose prefix is still being prefilled to the worker prefilling it, until its first token", async () => {
  const f = await fleet(2);
  const router = new KvRouter(f.endpoint, {
    blockSize: 16,
    indexer: fixedOverlaps(),
    client: f.client,
  });
  try {
    // Nothing is cached anywhere (the indexer has no events yet): a 64-token prompt goes to
    // some worker and is booked there; the other worker has a long prompt of its own queued.
    const first = await router.findBestMatch(tokens(64), { requestId: "a" });
    assert.equal(first.overlapBlocks, 0);
    const other = f.ids.find((id) => id !== first.instanceId)!;
    const long = tokens(512).map((t) => t + 10_000);
    await router.findBestMatch(long, { requestId: "x", instances: [other] });
    // A longer prompt with the same 64 tokens first: its 4 blocks count as cached where the
    // first prompt is being prefilled.
    const second = await router.findBestMatch(tokens(80), { requestId: "b" });
    assert.deepEqual(second, { instanceId: first.instanceId, overlapBlocks: 4 });
    // An unbooked pick sees both (the second's 5 blocks), and books nothing.
    assert.deepEqual(await router.findBestMatch(tokens(96)), {
      instanceId: first.instanceId,
      overlapBlocks: 5,
    });
    // Once both have their first token, only the indexer's events count (none here).
    router.markPrefillCompleted("a");
    assert.equal((await router.findBestMatch(tokens(80))).overlapBlocks, 5); // b still pending
    router.addOutputTokens("b", 1);
    assert.equal((await router.findBestMatch(tokens(80))).overlapBlocks, 0);
    router.free("a");
    router.free("b");
    router.free("x");
    // generate() counts its own prompt as pending while its stream has no output yet.
    const stream = await router.generate({ token_ids: tokens(48) });
    const there = { instances: [stream.instanceId] };
    assert.equal((await router.findBestMatch(tokens(48), there)).overlapBlocks, 3);
    for await (const _ of stream) { /* drain */ }
    assert.equal((await router.findBestMatch(tokens(48), there)).overlapBlocks, 0);
  } finally {
    await router.close();
    await f.close();
  }
});
