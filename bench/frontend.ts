// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:frontend`: what the OpenAI frontend costs for streaming chat completions.
// The dynamo server (`dynamo run in=http out=echo`, frontend + echo engine on the embedded
// runtime) and a bare `Deno.serve` SSE endpoint answering with the same chunks (one per body
// pull; and a second one writing the whole answer at once, as the frontend writes the outputs
// that have already arrived together) each run in their own process; this process (plus extra client processes for the throughput load) is
// the client (`fetch`, keep-alive) for both. Measured in one run: requests/s at a fixed
// concurrency, and time to first content chunk at concurrency 1.
//
// Flags: --json PATH (write results as JSON), --quick (short run), --concurrency N (in flight
// for the throughput case, default 32), --requests N (per throughput round),
// --ttft-requests N (timed requests per server at concurrency 1), --clients N (client
// processes sharing the throughput load, default 2: one saturates a core on the bare server;
// bench/_frontend_loadgen.ts), --warmup N (requests per server before the rounds, default
// 20,000: V8 has compiled the servers' hot code by then; with 1,500 the dynamo server was
// still getting faster round after round), --rounds N (throughput rounds, default 5).

import { bareArgsFrom, chatBody, shapeOf, streamOnce, streamShape } from "./_frontend_client.ts";
import { clockTicks, cpuSeconds, machineBusySeconds } from "../cli/_bench/cpu_time.ts";
import { type LoadClient, startLoadClient, startServer } from "./_frontend_proc.ts";
import { type LoadCommand, runLoad } from "./_frontend_loadgen.ts";
import { checkFlags, flag, ms, rate, summarize, type Summary } from "./_stats.ts";

checkFlags(
  "deno task bench:frontend",
  "Our frontend's overhead against a bare HTTP server in front of the same engine.",
  {
    "--concurrency N": "requests in flight in the throughput case (default 32)",
    "--requests N": "requests per throughput round (default 10000; 1000 with --quick)",
    "--ttft-requests N":
      "timed requests per server at concurrency 1 (default 2000; 300 with --quick)",
    "--clients N": "load-generating client processes (default 2)",
    "--warmup N": "requests per server before the rounds (default 20000; 300 with --quick)",
    "--rounds N": "throughput rounds (default 5; 1 with --quick)",
    "--json PATH": "write the results there",
    "--quick": "a short run",
  },
);

// --- flags ----------------------------------------------------------------------------------
const quick = Deno.args.includes("--quick");
const jsonPath = flag("--json");
const CONCURRENCY = Number(flag("--concurrency") ?? 32);
const CLIENTS = Number(flag("--clients") ?? 2);
const REQUESTS = Number(flag("--requests") ?? (quick ? 1_000 : 10_000));
const TTFT_REQUESTS = Number(flag("--ttft-requests") ?? (quick ? 300 : 2_000));
const ROUNDS = Number(flag("--rounds") ?? (quick ? 1 : 5));
const TTFT_ROUNDS = quick ? 2 : 5;
const WARMUP = Number(flag("--warmup") ?? (quick ? 300 : 20_000));
const ROUND_MAX_MS = quick ? 3_000 : 10_000;
const TARGET_RATIO = 0.8; // issue 16
const TARGET_ADDED_TTFT_MS = 0.5; // issue 16
for (
  const [name, v] of [
    ["--concurrency", CONCURRENCY],
    ["--requests", REQUESTS],
    ["--clients", CLIENTS],
    ["--rounds", ROUNDS],
  ] as const
) {
  if (!(Number.isInteger(v) && v > 0)) throw new Error(`${name} must be a whole number > 0`);
}
if (!(Number.isInteger(WARMUP) && WARMUP >= 0)) throw new Error("--warmup must be a whole number");
if (!(Number.isInteger(TTFT_REQUESTS) && TTFT_REQUESTS > 0)) {
  throw new Error("--ttft-requests must be a whole number > 0");
}

const log = (msg: string) => console.error(`[bench] ${msg}`);

