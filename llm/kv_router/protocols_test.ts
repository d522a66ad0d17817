// The binary encodings of KV events and state dumps keep every 64-bit hash exact.

import assert from "node:assert/strict";
import fc from "fast-check";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import {
  decodeKvStateChunk,
  decodeRouterEvent,
  encodeKvStateChunk,
  encodeRouterEvent,
  type RouterEvent,
  toBlockHash,
} from "./protocols.ts";

/** Records with a plain prototype, comparable with what decoding builds. */
const rec = <T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }) =>
  fc.record(model, { noNullPrototype: true });

const u64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
const routerEvent: fc.Arbitrary<RouterEvent> = rec({
  worker_id: fc.string({ maxLength: 40 }),
  event: rec({
    event_id: fc.maxSafeNat(),
    data: fc.oneof(
      rec({
        stored: rec({
          parent_hash: fc.option(u64, { nil: null }),
          blocks: fc.array(rec({ block_hash: u64, tokens_hash: u64 }), { maxLength: 20 }),
        }),
      }),
      rec({ removed: rec({ block_hashes: fc.array(u64, { maxLength: 20 }) }) }),
      fc.constant("cleared" as const),
    ),
  }),
});

Deno.test("KV events survive encode and decode unchanged", () => {
  fc.assert(
    fc.property(routerEvent, (ev) => {
      assert.deepEqual(decodeRouterEvent(encodeRouterEvent(ev)), ev);
    }),
    { numRuns: 500 },
  );
});

Deno.test("state chunks survive encode and decode unchanged", () => {
  fc.assert(
    fc.property(
      rec({
        worker_id: fc.string({ maxLength: 20 }),
        nonce: fc.string({ maxLength: 10 }),
        last_event_id: fc.maxSafeNat(),
        index: fc.nat({ max: 2 ** 32 - 1 }),
        last: fc.boolean(),
        entries: fc.array(
          rec({
            block_hash: u64,
            parent_hash: fc.option(u64, { nil: null }),
            tokens_hash: u64,
          }),
          { maxLength: 20 },
        ),
      }),
      (chunk) => assert.deepEqual(decodeKvStateChunk(encodeKvStateChunk(chunk)), chunk),
    ),
    { numRuns: 300 },
  );
});

Deno.test("truncated or foreign bytes are rejected with InvalidArgumentError", () => {
  const bytes = encodeRouterEvent({
    worker_id: "w",
    event: { event_id: 1, data: { removed: { block_hashes: [1n, 2n] } } },
  });
  assert.throws(() => decodeRouterEvent(bytes.subarray(0, bytes.length - 3)), InvalidArgumentError);
  assert.throws(() => decodeKvStateChunk(bytes), InvalidArgumentError);
  assert.throws(() => decodeRouterEvent(new Uint8Array([9])), InvalidArgumentError);
});

Deno.test("engine block hashes are normalised to unsigned 64-bit", () => {
  assert.equal(toBlockHash(-1), 2n ** 64n - 1n);
  assert.equal(toBlockHash(-1n), 2n ** 64n - 1n);
  assert.equal(toBlockHash(42), 42n);
  assert.throws(() => toBlockHash(1.5), InvalidArgumentError);
});
