import assert from "node:assert/strict";
import fc from "fast-check";
import {
  BlockManager,
  cachePrefix,
  DEFAULT_NUM_GPU_BLOCKS,
  defaultHostBlocks,
  type FullBlock,
  prefixToLoad,
} from "./block_manager.ts";
import type { BlockHash, KvCacheEventData, StorageTier } from "./kv_types.ts";

/** Fake blocks of a chain: sequence hash = 100 * chain + index, local hash = index. */
const chain = (c: number, n: number): FullBlock[] =>
  Array.from(
    { length: n },
    (_, i) => ({ sequenceHash: BigInt(100 * c + i), localHash: BigInt(i) }),
  );
const hashes = (blocks: FullBlock[]) => blocks.map((b) => b.sequenceHash);

function manager(numGpuBlocks: number, watermark = 0, hostBlocks = 0) {
  const events: KvCacheEventData[] = [];
  /** The same events with their tiers. */
  const tiered: Array<{ tier: StorageTier; data: KvCacheEventData }> = [];
  const bm = new BlockManager({
    numGpuBlocks,
    blockSize: 4,
    watermark,
    hostBlocks,
    onEvent: (e, tier = "device") => {
      events.push(e);
      tiered.push({ tier, data: e });
    },
  });
  return { bm, events, tiered };
}

const storedOf = (blocks: FullBlock[], parent: BlockHash | null = null): KvCacheEventData => ({
  stored: {
    parent_hash: parent,
    blocks: blocks.map((x) => ({ block_hash: x.sequenceHash, tokens_hash: x.localHash })),
  },
});

