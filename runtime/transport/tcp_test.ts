import assert from "node:assert/strict";
import fc from "fast-check";
import { FrameType } from "./types.ts";
import { decodeMuxRequest, encodeMuxRequest, parseTcpTarget, TcpRequestPlane } from "./tcp.ts";
import { decodeRequest, encodeRequest } from "./wire.ts";
import {
  MUX_STREAM_WINDOW,
  MuxConnection,
  MuxKind,
  muxStreamId,
  muxStreamKey,
  readMuxHandshake,
  sameStreamId,
} from "./mux.ts";
import { NoInstancesError, TimeoutError } from "../errors.ts";
import { encodeTcpRequest, type ReferenceTcpRequest, TcpRequestDecoder } from "./reference_wire.ts";
import { RequestConnection } from "../reference/request_connection.ts";
import { ReferenceWorkerRefusedError } from "../reference/errors.ts";
import type { Logger } from "../logger.ts";
import golden from "../../tests/golden/reference_1.6.1/wire.json" with { type: "json" };

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
    // Four zero bytes start a handshake, but these lengths are not one.
    await conn.write(new Uint8Array([0, 0, 0, 0, ...new Uint8Array(20).fill(0xff)]));
    const buf = new Uint8Array(16);
    assert.equal(await conn.read(buf), null);
    conn.close();
    // The door itself: a nonzero first word is not a handshake (a reference request's).
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

/** A logger that keeps its warnings. */
function warnings(): {
  logger: Logger;
  lines: { msg: string; fields?: Record<string, unknown> }[];
} {
  const lines: { msg: string; fields?: Record<string, unknown> }[] = [];
  const logger: Logger = {
    debug() {},
    info() {},
    warn: (msg, fields) => void lines.push({ msg, fields }),
    error: (msg, fields) => void lines.push({ msg, fields }),
    child: () => logger,
  };
  return { logger, lines };
}

function hex(h: string): Uint8Array {
  return new Uint8Array(h.match(/../g)!.map((b) => parseInt(b, 16)));
}

async function readBytes(conn: Deno.Conn, n: number): Promise<Uint8Array> {
  const out = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = await conn.read(out.subarray(got));
    if (r === null) break;
    got += r;
  }
  return out.subarray(0, got);
}

/** Reads until the peer closes; the bytes it sent. */
async function readToEnd(conn: Deno.Conn): Promise<Uint8Array> {
  const parts: number[] = [];
  const buf = new Uint8Array(4096);
  for (;;) {
    const n = await conn.read(buf);
    if (n === null) return new Uint8Array(parts);
    parts.push(...buf.subarray(0, n));
  }
}

