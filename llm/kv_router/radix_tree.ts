/**
 * The KV indexer's core: a radix tree of cached blocks keyed by local block hash, each node
 * holding the set of workers that cache the prefix ending there. Plain and synchronous, so
 * the networked {@linkcode KvIndexer}, the router and the benchmarks share it.
 *
 * - Worker sets are bitsets (32 workers per word) over small worker indexes, so walking a
 *   request intersects a few words per block however many workers share the prefix.
 * - Each worker has a map sequence hash -> node: `removed` events cost O(1) per block.
 * - Maps keyed by block hash are {@linkcode U64Map}s: a `Map` keyed by bigint compares keys
 *   through their heap objects, and was a tenth of a busy frontend's CPU.
 * - Nodes left with no worker and no child are pruned, up the tree.
 * - `findMatches` scores, per worker, the length of the request's prefix the worker holds
 *   every block of, and stops as soon as no worker continues.
 *
 * @module
 */

import type { BlockHash } from "./hashing.ts";
import type { KvCacheEventData, OverlapScores, RouterEvent } from "./protocols.ts";
import { U64Map } from "./u64_map.ts";

/** Set by Node.getOrCreate when it made a node (saves a second lookup). */
let created = false;

/** A prefix: the path of local hashes from the root. */
class Node {
  readonly key: BlockHash;
  readonly parent: Node | null;
  // Worker bitset, 32 per word: workers 0..63 inline (no array per node), more in `wx`.
  w0 = 0;
  w1 = 0;
  wx: number[] | undefined = undefined;
  /** How many bits are set. */
  count = 0;
  // One child is the common case (a chain of blocks); a map once there are more.
  childKey: BlockHash | undefined = undefined;
  child: Node | undefined = undefined;
  children: U64Map<Node> | undefined = undefined;
  /** Lookup times within the frequency window, when frequencies are tracked. */
  uses: number[] | undefined = undefined;

  constructor(key: BlockHash, parent: Node | null) {
    this.key = key;
    this.parent = parent;
  }

  get(key: BlockHash): Node | undefined {
    if (this.children) return this.children.get(key);
    return this.childKey === key ? this.child : undefined;
  }

  getOrCreate(key: BlockHash): Node {
    if (this.children) {
      let n = this.children.get(key);
      if (!n) {
        this.children.set(key, n = new Node(key, this));
        created = true;
      }
      return n;
    }
    if (this.child === undefined) {
      this.childKey = key;
      created = true;
      return this.child = new Node(key, this);
    }
    if (this.childKey === key) return this.child;
    const n = new Node(key, this);
    created = true;
    this.children = new U64Map<Node>().set(this.childKey!, this.child).set(key, n);
    this.childKey = undefined;
    this.child = undefined;
    return n;
  }

  remove(key: BlockHash): void {
    if (this.children) this.children.delete(key);
    else if (this.childKey === key) {
      this.childKey = undefined;
      this.child = undefined;
    }
  }

  get empty(): boolean {
    return this.children ? this.children.size === 0 : this.child === undefined;
  }

  /** Word `i` of the worker bitset. */
  word(i: number): number {
    return i === 0 ? this.w0 : i === 1 ? this.w1 : this.wx?.[i - 2] ?? 0;
  }

  /** Words in use (at least 2). */
  get words(): number {
    return this.wx ? this.wx.length + 2 : 2;
  }

  setWord(i: number, v: number): void {
    if (i === 0) this.w0 = v;
    else if (i === 1) this.w1 = v;
    else {
      const wx = this.wx ??= [];
      while (wx.length <= i - 2) wx.push(0);
      wx[i - 2] = v;
    }
  }

  /** Adds worker `w`; true when it was not there. */
  set(w: number): boolean {
    const i = w >>> 5;
    const m = 1 << (w & 31);
    const word = this.word(i);
    if ((word & m) !== 0) return false;
    this.setWord(i, word | m);
    this.count++;
    return true;
  }

  /** Removes worker `w`; true when it was there. */
  clear(w: number): boolean {
    const i = w >>> 5;
    const m = 1 << (w & 31);
    const word = this.word(i);
    if ((word & m) === 0) return false;
    this.setWord(i, word & ~m);
    this.count--;
    return true;
  }
}

/** One worker's blocks. */
interface WorkerState {
  readonly id: string;
  readonly index: number;
  /** Sequence hash -> node. */
  readonly blocks: U64Map<Node>;
}

