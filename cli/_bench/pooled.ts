// A percentile of several replays of one trace taken together, for two systems, and how far
// their ratio moves when the replays themselves are drawn again (a bootstrap over replays).
// One replay's p90 on a shared machine moves by more than two good routers differ; the p90 of
// all replays' requests together is the steadier figure, and the interval says whether the
// difference is more than the replays' own spread.

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { percentile, sortedPercentile } from "./report.ts";
import { mulberry32 } from "./synthetic.ts";

/** A pooled percentile of two systems' replays and their ratio. */
export interface PooledRatio {
  /** The percentile of all of the first system's replays together. */
  ours: number;
  /** The same for the second system. */
  reference: number;
  /** `ours / reference`. */
  ratio: number;
  /**
   * The ratio's 5th and 95th percentiles when each system's replays are drawn again with
   * replacement (as many as there are), and the percentile taken over the drawn replays.
   */
  low: number;
  high: number;
}

/** Options of {@linkcode pooledRatio}. */
export interface PooledRatioOptions {
  /** Which percentile (default 90). */
  p?: number;
  /** Bootstrap draws (default 2,000). */
  resamples?: number;
  /** Seed of the draws (default 1): the same inputs give the same interval. */
  seed?: number;
}

/**
 * The percentile of each system's replays pooled, their ratio, and a bootstrap interval of it
 * over replays.
 *
 * @param ours one array of samples per replay (e.g. TTFTs in ms)
 * @param reference the other system's replays of the same trace
 * @throws {InvalidArgumentError} a system without replays, or a replay without samples
 * @example
 * ```ts
 * const r = pooledRatio([[1, 2, 3], [2, 3, 4]], [[2, 4, 6], [4, 6, 8]]);
 * r.ratio; // 0.5
 * ```
 */
export function pooledRatio(
  ours: readonly (readonly number[])[],
  reference: readonly (readonly number[])[],
  options: PooledRatioOptions = {},
): PooledRatio {
  for (const [name, runs] of [["ours", ours], ["reference", reference]] as const) {
    if (runs.length === 0 || runs.some((r) => r.length === 0)) {
      throw new InvalidArgumentError(`pooledRatio: ${name} needs replays with samples`);
    }
  }
  const p = options.p ?? 90;
  const resamples = options.resamples ?? 2_000;
  const random = mulberry32(options.seed ?? 1);
  const pooled = (runs: readonly (readonly number[])[]) => {
    // Typed and sorted without a comparator: the draws below sort thousands of samples each.
    const all = new Float64Array(runs.reduce((n, r) => n + r.length, 0));
    let at = 0;
    for (const run of runs) {
      all.set(run, at);
      at += run.length;
    }
    return sortedPercentile(all.sort(), p);
  };
  const draw = (runs: readonly (readonly number[])[]) =>
    runs.map(() => runs[Math.floor(random() * runs.length)]!);
  const ratios: number[] = [];
  for (let i = 0; i < resamples; i++) ratios.push(pooled(draw(ours)) / pooled(draw(reference)));
  const a = pooled(ours);
  const b = pooled(reference);
  return {
    ours: a,
    reference: b,
    ratio: a / b,
    low: percentile(ratios, 5),
    high: percentile(ratios, 95),
  };
}
