/**
 * How the KV router chooses among candidates, apart from where the candidates come from: busy
 * workers skipped, bounded-load affinity, then the cheapest by cost. Synchronous and pure but
 * for its TTFT model, so that the same decisions run inside {@linkcode KvRouter} and in the
 * virtual-time simulator of `dynamo bench --simulate`.
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { defaultCosts, pickByCost, type WorkerCandidate } from "./scheduler.ts";
import { TtftModel } from "./ttft_model.ts";

/**
 * Requests in flight a worker may hold above the bounded-load factor times the mean: at low
 * load the bound would otherwise be one or two requests and spread every prefix.
 */
export const LOAD_BOUND_SLACK = 2;

/**
 * For a prompt nobody caches, costs up to this fraction above the lowest count as equal, and
 * those workers take such prompts in turn. 1 (within 2x of the cheapest) was the best of 0, 0.05,
 * 0.1, 0.25, 0.5 and 1 in the simulator (`deno task bench:routing`): with no cache to win, spacing
 * arrivals evenly beats sending each to the momentary least loaded, which clumps them on batching
 * engines (no-sharing p90 TTFT 1.08x of round-robin at 0, 1.00x at 1; sharing traces unchanged).
 */
export const COLD_NEAR_TIE = 1;

/**
 * Share of the delay a prompt's uncached prefill adds to requests waiting for their first token
 * that the default cost charges, for prompts some worker caches part of: the requests waiting
 * on the candidate itself, plus as many again as wait on the average candidate (prefill done
 * anywhere is capacity the whole fleet shares, so computing a prefix again on an idle worker is
 * not free once requests queue). Each waiting request is delayed only if it shares a pass with
 * those tokens, which the router cannot tell (some are in the pass in flight already), so a
 * share is counted. 0.25 was the best of 0, 0.25, 0.5, 0.75 and 1 on two seeds per preset (the
 * candidate's own waiting requests alone), and the fleet's mean as weight 1 the simplest of 0,
 * 0.5, 1, 2 and 4 (1 and 2 tied); both were then checked on held-out seeds and parameter sets
 * (BENCHMARKS.md, "Prefill delays the requests waiting").
 */
export const WAITING_DELAY_SHARE = 0.25;

/** Options of {@linkcode RoutingPolicy}. */
export interface RoutingPolicyOptions {
  /**
   * Weight of uncached prefill blocks against decode load. Given (or `queuedPrefillWeight`),
   * the policy uses the reference's weighted cost; left out, the cost is the predicted time to
   * first token ({@linkcode TtftModel}), which needs no weight.
   */
  overlapScoreWeight?: number;
  /** Weight of other requests' queued prefill in the weighted cost (default 1). */
  queuedPrefillWeight?: number;
  /** 0 (default): the cheapest worker; above 0: softmax sampling over normalised costs. */
  temperature?: number;
  /** The TTFT predictor of the default cost (default: a new one). */
  ttftModel?: TtftModel;
  /**
   * Bounded-load affinity: a worker whose requests in flight would pass `loadBound` times the
   * mean (plus {@linkcode LOAD_BOUND_SLACK}) takes no new request while another stays under
   * the bound, so a hot prefix spreads to a few more workers instead of piling on its holder
   * (default 1.5; Infinity turns it off).
   */
  loadBound?: number;
  /** Source of numbers in [0, 1) for ties and sampling (default Math.random). */
  random?: () => number;
}

/** What the policy is told besides the candidates. */
export interface RoutingContext {
  /** Requests in flight on every worker together (the bounded-load mean). */
  totalRequests: number;
  /** Workers over a busy threshold (skipped while another is not). */
  busy?: (candidate: WorkerCandidate) => boolean;
  /** Workers there are in all (default: the candidates'). */
  workers?: number;
}

/** Busy checks, bounded load and the cost, in that order. */
export class RoutingPolicy {
  /** Tokens per KV block. */
  readonly blockSize: number;
  /** The weighted cost's weight of uncached blocks (1 when unused). */
  readonly overlapScoreWeight: number;
  /** The weighted cost's weight of queued prefill (1 when unused). */
  readonly queuedPrefillWeight: number;
  /** Sampling temperature over the normalised costs. */
  readonly temperature: number;
  /** Bounded-load factor (Infinity: off). */
  readonly loadBound: number;
  /** The TTFT predictor of the default cost. */
  readonly ttftModel: TtftModel;
  /** True when the reference's weighted cost is used instead of the predicted TTFT. */
  readonly weighted: boolean;
  readonly #random: () => number;
  #turn = 0;

