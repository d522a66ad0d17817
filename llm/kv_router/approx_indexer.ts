/**
 * {@linkcode ApproxKvIndexer}: the KV indexer for engines that publish no events. The
 * router tells it where it sent each request, and it assumes the worker caches the
 * request's blocks for a while (TTL, default 120 s).
 *
 * @module
 */

import type { Component } from "../../runtime/component.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { checkBlockSize } from "./_block_size.ts";
import { type BlockHash, computeBlockHashesSync, computeLocalHashes } from "./hashing.ts";
import { InstanceWatch } from "./instance_watch.ts";
import type { OverlapScores } from "./protocols.ts";
import { RadixTree } from "./radix_tree.ts";
import { U64Map } from "./u64_map.ts";

/** Options of {@linkcode ApproxKvIndexer}. */
export interface ApproxKvIndexerOptions {
  /** How long a routed request's blocks count as cached, in ms (default 120000). */
  ttlMs?: number;
  /** Clock in ms (default `performance.now`). */
  now?: () => number;
  /** Remove workers whose instances leave this component in discovery. */
  component?: Component;
}

/**
 * An indexer for engines without KV events: the router records where it sent each
 * request, and the worker is assumed to cache the request's blocks for `ttlMs`.
 *
 * @example
 * ```ts
 * const approx = new ApproxKvIndexer(16, { ttlMs: 60_000 });
 * approx.recordRouted(tokenIds, "worker-1");
 * (await approx.findMatchesForRequest(tokenIds)).scores.get("worker-1"); // blocks of tokenIds
 * ```
 */
export class ApproxKvIndexer {
  /** The blocks each worker is assumed to hold (from routing decisions, not KV events). */
  readonly tree: RadixTree = new RadixTree();
  readonly #blockSize: number;
  readonly #ttl: number;
  readonly #now: () => number;
  /** (worker, sequence hash, expiry) in expiry order: the TTL is the same for all. */
  #queue: { w: string; h: BlockHash; at: number }[] = [];
  #head = 0;
  /** Latest expiry per worker and block (a re-routed block lives longer). */
  readonly #expiry = new Map<string, U64Map<number>>();
  readonly #stop = new AbortController();
  readonly #watch: InstanceWatch | undefined;

  /**
   * Creates an indexer that learns from routing decisions and forgets after a TTL.
   * @param blockSize tokens per KV block
   * @param options TTL, clock, and the component whose workers to follow
   * @throws {InvalidArgumentError} a bad block size or TTL
   */
  constructor(blockSize: number, options: ApproxKvIndexerOptions = {}) {
    checkBlockSize(blockSize);
    const ttl = options.ttlMs ?? 120_000;
    if (!(ttl > 0)) throw new InvalidArgumentError(`ttlMs must be positive, got ${ttl}`);
    this.#blockSize = blockSize;
    this.#ttl = ttl;
    this.#now = options.now ?? (() => performance.now());
    if (options.component) {
      const rt = options.component.runtimeInternals;
      this.#watch = new InstanceWatch(
        rt,
        options.component,
        AbortSignal.any([this.#stop.signal, rt.shutdownSignal]),
        { left: (w) => this.removeWorker(w), joined: () => {} },
      );
      rt.track(this.#watch.done);
    }
  }

  /** Tokens per KV block. */
  blockSize(): number {
    return this.#blockSize;
  }

  /** Scores workers by the blocks routed to them that have not expired. */
  findMatchesForRequest(tokenIds: ArrayLike<number>, loraId = 0): Promise<OverlapScores> {
    try {
      this.expire();
      return Promise.resolve(
        this.tree.findMatches(computeLocalHashes(tokenIds, this.#blockSize, loraId)),
      );
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Scores workers for a prefix given as local block hashes. */
  findMatches(localHashes: ArrayLike<BlockHash>): Promise<OverlapScores> {
    this.expire();
    return Promise.resolve(this.tree.findMatches(localHashes));
  }

  /** Records that the request `tokenIds` went to `workerId`: its blocks count as cached. */
  recordRouted(tokenIds: ArrayLike<number>, workerId: string, loraId = 0): void {
    this.expire();
    const { local, sequence } = computeBlockHashesSync(tokenIds, this.#blockSize, loraId);
    if (local.length === 0) return;
    const at = this.#now() + this.#ttl;
    let mine = this.#expiry.get(workerId);
    if (!mine) this.#expiry.set(workerId, mine = new U64Map());
    for (const h of sequence) {
      mine.set(h, at);
      this.#queue.push({ w: workerId, h, at });
    }
    this.tree.apply(workerId, {
      stored: {
        parent_hash: null,
        blocks: local.map((tokens_hash, i) => ({ block_hash: sequence[i]!, tokens_hash })),
      },
    });
  }

  /** Drops the blocks whose TTL ran out (also done on every lookup and record). */
  expire(): void {
    const now = this.#now();
    const q = this.#queue;
    while (this.#head < q.length && q[this.#head]!.at <= now) {
      const { w, h, at } = q[this.#head++]!;
      const mine = this.#expiry.get(w);
      if (mine?.get(h) !== at) continue; // refreshed since, or the worker was removed
      mine.delete(h);
      this.tree.apply(w, { removed: { block_hashes: [h] } });
    }
    if (this.#head > 1024 && this.#head * 2 > q.length) {
      this.#queue = q.slice(this.#head);
      this.#head = 0;
    }
  }

  /** Forgets a worker and its blocks. */
  removeWorker(workerId: string): void {
    this.tree.removeWorker(workerId);
    this.#expiry.delete(workerId);
  }

  /** Stops following discovery. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#watch?.done;
  }
}
