import assert from "node:assert/strict";
import fc from "fast-check";
import { BlockManager, type FullBlock } from "./block_manager.ts";
import type { BlockHash, KvCacheEventData } from "./kv_types.ts";

/** Fake blocks of a chain: sequence hash = 100 * chain + index, local hash = index. */
const chain = (c: number, n: number): FullBlock[] =>
  Array.from(
    { length: n },
    (_, i) => ({ sequenceHash: BigInt(100 * c + i), localHash: BigInt(i) }),
  );
const hashes = (blocks: FullBlock[]) => blocks.map((b) => b.sequenceHash);

function manager(numGpuBlocks: number, watermark = 0) {
  const events: KvCacheEventData[] = [];
  const bm = new BlockManager({
    numGpuBlocks,
    blockSize: 4,
    watermark,
    onEvent: (e) => events.push(e),
  });
  return { bm, events };
}

Deno.test("a committed chain is stored once and a later request reuses its longest cached prefix", () => {
  const { bm, events } = manager(16);
  const a = chain(1, 3);
  bm.allocate(3);
  bm.commit(null, a);
  assert.deepEqual(events, [{
    stored: {
      parent_hash: null,
      blocks: a.map((b) => ({ block_hash: b.sequenceHash, tokens_hash: b.localHash })),
    },
  }]);
  bm.release(hashes(a).reverse(), 0);
  assert.equal(bm.activeBlocks, 0);
  assert.equal(bm.inactiveBlocks, 3);

  const request = [a[0]!.sequenceHash, a[1]!.sequenceHash, 999n];
  assert.equal(bm.matchPrefix(request), 2);
  bm.acquireCached(request.slice(0, 2));
  assert.equal(bm.activeBlocks, 2);
  assert.equal(bm.inactiveBlocks, 1);
  assert.equal(events.length, 1, "reusing cached blocks emits nothing");
});

Deno.test("a shared block stays active until its last holder releases it", () => {
  const { bm } = manager(8);
  const [b] = chain(1, 1);
  bm.allocate(1);
  bm.commit(null, [b!]);
  bm.acquireCached([b!.sequenceHash]);
  assert.equal(bm.refCount(b!.sequenceHash), 2);
  bm.release([b!.sequenceHash], 0);
  assert.equal(bm.refCount(b!.sequenceHash), 1);
  assert.equal(bm.inactiveBlocks, 0);
  bm.release([b!.sequenceHash], 0);
  assert.equal(bm.refCount(b!.sequenceHash), 0);
  assert.deepEqual(bm.inactiveHashes(), [b!.sequenceHash]);
  assert.throws(() => bm.release([b!.sequenceHash], 0), /not active/);
});

Deno.test("allocation evicts the least recently released inactive blocks first", () => {
  const { bm, events } = manager(4);
  const a = chain(1, 2);
  const b = chain(2, 2);
  bm.allocate(4);
  bm.commit(null, a);
  bm.commit(null, b);
  bm.release(hashes(b).reverse(), 0); // b1, b0 inactive first
  bm.release(hashes(a).reverse(), 0); // then a1, a0
  assert.deepEqual(bm.inactiveHashes(), [201n, 200n, 101n, 100n]);
  bm.acquireCached([100n]); // touching a0 takes it out of the pool
  bm.release([100n], 0); // and puts it back as most recently used
  bm.allocate(3);
  assert.deepEqual(events.at(-1), { removed: { block_hashes: [201n, 200n, 101n] } });
  assert.deepEqual(bm.inactiveHashes(), [100n]);
  assert.equal(bm.availableBlocks, 1);
  assert.throws(() => bm.allocate(2), /cannot allocate 2 blocks: 1 available/);
});

