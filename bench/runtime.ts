// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:runtime`: what one hop through the runtime costs (etcd + NATS + TCP
// call-home, worker in its own process) next to raw NATS request-reply and raw TCP, and how
// many items per second one response stream carries next to a raw TCP stream. All figures
// come from one run, against baselines measured in the same run on loopback.
//
// Flags: --json PATH (write results as JSON), --quick (fewer iterations, for a smoke run),
// --iterations N (timed requests per latency case), --items N (items per stream).
//
// Besides the public API it drives runtime internals (openStream, serveRequest, the NATS
// plane) step by step, to split a hop into phases; bench/_runtime_worker.ts is the worker.

import { connect as natsConnect } from "nats";
import { DistributedRuntime } from "../mod.ts";
import { openStream } from "../runtime/stream.ts";
import {
  encodeRequest,
  type FrameConn,
  FrameType,
  NatsRequestPlane,
  type RequestHeader,
} from "../runtime/transport/mod.ts";
import { startServers } from "../tests/_helpers/servers.ts";
import { clockNow, RawFrameReader, rawJsonFrame, RawType, writeAll } from "./_raw.ts";
import type { WorkerArgs, WorkerReady } from "./_runtime_worker.ts";
import {
  flag,
  type LatencyCase,
  measureConcurrent,
  measureInterleaved,
  ms,
  rate,
  summarize,
  type Summary,
} from "./_stats.ts";

// --- flags ----------------------------------------------------------------------------------
const quick = Deno.args.includes("--quick");
const jsonPath = flag("--json");
const ITERATIONS = Number(flag("--iterations") ?? (quick ? 300 : 2500));
const ITEMS = Number(flag("--items") ?? (quick ? 20_000 : 200_000));
const WARMUP = quick ? 50 : 300;
const ROUNDS = 5;
const STREAM_ROUNDS = quick ? 1 : 3;
const CONCURRENCY = 64;
const CONCURRENT_REQUESTS = quick ? 2_000 : 20_000;
const CONCURRENT_MAX_MS = quick ? 1_500 : 4_000;
const TARGET_ADDED_MS = 0.5;
const TARGET_ITEMS_PER_S = 200_000;
if (!(ITERATIONS > 0 && ITEMS > 0)) throw new Error("--iterations and --items must be > 0");

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const log = (msg: string) => console.error(`[bench] ${msg}`);

/** Rejects with a message when `p` takes longer than `ms`: no step of the bench hangs. */
function withTimeout<T>(p: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) =>
      timer = setTimeout(() => reject(new Error(`${what} took over ${timeoutMs} ms`)), timeoutMs)
    ),
  ]).finally(() => clearTimeout(timer));
}

// --- the worker process ---------------------------------------------------------------------
interface WorkerProcess {
  ready: WorkerReady;
  stop(): Promise<void>;
}

async function startWorker(args: WorkerArgs): Promise<WorkerProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
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

