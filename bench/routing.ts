// deno-lint-ignore-file no-console -- a program that prints
// `deno task bench:routing`: the KV router at its default settings against round-robin on traces
// it was not tuned on, in virtual time (`dynamo bench --simulate`'s simulator: the mockers' own
// scheduler and step times, the router's own policy and TTFT model). Traces: the synthetic
// presets (multi-tenant, long-system, many-tenants) and the no-sharing one, each with several
// seeds, and the Mooncake conversation trace (with the mocker's default 16,384 KV blocks per
// worker, and with 400,000, where eviction no longer decides the hit rate). Loads come from round-robin itself, per trace:
// "near saturation" is the load factor at which round-robin's p90 TTFT reaches 4x its unloaded
// p90 (found by bisection), "moderate" half of that. Nothing about the router changes per trace.
//
// Lower bounds (part of every row): `bound`, each request alone on a worker of its own holding
// every prefix the ceiling counts for it (no queue, no pass in flight: see cli/_bench/oracle.ts),
// a bound no router can beat; and the `oracle` fleet, the same 8 workers and scheduler where the
// worker a request goes to is first given every block of its prefix that any worker computed
// (one shared cache), placed by round-robin and by the KV router's policy: what perfect cache
// reuse would give with those placements (not a bound: a better placement could do better).
// And for the hit rate, `capacity`: what one cache as large as the whole fleet hits with the best
// possible eviction (Belady's, an upper bound for any router with these caches) and with the
// workers' own least-recently-used eviction (cli/_bench/capacity.ts).
//
// The kv side runs as `dynamo run out=mocker` does by default: the mockers announce their passes
// and copy prefixes from each other when the router says so; each row also gives the same router
// with workers that do neither (`kvPlain`), as with engines that offer neither.
//
// Flags: `--help` lists them (the checkFlags call below).

import { simulate } from "../cli/_bench/simulate.ts";
import { parseSyntheticSpec, synthesizeTrace, SYNTHETIC_PRESETS } from "../cli/_bench/synthetic.ts";
import { loadTrace, prefixCeiling, type TraceRequest } from "../cli/_bench/trace.ts";
import { type ModeSummary, percentile, summarizeMode } from "../cli/_bench/report.ts";
import { ttftLowerBounds } from "../cli/_bench/oracle.ts";
import { capacityHitRates } from "../cli/_bench/capacity.ts";
import {
  groupRows,
  hitGoal,
  meetsGoals,
  p90Goal,
  renderRoutingGoals,
  type RoutingRow,
  routingRowsOf,
} from "../cli/_bench/routing_goals.ts";
import { DEFAULT_NUM_GPU_BLOCKS, defaultHostBlocks } from "../llm/engines/mocker/block_manager.ts";
import { checkFlags, flag, flagValues } from "./_stats.ts";

checkFlags(
  "deno task bench:routing",
  "The KV router at its defaults against round-robin, in virtual time, at two loads per trace.",
  {
    "--seeds N": "seeds per synthetic trace (default 5; 2 with --quick)",
    "--workers N": "simulated mocker workers (default 8)",
    "--mooncake-requests N":
      "the Mooncake trace's first N requests (default 3000; 1000 with --quick)",
    "--quick": "2 seeds, 1,000 Mooncake requests",
    "--held-out": "the 72 held-out rows (BENCHMARKS.md) instead of the standing ones",
    "--synthetic SPEC": "instead, only this synthetic trace (as dynamo bench --synthetic takes " +
      "it), seeds 1..--seeds; repeatable",
    "--traces REGEX": "only the traces whose names match",
    "--kv-fetch-ms-per-block MS": "the mockers' copy time per KV block (default the mocker's)",
    "--host-blocks N": "KV blocks in each mocker's host tier (default 4 per GPU block; 0: none)",
    "--reference-cost": "the kv side with the reference's weighted cost at weight 1",
    "--no-demote": "sources keep the blocks peers copy in LRU order (an engine not told of copies)",
    "--json PATH": "write every row there",
    "--svg PATH": "draw every row against its goals there (a dot chart)",
    "--from PATH": "no runs: the rows of a saved --json file, printed (and drawn with --svg) again",
  },
);

/** A bad flag value: says which and exits 2. */
function fail(message: string): never {
  console.error(`bench:routing: ${message} (--help lists the flags)`);
  Deno.exit(2);
}

/** A flag's whole number, at least `min`, or its default. */
function count(name: string, fallback: number, min: number): number {
  const raw = flag(`--${name}`);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) {
    fail(`--${name} must be a whole number >= ${min}, got ${raw}`);
  }
  return n;
}

