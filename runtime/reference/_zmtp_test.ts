import assert from "node:assert/strict";
import { ProtocolError } from "../errors.ts";
import { Reader } from "./_zmtp.ts";

/** A connection whose reads return the pieces given (at most what fits), then end. */
function fakeConn(pieces: Uint8Array[]): Deno.Conn {
  const queue = [...pieces];
  return {
    read(p: Uint8Array): Promise<number | null> {
      const next = queue.shift();
      if (next === undefined) return Promise.resolve(null);
      if (next.length > p.length) queue.unshift(next.subarray(p.length));
      p.set(next.subarray(0, p.length));
      return Promise.resolve(Math.min(next.length, p.length));
    },
  } as unknown as Deno.Conn;
}

const cut = (bytes: Uint8Array, size: number) => {
  const pieces: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) pieces.push(bytes.slice(i, i + size));
  return pieces;
};

Deno.test("Reader.take: what it returned stays as it came while later bytes are read, however long", async () => {
  // 3,000 small takes (several chunks' worth), one of 200,000 bytes, then the rest.
  const sizes = [...Array.from({ length: 3_000 }, (_, i) => 1 + (i % 40)), 200_000, 9];
  const total = sizes.reduce((a, b) => a + b, 0);
  const bytes = new Uint8Array(total);
  for (let i = 0; i < total; i++) bytes[i] = (i * 31 + (i >> 8)) & 0xff;
  const reader = new Reader(fakeConn(cut(bytes, 1_000)));
  const taken: Uint8Array[] = [];
  for (const n of sizes) taken.push((await reader.take(n))!);
  let at = 0;
  for (const [i, t] of taken.entries()) {
    assert.deepEqual(t, bytes.subarray(at, at + sizes[i]!), `take ${i}`);
    at += sizes[i]!;
  }
  assert.equal(await reader.take(1), undefined, "a clean end");
});

Deno.test("Reader.take: the peer closing mid-frame is ProtocolError", async () => {
  const reader = new Reader(fakeConn([new Uint8Array([1, 2, 3])]));
  assert.deepEqual(await reader.take(2), new Uint8Array([1, 2]));
  await assert.rejects(reader.take(5), ProtocolError);
});
