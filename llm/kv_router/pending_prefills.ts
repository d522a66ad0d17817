/**
 * {@linkcode PendingPrefills}: the prompts the router has sent to each worker that have no
 * first token yet. Their blocks are not in the worker's KV events until the pass that computes
 * them ends, yet a request sharing the prefix that goes to the same worker waits for that pass
 * anyway and then finds them cached; sent elsewhere, it computes them a second time. The router
 * counts such blocks as cached on the worker they were sent to, until the first token.
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { BlockHash } from "./hashing.ts";
import type { OverlapScores } from "./protocols.ts";
import { RadixTree } from "./radix_tree.ts";

/**
 * Blocks of prompts being prefilled, per worker, counted per request.
 *
 * @example
 * ```ts
 * import { computeBlockHashesSync } from "./hashing.ts";
 * const pending = new PendingPrefills();
 * const { local, sequence } = computeBlockHashesSync(new Array(64).fill(7), 16);
 * pending.add("r1", "w1", local, sequence);
 * pending.findMatches(local).scores.get("w1"); // 4
 * pending.done("r1");
 * ```
 */
export class PendingPrefills {
  readonly #tree = new RadixTree();
  readonly #requests = new Map<string, { workerId: string; sequence: readonly BlockHash[] }>();
  readonly #counts = new Map<string, Map<BlockHash, number>>();

  /** Requests being prefilled. */
  get size(): number {
    return this.#requests.size;
  }

  /**
   * Records a request sent to a worker, until {@linkcode done}.
   *
   * @param requestId the router's id of the request
   * @param workerId where it went
   * @param local the prompt's local block hashes
   * @param sequence the prompt's sequence block hashes (as many as `local`)
   * @throws {InvalidArgumentError} a request already recorded, or hashes of different lengths
   */
  add(
    requestId: string,
    workerId: string,
    local: readonly BlockHash[],
    sequence: readonly BlockHash[],
  ): void {
    if (this.#requests.has(requestId)) {
      throw new InvalidArgumentError(`request ${requestId} is already pending`);
    }
    if (local.length !== sequence.length) {
      throw new InvalidArgumentError(
        `local and sequence hashes differ in length: ${local.length} and ${sequence.length}`,
      );
    }
    this.#requests.set(requestId, { workerId, sequence });
    let counts = this.#counts.get(workerId);
    if (!counts) this.#counts.set(workerId, counts = new Map());
    const fresh: number[] = [];
    sequence.forEach((h, i) => {
      const n = counts.get(h) ?? 0;
      counts.set(h, n + 1);
      if (n === 0) fresh.push(i);
    });
    if (fresh.length === 0) return;
    // Stored from the root, as the approximate indexer does: a prefix already pending is
    // stored again unchanged.
    this.#tree.apply(workerId, {
      stored: {
        parent_hash: null,
        blocks: local.map((tokens_hash, i) => ({ block_hash: sequence[i]!, tokens_hash })),
      },
    });
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
    const counts = this.#counts.get(req.workerId)!;
    const gone: BlockHash[] = [];
    for (const h of req.sequence) {
      const n = counts.get(h)! - 1;
      if (n === 0) {
        counts.delete(h);
        gone.push(h);
      } else counts.set(h, n);
    }
    if (counts.size === 0) {
      this.#counts.delete(req.workerId);
      this.#tree.removeWorker(req.workerId);
    } else if (gone.length > 0) {
      this.#tree.apply(req.workerId, { removed: { block_hashes: gone } });
    }
  }

  /**
   * Blocks of a prompt's prefix pending on each worker.
   *
   * @param localHashes the prompt's local block hashes
   * @returns matched blocks per worker, as the KV indexer's scores
   */
  findMatches(localHashes: ArrayLike<BlockHash>): OverlapScores {
    return this.#tree.findMatches(localHashes);
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
    this.#counts.delete(workerId);
    this.#tree.removeWorker(workerId);
  }
}
