import assert from "node:assert/strict";
import fc from "fast-check";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { KvBlockPool, KvCacheFullError } from "./block_pool.ts";

Deno.test("KvBlockPool hits the longest cached prefix and holds it", () => {
  const pool = new KvBlockPool(8);
  const ids = pool.allocate(3);
  assert.equal(pool.cache([1n, 2n, 3n], ids), 3);
  pool.release(ids.toReversed());
  assert.equal(pool.cachedBlocks, 3);
  assert.equal(pool.idleBlocks, 3);
  assert.equal(pool.availableBlocks, 8, "idle cached blocks can still be allocated");

  assert.equal(pool.matchPrefix([1n, 2n, 9n, 3n]), 2, "a gap ends the prefix");
  assert.equal(pool.matchPrefix([9n, 1n]), 0, "a miss on the first block is no hit");
  const hit = pool.acquirePrefix([1n, 2n, 9n]);
  assert.deepEqual(hit, ids.slice(0, 2));
  assert.deepEqual(hit.map((id) => pool.refCount(id)), [1, 1]);
  assert.equal(pool.idleBlocks, 1);
  assert.equal(pool.availableBlocks, 6);
});

Deno.test("KvBlockPool keeps a block held until every holder released it", () => {
  const pool = new KvBlockPool(3);
  const ids = pool.allocate(2);
  pool.cache([1n, 2n], ids);
  const again = pool.acquirePrefix([1n, 2n]);
  assert.deepEqual(again, ids);
  assert.equal(pool.refCount(ids[0]!), 2);
  pool.release(ids);
  assert.equal(pool.refCount(ids[0]!), 1);
  // Held blocks are never evicted: only the one free block can be allocated.
  assert.equal(pool.availableBlocks, 1);
  assert.throws(() => pool.allocate(2), KvCacheFullError);
  pool.release(again);
  assert.equal(pool.availableBlocks, 3);
  assert.throws(() => pool.release(again), InvalidArgumentError, "no longer held");
});

Deno.test("KvBlockPool evicts only unreferenced blocks, least recently used and tails first", () => {
  const pool = new KvBlockPool(5);
  const a = pool.allocate(2);
  pool.cache([10n, 11n], a);
  const b = pool.allocate(2);
  pool.cache([20n, 21n], b);
  pool.release(a.toReversed()); // idle: 11, 10
  const c = pool.allocate(1); // the free one: nothing evicted
  assert.equal(pool.cachedBlocks, 4);
  pool.release(c);

  // Two more than are free: A's tail goes first, then its head; B is held throughout.
  const d = pool.allocate(2);
  assert.deepEqual(new Set(d), new Set([c[0]!, a[1]!]));
  assert.equal(pool.matchPrefix([10n, 11n]), 1, "the prefix outlived its tail");
  pool.allocate(1);
  assert.equal(pool.matchPrefix([10n, 11n]), 0);
  assert.equal(pool.matchPrefix([20n, 21n]), 2, "held blocks stay cached");
  assert.throws(() => pool.allocate(1), KvCacheFullError);

  // Holding a block again refreshes it: the other idle one is evicted first.
  pool.release(b.toReversed()); // idle: 21, 20
  pool.release(pool.acquirePrefix([20n, 21n])); // idle: 20, 21
  pool.release(pool.acquirePrefix([20n])); // idle: 21, 20
  pool.allocate(1);
  assert.equal(pool.matchPrefix([20n]), 1);
  assert.equal(pool.matchPrefix([20n, 21n]), 1);
});

Deno.test("KvBlockPool keeps the first block cached under a hash; the duplicate is freed", () => {
  const pool = new KvBlockPool(4);
  const a = pool.allocate(1);
  const b = pool.allocate(1);
  assert.equal(pool.cache([7n], a), 1);
  assert.equal(pool.cache([7n], b), 0, "already cached elsewhere");
  pool.release(a);
  pool.release(b);
  assert.equal(pool.cachedBlocks, 1);
  assert.equal(pool.idleBlocks, 1);
  assert.deepEqual(pool.acquirePrefix([7n]), a);
  assert.throws(() => pool.cache([8n], [3]), InvalidArgumentError, "only held blocks are cached");
});

Deno.test("KvBlockPool.forget takes a block out of the cache", () => {
  const pool = new KvBlockPool(2);
  const ids = pool.allocate(2);
  pool.cache([1n, 2n], ids);
  pool.forget(ids[1]!); // held: freed on release
  pool.release(ids);
  assert.equal(pool.matchPrefix([1n, 2n]), 1);
  pool.forget(ids[0]!); // idle: freed at once
  assert.equal(pool.cachedBlocks, 0);
  assert.equal(pool.idleBlocks, 0);
  assert.equal(pool.availableBlocks, 2);
});

Deno.test("KvBlockPool never hands out a held block and accounts for every block", () => {
  type Op =
    | { kind: "request"; prefix: number; len: number }
    | { kind: "finish"; which: number };
  const op = fc.oneof(
    fc.record({
      kind: fc.constant("request" as const),
      prefix: fc.nat(3),
      len: fc.integer({ min: 1, max: 4 }),
    }),
    fc.record({ kind: fc.constant("finish" as const), which: fc.nat(10) }),
  );
  fc.assert(fc.property(fc.array(op, { maxLength: 60 }), (ops: Op[]) => {
    const pool = new KvBlockPool(8);
    const live: number[][] = [];
    for (const o of ops) {
      if (o.kind === "finish") {
        const [ids] = live.splice(o.which % Math.max(1, live.length), 1);
        if (ids) pool.release(ids.toReversed());
      } else {
        // Prompts of a few families share prefixes: family `prefix`, blocks 0..len-1.
        const hashes = Array.from({ length: o.len }, (_, i) => BigInt(o.prefix * 100 + i));
        const ids = pool.acquirePrefix(hashes);
        const held = new Set(live.flat());
        let fresh: number[];
        try {
          fresh = pool.allocate(o.len - ids.length);
        } catch (e) {
          assert.ok(e instanceof KvCacheFullError);
          pool.release(ids);
          continue;
        }
        for (const id of fresh) assert.ok(!held.has(id), `block ${id} is held elsewhere`);
        ids.push(...fresh);
        pool.cache(hashes, ids);
        live.push(ids);
      }
      const holders = new Map<number, number>();
      for (const id of live.flat()) holders.set(id, (holders.get(id) ?? 0) + 1);
      for (const [id, n] of holders) assert.equal(pool.refCount(id), n);
      assert.equal(pool.availableBlocks + holders.size, 8);
    }
  }));
});
