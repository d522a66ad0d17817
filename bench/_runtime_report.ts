// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The runtime bench's results: their rows, and the report printed at the end of a run.

import { ms, rate, type Summary } from "./_stats.ts";

/** Target: added latency over raw NATS request-reply, p50, in ms. */
export const TARGET_ADDED_MS = 0.5;
/** Target: items per second one dynamo stream carries. */
export const TARGET_ITEMS_PER_S = 200_000;

/** Target (issue 16): 64 in flight on the TCP plane, at least this times raw NATS req-reply. */
export const TARGET_TCP_CONCURRENT_X = 1.0;
/** Target (issue 16): 64 in flight on the NATS plane, at least this times raw NATS req-reply. */
export const TARGET_NATS_CONCURRENT_X = 0.6;
/** Target (issue 16): a TCP-plane hop's p50 over raw TCP ping-pong, in ms. */
export const TARGET_TCP_ADDED_MS = 0.1;
/** Target (issue 16): items per second one TCP-plane stream carries. */
export const TARGET_TCP_ITEMS_PER_S = 1_000_000;

/** One latency case's summary. */
export interface LatencyRow {
  key: string;
  label: string;
  summary: Summary;
}
/** One streaming case's runs. */
export interface StreamRow {
  key: string;
  label: string;
  runs: number[]; // items/s per run
  median: number;
  best: number;
}
/** One step of the instrumented hop, summarized over requests. */
export type BreakdownRow = Summary & { label: string; from: string; to: string };
/** One concurrent case's throughput. */
export interface ConcurrentRow {
  key: string;
  label: string;
  ops: number;
  seconds: number;
  perSecond: number;
  /** Every round's requests/s, lowest first (the row's figure is the median round). */
  rounds?: number[];
}

/** Median of samples (NaN when there are none). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + " ".repeat(n - s.length);
}
function lpad(s: string, n: number): string {
  return s.length >= n ? s : " ".repeat(n - s.length) + s;
}

/** Prints the results as tables, with the targets and whether they were met. */
export function printReport(
  result: {
    date: string;
    deno: string;
    machine: { cores: number; loadavg: number[] };
    params: { items: number; concurrency: number };
    ratios: Record<string, number>;
    targets: Record<string, boolean>;
  },
  latency: LatencyRow[],
  breakdown: BreakdownRow[],
  streaming: StreamRow[],
  concurrent: ConcurrentRow[],
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
  out.push(`streaming, one stream of ${result.params.items} items {i: n} (items/s)`);
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
  const rounds = concurrent[0]?.rounds?.length ?? 1;
  out.push(
    `concurrent, ${result.params.concurrency} requests in flight (requests/s${
      rounds > 1 ? `, median of ${rounds} rounds taken in turn; range` : ""
    })`,
  );
  const rawNats = concurrent.find((c) => c.key === "nats")?.perSecond ?? NaN;
  for (const c of concurrent) {
    const range = c.rounds && c.rounds.length > 1
      ? `${rate(c.rounds[0]!)}-${rate(c.rounds.at(-1)!)}`
      : `${c.ops} in ${c.seconds.toFixed(2)} s`;
    out.push(
      `${pad(c.label, 48)}${lpad(rate(c.perSecond), 12)}${
        lpad((c.perSecond / rawNats).toFixed(2), 7)
      }x  (${range})`,
    );
  }
  out.push("");
  out.push("request-plane targets (issue 16)");
  const r = result.ratios;
  const t = result.targets;
  const met = (ok: boolean | undefined) => (ok ? "MET" : "NOT MET");
  out.push(
    `TCP plane, ${result.params.concurrency} in flight: ${
      r.concurrentTcpOverRawNats!.toFixed(2)
    }x raw NATS (target >= ${TARGET_TCP_CONCURRENT_X}x): ${met(t.tcpConcurrentAtLeast1xNats)}`,
  );
  out.push(
    `NATS plane, ${result.params.concurrency} in flight: ${
      r.concurrentNatsPlaneOverRawNats!.toFixed(2)
    }x raw NATS (target >= ${TARGET_NATS_CONCURRENT_X}x): ${met(t.natsConcurrentAtLeast0_6xNats)}`,
  );
  out.push(
    `TCP plane hop p50 over raw TCP ping-pong: ${ms(r.tcpPlaneAddedOverRawTcpP50Ms!)} ms ` +
      `(target <= ${TARGET_TCP_ADDED_MS} ms): ${met(t.tcpAddedAtMost0_1msOverRawTcp)}`,
  );
  out.push(
    `TCP plane stream: ${rate(r.streamTcpPlaneItemsPerSecond!)} items/s (target >= ${
      rate(TARGET_TCP_ITEMS_PER_S)
    }): ${met(t.tcpStreamAtLeast1MItemsPerSecond)}`,
  );
  console.log(out.join("\n"));
}