// --- results --------------------------------------------------------------------------------
interface LatencyRow {
  key: string;
  label: string;
  summary: Summary;
}
interface StreamRow {
  key: string;
  label: string;
  runs: number[]; // items/s per run
  median: number;
  best: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

// --- main -----------------------------------------------------------------------------------
async function main(): Promise<number> {
  const started = performance.now();
  log("starting etcd and nats-server on loopback");
  const servers = await startServers();
  const cleanups: Array<() => Promise<unknown>> = [() => servers.stop()];
  let cleaning: Promise<void> | undefined;
  // Last in, first out; each step bounded, so a stuck one cannot keep the servers alive.
  const cleanup = () =>
    cleaning ??= (async () => {
      for (const c of cleanups.reverse()) {
        await withTimeout(c(), 15_000, "cleanup step").catch((e) => log(`cleanup: ${e}`));
      }
    })();
  const onSigint = () => {
    log("interrupted; stopping the worker and the servers");
    cleanup().finally(() => Deno.exit(130));
  };
  Deno.addSignalListener("SIGINT", onSigint);
  try {
    return await run(servers.etcd.url, servers.nats.url, cleanups);
  } finally {
    await cleanup();
    Deno.removeSignalListener("SIGINT", onSigint);
    log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
}

async function run(
  etcdUrl: string,
  natsUrl: string,
  cleanups: Array<() => Promise<unknown>>,
): Promise<number> {
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

  // Raw NATS requester, on its own connection (the responder is in the worker process).
  const nc = await natsConnect({ servers: natsUrl, name: "bench-raw-requester" });
  cleanups.push(() => nc.drain().catch(() => nc.close()));
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
  let homeSeq = 0;

  // Raw call-home over one reused connection: the worker dials once, then writes each
  // request's frames (handshake naming the request, prologue, item, sentinel) on it.
  const reuseListener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const reusePort = (reuseListener.addr as Deno.NetAddr).port;
  const reuseWaiting = new Map<string, () => void>();
  let reuseSeq = 0;
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

  // Instrumented hop: the runtime's own NATS plane and TCP listener, driven step by step,
  // against the worker's traced endpoint (the runtime's decode + dial + serveRequest, which
  // reports its own clock), timing each phase. Worker times are mapped onto our clock with
  // an offset calibrated on the raw TCP ping-pong (error bound: half its round trip).
  const plane = await NatsRequestPlane.connect({ servers: natsUrl, name: "bench-breakdown" });
  cleanups.push(() => plane.close());
  const clock = await calibrateClock(tcp, tcpReader);
  log(`worker clock offset ${ms(clock.offset)} ms (+/- ${ms(clock.bound)} ms)`);
  const phaseNames = [
    "sent",
    "recv",
    "decoded",
    "dialed",
    "handler",
    "conn",
    "prologue",
    "item",
    "end",
    "ack",
  ] as const;
  type Phase = typeof phaseNames[number];
  const phaseSamples = Object.fromEntries(phaseNames.map((k) => [k, [] as number[]])) as Record<
    Phase,
    number[]
  >;
  let recordPhases = false;
  const natsOneWay: number[] = [];
  let recordNats = false;
  async function tracedOnce(): Promise<void> {
    const t0 = clockNow();
    const pending = plane.expectStream(crypto.randomUUID());
    const header: RequestHeader = {
      id: crypto.randomUUID(),
      request_type: "single_in",
      response_type: "many_out",
      connection_info: pending.connectionInfo,
    };
    // Like openStream, the ack is not waited for: it is recorded whenever it comes.
    const record = recordPhases;
    plane.request(w.tracedSubject, encodeRequest(header, { p: 1 }), { timeoutMs: 5000 }).then(
      () => void (record && phaseSamples.ack.push(clockNow() - t0)),
      (err) => log(`traced hop: no ack: ${err}`),
    );
    const tSent = clockNow();
    let conn: FrameConn | undefined;
    try {
      conn = await withTimeout(pending.connection, 10_000, "call-home connection");
      const tConn = clockNow();
      const f1 = await conn.receive();
      const tPro = clockNow();
      const f2 = await conn.receive();
      const tItem = clockNow();
      const f3 = await conn.receive();
      const tEnd = clockNow();
      if (
        f1?.type !== FrameType.Prologue || f2?.type !== FrameType.Data ||
        f3?.type !== FrameType.Sentinel
      ) throw new Error("instrumented hop: unexpected frames");
      if (!recordPhases) return;
      const wt = JSON.parse(decoder.decode(f2.payload)) as Record<string, number>;
      const at = (k: string) => wt[k]! - clock.offset - t0;
      const p = phaseSamples;
      p.sent.push(tSent - t0);
      p.recv.push(at("tRecv"));
      p.decoded.push(at("tDecoded"));
      p.dialed.push(at("tDialed"));
      p.handler.push(at("tHandler"));
      p.conn.push(tConn - t0);
      p.prologue.push(tPro - t0);
      p.item.push(tItem - t0);
      p.end.push(tEnd - t0);
    } catch (err) {
      pending.cancel();
      throw err;
    } finally {
      conn?.close();
    }
  }

  async function drain(stream: AsyncIterable<unknown>): Promise<number> {
    let n = 0;
    for await (const _ of stream) n++;
    return n;
  }
  async function hop(client: { generate(req: unknown): Promise<AsyncIterable<unknown>> }) {
    const n = await drain(await client.generate({ p: 1 }));
    if (n !== 1) throw new Error(`expected 1 item, got ${n}`);
  }

  function callHomeCase(name: string, ack: "first" | "after" | "none"): LatencyCase {
    return {
      name,
      once: async () => {
        const id = `h${homeSeq++}`;
        const connected = new Promise<{ conn: Deno.Conn; reader: RawFrameReader }>((r) =>
          homeWaiting.set(id, r)
        );
        const body = encoder.encode(JSON.stringify({ port: homePort, id, ack }));
        // Like the runtime, the stream does not wait for the ack.
        if (ack === "none") nc.publish(w.rawCallHomeSubject, body);
        else {
          nc.request(w.rawCallHomeSubject, body, { timeout: 5000 }).catch((err) =>
            log(`raw call-home: no ack: ${err}`)
          );
        }
        const { conn, reader } = await withTimeout(connected, 10_000, "raw call-home");
        try {
          for (;;) {
            const f = await reader.next();
            if (f === null) throw new Error("raw call-home: closed before the sentinel");
            if (f.type === RawType.Sentinel) break;
          }
        } finally {
          conn.close();
        }
      },
    };
  }

  function reuseCase(name: string, ack: "first" | "none"): LatencyCase {
    return {
      name,
      once: async () => {
        const id = `r${reuseSeq++}`;
        const done = new Promise<void>((r) => reuseWaiting.set(id, r));
        const body = encoder.encode(JSON.stringify({ port: reusePort, id, ack }));
        if (ack === "none") nc.publish(w.rawReuseSubject, body);
        else {
          nc.request(w.rawReuseSubject, body, { timeout: 5000 }).catch((err) =>
            log(`raw reused call-home: no ack: ${err}`)
          );
        }
        await withTimeout(done, 10_000, "raw reused call-home");
      },
    };
  }

  const cases: LatencyCase[] = [
    {
      name: "tcp",
      once: async () => {
        await writeAll(tcp, pingFrame);
        const f = await tcpReader.next();
        if (f?.type !== RawType.Data) throw new Error("raw TCP ping-pong: no pong");
      },
    },
    {
      name: "nats",
      startRecording: () => (recordNats = true),
      once: async () => {
        const t0 = clockNow();
        const reply = await nc.request(w.rawPingSubject, pingBody, { timeout: 5000 });
        if (recordNats) natsOneWay.push(Number(decoder.decode(reply.data)) - clock.offset - t0);
      },
    },
    { name: "dynamo", once: () => withTimeout(hop(pingClient), 10_000, "dynamo hop") },
    callHomeCase("callhome", "first"),
    callHomeCase("callhome_after", "after"),
    callHomeCase("callhome_noack", "none"),
    reuseCase("reuse", "first"),
    reuseCase("reuse_noack", "none"),
    {
      name: "tcpconnect",
      once: async () => {
        const c = await Deno.connect({ hostname: "127.0.0.1", port: w.tcpPingPort });
        try {
          c.setNoDelay(true);
          await writeAll(c, pingFrame);
          if ((await new RawFrameReader(c).next())?.type !== RawType.Data) {
            throw new Error("raw TCP connect: no pong");
          }
        } finally {
          c.close();
        }
      },
    },
    {
      name: "rawworker",
      once: () =>
        withTimeout(
          (async () => {
            const stream = await openStream(plane, w.rawSendSubject, "raw", { n: 1 });
            const n = await drain(stream);
            if (n !== 1) throw new Error(`expected 1 item, got ${n}`);
          })(),
          10_000,
          "raw worker hop",
        ),
    },
    {
      name: "traced",
      startRecording: () => (recordPhases = true),
      once: () => withTimeout(tracedOnce(), 10_000, "traced hop"),
    },
    { name: "same", once: () => withTimeout(hop(samePing), 10_000, "same-process hop") },
    { name: "embedded", once: () => withTimeout(hop(embPing), 10_000, "embedded hop") },
  ];
  const labels: Record<string, string> = {
    tcp: "raw TCP ping-pong (Deno, 1 msg each way)",
    nats: "raw NATS req-reply (nats.js, 2 conns)",
    callhome: "raw call-home (NATS ack, then TCP dial)",
    callhome_after: "raw call-home, ack after the dial started",
    callhome_noack: "raw call-home, no ack (NATS publish)",
    reuse: "raw call-home on a reused TCP connection",
    reuse_noack: "raw call-home, reused connection, no ack",
    tcpconnect: "raw TCP connect + ping-pong + close",
    rawworker: "runtime caller (openStream) + raw worker",
    traced: "runtime plane + serveRequest, step by step",
    dynamo: "dynamo hop, etcd+NATS, worker process",
    same: "dynamo hop, etcd+NATS, same process",
    embedded: "dynamo hop, embedded (memory+local)",
  };

  log(
    `latency: ${cases.length} cases x ${ITERATIONS} requests (+${WARMUP} warm-up), ${ROUNDS} rounds`,
  );
  const samples = await measureInterleaved(cases, {
    warmup: WARMUP,
    iterations: ITERATIONS,
    rounds: ROUNDS,
    maxRoundMs: quick ? 3_000 : 6_000,
    maxTotalMs: 75_000,
  });
  const latency: LatencyRow[] = cases.map((c) => ({
    key: c.name,
    label: labels[c.name] ?? c.name,
    summary: summarize(samples.get(c.name)!),
  }));
  const lat = (k: string) => latency.find((r) => r.key === k)!.summary;
  // Per-request intervals between consecutive phases (each summarized over requests).
  const steps: Array<[string, Phase | null, Phase]> = [
    ["caller: build request, hand it to nats.js (sync)", null, "sent"],
    ["NATS one-way: nats.js -> worker callback", "sent", "recv"],
    ["worker: decode request", "recv", "decoded"],
    ["worker: dial caller (connect + handshake queued)", "decoded", "dialed"],
    ["worker: serveRequest -> handler runs", "dialed", "handler"],
    ["handler -> caller holds the connection", "handler", "conn"],
    ["caller: connection -> prologue", "conn", "prologue"],
    ["caller: prologue -> first item", "prologue", "item"],
    ["caller: first item -> sentinel", "item", "end"],
    ["total: send -> sentinel", null, "end"],
    ["(NATS ack back at caller, off the critical path)", null, "ack"],
  ];
  const breakdown = steps.map(([label, from, to]) => {
    const b = phaseSamples[to];
    const a = from ? phaseSamples[from] : undefined;
    return { label, from: from ?? "send", to, ...summarize(b.map((x, i) => x - (a ? a[i]! : 0))) };
  });
  breakdown.push({
    label: "(reference: raw NATS one-way, nats.js)",
    from: "send",
    to: "recv",
    ...summarize(natsOneWay),
  });

  // --- streaming ----------------------------------------------------------------------------
  async function dynamoStream(client: typeof streamClient, n: number): Promise<void> {
    let count = 0;
    let last = -1;
    for await (const item of await client.generate<{ i: number }>({ n })) {
      last = item.i;
      count++;
    }
    if (count !== n || last !== n - 1) throw new Error(`stream: got ${count} items, last ${last}`);
  }
  async function rawStream(n: number, mode: "bare" | "json" | "serve"): Promise<void> {
    const json = mode !== "bare";
    const c = await Deno.connect({ hostname: "127.0.0.1", port: w.tcpStreamPort });
    try {
      c.setNoDelay(true);
      await writeAll(c, rawJsonFrame(RawType.Request, { n, mode }));
      const r = new RawFrameReader(c);
      let count = 0;
      let last = -1;
      for (;;) {
        const f = await r.next();
        if (f === null) throw new Error("raw stream closed before its sentinel");
        if (f.type === RawType.Sentinel) break;
        if (f.type !== RawType.Data) continue;
        if (json) last = (JSON.parse(decoder.decode(f.payload)) as { i: number }).i;
        count++;
      }
      if (count !== n || (json && last !== n - 1)) {
        throw new Error(`raw stream: got ${count} items, last ${last}`);
      }
    } finally {
      c.close();
    }
  }
  const streamCases: Array<{ key: string; label: string; run: (n: number) => Promise<void> }> = [
    { key: "tcp_bare", label: "raw TCP frames (no JSON)", run: (n) => rawStream(n, "bare") },
    { key: "tcp_json", label: "raw TCP frames + JSON both ends", run: (n) => rawStream(n, "json") },
    {
      key: "runtime_sender",
      label: "runtime sender (serveRequest) -> raw reader",
      run: (n) => rawStream(n, "serve"),
    },
    {
      key: "runtime_receiver",
      label: "raw sender -> runtime caller (openStream)",
      run: async (n) => {
        let count = 0;
        let last = -1;
        const stream = await openStream<{ i: number }>(plane, w.rawSendSubject, "raw", { n });
        for await (const item of stream) (last = item.i, count++);
        if (count !== n || last !== n - 1) throw new Error(`stream: ${count} items, last ${last}`);
      },
    },
    {
      key: "dynamo",
      label: "dynamo stream, NATS+TCP, worker process",
      run: (n) => dynamoStream(streamClient, n),
    },
    {
      key: "same",
      label: "dynamo stream, NATS+TCP, same process",
      run: (n) => dynamoStream(sameStream, n),
    },
    {
      key: "embedded",
      label: "dynamo stream, embedded (memory+local)",
      run: (n) => dynamoStream(embStream, n),
    },
  ];
  log(`streaming: ${streamCases.length} cases x ${STREAM_ROUNDS} runs of ${ITEMS} items`);
  for (const c of streamCases) {
    await withTimeout(c.run(Math.max(1, Math.floor(ITEMS / 10))), 60_000, `${c.key} warm-up`);
  }
  const streamRuns = new Map<string, number[]>(streamCases.map((c) => [c.key, []]));
  const streamEnd = performance.now() + 40_000; // later rounds are skipped past this
  for (let r = 0; r < STREAM_ROUNDS && (r === 0 || performance.now() < streamEnd); r++) {
    for (const c of streamCases) {
      const t0 = performance.now();
      await withTimeout(c.run(ITEMS), 60_000, `${c.key} stream`);
      streamRuns.get(c.key)!.push(ITEMS / ((performance.now() - t0) / 1000));
    }
  }
  const streaming: StreamRow[] = streamCases.map((c) => {
    const runs = streamRuns.get(c.key)!;
    return { key: c.key, label: c.label, runs, median: median(runs), best: Math.max(...runs) };
  });
  const st = (k: string) => streaming.find((r) => r.key === k)!;

  // --- concurrency --------------------------------------------------------------------------
  log(`concurrency: ${CONCURRENCY} in flight, up to ${CONCURRENT_REQUESTS} requests per case`);
  const concurrentCases = [
    {
      key: "nats",
      label: "raw NATS req-reply",
      fn: async () => void (await nc.request(w.rawPingSubject, pingBody, { timeout: 10_000 })),
    },
    {
      key: "dynamo",
      label: "dynamo hop, worker process",
      fn: () => withTimeout(hop(pingClient), 20_000, "concurrent dynamo hop"),
    },
  ];
  const concurrent = [];
  for (const c of concurrentCases) {
    await measureConcurrent(c.fn, CONCURRENCY, CONCURRENCY * 4, CONCURRENT_MAX_MS); // warm-up
    const r = await measureConcurrent(c.fn, CONCURRENCY, CONCURRENT_REQUESTS, CONCURRENT_MAX_MS);
    concurrent.push({ key: c.key, label: c.label, ...r });
  }

  // --- report -------------------------------------------------------------------------------
  const addedP50 = lat("dynamo").p50 - lat("nats").p50;
  const dynStream = st("dynamo").median;
  const result = {
    date: new Date().toISOString(),
    deno: Deno.version.deno,
    machine: {
      cores: navigator.hardwareConcurrency,
      loadavg: Deno.loadavg(),
      os: `${Deno.build.os} ${Deno.osRelease()}`,
      note: "loopback only; etcd, nats-server, caller and worker share the machine",
    },
    params: {
      iterations: ITERATIONS,
      warmup: WARMUP,
      rounds: ROUNDS,
      items: ITEMS,
      streamRuns: STREAM_ROUNDS,
      concurrency: CONCURRENCY,
    },
    latencyMs: Object.fromEntries(latency.map((r) => [r.key, { label: r.label, ...r.summary }])),
    breakdownMs: {
      workerClockOffsetMs: clock.offset,
      offsetBoundMs: clock.bound,
      steps: breakdown,
    },
    ratios: {
      dynamoOverNatsP50: lat("dynamo").p50 / lat("nats").p50,
      dynamoOverTcpP50: lat("dynamo").p50 / lat("tcp").p50,
      dynamoOverCallHomeP50: lat("dynamo").p50 / lat("callhome").p50,
      addedOverNatsP50Ms: addedP50,
      addedOverNatsP99Ms: lat("dynamo").p99 - lat("nats").p99,
      streamDynamoOverRawTcpJson: dynStream / st("tcp_json").median,
      streamDynamoOverRawTcpBare: dynStream / st("tcp_bare").median,
    },
    streamingItemsPerSecond: Object.fromEntries(
      streaming.map((
        r,
      ) => [r.key, { label: r.label, runs: r.runs, median: r.median, best: r.best }]),
    ),
    concurrent: Object.fromEntries(concurrent.map((c) => [c.key, c])),
    targets: {
      addedLatencyUnder0_5msP50: addedP50 < TARGET_ADDED_MS,
      streamAtLeast200kItemsPerSecond: dynStream >= TARGET_ITEMS_PER_S,
    },
  };
  printReport(result, latency, breakdown, streaming, concurrent);
  if (jsonPath) {
    await Deno.writeTextFile(jsonPath, JSON.stringify(result, null, 2) + "\n");
    log(`wrote ${jsonPath}`);
  }
  return 0;
}

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + " ".repeat(n - s.length);
}
function lpad(s: string, n: number): string {
  return s.length >= n ? s : " ".repeat(n - s.length) + s;
}

function printReport(
  result: {
    date: string;
    deno: string;
    machine: { cores: number; loadavg: number[] };
    ratios: Record<string, number>;
    targets: Record<string, boolean>;
  },
  latency: LatencyRow[],
  breakdown: Array<Summary & { label: string }>,
  streaming: StreamRow[],
  concurrent: Array<{ label: string; ops: number; seconds: number; perSecond: number }>,
): void {
  const nats = latency.find((r) => r.key === "nats")!.summary.p50;
  const tcp = latency.find((r) => r.key === "tcp")!.summary.p50;
  const out: string[] = [];
  out.push(
    `runtime hop benchmark  ${result.date}  deno ${result.deno}  ${result.machine.cores} cores  ` +
      `load ${result.machine.loadavg.map((x) => x.toFixed(2)).join(" ")}`,
  );
  out.push("");
  out.push("latency, one request -> one item -> end of stream (ms)");
  out.push(
    `${pad("case", 48)}${lpad("n", 6)}${lpad("p50", 9)}${lpad("p90", 9)}${lpad("p99", 9)}` +
      `${lpad("mean", 9)}${lpad("/NATS", 8)}${lpad("/TCP", 8)}`,
  );
  for (const r of latency) {
    const s = r.summary;
    out.push(
      `${pad(r.label, 48)}${lpad(String(s.n), 6)}${lpad(ms(s.p50), 9)}${lpad(ms(s.p90), 9)}` +
        `${lpad(ms(s.p99), 9)}${lpad(ms(s.mean), 9)}${lpad((s.p50 / nats).toFixed(2), 8)}` +
        `${lpad((s.p50 / tcp).toFixed(2), 8)}`,
    );
  }
  const added = result.ratios.addedOverNatsP50Ms!;
  out.push(
    `added latency over raw NATS req-reply, p50: ${ms(added)} ms (p99: ${
      ms(result.ratios.addedOverNatsP99Ms!)
    } ms); target < ${TARGET_ADDED_MS} ms: ${
      result.targets.addedLatencyUnder0_5msP50 ? "MET" : "NOT MET"
    }`,
  );
  out.push("");
  out.push("where the time goes: runtime plane + serveRequest step by step, per request (ms)");
  out.push(`${pad("step", 48)}${lpad("p50", 9)}${lpad("p90", 9)}${lpad("p99", 9)}`);
  for (const st of breakdown) {
    out.push(
      `${pad(st.label, 48)}${lpad(ms(st.p50), 9)}${lpad(ms(st.p90), 9)}${lpad(ms(st.p99), 9)}`,
    );
  }
  out.push("");
  out.push(`streaming, one stream of ${ITEMS} items {i: n} (items/s)`);
  out.push(`${pad("case", 48)}${lpad("median", 12)}${lpad("best", 12)}${lpad("/raw JSON", 11)}`);
  const rawJson = streaming.find((r) => r.key === "tcp_json")!.median;
  for (const r of streaming) {
    out.push(
      `${pad(r.label, 48)}${lpad(rate(r.median), 12)}${lpad(rate(r.best), 12)}${
        lpad((r.median / rawJson).toFixed(2), 11)
      }`,
    );
  }
  out.push(
    `dynamo stream target >= ${rate(TARGET_ITEMS_PER_S)} items/s: ${
      result.targets.streamAtLeast200kItemsPerSecond ? "MET" : "NOT MET"
    }`,
  );
  out.push("");
  out.push(`concurrent, ${CONCURRENCY} requests in flight (requests/s)`);
  for (const c of concurrent) {
    out.push(
      `${pad(c.label, 48)}${lpad(rate(c.perSecond), 12)}  (${c.ops} in ${c.seconds.toFixed(2)} s)`,
    );
  }
  console.log(out.join("\n"));
}

if (import.meta.main) {
  let code = 1;
  try {
    code = await main();
  } catch (err) {
    console.error("[bench] failed:", err);
  }
  // etcd's gRPC client can keep timers alive after close; the bench is over either way.
  Deno.exit(code);
}
