// The decode worker's KV memory: a registered DRAM region cut into blocks, a prefix cache
// of full blocks over it (KvBlockPool), local (deterministic) prefill, byte-exact
// verification, and waits on the transfer agent's notifications (which arrive by polling
// `getNewNotifs`).

import type { TransferAgent } from "../../native/mod.ts";
import type { MemoryRegion } from "../../native/mod.ts";
import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";
import type { BlockHash } from "../kv_router/hashing.ts";
import { KvBlockPool } from "./block_pool.ts";
import { fillKvBlock, splitBlocks, verifyKvBlock } from "./kv_bytes.ts";
import { PrefillNotifs, type WaitPrefilledOptions } from "./prefill_notifs.ts";
import type { DecodeMemoryInfo } from "./protocol.ts";

export {
  MAX_LATE_NOTIFS,
  PrefillSkippedError,
  type WaitPrefilledOptions,
} from "./prefill_notifs.ts";

/** A block's bytes differ from what its tokens determine. */
export class KvVerificationError extends DynamoError {
  /** The block's position in the prompt. */
  readonly blockIndex: number;
  /** Byte offset of the first wrong byte in the block. */
  readonly byteOffset: number;
  /** Whether the block came from the prefix cache (it was dropped from it). */
  readonly cached: boolean;
  /** Creates the error for one block. */
  constructor(blockIndex: number, byteOffset: number, cached = false) {
    super(
      `KV block ${blockIndex}${cached ? " (prefix-cached)" : ""} is wrong at byte ${byteOffset}`,
    );
    this.blockIndex = blockIndex;
    this.byteOffset = byteOffset;
    this.cached = cached;
  }
}

/** Options of {@linkcode DecodeKvCache}. */
export interface DecodeKvCacheOptions {
  /** Blocks in the region. */
  numBlocks: number;
  /** Bytes per block. */
  blockBytes: number;
  /** Notification poll period in ms; default 2. */
  pollMs?: number;
}

/**
 * The decode worker's KV blocks in shared memory that prefill workers write into, with a
 * prefix cache: full blocks stay cached under their sequence hashes (the mocker's
 * `hashPromptBlocks`) after their request, and a later prompt with the same prefix holds
 * them instead of prefilling them again.
 *
 * @example
 * ```ts ignore
 * const kv = new DecodeKvCache(new TransferAgent("decode-0"), { numBlocks: 64, blockBytes: 4096 });
 * const hashes = hashPromptBlocks(prompt, 16).map((b) => b.sequenceHash);
 * const ids = kv.acquirePrefix(hashes); // cached prefix (none at first)
 * const hit = ids.length;
 * ids.push(...kv.allocate(Math.ceil(prompt.length / 16) - hit));
 * kv.fillLocal(ids, prompt, 16, hit);
 * kv.verify(ids, prompt, 16); // every block, cached ones too
 * kv.cache(hashes, ids);
 * kv.release(ids.toReversed());
 * ```
 */
export class DecodeKvCache {
  /** The decode worker's transfer agent, which owns the region. */
  readonly agent: TransferAgent;
  /** Blocks in the region. */
  readonly numBlocks: number;
  /** Bytes per block. */
  readonly blockBytes: number;
  readonly #region: MemoryRegion;
  readonly #info: DecodeMemoryInfo;
  readonly #pool: KvBlockPool;
  readonly #notifs: PrefillNotifs;