Deno.test("one listener serves our mux callers and the reference's request connections on one port", async () => {
  const path = "1a2b/ns/backend/generate";
  const taken: ReferenceTcpRequest[] = [];
  const { plane: w, target } = await worker(path, (conn, body) => {
    void (async () => {
      await conn.send({
        type: FrameType.Data,
        payload: new TextEncoder().encode(JSON.stringify(body)),
      });
      await conn.send({ type: FrameType.Sentinel, payload: new Uint8Array(0) });
      await conn.end();
    })();
  });
  const refSub = await w.serveReference(path, (req) => {
    if (req.headers["x-refuse"]) throw new Error("refused by the handler");
    taken.push(req);
  });
  const { address } = parseTcpTarget(target)!;
  assert.equal(refSub.address, address); // the same port
  const [host, port] = address.split(":");
  // The reference's framing, replayed byte for byte from its own frontend (golden capture):
  // two requests on one connection, answered with the worker's two empty acknowledgements.
  const fromFrontend = golden.flows.find((f) => f.length === 2511)!;
  const ackFlow = golden.flows.find((f) =>
    f.from === fromFrontend.to && f.to === fromFrontend.from
  )!;
  const goldenRequests = new TcpRequestDecoder().push(hex(fromFrontend.hex));
  assert.equal(goldenRequests.length, 2);
  const goldenSub = await w.serveReference(goldenRequests[0]!.endpointPath, (req) => {
    taken.push(req);
  });
  const caller = new TcpRequestPlane();
  const raw = await Deno.connect({ hostname: host!, port: Number(port) });
  const ref = await RequestConnection.connect(host!, Number(port), 2000);
  try {
    await raw.write(hex(fromFrontend.hex));
    assert.deepEqual(await readBytes(raw, ackFlow.length), hex(ackFlow.hex));
    assert.deepEqual(taken.map((r) => r.endpointPath), goldenRequests.map((r) => r.endpointPath));
    assert.deepEqual(taken.map((r) => [...r.payload]), goldenRequests.map((r) => [...r.payload]));
    // Our caller and the reference's, interleaved, on the one port.
    for (let i = 0; i < 3; i++) {
      const stream = await call(caller, target, { i });
      const item = await stream.receive();
      assert.equal(item?.type, FrameType.Data);
      assert.deepEqual(JSON.parse(new TextDecoder().decode(item!.payload)), { i });
      assert.equal((await stream.receive())?.type, FrameType.Sentinel);
      stream.close();
      const payload = new Uint8Array([i, 1, 2]);
      await ref.send({ endpointPath: path, headers: { n: String(i) }, payload }, 2000);
      assert.deepEqual([...taken.at(-1)!.payload], [...payload]);
      assert.equal(taken.at(-1)!.headers.n, String(i));
    }
    // A refused request is acknowledged with the handler's reason; the connection goes on.
    await assert.rejects(
      ref.send(
        { endpointPath: path, headers: { "x-refuse": "1" }, payload: new Uint8Array() },
        2000,
      ),
      (err: Error) =>
        err instanceof ReferenceWorkerRefusedError && /refused by the handler/.test(err.message),
    );
    await assert.rejects(
      ref.send({ endpointPath: "ffff/ns/x/y", headers: {}, payload: new Uint8Array() }, 2000),
      /no endpoint ffff\/ns\/x\/y here/,
    );
    await ref.send({ endpointPath: path, headers: {}, payload: new Uint8Array([9]) }, 2000);
    assert.deepEqual([...taken.at(-1)!.payload], [9]);
    // Unserved, the path is refused; our own endpoint on it is untouched.
    await refSub.unsubscribe();
    await assert.rejects(
      ref.send({ endpointPath: path, headers: {}, payload: new Uint8Array() }, 2000),
      /no endpoint/,
    );
    const stream = await call(caller, target, { after: true });
    assert.equal((await stream.receive())?.type, FrameType.Data);
    stream.close();
  } finally {
    await goldenSub.unsubscribe();
    raw.close();
    ref.close();
    await caller.close();
    await w.close();
  }
});

Deno.test("a malformed first frame is answered with what was wrong and closes only its connection", async () => {
  const path = "1a2b/ns/backend/generate";
  const { logger, lines } = warnings();
  const w = new TcpRequestPlane({ logger });
  const sub = await w.serve(path, (payload) => {
    const { header } = decodeRequest(payload);
    void w.dial(header.connection_info).then(async (conn) => {
      await conn.send({ type: FrameType.Sentinel, payload: new Uint8Array(0) });
      await conn.end();
    });
  });
  let taken = 0;
  await w.serveReference(path, () => void taken++);
  const target = `${sub.address}/${path}`;
  const [host, port] = sub.address.split(":");
  const caller = new TcpRequestPlane();
  const ref = await RequestConnection.connect(host!, Number(port), 2000);
  const open = await call(caller, target, {}); // a stream open across the bad connections
  try {
    // A reference-framed request whose headers are not JSON.
    const bad = encodeTcpRequest({ endpointPath: path, headers: {}, payload: new Uint8Array() });
    const headersAt = 2 + path.length + 2;
    bad.set(new TextEncoder().encode("{x"), headersAt);
    const conn = await Deno.connect({ hostname: host!, port: Number(port) });
    await conn.write(bad);
    const answer = await readToEnd(conn); // the acknowledgement, then the close
    conn.close();
    const len = new DataView(answer.buffer).getUint32(0);
    assert.equal(answer.length, 4 + len);
    const text = new TextDecoder().decode(answer.subarray(4));
    assert.match(text, /^malformed request frame: bad request path or headers/);
    assert.ok(lines.some((l) => /reference request connection dropped/.test(l.msg)));
    // A first frame that starts like our handshake but is not one: closed, and logged.
    const conn2 = await Deno.connect({ hostname: host!, port: Number(port) });
    await conn2.write(new Uint8Array([0, 0, 0, 0, ...new Uint8Array(20).fill(7)]));
    assert.equal((await readToEnd(conn2)).length, 0);
    conn2.close();
    assert.ok(
      lines.some((l) =>
        /bad first frame/.test(l.msg) && /bad handshake lengths/.test(String(l.fields?.error))
      ),
    );
    assert.equal(taken, 0);
    // Every other connection on the port goes on: the stream opened before, a new request of
    // ours on the pooled connection, and the reference connection.
    assert.equal((await open.receive())?.type, FrameType.Sentinel);
    const again = await call(caller, target, {});
    assert.equal((await again.receive())?.type, FrameType.Sentinel);
    await ref.send({ endpointPath: path, headers: {}, payload: new Uint8Array() }, 2000);
    assert.equal(taken, 1);
  } finally {
    open.close();
    ref.close();
    await caller.close();
    await w.close();
  }
});

