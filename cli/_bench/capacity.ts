// What caches of a given size can hit at best. The trace's ceiling (trace.ts) counts every prefix
// seen before as reusable, as if caches were unbounded; a fleet whose workers hold
// `capacityBlocks` KV blocks in all can hit no more than one pooled cache of that size run with
// the best possible eviction: Belady's (evict, or do not keep, the block needed again furthest
// in the future), which no online cache, router or placement beats. Beside it, the same pooled
// cache with least-recently-used eviction, as the mocker's (and vLLM's) block pools evict: what
// eviction, not capacity, costs.

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { blockTokensOf, type TraceRequest } from "./trace.ts";

/** Shares of prompt tokens hit by one pooled cache of a fleet's size. */
export interface CapacityHitRates {
  /** With Belady's eviction (and blocks never needed again not kept): an upper bound. */
  belady: number;
  /** With least-recently-used eviction, each prompt's tail evicted before its head. */
  lru: number;
}

/**
 * The KV blocks each request reads, as ids shared by equal prefixes: block `j` of a prompt's
 * trace block `i` is the same KV block in two requests when their hash ids agree up to `i`. A
 * last block shorter than `blockSize` counts as a block too (generously: engines cache only full
 * blocks), weighted by its tokens.
 */
function kvBlockAccesses(
  requests: readonly TraceRequest[],
  blockSize: number,
): { items: Int32Array; weights: Uint16Array; perRequest: number[]; distinct: number } {
  const prefixIds = new Map<string, number>();
  const itemIds = new Map<string, number>();
  const items: number[] = [];
  const weights: number[] = [];
  const perRequest: number[] = [];
  for (const r of requests) {
    const block = blockTokensOf(r);
    let prefix = -1;
    let count = 0;
    r.hashIds.forEach((id, i) => {
      const key = `${prefix},${id}`;
      let next = prefixIds.get(key);
      if (next === undefined) prefixIds.set(key, next = prefixIds.size);
      prefix = next;
      const len = Math.min(block, r.inputLength - i * block);
      for (let j = 0; j * blockSize < len; j++) {
        const itemKey = `${prefix}:${j}`;
        let item = itemIds.get(itemKey);
        if (item === undefined) itemIds.set(itemKey, item = itemIds.size);
        items.push(item);
        weights.push(Math.min(blockSize, len - j * blockSize));
        count++;
      }
    });
    perRequest.push(count);
  }
  return {
    items: Int32Array.from(items),
    weights: Uint16Array.from(weights),
    perRequest,
    distinct: itemIds.size,
  };
}

const NEVER = 0x7fffffff;

/** Belady's eviction with bypass over unit-size blocks: the most hits any cache of `capacity` gets. */
function beladyHits(
  items: Int32Array,
  weights: Uint16Array,
  distinct: number,
  capacity: number,
): number {
  const n = items.length;
  // Each access's next access of the same block.
  const next = new Int32Array(n);
  const last = new Int32Array(distinct).fill(NEVER);
  for (let t = n - 1; t >= 0; t--) {
    next[t] = last[items[t]!]!;
    last[items[t]!] = t;
  }
  // Cached blocks keyed by their next use, in a max-heap with lazy deletion: an entry is live
  // while `due[block]` still equals its time.
  const due = new Int32Array(distinct).fill(-1);
  const heapAt: number[] = [];
  const heapBlock: number[] = [];
  const swap = (a: number, b: number) => {
    [heapAt[a], heapAt[b]] = [heapAt[b]!, heapAt[a]!];
    [heapBlock[a], heapBlock[b]] = [heapBlock[b]!, heapBlock[a]!];
  };
  const push = (at: number, block: number) => {
    heapAt.push(at);
    heapBlock.push(block);
    for (let c = heapAt.length - 1; c > 0;) {
      const p = (c - 1) >> 1;
      if (heapAt[p]! >= heapAt[c]!) break;
      swap(p, c);
      c = p;
    }
  };
  const pop = () => {
    const end = heapAt.length - 1;
    swap(0, end);
    heapAt.pop();
    const block = heapBlock.pop()!;
    for (let c = 0;;) {
      const l = 2 * c + 1;
      let m = c;
      if (l < end && heapAt[l]! > heapAt[m]!) m = l;
      if (l + 1 < end && heapAt[l + 1]! > heapAt[m]!) m = l + 1;
      if (m === c) break;
      swap(m, c);
      c = m;
    }
    return block;
  };
  const furthest = () => {
    while (heapAt.length > 0 && due[heapBlock[0]!] !== heapAt[0]) pop();
    return heapAt.length > 0 ? heapAt[0]! : -1;
  };
  let size = 0;
  let hits = 0;
  for (let t = 0; t < n; t++) {
    const block = items[t]!;
    const again = next[t]!;
    if (due[block] !== -1) {
      hits += weights[t]!;
      if (again === NEVER) {
        due[block] = -1;
        size--;
      } else {
        due[block] = again;
        push(again, block);
      }
      continue;
    }
    if (again === NEVER || capacity === 0) continue; // never needed again: not kept
    if (size < capacity) size++;
    else if (again < furthest()) due[pop()] = -1;
    else continue; // every cached block is needed sooner than this one
    due[block] = again;
    push(again, block);
  }
  return hits;
}

