// What the engine's KV cache holds, in the router's terms: the full blocks of every sequence's
// evaluated tokens, hashed as the KV router hashes prompts, turned into stored/removed events.

import { type BlockHash, computeBlockHashesSync } from "../../kv_router/hashing.ts";
import type { KvCacheEventData, KvCacheStoredBlock } from "../../kv_router/protocols.ts";

/**
 * The KV blocks a set of sequences hold. Sequences are separate copies in llama.cpp's cache,
 * but the router cares only whether this worker holds a block: a block is stored when the first
 * sequence takes it and removed when the last one lets it go.
 */
export class KvBlockTracker<Key> {
  /** Tokens per block (the card's `kv_cache_block_size`). */
  readonly blockSize: number;
  readonly #held = new Map<Key, BlockHash[]>();
  readonly #refs = new Map<BlockHash, number>();
  readonly #emit: (data: KvCacheEventData) => void;

  /**
   * @param blockSize tokens per block
   * @param emit receives each event, removals before stores
   */
  constructor(blockSize: number, emit: (data: KvCacheEventData) => void) {
    this.blockSize = blockSize;
    this.#emit = emit;
  }

  /** Distinct blocks held by any sequence. */
  get blockCount(): number {
    return this.#refs.size;
  }

  /** The sequence hashes of every block held, in no particular order. */
  blocks(): BlockHash[] {
    return [...this.#refs.keys()];
  }

  /**
   * Records what one sequence holds now and emits the difference: blocks no sequence holds any
   * more as one `removed` event, blocks no sequence held before as `stored` runs (each with its
   * parent, which this sequence holds).
   *
   * @param key the sequence
   * @param tokens the tokens whose KV the sequence holds, in order
   */
  update(key: Key, tokens: ArrayLike<number>): void {
    const before = this.#held.get(key) ?? [];
    const { local, sequence } = computeBlockHashesSync(tokens, this.blockSize);
    let same = 0;
    while (same < before.length && same < sequence.length && before[same] === sequence[same]) {
      same++;
    }
    if (same === before.length && same === sequence.length) return;
    const removed: BlockHash[] = [];
    for (let i = same; i < before.length; i++) {
      const h = before[i]!;
      const n = (this.#refs.get(h) ?? 1) - 1;
      if (n > 0) this.#refs.set(h, n);
      else {
        this.#refs.delete(h);
        removed.push(h);
      }
    }
    if (removed.length > 0) this.#emit({ removed: { block_hashes: removed } });
    let run: KvCacheStoredBlock[] = [];
    let parent: BlockHash | null = null;
    const flush = () => {
      if (run.length > 0) this.#emit({ stored: { parent_hash: parent, blocks: run } });
      run = [];
    };
    for (let i = same; i < sequence.length; i++) {
      const h = sequence[i]!;
      const n = this.#refs.get(h) ?? 0;
      this.#refs.set(h, n + 1);
      if (n > 0) {
        flush();
        continue;
      }
      if (run.length === 0) parent = i === 0 ? null : sequence[i - 1]!;
      run.push({ block_hash: h, tokens_hash: local[i]! });
    }
    flush();
    if (sequence.length === 0) this.#held.delete(key);
    else this.#held.set(key, sequence);
  }
}