Deno.test("a request encoded in place in the mux output is byte for byte encodeMuxRequest(path, encodeRequest(header, body))", async () => {
  const text = fc.oneof(
    fc.string({ maxLength: 30 }),
    fc.string({ unit: "binary", maxLength: 40 }),
    fc.string({ unit: "binary", minLength: 600, maxLength: 3000 }),
  );
  await fc.assert(
    fc.asyncProperty(
      text,
      text,
      fc.string({ minLength: 1, maxLength: 40 }),
      async (id, t, path) => {
        const written: Uint8Array[] = [];
        const conn = {
          read: () => new Promise<number | null>(() => {}),
          write: (b: Uint8Array) => (written.push(b.slice()), Promise.resolve(b.length)),
          close() {},
        } as unknown as Deno.Conn;
        const mux = new MuxConnection(conn);
        try {
          const ids = muxStreamId(crypto.randomUUID())!;
          const header = {
            id,
            request_type: "single_in" as const,
            response_type: "many_out" as const,
            connection_info: { mux: { stream_id: ids.key } },
          };
          const body = { text: t, n: [1, 2] };
          mux.openStream(ids.key, ids.bytes).sendRequest(
            new TextEncoder().encode(path),
            new TextEncoder().encode("{}"),
            JSON.stringify(header),
            JSON.stringify(body),
          );
          await new Promise((r) => setTimeout(r, 0)); // the flush
          const frame = new Uint8Array(written.reduce((n, b) => n + b.length, 0));
          let off = 0;
          for (const b of written) frame.set(b, off), off += b.length;
          const want = encodeMuxRequest(path, encodeRequest(header, body));
          assert.equal(new DataView(frame.buffer).getUint32(0), want.length);
          assert.equal(frame[4], MuxKind.Request);
          assert.deepEqual(frame.subarray(8, 24), ids.bytes);
          assert.deepEqual(frame.subarray(24), want);
          const got = decodeRequest(decodeMuxRequest(frame.subarray(24)).payload);
          assert.deepEqual(got, { header, body });
        } finally {
          mux.close();
        }
      },
    ),
    { numRuns: 150 },
  );
});

Deno.test("sameStreamId(id, key) is muxStreamId(id)?.key === key, without building either", () => {
  const uuid = fc.uuid();
  const variant = fc.tuple(uuid, fc.constantFrom("as-is", "upper", "undashed", "broken"))
    .map(([u, how]) =>
      how === "upper"
        ? u.toUpperCase()
        : how === "undashed"
        ? u.replaceAll("-", "")
        : how === "broken"
        ? u.slice(0, 8) + "_" + u.slice(9)
        : u
    );
  fc.assert(
    fc.property(variant, uuid, fc.boolean(), (id, other, same) => {
      const key = muxStreamId(same ? id.replaceAll("_", "-") : other)?.key ?? "";
      assert.equal(sameStreamId(id, key), muxStreamId(id)?.key === key);
    }),
    { numRuns: 500 },
  );
  assert.equal(sameStreamId("x", ""), false);
});

Deno.test("muxStreamKey(id) is muxStreamId(id)?.key, and the key is the wire bytes in hex", () => {
  const id = fc.oneof(
    fc.tuple(fc.uuid(), fc.constantFrom("as-is", "upper", "undashed", "undashed-upper", "broken"))
      .map(([u, how]) =>
        how === "upper"
          ? u.toUpperCase()
          : how === "undashed"
          ? u.replaceAll("-", "")
          : how === "undashed-upper"
          ? u.replaceAll("-", "").toUpperCase()
          : how === "broken"
          ? u.slice(0, 8) + "_" + u.slice(9)
          : u
      ),
    fc.string({ minLength: 30, maxLength: 38 }),
    fc.stringMatching(/^[0-9a-gA-G-]{32,36}$/),
  );
  fc.assert(
    fc.property(id, (s) => {
      const ids = muxStreamId(s);
      assert.equal(muxStreamKey(s), ids?.key);
      // The key is the 16 wire bytes in lower-case hex, and they are the id's digits.
      if (ids !== undefined) {
        const hex = Array.from(ids.bytes, (b) => b.toString(16).padStart(2, "0")).join("");
        assert.equal(ids.key, hex);
        assert.equal(hex, s.replaceAll("-", "").toLowerCase());
      }
    }),
    { numRuns: 2000 },
  );
});
