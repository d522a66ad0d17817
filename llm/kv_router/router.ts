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
import { Context } from "../../runtime/context.ts";
import { InvalidArgumentError, NoInstancesError } from "../../runtime/errors.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { KvIndexer } from "./indexer.ts";
import {
  ActiveSequences,
  type CostFunction,
  defaultCosts,
  pickByCost,
  type WorkerCandidate,
} from "./scheduler.ts";

/** Cached-prefix depth per worker, in blocks. */
export interface OverlapLookup {
  findMatchesForRequest(
    tokenIds: ArrayLike<number>,
    loraId?: number,
  ): Promise<{ scores: Map<string, number> }>;
  /** The router tells an approximate indexer where it sent a request (optional). */
  recordRouted?(tokenIds: ArrayLike<number>, workerId: string, loraId?: number): void;
  close?(): Promise<void> | void;
}

/** Options of {@linkcode KvRouter}. */
export interface KvRouterOptions {
  /** Tokens per KV block (the workers' `kv_cache_block_size`). */
  blockSize: number;
  /** Weight of uncached prefill blocks against decode load (default 1). */
  overlapScoreWeight?: number;
  /** 0 (default): the cheapest worker; above 0: softmax sampling over normalised costs. */
  temperature?: number;
  /** Replaces the reference cost. */
  costFunction?: CostFunction;
  /** Where overlaps come from (default: a KvIndexer on the endpoint's component). */
  indexer?: OverlapLookup;
  /** The endpoint's client (default: `endpoint.client()`). */
  client?: Client;
  /** Source of randomness in [0, 1) for ties and sampling (default Math.random). */
  random?: () => number;
}

/** What {@linkcode KvRouter.findBestMatch} decided. */
export interface RouteDecision {
  instanceId: string;
  /** Blocks of the request's prefix cached on that worker. */
  overlapBlocks: number;
}

/** Options of {@linkcode KvRouter.findBestMatch}. */
export interface FindBestMatchOptions {
  /** Choose only among these instance ids. */
  instances?: readonly string[];
  loraId?: number;
}

/** Options of {@linkcode KvRouter.generate}. */
export interface KvRouteOptions extends FindBestMatchOptions {
  context?: Context;
}

/** The router's view of a request body: token ids (a PreprocessedRequest has them). */
interface TokensRequest {
  token_ids: number[];
}

/**
 * A KV-aware router over one endpoint.
 *
 * @example
 * ```ts
 * const router = await KvRouter.create(endpoint, { blockSize: 16 });
 * const { instanceId, overlapBlocks } = await router.findBestMatch(tokenIds);
 * const stream = await router.generate({ token_ids: tokenIds, ... });
 * ```
 */
export class KvRouter {
  readonly blockSize: number;
  readonly overlapScoreWeight: number;
  readonly temperature: number;
  readonly #indexer: OverlapLookup;
  readonly #client: Promise<Client>;
  readonly #ownsClient: boolean;
  readonly #costFunction: CostFunction | undefined;
  readonly #random: () => number;
  readonly #active: ActiveSequences;
  #closed = false;

  /**
   * @throws {InvalidArgumentError} a bad block size, weight or temperature
   */
  constructor(endpoint: Endpoint, options: KvRouterOptions) {
    const { blockSize } = options;
    if (!Number.isInteger(blockSize) || blockSize <= 0) {
      throw new InvalidArgumentError(`blockSize must be a positive integer, got ${blockSize}`);
    }
    const weight = options.overlapScoreWeight ?? 1;
    if (!(weight >= 0)) {
      throw new InvalidArgumentError(`overlapScoreWeight must be >= 0, got ${weight}`);
    }
    const temperature = options.temperature ?? 0;
    if (!(temperature >= 0)) {
      throw new InvalidArgumentError(`temperature must be >= 0, got ${temperature}`);
    }
    this.blockSize = blockSize;
    this.overlapScoreWeight = weight;
    this.temperature = temperature;
    this.#indexer = options.indexer ?? new KvIndexer(endpoint.component, blockSize);
    this.#ownsClient = options.client === undefined;
    this.#client = options.client ? Promise.resolve(options.client) : endpoint.client();
    this.#costFunction = options.costFunction;
    this.#random = options.random ?? Math.random;
    this.#active = new ActiveSequences(blockSize);
  }

