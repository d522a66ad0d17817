// The mocker engine: a simulated vLLM worker. A Tokens-input handler feeds requests to
// the scheduler; one loop runs forward passes on a simulated clock and streams each
// generated token back as the pass that produced it completes.

import { withSyntheticLogprobs } from "../synthetic_logprobs.ts";
import type { Context } from "../../../runtime/context.ts";
import { DynamoError, EngineShutdownError, InvalidArgumentError } from "../../../runtime/errors.ts";
import { type Logger, silentLogger } from "../../../runtime/logger.ts";
import type {
  FinishReason,
  KvFetchHint,
  LLMEngineOutput,
  PreprocessedRequest,
} from "../../protocols.ts";
import {
  BlockManager,
  type BlockManagerOptions,
  cachePrefix,
  defaultHostBlocks,
  type FullBlock,
  peerCopy,
} from "./block_manager.ts";
import type { ForwardPassMetrics, KvEventSink, MetricsSink } from "./kv_types.ts";
import { hashPromptBlocks, Scheduler, type SchedulerOptions, type Sequence } from "./scheduler.ts";

/** Options of {@linkcode MockerEngine}. */
export interface MockerEngineOptions
  extends Omit<BlockManagerOptions, "onEvent">, SchedulerOptions {
  /** Receives the KV cache events (stored / removed / cleared). */
  onKvEvent?: KvEventSink;
  /** Receives the load metrics as forward passes start (see metricsIntervalMs). */
  onMetrics?: MetricsSink;
  /**
   * Metrics at most this often, in ms of the engine's clock (default 0: as every pass
   * starts), except that passes of {@linkcode TIMED_PASS_MS} or longer are always announced.
   * The pass that leaves the engine idle, and a cancellation while it is idle, always
   * report, so the last metrics seen are current.
   */
  metricsIntervalMs?: number;
  /** Tokens to generate when a request sets no max_tokens (default 32; ends with "stop"). */
  defaultMaxTokens?: number;
  /** Generated ids are drawn from [256, vocabSize) (default 32000), never an eos or stop id. */
  vocabSize?: number;
  /** Simulated-time clock in ms (default performance.now). */
  now?: () => number;
  /** Waits `ms` of simulated time (default setTimeout). */
  sleep?: (ms: number) => Promise<void>;
  /** Where the engine logs failing sinks and a failed loop; default silent. */
  logger?: Logger;
  /**
   * Simulated ms to copy one KV block back from the host tier (default
   * `DEFAULT_KV_ONBOARD_MS_PER_BLOCK`, timing.ts): as the scheduler admits a request whose prefix
   * continues there, or with a peer's blocks. The tier's size is `hostBlocks`, here by default
   * {@linkcode defaultHostBlocks} of `numGpuBlocks` (0: no host tier).
   */
  hostOnboardMsPerBlock?: number;
  /**
   * Peer KV fetch: requests with a `kv_fetch` hint load the prompt's first blocks from the
   * worker named there (as many as it holds) instead of computing them, taking `msPerBlock`
   * of simulated time per block; the metrics say so, so that KV routers send such requests.
   * Default: none (hints are ignored, prompts computed).
   */
  kvFetch?: MockerKvFetch;
}

/** How a mocker copies KV blocks from its peers ({@linkcode MockerEngineOptions.kvFetch}). */
export interface MockerKvFetch {
  /** Simulated milliseconds per block copied (divided by the speedup ratio, like passes). */
  msPerBlock: number;
  /**
   * Asks the worker `source` how many of `hashes` (a prompt's first blocks' sequence hashes)
   * it holds as a cached prefix: those are the blocks it can send.
   */
  peer: (source: string, hashes: readonly bigint[], signal: AbortSignal) => Promise<number>;
  /** Longest wait for the peer's answer, in ms (default 2000); past it the prompt is computed. */
  timeoutMs?: number;
}

/** The handler shape of a Tokens-input engine. */
export type TokensHandler = (
  request: PreprocessedRequest,
  context?: Context,
) => AsyncGenerator<LLMEngineOutput>;

