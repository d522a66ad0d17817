import assert from "node:assert/strict";
import fc from "fast-check";
import { FrameType } from "./types.ts";
import { decodeMuxRequest, encodeMuxRequest, parseTcpTarget, TcpRequestPlane } from "./tcp.ts";
import { decodeRequest, encodeRequest } from "./wire.ts";
import { MUX_STREAM_WINDOW, MuxKind, muxStreamId, readMuxHandshake } from "./mux.ts";
import { NoInstancesError, TimeoutError } from "../errors.ts";

/** Serves `path` on a fresh plane; each request's stream gets `serveStream`. */
async function worker(
  path: string,
  serveStream: (conn: Awaited<ReturnType<TcpRequestPlane["dial"]>>, body: unknown) => void,
) {
  const plane = new TcpRequestPlane();
  const sub = await plane.serve(path, (payload) => {
    const { header, body } = decodeRequest(payload);
    void plane.dial(header.connection_info).then((conn) => serveStream(conn, body));
  });
  return { plane, target: `${sub.address}/${path}` };
}

/** Sends one request from `caller` and returns its stream. */
async function call(caller: TcpRequestPlane, target: string, body: unknown) {
  const streamId = crypto.randomUUID();
  const pending = caller.expectStream(streamId);
  const header = {
    id: crypto.randomUUID(),
    request_type: "single_in" as const,
    response_type: "many_out" as const,
    connection_info: pending.connectionInfo,
  };
  await caller.request(target, encodeRequest(header, body), { streamId, timeoutMs: 2000 });
  return await pending.connection;
}

Deno.test("the TCP request message keeps the reference's layout and round-trips", () => {
  fc.assert(fc.property(fc.string({ maxLength: 100 }), fc.uint8Array(), (path, payload) => {
    const msg = encodeMuxRequest(path, payload);
    const view = new DataView(msg.buffer);
    const pathLen = view.getUint16(0);
    assert.equal(view.getUint16(2 + pathLen), 2); // headers "{}"
    const got = decodeMuxRequest(msg);
    assert.equal(got.path, path);
    assert.deepEqual([...got.payload], [...payload]);
  }));
  assert.deepEqual(parseTcpTarget("127.0.0.1:4000/ab12/ns/comp/ep"), {
    address: "127.0.0.1:4000",
    path: "ab12/ns/comp/ep",
  });
  assert.deepEqual(parseTcpTarget("[::1]:4000/x"), { address: "[::1]:4000", path: "x" });
  assert.equal(parseTcpTarget("ns_comp.ep-1"), undefined);
  assert.equal(muxStreamId("not-a-uuid"), undefined);
});

Deno.test("streams of any sizes share one TCP connection intact and in order", async () => {
  const { plane: w, target } = await worker("a/ns/c/e", (conn, body) => {
    void (async () => {
      for (const p of body as number[]) {
        await conn.send({ type: FrameType.Data, payload: new Uint8Array(p).fill(p & 0xff) });
      }
      await conn.send({ type: FrameType.Sentinel, payload: new Uint8Array(0) });
      await conn.end();
    })();
  });
  const caller = new TcpRequestPlane();
  try {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.nat({ max: 300_000 }), { maxLength: 8 }), { maxLength: 6 }),
        async (streams) => {
          await Promise.all(streams.map(async (sizes) => {
            const conn = await call(caller, target, sizes);
            const got: number[] = [];
            for (
              let f = await conn.receive();
              f?.type === FrameType.Data;
              f = await conn.receive()
            ) {
              assert.ok(f.payload.every((b) => b === (f!.payload.length & 0xff)));
              got.push(f.payload.length);
            }
            conn.close();
            assert.deepEqual(got, sizes);
          }));
        },
      ),
      { numRuns: 15 },
    );
  } finally {
    await caller.close();
    await w.close();
  }
});

Deno.test("a request to an endpoint the worker does not serve, or to nobody, is NoInstancesError", async () => {
  const { plane: w, target } = await worker("a/ns/c/e", () => {});
  const caller = new TcpRequestPlane();
  try {
    await assert.rejects(call(caller, target.replace("/a/", "/b/"), {}), NoInstancesError);
    const port = (() => {
      const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const p = (l.addr as Deno.NetAddr).port;
      l.close();
      return p;
    })();
    await assert.rejects(call(caller, `127.0.0.1:${port}/a/ns/c/e`, {}), NoInstancesError);
  } finally {
    await caller.close();
    await w.close();
  }
});

