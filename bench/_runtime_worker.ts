// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The worker process of `deno task bench:runtime`: serves the dynamo endpoints on etcd + NATS,
// the raw baselines (a nats.js responder, a raw call-home, TCP ping-pong and streaming), and
// instrumented variants built from the runtime's own parts (to split a hop into phases).
// Args: one JSON object (WorkerArgs). Prints "READY <json>" when serving; shuts down when
// its stdin closes.

import { connect as natsConnect } from "nats";
import { DistributedRuntime } from "../mod.ts";
import { serveRequest } from "../runtime/serve_request.ts";
import {
  type ConnectionInfo,
  decodeRequest,
  NatsRequestPlane,
  TcpFrameConn,
} from "../runtime/transport/mod.ts";
import {
  clockNow,
  rawFrame,
  RawFrameReader,
  RawFrameWriter,
  rawJsonFrame,
  RawType,
  writeAll,
} from "./_raw.ts";

/** What the bench passes in. */
export interface WorkerArgs {
  etcd: string;
  nats: string;
  namespace: string;
}

/** What the worker reports when ready. */
export interface WorkerReady {
  instanceId: string;
  /** NATS subject of the dynamo ping endpoint's instance. */
  pingSubject: string;
  /** nats.js responder that echoes the request. */
  rawPingSubject: string;
  /** nats.js responder that acks, then dials back with plain Deno TCP. */
  rawCallHomeSubject: string;
  /** nats.js responder that acks, then answers on one reused TCP connection to the caller. */
  rawReuseSubject: string;
  /** Runtime plane + serveRequest (what serveEndpoint does), yielding its phase times. */
  tracedSubject: string;
  /** Runtime plane for the request, plain Deno TCP for the stream: `{n}` items. */
  rawSendSubject: string;
  tcpPingPort: number;
  tcpStreamPort: number;
}

const args = JSON.parse(Deno.args[0] ?? "{}") as WorkerArgs;
const decoder = new TextDecoder();
const encoder = new TextEncoder();
const EMPTY = new Uint8Array(0);
const fail = (what: string) => (err: unknown) => console.error(`${what}:`, err);

// --- dynamo endpoints -----------------------------------------------------------------------
const runtime = await DistributedRuntime.connect({
  discovery: "etcd",
  requestPlane: "nats",
  etcdEndpoints: args.etcd,
  natsServer: args.nats,
});
const component = runtime.namespace(args.namespace).component("worker");
const ping = component.endpoint("ping");
const stream = component.endpoint("stream");
const serving = [
  ping.serveEndpoint(async function* (_req: unknown) {
    yield { ok: 1 };
  }),
  stream.serveEndpoint(async function* (req: { n: number }) {
    for (let i = 0; i < req.n; i++) yield { i };
  }),
];
// The same endpoints on the TCP request plane (its own runtime: etcd + TCP, events on NATS).
const tcpRuntime = await DistributedRuntime.connect({
  discovery: "etcd",
  requestPlane: "tcp",
  etcdEndpoints: args.etcd,
  natsServer: args.nats,
});
const tcpComponent = tcpRuntime.namespace(args.namespace).component("worker_tcp");
serving.push(
  tcpComponent.endpoint("ping").serveEndpoint(async function* (_req: unknown) {
    yield { ok: 1 };
  }),
  tcpComponent.endpoint("stream").serveEndpoint(async function* (req: { n: number }) {
    for (let i = 0; i < req.n; i++) yield { i };
  }),
);
serving.forEach((p) => p.catch(fail("serveEndpoint")));

// --- raw NATS: request-reply responder, and a call-home without runtime code ----------------
const nc = await natsConnect({ servers: args.nats, name: "bench-raw-responder" });
const rawPingSubject = `bench.raw.ping.${args.namespace}`;
const rawCallHomeSubject = `bench.raw.callhome.${args.namespace}`;
// Answers with our clock, so the bench can also time the one-way trip.
nc.subscribe(rawPingSubject, {
  callback: (_err, msg) => msg.respond(encoder.encode(String(clockNow()))),
});
nc.subscribe(rawCallHomeSubject, {
  callback: (_err, msg) => {
    // ack: "first" (as the runtime does), "after" (once the dial started), "none" (published).
    const { port, id, ack } = JSON.parse(decoder.decode(msg.data)) as {
      port: number;
      id: string;
      ack: "first" | "after" | "none";
    };
    if (ack === "first") msg.respond(EMPTY);
    const dialling = Deno.connect({ hostname: "127.0.0.1", port });
    if (ack === "after") msg.respond(EMPTY);
    callHome(dialling, id).catch(fail("raw call-home"));
  },
});

