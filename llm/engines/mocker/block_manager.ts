// The mocker's KV block pool: reference-counted active blocks, an LRU pool of inactive
// cached blocks (prefix caching, keyed by sequence hash), and the KV events they cause.

import { InvalidArgumentError } from "../../../runtime/errors.ts";
import { U64Map } from "../../kv_router/u64_map.ts";
import type { BlockHash, KvCacheStoredBlock, KvEventSink } from "./kv_types.ts";

/** Options of {@linkcode BlockManager}. */
export interface BlockManagerOptions {
  /** KV blocks on the simulated GPU (default 16384). */
  numGpuBlocks?: number;
  /** Tokens per block (default 16). */
  blockSize?: number;
  /** Fraction of blocks kept free when admitting new requests (default 0.01). */
  watermark?: number;
  /** Receives `stored`, `removed` and `cleared` events. */
  onEvent?: KvEventSink;
}

/** KV blocks per mocker when `numGpuBlocks` is not given. */
export const DEFAULT_NUM_GPU_BLOCKS = 16384;

/** A full block: the sequence hash that names it and its tokens' local hash. */
export interface FullBlock {
  /** The hash that names the block: its tokens and every block before it. */
  sequenceHash: BlockHash;
  /** The hash of the block's own tokens. */
  localHash: BlockHash;
}

/**
 * KV block accounting of one simulated worker. A block is either free, active (held by
 * at least one running sequence: a full block under its sequence hash, or an anonymous
 * block still being filled), or inactive (a full block nobody holds, kept for prefix
 * reuse and evicted least recently used first). A full block that first enters the
 * cache is reported `stored`; an evicted one `removed`.
 *
 * @example
 * ```ts
 * const bm = new BlockManager({ numGpuBlocks: 8, blockSize: 16, onEvent: console.log });
 * bm.allocate(1);
 * bm.commit(null, [{ sequenceHash: 1n, localHash: 1n }]); // stored
 * bm.release([1n], 0); // inactive, still cached
 * ```
 */
export class BlockManager {
  /** Blocks on the device. */
  readonly numGpuBlocks: number;
  /** Tokens per block. */
  readonly blockSize: number;
  /** Blocks admission keeps free. */
  readonly watermarkBlocks: number;
  readonly #onEvent: KvEventSink;
  /**
   * Full active blocks: sequence hash -> reference count. Both maps are `U64Map`s: with them a
   * `Map` and a `Set` keyed by bigint, this class's commits, releases and evictions (mostly map
   * operations) took a third of a simulated replay's CPU.
   */
  readonly #active = new U64Map<number>();
  /** Anonymous (partially filled or not yet committed) active blocks. */
  #anonymous = 0;
  /**
   * Inactive cached blocks, each mapped to its own hash (handed out again as it came); the
   * order is least recently used first.
   */
  readonly #inactive = new U64Map<BlockHash>();

  /**
   * Creates a block manager with an empty cache.
   * @throws {InvalidArgumentError} a size or watermark out of range
   */
  constructor(options: BlockManagerOptions = {}) {
    const numGpuBlocks = options.numGpuBlocks ?? DEFAULT_NUM_GPU_BLOCKS;
    const blockSize = options.blockSize ?? 16;
    const watermark = options.watermark ?? 0.01;
    if (!Number.isInteger(numGpuBlocks) || numGpuBlocks < 1) {
      throw new InvalidArgumentError(
        `numGpuBlocks must be a whole number >= 1, got ${numGpuBlocks}`,
      );
    }
    if (!Number.isInteger(blockSize) || blockSize < 1) {
      throw new InvalidArgumentError(`blockSize must be a whole number >= 1, got ${blockSize}`);
    }
    if (!(watermark >= 0 && watermark < 1)) {
      throw new InvalidArgumentError(`watermark must be in [0, 1), got ${watermark}`);
    }
    this.numGpuBlocks = numGpuBlocks;
    this.blockSize = blockSize;
    this.watermarkBlocks = Math.floor(watermark * numGpuBlocks);
    this.#onEvent = options.onEvent ?? (() => {});
  }

