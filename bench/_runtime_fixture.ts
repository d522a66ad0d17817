// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The runtime bench's fixture: the worker process, the caller's runtimes and clients of it
// (etcd + NATS, same process, embedded), and the raw baselines' connections and listeners,
// all set up once and torn down by the cleanups the caller runs.

import { connect as natsConnect, type NatsConnection } from "nats";
import { DistributedRuntime } from "../mod.ts";
import type { Client } from "../runtime/client.ts";
import { NatsRequestPlane } from "../runtime/transport/mod.ts";
import { clockNow, RawFrameReader, rawJsonFrame, RawType, writeAll } from "./_raw.ts";
import type { WorkerArgs, WorkerReady } from "./_runtime_worker.ts";
import { ms, withTimeout } from "./_stats.ts";

/** What the command line sets. */
export interface BenchParams {
  quick: boolean;
  iterations: number;
  items: number;
  warmup: number;
  rounds: number;
  streamRounds: number;
  concurrency: number;
  concurrentRequests: number;
  concurrentMaxMs: number;
  /** Rounds of the concurrency cases, taken in turn (each case's median round is reported). */
  concurrentRounds: number;
}

/** A cleanup step; the bench runs them last in, first out. */
export type Cleanups = Array<() => Promise<unknown>>;

export const encoder = new TextEncoder();
export const decoder = new TextDecoder();
export const log = (msg: string) => console.error(`[bench] ${msg}`);

/** Reads a stream to its end. */
export async function drain(stream: AsyncIterable<unknown>): Promise<number> {
  let n = 0;
  for await (const _ of stream) n++;
  return n;
}

/** One request that answers with one item. */
export async function hop(client: { generate(req: unknown): Promise<AsyncIterable<unknown>> }) {
  const n = await drain(await client.generate({ p: 1 }));
  if (n !== 1) throw new Error(`expected 1 item, got ${n}`);
}

interface WorkerProcess {
  ready: WorkerReady;
  stop(): Promise<void>;
}

async function startWorker(args: WorkerArgs): Promise<WorkerProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      // BENCH_WORKER_DENO_FLAGS: extra flags for the worker (e.g. --cpu-prof to profile it).
      ...(Deno.env.get("BENCH_WORKER_DENO_FLAGS")?.split(" ").filter((f) => f !== "") ?? []),
      new URL("./_runtime_worker.ts", import.meta.url).pathname,
      JSON.stringify(args),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  const readReady = async (): Promise<WorkerReady> => {
    for (;;) {
      const { value, done } = await lines.read();
      if (done) throw new Error("the worker process exited before it was ready");
      pending += value;
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        if (line.startsWith("READY ")) return JSON.parse(line.slice(6)) as WorkerReady;
        console.error(`[worker] ${line}`);
      }
    }
  };
  let ready: WorkerReady;
  try {
    ready = await withTimeout(readReady(), 60_000, "starting the worker process");
  } catch (err) {
    child.kill("SIGKILL");
    await child.status;
    throw err;
  }
  // Keep draining its stdout so it never blocks on a full pipe.
  const draining = (async () => {
    for (;;) {
      const { value, done } = await lines.read();
      if (done) return;
      for (const l of value.split("\n")) if (l) console.error(`[worker] ${l}`);
    }
  })().catch(() => {});
  return {
    ready,
    async stop() {
      await child.stdin.close().catch(() => {});
      try {
        await withTimeout(child.status, 15_000, "worker shutdown");
      } catch {
        child.kill("SIGKILL");
        await child.status;
      }
      await draining;
    },
  };
}

/**
 * Offset of the worker's clock from ours (worker - caller, ms), from the ping-pong with the
 * smallest round trip; `bound` is half that round trip.
 */
async function calibrateClock(
  conn: Deno.Conn,
  reader: RawFrameReader,
): Promise<{ offset: number; bound: number }> {
  const ask = rawJsonFrame(RawType.Clock, null);
  let best = { rtt: Infinity, offset: 0 };
  for (let i = 0; i < 300; i++) {
    const t0 = clockNow();
    await writeAll(conn, ask);
    const f = await reader.next();
    const t1 = clockNow();
    if (f?.type !== RawType.Clock) throw new Error("clock calibration: no answer");
    const tw = JSON.parse(decoder.decode(f.payload)) as number;
    if (t1 - t0 < best.rtt) best = { rtt: t1 - t0, offset: tw - (t0 + t1) / 2 };
  }
  return { offset: best.offset, bound: best.rtt / 2 };
}

/** A raw call-home connection the worker dialed, with its frames. */
export interface CallHome {
  conn: Deno.Conn;
  reader: RawFrameReader;
}

