import assert from "node:assert/strict";
import fc from "fast-check";
import { BlockManager } from "./block_manager.ts";
import type { KvCacheEventData, StorageTier } from "./kv_types.ts";
import { hashPromptBlocks, Scheduler, type SchedulerOptions, type Sequence } from "./scheduler.ts";
import { decodeTimeMs, prefillTimeMs, stepTimeMs } from "./timing.ts";

const BS = 4;
const prompt = (n: number, base = 1) => Array.from({ length: n }, (_, i) => base + i);

function setup(
  numGpuBlocks: number,
  options: SchedulerOptions = {},
  watermark = 0,
  hostBlocks = 0,
) {
  const events: KvCacheEventData[] = [];
  /** The same events with their tiers. */
  const tiered: Array<{ tier: StorageTier; data: KvCacheEventData }> = [];
  const bm = new BlockManager({
    numGpuBlocks,
    blockSize: BS,
    watermark,
    hostBlocks,
    onEvent: (e, tier = "device") => {
      events.push(e);
      tiered.push({ tier, data: e });
    },
  });
  const scheduler = new Scheduler(bm, options);
  const outputs = new Map<string, number[]>();
  const finished = new Set<string>();
  function add(id: string, tokenIds: number[], maxTokens: number): Sequence {
    outputs.set(id, []);
    return scheduler.add({
      id,
      tokenIds,
      maxTokens,
      blocks: hashPromptBlocks(tokenIds, BS),
      nextToken: (i) => 1000 + i,
      onToken: (t, done) => {
        outputs.get(id)!.push(t);
        if (done) finished.add(id);
      },
    });
  }
  /** Steps until idle; fails after `limit` steps. */
  function drain(limit = 1000) {
    const plans = [];
    for (let i = 0; scheduler.hasWork; i++) {
      assert.ok(i < limit, `still busy after ${limit} steps`);
      plans.push(scheduler.step());
    }
    return plans;
  }
  return { bm, scheduler, events, tiered, outputs, finished, add, drain };
}

Deno.test("the scheduler admits at most maxNumSeqs sequences per pass", () => {
  const s = setup(1000, { maxNumSeqs: 2 });
  for (const id of ["a", "b", "c"]) s.add(id, prompt(8, id.charCodeAt(0)), 3);
  const first = s.scheduler.step();
  assert.deepEqual(first.entries.map((e) => e.sequence.id), ["a", "b"]);
  assert.equal(s.scheduler.numWaiting, 1);
  s.drain();
  assert.deepEqual([...s.finished].sort(), ["a", "b", "c"]);
  for (const out of s.outputs.values()) assert.deepEqual(out, [1000, 1001, 1002]);
  assert.equal(s.bm.activeBlocks, 0, "finished sequences hold no blocks");
});

Deno.test("a pass never computes more than maxNumBatchedTokens tokens", () => {
  const s = setup(1000, { maxNumBatchedTokens: 10 });
  s.add("a", prompt(6), 4);
  s.add("b", prompt(6, 50), 4);
  const plans = s.drain();
  for (const p of plans) {
    assert.ok(p.entries.reduce((n, e) => n + e.tokens, 0) <= 10);
  }
  // Pass 1: a's 6 tokens and 4 of b's; pass 2: a decodes while b finishes its prefill.
  assert.deepEqual(plans[0]!.entries.map((e) => [e.sequence.id, e.tokens]), [["a", 6], ["b", 4]]);
  assert.deepEqual(plans[1]!.entries.map((e) => [e.sequence.id, e.tokens, e.decode]), [
    ["a", 1, true],
    ["b", 2, false],
  ]);
  assert.equal(s.outputs.get("b")!.length, 4);
});

