// The runtime bench's latency scenario: one request, one item, end of stream, through the
// runtime next to raw TCP, raw NATS and raw call-home baselines; and the instrumented hop
// that splits a request into phases.

import {
  encodeRequest,
  type FrameConn,
  FrameType,
  type RequestHeader,
} from "../runtime/transport/mod.ts";
import { openStream } from "../runtime/stream.ts";
import { clockNow, RawFrameReader, RawType, writeAll } from "./_raw.ts";
import {
  type BenchParams,
  decoder,
  drain,
  encoder,
  type Fixture,
  hop,
  log,
} from "./_runtime_fixture.ts";
import type { BreakdownRow, LatencyRow } from "./_runtime_report.ts";
import { type LatencyCase, measureInterleaved, summarize } from "./_stats.ts";

/**
 * Measures every latency case, interleaved, and the phases of the instrumented hop.
 *
 * @param f the fixture
 * @param params iterations, warm-up and rounds
 * @returns one row per case, and the per-phase breakdown
 */
export async function measureLatency(
  f: Fixture,
  params: BenchParams,
): Promise<{ latency: LatencyRow[]; breakdown: BreakdownRow[] }> {
  const { worker: w, nc, pingBody, tcp, tcpReader, pingFrame, plane, clock } = f;
  const { pingClient, samePing, embPing, homePort, reusePort } = f;
  let homeSeq = 0;
  let reuseSeq = 0;
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
      conn = await pending.connection;
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

  function callHomeCase(name: string, ack: "first" | "after" | "none"): LatencyCase {
    return {
      name,
      once: async () => {
        const id = `h${homeSeq++}`;
        const connected = f.expectCallHome(id);
        const body = encoder.encode(JSON.stringify({ port: homePort, id, ack }));
        // Like the runtime, the stream does not wait for the ack.
        if (ack === "none") nc.publish(w.rawCallHomeSubject, body);
        else {
          nc.request(w.rawCallHomeSubject, body, { timeout: 5000 }).catch((err) =>
            log(`raw call-home: no ack: ${err}`)
          );
        }
        const { conn, reader } = await connected;
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
        const done = f.expectReuse(id);
        const body = encoder.encode(JSON.stringify({ port: reusePort, id, ack }));
        if (ack === "none") nc.publish(w.rawReuseSubject, body);
        else {
          nc.request(w.rawReuseSubject, body, { timeout: 5000 }).catch((err) =>
            log(`raw reused call-home: no ack: ${err}`)
          );
        }
        await done;
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
    { name: "dynamo", once: () => hop(pingClient) },
    { name: "dynamo_tcp", once: () => hop(f.tcpPing) },
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
      once: async () => {
        const stream = await openStream(plane, w.rawSendSubject, "raw", { n: 1 });
        const n = await drain(stream);
        if (n !== 1) throw new Error(`expected 1 item, got ${n}`);
      },
    },
    {
      name: "traced",
      startRecording: () => (recordPhases = true),
      once: tracedOnce,
    },
    { name: "same", once: () => hop(samePing) },
    { name: "embedded", once: () => hop(embPing) },
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
    dynamo: "dynamo hop, NATS plane, worker process",
    dynamo_tcp: "dynamo hop, TCP plane, worker process",
    same: "dynamo hop, etcd+NATS, same process",
    embedded: "dynamo hop, embedded (memory+local)",
  };

  log(
    `latency: ${cases.length} cases x ${params.iterations} requests (+${params.warmup} warm-up), ${params.rounds} rounds`,
  );
  const samples = await measureInterleaved(cases, {
    warmup: params.warmup,
    iterations: params.iterations,
    rounds: params.rounds,
    maxRoundMs: params.quick ? 3_000 : 6_000,
    maxTotalMs: 75_000,
  });
  const latency: LatencyRow[] = cases.map((c) => ({
    key: c.name,
    label: labels[c.name] ?? c.name,
    summary: summarize(samples.get(c.name)!),
  }));
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
  return { latency, breakdown };
}
