import assert from "node:assert/strict";
import fc from "fast-check";
import { fillKvBlock, kvBlockSeed, splitBlocks, verifyKvBlock } from "./kv_bytes.ts";

Deno.test("fillKvBlock is deterministic and verifyKvBlock accepts its output", () => {
  fc.assert(fc.property(
    fc.array(fc.nat(200_000), { minLength: 0, maxLength: 32 }),
    fc.nat(1000),
    fc.integer({ min: 1, max: 333 }),
    (tokens, index, bytes) => {
      const a = new Uint8Array(bytes);
      const b = new Uint8Array(bytes);
      fillKvBlock(a, tokens, index);
      fillKvBlock(b, tokens, index);
      assert.deepEqual(a, b);
      assert.equal(verifyKvBlock(a, tokens, index), -1);
    },
  ));
});

Deno.test("verifyKvBlock finds a single flipped byte", () => {
  const block = new Uint8Array(1024);
  fillKvBlock(block, [5, 6, 7], 2);
  block[777]! ^= 1;
  assert.equal(verifyKvBlock(block, [5, 6, 7], 2), 777);
});

Deno.test("blocks with other tokens or another position get another pattern", () => {
  assert.notEqual(kvBlockSeed([1, 2, 3], 0), kvBlockSeed([1, 2, 4], 0));
  assert.notEqual(kvBlockSeed([1, 2, 3], 0), kvBlockSeed([1, 2, 3], 1));
  const block = new Uint8Array(256);
  fillKvBlock(block, [1, 2, 3], 0);
  assert.notEqual(verifyKvBlock(block, [1, 2, 3], 1), -1);
});

Deno.test("splitBlocks cuts a prompt into blocks with a partial last one", () => {
  assert.deepEqual(splitBlocks([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]);
  assert.deepEqual(splitBlocks([], 4), []);
});