const quick = Deno.args.includes("--quick");
const SEEDS = count("seeds", quick ? 2 : 5, 1);
const WORKERS = count("workers", 8, 1);
const MOONCAKE = count("mooncake-requests", quick ? 1000 : 3000, 1);
const jsonPath = flag("--json");
// The mockers' copy time per KV block (default: the mocker's).
const fetchFlag = flag("--kv-fetch-ms-per-block");
const FETCH_MS = fetchFlag === undefined ? undefined : Number(fetchFlag);
if (FETCH_MS !== undefined && !(FETCH_MS >= 0 && FETCH_MS < Infinity)) {
  fail(`--kv-fetch-ms-per-block must be a number of ms >= 0, got ${fetchFlag}`);
}
// KV blocks in each mocker's host tier (default: the mocker's).
const HOST_BLOCKS = flag("--host-blocks") === undefined ? undefined : count("host-blocks", 0, 0);
const SYNTHETIC = flagValues("--synthetic");
const HELD_OUT = Deno.args.includes("--held-out");
if (HELD_OUT && SYNTHETIC.length > 0) fail("--held-out and --synthetic name different traces");
// --reference-cost: the kv side uses the reference's weighted cost at weight 1 (the old default).
const policy = Deno.args.includes("--reference-cost") ? { overlapScoreWeight: 1 } : undefined;

/** The held-out parameter sets: name, `--synthetic` spec, seeds. */
const HELD_OUT_SETS: Array<[string, string, number]> = [
  [
    "A",
    "multi-tenant,tenants=12,systemTokens=3000,turns=3,userTokens=300,outputTokens=200,sessionsPerS=3,burstiness=1",
    3,
  ],
  [
    "B",
    "multi-tenant,tenants=20,systemTokens=1200,usersPerTenant=8,turns=5,userTokens=150,outputTokens=250,thinkS=5,sessionsPerS=1.5,burstiness=3",
    3,
  ],
  [
    "C",
    "multi-tenant,tenants=6,systemTokens=2500,usersPerTenant=20,turns=5,userTokens=120,outputTokens=100,thinkS=12,sessionsPerS=2.5,burstiness=1.5",
    3,
  ],
  [
    "D",
    "multi-tenant,tenants=48,systemTokens=600,usersPerTenant=3,turns=8,userTokens=250,outputTokens=180,thinkS=6,sessionsPerS=2,burstiness=0",
    2,
  ],
];

/** What a row's run varies besides the mode and load. */
interface RunOptions {
  /** KV blocks per worker (default the mocker's). */
  numGpuBlocks?: number;
  /** Routers with replica sync taking turns (default 1). */
  routers?: number;
  /** The shared-cache oracle. */
  sharedCache?: boolean;
  /** Workers that neither announce their passes nor copy KV from each other. */
  plain?: boolean;
}

function run(
  trace: TraceRequest[],
  mode: "kv" | "round-robin",
  load: number,
  { numGpuBlocks, routers = 1, sharedCache = false, plain = false }: RunOptions = {},
): ModeSummary {
  const r = simulate(trace, {
    workers: WORKERS,
    mode,
    load,
    blockSize: 16,
    policy,
    numGpuBlocks,
    hostBlocks: HOST_BLOCKS,
    routers,
    replicaSync: routers > 1,
    sharedCache,
    demoteCopied: !Deno.args.includes("--no-demote"),
    ...(plain ? { passTiming: false, kvFetchMsPerBlock: null } : { kvFetchMsPerBlock: FETCH_MS }),
  });
  return summarizeMode(r.results, r.seconds);
}

/** The load at which round-robin's p90 TTFT is 4x its unloaded p90. */
function saturation(trace: TraceRequest[], blocks?: number): number {
  const base = run(trace, "round-robin", 0.05, { numGpuBlocks: blocks }).ttft_ms.p90;
  let lo = 0.05;
  let hi = 1;
  while (run(trace, "round-robin", hi, { numGpuBlocks: blocks }).ttft_ms.p90 < 4 * base) {
    lo = hi;
    hi *= 2;
    if (hi > 4096) break;
  }
  for (let i = 0; i < 8; i++) {
    const mid = (lo + hi) / 2;
    if (run(trace, "round-robin", mid, { numGpuBlocks: blocks }).ttft_ms.p90 < 4 * base) lo = mid;
    else hi = mid;
  }
  return hi;
}

/** Two routers with replica sync against one, on one row: hit rate and p90 TTFT ratios. */
interface ReplicaRatio {
  trace: string;
  level: string;
  hitRatio: number;
  p90Ratio: number;
}

