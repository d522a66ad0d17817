// `dynamo bench`: replays a Mooncake-format trace against a fleet of mocker workers behind
// the real frontend, once per router mode, and compares the modes.

import { type Command, ExitCode, type Io, parseCommandArgs, UsageError } from "./_common.ts";
import { replayTrace } from "./_bench/replay.ts";
import {
  formatTable,
  type ModeSamples,
  modeSamples,
  type ModeSummary,
  renderChart,
  renderDistributions,
  renderHitRate,
  renderLoad,
  renderReportHtml,
  renderThroughput,
  summarizeMode,
  throughputSeries,
} from "./_bench/report.ts";
import { simulate } from "./_bench/simulate.ts";
import {
  clockTicks,
  cpuSeconds,
  cpuWarnings,
  machineBusySeconds,
  type ReplayCpu,
} from "./_bench/cpu_time.ts";
import { ceilingHitTokens, limitTrace, loadTrace, prefixCeiling } from "./_bench/trace.ts";
import {
  parseSyntheticSpec,
  synthesizeTrace,
  SYNTHETIC_PRESETS,
  type SyntheticTraceOptions,
} from "./_bench/synthetic.ts";
import { InvalidArgumentError } from "../runtime/errors.ts";
import { DEFAULT_NUM_GPU_BLOCKS, defaultHostBlocks } from "../llm/engines/mocker/block_manager.ts";
import { DEFAULT_KV_FETCH_MS_PER_BLOCK } from "../llm/engines/mocker/timing.ts";

const MODES = ["kv", "round-robin", "random"] as const;

const usage = `Usage: dynamo bench (--trace FILE | --synthetic SPEC) --out DIR [options]

Replays a trace in the Mooncake format (one JSON object per line: timestamp, input_length,
output_length, hash_ids), or a generated one (--synthetic), against N mocker workers behind
the OpenAI frontend, once per router mode, each mode on a fresh server process (\`dynamo run
in=http out=mocker\`). Requests are streaming completions whose prompts are token ids (each
hash id is a fixed block of tokens: 512 in Mooncake traces, 16 in synthetic ones), sent
open-loop at their arrival times divided by --speedup.
Writes DIR/results.json, DIR/report.html (every chart on one page) and the charts as SVG
(chart.svg, distributions.svg, throughput.svg, hit_rate.svg; load.svg with --simulate) and
prints a table.

Options:
  --trace FILE                 the trace
  --synthetic SPEC             a generated trace instead: PRESET[,key=value...] with presets
                               ${Object.keys(SYNTHETIC_PRESETS).join(", ")} and keys seed,
                               tenants, systemTokens, usersPerTenant, turns, userTokens,
                               outputTokens, thinkS, sessionsPerS, burstiness, blockTokens
                               (e.g. multi-tenant,seed=2,sessionsPerS=3)
  --out DIR                    where results go (required)
  --workers N                  mocker workers (default 8)
  --router-modes LIST          comma-separated: kv, round-robin, random (default all three)
  --speedup X                  divides arrival times (default 1)
  --engine-speedup R           the mockers' speedup ratio (default: --speedup), so
                               --speedup above --engine-speedup raises the load
  --max-requests N             replay only the first N requests
  --duration-s S               replay only requests arriving in the first S trace seconds
  --block-size N               KV block size of the mockers (default 16)
  --num-gpu-blocks N           KV blocks per mocker (default: the mocker's)
  --host-kv-blocks N           KV blocks in each mocker's host-memory tier (default: the
                               mocker's, 4 per GPU block; 0: none)
  --kv-fetch-ms-per-block MS|off
                               the mockers' peer KV fetch: ms per KV block copied from the
                               worker holding a prefix (default: the mocker's, 0.084); off:
                               workers compute what they lack
  --kv-overlap-score-weight W  kv mode's weight of cached blocks; given (or the next), kv
                               uses the reference's weighted cost instead of the default,
                               the predicted time to first token
  --router-temperature T       kv mode's sampling temperature (default 0)
  --kv-queued-prefill-weight Q kv mode's weight of prompts queued for prefill in the weighted
                               cost (default 1)
  --request-timeout-s S        deadline per request (default 600)
  --simulate                   replay in virtual time: the mockers' scheduler and step times
                               and the router's policy, no servers; times are the engine's
                               own (--speedup / --engine-speedup sets the load); fast, and
                               the same figures whatever else the machine runs
  -h, --help                   show this help

Environment: DYN_BENCH_SERVER_LOG (the servers' log level, default warn; their output goes to
DIR/server-MODE.log), DYN_BENCH_SERVER_DENO_FLAGS (flags for the servers' deno run, e.g.
"--cpu-prof --cpu-prof-dir=DIR").`;