  /**
   * Creates a policy for workers with blocks of `blockSize` tokens.
   *
   * @param blockSize tokens per KV block
   * @param options cost, temperature, bounded load
   * @throws {InvalidArgumentError} a weight, temperature or bound out of range
   */
  constructor(blockSize: number, options: RoutingPolicyOptions = {}) {
    if (!Number.isInteger(blockSize) || blockSize <= 0) {
      throw new InvalidArgumentError(`blockSize must be a positive integer, got ${blockSize}`);
    }
    const weight = options.overlapScoreWeight ?? 1;
    if (!(weight >= 0 && weight < Infinity)) {
      throw new InvalidArgumentError(`overlapScoreWeight must be finite and >= 0, got ${weight}`);
    }
    const queued = options.queuedPrefillWeight ?? 1;
    if (!(queued >= 0 && queued < Infinity)) {
      throw new InvalidArgumentError(
        `queuedPrefillWeight must be finite and >= 0, got ${queued}`,
      );
    }
    const temperature = options.temperature ?? 0;
    if (!(temperature >= 0)) {
      throw new InvalidArgumentError(`temperature must be >= 0, got ${temperature}`);
    }
    const bound = options.loadBound ?? 1.5;
    if (!(bound >= 1)) throw new InvalidArgumentError(`loadBound must be >= 1, got ${bound}`);
    this.blockSize = blockSize;
    this.overlapScoreWeight = weight;
    this.queuedPrefillWeight = queued;
    this.temperature = temperature;
    this.loadBound = bound;
    this.weighted = options.overlapScoreWeight !== undefined ||
      options.queuedPrefillWeight !== undefined;
    this.ttftModel = options.ttftModel ?? new TtftModel();
    this.#random = options.random ?? Math.random;
  }

  /**
   * The candidates a request may go to: busy workers left out while another is not busy; then
   * workers at the load bound while another is under it.
   *
   * @param all every candidate
   * @param context load in all, busy check
   * @returns a non-empty subset of `all` (all of it when nothing applies)
   */
  eligible(all: readonly WorkerCandidate[], context: RoutingContext): WorkerCandidate[] {
    let pool = [...all];
    if (context.busy) {
      const free = pool.filter((c) => !context.busy!(c));
      if (free.length > 0) pool = free;
    }
    if (this.loadBound < Infinity && pool.length > 1) {
      const mean = (context.totalRequests + 1) / (context.workers ?? all.length);
      const bound = this.loadBound * mean + LOAD_BOUND_SLACK;
      const under = pool.filter((c) => c.activeRequests + 1 <= bound);
      if (under.length > 0) pool = under;
    }
    return pool;
  }

  /**
   * The cost of each candidate, lower is better: predicted TTFT in ms, or the weighted cost.
   *
   * @param candidates the workers and their loads
   * @returns cost per worker id
   */
  costs(candidates: readonly WorkerCandidate[]): Map<string, number> {
    return this.weighted
      ? defaultCosts(candidates, this.overlapScoreWeight, this.queuedPrefillWeight)
      : predictedTtftCosts(candidates, this.blockSize, this.ttftModel);
  }

  /**
   * Picks a worker: eligible candidates, then the cheapest (or sampled by temperature).
   *
   * @param all every candidate (at least one)
   * @param context load in all, busy check
   * @returns the chosen candidate
   * @throws {InvalidArgumentError} no candidates
   */
  choose(all: readonly WorkerCandidate[], context: RoutingContext): WorkerCandidate {
    return this.decide(all, context).chosen;
  }

  /**
   * {@linkcode choose}, with the costs the choice was made from (for a decision log).
   *
   * @param all every candidate (at least one)
   * @param context load in all, busy check
   * @returns the chosen candidate, and the cost of each eligible one (the others have none)
   * @throws {InvalidArgumentError} no candidates
   */
  decide(
    all: readonly WorkerCandidate[],
    context: RoutingContext,
  ): { chosen: WorkerCandidate; costs: Map<string, number> } {
    const eligible = this.eligible(all, context);
    const costs = this.costs(eligible);
    const id = this.pick(eligible, costs);
    return { chosen: eligible.find((c) => c.workerId === id)!, costs };
  }