Deno.test("a long prompt is prefilled in chunks and its first token comes with the last chunk", () => {
  const s = setup(1000, { maxNumBatchedTokens: 32 });
  s.add("long", prompt(100), 2);
  const plans = s.drain();
  assert.deepEqual(plans.map((p) => p.prefillTokens), [32, 32, 32, 4, 0]);
  assert.deepEqual(plans.map((p) => p.decodeSequences), [0, 0, 0, 0, 1]);
  assert.deepEqual(s.outputs.get("long"), [1000, 1001]);
  // Every full prompt block (25 of them) was reported as it was computed.
  const stored = s.events.flatMap((e) =>
    typeof e === "object" && "stored" in e ? e.stored.blocks : []
  );
  assert.equal(stored.length, 25);
  assert.deepEqual(
    stored.map((b) => b.block_hash),
    (hashPromptBlocks(prompt(100), BS)).map((b) => b.sequenceHash),
  );
});

Deno.test("a repeated prompt reuses the cached prefix and recomputes only its last token", () => {
  const s = setup(1000);
  s.add("first", prompt(16), 1);
  const [p1] = s.drain();
  assert.equal(p1!.prefillTokens, 16);
  s.add("again", prompt(16), 1);
  const [p2] = s.drain();
  // 4 full blocks are cached, but the last token's logits are needed: 3 blocks hit.
  assert.equal(p2!.prefillTokens, 4);
  s.add("longer", prompt(20), 1);
  const [p3] = s.drain();
  assert.equal(p3!.prefillTokens, 4, "the first 16 tokens hit");
  assert.equal(s.scheduler.metrics().gpu_prefix_cache_hit_rate, (12 + 16) / (16 + 16 + 20));
});

Deno.test("a prefix evicted to the host tier while its request waited is copied back as it is admitted", () => {
  // 8 GPU blocks, a host tier of 16; copying a block back takes 0.5 ms (1 at speedup 0.5).
  const s = setup(8, { hostOnboardMsPerBlock: 0.5, speedupRatio: 0.5 }, 0, 16);
  s.add("a", prompt(17), 1);
  s.drain();
  const aBlocks = hashPromptBlocks(prompt(16), BS).map((b) => b.sequenceHash);
  assert.equal(s.bm.matchPrefix(aBlocks), 4, "a's 4 full blocks are cached");
  // `big` takes the GPU (7 blocks, then an 8th as it decodes): `again`, which continues a's
  // prompt, cannot be admitted beside it and waits while a's blocks go to the host tier.
  s.add("big", prompt(28, 100), 2);
  const again = s.add("again", prompt(20), 1);
  const first = s.scheduler.step();
  assert.deepEqual(first.entries.map((e) => e.sequence.id), ["big"]);
  assert.equal(again.state, "waiting");
  const before = s.tiered.length;
  const plans = [first, ...s.drain()];
  assert.ok(aBlocks.every((h) => s.bm.isHeld(h)), "a's blocks stayed in one tier or the other");
  const admitting = plans.find((p) => p.entries.some((e) => e.sequence === again))!;
  assert.equal(admitting.onboardedBlocks, 4, "all four came back from the host tier");
  assert.equal(again.cachedTokens, 16);
  assert.equal(admitting.prefillTokens, 4, "only the new block is computed");
  assert.equal(
    admitting.durationMs,
    stepTimeMs({ prefillTokens: 4, decodeSequences: 0, kvUsage: admitting.kvUsage }, 0.5) + 4 * 1,
  );
  for (const p of plans) if (p !== admitting) assert.equal(p.onboardedBlocks, 0);
  // Back on the GPU: stored on the device, then removed from the host tier, in that order.
  const moves = s.tiered.slice(before).flatMap(({ tier, data: e }) =>
    typeof e !== "object"
      ? []
      : ("stored" in e ? e.stored.blocks.map((b) => b.block_hash) : e.removed.block_hashes)
        .filter((h) => aBlocks.includes(h))
        .map((h) => `${tier} ${"stored" in e ? "+" : "-"}${aBlocks.indexOf(h)}`)
  );
  assert.deepEqual(moves.slice(-8), [
    "device +0",
    "device +1",
    "device +2",
    "device +3",
    "host_pinned -0",
    "host_pinned -1",
    "host_pinned -2",
    "host_pinned -3",
  ]);
  assert.equal(s.scheduler.metrics().gpu_prefix_cache_hit_rate, (0 + 0 + 16) / (17 + 28 + 20));
  assert.equal(s.bm.activeBlocks, 0);
});

