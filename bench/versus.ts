// deno-lint-ignore-file no-console -- a program that prints
// `deno task bench:versus`: our frontend against the reference's (ai-dynamo 1.6.1), on the same
// trace and the same workers: N reference mocker workers (`python -m dynamo.mocker
// --num-workers N`, one process) on fresh etcd + NATS, then one frontend (ours: `dynamo frontend
// --reference-workers`; the reference's: `python -m dynamo.frontend`) per router mode, the
// trace replayed open-loop against it (cli/_bench/replay.ts). Per run: requests, failures, TTFT
// p50/p90, prefix hit rate (the mockers' own cached-token counts) against the trace's ceiling,
// throughput, and the frontend process's CPU per request. Ratios ours/reference per trace and mode.
// Our kv runs also log every routing decision (`--router-decision-log`), and the report says
// what the requests at or over the p90 were routed by (cli/_bench/decision_tail.ts).
// Then the long-prompt case: one completion of 20,000 fresh token ids at a time through each
// frontend in kv mode (engines sped up 1000x): TTFT and CPU per request, what a long prompt costs
// the frontend itself.
// Then the closed-loop case: each frontend as fast as it goes (clients sending short chat requests
// back to back, engines sped up 1000x), at each level of clients: requests/s and CPU per request.
//
//   deno task bench:versus [--quick] [--traces mooncake,multi-tenant] [--modes kv,round-robin]
//     [--workers 8] [--max-requests N] [--speedup X] [--engine-speedup R] [--json PATH]
//     [--no-throughput] [--throughput-concurrency 32,128] [--throughput-seconds S]
//     [--prewarm N] [--repeat N] [--no-long-prompts] [--long-prompt-tokens N]
//     [--long-prompt-requests N]
//
// --prewarm N sends each frontend N throwaway requests (2,048 tokens of their own, 30 out, 4 at a
// time) before the trace starts, so a frontend's cold start (for ours, code V8 has not compiled
// yet) stays out of the trace's figures; default 0, the frontends as started.
// --repeat N replays each trace and mode N times per frontend, the frontends taking turns (each
// goes first in every other pass), and
// compares the frontends' median p90s (each run on a fresh fleet): on a shared machine one run's
// p90 moves by more than the difference between the routers; default 1. It also gives the p90
// of all passes' requests together for each frontend, and where 90% of their ratio's values
// fall when the passes are drawn again with replacement (cli/_bench/pooled.ts).
// The reference is installed by scripts/setup_reference.sh (PyPI, cached in .dynamo/).
// VERSUS_DUMP=PREFIX writes each run's requests (TTFT, prompt and cached tokens, send time) to
// PREFIX.TRACE.MODE.FRONTEND.json, and our kv router's decision log beside it
// (PREFIX.TRACE.kv.ours.decisions.jsonl); VERSUS_DENO_FLAGS passes flags to our frontend's
// `deno run` (e.g. "--cpu-prof --cpu-prof-dir=DIR"), VERSUS_OURS_ARGS extra arguments to our
// frontend (e.g. "--router-load-bound 2").

import { clockTicks, cpuSeconds, machineBusySeconds } from "../cli/_bench/cpu_time.ts";
import { checkFlags, flag, measureConcurrent } from "./_stats.ts";
import { streamOnce } from "./_frontend_client.ts";
import { warmReplayClient } from "../cli/_bench/client_warmup.ts";
import { replayTrace, sendOne } from "../cli/_bench/replay.ts";
import { type ModeSummary, summarizeMode } from "../cli/_bench/report.ts";
import { limitTrace, loadTrace, prefixCeiling, type TraceRequest } from "../cli/_bench/trace.ts";
import { parseSyntheticSpec, splitTraceList, synthesizeTrace } from "../cli/_bench/synthetic.ts";
import { pooledRatio } from "../cli/_bench/pooled.ts";
import { attributeTail, formatTail, type TailAttribution } from "../cli/_bench/decision_tail.ts";
import { parseDecisionLog } from "../llm/kv_router/decision_log.ts";
import { builtinTestModel } from "../mod.ts";
import {
  freePort,
  installServersIfMissing,
  startEtcd,
  startNats,
} from "../tests/_helpers/servers.ts";
import { terminate } from "../tests/_helpers/process.ts";