  /** The predicted load of a worker, from the router's own book. */
  load(instanceId: string): { activeBlocks: number; prefillBlocks: number; requests: number } {
    return this.#active.load(instanceId);
  }

  /**
   * Picks the worker for a prompt.
   * @throws {NoInstancesError} no instance to pick from
   */
  async findBestMatch(
    tokenIds: readonly number[],
    options: FindBestMatchOptions = {},
  ): Promise<RouteDecision> {
    const client = await this.#client;
    return await this.#decide(client, tokenIds, options, new Set());
  }

  async #decide(
    client: Client,
    tokenIds: readonly number[],
    options: FindBestMatchOptions,
    exclude: ReadonlySet<string>,
  ): Promise<RouteDecision> {
    const allowed = options.instances === undefined ? undefined : new Set(options.instances);
    const ids = client.availableInstanceIds().filter((id) =>
      !exclude.has(id) && (allowed === undefined || allowed.has(id))
    );
    if (ids.length === 0) throw new NoInstancesError(client.path);
    const { scores } = await this.#indexer.findMatchesForRequest(tokenIds, options.loraId);
    const requestBlocks = Math.ceil(tokenIds.length / this.blockSize);
    const candidates: WorkerCandidate[] = ids.map((workerId) => {
      const load = this.#active.load(workerId);
      return {
        workerId,
        overlapBlocks: Math.min(scores.get(workerId) ?? 0, requestBlocks),
        requestBlocks,
        activeBlocks: load.activeBlocks,
        prefillBlocks: load.prefillBlocks,
        activeRequests: load.requests,
      };
    });
    let instanceId: string;
    if (this.#costFunction) {
      const picked = await this.#costFunction({
        candidates,
        tokenLength: tokenIds.length,
        blockSize: this.blockSize,
      });
      instanceId = typeof picked === "string"
        ? picked
        : pickByCost(picked, this.temperature, this.#random);
      if (!ids.includes(instanceId)) {
        throw new InvalidArgumentError(
          `the cost function picked ${JSON.stringify(instanceId)}, not one of ${ids.join(", ")}`,
        );
      }
    } else {
      instanceId = pickByCost(
        defaultCosts(candidates, this.overlapScoreWeight),
        this.temperature,
        this.#random,
      );
    }
    const overlapBlocks = candidates.find((c) => c.workerId === instanceId)!.overlapBlocks;
    return { instanceId, overlapBlocks };
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
    for (;;) {
      const decision = await this.#decide(client, request.token_ids, options, tried);
      tried.add(decision.instanceId);
      // One entry per attempt: the request id alone is not unique across migrations.
      const key = `${context.id}/${crypto.randomUUID()}`;
      this.#active.add(key, decision.instanceId, request.token_ids.length, decision.overlapBlocks);
      this.#indexer.recordRouted?.(request.token_ids, decision.instanceId, options.loraId);
      let stream: ResponseStream<T>;
      try {
        stream = await client.direct<T>(request, decision.instanceId, { context });
      } catch (err) {
        this.#active.free(key);
        if (err instanceof NoInstancesError) continue; // gone since discovery listed it
        throw err;
      }
      return this.#tracked(stream, key);
    }
  }

  #tracked<T extends { token_ids?: number[] }>(
    stream: ResponseStream<T>,
    key: string,
  ): ResponseStream<T> {
    const active = this.#active;
    // A stream stopped before anyone iterated it leaves the book too.
    stream.context.signal.addEventListener("abort", () => active.free(key), { once: true });
    const iterate = async function* (): AsyncGenerator<T> {
      try {
        for await (const item of stream) {
          active.progress(key, item.token_ids?.length ?? 0);
          yield item;
        }
      } finally {
        active.free(key);
      }
    };
    return {
      context: stream.context,
      instanceId: stream.instanceId,
      [Symbol.asyncIterator]: iterate,
    };
  }

  /** Stops the indexer and the client the router made. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#indexer.close?.();
    if (this.#ownsClient) await (await this.#client).close();
  }
}