// --- results --------------------------------------------------------------------------------
interface ThroughputRun {
  requests: number;
  seconds: number;
  perSecond: number;
  /** CPU use over the run, in cores (1.0 = one core busy all the time). */
  clientCores: number;
  serverCores: number;
  /** CPU use of the whole machine over the run, in cores (other sessions' load included). */
  machineCores: number;
  /** Server CPU time (all its threads) per request, in µs. */
  serverUsPerRequest: number;
}
interface ServerResult {
  key: "bare" | "bare1" | "dynamo";
  label: string;
  runs: ThroughputRun[];
  /** Run with the median rate. */
  median: ThroughputRun;
  ttft: Summary;
  total: Summary;
}

function medianRun(runs: ThroughputRun[]): ThroughputRun {
  const sorted = [...runs].sort((a, b) => a.perSecond - b.perSecond);
  return sorted[(sorted.length - 1) >> 1]!;
}

// --- main -----------------------------------------------------------------------------------
async function main(): Promise<number> {
  const started = performance.now();
  await clockTicks();
  const servers: Array<{ stop(): Promise<void> }> = [];
  const onSigint = () => {
    log("interrupted; stopping the servers");
    Promise.all(servers.map((s) => s.stop())).finally(() => Deno.exit(130));
  };
  Deno.addSignalListener("SIGINT", onSigint);
  try {
    return await run(servers);
  } finally {
    await Promise.all(servers.map((s) => s.stop().catch((e) => log(`stop: ${e}`))));
    Deno.removeSignalListener("SIGINT", onSigint);
    log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
}

async function run(servers: Array<{ stop(): Promise<void> }>): Promise<number> {
  log("starting the dynamo server (dynamo run in=http out=echo)");
  const dynamo = await startServer(
    "dynamo",
    ["run", "-A", "cli/main.ts", "run", "in=http", "out=echo", "--http-port", "0"],
    log,
  );
  servers.push(dynamo);
  const listed = await fetch(`${dynamo.url}/v1/models`, { signal: AbortSignal.timeout(10_000) });
  const models = await listed.json() as {
    data: Array<{ id: string }>;
  };
  const model = models.data[0]?.id;
  if (!model) throw new Error("the dynamo server lists no model");
  const body = chatBody(model);
  const dynamoUrl = `${dynamo.url}/v1/chat/completions`;
  const dynamoShape = await streamShape(dynamoUrl, body);

  log("starting the bare server (Deno.serve, same SSE chunks)");
  const bare = await startServer(
    "bare",
    ["run", "-A", "bench/_frontend_bare.ts", JSON.stringify(bareArgsFrom(dynamoShape, model))],
    log,
  );
  servers.push(bare);
  const bareUrl = `${bare.url}/v1/chat/completions`;
  const bareShape = await streamShape(bareUrl, body);
  const a = JSON.stringify(dynamoShape.chunks.map(shapeOf));
  const b = JSON.stringify(bareShape.chunks.map(shapeOf));
  if (a !== b) throw new Error(`the two servers' chunks differ in shape:\n${a}\n${b}`);
  // The frontend writes the outputs that have already arrived together (with the echo engine,
  // the whole answer in one write): the same bare answer in one write is the baseline of that.
  const bare1 = await startServer(
    "bare1",
    [
      "run",
      "-A",
      "bench/_frontend_bare.ts",
      JSON.stringify({ ...bareArgsFrom(dynamoShape, model), oneWrite: true }),
    ],
    log,
  );
  servers.push(bare1);
  const bare1Url = `${bare1.url}/v1/chat/completions`;
  if (
    JSON.stringify((await streamShape(bare1Url, body)).chunks.map(shapeOf)) !==
      JSON.stringify(bareShape.chunks.map(shapeOf))
  ) {
    throw new Error("the one-write bare server's chunks differ in shape");
  }
  const chunkCount = dynamoShape.chunks.length;
  const chunkBytes = dynamoShape.chunks.map((c) => JSON.stringify(c).length);
  log(`${chunkCount} chunks per answer (${chunkBytes.join(", ")} bytes of JSON), same on both`);

  const cases = [
    { key: "bare" as const, label: "bare Deno.serve SSE", url: bareUrl, pid: bare.pid },
    {
      key: "bare1" as const,
      label: "bare, answer in one write",
      url: bare1Url,
      pid: bare1.pid,
    },
    { key: "dynamo" as const, label: "dynamo frontend + echo", url: dynamoUrl, pid: dynamo.pid },
  ];
  const once = async (url: string) => {
    const t = await streamOnce(url, body);
    if (t.chunks !== chunkCount) throw new Error(`${url}: ${t.chunks} chunks, not ${chunkCount}`);
    return t;
  };

  // Extra client processes share the in-flight requests with this one.
  const extras: LoadClient[] = [];
  for (let i = 1; i < CLIENTS; i++) {
    const client = startLoadClient(log);
    servers.push(client);
    extras.push(client);
  }
  /** Drives one load split over the client processes. */
  const drive = async (url: string, requests: number, maxMs: number) => {
    const k = extras.length + 1;
    const share = (total: number, i: number) => Math.floor(total / k) + (i < total % k ? 1 : 0);
    const command = (i: number): LoadCommand => ({
      url,
      body,
      concurrency: share(CONCURRENCY, i),
      requests: share(requests, i),
      maxMs,
      chunks: chunkCount,
    });
    const t0 = performance.now();
    const results = await Promise.all([
      runLoad(command(0)),
      ...extras.map((e, i) => e.run(command(i + 1))),
    ]);
    const seconds = (performance.now() - t0) / 1000;
    const ops = results.reduce((s, r) => s + r.ops, 0);
    return { ops, seconds, perSecond: ops / seconds, cpu: results.reduce((s, r) => s + r.cpu, 0) };
  };

  for (const c of cases) {
    log(`warm-up: ${WARMUP} requests to ${c.key}, ${CONCURRENCY} in flight`);
    if (WARMUP > 0) await drive(c.url, WARMUP, 60_000);
    for (let i = 0; i < 200; i++) await once(c.url);
  }

  // Throughput: cases take turns, round after round, so drift hits both.
  const runs = new Map(cases.map((c) => [c.key, [] as ThroughputRun[]]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const c of cases) {
      const server0 = cpuSeconds(c.pid);
      const machine0 = machineBusySeconds();
      const res = await drive(c.url, REQUESTS, ROUND_MAX_MS);
      const run: ThroughputRun = {
        requests: res.ops,
        seconds: res.seconds,
        perSecond: res.perSecond,
        clientCores: res.cpu / res.seconds,
        serverCores: (cpuSeconds(c.pid) - server0) / res.seconds,
        machineCores: (machineBusySeconds() - machine0) / res.seconds,
        serverUsPerRequest: 0,
      };
      run.serverUsPerRequest = run.serverCores * res.seconds * 1e6 / res.ops;
      runs.get(c.key)!.push(run);
      log(
        `round ${r + 1}/${ROUNDS} ${c.key}: ${rate(run.perSecond)} req/s ` +
          `(${run.requests} in ${run.seconds.toFixed(2)} s; client ${run.clientCores.toFixed(2)} ` +
          `cores, server ${run.serverCores.toFixed(2)}, machine ${run.machineCores.toFixed(2)})`,
      );
    }
  }

  // TTFT at concurrency 1, interleaved in rounds.
  const ttft = new Map(cases.map((c) => [c.key, [] as number[]]));
  const total = new Map(cases.map((c) => [c.key, [] as number[]]));
  const perRound = Math.ceil(TTFT_REQUESTS / TTFT_ROUNDS);
  log(`TTFT: ${TTFT_REQUESTS} requests per server, one at a time, ${TTFT_ROUNDS} rounds`);
  for (let r = 0; r < TTFT_ROUNDS; r++) {
    for (const c of cases) {
      const deadline = performance.now() + ROUND_MAX_MS;
      for (let i = 0; i < perRound && performance.now() < deadline; i++) {
        const t = await once(c.url);
        ttft.get(c.key)!.push(t.ttft);
        total.get(c.key)!.push(t.total);
      }
    }
  }

  const results: ServerResult[] = cases.map((c) => ({
    key: c.key,
    label: c.label,
    runs: runs.get(c.key)!,
    median: medianRun(runs.get(c.key)!),
    ttft: summarize(ttft.get(c.key)!),
    total: summarize(total.get(c.key)!),
  }));
  const [bareRes, bare1Res, dynRes] = results as [ServerResult, ServerResult, ServerResult];
  const ratio = dynRes.median.perSecond / bareRes.median.perSecond;
  const ratioOneWrite = dynRes.median.perSecond / bare1Res.median.perSecond;
  const addedTtft = dynRes.ttft.p50 - bareRes.ttft.p50;
  const throughputMet = ratio >= TARGET_RATIO;
  const ttftMet = addedTtft < TARGET_ADDED_TTFT_MS;

  printTables(results, { ratio, ratioOneWrite, addedTtft, throughputMet, ttftMet, chunkCount });
  if (jsonPath) {
    await Deno.writeTextFile(
      jsonPath,
      JSON.stringify(
        {
          date: new Date().toISOString(),
          deno: Deno.version.deno,
          quick,
          concurrency: CONCURRENCY,
          clients: CLIENTS,
          chunksPerAnswer: chunkCount,
          results,
          ratio,
          ratioOneWrite,
          addedTtftP50Ms: addedTtft,
          targets: {
            throughputRatio: { target: TARGET_RATIO, met: throughputMet },
            addedTtftP50Ms: { target: TARGET_ADDED_TTFT_MS, met: ttftMet },
          },
        },
        null,
        2,
      ) + "\n",
    );
    log(`wrote ${jsonPath}`);
  }
  return 0;
}

// --- output ---------------------------------------------------------------------------------
/** A Markdown table with right-aligned columns after the first. */
function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    `| ${
      cells.map((c, i) => i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)).join(" | ")
    } |`;
  const rule = `| ${
    widths.map((w, i) => i === 0 ? "-".repeat(w) : "-".repeat(w - 1) + ":").join(" | ")
  } |`;
  return [line(head), rule, ...rows.map(line)].join("\n");
}

