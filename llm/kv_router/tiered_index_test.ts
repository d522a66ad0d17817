import assert from "node:assert/strict";
import { TieredIndex } from "./tiered_index.ts";
import { STORAGE_TIERS, type StorageTier } from "./protocols.ts";

/** A chain of blocks from the root: block i's sequence hash is 100 + i, its tokens hash i. */
const chain = (from: number, to: number) => ({
  stored: {
    parent_hash: from === 0 ? null : BigInt(100 + from - 1),
    blocks: Array.from({ length: to - from }, (_, i) => ({
      block_hash: BigInt(100 + from + i),
      tokens_hash: BigInt(from + i),
    })),
  },
});
const removed = (...ids: number[]) => ({
  removed: { block_hashes: ids.map((i) => BigInt(100 + i)) },
});
const request = (n: number) => Array.from({ length: n }, (_, i) => BigInt(i));

Deno.test("a block evicted from the device but offloaded to host memory is held below the device", () => {
  const index = new TieredIndex();
  index.apply("w", chain(0, 4), "device");
  index.apply("w", chain(0, 4), "host_pinned");
  index.apply("w", removed(2, 3), "device");
  const m = index.findMatches(request(6));
  assert.equal(m.device.get("w"), 2);
  assert.equal(m.host_pinned.get("w"), 4);
  assert.equal(m.disk.get("w"), 4);
  assert.equal(index.blockCount("w", "device"), 2);
  assert.equal(index.blockCount("w", "host_pinned"), 4);
  assert.equal(index.blockCount("w"), 4);
  // The host drops them too: gone from every tier.
  index.apply("w", removed(0, 1, 2, 3), "host_pinned");
  const after = index.findMatches(request(6));
  assert.equal(after.device.get("w"), 2);
  assert.equal(after.host_pinned.get("w"), 2);
  index.apply("w", removed(0, 1), "device");
  assert.equal(index.findMatches(request(6)).disk.get("w"), undefined);
  assert.equal(index.blockCount("w"), 0);
});

Deno.test("a lower tier's removal leaves the device's copy", () => {
  const index = new TieredIndex();
  index.apply("w", chain(0, 3), "device");
  index.apply("w", chain(0, 3), "host_pinned");
  index.apply("w", removed(0, 1, 2), "host_pinned");
  const m = index.findMatches(request(3));
  assert.equal(m.device.get("w"), 3);
  assert.equal(m.host_pinned.get("w"), 3);
});

Deno.test("a device prefix continued on disk: each tier counts what is held in it or faster", () => {
  const index = new TieredIndex();
  index.apply("w", chain(0, 2), "device");
  index.apply("w", chain(2, 4), "host_pinned");
  index.apply("w", chain(4, 7), "disk");
  const m = index.findMatches(request(8));
  assert.equal(m.device.get("w"), 2);
  assert.equal(m.host_pinned.get("w"), 4);
  assert.equal(m.disk.get("w"), 7);
  // Clearing one tier leaves the others.
  index.apply("w", "cleared", "host_pinned");
  const c = index.findMatches(request(8));
  assert.equal(c.device.get("w"), 2);
  assert.equal(c.host_pinned.get("w"), 2);
  assert.equal(c.disk.get("w"), 2, "the disk's blocks hang from the host's, now gone");
  assert.equal(index.blockCount("w", "disk"), 3);
});

Deno.test("a stored event whose parent no tier holds is dropped", () => {
  const index = new TieredIndex();
  assert.equal(index.apply("w", chain(3, 5), "host_pinned"), false);
  assert.equal(index.blockCount("w"), 0);
});

Deno.test("removing and clearing a worker empties every tier", () => {
  const index = new TieredIndex();
  index.apply("a", chain(0, 3), "device");
  index.apply("a", chain(0, 3), "host_pinned");
  index.apply("b", chain(0, 2), "disk");
  index.clearWorker("a");
  assert.deepEqual(index.workers.sort(), ["a", "b"]);
  assert.equal(index.blockCount("a"), 0);
  assert.equal(index.findMatches(request(3)).disk.get("a"), undefined);
  assert.equal(index.findMatches(request(3)).disk.get("b"), 2);
  index.removeWorker("b");
  assert.deepEqual(index.workers, ["a"]);
  assert.equal(index.findMatches(request(3)).disk.size, 0);
});

Deno.test("property: each tier's match is the prefix its tiers and the faster ones hold", () => {
  // Random events over one chain of 12 blocks in three tiers, against a plain model: which tiers
  // hold which block, and which blocks each tier's tree (that tier and the faster ones) has, a
  // run stored under a parent the tree lacks being left out of it.
  let seed = 7; // mulberry32
  const rand = (n: number) => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), seed | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return Math.floor(((x ^ (x >>> 14)) >>> 0) / 4294967296 * n);
  };
  let stores = 0;
  let dropped = 0;
  for (let run = 0; run < 100; run++) {
    const index = new TieredIndex();
    const holds = STORAGE_TIERS.map(() => new Set<number>());
    const trees = STORAGE_TIERS.map(() => new Set<number>());
    for (let step = 0; step < 40; step++) {
      const t = rand(3);
      const tier = STORAGE_TIERS[t]! as StorageTier;
      if (rand(3) > 0) {
        // A run continuing a block some tier holds, or starting at the root.
        const held = [...Array(12).keys()].filter((i) => holds.some((s) => s.has(i)));
        const from = held.length === 0 || rand(4) === 0 ? 0 : held[rand(held.length)]! + 1;
        if (from >= 12) continue;
        const to = Math.min(12, from + 1 + rand(4));
        assert.ok(index.apply("w", chain(from, to), tier));
        stores++;
        for (let i = from; i < to; i++) holds[t]!.add(i);
        for (let k = t; k < 3; k++) {
          if (from > 0 && !trees[k]!.has(from - 1)) {
            dropped++;
            continue;
          }
          for (let i = from; i < to; i++) trees[k]!.add(i);
        }
      } else {
        const ids = [...holds[t]!].filter(() => rand(2) === 0);
        index.apply("w", removed(...ids), tier);
        for (const i of ids) {
          holds[t]!.delete(i);
          for (let k = t; k < 3; k++) {
            if (!holds.slice(0, k + 1).some((s) => s.has(i))) trees[k]!.delete(i);
          }
        }
      }
      const m = index.findMatches(request(12));
      STORAGE_TIERS.forEach((name, k) => {
        let n = 0;
        while (n < 12 && trees[k]!.has(n)) n++;
        assert.equal(m[name].get("w") ?? 0, n, `run ${run} step ${step}: ${name}`);
        assert.equal(
          index.blockCount("w", name),
          holds[k]!.size,
          `run ${run} step ${step}: blocks in ${name}`,
        );
      });
      assert.equal(
        index.blockCount("w"),
        new Set(holds.flatMap((s) => [...s])).size,
        `run ${run} step ${step}: blocks held in any tier`,
      );
    }
  }
  // The runs reach both cases: runs stored into a tree, and runs a tree left out.
  assert.ok(stores > 1000 && dropped > 100, `${stores} stores, ${dropped} left out`);
});

Deno.test("an unknown tier is refused", () => {
  const index = new TieredIndex();
  assert.throws(() => index.apply("w", chain(0, 1), "tape" as StorageTier), /unknown storage tier/);
  assert.equal(index.blockCount("w"), 0);
});
