import assert from "node:assert/strict";
import { TimeoutError } from "../errors.ts";
import { encodeTwoPart, ReferenceWireError } from "../transport/reference_wire.ts";
import { TwoPartReader } from "./_io.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * A connection whose reads return the chunks given, then wait (or end, with `end`); closing it
 * fails the read waiting, as a real connection's does.
 */
function fakeConn(chunks: Uint8Array[], end = true): Deno.Conn & { closed: boolean } {
  const queue = [...chunks];
  let fail: ((err: Error) => void) | undefined;
  const conn = {
    closed: false,
    read(p: Uint8Array): Promise<number | null> {
      const next = queue.shift();
      if (next === undefined) {
        if (end) return Promise.resolve(null);
        return new Promise<never>((_, reject) => (fail = reject)); // silent until closed
      }
      // As a real read: at most what fits, the rest on the next read.
      if (next.length > p.length) queue.unshift(next.subarray(p.length));
      p.set(next.subarray(0, p.length));
      return Promise.resolve(Math.min(next.length, p.length));
    },
    close() {
      conn.closed = true;
      fail?.(new Deno.errors.Interrupted("operation canceled"));
    },
  };
  return conn as unknown as Deno.Conn & { closed: boolean };
}

/** `promise`, or a failure once `ms` pass (a read the deadline left waiting fails, not hangs). */
async function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`still waiting after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
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
  const conn = fakeConn([], false);
  const reader = new TwoPartReader(conn);
  const started = performance.now();
  await assert.rejects(
    within(2_000, reader.next(50, "reference worker w: response item")),
    (err: unknown) =>
      err instanceof TimeoutError &&
      err.message === "reference worker w: response item: nothing within 50 ms",
  );
  assert.ok(performance.now() - started >= 45, "not before its deadline");
  assert.ok(conn.closed, "the connection is closed: nothing more is read from it");
  await assert.rejects(within(2_000, reader.next(1_000, "again")), TimeoutError);
});

Deno.test("TwoPartReader: on a real connection, silence past the deadline ends the read waiting", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conn = await Deno.connect({
    hostname: "127.0.0.1",
    port: (listener.addr as Deno.NetAddr).port,
  });
  const peer = await listener.accept();
  try {
    const reader = new TwoPartReader(conn);
    await peer.write(msg('"hello"', "")); // one message, then silence
    assert.equal(dec.decode((await reader.next(1_000, "first"))!.header), '"hello"');
    const started = performance.now();
    await assert.rejects(within(2_000, reader.next(60, "second")), /second: nothing within 60 ms/);
    assert.ok(performance.now() - started < 1_000);
    // The peer sees the connection end.
    assert.equal(await peer.read(new Uint8Array(8)), null);
  } finally {
    peer.close();
    listener.close();
  }
});

Deno.test("TwoPartReader: a message stays as it came while later ones are read, however long", async () => {
  const big = "x".repeat(200_000); // past a chunk: read in many pieces
  const small = Array.from({ length: 2_000 }, (_, i) => `item ${i}`); // many chunks' worth
  const frames = [
    msg('"a"', "first"),
    ...small.map((body) => msg('""', body)),
    msg('"b"', big),
    msg('"c"', "third"),
  ];
  const all = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
  let at = 0;
  for (const f of frames) all.set(f, at), at += f.length;
  const pieces: Uint8Array[] = [];
  for (let i = 0; i < all.length; i += 1_000) pieces.push(all.slice(i, i + 1_000));
  const reader = new TwoPartReader(fakeConn(pieces));
  const got = [];
  for (;;) {
    const m = await reader.next(1_000, "test");
    if (m === undefined) break;
    got.push(m);
  }
  assert.deepEqual(
    got.map((m) => `${dec.decode(m.header)}|${dec.decode(m.body)}`),
    ['"a"|first', ...small.map((body) => `""|${body}`), `"b"|${big}`, '"c"|third'],
  );
});

Deno.test("TwoPartReader: a malformed frame fails the read that meets it", async () => {
  const bad = new Uint8Array(24);
  new DataView(bad.buffer).setUint32(20, 7); // a checksum the reference never sends
  const reader = new TwoPartReader(fakeConn([bad]));
  await assert.rejects(reader.next(1_000, "test"), ReferenceWireError);
});
