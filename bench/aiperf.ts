// deno-lint-ignore-file no-console -- a program that prints what it measured
// `deno task bench:aiperf`: NVIDIA's aiperf (PyPI `aiperf`, pinned in
// scripts/setup_conformance.sh, installed into .dynamo/aiperf-venv on first use) runs a
// profile against `dynamo run in=http out=mocker` (or out=echo) on a free loopback port, then
// this prints its figures and exits 1 unless every request succeeded.
//
// Offline: aiperf's tokenizer is the built-in test model's folder (the real Qwen3 tokenizer
// files, written by builtinTestModel()), given as --tokenizer PATH; a local folder needs no hub.
//
// Flags: --engine mocker|echo (default mocker), --requests N (default 200), --concurrency N
// (default 8), --isl N / --osl N (synthetic input / output tokens, default 128 / 32),
// --speedup-ratio X (mocker, default 10), --artifacts DIR (keep aiperf's files there; default a
// temporary folder, removed), --json PATH (write the figures as JSON).

import { builtinTestModel } from "../mod.ts";
import { MODEL, startDynamoRun } from "../tests/_helpers/dynamo_run.ts";
import { checkFlags, flag } from "./_stats.ts";

checkFlags(
  "deno task bench:aiperf",
  "aiperf (PyPI) against our frontend: its TTFT, ITL and throughput figures.",
  {
    "--engine mocker|echo": "the worker's engine (default mocker)",
    "--requests N": "requests (default 200)",
    "--concurrency N": "requests in flight (default 8)",
    "--isl N": "synthetic input tokens (default 128)",
    "--osl N": "synthetic output tokens (default 32)",
    "--speedup-ratio X": "the mocker's speedup ratio (default 10)",
    "--artifacts DIR": "keep aiperf's files there (default: a temporary folder, removed)",
    "--json PATH": "write the figures there",
  },
);

const ROOT = new URL("..", import.meta.url).pathname;
/** aiperf's whole run (its services' start included) ends within this. */
const AIPERF_DEADLINE_MS = 600_000;

const engine = flag("--engine") ?? "mocker";
if (engine !== "mocker" && engine !== "echo") {
  console.error(`--engine must be mocker or echo, got ${engine}`);
  Deno.exit(2);
}
const int = (name: string, fallback: number): number => {
  const raw = flag(name);
  const n = raw === undefined ? fallback : Number(raw);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`${name} must be a whole number >= 1, got ${raw}`);
    Deno.exit(2);
  }
  return n;
};
const requests = int("--requests", 200);
const concurrency = int("--concurrency", 8);
const isl = int("--isl", 128);
const osl = int("--osl", 32);
const speedup = flag("--speedup-ratio") ?? "10";
const keep = flag("--artifacts");
const jsonPath = flag("--json");

/** One metric of aiperf's profile_export_aiperf.json. */
interface Metric {
  unit: string;
  avg: number;
  p50?: number;
  p99?: number;
}

async function aiperfPython(): Promise<string> {
  const setup = await new Deno.Command("bash", {
    args: [`${ROOT}scripts/setup_conformance.sh`, "aiperf"],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!setup.success) throw new Error("scripts/setup_conformance.sh aiperf failed (see above)");
  return new TextDecoder().decode(setup.stdout).trim();
}

const python = await aiperfPython();
const tokenizer = await builtinTestModel();
const artifacts = keep ?? await Deno.makeTempDir({ prefix: "aiperf-" });
const serverArgs = engine === "mocker"
  ? ["out=mocker", "--speedup-ratio", speedup]
  : ["out=echo", "--max-inflight", String(Math.max(1024, concurrency))];
const run = await startDynamoRun(serverArgs);
const args = [
  "-m",
  "aiperf",
  "profile",
  "--model",
  MODEL,
  "--url",
  run.url,
  "--endpoint-type",
  "chat",
  "--streaming",
  "--tokenizer",
  tokenizer,
  "--concurrency",
  String(concurrency),
  "--request-count",
  String(requests),
  // The server's first requests compile its code paths: keep them out of the figures.
  "--warmup-request-count",
  String(concurrency * 2),
  "--isl",
  String(isl),
  "--osl",
  String(osl),
  "--artifact-dir",
  artifacts,
  "--ui-type",
  "none",
  "--no-server-metrics",
  "--no-gpu-telemetry",
];
console.log(`$ ${[python, ...args].join(" ")}   # against dynamo run ${serverArgs.join(" ")}`);
let code = 1;
try {
  const out = await new Deno.Command(python, {
    args,
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(AIPERF_DEADLINE_MS),
  }).output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    throw new Error(`aiperf exited with ${out.code}:\n${text.slice(-4000)}`);
  }
  const report = JSON.parse(
    await Deno.readTextFile(`${artifacts}/profile_export_aiperf.json`),
  ) as Record<string, unknown>;
  const metric = (name: string): Metric => {
    const m = report[name] as Metric | undefined;
    if (!m) throw new Error(`aiperf's report has no ${name}`);
    return m;
  };
  const errorSummary = (report.error_summary ?? []) as { count?: number }[];
  const errors = errorSummary
    .reduce((sum, e) => sum + (e.count ?? 1), 0);
  const completed = metric("request_count").avg;
  const figures = {
    engine,
    requests,
    concurrency,
    isl,
    osl,
    completed,
    errors,
    request_throughput_rps: metric("request_throughput").avg,
    output_token_throughput_tps: metric("output_token_throughput").avg,
    ttft_ms: pick(metric("time_to_first_token")),
    itl_ms: pick(metric("inter_token_latency")),
    request_latency_ms: pick(metric("request_latency")),
  };
  console.log(`aiperf ${report.aiperf_version} against dynamo run ${serverArgs.join(" ")}:`);
  console.log(
    `  ${completed} of ${requests} requests completed, ${errors} errors; ` +
      `${figures.request_throughput_rps.toFixed(1)} req/s, ` +
      `${figures.output_token_throughput_tps.toFixed(0)} output tokens/s`,
  );
  for (
    const [name, m] of [
      ["TTFT", figures.ttft_ms],
      ["ITL", figures.itl_ms],
      ["request latency", figures.request_latency_ms],
    ] as const
  ) {
    console.log(
      `  ${name} (ms): avg ${m.avg.toFixed(2)}, p50 ${m.p50.toFixed(2)}, p99 ${m.p99.toFixed(2)}`,
    );
  }
  if (jsonPath) await Deno.writeTextFile(jsonPath, JSON.stringify(figures, null, 2) + "\n");
  code = errors === 0 && completed === requests ? 0 : 1;
  if (code !== 0) console.error(`FAILED: ${errors} errors, ${completed} of ${requests} completed`);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  if (run.output()) console.error(`--- dynamo run output ---\n${run.output().slice(-4000)}`);
} finally {
  await run.stop();
  if (!keep) await Deno.remove(artifacts, { recursive: true }).catch(() => {});
}
Deno.exit(code);

function pick(m: Metric): { avg: number; p50: number; p99: number } {
  return { avg: m.avg, p50: m.p50 ?? NaN, p99: m.p99 ?? NaN };
}
