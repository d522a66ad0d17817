/**
 * Cached blocks by storage tier: what a worker holds on its GPU (`device`) and what it holds
 * only in a lower tier (`host_pinned` memory, `disk`), from which it copies a block back instead
 * of computing it (the reference's KVBM tiers G1-G3; ai-dynamo 1.6.1 names the tier of every KV
 * event in its `storage_tier` field).
 *
 * One {@linkcode RadixTree} per tier, each holding the blocks a worker has in that tier or a
 * faster one, with per worker and block the set of tiers holding it: a block leaves a tree when
 * the last tier it counts drops it. Until the first event of a lower tier, the device's tree is
 * every tier's (no second tree, no tier sets: a fleet of GPU-only workers costs what one radix
 * tree costs); that event copies it into the others. So a worker whose GPU evicts a block it
 * offloaded to host memory (the reference's mocker offloads every block it computes) still holds
 * it, below the device. A request's prefix a worker can serve without computing is its longest
 * prefix held in any tier; past its device prefix, the blocks are copied up first.
 *
 * @module
 */

import type { BlockHash } from "./hashing.ts";
import {
  type KvCacheEventData,
  type OverlapScores,
  type RouterEvent,
  STORAGE_TIERS,
  type StorageTier,
  storageTierIndex,
} from "./protocols.ts";
import { RadixTree, type RadixTreeOptions } from "./radix_tree.ts";
import { U64Map } from "./u64_map.ts";

/** Per worker, the longest prefix (in blocks) held in each tier or a faster one. */
export type TieredMatches = Record<StorageTier, Map<string, number>>;

/**
 * Workers' cached blocks per storage tier.
 *
 * @example
 * ```ts
 * const index = new TieredIndex();
 * const stored = { stored: { parent_hash: null, blocks: [{ block_hash: 11n, tokens_hash: 1n }] } };
 * index.apply("w1", stored, "device");
 * index.apply("w1", stored, "host_pinned");
 * index.apply("w1", { removed: { block_hashes: [11n] } }, "device");
 * index.findMatches([1n]).device.get("w1"); // undefined: not on the GPU
 * index.findMatches([1n]).host_pinned.get("w1"); // 1: in host memory
 * ```
 */
export class TieredIndex {
  /**
   * Per tier (`STORAGE_TIERS` order), the blocks held in it or a faster tier; the device's alone
   * until the first event of a lower tier.
   */
  readonly #trees: RadixTree[];
  /**
   * Per worker, sequence hash -> bits of the tiers holding the block (bit i: STORAGE_TIERS[i]);
   * kept from the first event of a lower tier on.
   */
  readonly #tiers = new Map<string, U64Map<number>>();
  /** Whether an event of a lower tier came (and so every tier has its tree). */
  #lower = false;

  /**
   * Creates an empty index.
   * @param options of the device tree (lookup frequencies are counted there)
   */
  constructor(options: RadixTreeOptions = {}) {
    this.#trees = [new RadixTree(options)];
  }

  /** The blocks on the workers' devices. */
  get device(): RadixTree {
    return this.#trees[0]!;
  }

  /** The blocks in any of the workers' tiers. */
  get held(): RadixTree {
    return this.#trees[this.#trees.length - 1]!;
  }

  /** Ids of the workers known from an event. */
  get workers(): string[] {
    return this.held.workers;
  }

  /** Applies one event in its tier (see {@linkcode apply}). */
  applyEvent(event: RouterEvent): boolean {
    return this.apply(event.worker_id, event.event.data, event.storage_tier ?? "device");
  }

  /**
   * Stores one block of `workerId` in `tier` under its parent (a sequence hash the worker holds
   * in some tier, or null for the root). Returns false when the worker holds no such parent.
   */
  storeBlock(
    workerId: string,
    parentHash: BlockHash | null,
    blockHash: BlockHash,
    tokensHash: BlockHash,
    tier: StorageTier = "device",
  ): boolean {
    return this.apply(workerId, {
      stored: {
        parent_hash: parentHash,
        blocks: [{ block_hash: blockHash, tokens_hash: tokensHash }],
      },
    }, tier);
  }