Deno.test("a worker that never acknowledges fails the request with TimeoutError", async () => {
  // A listener that takes the connection and reads nothing: a hung worker.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const c of listener) held.push(c);
  })().catch(() => {});
  const caller = new TcpRequestPlane();
  try {
    const target = `127.0.0.1:${(listener.addr as Deno.NetAddr).port}/a/ns/c/e`;
    const streamId = crypto.randomUUID();
    caller.expectStream(streamId);
    await assert.rejects(
      caller.request(target, new Uint8Array(8), { streamId, timeoutMs: 200 }),
      TimeoutError,
    );
  } finally {
    await caller.close();
    listener.close();
    for (const c of held) c.close();
    await accepting;
  }
});

Deno.test("a stream's sender stops at its window until the reader consumes", async () => {
  let sent = 0;
  const { plane: w, target } = await worker("a/ns/c/e", (conn) => {
    void (async () => {
      try {
        for (let i = 0; i < 1000; i++) {
          await conn.send({ type: FrameType.Data, payload: new Uint8Array(1024) });
          sent++;
        }
      } catch {
        // the caller hung up
      }
    })();
  });
  const caller = new TcpRequestPlane();
  try {
    const conn = await call(caller, target, {});
    await new Promise((r) => setTimeout(r, 200));
    const window = MUX_STREAM_WINDOW / 1024;
    assert.ok(sent <= window && sent >= window / 2, `sent ${sent} frames before credit ran out`);
    for (let i = 0; i < 400; i++) assert.equal((await conn.receive())?.type, FrameType.Data);
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(sent > window, `credit returned: sent ${sent}`);
    conn.close();
  } finally {
    await caller.close();
    await w.close();
  }
});

Deno.test("the worker's listener closes a connection that does not open with the handshake", async () => {
  const { plane: w, target } = await worker("a/ns/c/e", () => {});
  try {
    const [host, port] = parseTcpTarget(target)!.address.split(":");
    const conn = await Deno.connect({ hostname: host!, port: Number(port) });
    await conn.write(new Uint8Array(24).fill(0xff));
    const buf = new Uint8Array(16);
    assert.equal(await conn.read(buf), null);
    conn.close();
    // The door itself: a nonzero first word is the per-stream protocol, not a handshake.
    const [a, b] = await pair();
    await a.write(
      new Uint8Array([0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    );
    assert.ok("legacy" in await readMuxHandshake(b));
    a.close();
    b.close();
    assert.equal(MuxKind.Data, 2);
  } finally {
    await w.close();
  }
});

async function pair(): Promise<[Deno.Conn, Deno.Conn]> {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted = l.accept();
  const a = await Deno.connect({ hostname: "127.0.0.1", port: (l.addr as Deno.NetAddr).port });
  const b = await accepted;
  l.close();
  return [a, b];
}

Deno.test("random bytes after the handshake end that connection only; the worker serves on", async () => {
  const { plane: w, target } = await worker("a/ns/c/e", (conn) => {
    void (async () => {
      await conn.send({ type: FrameType.Sentinel, payload: new Uint8Array(0) });
      await conn.end();
    })();
  });
  const caller = new TcpRequestPlane();
  try {
    const { address } = parseTcpTarget(target)!;
    const [host, port] = address.split(":");
    const { encodeMuxHandshake } = await import("./mux.ts");
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 600 }), async (garbage) => {
        const conn = await Deno.connect({ hostname: host!, port: Number(port) });
        try {
          await conn.write(encodeMuxHandshake({ kind: "request_mux", version: 1 }));
          await conn.write(garbage);
        } finally {
          conn.close();
        }
      }),
      { numRuns: 50 },
    );
    const conn = await call(caller, target, {});
    assert.equal((await conn.receive())?.type, FrameType.Sentinel);
    conn.close();
  } finally {
    await caller.close();
    await w.close();
  }
});