Deno.test("committing a block another sequence cached shares it and splits the stored runs", () => {
  const { bm, events } = manager(16);
  const shared = chain(1, 1);
  bm.allocate(1);
  bm.commit(null, shared);
  const mine = [{ sequenceHash: 7n, localHash: 70n }, shared[0]!, {
    sequenceHash: 8n,
    localHash: 80n,
  }];
  bm.allocate(3);
  bm.commit(5n, mine);
  assert.deepEqual(events.slice(1), [
    { stored: { parent_hash: 5n, blocks: [{ block_hash: 7n, tokens_hash: 70n }] } },
    { stored: { parent_hash: 100n, blocks: [{ block_hash: 8n, tokens_hash: 80n }] } },
  ]);
  assert.equal(bm.refCount(100n), 2);
  assert.equal(bm.activeBlocks, 3, "the duplicate's anonymous block was freed");
});

Deno.test("admission keeps the watermark free and counts revived cached blocks", () => {
  const { bm } = manager(100, 0.1);
  assert.equal(bm.watermarkBlocks, 10);
  assert.ok(bm.canAdmit([], 90));
  assert.ok(!bm.canAdmit([], 91));
  bm.allocate(1);
  bm.commit(null, chain(1, 1));
  bm.release([100n], 0);
  assert.ok(bm.canAdmit([], 90), "an inactive block is evictable");
  assert.ok(!bm.canAdmit([100n], 90), "reviving it takes a block");
  assert.throws(() => new BlockManager({ watermark: 1 }), /watermark must be in \[0, 1\)/);
  assert.throws(() => new BlockManager({ numGpuBlocks: 0 }), /numGpuBlocks/);
});

Deno.test("stored and removed events stay consistent under random use", () => {
  type Op =
    | { kind: "fill"; chain: number; length: number }
    | { kind: "release"; index: number }
    | { kind: "clear" };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({
      kind: fc.constant("fill" as const),
      chain: fc.integer({ min: 0, max: 5 }),
      length: fc.integer({ min: 1, max: 6 }),
    }),
    fc.record({ kind: fc.constant("release" as const), index: fc.nat() }),
    fc.record({ kind: fc.constant("clear" as const) }),
  );
  fc.assert(fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
    const { bm, events } = manager(12);
    const holders: BlockHash[][] = [];
    for (const o of ops) {
      if (o.kind === "fill") {
        const blocks = chain(o.chain, o.length);
        const hits = bm.matchPrefix(hashes(blocks));
        const fresh = blocks.length - hits;
        if (
          fresh >
            bm.availableBlocks -
              [...hashes(blocks).slice(0, hits)].filter((h) => bm.refCount(h) === 0).length
        ) continue;
        bm.acquireCached(hashes(blocks).slice(0, hits));
        bm.allocate(fresh);
        bm.commit(blocks[hits - 1]?.sequenceHash ?? null, blocks.slice(hits));
        holders.push(hashes(blocks));
      } else if (o.kind === "release" && holders.length > 0) {
        const [held] = holders.splice(o.index % holders.length, 1);
        bm.release(held!.reverse(), 0);
      } else if (o.kind === "clear") {
        bm.clearInactive();
      }
      assert.ok(bm.activeBlocks + bm.inactiveBlocks <= bm.numGpuBlocks);
    }
    // Replay the events: a removed hash was stored and not removed since.
    const cached = new Set<BlockHash>();
    for (const e of events) {
      if (e === "cleared") {
        cached.clear();
      } else if ("stored" in e) {
        for (const b of e.stored.blocks) {
          assert.ok(!cached.has(b.block_hash), `stored twice: ${b.block_hash}`);
          cached.add(b.block_hash);
        }
      } else {
        for (const h of e.removed.block_hashes) {
          assert.ok(cached.delete(h), `removed without being stored: ${h}`);
        }
      }
    }
    const live = new Set<BlockHash>();
    for (const held of holders) for (const h of held) live.add(h);
    for (const h of live) assert.ok(cached.has(h), `held block ${h} is cached per the events`);
    for (const h of bm.inactiveHashes()) assert.ok(cached.has(h));
    assert.equal(cached.size, bm.activeBlocks + bm.inactiveBlocks);
  }));
});