/** Everything the scenarios drive, set up once. */
export interface Fixture {
  /** The worker process's subjects and ports. */
  worker: WorkerReady;
  pingClient: Client;
  streamClient: Client;
  /** Clients of the worker process's endpoints on the TCP request plane. */
  tcpPing: Client;
  tcpStream: Client;
  samePing: Client;
  sameStream: Client;
  embPing: Client;
  embStream: Client;
  /** Raw NATS requester, on its own connection (`noAsyncTraces`, as the runtime's). */
  nc: NatsConnection;
  /** Raw NATS requester with nats.js's default options. */
  ncDefaults: NatsConnection;
  pingBody: Uint8Array;
  /** Raw TCP ping-pong connection to the worker process. */
  tcp: Deno.Conn;
  tcpReader: RawFrameReader;
  pingFrame: Uint8Array;
  /** Port of the raw call-home listener, and how to wait for a request's connection. */
  homePort: number;
  expectCallHome(id: string): Promise<CallHome>;
  /** Port of the reused-connection listener, and how to wait for a request's sentinel. */
  reusePort: number;
  expectReuse(id: string): Promise<void>;
  /** The runtime's own NATS plane, for the instrumented hop. */
  plane: NatsRequestPlane;
  /** Offset of the worker's clock from ours, and its error bound. */
  clock: { offset: number; bound: number };
}

/**
 * Starts the worker process and connects everything the scenarios use.
 *
 * @param etcdUrl the etcd the runtimes use
 * @param natsUrl the NATS server the runtimes and raw baselines use
 * @param cleanups where each step pushes its teardown
 */