checkFlags(
  "deno task bench:versus",
  "Our frontend against the reference's (ai-dynamo 1.6.1) over the same reference mocker workers.",
  {
    "--traces LIST": "traces, e.g. mooncake,multi-tenant,seed=3 (default mooncake,multi-tenant)",
    "--modes LIST": "router modes (default kv,round-robin)",
    "--frontends LIST": "ours, reference or both (default ours,reference)",
    "--workers N": "mocker workers (default 8)",
    "--max-requests N": "requests per trace (default 600; 150 with --quick)",
    "--speedup X": "divides the trace's arrival times (default 10)",
    "--engine-speedup R": "the mockers' speedup ratio (default: --speedup)",
    "--repeat N": "replays per trace and mode, the frontends taking turns (default 1)",
    "--prewarm N": "throwaway requests per frontend first (default 0)",
    "--no-throughput": "skip the closed-loop throughput case",
    "--throughput-concurrency LIST": "its concurrencies (default 32,128)",
    "--throughput-seconds S": "its length (default 10; 4 with --quick)",
    "--no-long-prompts": "skip the long-prompt case",
    "--long-prompt-tokens N": "its prompt length (default 20000)",
    "--long-prompt-requests N": "its requests (default 150; 40 with --quick)",
    "--json PATH": "write the results there",
    "--quick": "a short run",
  },
);

const ROOT = new URL("..", import.meta.url).pathname;
const quick = Deno.args.includes("--quick");
// `--traces mooncake,multi-tenant,seed=3`: a synthetic trace's parameters follow its name.
const TRACES = splitTraceList(flag("--traces") ?? "mooncake,multi-tenant");
const MODES = (flag("--modes") ?? "kv,round-robin").split(",").filter(Boolean);
const FRONTENDS = (flag("--frontends") ?? "ours,reference").split(",").filter(Boolean);
const WORKERS = Number(flag("--workers") ?? 8);
const MAX_REQUESTS = Number(flag("--max-requests") ?? (quick ? 150 : 600));
const SPEEDUP = Number(flag("--speedup") ?? 10);
const ENGINE_SPEEDUP = Number(flag("--engine-speedup") ?? SPEEDUP);
const jsonPath = flag("--json");
// The closed-loop throughput case: each frontend as fast as it goes, on short chat requests.
const THROUGHPUT = !Deno.args.includes("--no-throughput");
// Several levels: the reference's frontend needs more requests in flight than ours to fill up.
const THROUGHPUT_CONCURRENCY = (flag("--throughput-concurrency") ?? "32,128").split(",").map(
  Number,
);
const THROUGHPUT_SECONDS = Number(flag("--throughput-seconds") ?? (quick ? 4 : 10));
const THROUGHPUT_ENGINE_SPEEDUP = 1000;
// The long-prompt case: one completion of LONG_TOKENS fresh token ids at a time, so what is
// timed is each frontend's own work on a long prompt (reading, hashing, routing, encoding it).
const LONG = !Deno.args.includes("--no-long-prompts");
const LONG_TOKENS = Number(flag("--long-prompt-tokens") ?? 20_000);
const LONG_REQUESTS = Number(flag("--long-prompt-requests") ?? (quick ? 40 : 150));
const PREWARM = Number(flag("--prewarm") ?? 0);
const REPEAT = Number(flag("--repeat") ?? 1);
if (!(Number.isInteger(PREWARM) && PREWARM >= 0)) throw new Error("--prewarm takes a whole number");
const MODEL = "Qwen3-0.6B";
const CONTEXT = 40_960;
const LOOPBACK = {
  DYN_TCP_RPC_HOST: "127.0.0.1",
  DYN_EVENT_PLANE_HOST: "127.0.0.1",
  DYN_TCP_RESPONSE_STREAM_HOST: "127.0.0.1",
  DYN_SYSTEM_HOST: "127.0.0.1",
  DYN_HTTP_HOST: "127.0.0.1",
  DYN_LOG: "warn",
};
const log = (msg: string) => console.error(`[versus] ${msg}`);

for (
  const [name, v] of [
    ["--workers", WORKERS],
    ["--max-requests", MAX_REQUESTS],
    ["--repeat", REPEAT],
    ...THROUGHPUT_CONCURRENCY.map((c) => ["--throughput-concurrency", c] as const),
    ["--throughput-seconds", THROUGHPUT_SECONDS],
    ["--long-prompt-tokens", LONG_TOKENS],
    ["--long-prompt-requests", LONG_REQUESTS],
  ] as const
) {
  if (!(Number.isInteger(v) && v > 0)) throw new Error(`${name} must be a whole number > 0`);
}
for (const m of MODES) {
  if (m !== "kv" && m !== "round-robin" && m !== "random") {
    throw new Error(`--modes takes kv, round-robin, random; got ${m}`);
  }
}
for (const f of FRONTENDS) {
  if (f !== "ours" && f !== "reference") throw new Error(`--frontends takes ours, reference`);
}