  /**
   * Allocates and registers the KV region on the agent.
   *
   * @param agent the decode worker's transfer agent
   * @param options geometry
   * @throws {InvalidArgumentError} a bad block count or size
   */
  constructor(agent: TransferAgent, options: DecodeKvCacheOptions) {
    const { numBlocks, blockBytes } = options;
    if (!Number.isInteger(numBlocks) || numBlocks < 1) {
      throw new InvalidArgumentError(`numBlocks must be an integer >= 1, got ${numBlocks}`);
    }
    if (!Number.isInteger(blockBytes) || blockBytes < 1) {
      throw new InvalidArgumentError(`blockBytes must be an integer >= 1, got ${blockBytes}`);
    }
    this.agent = agent;
    this.numBlocks = numBlocks;
    this.blockBytes = blockBytes;
    this.#notifs = new PrefillNotifs(agent, { pollMs: options.pollMs });
    this.#region = agent.allocate("DRAM", numBlocks * blockBytes);
    agent.registerMemory(this.#region);
    this.#info = {
      agent_name: agent.name,
      metadata: new TextDecoder().decode(agent.getAgentMetadata()),
      descs: agent.getXferDescs({ region: this.#region, blockBytes }),
      block_bytes: blockBytes,
    };
    this.#pool = new KvBlockPool(numBlocks);
  }

  /** What prefill workers need to write here (publish it once). */
  memoryInfo(): DecodeMemoryInfo {
    return this.#info;
  }

  /** Blocks an allocation can take now: free ones plus cached ones no request holds. */
  get availableBlocks(): number {
    return this.#pool.availableBlocks;
  }

  /** Full blocks in the prefix cache, held or not. */
  get cachedBlocks(): number {
    return this.#pool.cachedBlocks;
  }

  /** Reference count of a block (0 when free, or cached and held by nobody). */
  refCount(id: number): number {
    return this.#pool.refCount(id);
  }

  /**
   * How many leading blocks of a prompt are cached (no side effects).
   *
   * @param hashes the sequence hashes of the prompt's full blocks, in order
   */
  matchPrefix(hashes: readonly BlockHash[]): number {
    return this.#pool.matchPrefix(hashes);
  }

  /**
   * Holds the longest cached prefix of a prompt.
   *
   * @param hashes the sequence hashes of the prompt's full blocks, in order
   * @returns the prefix's block ids, in order (release them when done)
   */
  acquirePrefix(hashes: readonly BlockHash[]): number[] {
    return this.#pool.acquirePrefix(hashes);
  }

  /**
   * Allocates uncached blocks (evicting idle cached ones as needed).
   *
   * @param n blocks wanted
   * @returns uncached block ids (indices into the published descriptor list), held once
   * @throws {KvCacheFullError} fewer than `n` are free or evictable
   */
  allocate(n: number): number[] {
    return this.#pool.allocate(n);
  }

  /**
   * Caches held blocks under their sequence hashes (call after {@linkcode verify}: only
   * checked bytes enter the cache).
   *
   * @param hashes the sequence hashes of the prompt's full blocks, in order
   * @param ids the prompt's block ids, in order
   * @returns blocks newly cached
   */
  cache(hashes: readonly BlockHash[], ids: readonly number[]): number {
    return this.#pool.cache(hashes, ids);
  }

  /**
   * Drops a reference on each block: cached ones stay in the cache (pass a prompt's
   * blocks tail first, so tails are evicted before prefixes), others are freed.
   */
  release(ids: readonly number[]): void {
    this.#pool.release(ids);
  }

  /**
   * Local prefill: writes each block's pattern, from block `firstBlock` on (the blocks
   * before it are cached).
   */
  fillLocal(
    ids: readonly number[],
    tokens: readonly number[],
    blockSize: number,
    firstBlock = 0,
  ): void {
    const blocks = splitBlocks(tokens, blockSize);
    const buf = new Uint8Array(this.blockBytes);
    for (let i = firstBlock; i < blocks.length; i++) {
      fillKvBlock(buf, blocks[i]!, i);
      this.agent.writeMemory(this.#region, ids[i]! * this.blockBytes, buf);
    }
  }

  /**
   * Checks every byte of the prompt's blocks, cached ones included. A wrong cached block
   * leaves the cache, so no later request hits it.
   *
   * @returns blocks verified
   * @throws {KvVerificationError} the first wrong block
   */
  verify(ids: readonly number[], tokens: readonly number[], blockSize: number): number {
    const blocks = splitBlocks(tokens, blockSize);
    for (const [i, t] of blocks.entries()) {
      const id = ids[i]!;
      const bytes = this.agent.readMemory(this.#region, id * this.blockBytes, this.blockBytes);
      const bad = verifyKvBlock(bytes, t, i);
      if (bad >= 0) {
        const cached = this.#pool.hashOf(id) !== undefined;
        this.#pool.forget(id);
        throw new KvVerificationError(i, bad, cached);
      }
    }
    return blocks.length;
  }

  /**
   * Waits for a prefill worker's done-notification for `requestId`.
   *
   * @throws {TimeoutError} none came within `timeoutMs`
   * @throws {PrefillSkippedError} the prefill worker skipped it
   */
  waitPrefilled(requestId: string, options: WaitPrefilledOptions): Promise<void> {
    return this.#notifs.waitPrefilled(requestId, options);
  }

  /**
   * Whether a (done or skipped) notification arrived for a request nobody waits for (a
   * late one); consumes it.
   */
  takeLate(requestId: string): boolean {
    return this.#notifs.takeLate(requestId);
  }

  /** Stops polling and releases the region (the agent stays open). */
  close(): void {
    this.#notifs.close();
    this.agent.releaseMemory(this.#region);
  }
}
