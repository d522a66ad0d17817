/**
 * {@linkcode PendingPrefills}: the prompts the router has sent to each worker that have no
 * first token yet. Their blocks are not in the worker's KV events until the pass that computes
 * them ends, yet a request sharing the prefix that goes to the same worker waits for that pass
 * anyway and then finds them cached; sent elsewhere, it computes them a second time. The router
 * counts such blocks as cached on the worker they were sent to, until the first token.
 *
 * Kept as counts of sequence hashes per worker, no tree: a sequence hash names a whole prefix,
 * so a worker's pending set is closed under prefixes (a request pends all of its blocks), and
 * how much of a prompt is pending there is found by a binary search over the prompt's sequence
 * hashes. Recording and finishing a request cost two map operations per block each (with a
 * radix tree beside the counts, about ten per block in all, on every request).
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { BlockHash } from "./hashing.ts";
import type { OverlapScores } from "./protocols.ts";
import { U64Map } from "./u64_map.ts";

/**
 * Blocks of prompts being prefilled, per worker, counted per request.
 *
 * @example
 * ```ts
 * import { computeBlockHashesSync } from "./hashing.ts";
 * const pending = new PendingPrefills();
 * const { sequence } = computeBlockHashesSync(new Array(64).fill(7), 16);
 * pending.add("r1", "w1", sequence);
 * pending.findMatches(sequence).scores.get("w1"); // 4
 * pending.done("r1");
 * ```
 */
export class PendingPrefills {
  readonly #requests = new Map<string, { workerId: string; sequence: readonly BlockHash[] }>();
  /**
   * Per worker: its pending requests, and how many of them hold each prefix (by sequence
   * hash). A worker's entry goes with its last pending request, the map whole: taking its
   * blocks out one by one would shrink the map step by step, as adding them grew it, and a
   * long prompt on an idle worker is the common case (a 20,000-token prompt: about ten
   * rebuilds of the map per request, about 1% of the frontend's time on such prompts).
   */
  readonly #workers = new Map<string, { requests: number; counts: U64Map<number> }>();

  /** Requests being prefilled. */
  get size(): number {
    return this.#requests.size;
  }

  /**
   * Records a request sent to a worker, until {@linkcode done}.
   *
   * @param requestId the router's id of the request
   * @param workerId where it went
   * @param sequence the prompt's sequence block hashes, one per full block
   * @throws {InvalidArgumentError} a request already recorded
   */
  add(requestId: string, workerId: string, sequence: readonly BlockHash[]): void {
    if (this.#requests.has(requestId)) {
      throw new InvalidArgumentError(`request ${requestId} is already pending`);
    }
    this.#requests.set(requestId, { workerId, sequence });
    let worker = this.#workers.get(workerId);
    if (!worker) {
      // Room for this prompt from the start, instead of growing block by block.
      worker = { requests: 0, counts: new U64Map(sequence.length) };
      this.#workers.set(workerId, worker);
    }
    worker.requests++;
    const counts = worker.counts;
    for (let i = 0; i < sequence.length; i++) {
      const h = sequence[i]!;
      counts.set(h, (counts.get(h) ?? 0) + 1);
    }
  }

  /**
   * The request's first token came (or it ended): its blocks no longer count, unless another
   * pending request on the same worker holds them too. Unknown ids are ignored.
   *
   * @param requestId the id given to {@linkcode add}
   */
  done(requestId: string): void {
    const req = this.#requests.get(requestId);
    if (!req) return;
    this.#requests.delete(requestId);
    const worker = this.#workers.get(req.workerId)!;
    if (--worker.requests === 0) {
      this.#workers.delete(req.workerId);
      return;
    }
    const counts = worker.counts;
    const sequence = req.sequence;
    for (let i = 0; i < sequence.length; i++) {
      const h = sequence[i]!;
      const n = counts.get(h)! - 1;
      if (n === 0) counts.delete(h);
      else counts.set(h, n);
    }
  }

  /**
   * Blocks of a prompt's prefix pending on each worker.
   *
   * @param sequence the prompt's sequence block hashes
   * @returns matched blocks per worker, as the KV indexer's scores (no frequencies)
   */
  findMatches(sequence: ArrayLike<BlockHash>): OverlapScores {
    const scores = new Map<string, number>();
    const n = sequence.length;
    if (n === 0) return { scores, frequencies: [] };
    const first = sequence[0]!;
    for (const [workerId, { counts }] of this.#workers) {
      if (!counts.has(first)) continue;
      // The longest pending prefix: blocks [0, lo) pending, none past hi.
      let lo = 1;
      let hi = n;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (counts.has(sequence[mid - 1]!)) lo = mid;
        else hi = mid - 1;
      }
      scores.set(workerId, lo);
    }
    return { scores, frequencies: [] };
  }

  /**
   * Forgets a worker's pending prompts (it left).
   *
   * @param workerId the worker
   */
  removeWorker(workerId: string): void {
    for (const [id, req] of this.#requests) {
      if (req.workerId === workerId) this.#requests.delete(id);
    }
    this.#workers.delete(workerId);
  }
}
