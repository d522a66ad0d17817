// Rows of bench:routing for tests: round-robin's p90 at 100 ms, the KV router's figures chosen.

import type { ModeSummary } from "./report.ts";
import type { RoutingRow } from "./routing_goals.ts";

/** One mode's summary with the given p90 TTFT (ms) and prefix hit rate. */
export function modeSummary(p90: number, hit: number): ModeSummary {
  return {
    requests: 10,
    failed: 0,
    ttft_ms: { p50: p90 / 2, p90, p99: p90 * 2 },
    itl_ms: { p50: 1, p90: 2 },
    output_tokens_per_s: 100,
    prefix_hit_rate: hit,
    seconds: 1,
    errors: [],
  };
}

/**
 * A row where round-robin's p90 is 100 ms (hit 0.25), the bound 20 ms, the oracle's placements
 * 70 and 50 ms, one fleet-sized LRU cache hits 0.375, and the ceiling is 0.5 unless given.
 */
export function routingRow(
  level: RoutingRow["level"],
  kvP90: number,
  kvHit: number,
  { ceiling = 0.5, trace = "t seed 1" } = {},
): RoutingRow {
  return {
    trace,
    level,
    load: 1,
    ceiling,
    rr: modeSummary(100, 0.25),
    kv: modeSummary(kvP90, kvHit),
    kvPlain: modeSummary(100, 0.3),
    boundP90: 20,
    oracleRr: modeSummary(70, 0.5),
    oracleKv: modeSummary(50, 0.5),
    capacity: { belady: 0.5, lru: 0.375 },
  };
}
