// Block hashing: the pure-TS XXH3-64 against hash-wasm's reference build, and the block
// and chain rules on top of it.

import assert from "node:assert/strict";
import fc from "fast-check";
import { createXXHash3, type IHasher } from "hash-wasm";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import {
  BLOCK_HASH_SEED,
  chainHash,
  computeBlockHashes,
  computeBlockHashesSync,
  computeLocalHashes,
} from "./hashing.ts";
import { xxh3_64 } from "./xxh3.ts";

const oracles = new Map<bigint, IHasher>();

async function reference(bytes: Uint8Array, seed: bigint): Promise<bigint> {
  let h = oracles.get(seed);
  if (!h) {
    h = await createXXHash3(Number(seed & 0xffffffffn), Number(seed >> 32n));
    oracles.set(seed, h);
  }
  h.init();
  h.update(bytes);
  return BigInt(`0x${h.digest("hex")}`);
}

function u32le(tokens: number[]): Uint8Array {
  return new Uint8Array(Uint32Array.from(tokens).buffer);
}

Deno.test("xxh3_64 matches hash-wasm on every length from 0 to 1100 bytes", async () => {
  for (const seed of [0n, 1337n, 1337n + 7n]) {
    for (let len = 0; len <= 1100; len++) {
      const bytes = Uint8Array.from({ length: len }, (_, i) => (i * 131 + len * 7 + 3) & 255);
      assert.equal(xxh3_64(bytes, seed), await reference(bytes, seed), `len ${len} seed ${seed}`);
    }
  }
});

Deno.test("xxh3_64 matches hash-wasm on random inputs and 64-bit seeds", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.uint8Array({ maxLength: 2500 }),
      fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
      async (bytes, seed) => {
        assert.equal(xxh3_64(bytes, seed), await reference(bytes, seed));
      },
    ),
    { numRuns: 300 },
  );
});

Deno.test("xxh3_64 gives the published digest of the empty input", () => {
  assert.equal(xxh3_64(new Uint8Array(0)), 0x2d06800538d394c2n);
});

Deno.test("block hashes follow the known vectors for [1, 2, 3, 4] at block size 2", () => {
  const { local, sequence } = computeBlockHashesSync([1, 2, 3, 4], 2);
  assert.deepEqual(local, [0x9581a6bbf9cef45an, 0x24f1bf0c78a5ca72n]);
  assert.deepEqual(sequence, [0x9581a6bbf9cef45an, 0x51bdd8da9da7a8e2n]);
});

Deno.test("block and sequence hashes match hash-wasm for any tokens, block size and LoRA", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.nat({ max: 0xffffffff }), { maxLength: 400 }),
      fc.integer({ min: 1, max: 80 }),
      fc.oneof(fc.constant(0), fc.nat({ max: 1000 })),
      async (tokens, blockSize, loraId) => {
        const { local, sequence } = computeBlockHashesSync(tokens, blockSize, loraId);
        const blocks = Math.floor(tokens.length / blockSize);
        assert.equal(local.length, blocks);
        const seed = BigInt(BLOCK_HASH_SEED + loraId);
        for (let b = 0; b < blocks; b++) {
          const block = u32le(tokens.slice(b * blockSize, (b + 1) * blockSize));
          assert.equal(local[b], await reference(block, seed));
          if (b > 0) {
            const pair = new DataView(new ArrayBuffer(16));
            pair.setBigUint64(0, sequence[b - 1]!, true);
            pair.setBigUint64(8, local[b]!, true);
            assert.equal(
              sequence[b],
              await reference(new Uint8Array(pair.buffer), BigInt(BLOCK_HASH_SEED)),
            );
          }
        }
      },
    ),
    { numRuns: 200 },
  );
});

Deno.test("the first sequence hash is the first local hash and the rest chain", () => {
  const tokens = Array.from({ length: 64 }, (_, i) => i * 7919);
  const { local, sequence } = computeBlockHashesSync(tokens, 16);
  assert.equal(sequence[0], local[0]);
  for (let b = 1; b < local.length; b++) {
    assert.equal(sequence[b], chainHash(sequence[b - 1]!, local[b]!));
  }
});

Deno.test("equal prefixes give equal sequence hashes and different ones diverge for good", () => {
  const a = Array.from({ length: 48 }, (_, i) => i);
  const b = [...a];
  b[20] = 999; // inside the second block
  const ha = computeBlockHashesSync(a, 16);
  const hb = computeBlockHashesSync(b, 16);
  assert.equal(ha.sequence[0], hb.sequence[0]);
  assert.notEqual(ha.sequence[1], hb.sequence[1]);
  assert.equal(ha.local[2], hb.local[2]); // the third block's tokens are the same...
  assert.notEqual(ha.sequence[2], hb.sequence[2]); // ...but its prefix is not
});

Deno.test("a LoRA id salts the local hashes", () => {
  const tokens = Array.from({ length: 32 }, (_, i) => i);
  const base = computeBlockHashesSync(tokens, 16);
  const lora = computeBlockHashesSync(tokens, 16, 3);
  assert.notEqual(base.local[0], lora.local[0]);
  assert.notEqual(base.sequence[1], lora.sequence[1]);
  assert.deepEqual(computeBlockHashesSync(tokens, 16, 0), base);
});

Deno.test("the partial tail block is dropped", () => {
  const tokens = Array.from({ length: 47 }, (_, i) => i);
  const full = computeBlockHashesSync(tokens.slice(0, 32), 16);
  assert.deepEqual(computeBlockHashesSync(tokens, 16), full);
  assert.deepEqual(computeBlockHashesSync(tokens.slice(0, 15), 16), { local: [], sequence: [] });
});

Deno.test("Uint32Array, number[] and the async API give the same hashes", async () => {
  const tokens = Array.from({ length: 100 }, (_, i) => (i * 2654435761) >>> 0);
  const sync = computeBlockHashesSync(tokens, 16);
  assert.deepEqual(computeBlockHashesSync(Uint32Array.from(tokens), 16), sync);
  assert.deepEqual(await computeBlockHashes(tokens, 16), sync);
  assert.deepEqual(computeLocalHashes(tokens, 16), sync.local);
  // a view into a larger buffer
  const big = new Uint32Array(200);
  big.set(tokens, 50);
  assert.deepEqual(computeBlockHashesSync(big.subarray(50, 150), 16), sync);
});

Deno.test("bad block sizes and LoRA ids are rejected with InvalidArgumentError", async () => {
  assert.throws(() => computeBlockHashesSync([1], 0), InvalidArgumentError);
  assert.throws(() => computeBlockHashesSync([1], 1.5), InvalidArgumentError);
  assert.throws(() => computeLocalHashes([1], 16, -1), InvalidArgumentError);
  await assert.rejects(computeBlockHashes([1], -2), InvalidArgumentError);
});
