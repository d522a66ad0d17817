// The binary encodings of KV events and state dumps keep every 64-bit hash exact.

import assert from "node:assert/strict";
import fc from "fast-check";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import {
  decodeKvStateChunk,
  decodeRouterEvent,
  encodeKvStateChunk,
  encodeRouterEvent,
  KvMessageError,
  MAX_CHUNK_INDEX,
  parseResyncRequest,
  type RouterEvent,
  toBlockHash,
} from "./protocols.ts";

/** Records with a plain prototype, comparable with what decoding builds. */
const rec = <T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }) =>
  fc.record(model, { noNullPrototype: true });

const u64 = fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
// A lower tier, or none (device, the default, is left out as decoding leaves it out).
const lowerTier = fc.constantFrom("host_pinned" as const, "disk" as const);
const routerEvent: fc.Arbitrary<RouterEvent> = fc.record({
  worker_id: fc.string({ minLength: 1, maxLength: 40 }),
  storage_tier: lowerTier,
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
}, { requiredKeys: ["worker_id", "event"], noNullPrototype: true });

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
        worker_id: fc.string({ minLength: 1, maxLength: 20 }),
        nonce: fc.string({ minLength: 1, maxLength: 10 }),
        last_event_id: fc.maxSafeNat(),
        index: fc.nat({ max: MAX_CHUNK_INDEX }),
        last: fc.boolean(),
        entries: fc.array(
          fc.record({
            block_hash: u64,
            parent_hash: fc.option(u64, { nil: null }),
            tokens_hash: u64,
            storage_tier: lowerTier,
          }, {
            requiredKeys: ["block_hash", "parent_hash", "tokens_hash"],
            noNullPrototype: true,
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

/** Decodes, returning the error it threw (anything but a KvMessageError fails the test). */
function refused(decode: () => unknown): KvMessageError | undefined {
  try {
    decode();
    return undefined;
  } catch (err) {
    assert.ok(err instanceof KvMessageError, `threw past the door: ${err}`);
    return err;
  }
}

/** A removed event with `n` hashes, then `patch` applied to its bytes. */
function removedBytes(patch: (b: Uint8Array, v: DataView) => void, n = 2): Uint8Array {
  const b = encodeRouterEvent({
    worker_id: "w1",
    event: {
      event_id: 7,
      data: { removed: { block_hashes: Array.from({ length: n }, () => 1n) } },
    },
  });
  patch(b, new DataView(b.buffer));
  return b;
}
// Layout of that event: tag, kind, u16 id length, "w1", f64 event id (at 6), u32 count (at 14).

Deno.test("random and mutated bytes never throw past the KV message door", () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
      refused(() => decodeRouterEvent(bytes));
      refused(() => decodeKvStateChunk(bytes));
    }),
    { numRuns: 500 },
  );
  fc.assert(
    fc.property(
      routerEvent,
      fc.array(fc.tuple(fc.nat(), fc.nat({ max: 255 })), { minLength: 1, maxLength: 4 }),
      (ev, flips) => {
        const bytes = encodeRouterEvent(ev);
        for (const [at, v] of flips) if (bytes.length > 0) bytes[at % bytes.length] = v;
        const err = refused(() => {
          const got = decodeRouterEvent(bytes);
          // Whatever passes is within bounds.
          assert.ok(Number.isSafeInteger(got.event.event_id) && got.event.event_id >= 0);
          assert.ok(got.worker_id.length > 0);
        });
        if (err) assert.ok(err.reason.length > 0);
      },
    ),
    { numRuns: 500 },
  );
});

Deno.test("KV events with a NaN, infinite, negative or fractional event id are refused", () => {
  for (const id of [NaN, Infinity, -Infinity, -1, 1.5, 2 ** 53]) {
    const err = refused(() => decodeRouterEvent(removedBytes((_, v) => v.setFloat64(6, id, true))));
    assert.ok(err, `event id ${id} passed`);
    assert.equal(err.workerId, "w1");
    assert.match(err.reason, /event_id/);
  }
});

Deno.test("a KV event's count cannot claim more than its bytes or the limit", () => {
  // 2^32 - 1 hashes announced, 2 present: refused before anything is allocated.
  const huge = refused(() =>
    decodeRouterEvent(removedBytes((_, v) => v.setUint32(14, 2 ** 32 - 1, true)))
  );
  assert.ok(huge);
  assert.match(huge.reason, /more than/);
  const short = refused(() => decodeRouterEvent(removedBytes((_, v) => v.setUint32(14, 3, true))));
  assert.ok(short);
  assert.match(short.reason, /truncated/);
  const long = refused(() => decodeRouterEvent(removedBytes((_, v) => v.setUint32(14, 1, true))));
  assert.ok(long);
  assert.match(long.reason, /after the end/);
});

