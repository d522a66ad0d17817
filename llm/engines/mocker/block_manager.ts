// The mocker's KV block pool: reference-counted active blocks, an LRU pool of inactive
// cached blocks (prefix caching, keyed by sequence hash), an optional host-memory tier the
// evicted ones go to, and the KV events they cause.

import { InvalidArgumentError } from "../../../runtime/errors.ts";
import { U64Map } from "../../kv_router/u64_map.ts";
import type { BlockHash, KvCacheEventData, KvCacheStoredBlock, KvEventSink } from "./kv_types.ts";

/** Options of {@linkcode BlockManager}. */
export interface BlockManagerOptions {
  /** KV blocks on the simulated GPU (default 16384). */
  numGpuBlocks?: number;
  /** Tokens per block (default 16). */
  blockSize?: number;
  /** Fraction of blocks kept free when admitting new requests (default 0.01). */
  watermark?: number;
  /**
   * KV blocks in host memory (the reference KVBM's G2 tier): a block evicted from the GPU goes
   * there instead of being dropped, and leaves it least recently offloaded first; a prompt whose
   * prefix is there loads it back (see {@linkcode prefixToLoad}) instead of computing it.
   * Default 0: no host tier.
   */
  hostBlocks?: number;
  /** Receives `stored`, `removed` and `cleared` events, each with its tier. */
  onEvent?: KvEventSink;
}

/** KV blocks per mocker when `numGpuBlocks` is not given. */
export const DEFAULT_NUM_GPU_BLOCKS = 16384;

/**
 * The host tier a mocker worker has unless told otherwise: 4 blocks in host memory per GPU
 * block. With the default GPU pool and an 8B-class model's 2 MiB blocks (see
 * `DEFAULT_KV_FETCH_MS_PER_BLOCK`), 65,536 blocks are 128 GiB: half of the host memory per GPU of
 * an 8-GPU node with 2 TiB (DGX H100 or H200).
 *
 * @param numGpuBlocks the worker's GPU blocks (default {@linkcode DEFAULT_NUM_GPU_BLOCKS})
 * @returns the host tier's blocks
 * @example
 * ```ts
 * defaultHostBlocks(); // 65536
 * ```
 */
export function defaultHostBlocks(numGpuBlocks = DEFAULT_NUM_GPU_BLOCKS): number {
  return HOST_BLOCKS_PER_GPU_BLOCK * numGpuBlocks;
}

