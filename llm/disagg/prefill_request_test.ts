// The prefill request door: valid requests pass unchanged, anything else is refused with a
// reason (never thrown past it), and a running prefill worker drops bad items (acked, so
// never redelivered) while it serves the good ones around them.

import assert from "node:assert/strict";
import fc from "fast-check";
import { TransferAgent } from "../../native/mod.ts";
import { DecodeKvCache } from "./kv_cache.ts";
import {
  checkDecodeMemoryInfo,
  InvalidPrefillRequestError,
  prefillRequestProblem,
} from "./prefill_request.ts";
import { type PrefillResult, PrefillWorker } from "./prefill_worker.ts";
import type { RemotePrefillRequest } from "./protocol.ts";
import { EmbeddedPrefillQueue } from "./queue.ts";

const MAX_BLOCKS = 8;

/** Valid requests for a worker staging MAX_BLOCKS blocks. */
const validRequest: fc.Arbitrary<RemotePrefillRequest> = fc
  .record({
    block_size: fc.integer({ min: 1, max: 16 }),
    blocks: fc.integer({ min: 0, max: MAX_BLOCKS }),
    first: fc.integer({ min: 0, max: 4 }),
    tail: fc.nat(),
    request_id: fc.string({ minLength: 1, maxLength: 40 }),
    engine_agent: fc.string({ minLength: 1, maxLength: 40 }),
    expires_at: fc.double({ noNaN: true, noDefaultInfinity: true }),
    seed: fc.nat(),
  }, { noNullPrototype: true })
  .map((r) => {
    const total = r.blocks + r.first;
    const len = total === 0 ? 0 : (total - 1) * r.block_size + 1 + (r.tail % r.block_size);
    return {
      request_id: r.request_id,
      token_ids: Array.from({ length: len }, (_, i) => (r.seed + i * 7919) % 2 ** 32),
      block_size: r.block_size,
      engine_agent: r.engine_agent,
      first_block: r.first > total ? total : r.first,
      block_ids: Array.from({ length: total - Math.min(r.first, total) }, (_, i) => i),
      expires_at: r.expires_at,
    };
  });

Deno.test("valid prefill requests pass the door unchanged", () => {
  fc.assert(
    fc.property(validRequest, (req) => {
      const copy = structuredClone(req);
      assert.equal(prefillRequestProblem(req, { maxBlocks: MAX_BLOCKS }), undefined);
      assert.deepEqual(req, copy);
    }),
    { numRuns: 500 },
  );
});

Deno.test("random and corrupted prefill requests are refused with a reason, never thrown", () => {
  const corrupt = fc.oneof(
    fc.constantFrom(NaN, Infinity, -1, 1.5, 2 ** 32, 2 ** 60, "7", null, undefined, [], {}),
    fc.anything(),
  );
  const fields = [
    "request_id",
    "token_ids",
    "block_size",
    "engine_agent",
    "first_block",
    "block_ids",
    "expires_at",
  ];
  fc.assert(
    fc.property(fc.anything(), (v) => {
      prefillRequestProblem(v, { maxBlocks: MAX_BLOCKS });
    }),
    { numRuns: 300 },
  );
  fc.assert(
    fc.property(validRequest, fc.constantFrom(...fields), corrupt, (req, field, bad) => {
      const r: Record<string, unknown> = { ...req, [field]: bad };
      const problem = prefillRequestProblem(r, { maxBlocks: MAX_BLOCKS });
      if (problem !== undefined) return;
      // What passes is within bounds whatever was put in.
      const ids = r.token_ids as number[];
      assert.ok(ids.every((t) => Number.isInteger(t) && t >= 0 && t < 2 ** 32));
      const bs = r.block_size as number;
      const blocks = Math.ceil(ids.length / bs);
      const first = (r.first_block ?? 0) as number;
      assert.ok(Number.isInteger(first) && first >= 0 && blocks - first <= MAX_BLOCKS);
      assert.ok((r.block_ids as number[]).every((b) => Number.isSafeInteger(b) && b >= 0));
      assert.ok(Number.isFinite(r.expires_at));
      assert.ok(typeof r.engine_agent === "string" && typeof r.request_id === "string");
    }),
    { numRuns: 1000 },
  );
});

