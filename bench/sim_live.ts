// deno-lint-ignore-file no-console -- a program that prints
// `deno task bench:sim-live`: does the simulator that `bench:routing` measures with say what live
// runs do? For each row (a synthetic trace and a load level of bench/results/routing.json), the
// same trace at the same load replayed twice through `dynamo bench`, kv and round-robin each:
// simulated (`--simulate`) and live (processes, HTTP, the frontend's own router, real timers),
// the live engine slowed (`--engine-speedup`, default 0.25, with the arrival speedup scaled to
// keep the load) so that the one server process (frontend and every mocker on one JavaScript
// thread) is not what the live run measures. Live times are scaled back to the engine's speed.
// Prints, per row, both runs' TTFT p50/p90, the round-robin / kv p90 ratio and the kv hit rate,
// and the live run's CPU (a live mode over `dynamo bench`'s busy threshold is flagged).
//
//   deno task bench:sim-live [--rows "multi-tenant,seed=1:moderate;no-sharing,seed=1:saturation"]
//     [--engine-speedup R] [--max-requests N] [--json PATH]
//
// About 6 minutes with the default rows on a 2-core machine.

import { checkFlags, flag } from "./_stats.ts";
import { SERVER_BUSY_CORES } from "../cli/_bench/cpu_time.ts";

checkFlags(
  "deno task bench:sim-live",
  "The routing simulator against live runs of the same rows.",
  {
    "--rows ROWS": "rows as TRACE:LEVEL;... (default: the five rows in BENCHMARKS.md)",
    "--engine-speedup R": "the live mockers' speedup ratio (default 0.25)",
    "--max-requests N": "requests per trace",
    "--json PATH": "write the results there",
  },
);

const ROOT = new URL("..", import.meta.url).pathname;
const ROWS = flag("--rows") ??
  "multi-tenant,seed=1:moderate;multi-tenant,seed=1:saturation;many-tenants,seed=3:moderate;" +
    "long-system,seed=4:moderate;no-sharing,seed=1:saturation";
const ENGINE = Number(flag("--engine-speedup") ?? 0.25);
const MAX_REQUESTS = flag("--max-requests");
const jsonPath = flag("--json");
if (!(ENGINE > 0)) throw new Error("--engine-speedup must be > 0");
if (MAX_REQUESTS !== undefined && !(Number.isInteger(Number(MAX_REQUESTS)) && +MAX_REQUESTS > 0)) {
  throw new Error("--max-requests must be a whole number > 0");
}

interface RoutingRow {
  trace: string;
  level: string;
  load: number;
}
interface ModeFigures {
  ttft_ms: { p50: number; p90: number };
  prefix_hit_rate: number;
  failed: number;
}
interface BenchResults {
  modes: Record<string, ModeFigures>;
  live_cpu?: Record<string, { server_cores: number; machine_cores: number }>;
}

const routing = JSON.parse(
  await Deno.readTextFile(`${ROOT}bench/results/routing.json`),
) as { rows: RoutingRow[] };

/** `multi-tenant,seed=1:moderate` -> the spec and the load of that row in routing.json. */
function rowOf(text: string): { spec: string; level: string; load: number } {
  const [spec, level] = text.split(":");
  const m = /^([\w-]+),seed=(\d+)$/.exec(spec ?? "");
  if (!m || (level !== "moderate" && level !== "saturation")) {
    throw new Error(`a row is PRESET,seed=N:moderate|saturation, got "${text}"`);
  }
  const name = `${m[1]} seed ${m[2]}`;
  const row = routing.rows.find((r) => r.trace === name && r.level === level);
  if (!row) throw new Error(`bench/results/routing.json has no row "${name}" at ${level}`);
  return { spec: spec!, level, load: row.load };
}