interface BenchFlags {
  /** The trace file, or `synthetic:SPEC`. */
  trace: string;
  /** The synthetic trace's parameters, with --synthetic. */
  synthetic?: SyntheticTraceOptions;
  /** Replay in virtual time instead of against live servers. */
  simulate: boolean;
  out: string;
  workers: number;
  modes: string[];
  speedup: number;
  engineSpeedup: number;
  maxRequests?: number;
  durationS?: number;
  blockSize: number;
  numGpuBlocks?: number;
  /** KV blocks in each mocker's host tier (undefined: the mocker's default). */
  hostKvBlocks?: number;
  /** The mockers' peer KV fetch rate (undefined: the mocker's default; null: off). */
  kvFetchMsPerBlock?: number | null;
  overlapWeight?: number;
  temperature?: number;
  queuedPrefillWeight?: number;
  requestTimeoutS: number;
  /** Set once the trace is read: its longest prompt plus output. */
  contextLength: number;
}

/** `--kv-fetch-ms-per-block`: ms >= 0, or "off" (null). */
function fetchRate(value: string | undefined): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === "off") return null;
  const ms = Number(value);
  if (value === "" || !(ms >= 0 && ms < Infinity)) {
    throw new UsageError(
      `--kv-fetch-ms-per-block must be a number of ms >= 0 or "off", got ${JSON.stringify(value)}`,
      "bench",
    );
  }
  return ms;
}

/** A flag that takes a whole number >= 0. */
function wholeOrZero(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !(n >= 0) || !Number.isInteger(n)) {
    throw new UsageError(
      `--${flag} must be a whole number >= 0, got ${JSON.stringify(value)}`,
      "bench",
    );
  }
  return n;
}

function positive(flag: string, value: string | undefined, integer: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !(n > 0) || (integer && !Number.isInteger(n))) {
    throw new UsageError(
      `--${flag} must be a ${integer ? "whole number" : "number"} > 0, got ${
        JSON.stringify(value)
      }`,
      "bench",
    );
  }
  return n;
}