/**
 * The mocker could not run a request: no forward pass could fit it (the KV cache is held
 * elsewhere), or the forward-pass loop failed. The request ends with this instead of
 * waiting forever.
 */
export class MockerSchedulingError extends DynamoError {}

const FIRST_TOKEN_ID = 256;
/** Yield to the event loop at least this often (ms) even when the clock is behind. */
const MAX_BUSY_MS = 5;
/** Behind the clock by more than this (ms, e.g. a blocked event loop): stop catching up. */
const MAX_LAG_MS = 1000;
/**
 * Passes at least this long (ms of the engine's clock) are announced as they start whatever
 * `metricsIntervalMs` says: a KV router that knows when a worker's pass ends can send a prompt
 * where it starts soonest. Shorter passes (a fast speedup ratio) go by the interval, so that a
 * large fleet of fast mockers does not flood the event plane.
 */
export const TIMED_PASS_MS = 2;

/**
 * A simulated vLLM engine: block manager, scheduler and time model (DESIGN §7). Every
 * request gets `max_tokens` pseudo-random tokens (deterministic per prompt, so a migrated
 * request continues the same sequence), one per forward pass it takes part in; the
 * passes take the time the model predicts, divided by `speedupRatio`.
 *
 * @example
 * ```ts
 * import { DistributedRuntime, KvEventPublisher, MockerEngine } from "../../../mod.ts";
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const component = runtime.namespace("demo").component("mocker");
 * const endpoint = component.endpoint("generate");
 * const publisher = new KvEventPublisher(component, { kvBlockSize: 16 });
 * const engine = new MockerEngine({
 *   speedupRatio: 10,
 *   onKvEvent: (e, tier) => void publisher.publish(e, tier).catch(() => {}),
 * });
 * const serving = endpoint.serveEndpoint(engine.handler);
 * const client = await endpoint.client();
 * await client.waitForInstances();
 * const stream = await client.generate({
 *   model: "mock",
 *   token_ids: [1, 2, 3],
 *   stop_conditions: { max_tokens: 4 },
 *   sampling_options: {},
 *   eos_token_ids: [],
 * });
 * for await (const out of stream) console.log(out); // { token_ids: [...] }, ...
 * await engine.close();
 * await publisher.close();
 * await runtime.shutdown();
 * await serving;
 * ```
 */
export class MockerEngine {
  /** The engine's KV blocks and prefix cache. */
  readonly blockManager: BlockManager;
  /** The engine's scheduler of forward passes. */
  readonly scheduler: Scheduler;
  readonly #onMetrics: MetricsSink;
  readonly #metricsIntervalMs: number;
  readonly #defaultMaxTokens: number;
  readonly #vocabSize: number;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #logger: Logger;
  readonly #kvFetch: MockerKvFetch | undefined;
  readonly #speedupRatio: number;
  /** Requests in flight: wake one (no error), or end it with an error. */
  readonly #requests = new Map<Sequence, (error?: Error) => void>();
  #loop: Promise<void> = Promise.resolve();
  #looping = false;
  #closed = false;
  #steps = 0;

