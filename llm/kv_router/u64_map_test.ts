import assert from "node:assert/strict";
import fc from "fast-check";
import { U64Map } from "./u64_map.ts";

Deno.test("U64Map keeps, replaces and removes values by u64 key", () => {
  const m = new U64Map<string>();
  assert.equal(m.size, 0);
  assert.equal(m.get(1n), undefined);
  m.set(1n, "a").set(2n ** 64n - 1n, "max").set(0n, "zero");
  assert.equal(m.size, 3);
  assert.equal(m.get(1n), "a");
  assert.equal(m.get(2n ** 64n - 1n), "max");
  assert.equal(m.get(0n), "zero");
  // Keys equal in one word only are different keys.
  assert.equal(m.get(2n ** 32n + 1n), undefined);
  m.set(1n, "b");
  assert.equal(m.size, 3);
  assert.equal(m.get(1n), "b");
  assert.equal(m.delete(1n), true);
  assert.equal(m.delete(1n), false);
  assert.equal(m.has(1n), false);
  assert.deepEqual(new Set(m.values()), new Set(["max", "zero"]));
  assert.deepEqual(new Map(m.entries()), new Map([[2n ** 64n - 1n, "max"], [0n, "zero"]]));
  m.clear();
  assert.equal(m.size, 0);
  assert.equal(m.get(0n), undefined);
  assert.throws(() => m.set(5n, undefined as unknown as string), TypeError);
  assert.equal(m.size, 0);
});

Deno.test("U64Map behaves as a Map over any sequence of sets and deletes", () => {
  // Few distinct keys (so deletes hit), some sharing a word or a home slot; long runs make the
  // table grow, wrap around its end and shift entries back into holes.
  const key = fc.oneof(
    fc.bigInt({ min: 0n, max: 40n }),
    fc.bigInt({ min: 0n, max: 40n }).map((k) => k << 32n),
    fc.bigInt({ min: 0n, max: 40n }).map((k) => (k << 40n) | 7n),
    fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  );
  const op = fc.tuple(fc.constantFrom("set", "set", "delete", "get"), key, fc.integer());
  fc.assert(
    fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
      const m = new U64Map<number>();
      const ref = new Map<bigint, number>();
      for (const [kind, k, v] of ops) {
        if (kind === "set") {
          m.set(k, v);
          ref.set(k, v);
        } else if (kind === "delete") assert.equal(m.delete(k), ref.delete(k));
        else assert.equal(m.get(k), ref.get(k));
        assert.equal(m.size, ref.size);
      }
      for (const [k, v] of ref) assert.equal(m.get(k), v);
      // The same entries in the same (insertion) order.
      assert.deepEqual([...m.entries()], [...ref.entries()]);
      assert.deepEqual([...m.values()], [...ref.values()]);
    }),
    { numRuns: 300 },
  );
});

Deno.test("U64Map stays consistent through growth and mass deletion", () => {
  const m = new U64Map<number>(2);
  const keys = Array.from({ length: 5000 }, (_, i) => BigInt(i) * 0x9e3779b97f4a7c15n % 2n ** 64n);
  keys.forEach((k, i) => m.set(k, i));
  assert.equal(m.size, 5000);
  for (let i = 0; i < keys.length; i += 2) assert.equal(m.delete(keys[i]!), true);
  assert.equal(m.size, 2500);
  keys.forEach((k, i) => assert.equal(m.get(k), i % 2 === 0 ? undefined : i));
  // Deleted entries make room again (compaction) and the order holds.
  for (let i = 0; i < 3000; i++) m.set(BigInt(1e9 + i), -i);
  assert.equal(m.size, 5500);
  const order = [...m.values()];
  assert.deepEqual(order.slice(0, 3), [1, 3, 5]);
  assert.deepEqual(order.slice(-2), [-2998, -2999]);
  // Emptied down to a few entries, the map shrinks and keeps them, in order.
  const live = [...m.entries()];
  for (const [k] of live.slice(0, -3)) assert.equal(m.delete(k), true);
  assert.equal(m.size, 3);
  assert.deepEqual([...m.entries()], live.slice(-3));
  for (let i = 0; i < 100; i++) m.set(BigInt(i) << 40n, i);
  assert.equal(m.size, 103);
  assert.equal(m.get(99n << 40n), 99);
  assert.deepEqual([...m.values()].slice(0, 4), [-2997, -2998, -2999, 0]);
});
