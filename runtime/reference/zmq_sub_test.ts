import assert from "node:assert/strict";
import { ProtocolError, TimeoutError } from "../errors.ts";
import { writeAll } from "./_io.ts";
import { ZmqSubscriber } from "./zmq_sub.ts";

/** Reads exactly `n` bytes. */
async function readN(conn: Deno.Conn, n: number): Promise<Uint8Array> {
  const out = new Uint8Array(n);
  let at = 0;
  while (at < n) {
    const got = await conn.read(out.subarray(at));
    if (got === null) throw new Error(`closed after ${at} of ${n} bytes`);
    at += got;
  }
  return out;
}

function peerGreeting(mechanism = "NULL"): Uint8Array {
  const g = new Uint8Array(64);
  g[0] = 0xff;
  g[9] = 0x7f;
  g[10] = 3;
  g[11] = 1;
  g.set(new TextEncoder().encode(mechanism), 12);
  g[32] = 1; // as-server
  return g;
}

/** A one-connection publisher that runs `serve` on the accepted connection. */
function publisher(serve: (conn: Deno.Conn) => Promise<void>) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const done = (async () => {
    const conn = await listener.accept();
    try {
      await serve(conn);
    } finally {
      try {
        conn.close();
      } catch { /* closed */ }
    }
  })();
  return {
    endpoint: `tcp://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    async close() {
      listener.close();
      await done.catch(() => {});
    },
  };
}

Deno.test("ZmqSubscriber greets, says READY as SUB, subscribes, then reads multipart messages", async () => {
  const seen: { greeting?: Uint8Array; ready?: Uint8Array; subscribe?: Uint8Array } = {};
  const pub = publisher(async (conn) => {
    seen.greeting = await readN(conn, 64);
    await writeAll(conn, peerGreeting());
    // READY: command flag, short size.
    const head = await readN(conn, 2);
    assert.equal(head[0], 0x04);
    seen.ready = await readN(conn, head[1]!);
    await writeAll(conn, new Uint8Array([0x04, 6, 5, ...new TextEncoder().encode("READY")]));
    const sub = await readN(conn, 2);
    seen.subscribe = await readN(conn, sub[1]!);
    const long = new Uint8Array(300).fill(7);
    const size = new Uint8Array(8);
    new DataView(size.buffer).setBigUint64(0, 300n);
    await writeAll(
      conn,
      new Uint8Array([
        0x01,
        2,
        0x61,
        0x62, // "ab", more
        0x04,
        5,
        4,
        ...new TextEncoder().encode("PING"), // a command between parts: skipped
        0x02,
        ...size,
        ...long, // last part, long size
        0x00,
        0, // a one-part message of nothing
      ]),
    );
  });
  try {
    const sub = await ZmqSubscriber.connect(pub.endpoint, {
      topic: new TextEncoder().encode("kv"),
    });
    const messages: Uint8Array[][] = [];
    for await (const parts of sub) messages.push(parts);
    assert.equal(seen.greeting![0], 0xff);
    assert.equal(seen.greeting![10], 3);
    assert.equal(new TextDecoder().decode(seen.greeting!.subarray(12, 16)), "NULL");
    const ready = new TextDecoder().decode(seen.ready!);
    assert.ok(ready.includes("READY") && ready.includes("Socket-Type") && ready.endsWith("SUB"));
    assert.deepEqual([...seen.subscribe!], [1, 0x6b, 0x76]);
    assert.equal(messages.length, 2);
    assert.deepEqual(messages[0]!.map((p) => p.length), [2, 300]);
    assert.deepEqual(messages[1], [new Uint8Array(0)]);
  } finally {
    await pub.close();
  }
});

Deno.test("ZmqSubscriber refuses a publisher that wants another mechanism", async () => {
  const pub = publisher(async (conn) => {
    await readN(conn, 64);
    await writeAll(conn, peerGreeting("CURVE"));
  });
  try {
    await assert.rejects(
      ZmqSubscriber.connect(pub.endpoint),
      (err: Error) => err instanceof ProtocolError && /CURVE/.test(err.message),
    );
  } finally {
    await pub.close();
  }
});

Deno.test("ZmqSubscriber gives up on a silent publisher at its deadline", async () => {
  const pub = publisher(async (conn) => {
    await readN(conn, 64).catch(() => {});
    await new Promise((r) => setTimeout(r, 500));
  });
  try {
    await assert.rejects(ZmqSubscriber.connect(pub.endpoint, { timeoutMs: 100 }), TimeoutError);
  } finally {
    await pub.close();
  }
});

Deno.test("ZmqSubscriber refuses an endpoint that is not tcp://host:port", async () => {
  await assert.rejects(ZmqSubscriber.connect("ipc:///tmp/x"), /not tcp:\/\/host:port/);
  await assert.rejects(ZmqSubscriber.connect("tcp://127.0.0.1:0"), /not tcp:\/\/host:port/);
});