  /**
   * Creates an engine; its loop starts with the first request.
   * @throws {InvalidArgumentError} an option out of range
   */
  constructor(options: MockerEngineOptions = {}) {
    this.#logger = options.logger ?? silentLogger;
    // A sink that throws (a publisher gone) must not stop forward passes: every request
    // in flight would wait forever. It is logged instead.
    const onKvEvent = options.onKvEvent;
    this.blockManager = new BlockManager({
      ...options,
      hostBlocks: options.hostBlocks ?? defaultHostBlocks(options.numGpuBlocks),
      onEvent: onKvEvent && ((event, tier) => {
        try {
          onKvEvent(event, tier);
        } catch (err: unknown) {
          this.#logger.warn("mocker KV event sink failed", { error: String(err) });
        }
      }),
    });
    this.scheduler = new Scheduler(this.blockManager, options);
    const onMetrics = options.onMetrics;
    this.#onMetrics = onMetrics
      ? (metrics) => {
        try {
          onMetrics(metrics);
        } catch (err: unknown) {
          this.#logger.warn("mocker metrics sink failed", { error: String(err) });
        }
      }
      : () => {};
    this.#metricsIntervalMs = options.metricsIntervalMs ?? 0;
    if (!(this.#metricsIntervalMs >= 0)) {
      throw new InvalidArgumentError(
        `metricsIntervalMs must be >= 0, got ${this.#metricsIntervalMs}`,
      );
    }
    this.#defaultMaxTokens = options.defaultMaxTokens ?? 32;
    this.#vocabSize = options.vocabSize ?? 32000;
    if (!Number.isInteger(this.#defaultMaxTokens) || this.#defaultMaxTokens < 1) {
      throw new InvalidArgumentError(
        `defaultMaxTokens must be a whole number >= 1, got ${this.#defaultMaxTokens}`,
      );
    }
    if (!Number.isInteger(this.#vocabSize) || this.#vocabSize <= FIRST_TOKEN_ID + 1) {
      throw new InvalidArgumentError(
        `vocabSize must be a whole number > ${FIRST_TOKEN_ID + 1}, got ${this.#vocabSize}`,
      );
    }
    this.#now = options.now ?? (() => performance.now());
    this.#sleep = options.sleep ?? defaultSleep;
    this.#speedupRatio = options.speedupRatio ?? 1;
    const fetch = options.kvFetch;
    if (fetch && !(fetch.msPerBlock >= 0 && fetch.msPerBlock < Infinity)) {
      throw new InvalidArgumentError(
        `kvFetch.msPerBlock must be a finite number >= 0, got ${fetch.msPerBlock}`,
      );
    }
    this.#kvFetch = fetch;
  }

  /** The load metrics now (as an idle engine reports them: no pass timed). */
  metrics(): ForwardPassMetrics {
    return this.#metrics();
  }

  /** The load metrics now, with the pass starting (if one is) and the fetch rate. */
  #metrics(pass?: { msLeft: number; prefillTokens: number }): ForwardPassMetrics {
    const m: ForwardPassMetrics = {
      ...this.scheduler.metrics(),
      pass_ms_left: pass?.msLeft ?? 0,
      pass_prefill_tokens: pass?.prefillTokens ?? 0,
    };
    // In the engine's real time, as its passes' timing: the simulated copy time over the speedup.
    if (this.#kvFetch) m.kv_fetch_ms_per_block = this.#kvFetch.msPerBlock / this.#speedupRatio;
    if (this.blockManager.hostBlocks > 0) {
      m.kv_onboard_ms_per_block = this.scheduler.hostOnboardMsPerBlock / this.#speedupRatio;
    }
    return m;
  }

  /**
   * Loads the first blocks of a prompt that the peer its `kv_fetch` hint names holds (asked
   * first), with those this worker holds in its host tier before them, when they are not on the
   * GPU here: waits the copies' simulated time, then makes them cached here. A failing peer
   * (gone, a late answer) leaves its part to compute, and host blocks to the scheduler, which
   * copies them back as it admits the request.
   * @returns the hashes of the prompt's blocks now cached here and held (release them)
   */
  async #loadPrefix(
    fetch: MockerKvFetch,
    hint: KvFetchHint,
    blocks: readonly FullBlock[],
    signal: AbortSignal | undefined,
  ): Promise<bigint[]> {
    const bm = this.blockManager;
    const hashes = blocks.map((b) => b.sequenceHash);
    const asked = hashes.slice(0, Math.min(hint.blocks, hashes.length));
    if (bm.heldPrefix(asked) === asked.length) return [];
    const there = await this.#askPeer(fetch, hint, asked, signal);
    const copy = peerCopy(bm, hashes, there, {
      host: this.scheduler.hostOnboardMsPerBlock,
      peer: fetch.msPerBlock,
    });
    if (!copy || signal?.aborted) return [];
    await this.#sleep(copy.ms / this.#speedupRatio);
    return cachePrefix(bm, blocks, copy.end);
  }

  /** How many of `hashes` the hint's peer holds (0 when it fails or answers late). */
  async #askPeer(
    fetch: MockerKvFetch,
    hint: KvFetchHint,
    hashes: readonly bigint[],
    signal: AbortSignal | undefined,
  ): Promise<number> {
    const ac = new AbortController();
    const onAbort = () => ac.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => ac.abort(), fetch.timeoutMs ?? 2000);
    try {
      return Math.min(await fetch.peer(hint.source, hashes, ac.signal), hashes.length);
    } catch (err) {
      this.#logger.debug("mocker peer KV fetch failed; computing the prompt", {
        source: hint.source,
        error: String(err),
      });
      return 0;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Forward passes run so far. */
  get steps(): number {
    return this.#steps;
  }