  /**
   * Picks from costs. A prompt no candidate holds any of, at temperature 0, goes in turn to the
   * workers within {@linkcode COLD_NEAR_TIE} of the lowest cost: with nothing cached to win, even
   * spacing beats sending each to the momentary least loaded (which clumps arrivals on batching
   * engines). Not when the candidates say when their passes end: then the cost knows which
   * worker starts the prompt first. Otherwise the cheapest, as {@linkcode pickByCost}.
   *
   * @param candidates the candidates the costs are for
   * @param costs cost per worker id, lower is better
   * @returns the picked worker id
   * @throws {InvalidArgumentError} no costs, or a cost that is not a finite number
   */
  pick(candidates: readonly WorkerCandidate[], costs: Map<string, number>): string {
    const cold = candidates.every((c) => c.overlapBlocks === 0 && c.passLeftMs === undefined);
    if (!cold || this.temperature > 0) {
      return pickByCost(costs, this.temperature, this.#random);
    }
    const min = Math.min(...costs.values());
    pickByCost(costs, 0, () => 0); // validates every cost
    const near = [...costs].filter(([, v]) => v <= min + Math.abs(min) * COLD_NEAR_TIE)
      .map(([id]) => id).sort();
    return near[this.#turn++ % near.length]!;
  }
}

/**
 * A candidate's cached prefix, from what the indexes say of one worker: the blocks of the request
 * on its device, those it holds in any tier (`held`; host memory included), and those it is still
 * prefilling for this router (`soon`), capped at the request's blocks. Blocks below the device
 * count as cached, to be copied up first: `onboardBlocks` of them at `onboardMsPerBlock`, where
 * the worker says what a block takes.
 *
 * @param counts leading blocks of the request per source (left out: none)
 * @param requestBlocks the request's blocks
 * @param onboardMsPerBlock the worker's copy time per block from host memory, if it says
 * @returns the candidate's `overlapBlocks`, and its copy up where priced
 * @example
 * ```ts
 * cachedPrefix({ device: 2, held: 6 }, 8, 0.05);
 * // { overlapBlocks: 6, onboardBlocks: 4, onboardMsPerBlock: 0.05 }
 * ```
 */
export function cachedPrefix(
  counts: { device: number; held?: number; soon?: number },
  requestBlocks: number,
  onboardMsPerBlock?: number,
): Pick<WorkerCandidate, "overlapBlocks" | "onboardBlocks" | "onboardMsPerBlock"> {
  const device = Math.min(counts.device, requestBlocks);
  const stored = Math.min(Math.max(counts.device, counts.held ?? 0), requestBlocks);
  const overlapBlocks = Math.max(stored, Math.min(counts.soon ?? 0, requestBlocks));
  return onboardMsPerBlock === undefined || stored === device
    ? { overlapBlocks }
    : { overlapBlocks, onboardBlocks: stored - device, onboardMsPerBlock };
}

/**
 * The candidates as they stand when workers can copy cached KV blocks from each other (peer KV
 * fetch): each candidate that can fetch (`fetchMsPerBlock` set) and caches less of the prompt
 * than another worker that can serve it does gets that worker's prefix, as `fetchBlocks` to copy
 * from `fetchFrom`; the cost charges the copy's time. Only blocks a worker holds now count as a
 * source (`resident`: the indexer's matches, not prompts still being prefilled, which cannot be
 * copied yet). Candidates that cannot fetch are returned as they are.
 *
 * @param candidates the workers and their own overlaps
 * @param resident blocks of the prompt's prefix each worker holds now
 * @returns the candidates, those that would fetch with their overlap raised
 * @example
 * ```ts
 * const [a, b] = withPeerFetch([
 *   { workerId: "a", overlapBlocks: 8, requestBlocks: 10, activeBlocks: 0, prefillBlocks: 0,
 *     activeRequests: 0, fetchMsPerBlock: 0.1 },
 *   { workerId: "b", overlapBlocks: 0, requestBlocks: 10, activeBlocks: 0, prefillBlocks: 0,
 *     activeRequests: 0, fetchMsPerBlock: 0.1 },
 * ], new Map([["a", 8]]));
 * b.fetchBlocks; // 8, from "a"
 * ```
 */
export function withPeerFetch(
  candidates: readonly WorkerCandidate[],
  resident: ReadonlyMap<string, number>,
): WorkerCandidate[] {
  let best = 0;
  let from: string | undefined;
  for (const c of candidates) {
    const held = Math.min(resident.get(c.workerId) ?? 0, c.requestBlocks);
    if (c.fetchMsPerBlock !== undefined && held > best) {
      best = held;
      from = c.workerId;
    }
  }
  return candidates.map((c) =>
    c.fetchMsPerBlock === undefined || from === undefined || c.overlapBlocks >= best
      ? c
      : { ...c, overlapBlocks: best, fetchBlocks: best - c.overlapBlocks, fetchFrom: from }
  );
}

/**
 * How long a request waits on a candidate before its prefill can start, beyond what the
 * predicted TTFT counts: the copy of a fetched prefix (`fetch` ms), and with pass timing the pass
 * in flight, in place of the predicted time of the prefill in it. A copy that outlasts the pass
 * lands while a later pass runs, so it waits for that one too: half of a pass, taking the one in
 * flight as the measure.
 */
function startWait(
  c: WorkerCandidate,
  fetch: number,
  msPerToken: number,
  blockSize: number,
): number {
  if (c.passLeftMs === undefined) return fetch;
  const inFlight = msPerToken * Math.min(c.passPrefillTokens ?? 0, c.prefillBlocks * blockSize);
  const wait = fetch > c.passLeftMs ? fetch + (c.passMs ?? c.passLeftMs) / 2 : c.passLeftMs;
  return wait - inFlight;
}

/**
 * The default cost: each candidate's predicted time to first token, from the prefill it would
 * do (its queue plus this request's uncached tokens) and the KV its running requests hold
 * with this one added; plus, for a prompt some candidate caches part of, the delay its
 * uncached tokens add to waiting requests ({@linkcode WAITING_DELAY_SHARE}). Where known, the
 * time to copy blocks from a peer (`fetchBlocks`), and the time left of the worker's pass in
 * flight in place of the predicted time of the prefill in it (`passLeftMs`,
 * `passPrefillTokens`): the queue term counts that prefill as work still to do, the time left
 * says when it ends.
 *
 * @param candidates the workers and their loads
 * @param blockSize tokens per KV block
 * @param model the TTFT predictor
 * @returns predicted ms per worker id
 * @example
 * ```ts
 * import { TtftModel } from "./ttft_model.ts";
 * predictedTtftCosts([{ workerId: "w", overlapBlocks: 2, requestBlocks: 4, activeBlocks: 0,
 *   prefillBlocks: 0, activeRequests: 0 }], 16, new TtftModel());
 * ```
 */
export function predictedTtftCosts(
  candidates: readonly WorkerCandidate[],
  blockSize: number,
  model: TtftModel,
): Map<string, number> {
  const costs = new Map<string, number>();
  // A prompt nobody caches goes by the cold rule of RoutingPolicy.pick: no delay term there.
  const cold = candidates.every((c) => c.overlapBlocks === 0);
  const msPerToken = model.coefficients().msPerKTokens / 1000;
  let meanWaiting = 0;
  for (const c of candidates) meanWaiting += c.waitingRequests ?? 0;
  meanWaiting /= candidates.length;
  for (const c of candidates) {
    const prefillBlocks = c.prefillBlocks + c.requestBlocks - c.overlapBlocks;
    const own = model.predict({
      prefillTokens: prefillBlocks * blockSize,
      activeBlocks: c.activeBlocks + c.requestBlocks,
    });
    const waiting = (c.waitingRequests ?? 0) + meanWaiting;
    const delay = cold
      ? 0
      : WAITING_DELAY_SHARE * waiting * msPerToken * (c.requestBlocks - c.overlapBlocks) *
        blockSize;
    const fetch = (c.fetchBlocks ?? 0) * (c.fetchMsPerBlock ?? 0);
    // Copied up as the request is admitted: part of its pass, as its own prefill is.
    const onboard = (c.onboardBlocks ?? 0) * (c.onboardMsPerBlock ?? 0);
    costs.set(c.workerId, own + onboard + delay + startWait(c, fetch, msPerToken, blockSize));
  }
  return costs;
}
