// The decode worker's KV block accounting with prefix caching: which block ids are free,
// which a request holds (reference-counted), and which full blocks stay cached under the
// mocker's sequence hashes after their requests end (evicted least recently used first).

import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";
import type { BlockHash } from "../kv_router/hashing.ts";

/** Not enough free (or evictable) KV blocks. */
export class KvCacheFullError extends DynamoError {}

/**
 * Block ids `0 .. numBlocks-1` in three states: free; held (reference count >= 1, cached
 * under a sequence hash or anonymous); or cached and held by nobody, kept for a later
 * prefix hit until an allocation needs the room. Bookkeeping only: the bytes live in
 * {@linkcode DecodeKvCache}'s region.
 *
 * @example
 * ```ts
 * const pool = new KvBlockPool(8);
 * const ids = pool.allocate(2);
 * pool.cache([10n, 11n], ids); // both now cached
 * pool.release(ids); // still cached, evictable
 * pool.acquirePrefix([10n, 11n, 12n]); // the ids of 10n and 11n, held again
 * ```
 */
export class KvBlockPool {
  /** Blocks in the pool. */
  readonly numBlocks: number;
  readonly #free: number[];
  /** Held blocks: id -> reference count. */
  readonly #refs = new Map<number, number>();
  readonly #byHash = new Map<BlockHash, number>();
  readonly #hashOf = new Map<number, BlockHash>();
  /** Cached blocks nobody holds; iteration order is least recently used first. */
  readonly #idle = new Set<number>();

  /**
   * Creates a pool of `numBlocks` free blocks.
   * @throws {InvalidArgumentError} a block count that is not a whole number >= 1
   */
  constructor(numBlocks: number) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1) {
      throw new InvalidArgumentError(`numBlocks must be an integer >= 1, got ${numBlocks}`);
    }
    this.numBlocks = numBlocks;
    this.#free = Array.from({ length: numBlocks }, (_, i) => i);
  }

  /** Blocks an allocation can take now: free ones plus cached ones nobody holds. */
  get availableBlocks(): number {
    return this.#free.length + this.#idle.size;
  }

  /** Blocks cached under a sequence hash, held or not. */
  get cachedBlocks(): number {
    return this.#byHash.size;
  }

  /** Cached blocks nobody holds (the eviction candidates). */
  get idleBlocks(): number {
    return this.#idle.size;
  }

  /** Reference count of a block id (0 when free or idle). */
  refCount(id: number): number {
    return this.#refs.get(id) ?? 0;
  }

  /** The hash a block is cached under, if any. */
  hashOf(id: number): BlockHash | undefined {
    return this.#hashOf.get(id);
  }

  /**
   * How many leading blocks of a sequence are cached (no side effects).
   *
   * @param hashes the sequence hashes of a prompt's full blocks, in order
   */
  matchPrefix(hashes: readonly BlockHash[]): number {
    let n = 0;
    while (n < hashes.length && this.#byHash.has(hashes[n]!)) n++;
    return n;
  }

  /**
   * Takes a reference on each block of the longest cached prefix of `hashes`.
   *
   * @param hashes the sequence hashes of a prompt's full blocks, in order
   * @returns the block ids of the prefix, in order (release them when done)
   */
  acquirePrefix(hashes: readonly BlockHash[]): number[] {
    const n = this.matchPrefix(hashes);
    const ids: number[] = [];
    for (let i = 0; i < n; i++) {
      const id = this.#byHash.get(hashes[i]!)!;
      this.#idle.delete(id);
      this.#refs.set(id, (this.#refs.get(id) ?? 0) + 1);
      ids.push(id);
    }
    return ids;
  }

  /**
   * Takes `n` uncached blocks (reference count 1), evicting idle cached blocks, least
   * recently used first, when too few are free.
   *
   * @returns the block ids
   * @throws {KvCacheFullError} fewer than `n` are free or idle
   */
  allocate(n: number): number[] {
    if (n > this.availableBlocks) {
      throw new KvCacheFullError(
        `need ${n} KV blocks, ${this.#free.length} free and ${this.#idle.size} evictable`,
      );
    }
    for (const id of this.#idle) {
      if (this.#free.length >= n) break;
      this.#idle.delete(id);
      this.#uncache(id);
      this.#free.push(id);
    }
    const ids = this.#free.splice(0, n);
    for (const id of ids) this.#refs.set(id, 1);
    return ids;
  }

  /**
   * Names held blocks by their sequence hashes so later requests hit them. A hash already
   * cached under another block (a concurrent request computed the same prefix) keeps
   * that block; this one stays anonymous and is freed on release.
   *
   * @param hashes sequence hashes, one per block
   * @param ids held block ids, at least as many as `hashes` (extra ones are left alone)
   * @returns how many blocks were newly cached
   * @throws {InvalidArgumentError} a block that is not held
   */
  cache(hashes: readonly BlockHash[], ids: readonly number[]): number {
    let added = 0;
    for (const [i, h] of hashes.entries()) {
      const id = ids[i];
      if (id === undefined) break;
      if (!this.#refs.has(id)) throw new InvalidArgumentError(`block ${id} is not held`);
      if (this.#byHash.has(h) || this.#hashOf.has(id)) continue;
      this.#byHash.set(h, id);
      this.#hashOf.set(id, h);
      added++;
    }
    return added;
  }

  /**
   * Drops one reference on each block: a block nobody holds any more stays cached (idle,
   * most recently used last in the order given, so pass a prompt's blocks tail first to
   * evict tails before their prefixes) or, when uncached, becomes free.
   *
   * @throws {InvalidArgumentError} a block that is not held
   */
  release(ids: readonly number[]): void {
    for (const id of ids) {
      const refs = this.#refs.get(id);
      if (refs === undefined) throw new InvalidArgumentError(`block ${id} is not held`);
      if (refs > 1) {
        this.#refs.set(id, refs - 1);
        continue;
      }
      this.#refs.delete(id);
      if (this.#hashOf.has(id)) this.#idle.add(id);
      else this.#free.push(id);
    }
  }

  /**
   * Takes a block out of the cache (its bytes were found wrong): no later request hits
   * it; it is freed when its holders release it.
   */
  forget(id: number): void {
    this.#uncache(id);
    if (this.#idle.delete(id)) this.#free.push(id);
  }

  #uncache(id: number): void {
    const h = this.#hashOf.get(id);
    if (h === undefined) return;
    this.#hashOf.delete(id);
    this.#byHash.delete(h);
  }
}
