import assert from "node:assert/strict";
import { TimeoutError } from "../errors.ts";
import { encodeTwoPart, ReferenceWireError } from "../transport/reference_wire.ts";
import { TwoPartReader } from "./_io.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A connection whose reads return the chunks given, then wait (or end, with `end`). */
function fakeConn(chunks: Uint8Array[], end = true): Deno.Conn {
  const queue = [...chunks];
  return {
    read(p: Uint8Array): Promise<number | null> {
      const next = queue.shift();
      if (next === undefined) {
        return end ? Promise.resolve(null) : new Promise<never>(() => {}); // silent forever
      }
      p.set(next);
      return Promise.resolve(next.length);
    },
  } as unknown as Deno.Conn;
}

const msg = (header: string, body: string) =>
  encodeTwoPart({ header: enc.encode(header), body: enc.encode(body) });

Deno.test("TwoPartReader: messages split across reads and several in one read come whole and in order", async () => {
  const a = msg('"a"', "first");
  const b = msg('"b"', "second");
  const c = msg('"c"', "");
  const all = new Uint8Array([...a, ...b, ...c]);
  // Cut mid-prefix, mid-header and mid-body; the reader reuses one buffer for every read.
  const reader = new TwoPartReader(
    fakeConn([all.subarray(0, 7), all.subarray(7, 26), all.subarray(26, 40), all.subarray(40)]),
  );
  const got: string[] = [];
  for (;;) {
    const m = await reader.next(1_000, "test");
    if (m === undefined) break;
    got.push(`${dec.decode(m.header)}|${dec.decode(m.body)}`);
  }
  assert.deepEqual(got, ['"a"|first', '"b"|second', '"c"|']);
  assert.equal(reader.pending, 0);
});

Deno.test("TwoPartReader: a connection that ends mid-message leaves its bytes pending", async () => {
  const a = msg('"a"', "whole");
  const reader = new TwoPartReader(fakeConn([a.subarray(0, a.length - 2)]));
  assert.equal(await reader.next(1_000, "test"), undefined);
  assert.equal(reader.pending, a.length - 2);
});

Deno.test("TwoPartReader: silence past the deadline fails with TimeoutError naming what was awaited", async () => {
  const reader = new TwoPartReader(fakeConn([], false));
  const started = performance.now();
  await assert.rejects(
    reader.next(50, "reference worker w: response item"),
    (err: unknown) =>
      err instanceof TimeoutError &&
      err.message === "reference worker w: response item: nothing within 50 ms",
  );
  assert.ok(performance.now() - started >= 45, "not before its deadline");
});

Deno.test("TwoPartReader: a malformed frame fails the read that meets it", async () => {
  const bad = new Uint8Array(24);
  new DataView(bad.buffer).setUint32(20, 7); // a checksum the reference never sends
  const reader = new TwoPartReader(fakeConn([bad]));
  await assert.rejects(reader.next(1_000, "test"), ReferenceWireError);
});