/** A run's figures: the fleet's size, its rows, and the replica-sync ratios. */
interface RoutingRun {
  workers: number;
  rows: RoutingRow[];
  replicas: ReplicaRatio[];
}

/** Simulates every row the flags name. */
async function runRows(): Promise<RoutingRun> {
  const traces: Array<[string, TraceRequest[], number?]> = [];
  if (SYNTHETIC.length > 0) {
    // Traces named on the command line, each with seeds 1..--seeds.
    for (const spec of SYNTHETIC) {
      for (let seed = 1; seed <= SEEDS; seed++) {
        let trace: TraceRequest[];
        try {
          trace = synthesizeTrace(parseSyntheticSpec(`${spec},seed=${seed}`));
        } catch (e) {
          fail(`--synthetic ${spec}: ${(e as Error).message}`);
        }
        traces.push([`${spec} seed ${seed}`, trace]);
      }
    }
  } else if (HELD_OUT) {
    // Rows no routing rule was chosen on (BENCHMARKS.md names them): seeds 6-11 of the presets,
    // four more no-sharing seeds, and four parameter sets of multi-tenant traffic.
    for (const name of ["multi-tenant", "long-system", "many-tenants"]) {
      for (let seed = 6; seed <= 11; seed++) {
        traces.push([
          `${name} seed ${seed}`,
          synthesizeTrace({ ...SYNTHETIC_PRESETS[name]!, seed }),
        ]);
      }
    }
    for (const seed of [6, 7, 9, 10]) {
      traces.push([
        `no-sharing seed ${seed}`,
        synthesizeTrace({ ...SYNTHETIC_PRESETS["no-sharing"]!, seed }),
      ]);
    }
    for (const [set, spec, seeds] of HELD_OUT_SETS) {
      for (let seed = 1; seed <= seeds; seed++) {
        traces.push([
          `set ${set} seed ${seed}`,
          synthesizeTrace(parseSyntheticSpec(`${spec},seed=${seed}`)),
        ]);
      }
    }
    // The rest of the Mooncake trace, 3,000 requests at a time, with the mocker's default caches.
    const all = await loadTrace(
      new URL("./data/mooncake_conversation_trace.jsonl", import.meta.url).pathname,
    );
    for (let from = 3000; from + 3000 <= all.length; from += 3000) {
      traces.push([`mooncake (requests ${from}-${from + 2999})`, all.slice(from, from + 3000)]);
    }
  } else {
    for (const name of ["multi-tenant", "long-system", "many-tenants", "no-sharing"]) {
      for (let seed = 1; seed <= SEEDS; seed++) {
        traces.push([
          `${name} seed ${seed}`,
          synthesizeTrace({ ...SYNTHETIC_PRESETS[name]!, seed }),
        ]);
      }
    }
    const mooncake = await loadTrace(
      new URL("./data/mooncake_conversation_trace.jsonl", import.meta.url).pathname,
      { maxRequests: MOONCAKE },
    );
    traces.push([`mooncake (first ${mooncake.length})`, mooncake]);
    // The same with caches large enough that routing, not eviction, decides what is reused.
    traces.push([`mooncake (first ${mooncake.length}), 400k blocks`, mooncake, 400_000]);
  }

  // --traces REGEX: only the traces whose names match.
  const only = flag("--traces");
  if (only !== undefined) {
    let re: RegExp;
    try {
      re = new RegExp(only);
    } catch (e) {
      fail(`--traces: ${(e as Error).message}`);
    }
    traces.splice(0, traces.length, ...traces.filter(([name]) => re.test(name)));
  }

  const rows: RoutingRow[] = [];
  // Two routers (frontends) with replica sync, taking turns with the requests, on each synthetic
  // sharing trace's first seed: their hit rate and p90 TTFT against one router's.
  const replicas: ReplicaRatio[] = [];
  for (const [name, trace, blocks] of traces) {
    const sat = saturation(trace, blocks);
    const ceiling = prefixCeiling(trace).tokens;
    const boundP90 = percentile(ttftLowerBounds(trace, 16), 90);
    // Both tiers: the host's blocks are the worker's too.
    const gpu = blocks ?? DEFAULT_NUM_GPU_BLOCKS;
    const capacity = capacityHitRates(
      trace,
      16,
      WORKERS * (gpu + (HOST_BLOCKS ?? defaultHostBlocks(gpu))),
    );
    for (const [level, load] of [["moderate", sat / 2], ["saturation", sat]] as const) {
      const row = {
        trace: name,
        level,
        load,
        ceiling,
        rr: run(trace, "round-robin", load, { numGpuBlocks: blocks }),
        kv: run(trace, "kv", load, { numGpuBlocks: blocks }),
        kvPlain: run(trace, "kv", load, { numGpuBlocks: blocks, plain: true }),
        boundP90,
        oracleRr: run(trace, "round-robin", load, { numGpuBlocks: blocks, sharedCache: true }),
        oracleKv: run(trace, "kv", load, { numGpuBlocks: blocks, sharedCache: true }),
        capacity,
      };
      rows.push(row);
      if (name.endsWith(" seed 1") && row.ceiling > 0) {
        const two = run(trace, "kv", load, { numGpuBlocks: blocks, routers: 2 });
        replicas.push({
          trace: name,
          level,
          hitRatio: two.prefix_hit_rate / row.kv.prefix_hit_rate,
          p90Ratio: two.ttft_ms.p90 / row.kv.ttft_ms.p90,
        });
      }
      const hit = ceiling > 0
        ? `${(row.kv.prefix_hit_rate / ceiling * 100).toFixed(0)}% of ceiling`
        : "n/a (nothing shared)";
      console.error(
        `[routing] ${name}, ${level} (load ${load.toFixed(2)}): p90 TTFT rr/kv ${
          (row.rr.ttft_ms.p90 / row.kv.ttft_ms.p90).toFixed(2)
        }x, kv hit ${hit}; kv/rr p90 ${
          (row.kv.ttft_ms.p90 / row.rr.ttft_ms.p90).toFixed(2)
        }x, bound ${(boundP90 / row.rr.ttft_ms.p90).toFixed(2)}x, oracle rr ${
          (row.oracleRr.ttft_ms.p90 / row.rr.ttft_ms.p90).toFixed(2)
        }x kv ${
          (row.oracleKv.ttft_ms.p90 / row.rr.ttft_ms.p90).toFixed(2)
        }x; without pass timing ` +
          `and fetch ${(row.kvPlain.ttft_ms.p90 / row.rr.ttft_ms.p90).toFixed(2)}x`,
      );
    }
  }
  return { workers: WORKERS, rows, replicas };
}