Deno.test("the prefill door refuses requests that would write past the staging memory", () => {
  const req = (blocks: number, extra: Partial<Record<string, unknown>> = {}) => ({
    request_id: "r",
    token_ids: Array.from({ length: blocks * 4 }, (_, i) => i),
    block_size: 4,
    engine_agent: "decode",
    first_block: 0,
    block_ids: Array.from({ length: blocks }, (_, i) => i),
    expires_at: 1,
    ...extra,
  });
  assert.equal(prefillRequestProblem(req(MAX_BLOCKS), { maxBlocks: MAX_BLOCKS }), undefined);
  assert.match(prefillRequestProblem(req(MAX_BLOCKS + 1), { maxBlocks: MAX_BLOCKS })!, /stages/);
  assert.match(
    prefillRequestProblem(req(2, { block_ids: [0] }), { maxBlocks: MAX_BLOCKS })!,
    /block_ids/,
  );
  assert.match(
    prefillRequestProblem(req(2, { token_ids: [1, NaN] }), { maxBlocks: MAX_BLOCKS })!,
    /token_ids\[1\]/,
  );
  assert.match(
    prefillRequestProblem(req(1, { engine_agent: "x".repeat(5000) }), { maxBlocks: 8 })!,
    /engine_agent/,
  );
});

Deno.test("decode memory info is checked: its agent, its descriptor list", () => {
  const info = {
    agent_name: "d",
    metadata: "{}",
    block_bytes: 64,
    descs: { mem_type: "DRAM", descs: [{ region: "k", offset: 0, length: 64 }] },
  };
  assert.equal(checkDecodeMemoryInfo(info, "d"), info);
  for (
    const bad of [
      null,
      { ...info, agent_name: "other" },
      { ...info, block_bytes: 0 },
      { ...info, descs: { mem_type: "HBM", descs: [] } },
      { ...info, descs: { mem_type: "DRAM", descs: [{ region: "k", offset: -1, length: 64 }] } },
      { ...info, metadata: 5 },
    ]
  ) {
    assert.throws(() => checkDecodeMemoryInfo(bad, "d"), InvalidPrefillRequestError);
  }
});

Deno.test("PrefillWorker drops and acks invalid items and serves the valid ones around them", async () => {
  const BLOCK_BYTES = 256;
  const decodeAgent = new TransferAgent("decode-door");
  const prefillAgent = new TransferAgent("prefill-door");
  const kv = new DecodeKvCache(decodeAgent, { numBlocks: 4, blockBytes: BLOCK_BYTES });
  const queue = new EmbeddedPrefillQueue<RemotePrefillRequest>({ ackWaitMs: 50 });
  const worker = new PrefillWorker(prefillAgent, {
    blockBytes: BLOCK_BYTES,
    maxBlocks: 2,
    resolveDecode: () => Promise.resolve(kv.memoryInfo()),
  });
  const good = (id: string, blockIds: number[]): RemotePrefillRequest => ({
    request_id: id,
    token_ids: Array.from({ length: 4 * blockIds.length }, (_, i) => i + 1),
    block_size: 4,
    engine_agent: "decode-door",
    first_block: 0,
    block_ids: blockIds,
    expires_at: Date.now() + 60_000,
  });
  const bad: unknown[] = [
    null,
    "not a request",
    { ...good("nan", [0]), token_ids: [1, NaN, 3, 4] },
    good("past-staging", [0, 1, 2]), // 3 blocks, the worker stages 2
    good("past-decode", [0, 9]), // block 9 of a 4-block decode cache
    { ...good("agent", [0]), engine_agent: { toString: 1 } },
  ];
  const stop = new AbortController();
  const handled: PrefillResult[] = [];
  const started: string[] = [];
  try {
    await queue.enqueue(good("a", [0]));
    for (const b of bad) await queue.enqueue(b as RemotePrefillRequest);
    await queue.enqueue(good("b", [2, 3]));
    const running = worker.run(queue, {
      signal: stop.signal,
      pollMs: 20,
      onStart: (id) => started.push(id),
      onResult: (r) => handled.push(r),
    });
    const deadline = Date.now() + 5000;
    while (handled.length < 2 || (await queue.size()) > 0) {
      if (Date.now() > deadline) throw new Error(`timed out; handled ${JSON.stringify(handled)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    // Past the ack wait, nothing comes back: the bad items were acked, not left to redeliver.
    await new Promise((r) => setTimeout(r, 120));
    assert.equal(await queue.size(), 0);
    assert.deepEqual(handled.map((r) => [r.requestId, r.blocks]), [["a", 1], ["b", 2]]);
    assert.deepEqual(started, ["a", "past-decode", "b"]);
    await kv.waitPrefilled("a", { timeoutMs: 1000 });
    await kv.waitPrefilled("b", { timeoutMs: 1000 });
    assert.equal(kv.takeLate("past-decode"), false); // nothing was written or announced
    stop.abort();
    await running;
  } finally {
    stop.abort();
    worker.close();
    kv.close();
    await queue.close();
    prefillAgent.close();
    decodeAgent.close();
  }
});