Deno.test("a bad host onboard time is refused", () => {
  const bm = new BlockManager({ numGpuBlocks: 8, blockSize: BS });
  for (const bad of [-1, NaN, Infinity]) {
    assert.throws(() => new Scheduler(bm, { hostOnboardMsPerBlock: bad }), /hostOnboardMsPerBlock/);
  }
});

Deno.test("blocks filled by decoding are cached and reported like prompt blocks", () => {
  const s = setup(1000);
  s.add("a", prompt(4), 6); // 4 prompt tokens + 5 computed outputs = 9 tokens: 2 full blocks
  s.drain();
  const stored = s.events.flatMap((e) => typeof e === "object" && "stored" in e ? [e.stored] : []);
  const all = [...prompt(4), 1000, 1001, 1002, 1003, 1004, 1005];
  const expected = hashPromptBlocks(all.slice(0, 8), BS);
  assert.deepEqual(
    stored.flatMap((x) => x.blocks.map((b) => b.block_hash)),
    expected.map((b) => b.sequenceHash),
  );
  assert.deepEqual(stored.map((x) => x.parent_hash), [null, expected[0]!.sequenceHash]);
  assert.equal(s.bm.inactiveBlocks, 2);
});

Deno.test("when blocks run out the newest sequence is preempted and still completes", () => {
  // 6 blocks of 4 tokens; two sequences of 8 prompt tokens growing by 8 tokens each.
  const s = setup(6);
  const a = s.add("a", prompt(8), 9);
  const b = s.add("b", prompt(8, 40), 9);
  const plans = s.drain();
  const preempted = plans.flatMap((p) => p.preempted.map((q) => q.id));
  assert.ok(preempted.length > 0, "the cache is too small for both: someone was preempted");
  assert.equal(preempted[0], "b", "the newest running sequence goes first");
  assert.equal(a.preemptions, 0);
  assert.ok(b.preemptions > 0);
  const expected = Array.from({ length: 9 }, (_, i) => 1000 + i);
  assert.deepEqual(s.outputs.get("a"), expected);
  assert.deepEqual(s.outputs.get("b"), expected, "recompute resumes after the last token streamed");
  assert.equal(s.bm.activeBlocks, 0);
});

Deno.test("an aborted sequence frees its blocks at once, waiting or running", () => {
  const s = setup(100);
  const a = s.add("a", prompt(10), 50);
  s.scheduler.step();
  assert.equal(s.bm.activeBlocks, 3);
  s.scheduler.abort(a);
  assert.equal(a.state, "aborted");
  assert.equal(s.bm.activeBlocks, 0);
  assert.equal(s.bm.inactiveBlocks, 2, "its full blocks stay cached");
  const b = s.add("b", prompt(10), 5);
  s.scheduler.abort(b);
  assert.equal(s.scheduler.hasWork, false);
});

Deno.test("a pass that was planned before an abort does not advance the aborted sequence", () => {
  const s = setup(100);
  const a = s.add("a", prompt(8), 5);
  const plan = s.scheduler.schedule();
  s.scheduler.abort(a);
  s.scheduler.apply(plan);
  assert.deepEqual(s.outputs.get("a"), []);
  assert.equal(s.bm.activeBlocks, 0);
});