Deno.test("KV messages with an empty or non-UTF-8 worker id are refused", () => {
  const empty = new Uint8Array([1, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
  assert.match(refused(() => decodeRouterEvent(empty))!.reason, /worker id/);
  const bad = new Uint8Array([1, 3, 1, 0, 0xff, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);
  assert.match(refused(() => decodeRouterEvent(bad))!.reason, /UTF-8/);
  // And the encoder will not produce what the decoder refuses.
  for (const worker_id of ["", "w".repeat(1025)]) {
    assert.throws(
      () => encodeRouterEvent({ worker_id, event: { event_id: 1, data: "cleared" } }),
      InvalidArgumentError,
    );
  }
});

Deno.test("state chunks with a NaN last event id or an index over the limit are refused", () => {
  // Layout: tag, flags, u16 + "w", u16 + "n", f64 last event id (at 8), u32 index (at 16).
  const chunk = (lastEventId: number, index: number) => {
    const b = encodeKvStateChunk({
      worker_id: "w",
      nonce: "n",
      last_event_id: 5,
      index: 2,
      last: true,
      entries: [],
    });
    const v = new DataView(b.buffer);
    v.setFloat64(8, lastEventId, true);
    v.setUint32(16, index, true);
    return b;
  };
  assert.match(refused(() => decodeKvStateChunk(chunk(NaN, 0)))!.reason, /last_event_id/);
  assert.match(refused(() => decodeKvStateChunk(chunk(-3, 0)))!.reason, /last_event_id/);
  assert.match(refused(() => decodeKvStateChunk(chunk(1, MAX_CHUNK_INDEX + 1)))!.reason, /index/);
  assert.equal(decodeKvStateChunk(chunk(5, 2)).last_event_id, 5);
  assert.throws(
    () =>
      encodeKvStateChunk({
        worker_id: "w",
        nonce: "n",
        last_event_id: NaN,
        index: 0,
        last: true,
        entries: [],
      }),
    InvalidArgumentError,
  );
});

Deno.test("resync requests are checked: a reply under kv_state., a bounded nonce", () => {
  const ok = { worker_id: "*", reply: "kv_state.abc-1", nonce: "n1" };
  assert.deepEqual(parseResyncRequest(ok), ok);
  for (
    const bad of [
      null,
      [],
      "x",
      { ...ok, reply: "kv_events" },
      { ...ok, reply: "kv_state.>" },
      { ...ok, nonce: "" },
      { ...ok, nonce: "x".repeat(300) },
      { ...ok, worker_id: 3 },
    ]
  ) {
    assert.throws(() => parseResyncRequest(bad), KvMessageError, JSON.stringify(bad));
  }
});

Deno.test("a device event or entry reads as before tiers; an unknown tier is refused", () => {
  const ev: RouterEvent = {
    worker_id: "w",
    event: { event_id: 3, data: { removed: { block_hashes: [5n] } } },
  };
  const plain = encodeRouterEvent(ev);
  assert.deepEqual(encodeRouterEvent({ ...ev, storage_tier: "device" }), plain);
  assert.equal(plain[1], 2, "kind byte: removed, tier 0");
  const host = encodeRouterEvent({ ...ev, storage_tier: "host_pinned" });
  assert.equal(host[1], 2 | 16);
  assert.equal(decodeRouterEvent(host).storage_tier, "host_pinned");
  const bad = host.slice();
  bad[1] = 2 | 48;
  assert.throws(() => decodeRouterEvent(bad), /unknown storage tier 3/);
  assert.throws(
    () => encodeRouterEvent({ ...ev, storage_tier: "tape" as never }),
    /unknown storage tier "tape"/,
  );
  const chunk = {
    worker_id: "w",
    nonce: "n",
    last_event_id: 1,
    index: 0,
    last: true,
    entries: [{
      block_hash: 1n,
      parent_hash: null,
      tokens_hash: 2n,
      storage_tier: "disk" as const,
    }],
  };
  const bytes = encodeKvStateChunk(chunk);
  assert.deepEqual(decodeKvStateChunk(bytes), chunk);
  // The flags byte of the one entry: no parent, tier 2.
  const at = bytes.length - 8 - 8 - 1;
  assert.equal(bytes[at], 32);
  bytes[at] = 48;
  assert.throws(() => decodeKvStateChunk(bytes), /unknown storage tier 3/);
});
