// Seed 000's `Router._cost_function` as a plain function: KV overlap scores, the workers'
// aggregated KV metrics, the prompt length and custom metrics in, a worker id out.

import type { AggregatedMetrics, OverlapScores } from "../../mod.ts";

/** What {@linkcode costFunction} takes: the seed's four arguments plus what `self` held. */
export interface CostFunctionInput {
  /** Matching blocks per worker (the seed's `OverlapScores | None`). */
  scores: Pick<OverlapScores, "scores"> | undefined;
  /** Metrics polled by the KvMetricsAggregator (the seed's `AggregatedMetrics | None`). */
  metrics: AggregatedMetrics | undefined;
  /** Tokens in the request. */
  tokenLength: number;
  /** Arbitrary data from the router (the seed passes `{"my_custom_metric": 42}`). */
  customMetrics?: Record<string, unknown>;
  /** The workers that can take the request (the seed reads them from its worker client). */
  workerIds: readonly string[];
  /** Tokens per KV block (the seed's `self.indexer.block_size()`). */
  blockSize: number;
}

/** Options of {@linkcode costFunction}. */
export interface CostFunctionOptions {
  /** Where the seed's `print` lines go (default: nowhere). */
  log?: (msg: string, fields: Record<string, unknown>) => void;
  /** Source of numbers in [0, 1) for the seed's `random.choice` among ties (default Math.random). */
  random?: () => number;
}

/** The per-worker terms of {@linkcode costFunction}'s logit, for logs and tests. */
export interface WorkerLogit {
  workerId: string;
  /** Cached share of the prompt: matched blocks * block size / prompt tokens, at most 1. */
  hitRate: number;
  gpuCacheUsagePerc: number;
  /** `num_requests_waiting` over the largest among the workers (0 when nobody waits). */
  normalizedWaiting: number;
  /** `2 * hitRate - gpuCacheUsagePerc - normalizedWaiting`: higher is better. */
  logit: number;
}

/**
 * The logit of every worker (see {@linkcode costFunction}), in `workerIds` order.
 * Workers missing from the scores or the metrics count as no hit and no load.
 */
export function workerLogits(input: CostFunctionInput): WorkerLogit[] {
  const { scores, metrics, tokenLength, blockSize } = input;
  const byWorker = new Map((metrics?.endpoints ?? []).map((m) => [m.worker_id, m]));
  let maxWaiting = 0;
  for (const id of input.workerIds) {
    maxWaiting = Math.max(maxWaiting, byWorker.get(id)?.num_requests_waiting ?? 0);
  }
  return input.workerIds.map((workerId) => {
    const blocks = scores?.scores.get(workerId) ?? 0;
    const hitRate = tokenLength > 0 ? Math.min(1, (blocks * blockSize) / tokenLength) : 0;
    const m = byWorker.get(workerId);
    const gpuCacheUsagePerc = m?.gpu_cache_usage_perc ?? 0;
    const normalizedWaiting = maxWaiting > 0 ? (m?.num_requests_waiting ?? 0) / maxWaiting : 0;
    return {
      workerId,
      hitRate,
      gpuCacheUsagePerc,
      normalizedWaiting,
      logit: 2 * hitRate - gpuCacheUsagePerc - normalizedWaiting,
    };
  });
}

/**
 * Picks the worker for a request (seed 000's `_cost_function`). Like the seed it logs each
 * worker's matching blocks and each endpoint's metrics; where the seed then takes
 * `random.choice(worker_ids)` and says "replace this random choice with your custom
 * criteria", this port ranks workers by `2 * hit rate - GPU cache usage - normalised
 * waiting requests` (the criteria of Dynamo's vLLM example router) and keeps the random
 * choice among the best. Unlike the seed, workers with no cached block are candidates too.
 *
 * @param input scores, metrics, prompt length, custom metrics, candidate workers, block size
 * @param options logging and randomness
 * @returns the best worker id, or "" when there is no candidate (the caller then falls
 *   back to its default routing, as seed 003's Processor does)
 * @example
 * ```ts
 * const workerId = costFunction({
 *   scores: await indexer.findMatchesForRequest(tokens, 0),
 *   metrics: await aggregator.getMetrics(),
 *   tokenLength: tokens.length,
 *   customMetrics: { my_custom_metric: 42 },
 *   workerIds: client.instanceIds(),
 *   blockSize: indexer.blockSize(),
 * });
 * ```
 */
export function costFunction(input: CostFunctionInput, options: CostFunctionOptions = {}): string {
  const log = options.log ?? (() => {});
  const random = options.random ?? Math.random;
  for (const [workerId, score] of input.scores?.scores ?? []) {
    log(`${workerId} # of matching KV Blocks of size ${input.blockSize}: ${score}`, {
      worker_id: workerId,
      score,
    });
  }
  for (const m of input.metrics?.endpoints ?? []) log("Endpoint metrics", { ...m });
  const logits = workerLogits(input);
  if (logits.length === 0) return "";
  const best = Math.max(...logits.map((l) => l.logit));
  const top = logits.filter((l) => l.logit === best);
  const picked = top[Math.min(top.length - 1, Math.floor(random() * top.length))]!;
  log("picked worker", {
    worker_id: picked.workerId,
    logit: picked.logit,
    hit_rate: picked.hitRate,
    custom_metrics: input.customMetrics ?? {},
  });
  return picked.workerId;
}
