// The worker process of `deno task bench:runtime`: serves the dynamo endpoints on etcd + NATS,
// and the raw baselines (a nats.js responder, a raw call-home, TCP ping-pong and streaming).
// Args: one JSON object {etcd, nats, namespace}. Prints "READY <json>" when serving;
// shuts down when its stdin closes.

import { connect as natsConnect } from "nats";
import { DistributedRuntime } from "../mod.ts";
import { RawFrameReader, RawFrameWriter, rawJsonFrame, RawType, writeAll } from "./_raw.ts";

/** What the bench passes in. */
export interface WorkerArgs {
  etcd: string;
  nats: string;
  namespace: string;
}

/** What the worker reports when ready. */
export interface WorkerReady {
  instanceId: string;
  pingSubject: string;
  rawPingSubject: string;
  rawCallHomeSubject: string;
  tcpPingPort: number;
  tcpStreamPort: number;
}

const args = JSON.parse(Deno.args[0] ?? "{}") as WorkerArgs;
const decoder = new TextDecoder();
const EMPTY = new Uint8Array(0);

// --- dynamo endpoints -----------------------------------------------------------------
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

// --- raw NATS: request-reply responder, and a call-home without runtime code --------------
const nc = await natsConnect({ servers: args.nats, name: "bench-raw-responder" });
const rawPingSubject = `bench.raw.ping.${args.namespace}`;
const rawCallHomeSubject = `bench.raw.callhome.${args.namespace}`;
nc.subscribe(rawPingSubject, { callback: (_err, msg) => msg.respond(msg.data) });
nc.subscribe(rawCallHomeSubject, {
  callback: (_err, msg) => {
    msg.respond(EMPTY);
    const { port, id } = JSON.parse(decoder.decode(msg.data)) as { port: number; id: string };
    callHome(port, id).catch((err) => console.error("raw call-home failed:", err));
  },
});

async function callHome(port: number, id: string): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
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

// --- raw TCP: ping-pong (echo each frame) and one stream of many frames ---------------------
const pingListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const streamListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });

async function echo(conn: Deno.Conn): Promise<void> {
  conn.setNoDelay(true);
  const reader = new RawFrameReader(conn);
  try {
    for (;;) {
      const f = await reader.next();
      if (f === null) return;
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

async function streamOut(conn: Deno.Conn): Promise<void> {
  conn.setNoDelay(true);
  try {
    const req = await new RawFrameReader(conn).next();
    if (req === null) return;
    const { n, json } = JSON.parse(decoder.decode(req.payload)) as { n: number; json: boolean };
    const w = new RawFrameWriter(conn);
    if (json) { for (let i = 0; i < n; i++) await w.pushText(RawType.Data, JSON.stringify({ i })); }
    else { for (let i = 0; i < n; i++) await w.pushText(RawType.Data, '{"i":' + i + "}"); }
    await w.pushText(RawType.Sentinel, "");
    await w.flush();
  } finally {
    conn.close();
  }
}

async function acceptLoop(l: Deno.Listener, serve: (c: Deno.Conn) => Promise<void>) {
  try {
    for await (const c of l) serve(c).catch(() => {});
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
await nc.drain().catch(() => nc.close());
await runtime.shutdown();
await Promise.allSettled(serving);
Deno.exit(0);