/** The rows of a saved `--json` file (`--from`). */
async function savedRows(path: string): Promise<RoutingRun> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    fail(`--from ${path}: ${(e as Error).message}`);
  }
  try {
    const doc = JSON.parse(text) as { workers?: number; replicaSync?: ReplicaRatio[] };
    return {
      workers: doc.workers ?? WORKERS,
      rows: routingRowsOf(doc),
      replicas: doc.replicaSync ?? [],
    };
  } catch (e) {
    fail(`--from ${path}: ${(e as Error).message}`);
  }
}

const from = flag("--from");
if (from !== undefined) {
  const runFlags = ["--held-out", "--synthetic", "--traces", "--quick", "--seeds", "--workers"];
  const given = runFlags.filter((f) => Deno.args.includes(f));
  if (given.length > 0) fail(`--from prints a saved run: ${given.join(", ")} would not apply`);
}
const { workers, rows, replicas } = from === undefined ? await runRows() : await savedRows(from);

console.log(`\nKV router (defaults) vs round-robin, ${workers} simulated mocker workers`);
console.log(
  "| trace | load | RR p90 TTFT ms | KV p90 TTFT ms | KV / RR p90 | KV without pass timing and fetch: / RR p90, hit / ceiling | bound / RR p90 | oracle RR, KV / RR p90 | ceiling | KV hit / ceiling | oracle hit / ceiling | RR hit / ceiling | fleet-sized cache, Belady / LRU hit / ceiling | failed |",
);
console.log(
  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
);
for (const r of rows) {
  const pct = (x: number) => r.ceiling > 0 ? `${(x / r.ceiling * 100).toFixed(0)}%` : "n/a";
  console.log(
    `| ${r.trace} | ${r.level} (x${r.load.toFixed(2)}) | ${r.rr.ttft_ms.p90.toFixed(0)} | ${
      r.kv.ttft_ms.p90.toFixed(0)
    } | ${(r.kv.ttft_ms.p90 / r.rr.ttft_ms.p90).toFixed(2)}x | ${
      (r.kvPlain.ttft_ms.p90 / r.rr.ttft_ms.p90).toFixed(2)
    }x, ${pct(r.kvPlain.prefix_hit_rate)} | ${(r.boundP90 / r.rr.ttft_ms.p90).toFixed(2)}x | ${
      (r.oracleRr.ttft_ms.p90 / r.rr.ttft_ms.p90).toFixed(2)
    }x, ${(r.oracleKv.ttft_ms.p90 / r.rr.ttft_ms.p90).toFixed(2)}x | ${
      (r.ceiling * 100).toFixed(1)
    }% | ${pct(r.kv.prefix_hit_rate)} | ${pct(r.oracleRr.prefix_hit_rate)} | ${
      pct(r.rr.prefix_hit_rate)
    } | ${pct(r.capacity.belady)} / ${pct(r.capacity.lru)} | ${r.kv.failed + r.rr.failed} |`,
  );
}