async function python(): Promise<string> {
  const setup = await new Deno.Command("bash", {
    args: [`${ROOT}scripts/setup_reference.sh`],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!setup.success) throw new Error("scripts/setup_reference.sh could not install ai-dynamo");
  return new TextDecoder().decode(setup.stdout).trim();
}

async function traceOf(name: string): Promise<TraceRequest[]> {
  const all = name === "mooncake"
    ? await loadTrace(`${ROOT}bench/data/mooncake_conversation_trace.jsonl`)
    : synthesizeTrace(parseSyntheticSpec(name));
  // Requests that fit the model's context (40,960 tokens): ours refuses longer prompts with a
  // 400, the reference's frontend passes them to its mocker, which does not care.
  const fits = all.filter((r) => r.inputLength + r.outputLength <= CONTEXT);
  return limitTrace(fits, { maxRequests: MAX_REQUESTS });
}

interface Proc {
  pid: number;
  stop(): Promise<void>;
  tail(): string;
}

function spawn(cmd: string, args: string[], env: Record<string, string>): Proc {
  const child = new Deno.Command(cmd, {
    args,
    env,
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let tail = "";
  for (const stream of [child.stdout, child.stderr]) {
    (async () => {
      for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
        tail = (tail + chunk).slice(-3000);
      }
    })().catch(() => {});
  }
  return {
    pid: child.pid,
    tail: () => tail,
    async stop() {
      await terminate(child, 15_000);
    },
  };
}

async function until(what: string, ms: number, probe: () => Promise<boolean>, p?: Proc) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      if (await probe()) return;
    } catch { /* not yet */ }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}\n${p?.tail() ?? ""}`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

interface Run {
  trace: string;
  mode: string;
  frontend: string;
  /** Which of the `--repeat` passes (1-based). */
  pass: number;
  summary: ModeSummary;
  ceiling: number;
  requestsPerS: number;
  frontendCpuMsPerRequest: number;
  /** Our kv runs: how the requests at or over the p90 were routed (from the decision log). */
  tail?: TailAttribution;
}

/** Each run's TTFTs (ms) of the requests that succeeded, for the pooled p90 of its passes. */
const ttftsOf = new WeakMap<Run, number[]>();

/** Fresh etcd + NATS, the mocker workers, and one frontend listing the model. */
interface Fleet {
  base: string;
  front: Proc;
  stop(): Promise<void>;
}

async function startFleet(
  py: string,
  mode: string,
  frontend: string,
  engineSpeedup: number,
  oursArgs: string[] = [],
): Promise<Fleet> {
  const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
  const env = { ...LOOPBACK, ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
  const procs: Proc[] = [];
  const stop = async () => {
    for (const p of procs.reverse()) await p.stop();
    await Promise.all([etcd.stop(), nats.stop()]);
  };
  try {
    const mockers = spawn(py, [
      "-m",
      "dynamo.mocker",
      "--model-path",
      await builtinTestModel(),
      "--model-name",
      MODEL,
      "--num-workers",
      String(WORKERS),
      "--speedup-ratio",
      String(engineSpeedup),
    ], env);
    procs.push(mockers);
    const port = freePort();
    const front = frontend === "ours"
      ? spawn(Deno.execPath(), [
        "run",
        "-A",
        // e.g. VERSUS_DENO_FLAGS="--cpu-prof --cpu-prof-dir=prof" to profile our frontend.
        ...(Deno.env.get("VERSUS_DENO_FLAGS")?.split(/\s+/).filter(Boolean) ?? []),
        "cli/main.ts",
        "frontend",
        "--reference-workers",
        "--http-port",
        String(port),
        "--http-host",
        "127.0.0.1",
        "--router-mode",
        mode,
        // e.g. VERSUS_OURS_ARGS="--router-load-bound 2" to try a router setting.
        ...(Deno.env.get("VERSUS_OURS_ARGS")?.split(/\s+/).filter(Boolean) ?? []),
        ...oursArgs,
      ], env)
      : spawn(
        py,
        ["-m", "dynamo.frontend", "--http-port", String(port), "--router-mode", mode],
        env,
      );
    procs.push(front);
    const base = `http://127.0.0.1:${port}`;
    await until(`${frontend} frontend to list ${MODEL}`, 180_000, async () => {
      const list = await (await fetch(`${base}/v1/models`)).json();
      return (list.data as { id: string }[]).some((m) => m.id === MODEL);
    }, front);
    // Every worker registered before the clock starts (the mocker process starts them in turn).
    await new Promise((r) => setTimeout(r, 3000));
    return { base, front, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function one(
  py: string,
  trace: string,
  requests: TraceRequest[],
  mode: string,
  frontend: string,
  pass: number,
): Promise<Run> {
  // Our kv router logs its decisions, to tell what the slowest requests were routed by.
  const decisionLog = frontend === "ours" && mode === "kv"
    ? await Deno.makeTempFile({ prefix: "versus-decisions-", suffix: ".jsonl" })
    : undefined;
  const fleet = await startFleet(
    py,
    mode,
    frontend,
    ENGINE_SPEEDUP,
    decisionLog === undefined ? [] : ["--router-decision-log", decisionLog],
  );
  const { base, front } = fleet;
  try {
    await prewarm(base, PREWARM);
    await clockTicks();
    const cpu0 = cpuSeconds(front.pid);
    const { results, seconds } = await replayTrace(requests, {
      baseUrl: base,
      model: MODEL,
      speedup: SPEEDUP,
      requestTimeoutMs: 300_000,
      onProgress: (p) =>
        log(`${trace} ${mode} ${frontend}: ${p.done}/${p.total} (${p.failed} failed)`),
    });
    const cpu = cpuSeconds(front.pid) - cpu0;
    const dump = Deno.env.get("VERSUS_DUMP");
    if (dump) {
      const name = `${dump}.${trace}.${mode}.${frontend}${REPEAT > 1 ? `.${pass}` : ""}`;
      if (decisionLog !== undefined) await Deno.copyFile(decisionLog, `${name}.decisions.jsonl`);
      await Deno.writeTextFile(
        `${name}.json`,
        JSON.stringify(results.map((r) => ({
          ttft: r.ttftMs,
          prompt: r.promptTokens,
          cached: r.cachedTokens,
          at: r.startMs,
        }))),
      );
    }
    const summary = summarizeMode(results, seconds);
    const ttfts = results.flatMap((r) => r.ok && r.ttftMs !== undefined ? [r.ttftMs] : []);
    let tail: TailAttribution | undefined;
    if (decisionLog !== undefined) {
      // The prewarm's requests were routed first: their decisions are not the trace's.
      const decisions = parseDecisionLog(await Deno.readTextFile(decisionLog)).slice(PREWARM);
      tail = attributeTail(results, decisions);
      if (tail) log(`${trace} ${mode} ${frontend}: ${formatTail(tail)}`);
    }
    const run: Run = {
      tail,
      trace,
      mode,
      frontend,
      pass,
      summary,
      ceiling: prefixCeiling(requests).tokens,
      requestsPerS: results.length / seconds,
      frontendCpuMsPerRequest: cpu * 1000 / results.length,
    };
    ttftsOf.set(run, ttfts);
    return run;
  } finally {
    await fleet.stop();
    if (decisionLog !== undefined) await Deno.remove(decisionLog).catch(() => {});
  }
}

/** Sends `n` throwaway requests, 4 at a time, whose prompts share nothing with any trace's. */
async function prewarm(base: string, n: number): Promise<void> {
  let next = 0;
  await measureConcurrent(
    async () => {
      const i = next++;
      const r = await sendOne({
        timestamp: 0,
        inputLength: 2048,
        outputLength: 30,
        // Hash ids far above any trace's (and distinct per request): no prefix is shared.
        hashIds: Array.from({ length: 32 }, (_, j) => 9_000_000 + i * 64 + j),
        blockTokens: 64,
      }, { baseUrl: base, model: MODEL, requestTimeoutMs: 60_000 });
      if (!r.ok) throw new Error(`a prewarm request failed: ${r.error}`);
    },
    4,
    n,
    Infinity,
  );
}

interface ThroughputRun {
  frontend: string;
  /** Clients, each with one request in flight. */
  concurrency: number;
  requests: number;
  requestsPerS: number;
  /** The frontend process's CPU per request (ms), all its threads. */
  frontendCpuMsPerRequest: number;
  /** SSE data chunks per answer, [DONE] left out (the same work from both frontends). */
  chunksPerAnswer: number;
  /** Cores the frontend process kept busy, and the whole machine (mockers and client too). */
  frontendCores: number;
  machineCores: number;
}

/**
 * One frontend as fast as it goes: `concurrency` clients each sending its next
 * streaming chat request (a different short question each time, 16 tokens out) as soon as the
 * last one ended, round-robin over the workers, whose engine runs at THROUGHPUT_ENGINE_SPEEDUP
 * so the frontend is what limits. The first 2 s are a warm-up, not counted.
 */
async function throughput(
  py: string,
  frontend: string,
  concurrency: number,
): Promise<ThroughputRun> {
  const fleet = await startFleet(py, "round-robin", frontend, THROUGHPUT_ENGINE_SPEEDUP);
  try {
    const url = `${fleet.base}/v1/chat/completions`;
    let n = 0;
    let chunks = 0;
    const send = async () => {
      const body = JSON.stringify({
        model: MODEL,
        messages: [{ role: "user", content: `Question ${n++}: what is the capital of France?` }],
        max_tokens: 16,
        stream: true,
      });
      const answer = await streamOnce(url, body, 30_000);
      chunks += answer.chunks; // added after the await (`chunks += await f()` reads chunks first)
    };
    await measureConcurrent(send, concurrency, Infinity, 2_000);
    const ticks = await clockTicks();
    chunks = 0;
    const cpu0 = cpuSeconds(fleet.front.pid);
    const busy0 = machineBusySeconds();
    const res = await measureConcurrent(send, concurrency, Infinity, THROUGHPUT_SECONDS * 1000);
    const cpu = cpuSeconds(fleet.front.pid) - cpu0;
    const busy = machineBusySeconds() - busy0;
    log(
      `throughput ${frontend}, ${concurrency} in flight: ${res.perSecond.toFixed(0)} req/s ` +
        `(clock ${ticks} ticks/s)`,
    );
    return {
      frontend,
      concurrency,
      requests: res.ops,
      requestsPerS: res.perSecond,
      frontendCpuMsPerRequest: cpu * 1000 / res.ops,
      chunksPerAnswer: chunks / res.ops,
      frontendCores: cpu / res.seconds,
      machineCores: busy / res.seconds,
    };
  } finally {
    await fleet.stop();
  }
}

interface LongRun {
  frontend: string;
  requests: number;
  failed: number;
  ttftP50Ms: number;
  ttftP90Ms: number;
  /** The frontend process's CPU per request (ms), all its threads. */
  frontendCpuMsPerRequest: number;
}

/**
 * One frontend, one long prompt at a time: LONG_REQUESTS completions of LONG_TOKENS token ids
 * that share nothing (so every block is hashed, routed and sent; the workers' KV events for them
 * come back), 4 tokens out, kv mode, engines at THROUGHPUT_ENGINE_SPEEDUP so the frontend's own
 * work is most of the TTFT. The first 10 requests warm up and are not counted.
 */
async function longPrompts(py: string, frontend: string): Promise<LongRun> {
  const fleet = await startFleet(py, "kv", frontend, THROUGHPUT_ENGINE_SPEEDUP);
  try {
    let next = 0;
    const send = () => {
      const i = next++;
      const blocks = Math.ceil(LONG_TOKENS / 64);
      return sendOne({
        timestamp: 0,
        inputLength: LONG_TOKENS,
        outputLength: 4,
        // Hash ids of their own per request, far above any trace's: no prefix is shared.
        hashIds: Array.from({ length: blocks }, (_, j) => 20_000_000 + i * blocks + j),
        blockTokens: 64,
      }, { baseUrl: fleet.base, model: MODEL, requestTimeoutMs: 60_000 });
    };
    for (let i = 0; i < 10; i++) await send();
    await clockTicks();
    const cpu0 = cpuSeconds(fleet.front.pid);
    const ttfts: number[] = [];
    let failed = 0;
    for (let i = 0; i < LONG_REQUESTS; i++) {
      const r = await send();
      if (r.ok && r.ttftMs !== undefined) ttfts.push(r.ttftMs);
      else failed++;
    }
    const cpu = cpuSeconds(fleet.front.pid) - cpu0;
    const sorted = ttfts.sort((a, b) => a - b);
    const at = (q: number) =>
      sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
    log(`long prompts ${frontend}: TTFT p50 ${at(0.5).toFixed(2)} ms, ${failed} failed`);
    return {
      frontend,
      requests: LONG_REQUESTS,
      failed,
      ttftP50Ms: at(0.5),
      ttftP90Ms: at(0.9),
      frontendCpuMsPerRequest: cpu * 1000 / LONG_REQUESTS,
    };
  } finally {
    await fleet.stop();
  }
}

await installServersIfMissing(log);
const py = await python();
// The bench's own client warmed first, so that neither frontend meets it cold.
const clientWarm = await warmReplayClient();
log(
  `client warmed: ${clientWarm.requests} requests to a stub server in ${
    clientWarm.ms.toFixed(0)
  } ms (${clientWarm.failed} failed)`,
);
const runs: Run[] = [];
for (const trace of TRACES) {
  const requests = await traceOf(trace);
  log(
    `${trace}: ${requests.length} requests, prefix ceiling ${
      (prefixCeiling(requests).tokens * 100).toFixed(1)
    }%`,
  );
  for (const mode of MODES) {
    for (let pass = 1; pass <= REPEAT; pass++) {
      // The frontends take turns going first: whatever the machine carries over from one run
      // to the next (caches, the client's state) falls on each of them alike.
      const order = pass % 2 === 1 ? FRONTENDS : [...FRONTENDS].reverse();
      for (const frontend of order) {
        runs.push(await one(py, trace, requests, mode, frontend, pass));
      }
    }
  }
}
const long: LongRun[] = [];
if (LONG) { for (const frontend of FRONTENDS) long.push(await longPrompts(py, frontend)); }
const saturated: ThroughputRun[] = [];
if (THROUGHPUT) {
  for (const concurrency of THROUGHPUT_CONCURRENCY) {
    for (const frontend of FRONTENDS) saturated.push(await throughput(py, frontend, concurrency));
  }
}

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
/** The middle value (the mean of the two middle ones for an even count). */
const median = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
console.log(
  `\n${WORKERS} reference mocker workers (one process, --speedup-ratio ${ENGINE_SPEEDUP}), ` +
    `trace arrivals / ${SPEEDUP}, first ${MAX_REQUESTS} requests`,
);
console.log(
  "| trace | mode | frontend | pass | requests | failed | TTFT p50 ms | TTFT p90 ms | hit | hit / ceiling | req/s | frontend CPU ms/req |",
);
console.log("| --- | --- | --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |");
for (const r of runs) {
  const s = r.summary;
  console.log(
    `| ${r.trace} | ${r.mode} | ${r.frontend} | ${r.pass} | ${s.requests} | ${s.failed} | ${
      s.ttft_ms.p50.toFixed(1)
    } | ${s.ttft_ms.p90.toFixed(1)} | ${pct(s.prefix_hit_rate)} | ${
      pct(s.prefix_hit_rate / r.ceiling)
    } | ${r.requestsPerS.toFixed(1)} | ${r.frontendCpuMsPerRequest.toFixed(2)} |`,
  );
}
console.log(
  "\nours / reference, per trace and mode (TTFT p90: lower is better; CPU per request: lower)",
);
/** Per trace and mode with `--repeat`: the p90 of all passes' requests together, both sides. */
const pooledP90: ({ trace: string; mode: string } & ReturnType<typeof pooledRatio>)[] = [];
for (const trace of TRACES) {
  for (const mode of MODES) {
    const of = (frontend: string) =>
      runs.filter((r) => r.trace === trace && r.mode === mode && r.frontend === frontend);
    const ours = of("ours");
    const ref = of("reference");
    if (ours.length === 0 || ref.length === 0) continue;
    const p90 = (r: Run) => r.summary.ttft_ms.p90;
    const passes = REPEAT > 1
      ? ` (per pass ${ours.map((o, i) => (p90(o) / p90(ref[i]!)).toFixed(2)).join(", ")})`
      : "";
    console.log(
      `${trace} ${mode}: TTFT p90 ${(median(ours.map(p90)) / median(ref.map(p90))).toFixed(2)}x${
        REPEAT > 1 ? " of the medians" : ""
      }${passes}, hit ${pct(median(ours.map((r) => r.summary.prefix_hit_rate)))} vs ${
        pct(median(ref.map((r) => r.summary.prefix_hit_rate)))
      }, frontend CPU/request ${
        (median(ours.map((r) => r.frontendCpuMsPerRequest)) /
          median(ref.map((r) => r.frontendCpuMsPerRequest))).toFixed(2)
      }x, failed ${sum(ours.map((r) => r.summary.failed))} vs ${
        sum(ref.map((r) => r.summary.failed))
      }`,
    );
    if (REPEAT > 1) {
      const pooled = pooledRatio(
        ours.map((r) => ttftsOf.get(r)!),
        ref.map((r) => ttftsOf.get(r)!),
      );
      pooledP90.push({ trace, mode, ...pooled });
      console.log(
        `${trace} ${mode}: TTFT p90 of all ${REPEAT} passes' requests together ${
          pooled.ours.toFixed(1)
        } ms vs ${pooled.reference.toFixed(1)} ms, ${pooled.ratio.toFixed(3)}x (passes drawn ` +
          `again, 90% of draws: ${pooled.low.toFixed(3)}-${pooled.high.toFixed(3)}x)`,
      );
    }
  }
}
const tails = runs.filter((r) => r.tail !== undefined);
if (tails.length > 0) {
  console.log("\nour kv router's tail, per run (from its decision log, --router-decision-log)");
  for (const r of tails) console.log(`${r.trace} pass ${r.pass}: ${formatTail(r.tail!)}`);
}
if (long.length > 0) {
  console.log(
    `\nlong prompts: one completion of ${LONG_TOKENS} fresh token ids at a time (4 tokens out), ` +
      `kv mode, engine --speedup-ratio ${THROUGHPUT_ENGINE_SPEEDUP}`,
  );
  console.log("| frontend | requests | failed | TTFT p50 ms | TTFT p90 ms | frontend CPU ms/req |");
  console.log("| --- | --: | --: | --: | --: | --: |");
  for (const l of long) {
    console.log(
      `| ${l.frontend} | ${l.requests} | ${l.failed} | ${l.ttftP50Ms.toFixed(2)} | ${
        l.ttftP90Ms.toFixed(2)
      } | ${l.frontendCpuMsPerRequest.toFixed(2)} |`,
    );
  }
  const ours = long.find((l) => l.frontend === "ours");
  const ref = long.find((l) => l.frontend === "reference");
  if (ours && ref) {
    console.log(
      `long prompts: TTFT p50 ours / reference ${(ours.ttftP50Ms / ref.ttftP50Ms).toFixed(2)}x, ` +
        `CPU per request ${
          (ours.frontendCpuMsPerRequest / ref.frontendCpuMsPerRequest).toFixed(2)
        }x`,
    );
  }
}
if (saturated.length > 0) {
  console.log(
    `\nclosed loop: each client sends its next short chat request (16 tokens out) when the last ends, ` +
      `round-robin, engine --speedup-ratio ${THROUGHPUT_ENGINE_SPEEDUP}, ${THROUGHPUT_SECONDS} s`,
  );
  console.log(
    "| clients | frontend | requests | chunks/answer | req/s | frontend CPU ms/req | frontend cores | machine cores |",
  );
  console.log("| --: | --- | --: | --: | --: | --: | --: | --: |");
  for (const t of saturated) {
    console.log(
      `| ${t.concurrency} | ${t.frontend} | ${t.requests} | ${t.chunksPerAnswer.toFixed(1)} | ${
        t.requestsPerS.toFixed(0)
      } | ${t.frontendCpuMsPerRequest.toFixed(2)} | ${t.frontendCores.toFixed(2)} | ${
        t.machineCores.toFixed(2)
      } |`,
    );
  }
  for (const concurrency of THROUGHPUT_CONCURRENCY) {
    const at = saturated.filter((t) => t.concurrency === concurrency);
    const ours = at.find((t) => t.frontend === "ours");
    const ref = at.find((t) => t.frontend === "reference");
    if (!ours || !ref) continue;
    console.log(
      `${concurrency} clients: throughput ours / reference ${
        (ours.requestsPerS / ref.requestsPerS).toFixed(2)
      }x, CPU per request ${
        (ours.frontendCpuMsPerRequest / ref.frontendCpuMsPerRequest).toFixed(2)
      }x`,
    );
  }
}
if (jsonPath) {
  await Deno.writeTextFile(
    jsonPath,
    JSON.stringify({ runs, pooledP90, longPrompts: long, throughput: saturated }, null, 2) +
      "\n",
  );
}
