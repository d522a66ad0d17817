/**
 * Predicted time to first token: what a request would wait on a worker, from the prompt tokens
 * that worker must still prefill (its queue plus this request's uncached tokens) and the KV its
 * running requests hold (each forward pass also decodes them). A cost in milliseconds needs no
 * exchange rate between cache hits and load: the router learns the rate from the TTFTs it sees.
 *
 * The model is linear, `ttft ≈ a + b·prefillTokens + c·activeBlocks`, fitted online by recursive
 * least squares with forgetting (recent requests count most, so a change of load or engine
 * shows within a few hundred requests). Until it has seen enough, or while the fit says a
 * prefill costs nothing, it predicts with a prior; a load that seems to save time (noise) counts
 * as a small cost, a twentieth of the prefill rate.
 *
 * Which worker is cheapest depends on the ratio of the two rates (what one uncached token is
 * worth in KV blocks of load), and the load rate is the one the observations often barely
 * determine: on a busy fleet most TTFTs are hits whose time is queueing and noise, and the
 * running KV varies little. In runs of one trace (BENCHMARKS.md) fits of 50-300 requests put it
 * anywhere from 0 to 163 ms per 1,000 blocks while the prefill rate stayed within 1-6 ms per
 * 1,000 tokens, and the cache hits with it. So the fitted load rate is shrunk toward the prior's
 * ratio times the fitted prefill rate, in proportion to its own sampling variance (the errors'
 * variance times the least-squares covariance) against a prior spread of `loadRateSpread` times
 * that value: a rate the observations determine stands as fitted; one they do not stays near the
 * prior's ratio.
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";

/** Options of {@linkcode TtftModel}. */
export interface TtftModelOptions {
  /**
   * Prior ms per 1,000 uncached prompt tokens (default 20: a mid-size model's prefill on one
   * GPU). Only its ratio to `priorMsPerKBlocks` matters for routing until the fit takes over.
   */
  priorMsPerKTokens?: number;
  /** Prior ms per 1,000 KV blocks held by running requests (default 20). */
  priorMsPerKBlocks?: number;
  /** Weight of older observations per new one, in (0, 1] (default 0.995: ~200 requests). */
  forgetting?: number;
  /** Observations before the fit replaces the prior (default 32). */
  warmup?: number;
  /**
   * Spread of the prior on the load rate, as a multiple of its centre (the prior's ratio of the
   * two rates times the fitted prefill rate): how far the observations must pull before a load
   * rate unlike the prior's counts (default 2; Infinity: the fitted rate as it is).
   */
  loadRateSpread?: number;
}

/** What the model predicts from. */
export interface TtftFeatures {
  /** Prompt tokens the worker must prefill before this request's first token (its own too). */
  prefillTokens: number;
  /** KV blocks held by the worker's running requests (this one included). */
  activeBlocks: number;
}

/** Coefficients in ms: intercept, per 1,000 prefill tokens, per 1,000 active blocks. */
export interface TtftCoefficients {
  /** ms regardless of the work (network, scheduling). */
  intercept: number;
  /** ms per 1,000 tokens to prefill. */
  msPerKTokens: number;
  /** ms per 1,000 KV blocks of running requests. */
  msPerKBlocks: number;
  /** Whether these come from observations (true) or the prior. */
  fitted: boolean;
}

/**
 * A per-engine TTFT predictor, calibrated from observed first tokens.
 *
 * @example
 * ```ts
 * const model = new TtftModel();
 * model.observe({ prefillTokens: 2000, activeBlocks: 300 }, 48);
 * model.predict({ prefillTokens: 500, activeBlocks: 1200 }); // ms (from the prior until warm)
 * ```
 */
export class TtftModel {
  readonly #prior: [number, number, number];
  readonly #lambda: number;
  readonly #warmup: number;
  readonly #spread: number;
  #theta: [number, number, number];
  // 3x3 inverse-covariance-like matrix of recursive least squares, row-major.
  #p: number[];
  #seen = 0;
  /**
   * The errors' variance: a forgetting-weighted mean of each prediction's squared error scaled
   * by what the fit's own uncertainty adds to it (λ / (λ + x'Px)), so the first predictions,
   * made before anything was learnt, do not count as noise.
   */
  #noiseSum = 0;
  #noiseWeight = 0;
  /** What predictions use: the prior, or the fit as `#refresh` makes it usable. */
  #current!: [number, number, number];
  #currentFitted = false;