  /** The handler for `endpoint.serveEndpoint` (bound to this engine). */
  get handler(): TokensHandler {
    return (request, context) => this.generate(request, context);
  }

  /**
   * Serves one pre-processed request: yields `{token_ids}` as forward passes produce
   * tokens (several at once when the consumer lags), the last with `finish_reason`
   * "length" (max_tokens reached) or "stop" (the default length reached). A stopped
   * context ends the stream with "cancelled" and frees the request's blocks.
   *
   * @param request `{token_ids, stop_conditions, eos_token_ids, migrated_tokens?, ...}`
   * @param context the request's context (cancellation)
   * @throws {InvalidArgumentError} a request without token_ids, or a prompt larger than
   *   the whole KV cache (max_tokens is capped so that prompt and output fit it)
   * @throws {EngineShutdownError} the engine closed before the request finished
   * @throws {MockerSchedulingError} no forward pass could take the request, or the
   *   forward-pass loop failed
   */
  async *generate(
    request: PreprocessedRequest,
    context?: Context,
  ): AsyncGenerator<LLMEngineOutput> {
    const tokenIds = request?.token_ids;
    if (!Array.isArray(tokenIds)) {
      throw new InvalidArgumentError("the mocker needs a pre-processed request with token_ids");
    }
    if (this.#closed) throw new EngineShutdownError("mocker engine is shut down");
    const signal = context?.signal;
    const stop = request.stop_conditions ?? {};
    const maxTokens = stop.max_tokens ?? this.#defaultMaxTokens;
    const reason: FinishReason = stop.max_tokens === undefined ? "stop" : "length";
    if (!(maxTokens >= 1)) {
      yield { token_ids: [], finish_reason: "length" };
      return;
    }
    if (signal?.aborted) {
      yield { token_ids: [], finish_reason: "cancelled" };
      return;
    }
    // Tokens already streamed by earlier attempts shift the position, not the seed.
    const migrated = Math.min(Math.max(0, request.migrated_tokens ?? 0), tokenIds.length);
    // The request's `seed`, when set, picks another (still repeatable) answer.
    const seed = withSamplingSeed(
      seedOf(tokenIds, tokenIds.length - migrated),
      request.sampling_options?.seed,
    );
    const avoid = new Set([
      ...(request.eos_token_ids ?? []),
      ...(stop.stop_token_ids_hidden ?? []),
    ]);
    const vocab = this.#vocabSize;
    const blocks = hashPromptBlocks(tokenIds, this.blockManager.blockSize);
    // A prefix copied from a peer is held until the scheduler has the request (blocks in the
    // host tier are the scheduler's to copy back, as it admits the request).
    const fetch = this.#kvFetch;
    const fetched = fetch && isKvFetchHint(request.kv_fetch)
      ? await this.#loadPrefix(fetch, request.kv_fetch, blocks, signal)
      : [];
    if (this.#closed) {
      this.blockManager.release(fetched.toReversed(), 0);
      throw new EngineShutdownError("mocker engine is shut down");
    }

    let pending: number[] = [];
    let first = true;
    let finished = false;
    let failure: Error | undefined;
    let wake: (() => void) | undefined;
    const waker = () => wake?.();
    let seq: Sequence;
    try {
      seq = this.scheduler.add({
        id: context?.id,
        tokenIds,
        maxTokens: Math.floor(maxTokens),
        blocks,
        nextToken: (i) => tokenAt(seed, migrated + i, vocab, avoid),
        onToken: (token, done) => {
          pending.push(token);
          finished = done;
          waker();
        },
      });
    } finally {
      // Also when the scheduler refuses the request: nothing else would release them.
      this.blockManager.release(fetched.toReversed(), 0);
    }
    this.#requests.set(seq, (error) => {
      failure ??= error;
      waker();
    });
    signal?.addEventListener("abort", waker, { once: true });
    this.#kick();
    try {
      while (true) {
        if (signal?.aborted) {
          this.scheduler.abort(seq);
          yield { token_ids: [], finish_reason: "cancelled" };
          return;
        }
        if (pending.length > 0) {
          const ids = pending;
          pending = [];
          // The first output says how much of the prompt the prefix cache served.
          const out: LLMEngineOutput = withSyntheticLogprobs(
            first ? { token_ids: ids, cached_tokens: seq.cachedTokens } : { token_ids: ids },
            request.output_options?.logprobs,
          );
          first = false;
          if (finished) {
            out.finish_reason = reason;
            yield out;
            return;
          }
          yield out;
          continue;
        }
        if (failure) throw failure;
        if (this.#closed) throw new EngineShutdownError("mocker engine shut down mid-request");
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    } finally {
      signal?.removeEventListener("abort", waker);
      this.#requests.delete(seq);
      const active = seq.state === "waiting" || seq.state === "running";
      this.scheduler.abort(seq);
      if (active && !this.#looping) this.#onMetrics(this.#metrics());
    }
  }

  /**
   * Stops the engine: requests in flight end with EngineShutdownError (so a frontend
   * with a migration limit moves them elsewhere) and the forward-pass loop ends.
   */
  async close(): Promise<void> {
    this.#closed = true;
    for (const wake of [...this.#requests.values()]) wake();
    await this.#loop;
    this.scheduler.abortAll();
  }

  #kick(): void {
    if (this.#looping || this.#closed) return;
    this.#looping = true;
    this.#loop = this.#run().catch((err: unknown) => {
      this.#logger.error("mocker loop failed", { error: String(err) });
    });
  }

  /** Ends every request in flight with `error` (the loop that would run them failed). */
  #failAll(error: Error): void {
    for (const [seq, fail] of [...this.#requests]) {
      this.scheduler.abort(seq);
      fail(error);
    }
    this.#onMetrics(this.#metrics());
  }

  /**
   * A pass planned nothing and preempted nothing: nothing runs, so nothing will free
   * blocks, and the waiting requests cannot be admitted. The scheduler refuses prompts
   * larger than the cache and caps max_tokens to fit, so this only happens when blocks are
   * held outside the scheduler; the waiting requests end with an error instead of waiting
   * forever.
   * @returns how many requests were ended
   */
  #failUnschedulable(): number {
    const bm = this.blockManager;
    let failed = 0;
    for (const [seq, fail] of [...this.#requests]) {
      if (seq.state !== "waiting") continue;
      this.scheduler.abort(seq);
      fail(
        new MockerSchedulingError(
          `the mocker cannot schedule request ${seq.id} (${seq.tokens.length} tokens): no ` +
            `forward pass fits it with ${bm.availableBlocks} of ${bm.numGpuBlocks} KV blocks ` +
            `available (watermark ${bm.watermarkBlocks}, block size ${bm.blockSize}, ` +
            `${this.scheduler.numRunning} running)`,
        ),
      );
      failed++;
    }
    if (failed > 0) this.#onMetrics(this.#metrics());
    return failed;
  }

  async #run(): Promise<void> {
    // `#looping` is cleared in the same synchronous turn as the last hasWork check, so a
    // request added after it always starts a new loop.
    try {
      let target = this.#now();
      let lastYield = target;
      let lastMetrics = -Infinity;
      while (!this.#closed && this.scheduler.hasWork) {
        const plan = this.scheduler.schedule();
        if (plan.entries.length === 0) {
          // Preempting freed blocks: the next plan admits again. Otherwise nothing fits.
          if (plan.preempted.length > 0) continue;
          this.#logger.warn("mocker has work but nothing fits a forward pass", {
            waiting: this.scheduler.numWaiting,
            running: this.scheduler.numRunning,
            available_blocks: this.blockManager.availableBlocks,
          });
          if (this.#failUnschedulable() > 0) continue;
          // Sequences added to the scheduler directly, with nobody to tell: stop here.
          throw new MockerSchedulingError(
            `nothing fits a forward pass (${this.scheduler.numWaiting} waiting, ` +
              `${this.scheduler.numRunning} running, ${this.blockManager.availableBlocks} ` +
              `KV blocks available)`,
          );
        }
        // Simulated time runs ahead of the wall clock by at most one pass; short passes
        // are batched into one sleep, and a loop far behind stops catching up.
        target += plan.durationMs;
        const now = this.#now();
        const ahead = target - now;
        if (ahead < -MAX_LAG_MS) target = now;
        // Metrics as each pass starts, saying when it ends (pass timing for KV routers).
        if (now - lastMetrics >= this.#metricsIntervalMs || plan.durationMs >= TIMED_PASS_MS) {
          lastMetrics = now;
          this.#onMetrics(
            this.#metrics({ msLeft: Math.max(0, target - now), prefillTokens: plan.prefillTokens }),
          );
        }
        if (ahead > 0.5 || now - lastYield >= MAX_BUSY_MS) {
          await this.#sleep(Math.max(0, ahead));
          lastYield = this.#now();
        }
        this.scheduler.apply(plan);
        this.#steps++;
        // The pass that leaves the engine idle reports, so the last metrics seen are current.
        if (!this.scheduler.hasWork) {
          lastMetrics = this.#now();
          this.#onMetrics(this.#metrics());
        }
      }
    } catch (err: unknown) {
      // Before `#looping` clears: a request that arrives after this starts a new loop and
      // is not ended with this one's failure.
      this.#logger.error("mocker loop failed", { error: String(err) });
      // Nothing would run the requests in flight until another one arrived: end them.
      const message = err instanceof Error ? err.message : String(err);
      this.#failAll(
        new MockerSchedulingError(`the mocker's forward-pass loop failed: ${message}`, {
          cause: err,
        }),
      );
    } finally {
      this.#looping = false;
    }
  }
}

function defaultSleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** FNV-1a over the first `n` token ids: the seed of a request's generated tokens. */
function seedOf(tokenIds: readonly number[], n: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < n; i++) {
    h ^= tokenIds[i]! & 0xffff;
    h = Math.imul(h, 0x01000193);
    h ^= tokenIds[i]! >>> 16;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Folds a request's sampling seed (any safe integer) into its prompt seed. */
function withSamplingSeed(h: number, seed: number | undefined): number {
  if (seed === undefined) return h;
  const lo = seed % 0x1_0000_0000;
  const hi = Math.floor(seed / 0x1_0000_0000);
  h = Math.imul(h ^ lo, 0x01000193);
  h = Math.imul(h ^ hi, 0x01000193);
  return h >>> 0;
}

/** The `i`-th generated token of a request (a murmur3 finaliser over seed and position). */
export function tokenAt(
  seed: number,
  i: number,
  vocabSize: number,
  avoid: ReadonlySet<number> = new Set(),
): number {
  let x = (seed ^ Math.imul(i + 1, 0x9e3779b1)) >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  const span = vocabSize - FIRST_TOKEN_ID;
  let t = FIRST_TOKEN_ID + ((x >>> 0) % span);
  for (let k = 0; k < span && avoid.has(t); k++) {
    t = FIRST_TOKEN_ID + ((t - FIRST_TOKEN_ID + 1) % span);
  }
  return t;
}

/** Whether `v` is a `kv_fetch` hint the engine accepts: anything else is ignored. */
function isKvFetchHint(v: unknown): v is KvFetchHint {
  const h = v as { source?: unknown; blocks?: unknown } | null;
  return typeof h === "object" && h !== null && typeof h.source === "string" &&
    h.source.length > 0 && h.source.length <= 1024 && Number.isInteger(h.blocks) &&
    (h.blocks as number) > 0;
}