  /**
   * Applies one event of `workerId`'s `tier`. Returns false when a `stored` event names a
   * parent the worker holds in no tier (its blocks are dropped: they could never be matched).
   * @throws {InvalidArgumentError} a tier not in `STORAGE_TIERS`
   */
  apply(workerId: string, data: KvCacheEventData, tier: StorageTier = "device"): boolean {
    const t = storageTierIndex(tier);
    if (t > 0 && !this.#lower) this.#splitTiers();
    if (!this.#lower) return this.device.apply(workerId, data);
    const tiers = this.#tiers.get(workerId);
    if (data === "cleared") {
      if (tiers) this.#drop(workerId, tiers, t, [...tiers.entries()].map(([h]) => h));
      return true;
    }
    if ("removed" in data) {
      if (tiers) this.#drop(workerId, tiers, t, data.removed.block_hashes);
      return true;
    }
    if (!this.held.apply(workerId, data)) return false;
    // A tree whose worker lacks the parent drops the blocks: no prefix held in that tier (or a
    // faster one) can pass the missing parent.
    for (let k = t; k < this.#trees.length - 1; k++) this.#trees[k]!.apply(workerId, data);
    let map = tiers;
    if (!map) this.#tiers.set(workerId, map = new U64Map());
    for (const b of data.stored.blocks) {
      map.set(b.block_hash, (map.get(b.block_hash) ?? 0) | 1 << t);
    }
    return true;
  }

  /** Removes every block of `workerId`, in every tier, and forgets it. */
  removeWorker(workerId: string): void {
    for (const tree of this.#trees) tree.removeWorker(workerId);
    this.#tiers.delete(workerId);
  }

  /** Removes every block of `workerId`, in every tier, but keeps it known. */
  clearWorker(workerId: string): void {
    for (const tree of this.#trees) tree.clearWorker(workerId);
    this.#tiers.get(workerId)?.clear();
  }

  /** Blocks `workerId` holds in `tier` (in any tier when left out). */
  blockCount(workerId: string, tier?: StorageTier): number {
    if (!this.#lower) {
      return tier === undefined || tier === "device" ? this.device.blockCount(workerId) : 0;
    }
    const tiers = this.#tiers.get(workerId);
    if (!tiers) return 0;
    if (tier === undefined) return tiers.size;
    const bit = 1 << STORAGE_TIERS.indexOf(tier);
    let n = 0;
    for (const bits of tiers.values()) if (bits & bit) n++;
    return n;
  }

  /**
   * The device's scores for a request's prefix (its local block hashes, in order), with the
   * lookup frequencies the device tree tracks, and `held` (the prefix held in any tier) once
   * any worker has announced blocks below its device.
   */
  findOverlap(localHashes: ArrayLike<BlockHash>): OverlapScores {
    const out = this.device.findMatches(localHashes);
    if (this.#lower) out.held = this.held.findMatches(localHashes).scores;
    return out;
  }

  /**
   * Per tier and worker, how much of the request's prefix (its local block hashes, in order) it
   * holds in that tier or a faster one.
   */
  findMatches(localHashes: ArrayLike<BlockHash>): TieredMatches {
    const scores = this.#trees.map((tree) => tree.findMatches(localHashes).scores);
    const out = {} as TieredMatches;
    STORAGE_TIERS.forEach((tier, k) => {
      out[tier] = scores[Math.min(k, scores.length - 1)]!;
    });
    return out;
  }

  /** The first event of a lower tier: every tier gets the device's blocks, and each block its bits. */
  #splitTiers(): void {
    const device = this.device;
    for (let k = 1; k < STORAGE_TIERS.length; k++) this.#trees.push(device.clone());
    for (const w of device.workers) {
      const bits = new U64Map<number>();
      for (const h of device.blockHashes(w)) bits.set(h, 1);
      this.#tiers.set(w, bits);
    }
    this.#lower = true;
  }

  /** Tier `t` drops `hashes`; each tree a block no longer counts in lets it go. */
  #drop(workerId: string, tiers: U64Map<number>, t: number, hashes: readonly BlockHash[]): void {
    const bit = 1 << t;
    const gone: BlockHash[][] = this.#trees.map(() => []);
    for (const h of hashes) {
      const bits = tiers.get(h);
      if (bits === undefined || (bits & bit) === 0) continue;
      const left = bits & ~bit;
      if (left === 0) tiers.delete(h);
      else tiers.set(h, left);
      // Tree k counts tiers 0..k: the block leaves it when none of those hold it any more.
      for (let k = t; k < this.#trees.length; k++) {
        if ((left & ((2 << k) - 1)) === 0) gone[k]!.push(h);
      }
    }
    gone.forEach((hs, k) => {
      if (hs.length > 0) this.#trees[k]!.apply(workerId, { removed: { block_hashes: hs } });
    });
  }
}