  /**
   * Creates a model that predicts with the prior until it has seen `warmup` first tokens.
   *
   * @param options prior rates, forgetting, warm-up
   * @throws {InvalidArgumentError} a rate that is not a finite number > 0, forgetting outside
   *   (0, 1], a negative warm-up, or a spread that is not > 0
   */
  constructor(options: TtftModelOptions = {}) {
    const b = options.priorMsPerKTokens ?? 20;
    const c = options.priorMsPerKBlocks ?? 20;
    for (const [name, v] of [["priorMsPerKTokens", b], ["priorMsPerKBlocks", c]] as const) {
      if (!(v > 0) || !Number.isFinite(v)) {
        throw new InvalidArgumentError(`${name} must be a finite number > 0, got ${v}`);
      }
    }
    const lambda = options.forgetting ?? 0.995;
    if (!(lambda > 0 && lambda <= 1)) {
      throw new InvalidArgumentError(`forgetting must be in (0, 1], got ${lambda}`);
    }
    const warmup = options.warmup ?? 32;
    if (!Number.isInteger(warmup) || warmup < 0) {
      throw new InvalidArgumentError(`warmup must be a whole number >= 0, got ${warmup}`);
    }
    const spread = options.loadRateSpread ?? 2;
    if (!(spread > 0)) {
      throw new InvalidArgumentError(`loadRateSpread must be > 0, got ${spread}`);
    }
    this.#prior = [0, b, c];
    this.#theta = [0, b, c];
    this.#lambda = lambda;
    this.#warmup = warmup;
    this.#spread = spread;
    this.#p = [1e4, 0, 0, 0, 1e4, 0, 0, 0, 1e4];
    this.#refresh();
  }

  /** Observations so far. */
  get observations(): number {
    return this.#seen;
  }

  /** The coefficients predictions use now. */
  coefficients(): TtftCoefficients {
    const [a, b, c] = this.#current;
    return { intercept: a, msPerKTokens: b, msPerKBlocks: c, fitted: this.#currentFitted };
  }

  /**
   * Predicted TTFT in ms.
   *
   * @param f prefill tokens ahead of and including this request's, and running KV blocks
   * @returns milliseconds (from the prior until the fit is warm and sensible)
   */
  predict(f: TtftFeatures): number {
    const [a, b, c] = this.#current;
    return a + (b * f.prefillTokens + c * f.activeBlocks) / 1000;
  }

  /**
   * Learns from one request: the features it was routed with and the TTFT it got. Values that
   * are not finite, or negative, are ignored (a clock step, a request that never started).
   *
   * @param f the features at routing time
   * @param ttftMs the observed time to first token
   */
  observe(f: TtftFeatures, ttftMs: number): void {
    const x = [1, f.prefillTokens / 1000, f.activeBlocks / 1000];
    if (!x.every((v) => Number.isFinite(v) && v >= 0) || !(ttftMs >= 0) || ttftMs === Infinity) {
      return;
    }
    const p = this.#p;
    const lambda = this.#lambda;
    // k = P x / (lambda + x' P x); theta += k (y - x' theta); P = (P - k x' P) / lambda.
    const px = [0, 1, 2].map((i) =>
      p[3 * i]! * x[0]! + p[3 * i + 1]! * x[1]! + p[3 * i + 2]! * x[2]!
    );
    const denom = lambda + x[0]! * px[0]! + x[1]! * px[1]! + x[2]! * px[2]!;
    const k = px.map((v) => v / denom);
    const err = ttftMs - (this.#theta[0] + this.#theta[1] * x[1]! + this.#theta[2] * x[2]!);
    this.#noiseSum = lambda * this.#noiseSum + err * err * lambda / denom;
    this.#noiseWeight = lambda * this.#noiseWeight + 1;
    this.#theta = [
      this.#theta[0] + k[0]! * err,
      this.#theta[1] + k[1]! * err,
      this.#theta[2] + k[2]! * err,
    ];
    // P is symmetric: x'P = (Px)'.
    const next = new Array<number>(9);
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < 3; j++) next[3 * i + j] = (p[3 * i + j]! - k[i]! * px[j]!) / lambda;
    }
    // Bounded, so that a long run of identical requests cannot blow the matrix up.
    this.#p = next.map((v) => Math.max(-1e8, Math.min(1e8, v)));
    this.#seen++;
    // Once per observation, not per prediction (a decision predicts once per candidate).
    this.#refresh();
  }

  #fitUsable(): boolean {
    const [a, b, c] = this.#theta;
    return this.#seen >= this.#warmup && b > 0 && Number.isFinite(a + b + c);
  }

  /**
   * The fitted load rate, shrunk toward the prior's ratio times the prefill rate `b` by the
   * precision of each (the posterior mean of a normal prior and a normal estimate).
   */
  #loadRate(b: number): number {
    const fitted = this.#theta[2];
    if (this.#spread === Infinity) return fitted;
    const centre = b * this.#prior[2] / this.#prior[1];
    const fitVariance = this.#noiseSum / this.#noiseWeight * this.#p[8]!;
    if (!(fitVariance > 0)) return fitted; // observations that fit exactly
    const priorVariance = (this.#spread * centre) ** 2;
    return (fitted * priorVariance + centre * fitVariance) / (priorVariance + fitVariance);
  }

  #refresh(): void {
    this.#currentFitted = this.#fitUsable();
    if (!this.#currentFitted) {
      this.#current = this.#prior;
      return;
    }
    // A load that seems to save time is noise around a small one: kept above a twentieth of
    // the prefill rate, so that among workers with nothing queued the least loaded wins (not a
    // coin toss, which clumps requests).
    const b = this.#theta[1];
    this.#current = [Math.max(0, this.#theta[0]), b, Math.max(b / 20, this.#loadRate(b))];
  }
}