const rawReuseSubject = `bench.raw.reuse.${args.namespace}`;
const reused = new Map<number, Promise<Deno.TcpConn>>();
nc.subscribe(rawReuseSubject, {
  callback: (_err, msg) => {
    const { port, id, ack } = JSON.parse(decoder.decode(msg.data)) as {
      port: number;
      id: string;
      ack: "first" | "none";
    };
    if (ack === "first") msg.respond(EMPTY);
    callHomeReused(port, id).catch(fail("raw reused call-home"));
  },
});

async function callHomeReused(port: number, id: string): Promise<void> {
  let dialled = reused.get(port);
  if (!dialled) {
    dialled = Deno.connect({ hostname: "127.0.0.1", port }).then((c) => (c.setNoDelay(true), c));
    reused.set(port, dialled);
  }
  const conn = await dialled;
  const frames = [
    rawFrame(RawType.Handshake, encoder.encode(id)),
    rawJsonFrame(RawType.Prologue, {}),
    rawJsonFrame(RawType.Data, { ok: 1 }),
    rawJsonFrame(RawType.Sentinel, null),
  ];
  const buf = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
  let off = 0;
  for (const f of frames) (buf.set(f, off), off += f.length);
  await writeAll(conn, buf);
}

async function callHome(dialling: Promise<Deno.TcpConn>, id: string): Promise<void> {
  const conn = await dialling;
  conn.setNoDelay(true);
  try {
    const frames = [
      rawJsonFrame(RawType.Handshake, id),
      rawJsonFrame(RawType.Prologue, {}),
      rawJsonFrame(RawType.Data, { ok: 1 }),
      rawJsonFrame(RawType.Sentinel, null),
    ];
    const buf = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
    let off = 0;
    for (const f of frames) (buf.set(f, off), off += f.length);
    await writeAll(conn, buf);
  } finally {
    conn.close();
  }
}

// --- instrumented: the runtime's plane and stream code, without Endpoint's bookkeeping -------
const plane = await NatsRequestPlane.connect({ servers: args.nats, name: "bench-traced-worker" });
const tracedSubject = `bench.traced.${args.namespace}`;
const rawSendSubject = `bench.rawsend.${args.namespace}`;
const tracedSub = await plane.serve(tracedSubject, (payload) => {
  // Same steps as Endpoint#handle: decode, dial the caller, serveRequest.
  const tRecv = clockNow();
  const { header, body } = decodeRequest(payload);
  const tDecoded = clockNow();
  plane.dial(header.connection_info).then((conn) => {
    const tDialed = clockNow();
    return serveRequest(conn, header, body, async function* () {
      yield { tRecv, tDecoded, tDialed, tHandler: clockNow() };
    });
  }).catch(fail("traced request"));
});
const rawSendSub = await plane.serve(rawSendSubject, (payload) => {
  const { header, body } = decodeRequest(payload);
  rawSend(header.connection_info, (body as { n: number }).n).catch(fail("raw send"));
});

/** Answers a runtime caller with plain batched frames: handshake, prologue, n items, sentinel. */
async function rawSend(info: ConnectionInfo, n: number): Promise<void> {
  if (!("tcp" in info)) throw new Error("raw send needs a TCP connection info");
  const at = info.tcp.address.lastIndexOf(":");
  const conn = await Deno.connect({
    hostname: info.tcp.address.slice(0, at),
    port: Number(info.tcp.address.slice(at + 1)),
  });
  conn.setNoDelay(true);
  try {
    const w = new RawFrameWriter(conn);
    await w.pushText(RawType.Handshake, info.tcp.stream_id);
    await w.pushText(RawType.Prologue, "{}");
    for (let i = 0; i < n; i++) await w.pushText(RawType.Data, JSON.stringify({ i }));
    await w.pushText(RawType.Sentinel, "");
    await w.flush();
  } finally {
    conn.close();
  }
}

