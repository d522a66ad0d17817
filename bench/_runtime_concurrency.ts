// The runtime bench's concurrency scenario: requests per second with many in flight, through
// the runtime next to raw NATS request-reply.

import { type BenchParams, type Fixture, hop, log, withTimeout } from "./_runtime_fixture.ts";
import type { ConcurrentRow } from "./_runtime_report.ts";
import { measureConcurrent } from "./_stats.ts";

/**
 * Measures each concurrent case after a short warm-up.
 *
 * @param f the fixture
 * @param params requests in flight, requests and time per case
 * @returns one row per case (requests/s)
 */
export async function measureConcurrency(
  f: Fixture,
  params: BenchParams,
): Promise<ConcurrentRow[]> {
  const { worker: w, nc, pingBody, pingClient } = f;
  log(
    `concurrency: ${params.concurrency} in flight, up to ${params.concurrentRequests} requests per case`,
  );
  const concurrentCases = [
    {
      key: "nats",
      label: "raw NATS req-reply (noAsyncTraces)",
      fn: async () => void (await nc.request(w.rawPingSubject, pingBody, { timeout: 10_000 })),
    },
    {
      key: "nats_defaults",
      label: "raw NATS req-reply, nats.js defaults",
      fn: async () =>
        void (await f.ncDefaults.request(w.rawPingSubject, pingBody, { timeout: 10_000 })),
    },
    {
      key: "dynamo",
      label: "dynamo hop, NATS plane, worker process",
      fn: () => withTimeout(hop(pingClient), 20_000, "concurrent dynamo hop"),
    },
    {
      key: "dynamo_tcp",
      label: "dynamo hop, TCP plane, worker process",
      fn: () => withTimeout(hop(f.tcpPing), 20_000, "concurrent dynamo TCP hop"),
    },
  ];
  const concurrent: ConcurrentRow[] = [];
  for (const c of concurrentCases) {
    await measureConcurrent(
      c.fn,
      params.concurrency,
      params.concurrency * 4,
      params.concurrentMaxMs,
    ); // warm-up
    const r = await measureConcurrent(
      c.fn,
      params.concurrency,
      params.concurrentRequests,
      params.concurrentMaxMs,
    );
    concurrent.push({ key: c.key, label: c.label, ...r });
  }
  return concurrent;
}