const HOST_BLOCKS_PER_GPU_BLOCK = 4;

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
 * reuse and evicted least recently used first, those a peer copied before all others: see
 * {@linkcode BlockManager.demote}). With a host tier, an evicted block moves there (each full
 * block is in one tier at a time) and is dropped from it least recently evicted first (demoted
 * ones before). The events name their tier (the sink's second argument; none: the device): a
 * block evicted to the host is `stored` in `host_pinned` and then `removed` from the device, one
 * copied back `stored` on the device and then `removed` from `host_pinned`, so a router reading
 * both tiers holds it throughout. Without a host tier the events are the device's alone.
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
  /** Blocks the host tier holds at most (0: none). */
  readonly hostBlocks: number;
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
  /** Blocks in the host tier, least recently evicted first, each mapped to its own hash. */
  readonly #host = new U64Map<BlockHash>();
  /** With a host tier: every full block held in either tier -> its parent and tokens' hash. */
  readonly #meta = new U64Map<{ parent: BlockHash | null; local: BlockHash }>();
  /**
   * Blocks {@linkcode demote}d while inactive on the GPU, or in the host tier: the first to leave
   * there, before the least recently used. A block leaves these maps when a request takes it
   * and when it leaves the worker.
   */
  readonly #demotedGpu = new U64Map<BlockHash>();
  readonly #demotedHost = new U64Map<BlockHash>();

  /**
   * Creates a block manager with an empty cache.
   * @throws {InvalidArgumentError} a size or watermark out of range
   */
  constructor(options: BlockManagerOptions = {}) {
    const numGpuBlocks = options.numGpuBlocks ?? DEFAULT_NUM_GPU_BLOCKS;
    const blockSize = options.blockSize ?? 16;
    const watermark = options.watermark ?? 0.01;
    const hostBlocks = options.hostBlocks ?? 0;
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
    if (!Number.isInteger(hostBlocks) || hostBlocks < 0) {
      throw new InvalidArgumentError(`hostBlocks must be a whole number >= 0, got ${hostBlocks}`);
    }
    this.hostBlocks = hostBlocks;
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

  /** Blocks in the host tier. */
  get hostCachedBlocks(): number {
    return this.#host.size;
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

  /** Whether a full block is held in either tier: on the GPU (active or inactive) or the host. */
  isHeld(hash: BlockHash): boolean {
    return this.isCached(hash) || this.#host.has(hash);
  }

  /** Whether a full block is in the host tier (and so not on the GPU). */
  isOnHost(hash: BlockHash): boolean {
    return this.#host.has(hash);
  }

  /** Inactive blocks in the eviction order: demoted ones first, then least recently used. */
  inactiveHashes(): BlockHash[] {
    return [...this.#evictionOrder()];
  }

  /** Inactive blocks in the eviction order, lazily. */
  *#evictionOrder(): Generator<BlockHash> {
    yield* this.#demotedGpu.values();
    yield* this.#without(this.#inactive, this.#demotedGpu);
  }

  /**
   * Marks blocks a peer has copied from this worker as the first to go: on the GPU (those no
   * request holds) they are evicted before the least recently used, and in the host tier dropped
   * before the least recently evicted. Two workers then seldom keep the same blocks for long, and
   * the fleet's caches hold more distinct prefixes (a conversation moved to a peer goes on there;
   * the copy here is what would be duplicated). A request here that takes a block again makes it
   * an ordinary one. Blocks this worker does not hold, or that a running request holds, are left
   * as they are. A prefix's last blocks go before its first (as a sequence's blocks, released
   * tail first, are evicted), so what stays is still a prefix.
   *
   * @param hashes sequence hashes of the blocks copied, in the prefix's order
   */
  demote(hashes: readonly BlockHash[]): void {
    for (const h of hashes.toReversed()) {
      if (this.#inactive.has(h)) this.#demotedGpu.set(h, h);
      else if (this.#host.has(h)) this.#demotedHost.set(h, h);
    }
  }

  /** The values of `map` that `skip` lacks, in order. */
  *#without(map: U64Map<BlockHash>, skip: U64Map<BlockHash>): Generator<BlockHash> {
    for (const h of map.values()) if (skip.size === 0 || !skip.has(h)) yield h;
  }

  /** A block a request takes (or that leaves the GPU) is no longer demoted there. */
  #undemote(h: BlockHash): void {
    if (this.#demotedGpu.size > 0) this.#demotedGpu.delete(h);
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
   * How many leading blocks of a sequence are held in either tier (those a request could have
   * without computing them: see {@linkcode prefixToLoad}).
   * @param hashes the sequence hashes of a request's full blocks, in order
   */
  heldPrefix(hashes: readonly BlockHash[]): number {
    let n = 0;
    while (n < hashes.length && this.isHeld(hashes[n]!)) n++;
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
        this.#undemote(h);
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
    this.#commit(parent, blocks, undefined);
  }

  /**
   * Allocates and commits blocks whose KV was loaded rather than computed (as
   * {@linkcode cachePrefix} does). Those in the host tier leave it before room is made for them
   * (which could otherwise drop them from it) and are not announced again.
   *
   * @param parent sequence hash of the block before `blocks[0]` (null at the start)
   * @param blocks consecutive full blocks of the sequence
   * @throws {InvalidArgumentError} more blocks than availableBlocks (nothing changes)
   */
  load(parent: BlockHash | null, blocks: readonly FullBlock[]): void {
    if (blocks.length > this.availableBlocks) {
      throw new InvalidArgumentError(
        `cannot load ${blocks.length} blocks: ${this.availableBlocks} available`,
      );
    }
    const fromHost = new Set<BlockHash>();
    for (const b of blocks) if (this.#host.delete(b.sequenceHash)) fromHost.add(b.sequenceHash);
    this.allocate(blocks.length);
    this.#commit(parent, blocks, fromHost);
  }

  #commit(
    parent: BlockHash | null,
    blocks: readonly FullBlock[],
    fromHost: ReadonlySet<BlockHash> | undefined,
  ): void {
    if (blocks.length > this.#anonymous) {
      throw new InvalidArgumentError(
        `cannot commit ${blocks.length} blocks: ${this.#anonymous} reserved`,
      );
    }
    let run: KvCacheStoredBlock[] = [];
    let runParent = parent;
    let prev = parent;
    // Blocks back from the host tier: stored on the device with the new ones, then removed
    // from the host in one event.
    const leftHost: BlockHash[] = [];
    for (const b of blocks) {
      this.#anonymous--;
      const h = b.sequenceHash;
      const refs = this.#active.get(h);
      if (refs !== undefined || this.#inactive.delete(h)) {
        // Already on the GPU: shared, not new to the device.
        this.#undemote(h);
        this.#active.set(h, (refs ?? 0) + 1);
        if (run.length > 0) this.#onEvent({ stored: { parent_hash: runParent, blocks: run } });
        run = [];
      } else {
        if (this.#host.delete(h) || fromHost?.has(h)) leftHost.push(h);
        if (this.#demotedHost.size > 0) this.#demotedHost.delete(h);
        this.#active.set(h, 1);
        if (this.hostBlocks > 0) this.#meta.set(h, { parent: prev, local: b.localHash });
        if (run.length === 0) runParent = prev;
        run.push({ block_hash: h, tokens_hash: b.localHash });
      }
      prev = h;
    }
    if (run.length > 0) this.#onEvent({ stored: { parent_hash: runParent, blocks: run } });
    if (leftHost.length > 0) {
      this.#onEvent({ removed: { block_hashes: leftHost } }, "host_pinned");
    }
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

  /**
   * Drops every inactive block and the host tier (a `cleared` event when active blocks do not
   * remain).
   */
  clearInactive(): void {
    if (this.#inactive.size === 0 && this.#host.size === 0) return;
    const inactive = [...this.#inactive.values()];
    const host = [...this.#host.values()];
    this.#inactive.clear();
    this.#host.clear();
    this.#demotedGpu.clear();
    this.#demotedHost.clear();
    for (const h of [...inactive, ...host]) this.#meta.delete(h);
    if (this.#active.size === 0) {
      if (inactive.length > 0) this.#onEvent("cleared");
      if (host.length > 0) this.#onEvent("cleared", "host_pinned");
      return;
    }
    if (inactive.length > 0) this.#onEvent({ removed: { block_hashes: inactive } });
    if (host.length > 0) this.#onEvent({ removed: { block_hashes: host } }, "host_pinned");
  }

  /**
   * Evicts `n` inactive blocks, demoted ones first, then the least recently used: to the host
   * tier (demoted ones stay demoted there), or gone.
   */
  #evict(n: number): void {
    const evicted: BlockHash[] = [];
    for (const h of this.#evictionOrder()) {
      if (evicted.length === n) break;
      evicted.push(h);
    }
    for (const h of evicted) {
      this.#inactive.delete(h);
      if (this.#demotedGpu.delete(h) && this.hostBlocks > 0) this.#demotedHost.set(h, h);
    }
    if (this.hostBlocks === 0) {
      if (evicted.length > 0) this.#onEvent({ removed: { block_hashes: evicted } });
      return;
    }
    // Stored in host memory before they leave the GPU: the worker holds them throughout.
    for (const h of evicted) this.#host.set(h, h);
    for (const stored of this.#chains(evicted)) this.#onEvent(stored, "host_pinned");
    if (evicted.length > 0) this.#onEvent({ removed: { block_hashes: evicted } });
    const dropped: BlockHash[] = [];
    const over = this.#host.size - this.hostBlocks;
    if (over > 0) {
      for (const h of this.#demotedHost.values()) {
        if (dropped.length === over) break;
        dropped.push(h);
      }
      for (const h of this.#without(this.#host, this.#demotedHost)) {
        if (dropped.length === over) break;
        dropped.push(h);
      }
    }
    for (const h of dropped) {
      this.#host.delete(h);
      this.#meta.delete(h);
      this.#demotedHost.delete(h);
    }
    if (dropped.length > 0) this.#onEvent({ removed: { block_hashes: dropped } }, "host_pinned");
  }

  /**
   * `stored` events for some blocks, parents first: one per run of blocks each the parent of the
   * next, each naming the parent of its first block.
   */
  #chains(hashes: readonly BlockHash[]): KvCacheEventData[] {
    const inSet = new U64Map<BlockHash>();
    for (const h of hashes) inSet.set(h, h);
    const children = new U64Map<BlockHash[]>();
    const roots: BlockHash[] = [];
    for (const h of hashes) {
      const parent = this.#meta.get(h)!.parent;
      if (parent === null || !inSet.has(parent)) roots.push(h);
      else {
        const list = children.get(parent);
        if (list) list.push(h);
        else children.set(parent, [h]);
      }
    }
    const out: KvCacheEventData[] = [];
    const starts = [...roots];
    while (starts.length > 0) {
      const first = starts.shift()!;
      const blocks: KvCacheStoredBlock[] = [];
      for (let at: BlockHash | undefined = first; at !== undefined;) {
        blocks.push({ block_hash: at, tokens_hash: this.#meta.get(at)!.local });
        const next: BlockHash[] = children.get(at) ?? [];
        at = next.length === 1 ? next[0] : undefined;
        if (next.length > 1) starts.push(...next);
      }
      out.push({ stored: { parent_hash: this.#meta.get(first)!.parent, blocks } });
    }
    return out;
  }
}

/** Where the leading blocks a request has without computing them come from. */
export interface PrefixLoad {
  /** The request has blocks `[0, end)` once they are loaded. */
  end: number;
  /** Blocks among them copied back from the worker's host tier. */
  fromHost: number;
  /** Blocks among them copied from a peer (those the worker holds in neither tier). */
  fromPeer: number;
}

/**
 * What a request on `bm` can have without computing it: the leading blocks held in either
 * tier here, or as many as a peer holds (`peerEnd`), whichever is longer; and how many of them
 * must be copied in, from this worker's host tier or from the peer (those on the GPU need
 * nothing).
 *
 * @param bm the block manager of the worker the request runs on
 * @param hashes the sequence hashes of the request's full blocks, in order
 * @param peerEnd leading blocks of `hashes` a peer holds and will send (default 0: no peer)
 * @example
 * ```ts
 * const bm = new BlockManager({ numGpuBlocks: 8, blockSize: 4, hostBlocks: 8 });
 * prefixToLoad(bm, [11n, 12n], 2); // { end: 2, fromHost: 0, fromPeer: 2 }
 * ```
 */
export function prefixToLoad(
  bm: BlockManager,
  hashes: readonly BlockHash[],
  peerEnd = 0,
): PrefixLoad {
  const end = Math.max(bm.heldPrefix(hashes), Math.min(Math.max(0, peerEnd), hashes.length));
  let fromHost = 0;
  let fromPeer = 0;
  for (let i = 0; i < end; i++) {
    const h = hashes[i]!;
    if (bm.isOnHost(h)) fromHost++;
    else if (!bm.isCached(h)) fromPeer++;
  }
  return { end, fromHost, fromPeer };
}

/** A copy of a prompt's prefix from a peer, as {@linkcode peerCopy} plans it. */
export interface PeerCopy {
  /** The request has blocks `[0, end)` once the copy lands. */
  end: number;
  /** The copy's simulated time in ms. */
  ms: number;
}

/**
 * What copying a prompt's prefix from a peer takes on the worker `bm`: the blocks the request has
 * once it lands (see {@linkcode prefixToLoad}: the worker's host-tier blocks before the peer's
 * come with it) and its simulated time. Nothing when the peer sends nothing the worker lacks:
 * host blocks are then the scheduler's to copy back as it admits the request.
 *
 * @param bm the block manager of the worker the request runs on
 * @param hashes the sequence hashes of the request's full blocks, in order
 * @param peerEnd leading blocks of `hashes` the peer holds and will send
 * @param msPerBlock simulated ms per block copied from the host tier and from the peer
 * @returns the copy, or undefined when there is nothing to copy from the peer
 * @example
 * ```ts
 * const bm = new BlockManager({ numGpuBlocks: 8, blockSize: 4, hostBlocks: 8 });
 * peerCopy(bm, [11n, 12n], 2, { host: 0.04, peer: 0.08 }); // { end: 2, ms: 0.16 }
 * ```
 */
export function peerCopy(
  bm: BlockManager,
  hashes: readonly BlockHash[],
  peerEnd: number,
  msPerBlock: { host: number; peer: number },
): PeerCopy | undefined {
  const load = prefixToLoad(bm, hashes, peerEnd);
  if (load.fromPeer === 0) return undefined;
  return { end: load.end, ms: load.fromHost * msPerBlock.host + load.fromPeer * msPerBlock.peer };
}

/**
 * Makes the first `end` of a sequence's full blocks cached in `bm`, as a worker that loaded
 * their KV (from its host tier, a peer, or a prefill worker): what is cached already is kept,
 * the rest is allocated and committed (`stored` events), as many as fit. All of them come back
 * held, so that nothing evicts them before their request has them: release them (tail first)
 * after.
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
  bm.load(have > 0 ? hashes[have - 1]! : null, add);
  return hashes.slice(0, have + add.length);
}