function printTables(
  results: ServerResult[],
  t: {
    ratio: number;
    ratioOneWrite: number;
    addedTtft: number;
    throughputMet: boolean;
    ttftMet: boolean;
    chunkCount: number;
  },
): void {
  const bare = results[0]!;
  const out: string[] = [];
  out.push("");
  out.push(
    `streaming chat completions, ${CONCURRENCY} in flight, ${t.chunkCount} chunks + [DONE] ` +
      `per answer (median of ${ROUNDS} round${ROUNDS === 1 ? "" : "s"})`,
  );
  out.push(table(
    [
      "server",
      "req/s",
      "range",
      "/ bare",
      "server CPU us/req",
      "server cores",
      "client cores",
      "machine cores",
    ],
    results.map((r) => {
      const rates = r.runs.map((x) => x.perSecond);
      return [
        r.label,
        rate(r.median.perSecond),
        `${rate(Math.min(...rates))}-${rate(Math.max(...rates))}`,
        (r.median.perSecond / bare.median.perSecond).toFixed(2),
        r.median.serverUsPerRequest.toFixed(0),
        r.median.serverCores.toFixed(2),
        r.median.clientCores.toFixed(2),
        r.median.machineCores.toFixed(2),
      ];
    }),
  ));
  out.push(
    `(cores: CPU busy during the median round, all threads; "machine" counts every process ` +
      `on the ${navigator.hardwareConcurrency} cores, other work included)`,
  );
  out.push("");
  out.push("time to first content chunk, one request at a time (ms)");
  out.push(table(
    ["server", "TTFT p50", "p90", "p99", "e2e p50", "e2e p99"],
    results.map((r) => [
      r.label,
      ms(r.ttft.p50),
      ms(r.ttft.p90),
      ms(r.ttft.p99),
      ms(r.total.p50),
      ms(r.total.p99),
    ]),
  ));
  out.push("");
  out.push(
    `throughput dynamo / bare: ${t.ratio.toFixed(2)} (target >= ${TARGET_RATIO}: ` +
      `${t.throughputMet ? "met" : "MISSED"})`,
  );
  out.push(`throughput dynamo / bare with the answer in one write: ${t.ratioOneWrite.toFixed(2)}`);
  out.push(
    `added TTFT p50: ${ms(t.addedTtft)} ms (target < ${TARGET_ADDED_TTFT_MS} ms: ` +
      `${t.ttftMet ? "met" : "MISSED"})`,
  );
  console.log(out.join("\n"));
}

if (import.meta.main) {
  let code = 1;
  try {
    code = await main();
  } catch (err) {
    console.error("[bench] failed:", err);
  }
  Deno.exit(code);
}