// --- raw TCP: ping-pong (echo each frame; clock frames get our clock) and streaming ----------
const pingListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const streamListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });

async function echo(conn: Deno.TcpConn): Promise<void> {
  conn.setNoDelay(true);
  const reader = new RawFrameReader(conn);
  try {
    for (;;) {
      const f = await reader.next();
      if (f === null) return;
      if (f.type === RawType.Clock) {
        await writeAll(conn, rawJsonFrame(RawType.Clock, clockNow()));
        continue;
      }
      const out = new Uint8Array(5 + f.payload.length);
      new DataView(out.buffer).setUint32(0, f.payload.length + 1);
      out[4] = f.type;
      out.set(f.payload, 5);
      await writeAll(conn, out);
    }
  } finally {
    conn.close();
  }
}

/** Stream modes: "bare" (no JSON), "json" (JSON.stringify per item), "serve" (runtime sender). */
async function streamOut(conn: Deno.TcpConn): Promise<void> {
  conn.setNoDelay(true);
  let handedOver = false;
  try {
    const req = await new RawFrameReader(conn).next();
    if (req === null) return;
    const { n, mode } = JSON.parse(decoder.decode(req.payload)) as { n: number; mode: string };
    if (mode === "serve") {
      // The runtime's worker side (serveRequest + TcpFrameConn) with the same async generator.
      handedOver = true;
      const header = {
        id: "raw",
        request_type: "single_in",
        response_type: "many_out",
        connection_info: { local: { stream_id: "raw" } },
      } as const;
      await serveRequest(new TcpFrameConn(conn), header, { n }, async function* () {
        for (let i = 0; i < n; i++) yield { i };
      });
      return;
    }
    const w = new RawFrameWriter(conn);
    if (mode === "json") {
      for (let i = 0; i < n; i++) await w.pushText(RawType.Data, JSON.stringify({ i }));
    } else {
      for (let i = 0; i < n; i++) await w.pushText(RawType.Data, '{"i":' + i + "}");
    }
    await w.pushText(RawType.Sentinel, "");
    await w.flush();
  } finally {
    if (!handedOver) conn.close();
  }
}

async function acceptLoop(l: Deno.TcpListener, serve: (c: Deno.TcpConn) => Promise<void>) {
  try {
    for await (const c of l) serve(c).catch(fail("raw TCP"));
  } catch {
    // listener closed
  }
}
const accepting = [acceptLoop(pingListener, echo), acceptLoop(streamListener, streamOut)];

const ready: WorkerReady = {
  instanceId: runtime.instanceId,
  pingSubject: ping.subject,
  rawPingSubject,
  rawCallHomeSubject,
  rawReuseSubject,
  tracedSubject,
  rawSendSubject,
  tcpPingPort: (pingListener.addr as Deno.NetAddr).port,
  tcpStreamPort: (streamListener.addr as Deno.NetAddr).port,
};
console.log(`READY ${JSON.stringify(ready)}`);

// Run until the bench closes our stdin (or 5 minutes, whichever first).
const stdinClosed = (async () => {
  const buf = new Uint8Array(256);
  while ((await Deno.stdin.read(buf)) !== null) { /* ignore input */ }
})();
let guard: ReturnType<typeof setTimeout> | undefined;
await Promise.race([stdinClosed, new Promise((r) => (guard = setTimeout(r, 300_000)))]);
clearTimeout(guard);
pingListener.close();
streamListener.close();
await Promise.all(accepting);
for (const c of reused.values()) await c.then((conn) => conn.close(), () => {});
await tracedSub.unsubscribe();
await rawSendSub.unsubscribe();
await plane.close();
await nc.drain().catch(() => nc.close());
await Promise.all([runtime.shutdown(), tcpRuntime.shutdown()]);
await Promise.allSettled(serving);
Deno.exit(0);