console.log("\nPer trace family and load (KV / RR p90 and KV hit / ceiling: mean, worst):");
console.log("| trace | load | rows | KV / RR p90 | KV hit / ceiling | rows meeting both goals |");
console.log("| --- | --- | ---: | ---: | ---: | ---: |");
for (const g of groupRows(rows)) {
  const hit = g.hit
    ? `${(g.hit.mean * 100).toFixed(0)}%, ${(g.hit.worst * 100).toFixed(0)}%`
    : "n/a (nothing shared)";
  console.log(
    `| ${g.group} | ${g.level} | ${g.rows} | ${g.p90.mean.toFixed(2)}x, ${
      g.p90.worst.toFixed(2)
    }x | ${hit} | ${g.met} of ${g.rows} |`,
  );
}

// The issue's goals, checked per row (cli/_bench/routing_goals.ts).
const met = rows.filter((r) => meetsGoals(r)).length;
console.log(
  `\ngoals met in ${met} of ${rows.length} rows (moderate: hit >= 90% of ceiling and p90 <= 0.6x ` +
    `RR; saturation: hit >= 85% and p90 >= 3x better; no-sharing: p90 within 5% of RR)`,
);
console.log(
  `without pass timing and peer fetch: goals met in ${
    rows.filter((r) => meetsGoals(r, r.kvPlain)).length
  } of ${rows.length} rows`,
);
// A row whose bound is above its p90 goal is out of reach.
const unreachable = rows.filter((r) => r.boundP90 > p90Goal(r) * r.rr.ttft_ms.p90);
const oracleMisses = rows.filter((r) =>
  Math.min(r.oracleRr.ttft_ms.p90, r.oracleKv.ttft_ms.p90) > p90Goal(r) * r.rr.ttft_ms.p90
);
console.log(
  `p90 goal below the lower bound (no router reaches it) in ${unreachable.length} of ${rows.length} rows` +
    (unreachable.length ? `: ${unreachable.map((r) => `${r.trace} ${r.level}`).join("; ")}` : ""),
);
console.log(
  `p90 goal missed by the shared-cache oracle with both placements in ${oracleMisses.length} of ` +
    `${rows.length} rows` +
    (oracleMisses.length ? `: ${oracleMisses.map((r) => `${r.trace} ${r.level}`).join("; ")}` : ""),
);
// The hit goal against what caches of the fleet's size can hit at all.
const hitShare = (r: RoutingRow) => r.ceiling * (hitGoal(r) ?? 0);
const overCapacity = rows.filter((r) => r.ceiling > 0 && r.capacity.belady < hitShare(r));
const overLru = rows.filter((r) => r.ceiling > 0 && r.capacity.lru < hitShare(r));
console.log(
  `hit goal above Belady's bound for the fleet's cache size (no router reaches it) in ` +
    `${overCapacity.length} of ${rows.length} rows` +
    (overCapacity.length ? `: ${overCapacity.map((r) => `${r.trace} ${r.level}`).join("; ")}` : ""),
);
console.log(
  `hit goal above one fleet-sized LRU cache's hit rate in ${overLru.length} of ${rows.length} rows` +
    (overLru.length ? `: ${overLru.map((r) => `${r.trace} ${r.level}`).join("; ")}` : ""),
);
console.log("\nTwo routers with replica sync against one (hit rate, p90 TTFT):");
for (const r of replicas) {
  console.log(
    `  ${r.trace}, ${r.level}: hit ${(r.hitRatio * 100).toFixed(0)}% of one router's, p90 ${
      r.p90Ratio.toFixed(2)
    }x`,
  );
}
const svgPath = flag("--svg");
if (svgPath) {
  const title = `bench:routing: the KV router at its defaults against its goals, ${workers} ` +
    `simulated mocker workers`;
  await Deno.writeTextFile(svgPath, renderRoutingGoals(rows, title));
}
if (jsonPath) {
  await Deno.writeTextFile(
    jsonPath,
    JSON.stringify({ workers, rows, replicaSync: replicas }, null, 2) + "\n",
  );
}