/** Least-recently-used eviction; a prompt's blocks are used tail first, so its head stays longest. */
function lruHits(
  items: Int32Array,
  weights: Uint16Array,
  perRequest: readonly number[],
  capacity: number,
): number {
  const cache = new Set<number>(); // iteration order: least recently used first
  let hits = 0;
  let t = 0;
  for (const count of perRequest) {
    for (let k = t; k < t + count; k++) if (cache.has(items[k]!)) hits += weights[k]!;
    for (let k = t + count - 1; k >= t; k--) {
      cache.delete(items[k]!);
      cache.add(items[k]!);
    }
    t += count;
    for (const block of cache) {
      if (cache.size <= capacity) break;
      cache.delete(block);
    }
  }
  return hits;
}

/**
 * Shares of the prompt tokens of `requests` (in arrival order) that one cache of
 * `capacityBlocks` KV blocks hits with Belady's eviction (an upper bound for any fleet with that
 * many blocks in all: any worker's hit is a block the fleet's caches held together, and no
 * eviction does better than Belady's) and with least-recently-used eviction. Running requests'
 * own blocks are not charged to the capacity, which only raises both figures.
 *
 * @param requests the trace, in arrival order
 * @param blockSize tokens per KV block
 * @param capacityBlocks KV blocks of all the caches together (Infinity: unbounded)
 * @returns the two hit rates, as shares of all prompt tokens
 * @throws {InvalidArgumentError} a block size that is not a positive whole number, or a negative capacity
 * @example
 * ```ts
 * capacityHitRates(trace, 16, 8 * 16_384); // { belady: 0.306, lru: 0.09 } on Mooncake's first 3,000
 * ```
 */
export function capacityHitRates(
  requests: readonly TraceRequest[],
  blockSize: number,
  capacityBlocks: number,
): CapacityHitRates {
  if (!Number.isInteger(blockSize) || blockSize <= 0) {
    throw new InvalidArgumentError(`blockSize must be a positive whole number, got ${blockSize}`);
  }
  if (!(capacityBlocks >= 0)) {
    throw new InvalidArgumentError(`capacityBlocks must be >= 0, got ${capacityBlocks}`);
  }
  const { items, weights, perRequest, distinct } = kvBlockAccesses(requests, blockSize);
  let tokens = 0;
  for (const w of weights) tokens += w;
  if (tokens === 0) return { belady: 0, lru: 0 };
  const capacity = Math.min(capacityBlocks, distinct);
  return {
    belady: beladyHits(items, weights, distinct, capacity) / tokens,
    lru: lruHits(items, weights, perRequest, capacity) / tokens,
  };
}
