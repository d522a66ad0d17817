// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:router`: the KV router at scale. 256 mocker workers register on the
// embedded runtime (each its own runtime and instance id, publishing real KV events);
// requests warm their caches; then we time routing decisions (KvRouter.findBestMatch:
// block hashing, the indexer's radix tree, a cost per worker, the pick) against a
// round-robin pick over the same instance list, measured in the same run, and how long a
// newly started worker takes to become routable: from the start of its runtime to (a) the
// router listing it among its candidates and (b) the router's first request to it answered.
//
// Flags: --workers N (default 256), --decisions N (default 5000), --backend embedded|etcd
// (etcd: etcd + NATS started on free loopback ports, one etcd lease and NATS connection
// per worker, so discovery really crosses the servers), --json PATH, --quick.

import {
  DistributedRuntime,
  type DistributedRuntimeOptions,
} from "../runtime/distributed_runtime.ts";
import { installServersIfMissing, startServers } from "../tests/_helpers/servers.ts";
import { runMockerWorker, startMockerWorkers } from "../llm/engines/mocker/worker.ts";
import { KvRouter } from "../llm/kv_router/router.ts";
import { checkFlags, flag, seededRandom, summarize } from "./_stats.ts";

checkFlags(
  "deno task bench:router",
  "The KV router at 256 workers: decision time, and how soon a new worker is routable.",
  {
    "--workers N": "mocker workers (default 256; 32 with --quick)",
    "--decisions N": "timed routing decisions (default 5000; 1000 with --quick)",
    "--backend embedded|etcd":
      "in-process runtime, or etcd + NATS on free loopback ports (default embedded)",
    "--json PATH": "write the results there",
    "--quick": "a short run",
  },
);

const quick = Deno.args.includes("--quick");
const WORKERS = Number(flag("--workers") ?? (quick ? 32 : 256));
const DECISIONS = Number(flag("--decisions") ?? (quick ? 1000 : 5000));
const jsonPath = flag("--json");
const BACKEND = flag("--backend") ?? "embedded";
if (BACKEND !== "embedded" && BACKEND !== "etcd") {
  throw new Error(`--backend must be embedded or etcd, got ${JSON.stringify(BACKEND)}`);
}
const BLOCK = 16;
const FAMILIES = 64; // shared prefixes ("system prompts"), 1,024 tokens each
const log = (msg: string) => console.error(`[bench] ${msg}`);

// Deterministic pseudo-random numbers, so runs compare.
const rnd = seededRandom(0x2545f491);
const randTokens = (n: number) => Array.from({ length: n }, () => 256 + Math.floor(rnd() * 30000));
const families = Array.from({ length: FAMILIES }, () => randTokens(1024));
/** A prompt: a family prefix plus a unique tail (2,048 tokens in all). */
const prompt = () => [...families[Math.floor(rnd() * FAMILIES)]!, ...randTokens(1024)];

if (BACKEND === "etcd") await installServersIfMissing(log);
const servers = BACKEND === "etcd" ? await startServers() : undefined;
const connect: DistributedRuntimeOptions = servers
  ? servers.runtimeOptions as DistributedRuntimeOptions
  : {};

log(`starting ${WORKERS} mocker workers (${BACKEND})`);
let t = performance.now();
const fleet = await startMockerWorkers(WORKERS, {
  connect: servers ? connect : undefined,
  speedupRatio: 1000,
  blockSize: BLOCK,
  numGpuBlocks: 8192,
  metricsIntervalMs: 1000,
  concurrency: 32,
});
log(`${WORKERS} workers registered in ${((performance.now() - t) / 1000).toFixed(1)} s`);

const front = await DistributedRuntime.connect(servers ? connect : { embedded: fleet.embedded });
const endpoint = front.namespace("dynamo").component("mocker").endpoint("generate");
const client = await endpoint.client();
await client.waitForInstances({ count: WORKERS, timeoutMs: 30_000 });
const router = new KvRouter(endpoint, { blockSize: BLOCK, client });