async function bench(spec: string, speedup: number, simulate: boolean): Promise<BenchResults> {
  const out = await Deno.makeTempDir({ prefix: "sim-live-" });
  try {
    const args = [
      "run",
      "-A",
      `${ROOT}cli/main.ts`,
      "bench",
      ...["--synthetic", spec, "--router-modes", "kv,round-robin"],
      ...["--speedup", String(speedup), "--engine-speedup", String(simulate ? 1 : ENGINE)],
      ...(MAX_REQUESTS ? ["--max-requests", MAX_REQUESTS] : []),
      ...(simulate ? ["--simulate"] : []),
      ...["--out", out],
    ];
    const run = await new Deno.Command(Deno.execPath(), { args, stdout: "piped", stderr: "piped" })
      .output();
    if (!run.success) {
      throw new Error(
        `dynamo bench ${args.slice(4).join(" ")} failed:\n${new TextDecoder().decode(run.stderr)}`,
      );
    }
    return JSON.parse(await Deno.readTextFile(`${out}/results.json`)) as BenchResults;
  } finally {
    await Deno.remove(out, { recursive: true }).catch(() => {});
  }
}

const fmt = (x: number) => x.toFixed(1);
const table: string[] = [
  "| row | kv p50/p90 sim | kv p50/p90 live | rr p50/p90 sim | rr p50/p90 live | rr/kv p90 sim | rr/kv p90 live | kv hit sim / live | live server cores (kv, rr) | failed |",
  "| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: |",
];
const json: unknown[] = [];
// Every row checked before the first run: a typo in the last one should not cost minutes.
const rows = ROWS.split(";").filter(Boolean).map(rowOf);
for (const { spec, level, load } of rows) {
  console.error(`[sim-live] ${spec} ${level} (load ${load}): simulated, then live`);
  const sim = await bench(spec, load, true);
  const live = await bench(spec, load * ENGINE, false);
  // Live times multiplied by the engine's slow-down: at the engine's own speed, as simulated.
  const f = (r: BenchResults, mode: string, s: number) => {
    const m = r.modes[mode]!;
    return {
      p50: m.ttft_ms.p50 * s,
      p90: m.ttft_ms.p90 * s,
      hit: m.prefix_hit_rate,
      failed: m.failed,
    };
  };
  const [sk, lk, sr, lr] = [
    f(sim, "kv", 1),
    f(live, "kv", ENGINE),
    f(sim, "round-robin", 1),
    f(live, "round-robin", ENGINE),
  ];
  const cpu = live.live_cpu ?? {};
  const cores = [cpu["kv"]?.server_cores, cpu["round-robin"]?.server_cores];
  const busy = cores.some((c) => c !== undefined && c > SERVER_BUSY_CORES) ? " (busy)" : "";
  table.push(
    `| ${spec} ${level} | ${fmt(sk.p50)}/${fmt(sk.p90)} | ${fmt(lk.p50)}/${fmt(lk.p90)} | ` +
      `${fmt(sr.p50)}/${fmt(sr.p90)} | ${fmt(lr.p50)}/${fmt(lr.p90)} | ` +
      `${(sr.p90 / sk.p90).toFixed(2)}x | ${(lr.p90 / lk.p90).toFixed(2)}x | ` +
      `${(sk.hit * 100).toFixed(1)}% / ${(lk.hit * 100).toFixed(1)}% | ` +
      `${cores.map((c) => c?.toFixed(2) ?? "n/a").join(", ")}${busy} | ` +
      `${sk.failed + sr.failed + lk.failed + lr.failed} |`,
  );
  json.push({
    spec,
    level,
    load,
    engineSpeedup: ENGINE,
    simulated: sim.modes,
    live: live.modes,
    liveCpu: cpu,
  });
}
console.log(
  `\nsimulated against live (live engine at ${ENGINE}x its speed, times scaled back; ms)\n`,
);
console.log(table.join("\n"));
if (jsonPath) await Deno.writeTextFile(jsonPath, JSON.stringify(json, null, 2) + "\n");
