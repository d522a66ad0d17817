// The runtime bench's streaming scenario: items per second one response stream carries,
// through the runtime next to raw TCP streams.

import type { Client } from "../runtime/client.ts";
import { openStream } from "../runtime/stream.ts";
import { RawFrameReader, rawJsonFrame, RawType, writeAll } from "./_raw.ts";
import { type BenchParams, decoder, type Fixture, log } from "./_runtime_fixture.ts";
import { withTimeout } from "./_stats.ts";
import { median, type StreamRow } from "./_runtime_report.ts";

/**
 * Measures every streaming case: a warm-up run each, then rounds of runs.
 *
 * @param f the fixture
 * @param params items per stream and rounds
 * @returns one row per case (items/s)
 */
export async function measureStreaming(f: Fixture, params: BenchParams): Promise<StreamRow[]> {
  const { worker: w, plane, streamClient, sameStream, embStream } = f;
  async function dynamoStream(client: Client, n: number): Promise<void> {
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
      label: "dynamo stream, NATS plane, worker process",
      run: (n) => dynamoStream(streamClient, n),
    },
    {
      key: "dynamo_tcp",
      label: "dynamo stream, TCP plane, worker process",
      run: (n) => dynamoStream(f.tcpStream, n),
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
  log(
    `streaming: ${streamCases.length} cases x ${params.streamRounds} runs of ${params.items} items`,
  );
  for (const c of streamCases) {
    await withTimeout(
      c.run(Math.max(1, Math.floor(params.items / 10))),
      60_000,
      `${c.key} warm-up`,
    );
  }
  const streamRuns = new Map<string, number[]>(streamCases.map((c) => [c.key, []]));
  const streamEnd = performance.now() + 40_000; // later rounds are skipped past this
  for (let r = 0; r < params.streamRounds && (r === 0 || performance.now() < streamEnd); r++) {
    for (const c of streamCases) {
      const t0 = performance.now();
      await withTimeout(c.run(params.items), 60_000, `${c.key} stream`);
      streamRuns.get(c.key)!.push(params.items / ((performance.now() - t0) / 1000));
    }
  }
  const streaming: StreamRow[] = streamCases.map((c) => {
    const runs = streamRuns.get(c.key)!;
    return { key: c.key, label: c.label, runs, median: median(runs), best: Math.max(...runs) };
  });
  return streaming;
}
