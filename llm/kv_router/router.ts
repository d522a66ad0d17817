/**
 * The KV-aware router: sends each request to the worker that already holds most of its
 * prefix in KV cache, weighed against how loaded each worker is predicted to be.
 *
 * Overlaps come from a {@linkcode KvIndexer} fed by the workers' KV events (or, for
 * engines that publish none, an approximate indexer that remembers where the router sent
 * each prefix); load comes from the router's own book of the requests it has in flight
 * (see {@linkcode ActiveSequences}), so it is current between metric updates.
 *
 * @module
 */

import type { Client } from "../../runtime/client.ts";
import type { Endpoint } from "../../runtime/component.ts";
import { idSet } from "../../runtime/_id_set.ts";
import { Context } from "../../runtime/context.ts";
import { CancelledError, InvalidArgumentError, NoInstancesError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { KvIndexer } from "./indexer.ts";
import { type BlockHash, computeBlockHashesSync } from "./hashing.ts";
import { KvMetricsAggregator } from "./metrics.ts";
import { PendingPrefills } from "./pending_prefills.ts";
import { cachedPrefix, RoutingPolicy, type RoutingPolicyOptions, withPeerFetch } from "./policy.ts";
import type { KvFetchHint } from "../protocols.ts";
import { ReplicaSync } from "./replica_sync.ts";
import {
  ActiveSequences,
  type CostFunction,
  pickByCost,
  type WorkerCandidate,
} from "./scheduler.ts";
import type { TtftModel } from "./ttft_model.ts";

/** Cached-prefix depth per worker, in blocks. */
export interface OverlapLookup {
  /**
   * Finds, per worker, how many leading blocks of the request it has cached on its device
   * (`scores`) and, where it also holds blocks below its device, in any tier (`held`).
   */
  findMatchesForRequest(
    tokenIds: ArrayLike<number>,
    loraId?: number,
  ): Promise<{ scores: Map<string, number>; held?: Map<string, number> }>;
  /** The router tells an approximate indexer where it sent a request (optional). */
  recordRouted?(tokenIds: ArrayLike<number>, workerId: string, loraId?: number): void;
  /** Releases what the lookup holds (subscriptions, timers). */
  close?(): Promise<void> | void;
}

/**
 * Options of {@linkcode KvRouter}: the routing policy's (cost, temperature, bounded load), and
 * where candidates and their loads come from.
 */
export interface KvRouterOptions extends RoutingPolicyOptions {
  /** Tokens per KV block (the workers' `kv_cache_block_size`). */
  blockSize: number;
  /** Replaces the router's cost. */
  costFunction?: CostFunction;
  /** Where overlaps come from (default: a KvIndexer on the endpoint's component). */
  indexer?: OverlapLookup;
  /** The endpoint's client (default: `endpoint.client()`). */
  client?: Client;
  /**
   * How long a stream from {@linkcode KvRouter.generate} may wait for its first read, in
   * ms (default 60000). A stream nobody reads by then (and nobody stopped) is abandoned:
   * the router stops the request on its worker and takes it out of the load book, and
   * reading it later throws a {@linkcode CancelledError}.
   */
  unreadStreamTimeoutMs?: number;
  /**
   * Busy threshold: a worker whose KV cache is fuller than this fraction (its published load
   * metrics, `kv_active_blocks / kv_total_blocks`) is skipped while another is not (default:
   * off). As the reference's `--active-decode-blocks-threshold`.
   */
  activeDecodeBlocksThreshold?: number;
  /**
   * Busy threshold: a worker with more prompt tokens still to prefill than this (the router's
   * book) is skipped while another is not (default: off). As the reference's
   * `--active-prefill-tokens-threshold`.
   */
  activePrefillTokensThreshold?: number;
  /**
   * Share this router's load book with the other routers of the same workers (other
   * frontends) and book theirs, over the event plane (default false). As the reference's
   * `--router-replica-sync`.
   */
  replicaSync?: boolean;
  /**
   * Told of each decision {@linkcode KvRouter.generate} makes (each attempt), for metrics
   * and decision logs; must be cheap and must not throw.
   */
  onRoute?: (decision: RouteDecisionRecord) => void;
}

/** A routing decision with what it was made from, as `onRoute` is told of it. */
export interface RouteDecisionRecord extends RouteDecision {
  /** Tokens of the prompt. */
  promptTokens?: number;
  /** Full KV blocks of the prompt. */
  requestBlocks: number;
  /** Every worker the decision considered, with its cached overlap and load as then seen. */
  candidates: readonly WorkerCandidate[];
  /**
   * The cost of each eligible candidate (lower is better; workers left out by the busy
   * checks or the load bound have none). Undefined when a cost function picked by id.
   */
  costs?: ReadonlyMap<string, number>;
}

/** What {@linkcode KvRouter.findBestMatch} decided. */
export interface RouteDecision {
  /** The chosen worker's instance id. */
  instanceId: string;
  /** Blocks of the request's prefix cached on that worker (or to be copied to it). */
  overlapBlocks: number;
  /**
   * Where the chosen worker is to copy the prompt's cached prefix from (peer KV fetch), when
   * {@linkcode KvRouter.generate} decided so: sent to the worker as the request's `kv_fetch`.
   */
  kvFetch?: KvFetchHint;
}

/** Options of {@linkcode KvRouter.findBestMatch}. */
export interface FindBestMatchOptions {
  /** Choose only among these instance ids (a set is read as it is). */
  instances?: readonly string[] | ReadonlySet<string>;
  /** LoRA adapter id, which salts the block hashes. */
  loraId?: number;
  /**
   * Books the decision in the router's load book under this id, and tells an approximate
   * indexer where the request went, so that later picks see its load (without it, as
   * before, the decision is only returned). For callers that send the request themselves
   * (a standalone router whose caller then uses `client.direct()`): report its progress
   * with {@linkcode KvRouter.markPrefillCompleted} and
   * {@linkcode KvRouter.addOutputTokens}, and call {@linkcode KvRouter.free} when it
   * ends, however it ends, or its load stays booked.
   */
  requestId?: string;
}

/** Options of {@linkcode KvRouter.generate}. */
export interface KvRouteOptions extends Omit<FindBestMatchOptions, "requestId"> {
  /** The request's context (a new one by default). */
  context?: Context;
}

/** The router's view of a request body: token ids (a PreprocessedRequest has them). */
export interface TokensRequest {
  /** The prompt's token ids. */
  token_ids: number[];
}

/**
 * A KV-aware router over one endpoint.
 *
 * @example
 * ```ts
 * import type { Endpoint } from "../../runtime/component.ts";
 *
 * async function route(endpoint: Endpoint, tokenIds: number[]): Promise<void> {
 *   const router = new KvRouter(endpoint, { blockSize: 16 });
 *   const { instanceId, overlapBlocks } = await router.findBestMatch(tokenIds);
 *   console.log(`${instanceId} has ${overlapBlocks} of the prompt's blocks`);
 *   // Or pick and send in one step:
 *   for await (const out of await router.generate({ token_ids: tokenIds })) console.log(out);
 *   await router.close();
 * }
 * ```
 *
 * @example Routing decisions for requests the caller sends itself
 * ```ts
 * import type { Client } from "../../runtime/client.ts";
 * import type { Context } from "../../runtime/context.ts";
 *
 * async function send(router: KvRouter, client: Client, request: TokensRequest, ctx: Context) {
 *   const { instanceId } = await router.findBestMatch(request.token_ids, { requestId: ctx.id });
 *   try {
 *     const stream = await client.direct<{ token_ids: number[] }>(request, instanceId, {
 *       context: ctx,
 *     });
 *     for await (const out of stream) {
 *       router.addOutputTokens(ctx.id, out.token_ids.length); // the first also ends prefill
 *     }
 *   } finally {
 *     router.free(ctx.id);
 *   }
 * }
 * // A caller that does not count tokens calls router.markPrefillCompleted(ctx.id) instead,
 * // at the first output.
 * ```
 */
export class KvRouter {
  /** Tokens per KV block. */
  readonly blockSize: number;
  /** Weight of uncached prefill blocks against decode load. */
  readonly overlapScoreWeight: number;
  /** Sampling temperature over the normalised costs (0 = cheapest worker). */
  readonly temperature: number;
  /** Weight of other requests' queued prefill blocks in the reference cost. */
  readonly queuedPrefillWeight: number;
  /** The default cost's TTFT predictor (learns from every routed request's first token). */
  readonly ttftModel: TtftModel;
  /** Bounded-load factor (Infinity: off). */
  readonly loadBound: number;
  readonly #policy: RoutingPolicy;
  readonly #decodeThreshold: number | undefined;
  readonly #prefillThreshold: number | undefined;
  readonly #metrics: KvMetricsAggregator | undefined;
  /** Whether candidates carry the workers' pass timing and fetch rate (the default cost). */
  readonly #timed: boolean;
  /** When workers without metrics may be scraped again (performance.now()). */
  #nextScrape = 0;
  readonly #sync: ReplicaSync | undefined;
  readonly #indexer: OverlapLookup;
  readonly #client: Promise<Client>;
  readonly #ownsClient: boolean;
  readonly #costFunction: CostFunction | undefined;
  readonly #random: () => number;
  readonly #active: ActiveSequences;
  readonly #pending = new PendingPrefills();
  readonly #unreadMs: number;
  readonly #onRoute: KvRouterOptions["onRoute"];
  /** Deadlines of streams handed out and not read yet. */
  readonly #unread = new Set<ReturnType<typeof setTimeout>>();
  readonly #log: Logger;
  #closed = false;

  /**
   * Creates a router over an endpoint's instances.
   *
   * @throws {InvalidArgumentError} a bad block size, weight, temperature or unread-stream
   *   timeout
   */
  constructor(endpoint: Endpoint, options: KvRouterOptions) {
    const { blockSize } = options;
    if (!Number.isInteger(blockSize) || blockSize <= 0) {
      throw new InvalidArgumentError(`blockSize must be a positive integer, got ${blockSize}`);
    }
    // Weights, temperature and bound are checked by the policy.
    this.#policy = new RoutingPolicy(blockSize, options);
    this.queuedPrefillWeight = this.#policy.queuedPrefillWeight;
    const decode = options.activeDecodeBlocksThreshold;
    if (decode !== undefined && !(decode >= 0 && decode <= 1)) {
      throw new InvalidArgumentError(
        `activeDecodeBlocksThreshold must be a fraction in [0, 1], got ${decode}`,
      );
    }
    const prefill = options.activePrefillTokensThreshold;
    if (prefill !== undefined && !(prefill >= 0 && prefill < Infinity)) {
      throw new InvalidArgumentError(
        `activePrefillTokensThreshold must be a number of tokens >= 0, got ${prefill}`,
      );
    }
    const unreadMs = options.unreadStreamTimeoutMs ?? 60_000;
    if (!(unreadMs > 0)) {
      throw new InvalidArgumentError(`unreadStreamTimeoutMs must be > 0, got ${unreadMs}`);
    }
    this.#unreadMs = unreadMs;
    this.#onRoute = options.onRoute;
    this.#log = endpoint.component.runtimeInternals.logger.child({
      component: endpoint.component.path,
      kv_router: endpoint.name,
    });
    this.blockSize = blockSize;
    this.overlapScoreWeight = this.#policy.overlapScoreWeight;
    this.temperature = this.#policy.temperature;
    this.#indexer = options.indexer ?? new KvIndexer(endpoint.component, blockSize);
    this.#ownsClient = options.client === undefined;
    this.#client = options.client ? Promise.resolve(options.client) : endpoint.client();
    this.#costFunction = options.costFunction;
    this.#random = options.random ?? Math.random;
    const model = this.#policy.ttftModel;
    this.ttftModel = model;
    let sync: ReplicaSync | undefined;
    this.#active = new ActiveSequences(blockSize, {
      onBooking: options.replicaSync ? (e) => sync?.publish(e) : undefined,
      onFirstOutput: (routedWith, ttftMs) => {
        model.observe(routedWith, ttftMs);
        if (model.observations % 256 === 0) {
          this.#log.debug("ttft model", { ...model.coefficients(), n: model.observations });
        }
      },
    });
    this.loadBound = this.#policy.loadBound;
    this.#decodeThreshold = decode;
    this.#prefillThreshold = prefill;
    if (options.replicaSync) {
      sync = new ReplicaSync(endpoint.component, this.#active, { logger: this.#log });
    }
    this.#sync = sync;
    // The workers' own metrics: their KV usage for the busy threshold, and for the default
    // cost when and how long their passes run (pass timing) and whether they fetch from peers.
    this.#timed = !this.#policy.weighted && this.#costFunction === undefined;
    this.#metrics = decode === undefined && !this.#timed
      ? undefined
      : new KvMetricsAggregator(endpoint.component);
  }

  /** Resolves once replica sync (when on) receives the other routers' bookings. */
  get ready(): Promise<void> {
    return this.#sync?.ready ?? Promise.resolve();
  }

  /**
   * The predicted load of a worker, from the router's own book: KV blocks, blocks still to
   * prefill, requests in flight, and of those the ones with no first token yet (`waiting`).
   */
  load(
    instanceId: string,
  ): { activeBlocks: number; prefillBlocks: number; requests: number; waiting: number } {
    return this.#active.load(instanceId);
  }

  /**
   * Picks the worker for a prompt. With `options.requestId`, the decision is also booked
   * in the router's load book (see {@linkcode FindBestMatchOptions.requestId}).
   *
   * @param tokenIds the prompt's token ids
   * @param options instances to choose among, LoRA id, request id to book under
   * @returns the picked instance and how many of the prompt's blocks it has cached
   * @throws {NoInstancesError} no instance to pick from
   * @throws {InvalidArgumentError} a request id that is empty or already booked; a cost
   *   function's pick that is not an instance, or a cost that is not a finite number
   */
  async findBestMatch(
    tokenIds: readonly number[],
    options: FindBestMatchOptions = {},
  ): Promise<RouteDecision> {
    const { requestId } = options;
    if (requestId !== undefined) {
      if (typeof requestId !== "string" || requestId === "") {
        throw new InvalidArgumentError(
          `requestId must be a non-empty string, got ${JSON.stringify(requestId)}`,
        );
      }
      if (this.#active.has(bookedKey(requestId))) {
        throw new InvalidArgumentError(
          `request ${JSON.stringify(requestId)} is already booked; free() it first`,
        );
      }
    }
    const client = await this.#client;
    const hashes = requestId === undefined
      ? undefined
      : computeBlockHashesSync(tokenIds, this.blockSize, options.loraId);
    const { instanceId, overlapBlocks } = await this.#decide(
      client,
      tokenIds,
      options,
      new Set(),
      hashes?.sequence,
    );
    const decision = { instanceId, overlapBlocks };
    if (requestId !== undefined) {
      this.#pending.add(bookedKey(requestId), decision.instanceId, hashes!.sequence);
      this.#active.add(
        bookedKey(requestId),
        decision.instanceId,
        tokenIds.length,
        decision.overlapBlocks,
      );
      this.#indexer.recordRouted?.(tokenIds, decision.instanceId, options.loraId);
    }
    return decision;
  }

  /**
   * A request booked by {@linkcode findBestMatch} produced its first output: its prompt
   * no longer counts as prefill on its worker. Unknown (or freed) ids are ignored.
   *
   * @param requestId the id given to findBestMatch
   */
  markPrefillCompleted(requestId: string): void {
    this.#pending.done(bookedKey(requestId));
    this.#active.progress(bookedKey(requestId), 0);
  }

  /**
   * A request booked by {@linkcode findBestMatch} generated `count` more tokens: the KV
   * blocks it holds grow (and its prefill is over). Unknown (or freed) ids are ignored.
   *
   * @param requestId the id given to findBestMatch
   * @param count tokens generated since the last report
   * @throws {InvalidArgumentError} a count that is not a non-negative integer
   */
  addOutputTokens(requestId: string, count: number): void {
    if (!Number.isSafeInteger(count) || count < 0) {
      throw new InvalidArgumentError(`count must be a non-negative integer, got ${count}`);
    }
    this.#pending.done(bookedKey(requestId));
    this.#active.progress(bookedKey(requestId), count);
  }

  /**
   * A request booked by {@linkcode findBestMatch} ended (finished, failed or cancelled):
   * it leaves the load book. Idempotent; unknown ids are ignored.
   *
   * @param requestId the id given to findBestMatch
   */
  free(requestId: string): void {
    this.#pending.done(bookedKey(requestId));
    this.#active.free(bookedKey(requestId));
  }

  async #decide(
    client: Client,
    tokenIds: readonly number[],
    options: FindBestMatchOptions,
    exclude: ReadonlySet<string>,
    sequenceHashes?: readonly BlockHash[],
    fetch = false,
  ): Promise<RouteDecision & Pick<RouteDecisionRecord, "candidates" | "costs">> {
    const allowed = options.instances === undefined ? undefined : idSet(options.instances);
    const ids = client.availableInstanceIds().filter((id) =>
      !exclude.has(id) && (allowed === undefined || allowed.has(id))
    );
    if (ids.length === 0) throw new NoInstancesError(client.path);
    const { scores, held } = await this.#indexer.findMatchesForRequest(tokenIds, options.loraId);
    const requestBlocks = Math.ceil(tokenIds.length / this.blockSize);
    // Prefixes still being prefilled where this router sent them count as cached there.
    const soon = this.#pending.size === 0 ? undefined : this.#pending.findMatches(
      sequenceHashes ??
        computeBlockHashesSync(tokenIds, this.blockSize, options.loraId).sequence,
    ).scores;
    const metrics = this.#timed ? this.#metrics : undefined;
    const now = performance.now();
    // Workers not heard from yet (idle since before this router started) are asked.
    if (metrics && now >= this.#nextScrape && ids.some((id) => !metrics.latest(id))) {
      this.#nextScrape = now + 1000;
      metrics.getMetrics().catch((err) =>
        this.#log.debug("cannot scrape load metrics", { error: String(err) })
      );
    }
    let fetchers = 0;
    const own: WorkerCandidate[] = ids.map((workerId) => {
      const load = this.#active.load(workerId);
      const latest = metrics?.latest(workerId);
      const c: WorkerCandidate = {
        workerId,
        ...cachedPrefix(
          {
            device: scores.get(workerId) ?? 0,
            held: held?.get(workerId),
            soon: soon?.get(workerId),
          },
          requestBlocks,
          latest?.kv_onboard_ms_per_block,
        ),
        requestBlocks,
        activeBlocks: load.activeBlocks,
        prefillBlocks: load.prefillBlocks,
        activeRequests: load.requests,
        waitingRequests: load.waiting,
      };
      if (metrics === undefined) return c;
      const pass = metrics.passTiming(workerId, now);
      if (pass) {
        c.passLeftMs = pass.msLeft;
        c.passPrefillTokens = pass.prefillTokens;
        c.passMs = pass.passMs;
      }
      const rate = fetch ? latest?.kv_fetch_ms_per_block : undefined;
      if (rate !== undefined) {
        c.fetchMsPerBlock = rate;
        fetchers++;
      }
      return c;
    });
    // Peer KV fetch: workers that can copy a holder's prefix are costed with it.
    const all = fetchers > 1 ? withPeerFetch(own, held ?? scores) : own;
    const candidates = this.#policy.eligible(all, {
      totalRequests: this.#active.totalRequests,
      busy: this.#prefillThreshold === undefined && this.#decodeThreshold === undefined
        ? undefined
        : (c) => this.#busy(c),
    });
    let instanceId: string;
    let costs: Map<string, number> | undefined;
    if (this.#costFunction) {
      const picked = await this.#costFunction({
        candidates,
        tokenLength: tokenIds.length,
        blockSize: this.blockSize,
      });
      if (typeof picked !== "string") costs = picked;
      try {
        instanceId = typeof picked === "string"
          ? picked
          : pickByCost(picked, this.temperature, this.#random);
      } catch (err) {
        if (!(err instanceof InvalidArgumentError)) throw err;
        throw new InvalidArgumentError(`the cost function's costs: ${err.message}`, {
          cause: err,
        });
      }
      if (!ids.includes(instanceId)) {
        throw new InvalidArgumentError(
          `the cost function picked ${JSON.stringify(instanceId)}, not one of ${ids.join(", ")}`,
        );
      }
    } else {
      costs = this.#policy.costs(candidates);
      instanceId = this.#policy.pick(candidates, costs);
    }
    const chosen = candidates.find((c) => c.workerId === instanceId)!;
    const kvFetch = chosen.fetchFrom === undefined
      ? undefined
      : { source: chosen.fetchFrom, blocks: chosen.overlapBlocks };
    return { instanceId, overlapBlocks: chosen.overlapBlocks, kvFetch, candidates: all, costs };
  }

  #busy(c: WorkerCandidate): boolean {
    if (
      this.#prefillThreshold !== undefined &&
      c.prefillBlocks * this.blockSize > this.#prefillThreshold
    ) return true;
    if (this.#decodeThreshold === undefined) return false;
    const m = this.#metrics?.latest(c.workerId);
    return m !== undefined && m.kv_total_blocks > 0 &&
      m.kv_active_blocks / m.kv_total_blocks > this.#decodeThreshold;
  }

  /**
   * Routes a tokens request (`{token_ids, ...}`) to the best worker and streams its answer,
   * keeping the router's load book current as the answer comes: prefill ends with the
   * first output, blocks grow with the tokens, and the request leaves the book when the
   * stream ends (finished, failed or cancelled).
   * @throws {NoInstancesError} no instance accepted the request
   */
  async generate<T extends { token_ids?: number[] }>(
    request: TokensRequest,
    options: KvRouteOptions = {},
  ): Promise<ResponseStream<T>> {
    const client = await this.#client;
    const tried = new Set<string>();
    const context = options.context ?? new Context();
    const hashes = computeBlockHashesSync(request.token_ids, this.blockSize, options.loraId);
    for (;;) {
      const decision = await this.#decide(
        client,
        request.token_ids,
        options,
        tried,
        hashes.sequence,
        true,
      );
      tried.add(decision.instanceId);
      this.#onRoute?.({
        ...decision,
        promptTokens: request.token_ids.length,
        requestBlocks: Math.floor(request.token_ids.length / this.blockSize),
      });
      // One entry per attempt: the request id alone is not unique across migrations.
      const key = `generate:${context.id}/${crypto.randomUUID()}`;
      this.#active.add(key, decision.instanceId, request.token_ids.length, decision.overlapBlocks);
      this.#pending.add(key, decision.instanceId, hashes.sequence);
      this.#indexer.recordRouted?.(request.token_ids, decision.instanceId, options.loraId);
      let stream: ResponseStream<T>;
      try {
        const sent = decision.kvFetch ? { ...request, kv_fetch: decision.kvFetch } : request;
        stream = await client.direct<T>(sent, decision.instanceId, { context });
      } catch (err) {
        this.#pending.done(key);
        this.#active.free(key);
        if (err instanceof NoInstancesError) continue; // gone since discovery listed it
        throw err;
      }
      return this.#tracked(stream, key);
    }
  }

  /**
   * Wraps a stream so that the load book follows it: progress as it is read, out when it
   * ends, when its context is stopped or killed, or when nobody reads it in time.
   */
  #tracked<T extends { token_ids?: number[] }>(
    stream: ResponseStream<T>,
    key: string,
  ): ResponseStream<T> {
    const book = this.#active;
    const pending = this.#pending;
    const active = {
      free: (k: string) => {
        pending.done(k);
        book.free(k);
      },
      progress: (k: string, n: number) => {
        pending.done(k);
        book.progress(k, n);
      },
    };
    const unread = this.#unread;
    const context = stream.context;
    const timeoutMs = this.#unreadMs;
    const log = this.#log;
    let read = false;
    let abandoned = false;
    // A stream stopped before anyone read it leaves the book too. onStop rather than the
    // context's signal: a signal costs an AbortController per request.
    const offStop = context.onStop(() => active.free(key));
    if (context.isStopped()) active.free(key);
    // A stream nobody reads and nobody stops would hold its load forever: stop it.
    const timer = setTimeout(() => {
      unread.delete(timer);
      if (read) return;
      abandoned = true;
      offStop();
      active.free(key);
      const fields = { request_id: context.id, worker: stream.instanceId, timeout_ms: timeoutMs };
      // A stopped stream nobody drained is routine; a live one nobody read is a caller bug.
      if (context.isStopped()) log.debug("a stopped routed stream was never read", fields);
      else log.warn("a routed stream was not read in time; stopping it", fields);
      // Ending an iterator before reading stops the request on the worker and hangs up
      // (stopping the context alone does not reach a worker whose stream is unread).
      try {
        const it = stream[Symbol.asyncIterator]();
        Promise.resolve(it.return?.()).catch((err) =>
          log.debug("cannot stop an unread stream", { error: String(err) })
        );
      } finally {
        if (!context.isStopped()) context.stopGenerating();
      }
    }, timeoutMs);
    unread.add(timer);
    const iterate = async function* (): AsyncGenerator<T> {
      if (abandoned) {
        throw new CancelledError(
          `request ${context.id} was not read within ${timeoutMs} ms of routing; the router stopped it`,
        );
      }
      read = true;
      clearTimeout(timer);
      unread.delete(timer);
      try {
        for await (const item of stream) {
          active.progress(key, item.token_ids?.length ?? 0);
          yield item;
        }
      } finally {
        offStop();
        active.free(key);
      }
    };
    return {
      context,
      instanceId: stream.instanceId,
      [Symbol.asyncIterator]: iterate,
    };
  }

  /** Stops the indexer and the client the router made. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const timer of this.#unread) clearTimeout(timer);
    this.#unread.clear();
    await this.#indexer.close?.();
    await this.#metrics?.close();
    await this.#sync?.close();
    if (this.#ownsClient) await (await this.#client).close();
  }
}

/** The load-book key of a request booked through findBestMatch (apart from generate's). */
function bookedKey(requestId: string): string {
  return `booked:${requestId}`;
}