// Warm the caches: requests through the router leave KV events in the indexer.
log("warming caches: 2 requests per worker");
t = performance.now();
const warm = Array.from({ length: WORKERS * 2 }, async () => {
  const stream = await router.generate({
    token_ids: prompt(),
    stop_conditions: { max_tokens: 1 },
    sampling_options: {},
    eos_token_ids: [],
  } as never);
  for await (const _ of stream) { /* drain */ }
});
await Promise.all(warm);
await new Promise((r) => setTimeout(r, 500)); // let the last events land
log(`warm-up done in ${((performance.now() - t) / 1000).toFixed(1)} s`);

// Routing decisions, interleaved with the round-robin baseline.
const kvSamples: number[] = [];
const rrSamples: number[] = [];
let next = 0;
let hits = 0;
const prompts = Array.from({ length: DECISIONS }, prompt);
for (let i = 0; i < DECISIONS; i++) {
  const p = prompts[i]!;
  let s = performance.now();
  const d = await router.findBestMatch(p);
  kvSamples.push(performance.now() - s);
  if (d.overlapBlocks > 0) hits++;
  s = performance.now();
  const ids = client.availableInstanceIds();
  void ids[next++ % ids.length];
  rrSamples.push(performance.now() - s);
}
const kv = summarize(kvSamples);
const rr = summarize(rrSamples);

// A new worker: from the start of its runtime (connect included) to the router listing it
// among its candidates (what every decision now weighs), then to the router's first request
// to it (sent there with `instances`, through the request plane) answering a token.
t = performance.now();
const late = await DistributedRuntime.connect(servers ? connect : { embedded: fleet.embedded });
const lateEndpoint = late.namespace("dynamo").component("mocker").endpoint("generate");
const started = runMockerWorker(lateEndpoint, { speedupRatio: 1000, blockSize: BLOCK });
let candidateMs = Number.NaN;
let routableMs = Number.NaN;
const deadline = performance.now() + 10_000;
while (performance.now() < deadline) {
  if (client.availableInstanceIds().includes(late.leaseId)) {
    candidateMs = performance.now() - t;
    break;
  }
  await new Promise((r) => setTimeout(r, 1));
}
if (!Number.isNaN(candidateMs)) {
  const stream = await router.generate({
    token_ids: prompt(),
    stop_conditions: { max_tokens: 1 },
    sampling_options: {},
    eos_token_ids: [],
  } as never, { instances: [late.leaseId] });
  if (stream.instanceId !== late.leaseId) throw new Error("the request went to another worker");
  for await (const _ of stream) { /* first (only) token */ }
  routableMs = performance.now() - t;
}
const registered = await started;
const registeredMs = performance.now() - t;

console.log(`\nKV router, ${WORKERS} mocker workers, prompts of 2,048 tokens (128 blocks)`);
console.log(`| decision                 | p50 ms | p90 ms | p99 ms | p99 / round-robin p99 |`);
console.log(`| ------------------------ | -----: | -----: | -----: | --------------------: |`);
console.log(
  `| KvRouter.findBestMatch   | ${kv.p50.toFixed(3)} | ${kv.p90.toFixed(3)} | ${
    kv.p99.toFixed(3)
  } | ${(kv.p99 / rr.p99).toFixed(1)}x |`,
);
console.log(
  `| round-robin (baseline)   | ${rr.p50.toFixed(3)} | ${rr.p90.toFixed(3)} | ${
    rr.p99.toFixed(3)
  } | 1.0x |`,
);
console.log(`decisions with a cached prefix somewhere: ${(hits / DECISIONS * 100).toFixed(0)}%`);
console.log(
  `new worker (${BACKEND}): a router candidate ${candidateMs.toFixed(0)} ms after its runtime ` +
    `started, its first routed request answered at ${routableMs.toFixed(0)} ms ` +
    `(its model registered at ${registeredMs.toFixed(0)} ms)`,
);
console.log(
  `routing decision p99 < 1 ms: ${kv.p99 < 1 ? "met" : "MISSED"}; new worker routable < 2 s: ${
    routableMs < 2000 ? "met" : "MISSED"
  }`,
);
if (jsonPath) {
  await Deno.writeTextFile(
    jsonPath,
    JSON.stringify(
      {
        backend: BACKEND,
        workers: WORKERS,
        kv,
        roundRobin: rr,
        candidateMs,
        routableMs,
        registeredMs,
      },
      null,
      2,
    ),
  );
}
void registered;
await router.close();
await client.close();
await front.shutdown();
await late.shutdown();
await fleet.shutdown();
await servers?.stop();