function parseFlags(args: string[]): BenchFlags | undefined {
  const { values, positionals } = parseCommandArgs("bench", args, {
    trace: { type: "string" },
    synthetic: { type: "string" },
    simulate: { type: "boolean" },
    out: { type: "string" },
    workers: { type: "string" },
    "router-modes": { type: "string" },
    speedup: { type: "string" },
    "engine-speedup": { type: "string" },
    "max-requests": { type: "string" },
    "duration-s": { type: "string" },
    "block-size": { type: "string" },
    "num-gpu-blocks": { type: "string" },
    "host-kv-blocks": { type: "string" },
    "kv-fetch-ms-per-block": { type: "string" },
    "kv-overlap-score-weight": { type: "string" },
    "router-temperature": { type: "string" },
    "kv-queued-prefill-weight": { type: "string" },
    "request-timeout-s": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help) return undefined;
  if (positionals.length > 0) {
    throw new UsageError(`takes no positional arguments, got ${positionals.join(" ")}`, "bench");
  }
  if (!values.trace === !values.synthetic) {
    throw new UsageError("give one of --trace FILE or --synthetic SPEC", "bench");
  }
  let synthetic: SyntheticTraceOptions | undefined;
  if (values.synthetic) {
    try {
      synthetic = parseSyntheticSpec(values.synthetic);
    } catch (err) {
      if (err instanceof InvalidArgumentError) {
        throw new UsageError(`--synthetic: ${err.message}`, "bench");
      }
      throw err;
    }
  }
  if (!values.out) throw new UsageError("--out DIR is required", "bench");
  const modes = (values["router-modes"] ?? MODES.join(",")).split(",").map((m) => m.trim());
  for (const m of modes) {
    if (!(MODES as readonly string[]).includes(m)) {
      throw new UsageError(
        `--router-modes takes ${MODES.join(", ")}; got ${JSON.stringify(m)}`,
        "bench",
      );
    }
  }
  if (new Set(modes).size !== modes.length) {
    throw new UsageError(`--router-modes lists a mode twice: ${modes.join(",")}`, "bench");
  }
  const speedup = positive("speedup", values.speedup, false) ?? 1;
  const weight = values["kv-overlap-score-weight"];
  const temperature = values["router-temperature"];
  const queued = values["kv-queued-prefill-weight"];
  for (
    const [flag, v] of [
      ["kv-overlap-score-weight", weight],
      ["router-temperature", temperature],
      ["kv-queued-prefill-weight", queued],
    ]
  ) {
    if (v !== undefined && (v.trim() === "" || !(Number(v) >= 0) || !Number.isFinite(Number(v)))) {
      throw new UsageError(
        `--${flag} must be a finite number >= 0, got ${JSON.stringify(v)}`,
        "bench",
      );
    }
  }
  return {
    trace: values.trace ?? `synthetic:${values.synthetic}`,
    synthetic,
    simulate: values.simulate ?? false,
    out: values.out,
    workers: positive("workers", values.workers, true) ?? 8,
    modes,
    speedup,
    engineSpeedup: positive("engine-speedup", values["engine-speedup"], false) ?? speedup,
    maxRequests: positive("max-requests", values["max-requests"], true),
    durationS: positive("duration-s", values["duration-s"], false),
    blockSize: positive("block-size", values["block-size"], true) ?? 16,
    numGpuBlocks: positive("num-gpu-blocks", values["num-gpu-blocks"], true),
    hostKvBlocks: wholeOrZero("host-kv-blocks", values["host-kv-blocks"]),
    kvFetchMsPerBlock: fetchRate(values["kv-fetch-ms-per-block"]),
    overlapWeight: weight === undefined ? undefined : Number(weight),
    temperature: temperature === undefined ? undefined : Number(temperature),
    queuedPrefillWeight: queued === undefined ? undefined : Number(queued),
    requestTimeoutS: positive("request-timeout-s", values["request-timeout-s"], false) ?? 600,
    contextLength: 0,
  };
}

/** A `dynamo run in=http out=mocker` server for one mode. */
interface Server {
  url: string;
  model: string;
  pid: number;
  stop(): Promise<void>;
}

async function startServer(flags: BenchFlags, mode: string, io: Io): Promise<Server> {
  const args = [
    "run",
    "-A",
    ...(Deno.env.get("DYN_BENCH_SERVER_DENO_FLAGS") ?? "").split(" ").filter(Boolean),
    new URL("./main.ts", import.meta.url).pathname,
    "run",
    "in=http",
    "out=mocker",
    "--http-port",
    "0",
    "--http-host",
    "127.0.0.1",
    "--router-mode",
    mode,
    "--num-workers",
    String(flags.workers),
    "--speedup-ratio",
    String(flags.engineSpeedup),
    "--block-size",
    String(flags.blockSize),
    // The test model's card says 40,960; the trace's prompts go past 100k tokens.
    "--context-length",
    String(flags.contextLength),
  ];
  if (flags.numGpuBlocks !== undefined) args.push("--num-gpu-blocks", String(flags.numGpuBlocks));
  if (flags.hostKvBlocks !== undefined) args.push("--host-kv-blocks", String(flags.hostKvBlocks));
  if (flags.kvFetchMsPerBlock !== undefined) {
    args.push("--kv-fetch-ms-per-block", String(flags.kvFetchMsPerBlock ?? "off"));
  }
  if (mode === "kv" && flags.overlapWeight !== undefined) {
    args.push("--kv-overlap-score-weight", String(flags.overlapWeight));
  }
  if (mode === "kv" && flags.queuedPrefillWeight !== undefined) {
    args.push("--kv-queued-prefill-weight", String(flags.queuedPrefillWeight));
  }
  if (mode === "kv" && flags.temperature !== undefined) {
    args.push("--router-temperature", String(flags.temperature));
  }
  const child = new Deno.Command(Deno.execPath(), {
    args,
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
    env: { DYN_LOG: Deno.env.get("DYN_BENCH_SERVER_LOG") ?? "warn", NO_COLOR: "1" },
  }).spawn();
  const exited = child.status;
  const tail: string[] = [];
  // The server's own output, whole, beside the results (DYN_BENCH_SERVER_LOG=debug for more).
  const log = await Deno.open(`${flags.out}/server-${mode}.log`, {
    write: true,
    create: true,
    truncate: true,
  });
  const encoder = new TextEncoder();
  const listening = Promise.withResolvers<string>();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    let buf = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let nl;
      while ((nl = buf.indexOf("\n")) !== -1) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const m = /listening on (http:\/\/\S+)/.exec(line);
        if (m) listening.resolve(m[1]!);
        tail.push(line);
        if (tail.length > 20) tail.shift();
        await log.write(encoder.encode(line + "\n"));
      }
    }
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const stop = async () => {
    try {
      child.kill("SIGINT");
    } catch { /* already gone */ }
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 10_000);
    await exited;
    clearTimeout(timer);
    await pumps.catch(() => {});
    log.close();
  };
  const deadline = AbortSignal.timeout(120_000);
  try {
    const url = await Promise.race([
      listening.promise,
      exited.then((s) => {
        throw new Error(`the ${mode} server exited (code ${s.code}): ${tail.join("\n")}`);
      }),
      new Promise<never>((_, reject) =>
        deadline.addEventListener(
          "abort",
          () => reject(new Error(`the ${mode} server did not start within 120 s`)),
          { once: true },
        )
      ),
    ]);
    // Wait for the workers' model to be listed.
    for (;;) {
      deadline.throwIfAborted();
      const res = await fetch(`${url}/v1/models`).catch(() => undefined);
      const models = res?.ok ? ((await res.json()).data as { id: string }[]) : [];
      if (models.length > 0) {
        io.err(`[bench] ${mode}: server at ${url}, model ${models[0]!.id}`);
        return { url, model: models[0]!.id, pid: child.pid, stop };
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } catch (err) {
    await stop();
    throw err;
  }
}

async function run(args: string[], io: Io): Promise<number> {
  const flags = parseFlags(args);
  if (!flags) {
    io.out(usage);
    return ExitCode.Ok;
  }
  const limits = {
    maxRequests: flags.maxRequests,
    maxTimestampMs: flags.durationS === undefined ? undefined : flags.durationS * 1000,
  };
  const requests = flags.synthetic
    ? limitTrace(synthesizeTrace(flags.synthetic), limits)
    : await loadTrace(flags.trace, limits).catch((err: unknown) => {
      if (err instanceof Deno.errors.NotFound) {
        throw new UsageError(
          `no trace file ${flags.trace}; the repository ships bench/data/mooncake_conversation_trace.jsonl ` +
            `(the whole trace) and bench/data/mooncake_sample.jsonl (300 requests, a quick run)`,
          "bench",
        );
      }
      throw err;
    });
  if (requests.length === 0) throw new UsageError(`no requests in ${flags.trace}`, "bench");
  flags.contextLength = Math.max(...requests.map((r) => r.inputLength + r.outputLength));
  const ceiling = prefixCeiling(requests);
  const ceilingHits = ceilingHitTokens(requests);
  const span = (requests[requests.length - 1]!.timestamp - requests[0]!.timestamp) / 1000;
  io.err(
    `[bench] ${requests.length} requests over ${span.toFixed(0)} trace s (${
      (span / flags.speedup).toFixed(0)
    } s per mode at speedup ${flags.speedup}); prefix ceiling ${
      (ceiling.tokens * 100).toFixed(1)
    }% of prompt tokens`,
  );
  await Deno.mkdir(flags.out, { recursive: true });
  const modes: Record<string, ModeSummary> = {};
  const samples: Record<string, ModeSamples> = {};
  const loads: Record<string, number[][]> = {};
  const throughput: Record<string, [number, number][]> = {};
  // Live runs: CPU use during each mode's replay (NaN off Linux).
  const cpu: Record<string, ReplayCpu> = {};
  for (const mode of flags.modes) {
    if (flags.simulate) {
      const t = performance.now();
      const sim = simulate(requests, {
        workers: flags.workers,
        mode: mode as "kv",
        load: flags.speedup / flags.engineSpeedup,
        blockSize: flags.blockSize,
        numGpuBlocks: flags.numGpuBlocks,
        hostBlocks: flags.hostKvBlocks,
        kvFetchMsPerBlock: flags.kvFetchMsPerBlock,
        // About 200 load samples over the replay.
        sampleMs: Math.max(1, span * 1000 / (flags.speedup / flags.engineSpeedup) / 200),
        policy: {
          overlapScoreWeight: flags.overlapWeight,
          temperature: flags.temperature,
          queuedPrefillWeight: flags.queuedPrefillWeight,
        },
      });
      io.err(
        `[bench] ${mode}: simulated ${sim.seconds.toFixed(0)} s in ${
          ((performance.now() - t) / 1000).toFixed(1)
        } s`,
      );
      modes[mode] = summarizeMode(sim.results, sim.seconds, ceilingHits);
      samples[mode] = modeSamples(sim.results);
      throughput[mode] = throughputSeries(sim.results, sim.seconds);
      loads[mode] = sim.load;
      continue;
    }
    const server = await startServer(flags, mode, io);
    try {
      await clockTicks();
      const cpu0 = cpuSeconds(server.pid);
      const machine0 = machineBusySeconds();
      const wall0 = performance.now();
      const { results, seconds } = await replayTrace(requests, {
        baseUrl: server.url,
        model: server.model,
        speedup: flags.speedup,
        requestTimeoutMs: flags.requestTimeoutS * 1000,
        onProgress: (p) =>
          io.err(
            `[bench] ${mode}: ${p.done}/${p.total} done, ${
              p.sent - p.done
            } in flight, ${p.failed} failed`,
          ),
      });
      const wall = (performance.now() - wall0) / 1000;
      cpu[mode] = {
        server_cores: round2((cpuSeconds(server.pid) - cpu0) / wall),
        machine_cores: round2((machineBusySeconds() - machine0) / wall),
      };
      modes[mode] = summarizeMode(results, seconds, ceilingHits);
      samples[mode] = modeSamples(results);
      throughput[mode] = throughputSeries(results, seconds);
    } finally {
      await server.stop();
    }
  }
  const results = {
    trace: flags.trace,
    workers: flags.workers,
    speedup: flags.speedup,
    engine_speedup: flags.engineSpeedup,
    block_size: flags.blockSize,
    num_gpu_blocks: flags.numGpuBlocks ?? DEFAULT_NUM_GPU_BLOCKS,
    host_kv_blocks: flags.hostKvBlocks ?? defaultHostBlocks(flags.numGpuBlocks),
    kv_fetch_ms_per_block: flags.kvFetchMsPerBlock === undefined
      ? DEFAULT_KV_FETCH_MS_PER_BLOCK
      : flags.kvFetchMsPerBlock,
    // What kv mode's cost was: the weights are null under the default, which has none.
    kv_cost: flags.overlapWeight === undefined && flags.queuedPrefillWeight === undefined
      ? "predicted-ttft"
      : "weighted",
    kv_overlap_score_weight: flags.overlapWeight ?? null,
    router_temperature: flags.temperature ?? 0,
    kv_queued_prefill_weight: flags.queuedPrefillWeight ?? null,
    requests: requests.length,
    prefix_ceiling: ceiling,
    modes,
    ...(flags.simulate ? {} : { live_cpu: cpu }),
  };
  await Deno.writeTextFile(`${flags.out}/results.json`, JSON.stringify(results, null, 2) + "\n");
  const how = flags.simulate ? "simulated" : "live";
  const title =
    `dynamo bench: ${requests.length} requests, ${flags.workers} mocker workers, speedup ${flags.speedup}`;
  const charts = [
    {
      file: "chart.svg",
      caption: "TTFT percentiles per mode (ms) and prefix hit rate (%) against the ceiling",
      svg: renderChart(modes, title, ceiling.tokens),
    },
    {
      file: "distributions.svg",
      caption: "TTFT and ITL distributions (share of requests / tokens at or below each ms)",
      svg: renderDistributions(samples, `TTFT and ITL per mode (${how})`),
    },
    {
      file: "throughput.svg",
      caption: "output tokens per second over the run, in 60 bins",
      svg: renderThroughput(throughput, `output throughput per mode (${how})`),
    },
    {
      file: "hit_rate.svg",
      caption: "share of prompt tokens served from a worker's prefix cache, and the ceiling",
      svg: renderHitRate(modes, ceiling.tokens, "prefix hit rate against the ceiling"),
    },
  ];
  if (flags.simulate) {
    charts.push({
      file: "load.svg",
      caption: "requests running or waiting on each worker over the run",
      svg: renderLoad(loads, "requests running or waiting on each worker (simulated)"),
    });
  }
  for (const c of charts) await Deno.writeTextFile(`${flags.out}/${c.file}`, c.svg);
  await Deno.writeTextFile(
    `${flags.out}/report.html`,
    renderReportHtml({
      title,
      facts: {
        trace: flags.trace,
        replay: how,
        workers: flags.workers,
        speedup: flags.speedup,
        "block size": flags.blockSize,
        "prefix ceiling": `${(ceiling.tokens * 100).toFixed(1)}% of prompt tokens`,
      },
      modes,
      charts,
    }),
  );
  io.out(formatTable(modes));
  io.out(`prefix-hit ceiling of the replayed requests: ${(ceiling.tokens * 100).toFixed(1)}%`);
  const kv = modes["kv"];
  const rr = modes["round-robin"];
  if (kv) {
    // A trace whose prompts share nothing has a ceiling of 0: no share of it to give.
    const share = ceiling.tokens > 0
      ? ` = ${(kv.prefix_hit_rate / ceiling.tokens * 100).toFixed(0)}% of the ceiling`
      : " (the trace's prompts share no prefix)";
    io.out(`kv prefix hit rate: ${(kv.prefix_hit_rate * 100).toFixed(1)}%${share}`);
  }
  if (kv && rr) {
    io.out(`TTFT p90: round-robin / kv = ${(rr.ttft_ms.p90 / kv.ttft_ms.p90).toFixed(2)}x`);
  }
  for (const line of cpuWarnings(cpu, navigator.hardwareConcurrency)) io.out(line);
  for (const [mode, m] of Object.entries(modes)) {
    if (!m.cached_over_ceiling) continue;
    io.out(
      `${mode}: ${m.cached_over_ceiling} requests reported more cached prompt tokens than the ` +
        `requests before them in the trace had shown (a worker counting blocks nobody computed, ` +
        `or requests sent at the same instant served out of order)`,
    );
  }
  io.out(
    `wrote ${flags.out}/results.json, report.html, ${charts.map((c) => c.file).join(", ")}`,
  );
  const failed = Object.values(modes).reduce((s, m) => s + m.failed, 0);
  return failed > 0 ? ExitCode.Failure : ExitCode.Ok;
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

/** `dynamo bench`. */
export const benchCommand: Command = {
  name: "bench",
  summary: "replay a Mooncake trace against mocker workers, comparing router modes",
  usage,
  run,
};