export async function setUpFixture(
  etcdUrl: string,
  natsUrl: string,
  cleanups: Cleanups,
): Promise<Fixture> {
  const ns = `bench${Date.now().toString(36)}`;
  log("starting the worker process");
  const worker = await startWorker({ etcd: etcdUrl, nats: natsUrl, namespace: ns });
  cleanups.push(() => worker.stop());
  const w = worker.ready;

  const connectReal = () =>
    DistributedRuntime.connect({
      discovery: "etcd",
      requestPlane: "nats",
      etcdEndpoints: etcdUrl,
      natsServer: natsUrl,
    });
  // Caller runtime (etcd + NATS), clients of the subprocess worker's endpoints.
  const caller = await connectReal();
  cleanups.push(() => caller.shutdown());
  const remote = caller.namespace(ns).component("worker");
  const pingClient = await remote.endpoint("ping").client();
  const streamClient = await remote.endpoint("stream").client();
  await pingClient.waitForInstances({ timeoutMs: 15_000 });
  await streamClient.waitForInstances({ timeoutMs: 15_000 });

  // Caller on the TCP request plane, clients of the worker process's TCP-plane endpoints.
  const tcpCaller = await DistributedRuntime.connect({
    discovery: "etcd",
    requestPlane: "tcp",
    etcdEndpoints: etcdUrl,
    natsServer: natsUrl,
  });
  cleanups.push(() => tcpCaller.shutdown());
  const tcpRemote = tcpCaller.namespace(ns).component("worker_tcp");
  const tcpPing = await tcpRemote.endpoint("ping").client();
  const tcpStream = await tcpRemote.endpoint("stream").client();
  await tcpPing.waitForInstances({ timeoutMs: 15_000 });
  await tcpStream.waitForInstances({ timeoutMs: 15_000 });

  // Same-process worker on etcd + NATS (its own runtime, its own connections).
  const local = await connectReal();
  cleanups.push(() => local.shutdown());
  const localComp = local.namespace(`${ns}-local`).component("worker");
  const localServing = [
    localComp.endpoint("ping").serveEndpoint(async function* (_req: unknown) {
      yield { ok: 1 };
    }),
    localComp.endpoint("stream").serveEndpoint(async function* (req: { n: number }) {
      for (let i = 0; i < req.n; i++) yield { i };
    }),
  ];
  localServing.forEach((p) => p.catch((e) => log(`same-process worker: ${e}`)));
  const sameComp = caller.namespace(`${ns}-local`).component("worker");
  const samePing = await sameComp.endpoint("ping").client();
  const sameStream = await sameComp.endpoint("stream").client();
  await samePing.waitForInstances({ timeoutMs: 15_000 });
  await sameStream.waitForInstances({ timeoutMs: 15_000 });

  // Embedded default: memory discovery + in-process request plane.
  const embedded = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
  cleanups.push(() => embedded.shutdown());
  const embComp = embedded.namespace(ns).component("worker");
  const embServing = [
    embComp.endpoint("ping").serveEndpoint(async function* (_req: unknown) {
      yield { ok: 1 };
    }),
    embComp.endpoint("stream").serveEndpoint(async function* (req: { n: number }) {
      for (let i = 0; i < req.n; i++) yield { i };
    }),
  ];
  embServing.forEach((p) => p.catch((e) => log(`embedded worker: ${e}`)));
  const embPing = await embComp.endpoint("ping").client();
  const embStream = await embComp.endpoint("stream").client();
  await embPing.waitForInstances({ timeoutMs: 5_000 });
  await embStream.waitForInstances({ timeoutMs: 5_000 });

  // Raw NATS requester, on its own connection (the responder is in the worker process). With
  // `noAsyncTraces`, as the runtime's own connection: otherwise nats.js captures a stack trace
  // per request, and the baseline would be slower than raw NATS can be (a third, measured).
  const nc = await natsConnect({
    servers: natsUrl,
    name: "bench-raw-requester",
    noAsyncTraces: true,
  });
  cleanups.push(() => nc.drain().catch(() => nc.close()));
  // The same with nats.js's defaults (a stack trace captured per request), as earlier runs of
  // this bench measured the baseline: shown beside it, not used for the ratios.
  const ncDefaults = await natsConnect({ servers: natsUrl, name: "bench-raw-requester-defaults" });
  cleanups.push(() => ncDefaults.drain().catch(() => ncDefaults.close()));
  const pingBody = encoder.encode(JSON.stringify({ p: 1 }));

  // Raw TCP ping-pong connection to the worker process.
  const tcp = await Deno.connect({ hostname: "127.0.0.1", port: w.tcpPingPort });
  tcp.setNoDelay(true);
  cleanups.push(() => Promise.resolve(tcp.close()));
  const tcpReader = new RawFrameReader(tcp);
  const pingFrame = rawJsonFrame(RawType.Data, { p: 1 });

  // Raw call-home: our listener; the worker dials it after acking a NATS request.
  const homeListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const homePort = (homeListener.addr as Deno.NetAddr).port;
  const homeWaiting = new Map<string, (r: { conn: Deno.Conn; reader: RawFrameReader }) => void>();
  const homeAccepting = (async () => {
    try {
      for await (const conn of homeListener) {
        conn.setNoDelay(true);
        const reader = new RawFrameReader(conn);
        reader.next().then((f) => {
          const id = f && f.type === RawType.Handshake
            ? JSON.parse(decoder.decode(f.payload)) as string
            : "";
          const deliver = homeWaiting.get(id);
          if (deliver) (homeWaiting.delete(id), deliver({ conn, reader }));
          else conn.close();
        }, () => conn.close());
      }
    } catch {
      // listener closed
    }
  })();
  cleanups.push(async () => {
    homeListener.close();
    await homeAccepting;
  });
  const expectCallHome = (id: string) => new Promise<CallHome>((r) => homeWaiting.set(id, r));

  // Raw call-home over one reused connection: the worker dials once, then writes each
  // request's frames (handshake naming the request, prologue, item, sentinel) on it.
  const reuseListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const reusePort = (reuseListener.addr as Deno.NetAddr).port;
  const reuseWaiting = new Map<string, () => void>();
  const reuseAccepting = (async () => {
    try {
      for await (const conn of reuseListener) {
        conn.setNoDelay(true);
        (async () => {
          const reader = new RawFrameReader(conn);
          let current = "";
          for (;;) {
            const f = await reader.next();
            if (f === null) return;
            if (f.type === RawType.Handshake) current = decoder.decode(f.payload);
            else if (f.type === RawType.Sentinel) {
              reuseWaiting.get(current)?.();
              reuseWaiting.delete(current);
            }
          }
        })().catch(() => {}).finally(() => conn.close());
      }
    } catch {
      // listener closed
    }
  })();
  cleanups.push(async () => {
    reuseListener.close();
    await reuseAccepting;
  });
  const expectReuse = (id: string) => new Promise<void>((r) => reuseWaiting.set(id, r));

  // Instrumented hop: the runtime's own NATS plane and TCP listener, driven step by step,
  // against the worker's traced endpoint (the runtime's decode + dial + serveRequest, which
  // reports its own clock), timing each phase. Worker times are mapped onto our clock with
  // an offset calibrated on the raw TCP ping-pong (error bound: half its round trip).
  const plane = await NatsRequestPlane.connect({ servers: natsUrl, name: "bench-breakdown" });
  cleanups.push(() => plane.close());
  const clock = await calibrateClock(tcp, tcpReader);
  log(`worker clock offset ${ms(clock.offset)} ms (+/- ${ms(clock.bound)} ms)`);
  return {
    worker: w,
    pingClient,
    streamClient,
    tcpPing,
    tcpStream,
    samePing,
    sameStream,
    embPing,
    embStream,
    nc,
    ncDefaults,
    pingBody,
    tcp,
    tcpReader,
    pingFrame,
    homePort,
    expectCallHome,
    reusePort,
    expectReuse,
    plane,
    clock,
  };
}