/** Options of {@linkcode RadixTree}. */
export interface RadixTreeOptions {
  /**
   * Track how often each block is looked up within this window (ms) and report it in
   * `OverlapScores.frequencies` (default: off).
   */
  frequencyWindowMs?: number;
  /** Clock for the frequency window (default `performance.now`). */
  now?: () => number;
}

/**
 * The radix tree of cached blocks.
 *
 * @example
 * ```ts
 * const tree = new RadixTree();
 * tree.applyEvent({ worker_id: "w1", event: { event_id: 1, data: { stored: {
 *   parent_hash: null, blocks: [{ block_hash: 11n, tokens_hash: 1n }] } } } });
 * tree.findMatches([1n, 2n]).scores; // Map { "w1" => 1 }
 * ```
 */
export class RadixTree {
  readonly #root = new Node(0n, null);
  readonly #workers = new Map<string, WorkerState>();
  /** Worker index -> state (holes are free indexes). */
  readonly #byIndex: (WorkerState | undefined)[] = [];
  readonly #free: number[] = [];
  readonly #window: number | undefined;
  readonly #now: () => number;
  #active = new Int32Array(4);
  #nodes = 0;

  /** Creates an empty tree. */
  constructor(options: RadixTreeOptions = {}) {
    this.#window = options.frequencyWindowMs;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Ids of the workers with at least one block, or known from an event. */
  get workers(): string[] {
    return [...this.#workers.keys()];
  }

  /** Nodes in the tree (distinct cached prefixes), the root excluded. */
  get size(): number {
    return this.#nodes;
  }

  /** Blocks `workerId` holds (0 when unknown). */
  blockCount(workerId: string): number {
    return this.#workers.get(workerId)?.blocks.size ?? 0;
  }

  /** The sequence hashes of the blocks `workerId` holds. */
  *blockHashes(workerId: string): IterableIterator<BlockHash> {
    for (const [h] of this.#workers.get(workerId)?.blocks.entries() ?? []) yield h;
  }

  /**
   * A copy of the tree (its workers, in the same indexes, and their blocks), without lookup
   * frequencies.
   */
  clone(): RadixTree {
    const out = new RadixTree();
    const copies = new Map<Node, Node>([[this.#root, out.#root]]);
    const stack: Node[] = [this.#root];
    while (stack.length > 0) {
      const from = stack.pop()!;
      const to = copies.get(from)!;
      const kids = from.children ? [...from.children.values()] : from.child ? [from.child] : [];
      for (const kid of kids) {
        const copy = to.getOrCreate(kid.key);
        copy.w0 = kid.w0;
        copy.w1 = kid.w1;
        copy.wx = kid.wx?.slice();
        copy.count = kid.count;
        copies.set(kid, copy);
        stack.push(kid);
      }
    }
    out.#nodes = this.#nodes;
    out.#free.push(...this.#free);
    for (const w of this.#workers.values()) {
      const blocks = new U64Map<Node>();
      for (const [h, node] of w.blocks.entries()) blocks.set(h, copies.get(node)!);
      const copy = { id: w.id, index: w.index, blocks };
      out.#workers.set(w.id, copy);
      out.#byIndex[w.index] = copy;
    }
    return out;
  }

  /**
   * Applies one event. Returns false when a `stored` event names a parent the worker does
   * not hold (the event is dropped: its blocks could never be matched).
   */
  applyEvent(event: RouterEvent): boolean {
    return this.apply(event.worker_id, event.event.data);
  }

  /** Applies `data` for `workerId` (see {@linkcode applyEvent}). */
  apply(workerId: string, data: KvCacheEventData): boolean {
    if (data === "cleared") {
      const w = this.#workers.get(workerId);
      if (w) this.#clearWorker(w);
      return true;
    }
    if ("removed" in data) {
      const w = this.#workers.get(workerId);
      if (!w) return true;
      for (const h of data.removed.block_hashes) this.#removeBlock(w, h);
      return true;
    }
    const { parent_hash, blocks } = data.stored;
    const w = this.#worker(workerId);
    let node: Node;
    if (parent_hash === null) node = this.#root;
    else {
      const parent = w.blocks.get(parent_hash);
      if (!parent) return false;
      node = parent;
    }
    for (const b of blocks) node = this.#storeBlock(w, node, b.block_hash, b.tokens_hash);
    return true;
  }

  /**
   * Stores one block of `workerId` under its parent (a sequence hash the worker holds,
   * or null for the root). Returns false when the worker does not hold the parent.
   */
  storeBlock(
    workerId: string,
    parentHash: BlockHash | null,
    blockHash: BlockHash,
    tokensHash: BlockHash,
  ): boolean {
    const w = this.#worker(workerId);
    const parent = parentHash === null ? this.#root : w.blocks.get(parentHash);
    if (!parent) return false;
    this.#storeBlock(w, parent, blockHash, tokensHash);
    return true;
  }

  /** Removes every block of `workerId` and forgets it. */
  removeWorker(workerId: string): void {
    const w = this.#workers.get(workerId);
    if (!w) return;
    this.#clearWorker(w);
    this.#workers.delete(workerId);
    this.#byIndex[w.index] = undefined;
    this.#free.push(w.index);
  }

  /** Removes every block of `workerId` but keeps it known. */
  clearWorker(workerId: string): void {
    const w = this.#workers.get(workerId);
    if (w) this.#clearWorker(w);
  }

  /**
   * Scores workers by how much of the request's prefix (given as local block hashes)
   * they cache.
   *
   * @param localHashes the request's local block hashes, in order
   * @returns per worker, the matched prefix length in blocks (workers with none left
   *   out), and per matched block its lookup frequency when tracked
   */
  findMatches(localHashes: ArrayLike<BlockHash>): OverlapScores {
    const scores = new Map<string, number>();
    const frequencies: number[] = [];
    if (localHashes.length === 0) return { scores, frequencies };
    let node = this.#root.get(localHashes[0]!);
    if (!node || node.count === 0) return { scores, frequencies };
    // Workers still matching, as a bitset; they start as the first block's.
    const words = node.words;
    if (this.#active.length < words) this.#active = new Int32Array(words * 2);
    const active = this.#active;
    for (let k = 0; k < words; k++) active[k] = node.word(k);
    let alive = node.count;
    let depth = 0;
    const track = this.#window !== undefined;
    const now = track ? this.#now() : 0;
    while (true) {
      depth++; // `node` matched
      if (track) frequencies.push(this.#use(node, now));
      if (depth === localHashes.length) break;
      const next = node.get(localHashes[depth]!);
      if (!next) break;
      // active &= next.bits; workers dropping out scored `depth`.
      alive = 0;
      for (let k = 0; k < words; k++) {
        const a = active[k]!;
        if (a === 0) continue;
        const keep = a & next.word(k);
        if (keep !== a) this.#score(scores, k, a & ~keep, depth);
        active[k] = keep;
        if (keep !== 0) alive++;
      }
      if (alive === 0) return { scores, frequencies };
      node = next;
    }
    for (let k = 0; k < words; k++) {
      if (active[k] !== 0) this.#score(scores, k, active[k]!, depth);
    }
    return { scores, frequencies };
  }

  #score(scores: Map<string, number>, word: number, bits: number, depth: number): void {
    while (bits !== 0) {
      const low = bits & -bits;
      const w = this.#byIndex[word * 32 + 31 - Math.clz32(low)];
      if (w) scores.set(w.id, depth);
      bits ^= low;
    }
  }

  #use(node: Node, now: number): number {
    const uses = node.uses ??= [];
    const from = now - this.#window!;
    let drop = 0;
    while (drop < uses.length && uses[drop]! <= from) drop++;
    if (drop > 0) uses.splice(0, drop);
    uses.push(now);
    return uses.length;
  }

  #worker(id: string): WorkerState {
    let w = this.#workers.get(id);
    if (!w) {
      const index = this.#free.pop() ?? this.#byIndex.length;
      w = { id, index, blocks: new U64Map() };
      this.#workers.set(id, w);
      this.#byIndex[index] = w;
    }
    return w;
  }

  #storeBlock(w: WorkerState, parent: Node, blockHash: BlockHash, tokensHash: BlockHash): Node {
    created = false;
    const node = parent.getOrCreate(tokensHash);
    if (created) this.#nodes++;
    const old = w.blocks.get(blockHash);
    if (old !== undefined && old !== node) this.#unlink(w, old);
    node.set(w.index);
    w.blocks.set(blockHash, node);
    return node;
  }

  #removeBlock(w: WorkerState, blockHash: BlockHash): void {
    const node = w.blocks.get(blockHash);
    if (!node) return;
    w.blocks.delete(blockHash);
    this.#unlink(w, node);
  }

  /** Takes `w` off `node` and prunes what is left empty. */
  #unlink(w: WorkerState, node: Node): void {
    if (!node.clear(w.index)) return;
    let n: Node | null = node;
    while (n && n.parent && n.count === 0 && n.empty) {
      n.parent.remove(n.key);
      this.#nodes--;
      n = n.parent;
    }
  }

  #clearWorker(w: WorkerState): void {
    for (const node of w.blocks.values()) this.#unlink(w, node);
    w.blocks.clear();
  }
}
