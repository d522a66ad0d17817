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
// The scenarios live in bench/_runtime_{latency,streaming,concurrency}.ts, their setup in
// bench/_runtime_fixture.ts and the printed report in bench/_runtime_report.ts.

import { installServersIfMissing, startServers } from "../tests/_helpers/servers.ts";
import { measureConcurrency } from "./_runtime_concurrency.ts";
import { type BenchParams, type Cleanups, log, setUpFixture } from "./_runtime_fixture.ts";
import { measureLatency } from "./_runtime_latency.ts";
import {
  printReport,
  TARGET_ADDED_MS,
  TARGET_ITEMS_PER_S,
  TARGET_NATS_CONCURRENT_X,
  TARGET_TCP_ADDED_MS,
  TARGET_TCP_CONCURRENT_X,
  TARGET_TCP_ITEMS_PER_S,
} from "./_runtime_report.ts";
import { measureStreaming } from "./_runtime_streaming.ts";
import { checkFlags, flag, withTimeout } from "./_stats.ts";

checkFlags(
  "deno task bench:runtime",
  "The runtime's request planes: latency, streaming and concurrency against raw baselines.",
  {
    "--iterations N": "timed requests per latency case (default 2500; 300 with --quick)",
    "--items N": "items per stream (default 200000; 20000 with --quick)",
    "--json PATH": "write the results there",
    "--quick": "a short run",
  },
);

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
const CONCURRENT_ROUNDS = quick ? 1 : 5;
if (!(ITERATIONS > 0 && ITEMS > 0)) throw new Error("--iterations and --items must be > 0");
const params: BenchParams = {
  quick,
  iterations: ITERATIONS,
  items: ITEMS,
  warmup: WARMUP,
  rounds: ROUNDS,
  streamRounds: STREAM_ROUNDS,
  concurrency: CONCURRENCY,
  concurrentRequests: CONCURRENT_REQUESTS,
  concurrentMaxMs: CONCURRENT_MAX_MS,
  concurrentRounds: CONCURRENT_ROUNDS,
};

// --- main -----------------------------------------------------------------------------------
async function main(): Promise<number> {
  const started = performance.now();
  await installServersIfMissing(log);
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

async function run(etcdUrl: string, natsUrl: string, cleanups: Cleanups): Promise<number> {
  const f = await setUpFixture(etcdUrl, natsUrl, cleanups);
  const { latency, breakdown } = await measureLatency(f, params);
  const lat = (k: string) => latency.find((r) => r.key === k)!.summary;
  const streaming = await measureStreaming(f, params);
  const st = (k: string) => streaming.find((r) => r.key === k)!;
  const concurrent = await measureConcurrency(f, params);

  // --- report -------------------------------------------------------------------------------
  const addedP50 = lat("dynamo").p50 - lat("nats").p50;
  const dynStream = st("dynamo").median;
  const conc = (k: string) => concurrent.find((c) => c.key === k)!.perSecond;
  const tcpAdded = lat("dynamo_tcp").p50 - lat("tcp").p50;
  const tcpConcX = conc("dynamo_tcp") / conc("nats");
  const natsConcX = conc("dynamo") / conc("nats");
  const tcpStream = st("dynamo_tcp").median;
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
      iterations: params.iterations,
      warmup: params.warmup,
      rounds: params.rounds,
      items: params.items,
      streamRuns: params.streamRounds,
      concurrency: params.concurrency,
    },
    latencyMs: Object.fromEntries(latency.map((r) => [r.key, { label: r.label, ...r.summary }])),
    breakdownMs: {
      workerClockOffsetMs: f.clock.offset,
      offsetBoundMs: f.clock.bound,
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
      tcpPlaneAddedOverRawTcpP50Ms: tcpAdded,
      tcpPlaneOverNatsPlaneP50: lat("dynamo_tcp").p50 / lat("dynamo").p50,
      concurrentTcpOverRawNats: tcpConcX,
      concurrentNatsPlaneOverRawNats: natsConcX,
      streamTcpPlaneItemsPerSecond: tcpStream,
      streamTcpPlaneOverRawTcpJson: tcpStream / st("tcp_json").median,
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
      tcpConcurrentAtLeast1xNats: tcpConcX >= TARGET_TCP_CONCURRENT_X,
      natsConcurrentAtLeast0_6xNats: natsConcX >= TARGET_NATS_CONCURRENT_X,
      tcpAddedAtMost0_1msOverRawTcp: tcpAdded <= TARGET_TCP_ADDED_MS,
      tcpStreamAtLeast1MItemsPerSecond: tcpStream >= TARGET_TCP_ITEMS_PER_S,
    },
  };
  printReport(result, latency, breakdown, streaming, concurrent);
  if (jsonPath) {
    await Deno.writeTextFile(jsonPath, JSON.stringify(result, null, 2) + "\n");
    log(`wrote ${jsonPath}`);
  }
  return 0;
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