  /** Blocks held by running sequences (full and anonymous). */
  get activeBlocks(): number {
    return this.#active.size + this.#anonymous;
  }

  /** Cached blocks nobody holds (evictable). */
  get inactiveBlocks(): number {
    return this.#inactive.size;
  }

  /** Blocks an allocation can take: the free ones plus the evictable ones. */
  get availableBlocks(): number {
    return this.numGpuBlocks - this.activeBlocks;
  }

  /** Active blocks / total blocks. */
  get usage(): number {
    return this.activeBlocks / this.numGpuBlocks;
  }

  /** Reference count of a full block (0 when inactive or absent). */
  refCount(hash: BlockHash): number {
    return this.#active.get(hash) ?? 0;
  }

  /** Whether a full block is cached, active or inactive. */
  isCached(hash: BlockHash): boolean {
    return this.#active.has(hash) || this.#inactive.has(hash);
  }

  /** Inactive blocks, least recently used first (the eviction order). */
  inactiveHashes(): BlockHash[] {
    return [...this.#inactive.values()];
  }

  /**
   * How many leading blocks of a sequence are cached.
   * @param hashes the sequence hashes of a request's full blocks, in order
   */
  matchPrefix(hashes: readonly BlockHash[]): number {
    let n = 0;
    while (n < hashes.length && this.isCached(hashes[n]!)) n++;
    return n;
  }

  /**
   * Whether a new request fits while leaving the watermark free.
   * @param hits the cached prefix blocks it will take (see matchPrefix)
   * @param newBlocks the fresh blocks it needs on top
   */
  canAdmit(hits: readonly BlockHash[], newBlocks: number): boolean {
    let revived = 0;
    for (const h of hits) if (this.#inactive.has(h)) revived++;
    return this.availableBlocks - revived - newBlocks >= this.watermarkBlocks;
  }

  /**
   * Takes a reference on each cached block (a prefix hit); inactive ones become active.
   * @throws {InvalidArgumentError} a block that is not cached
   */
  acquireCached(hashes: readonly BlockHash[]): void {
    for (const h of hashes) {
      const refs = this.#active.get(h);
      if (refs !== undefined) {
        this.#active.set(h, refs + 1);
      } else if (this.#inactive.delete(h)) {
        this.#active.set(h, 1);
      } else {
        throw new InvalidArgumentError(`block ${h} is not cached`);
      }
    }
  }

  /**
   * Reserves `n` anonymous blocks, evicting least recently used inactive blocks when
   * there are not enough free ones (one `removed` event for the lot).
   * @throws {InvalidArgumentError} more than availableBlocks
   */
  allocate(n: number): void {
    if (n > this.availableBlocks) {
      throw new InvalidArgumentError(
        `cannot allocate ${n} blocks: ${this.availableBlocks} available`,
      );
    }
    const free = this.numGpuBlocks - this.activeBlocks - this.#inactive.size;
    if (n > free) this.#evict(n - free);
    this.#anonymous += n;
  }

  /**
   * Turns anonymous blocks, one per entry, into full cached blocks of one sequence. A
   * block already cached (another sequence computed the same prefix) is shared instead
   * and its anonymous block freed. Newly cached blocks are reported in `stored` events,
   * one per contiguous run, each naming the block before it as parent.
   *
   * @param parent sequence hash of the block before `blocks[0]` (null at the start)
   * @param blocks consecutive full blocks of the sequence
   * @throws {InvalidArgumentError} more blocks than anonymous blocks are reserved
   */
  commit(parent: BlockHash | null, blocks: readonly FullBlock[]): void {
    if (blocks.length > this.#anonymous) {
      throw new InvalidArgumentError(
        `cannot commit ${blocks.length} blocks: ${this.#anonymous} reserved`,
      );
    }
    let run: KvCacheStoredBlock[] = [];
    let runParent = parent;
    let prev = parent;
    for (const b of blocks) {
      this.#anonymous--;
      const h = b.sequenceHash;
      const refs = this.#active.get(h);
      if (refs !== undefined || this.#inactive.delete(h)) {
        this.#active.set(h, (refs ?? 0) + 1);
        if (run.length > 0) this.#onEvent({ stored: { parent_hash: runParent, blocks: run } });
        run = [];
      } else {
        this.#active.set(h, 1);
        if (run.length === 0) runParent = prev;
        run.push({ block_hash: h, tokens_hash: b.localHash });
      }
      prev = h;
    }
    if (run.length > 0) this.#onEvent({ stored: { parent_hash: runParent, blocks: run } });
  }

  /**
   * Drops references: full blocks whose count reaches 0 become inactive (most recently
   * used first in the order given, so pass a sequence's blocks tail first to evict tails
   * before their prefixes), anonymous blocks are freed.
   * @throws {InvalidArgumentError} a block that is not active, or too many anonymous blocks
   */
  release(hashes: readonly BlockHash[], anonymous: number): void {
    if (anonymous > this.#anonymous || anonymous < 0) {
      throw new InvalidArgumentError(
        `cannot free ${anonymous} anonymous blocks: ${this.#anonymous} reserved`,
      );
    }
    this.#anonymous -= anonymous;
    for (const h of hashes) {
      const refs = this.#active.get(h);
      if (refs === undefined) throw new InvalidArgumentError(`block ${h} is not active`);
      if (refs > 1) {
        this.#active.set(h, refs - 1);
      } else {
        this.#active.delete(h);
        this.#inactive.set(h, h);
      }
    }
  }

  /** Drops every inactive block (a `cleared` event when active blocks do not remain). */
  clearInactive(): void {
    if (this.#inactive.size === 0) return;
    if (this.#active.size === 0) {
      this.#inactive.clear();
      this.#onEvent("cleared");
    } else {
      this.#evict(this.#inactive.size);
    }
  }

  #evict(n: number): void {
    const removed: BlockHash[] = [];
    for (const h of this.#inactive.values()) {
      if (removed.length === n) break;
      removed.push(h);
    }
    for (const h of removed) this.#inactive.delete(h);
    if (removed.length > 0) this.#onEvent({ removed: { block_hashes: removed } });
  }
}

/**
 * Makes the first `end` of a sequence's full blocks cached in `bm`, as a worker that loaded
 * their KV (from a peer, or from a prefill worker): what is cached already is kept, the rest is
 * allocated and committed (`stored` events), as many as fit. All of them come back held, so that
 * nothing evicts them before their request has them: release them (tail first) after.
 *
 * @param bm the block manager
 * @param blocks the sequence's full blocks
 * @param end how many of them to make cached
 * @returns the hashes of the blocks now cached and held: `blocks[0 .. n)`, n <= end
 * @example
 * ```ts
 * const bm = new BlockManager({ numGpuBlocks: 8, blockSize: 4 });
 * const held = cachePrefix(bm, [{ localHash: 1n, sequenceHash: 11n }], 1);
 * bm.release(held.toReversed(), 0); // cached, evictable
 * ```
 */
export function cachePrefix(
  bm: BlockManager,
  blocks: readonly FullBlock[],
  end: number,
): BlockHash[] {
  const hashes = blocks.slice(0, Math.max(0, end)).map((b) => b.sequenceHash);
  const have = bm.matchPrefix(hashes);
  bm.acquireCached(hashes.slice(0, have));
  const add = blocks.slice(have, have + Math.min(hashes.length - have, bm.availableBlocks));
  bm.allocate(add.length);
  bm.commit(have > 0 ? hashes[have - 1]! : null, add);
  return hashes.slice(0, have + add.length);
}
