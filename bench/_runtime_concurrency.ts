// The runtime bench's concurrency scenario: requests per second with many in flight, through
// the runtime next to raw NATS request-reply.

import { type BenchParams, type Fixture, hop, log } from "./_runtime_fixture.ts";
import type { ConcurrentRow } from "./_runtime_report.ts";
import { measureConcurrent, withTimeout } from "./_stats.ts";

/**
 * Measures each concurrent case after a short warm-up, in rounds that take the cases in turn.
 *
 * @param f the fixture
 * @param params requests in flight, requests and time per case, rounds
 * @returns one row per case: its median round (requests/s), and every round's figure
 */
export async function measureConcurrency(
  f: Fixture,
  params: BenchParams,
): Promise<ConcurrentRow[]> {
  const { worker: w, nc, pingBody, pingClient } = f;
  log(
    `concurrency: ${params.concurrency} in flight, up to ${params.concurrentRequests} requests per case, ${params.concurrentRounds} rounds`,
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
      fn: () => hop(pingClient),
    },
    {
      key: "dynamo_tcp",
      label: "dynamo hop, TCP plane, worker process",
      fn: () => hop(f.tcpPing),
    },
  ];
  // One deadline per round, not a timer per request: the raw cases arm none besides nats.js's
  // own, and the planes already bound each wait (acknowledgement, silence) themselves.
  const measure = (c: (typeof concurrentCases)[number], requests: number) =>
    withTimeout(
      measureConcurrent(c.fn, params.concurrency, requests, params.concurrentMaxMs),
      params.concurrentMaxMs + 20_000,
      `${c.label}, ${params.concurrency} in flight`,
    );
  // Rounds interleave the cases, and each case's figure is its median round: one burst of
  // other load on this shared machine moves one round of one case, not the ratio.
  for (const c of concurrentCases) await measure(c, params.concurrency * 4); // warm-up
  const rounds = concurrentCases.map(() => [] as Awaited<ReturnType<typeof measureConcurrent>>[]);
  for (let round = 0; round < params.concurrentRounds; round++) {
    for (const [i, c] of concurrentCases.entries()) {
      rounds[i]!.push(await measure(c, params.concurrentRequests));
    }
  }
  return concurrentCases.map((c, i) => {
    const runs = rounds[i]!.sort((a, b) => a.perSecond - b.perSecond);
    const mid = runs[Math.floor(runs.length / 2)]!;
    return {
      key: c.key,
      label: c.label,
      ...mid,
      rounds: runs.map((r) => r.perSecond),
    };
  });
}