Deno.test("maxTokens is capped to what fits the cache and an oversized prompt is refused", () => {
  const s = setup(4); // 16 tokens
  const seq = s.add("a", prompt(10), 100);
  assert.equal(seq.maxTokens, 7);
  s.drain();
  assert.equal(s.outputs.get("a")!.length, 7);
  assert.throws(() => s.add("b", prompt(17), 1), /does not fit the mocker's KV cache of 16 tokens/);
  assert.throws(() => s.add("c", [], 1), /non-empty prompt/);
  assert.throws(() => s.add("d", prompt(2), 0), /maxTokens must be a whole number >= 1/);
});

Deno.test("each pass is timed by the prefill and decode polynomials", () => {
  const s = setup(100, { speedupRatio: 2 });
  s.add("a", prompt(8), 2);
  const [prefill, decode] = s.drain();
  assert.equal(prefill!.durationMs, prefillTimeMs(8) / 2);
  assert.equal(decode!.durationMs, decodeTimeMs(3 / 100) / 2);
  assert.equal(decode!.kvUsage, 3 / 100);
});

Deno.test("metrics report slots, blocks and the waiting queue", () => {
  const s = setup(100, { maxNumSeqs: 1 });
  s.add("a", prompt(8), 3);
  s.add("b", prompt(8, 30), 3);
  s.scheduler.step();
  assert.deepEqual(s.scheduler.metrics(), {
    request_active_slots: 1,
    request_total_slots: 1,
    kv_active_blocks: 2,
    kv_total_blocks: 100,
    num_requests_waiting: 1,
    gpu_cache_usage_perc: 0.02,
    gpu_prefix_cache_hit_rate: 0,
  });
});

Deno.test("random workloads on a small cache, with or without a host tier, all complete with consistent KV events", () => {
  const request = fc.record({
    prefix: fc.integer({ min: 0, max: 2 }),
    prefixLength: fc.integer({ min: 0, max: 24 }),
    suffix: fc.array(fc.integer({ min: 1, max: 50 }), { minLength: 1, maxLength: 16 }),
    maxTokens: fc.integer({ min: 1, max: 20 }),
  });
  const config = fc.record({
    numGpuBlocks: fc.integer({ min: 11, max: 32 }), // >= 44 tokens: every prompt fits
    maxNumSeqs: fc.integer({ min: 1, max: 8 }),
    maxNumBatchedTokens: fc.integer({ min: 4, max: 64 }),
    hostBlocks: fc.constantFrom(0, 0, 1, 4, 16),
  });
  fc.assert(
    fc.property(config, fc.array(request, { minLength: 1, maxLength: 12 }), (cfg, requests) => {
      const s = setup(cfg.numGpuBlocks, cfg, 0, cfg.hostBlocks);
      const seqs = requests.map((r, i) =>
        s.add(`r${i}`, [...prompt(r.prefixLength, 1000 * (r.prefix + 1)), ...r.suffix], r.maxTokens)
      );
      s.drain(10_000);
      seqs.forEach((seq, i) => {
        assert.equal(seq.state, "finished");
        assert.ok(seq.maxTokens <= requests[i]!.maxTokens);
        assert.deepEqual(
          s.outputs.get(`r${i}`),
          Array.from({ length: seq.maxTokens }, (_, k) => 1000 + k),
        );
      });
      assert.equal(s.bm.activeBlocks, 0);
      const cached = { device: new Set<bigint>(), host_pinned: new Set<bigint>() };
      for (const { tier, data: e } of s.tiered) {
        assert.notEqual(e, "cleared");
        assert.ok(tier === "device" || tier === "host_pinned");
        const set = cached[tier];
        if (typeof e === "object" && "stored" in e) {
          for (const b of e.stored.blocks) {
            assert.ok(!set.has(b.block_hash), "stored twice");
            set.add(b.block_hash);
          }
        } else if (typeof e === "object") {
          for (const h of e.removed.block_hashes) {
            assert.ok(set.delete(h), "removed but not stored");
          }
        }
      }
      // The events name exactly the blocks held in each tier.
      assert.equal(cached.device.size, s.bm.inactiveBlocks);
      assert.equal(cached.host_pinned.size, s.bm.hostCachedBlocks);
      for (const h of cached.device) assert.ok(s.bm.isCached(h));
      for (const h of cached.host_pinned) assert.ok(s.bm.isOnHost(h));
      assert.ok(s.bm.hostCachedBlocks <= cfg.hostBlocks);
    }),
    { numRuns: 200 },
  );
});