/** Computes and caches a chain's blocks from `hits` on, as a request would; returns them held. */
function fill(bm: BlockManager, blocks: FullBlock[]): BlockHash[] {
  const hits = bm.matchPrefix(hashes(blocks));
  bm.acquireCached(hashes(blocks).slice(0, hits));
  bm.allocate(blocks.length - hits);
  bm.commit(blocks[hits - 1]?.sequenceHash ?? null, blocks.slice(hits));
  return hashes(blocks);
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

Deno.test("evicted blocks move to the host tier and back, each move announced in both tiers, and leave it oldest first", () => {
  const { bm, tiered } = manager(3, 0, 3);
  const a = chain(1, 3);
  bm.release(fill(bm, a).reverse(), 0);
  // Three new blocks evict a's three to the host tier: stored there before they leave the GPU,
  // so the worker holds them throughout.
  const b = chain(2, 3);
  const heldB = fill(bm, b);
  assert.deepEqual(tiered, [
    { tier: "device", data: storedOf(a) },
    { tier: "host_pinned", data: storedOf(a) },
    { tier: "device", data: { removed: { block_hashes: hashes(a).reverse() } } },
    { tier: "device", data: storedOf(b) },
  ]);
  assert.equal(bm.hostCachedBlocks, 3);
  assert.equal(bm.matchPrefix(hashes(a)), 0, "not on the GPU");
  assert.equal(bm.heldPrefix(hashes(a)), 3, "but held");
  assert.ok(bm.isOnHost(a[0]!.sequenceHash) && bm.isHeld(a[2]!.sequenceHash));
  assert.deepEqual(prefixToLoad(bm, hashes(a)), { end: 3, fromHost: 3, fromPeer: 0 });
  // Past the host tier's size, the least recently evicted go, announced as removed there.
  bm.release(heldB.reverse(), 0);
  const c = chain(3, 3);
  const heldC = fill(bm, c);
  assert.equal(bm.hostCachedBlocks, 3);
  assert.deepEqual(tiered.slice(4), [
    { tier: "host_pinned", data: storedOf(b) },
    { tier: "device", data: { removed: { block_hashes: hashes(b).reverse() } } },
    { tier: "host_pinned", data: { removed: { block_hashes: hashes(a).reverse() } } },
    { tier: "device", data: storedOf(c) },
  ]);
  assert.equal(bm.heldPrefix(hashes(a)), 0);
  // b's blocks come back from the host tier: stored on the device, then removed from the host
  // (c's go to the host tier to make room, before).
  bm.release(heldC.reverse(), 0);
  const n = tiered.length;
  const back = cachePrefix(bm, b, 3);
  assert.deepEqual(back, hashes(b));
  assert.equal(bm.matchPrefix(hashes(b)), 3);
  assert.ok(!bm.isOnHost(b[0]!.sequenceHash), "one tier at a time");
  assert.deepEqual(tiered.slice(n), [
    { tier: "host_pinned", data: storedOf(c) },
    { tier: "device", data: { removed: { block_hashes: hashes(c).reverse() } } },
    { tier: "device", data: storedOf(b) },
    { tier: "host_pinned", data: { removed: { block_hashes: hashes(b) } } },
  ]);
  assert.equal(bm.hostCachedBlocks, 3);
  assert.equal(bm.heldPrefix(hashes(c)), 3);
});

Deno.test("demoted blocks leave the GPU and then the host tier first, until a request takes them again", () => {
  const { bm, tiered } = manager(4, 0, 4);
  const a = chain(1, 2);
  const b = chain(2, 2);
  bm.release(fill(bm, a).reverse(), 0); // a1, a0: least recently used
  bm.release(fill(bm, b).reverse(), 0); // b1, b0
  assert.deepEqual(bm.inactiveHashes(), [101n, 100n, 201n, 200n]);
  // A peer copied b: b goes before a, the least recently used, its tail first.
  bm.demote(hashes(b));
  assert.deepEqual(bm.inactiveHashes(), [201n, 200n, 101n, 100n]);
  const n = tiered.length;
  const c = chain(3, 2);
  const heldC = fill(bm, c);
  assert.deepEqual(tiered.slice(n, n + 2), [
    { tier: "host_pinned", data: storedOf(b) },
    { tier: "device", data: { removed: { block_hashes: hashes(b).reverse() } } },
  ]);
  assert.deepEqual(bm.inactiveHashes(), [101n, 100n], "a stays on the GPU");
  // In the host tier b stays demoted: a's blocks, evicted after it, stay when the tier is full.
  bm.release(heldC.reverse(), 0);
  bm.demote([999n]); // a block not held here: nothing
  const d = chain(4, 4);
  fill(bm, d); // evicts a and c (4 blocks) to the host tier, which holds 4
  assert.equal(bm.hostCachedBlocks, 4);
  assert.equal(bm.heldPrefix(hashes(b)), 0, "b dropped from the host tier first");
  assert.equal(bm.heldPrefix(hashes(a)), 2);
  assert.equal(bm.heldPrefix(hashes(c)), 2);
});

Deno.test("a demoted block copied back from the host tier is an ordinary one there", () => {
  const { bm } = manager(2, 0, 2);
  const a = chain(1, 2);
  bm.release(fill(bm, a).reverse(), 0);
  bm.demote(hashes(a));
  const b = chain(2, 2);
  bm.release(fill(bm, b).reverse(), 0); // a to the host tier, demoted
  bm.release(cachePrefix(bm, a, 2).reverse(), 0); // a back (b to the host tier)
  assert.equal(bm.matchPrefix(hashes(a)), 2);
  fill(bm, chain(3, 2)); // a to the host tier again: the tier drops b, the oldest, not a
  assert.equal(bm.heldPrefix(hashes(a)), 2);
  assert.equal(bm.heldPrefix(hashes(b)), 0);
});

Deno.test("a demoted block a request takes again is an ordinary one; held blocks are not demoted", () => {
  const { bm } = manager(4);
  const a = chain(1, 2);
  const b = chain(2, 2);
  bm.release(fill(bm, a).reverse(), 0);
  const heldB = fill(bm, b);
  bm.demote([...hashes(a), ...hashes(b)]); // b is held by a request: left as it is
  assert.deepEqual(bm.inactiveHashes(), [101n, 100n]);
  bm.demote([100n]); // again: already demoted, the order stays
  assert.deepEqual(bm.inactiveHashes(), [101n, 100n]);
  bm.acquireCached([100n]); // a request takes a0 again
  bm.release([100n], 0);
  assert.deepEqual(bm.inactiveHashes(), [101n, 100n], "a0 most recently used again");
  bm.release(heldB.reverse(), 0);
  assert.deepEqual(bm.inactiveHashes(), [101n, 100n, 201n, 200n]);
  // Committed again by a sequence that computed it (shared): no longer demoted either.
  bm.demote([201n]);
  bm.allocate(1); // evicts a1, the least recently used (201 is shared below, not evicted)
  bm.commit(200n, [b[1]!]);
  bm.release([201n], 0);
  assert.deepEqual(bm.inactiveHashes(), [100n, 200n, 201n]);
  bm.demote(hashes(a));
  bm.clearInactive();
  assert.deepEqual(bm.inactiveHashes(), []);
  fill(bm, b);
  assert.deepEqual(bm.inactiveHashes(), [], "nothing demoted survives a clear");
});

Deno.test("prefixToLoad counts what comes from the host tier and what from a peer", () => {
  const { bm } = manager(4, 0, 4);
  const a = chain(1, 4);
  bm.release(fill(bm, a.slice(0, 2)).reverse(), 0);
  bm.release(fill(bm, chain(2, 4)).reverse(), 0); // a's two blocks go to the host tier
  const held = fill(bm, a.slice(0, 1)); // and the first comes back
  assert.equal(held.length, 1);
  // Block 0 on the GPU, block 1 on the host, 2 and 3 nowhere.
  assert.deepEqual(prefixToLoad(bm, hashes(a)), { end: 2, fromHost: 1, fromPeer: 0 });
  assert.deepEqual(prefixToLoad(bm, hashes(a), 4), { end: 4, fromHost: 1, fromPeer: 2 });
  assert.deepEqual(prefixToLoad(bm, hashes(a), 1), { end: 2, fromHost: 1, fromPeer: 0 });
  assert.deepEqual(prefixToLoad(bm, hashes(a), 99), { end: 4, fromHost: 1, fromPeer: 2 });
  assert.deepEqual(prefixToLoad(bm, []), { end: 0, fromHost: 0, fromPeer: 0 });
});

Deno.test("the host tier's size is checked, and the mocker's default is 4 blocks per GPU block", () => {
  assert.throws(() => new BlockManager({ hostBlocks: -1 }), /hostBlocks must be a whole number/);
  assert.throws(() => new BlockManager({ hostBlocks: 1.5 }), /hostBlocks must be a whole number/);
  assert.equal(new BlockManager().hostBlocks, 0);
  assert.equal(defaultHostBlocks(), 4 * DEFAULT_NUM_GPU_BLOCKS);
  assert.equal(defaultHostBlocks(100), 400);
});

Deno.test("stored and removed events stay consistent under random use", () => {
  type Op =
    | { kind: "fill"; chain: number; length: number }
    | { kind: "release"; index: number }
    | { kind: "demote"; chain: number; length: number }
    | { kind: "clear" };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({
      kind: fc.constant("fill" as const),
      chain: fc.integer({ min: 0, max: 5 }),
      length: fc.integer({ min: 1, max: 6 }),
    }),
    fc.record({ kind: fc.constant("release" as const), index: fc.nat() }),
    fc.record({
      kind: fc.constant("demote" as const),
      chain: fc.integer({ min: 0, max: 5 }),
      length: fc.integer({ min: 1, max: 6 }),
    }),
    fc.record({ kind: fc.constant("clear" as const) }),
  );
  const hostSizes = fc.constantFrom(0, 1, 5, 40);
  fc.assert(fc.property(fc.array(op, { maxLength: 60 }), hostSizes, (ops, hostBlocks) => {
    const { bm, tiered } = manager(12, 0, hostBlocks);
    const holders: BlockHash[][] = [];
    for (const o of ops) {
      if (o.kind === "fill") {
        const blocks = chain(o.chain, o.length);
        // What the host tier holds comes back first, as a worker loads it, when it fits.
        const load = prefixToLoad(bm, hashes(blocks));
        if (load.fromHost > 0 && load.fromHost <= bm.availableBlocks - bm.activeBlocks) {
          bm.release(cachePrefix(bm, blocks, load.end).reverse(), 0);
        }
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
      } else if (o.kind === "demote") {
        bm.demote(hashes(chain(o.chain, o.length)));
      } else if (o.kind === "clear") {
        bm.clearInactive();
      }
      assert.ok(bm.activeBlocks + bm.inactiveBlocks <= bm.numGpuBlocks);
      // The eviction order names every inactive block once, whatever was demoted.
      const order = bm.inactiveHashes();
      assert.equal(new Set(order).size, order.length);
      assert.equal(order.length, bm.inactiveBlocks);
      assert.ok(order.every((h) => bm.isCached(h) && bm.refCount(h) === 0));
      assert.ok(bm.hostCachedBlocks <= hostBlocks);
    }
    // Replay the events per tier: a removed hash was stored there and not removed since; a
    // block stored in a tier names a parent the worker holds in some tier (or none).
    const tiers = { device: new Set<BlockHash>(), host_pinned: new Set<BlockHash>() };
    for (const { tier, data: e } of tiered) {
      assert.ok(tier === "device" || tier === "host_pinned");
      const cached = tiers[tier];
      if (e === "cleared") {
        cached.clear();
      } else if ("stored" in e) {
        const parent = e.stored.parent_hash;
        assert.ok(
          parent === null || tiers.device.has(parent) || tiers.host_pinned.has(parent) ||
            e.stored.blocks.length === 0,
          `stored under a parent held nowhere: ${parent}`,
        );
        for (const b of e.stored.blocks) {
          assert.ok(!cached.has(b.block_hash), `stored twice in ${tier}: ${b.block_hash}`);
          cached.add(b.block_hash);
        }
      } else {
        for (const h of e.removed.block_hashes) {
          assert.ok(cached.delete(h), `removed from ${tier} without being stored: ${h}`);
        }
      }
    }
    const live = new Set<BlockHash>();
    for (const held of holders) for (const h of held) live.add(h);
    for (const h of live) assert.ok(tiers.device.has(h), `held block ${h} is on the device`);
    for (const h of bm.inactiveHashes()) assert.ok(tiers.device.has(h));
    for (const h of tiers.device) assert.ok(bm.isCached(h), `announced but not on the GPU: ${h}`);
    for (const h of tiers.host_pinned) assert.ok(bm.isOnHost(h), `announced but not on host: ${h}`);
    assert.equal(tiers.device.size, bm.activeBlocks + bm.inactiveBlocks);
    assert.equal(tiers.host_pinned.size, bm.hostCachedBlocks);
    if (hostBlocks === 0) assert.ok(tiered.every((e) => e.tier === "device"));
  }));
});
