// deno-lint-ignore-file no-console -- a program that prints
// `deno run -A bench/replica_sync.ts`: live (processes, HTTP), two `dynamo frontend` processes
// with `--router-mode kv --router-replica-sync` sharing mocker workers on a hub, the requests of
// a synthetic trace alternating between them, against one frontend taking them all; and two
// frontends without replica sync, for contrast. Each setup gets a fresh hub and fresh workers
// (cold caches). Reports each one's prefix hit rate (cached prompt tokens the workers report) and
// p90 TTFT. Timings are the shared machine's; the hit rates are what to compare.
//
// Flags: --synthetic SPEC (default multi-tenant,seed=1), --max-requests N (default 200),
// --workers N (default 4), --speedup X (default 20: divides arrival times),
// --engine-speedup R (default 10: the mockers' speedup ratio).

import { HubServer } from "../runtime/hub/mod.ts";
import { startMockerWorkers } from "../llm/engines/mocker/worker.ts";
import { parseSyntheticSpec, synthesizeTrace } from "../cli/_bench/synthetic.ts";
import { type RequestResult, sendOne } from "../cli/_bench/replay.ts";
import { prefixCeiling, type TraceRequest } from "../cli/_bench/trace.ts";
import { summarizeMode } from "../cli/_bench/report.ts";
import { frontendUrl, stopChild } from "../tests/_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "../tests/_helpers/process.ts";
import { checkFlags, flag } from "./_stats.ts";

checkFlags(
  "deno run -A bench/replica_sync.ts",
  "Two frontends with --router-replica-sync against one, live, on mocker workers.",
  {
    "--synthetic SPEC": "the trace (default multi-tenant,seed=1)",
    "--max-requests N": "requests replayed (default 200)",
    "--workers N": "mocker workers (default 4)",
    "--speedup X": "divides the trace's arrival times (default 20)",
    "--engine-speedup R": "the mockers' speedup ratio (default 10)",
  },
);

const CLI = new URL("../cli/main.ts", import.meta.url).pathname;
const SPEC = flag("--synthetic") ?? "multi-tenant,seed=1";
const MAX = Number(flag("--max-requests") ?? 200);
const WORKERS = Number(flag("--workers") ?? 4);
const SPEEDUP = Number(flag("--speedup") ?? 20);
const ENGINE_SPEEDUP = Number(flag("--engine-speedup") ?? 10);
const TOKEN = crypto.randomUUID();

const trace = synthesizeTrace(parseSyntheticSpec(SPEC)).slice(0, MAX);

interface Setup {
  name: string;
  frontends: number;
  sync: boolean;
}

async function run(setup: Setup): Promise<{ results: RequestResult[]; seconds: number }> {
  const hub = await HubServer.start({ token: TOKEN });
  const env = { DYN_HUB: hub.address, DYN_HUB_TOKEN: TOKEN, DYN_LOG: "warn" };
  const workers = await startMockerWorkers(WORKERS, {
    connect: { discovery: "hub", requestPlane: "hub", hubAddress: hub.address, hubToken: TOKEN },
    component: "backend",
    speedupRatio: ENGINE_SPEEDUP,
    blockSize: 16,
    metricsIntervalMs: 100,
  });
  const fronts: ChildHandle[] = [];
  try {
    for (let i = 0; i < setup.frontends; i++) {
      fronts.push(spawnDeno(CLI, env, [
        "frontend",
        "--http-port",
        "0",
        "--http-host",
        "127.0.0.1",
        "--router-mode",
        "kv",
        ...(setup.sync ? ["--router-replica-sync"] : []),
      ]));
    }
    const urls = await Promise.all(fronts.map((f) => frontendUrl(f, 60_000)));
    const model = workers.workers[0]!.card.display_name;
    // Each frontend lists the model once it has seen the workers.
    for (const url of urls) await waitForModel(url, model);
    return await replay(trace, urls, model);
  } finally {
    await Promise.allSettled(fronts.map((f) => stopChild(f)));
    await workers.shutdown();
    await hub.close();
  }
}

async function waitForModel(url: string, model: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const res = await fetch(`${url}/v1/models`, { signal: AbortSignal.timeout(5_000) })
      .catch(() => undefined);
    const body = res?.ok ? await res.json() as { data: { id: string }[] } : undefined;
    if (body?.data.some((m) => m.id === model)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not list ${model} within 60 s`);
}

/** Open-loop replay, request i to frontend i mod n. */
async function replay(
  requests: readonly TraceRequest[],
  urls: string[],
  model: string,
): Promise<{ results: RequestResult[]; seconds: number }> {
  const results: RequestResult[] = new Array(requests.length);
  const t0 = requests[0]?.timestamp ?? 0;
  const started = performance.now();
  const running: Promise<void>[] = [];
  for (let i = 0; i < requests.length; i++) {
    const wait = (requests[i]!.timestamp - t0) / SPEEDUP - (performance.now() - started);
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    running.push(
      sendOne(requests[i]!, {
        baseUrl: urls[i % urls.length]!,
        model,
        requestTimeoutMs: 120_000,
      }).then((r) => void (results[i] = r)),
    );
  }
  await Promise.all(running);
  return { results, seconds: (performance.now() - started) / 1000 };
}

const ceiling = prefixCeiling(trace).tokens;
console.log(
  `${SPEC}, first ${trace.length} requests, ${WORKERS} mocker workers, speedup ${SPEEDUP}, ` +
    `engine speedup ${ENGINE_SPEEDUP}; prefix-hit ceiling ${(ceiling * 100).toFixed(1)}%`,
);
const rows: Array<[Setup, ReturnType<typeof summarizeMode>]> = [];
for (
  const setup of [
    { name: "one frontend", frontends: 1, sync: false },
    { name: "two frontends, replica sync", frontends: 2, sync: true },
    { name: "two frontends, no sync", frontends: 2, sync: false },
    // Again at the end: the first setup also pays the machine's warm-up.
    { name: "one frontend, again", frontends: 1, sync: false },
  ]
) {
  const r = await run(setup);
  const s = summarizeMode(r.results, r.seconds);
  rows.push([setup, s]);
  console.log(
    `${setup.name}: hit ${(s.prefix_hit_rate * 100).toFixed(1)}% (${
      (s.prefix_hit_rate / ceiling * 100).toFixed(0)
    }% of the ceiling), p90 TTFT ${s.ttft_ms.p90.toFixed(0)} ms, failed ${s.failed}`,
  );
}
const one = Math.max(rows[0]![1].prefix_hit_rate, rows[3]![1].prefix_hit_rate);
for (const [setup, s] of rows.slice(1, 3)) {
  console.log(
    `${setup.name}: ${(s.prefix_hit_rate / one * 100).toFixed(0)}% of one frontend's hit rate ` +
      "(the better of its two runs)",
  );
}
