// The mocker's scheduler: vLLM-style continuous batching over a BlockManager. Each step is
// one forward pass: running sequences first (one decode token each, or their next prefill
// chunk), then new admissions, within max_num_seqs and max_num_batched_tokens.

import { InvalidArgumentError } from "../../../runtime/errors.ts";
import { chainHash, computeBlockHashesSync, computeLocalHashes } from "../../kv_router/hashing.ts";
import type { BlockManager, FullBlock } from "./block_manager.ts";
import type { ForwardPassMetrics } from "./kv_types.ts";
import { checkSpeedupRatio, DEFAULT_KV_ONBOARD_MS_PER_BLOCK, stepTimeMs } from "./timing.ts";

/** Options of {@linkcode Scheduler}. */
export interface SchedulerOptions {
  /** Running sequences at most (default 256). */
  maxNumSeqs?: number;
  /** Tokens computed per forward pass at most (default 8192). */
  maxNumBatchedTokens?: number;
  /** Divides every step's simulated duration (default 1). */
  speedupRatio?: number;
  /**
   * Simulated ms to copy one KV block back from the block manager's host tier when a request
   * is admitted (default {@linkcode DEFAULT_KV_ONBOARD_MS_PER_BLOCK}; divided by the speedup
   * ratio like the passes).
   */
  hostOnboardMsPerBlock?: number;
}

/** A request handed to {@linkcode Scheduler.add}. */
export interface SequenceRequest {
  /** Request id (for logs and tests). */
  id?: string;
  /** The prompt's token ids (for a migrated request: prompt plus tokens already streamed). */
  tokenIds: readonly number[];
  /** Tokens to generate (at least 1; capped so the sequence fits the KV cache). */
  maxTokens: number;
  /** Hashes of the prompt's full blocks (see {@linkcode hashPromptBlocks}). */
  blocks: readonly FullBlock[];
  /** The `i`-th generated token (0-based). */
  nextToken: (i: number) => number;
  /** Called with each generated token; `finished` on the last one. */
  onToken: (token: number, finished: boolean) => void;
}

/** Where a sequence is. */
export type SequenceState = "waiting" | "running" | "finished" | "aborted";

/** One sequence's scheduling state (read-only outside the scheduler). */
export class Sequence {
  /** The request id. */
  readonly id: string;
  /** Prompt plus generated tokens. */
  readonly tokens: number[];
  /** Tokens in the prompt. */
  readonly promptLength: number;
  /** Most tokens to generate. */
  readonly maxTokens: number;
  /** Full blocks known so far (prompt blocks, then blocks of computed generated tokens). */
  readonly blocks: FullBlock[];
  /** Where the sequence is. */
  state: SequenceState = "waiting";
  /** Tokens generated so far. */
  generated = 0;
  /** Tokens whose KV is computed. */
  numComputed = 0;
  /** Full blocks held: blocks[0 .. heldFull). */
  heldFull = 0;
  /** Anonymous blocks held (being filled). */
  heldAnonymous = 0;
  /** Times this sequence lost its blocks and went back to waiting. */
  preemptions = 0;
  /** Whether the sequence was ever scheduled. */
  admitted = false;
  /** Prompt tokens found in the prefix cache when first admitted. */
  cachedTokens = 0;
  /** The request the sequence serves. */
  readonly request: SequenceRequest;

  /** Creates the waiting sequence of a request. */
  constructor(request: SequenceRequest, maxTokens: number) {
    this.request = request;
    this.id = request.id ?? crypto.randomUUID();
    this.tokens = [...request.tokenIds];
    this.promptLength = this.tokens.length;
    this.maxTokens = maxTokens;
    this.blocks = [...request.blocks];
  }
}

/** One sequence's share of a step. */
export interface StepEntry {
  /** The sequence. */
  sequence: Sequence;
  /** Tokens computed for it in this step. */
  tokens: number;
  /** True for a decode token (one token after the sequence's last output). */
  decode: boolean;
}

/** What one forward pass computes, and how long it takes. */
export interface StepPlan {
  /** Each scheduled sequence's share of the pass. */
  entries: StepEntry[];
  /** Prompt tokens computed in the pass. */
  prefillTokens: number;
  /** Sequences that decode one token in the pass. */
  decodeSequences: number;
  /** Active blocks / total during the pass. */
  kvUsage: number;
  /** Simulated duration in ms (speedup applied), the copies from the host tier included. */
  durationMs: number;
  /** Blocks copied back from the host tier for the sequences the pass admits. */
  onboardedBlocks: number;
  /** Sequences preempted while planning. */
  preempted: Sequence[];
}

/**
 * Hashes the full blocks of a prompt with the KV router's block hashes.
 * @param tokenIds the prompt
 * @param blockSize tokens per block
 * @returns one FullBlock per full block (a partial tail is left out)
 */
export function hashPromptBlocks(
  tokenIds: readonly number[],
  blockSize: number,
): FullBlock[] {
  const { local, sequence } = computeBlockHashesSync(tokenIds, blockSize);
  return local.map((l, i) => ({ localHash: l, sequenceHash: sequence[i]! }));
}

/**
 * Continuous-batching scheduler (vLLM V1 style). Running sequences are served first, in
 * admission order: a decode token each, or the next chunk of a prefill (chunked prefill:
 * a prompt longer than the token budget is computed over several steps). When a running
 * sequence needs a block and none is left, the newest running sequence is preempted
 * (recompute: its blocks are released, it goes back to the front of the waiting queue
 * and later recomputes prompt and generated tokens, reusing what is still cached).
 * Waiting sequences are admitted while slots, budget and blocks above the watermark
 * remain, and not in a step that preempted. A new sequence first takes the cached
 * blocks of its longest matching prefix (the last prompt token is always recomputed,
 * as its logits are needed), and then the blocks that continue it in the host tier, copied
 * back as it is admitted (as a KV connector such as the reference's KVBM is asked for them
 * when vLLM's scheduler admits a request): blocks evicted while the request waited are not
 * lost to it. The copy is part of the admitting pass, whose duration grows by
 * `hostOnboardMsPerBlock` per block (a synchronous load: the pass's other sequences wait for
 * it too).
 *
 * @example
 * ```ts ignore
 * const bm = new BlockManager({ numGpuBlocks: 1024 });
 * const scheduler = new Scheduler(bm, { maxNumSeqs: 8 });
 * scheduler.add({ tokenIds, maxTokens: 4, blocks: hashPromptBlocks(tokenIds, 16),
 *   nextToken: (i) => i, onToken: (t, done) => {} });
 * while (scheduler.hasWork) scheduler.step();
 * ```
 */
export class Scheduler {
  /** The KV blocks the scheduler allocates from. */
  readonly blockManager: BlockManager;
  /** Most sequences running at once. */
  readonly maxNumSeqs: number;
  /** Most tokens computed in one forward pass. */
  readonly maxNumBatchedTokens: number;
  /** How much faster than the timing model simulated time runs. */
  readonly speedupRatio: number;
  /** Simulated ms per block copied back from the host tier (speedup not applied). */
  readonly hostOnboardMsPerBlock: number;
  readonly #waiting: Sequence[] = [];
  readonly #running: Sequence[] = [];
  #promptTokens = 0;
  #cachedTokens = 0;

  /**
   * Creates a scheduler over a block manager.
   * @throws {InvalidArgumentError} a limit out of range
   */
  constructor(blockManager: BlockManager, options: SchedulerOptions = {}) {
    this.blockManager = blockManager;
    this.maxNumSeqs = options.maxNumSeqs ?? 256;
    this.maxNumBatchedTokens = options.maxNumBatchedTokens ?? 8192;
    this.speedupRatio = options.speedupRatio ?? 1;
    this.hostOnboardMsPerBlock = options.hostOnboardMsPerBlock ?? DEFAULT_KV_ONBOARD_MS_PER_BLOCK;
    if (!Number.isInteger(this.maxNumSeqs) || this.maxNumSeqs < 1) {
      throw new InvalidArgumentError(
        `maxNumSeqs must be a whole number >= 1, got ${this.maxNumSeqs}`,
      );
    }
    if (!Number.isInteger(this.maxNumBatchedTokens) || this.maxNumBatchedTokens < 1) {
      throw new InvalidArgumentError(
        `maxNumBatchedTokens must be a whole number >= 1, got ${this.maxNumBatchedTokens}`,
      );
    }
    checkSpeedupRatio(this.speedupRatio);
    if (!(this.hostOnboardMsPerBlock >= 0 && this.hostOnboardMsPerBlock < Infinity)) {
      throw new InvalidArgumentError(
        `hostOnboardMsPerBlock must be a finite number >= 0, got ${options.hostOnboardMsPerBlock}`,
      );
    }
  }

  /** Sequences waiting for admission (including preempted ones). */
  get numWaiting(): number {
    return this.#waiting.length;
  }

  /** Sequences holding blocks and computing. */
  get numRunning(): number {
    return this.#running.length;
  }

  /** True while any sequence waits or runs. */
  get hasWork(): boolean {
    return this.#waiting.length > 0 || this.#running.length > 0;
  }

  /** Tokens one sequence may hold in KV at most (all blocks above the watermark). */
  get capacityTokens(): number {
    const bm = this.blockManager;
    return (bm.numGpuBlocks - bm.watermarkBlocks) * bm.blockSize;
  }

  /**
   * Queues a request. `maxTokens` is capped so that prompt and output fit the cache.
   * @throws {InvalidArgumentError} an empty prompt, maxTokens < 1, or a prompt larger
   *   than the cache
   */
  add(request: SequenceRequest): Sequence {
    const n = request.tokenIds.length;
    if (n === 0) throw new InvalidArgumentError("the mocker needs a non-empty prompt");
    if (!Number.isInteger(request.maxTokens) || request.maxTokens < 1) {
      throw new InvalidArgumentError(
        `maxTokens must be a whole number >= 1, got ${request.maxTokens}`,
      );
    }
    // The last output token needs no KV: prompt + maxTokens - 1 tokens must fit.
    const room = this.capacityTokens - n + 1;
    if (room < 1) {
      throw new InvalidArgumentError(
        `a prompt of ${n} tokens does not fit the mocker's KV cache of ${this.capacityTokens} tokens`,
      );
    }
    const seq = new Sequence(request, Math.min(request.maxTokens, room));
    this.#waiting.push(seq);
    return seq;
  }

  /** Drops a sequence (cancelled request) and frees its blocks; a no-op once it ended. */
  abort(seq: Sequence): void {
    if (seq.state === "waiting") {
      const i = this.#waiting.indexOf(seq);
      if (i >= 0) this.#waiting.splice(i, 1);
    } else if (seq.state === "running") {
      const i = this.#running.indexOf(seq);
      if (i >= 0) this.#running.splice(i, 1);
      this.#freeBlocks(seq);
    } else {
      return;
    }
    seq.state = "aborted";
  }

  /** Aborts every sequence, waiting or running (engine shutdown). */
  abortAll(): void {
    for (const seq of [...this.#running, ...this.#waiting]) this.abort(seq);
  }

  /** Plans the next forward pass and reserves its blocks (does not advance sequences). */
  schedule(): StepPlan {
    const bm = this.blockManager;
    const bs = bm.blockSize;
    const entries: StepEntry[] = [];
    const preempted: Sequence[] = [];
    let budget = this.maxNumBatchedTokens;
    let onboardedBlocks = 0;

    for (let i = 0; i < this.#running.length && budget > 0; i++) {
      const seq = this.#running[i]!;
      const n = Math.min(seq.tokens.length - seq.numComputed, budget);
      const need = Math.ceil((seq.numComputed + n) / bs) - seq.heldFull - seq.heldAnonymous;
      while (need > bm.availableBlocks && this.#running.length - 1 > i) {
        preempted.push(this.#preempt(this.#running.length - 1));
      }
      if (need > bm.availableBlocks) {
        preempted.push(this.#preempt(i));
        break;
      }
      bm.allocate(need);
      seq.heldAnonymous += need;
      entries.push({ sequence: seq, tokens: n, decode: n === 1 && seq.generated > 0 });
      budget -= n;
    }

    while (
      preempted.length === 0 && this.#waiting.length > 0 &&
      this.#running.length < this.maxNumSeqs && budget > 0
    ) {
      const seq = this.#waiting[0]!;
      const known = seq.blocks.slice(0, Math.floor((seq.tokens.length - 1) / bs));
      const hits = known.slice(0, bm.matchPrefix(known.map((b) => b.sequenceHash)));
      let held = hits.length;
      while (held < known.length && bm.isOnHost(known[held]!.sequenceHash)) held++;
      const onboard = known.slice(hits.length, held);
      const computed = held * bs;
      const n = Math.min(seq.tokens.length - computed, budget);
      const fresh = Math.ceil((computed + n) / bs) - held;
      if (!bm.canAdmit(hits.map((b) => b.sequenceHash), fresh + onboard.length)) break;
      bm.acquireCached(hits.map((b) => b.sequenceHash));
      if (onboard.length > 0) {
        bm.load(hits.at(-1)?.sequenceHash ?? null, onboard);
        onboardedBlocks += onboard.length;
      }
      bm.allocate(fresh);
      seq.heldFull = held;
      seq.heldAnonymous = fresh;
      seq.numComputed = computed;
      if (!seq.admitted) {
        seq.admitted = true;
        this.#promptTokens += seq.promptLength;
        seq.cachedTokens = Math.min(computed, seq.promptLength);
        this.#cachedTokens += seq.cachedTokens;
      }
      this.#waiting.shift();
      this.#running.push(seq);
      seq.state = "running";
      entries.push({ sequence: seq, tokens: n, decode: false });
      budget -= n;
    }

    let prefillTokens = 0;
    let decodeSequences = 0;
    for (const e of entries) {
      if (e.decode) decodeSequences++;
      else prefillTokens += e.tokens;
    }
    const kvUsage = bm.usage;
    const durationMs = stepTimeMs({ prefillTokens, decodeSequences, kvUsage }, this.speedupRatio) +
      onboardedBlocks * this.hostOnboardMsPerBlock / this.speedupRatio;
    return {
      entries,
      prefillTokens,
      decodeSequences,
      kvUsage,
      durationMs,
      onboardedBlocks,
      preempted,
    };
  }

  /**
   * Completes a planned pass: advances each sequence still running by its tokens, caches
   * its newly full blocks, emits a token for each sequence whose known tokens are all
   * computed, and retires finished sequences.
   */
  apply(plan: StepPlan): void {
    const bs = this.blockManager.blockSize;
    const done: Sequence[] = [];
    for (const e of plan.entries) {
      const seq = e.sequence;
      if (seq.state !== "running") continue;
      seq.numComputed += e.tokens;
      const full = Math.floor(seq.numComputed / bs);
      // Blocks of generated tokens get their hashes once they are full and computed.
      for (let b = seq.blocks.length; b < full; b++) {
        const [local] = computeLocalHashes(seq.tokens.slice(b * bs, (b + 1) * bs), bs);
        const parent = seq.blocks[b - 1]?.sequenceHash;
        seq.blocks.push({
          localHash: local!,
          sequenceHash: parent === undefined ? local! : chainHash(parent, local!),
        });
      }
      if (full > seq.heldFull) {
        this.blockManager.commit(
          seq.blocks[seq.heldFull - 1]?.sequenceHash ?? null,
          seq.blocks.slice(seq.heldFull, full),
        );
        seq.heldAnonymous -= full - seq.heldFull;
        seq.heldFull = full;
      }
      if (seq.numComputed < seq.tokens.length) continue;
      const token = seq.request.nextToken(seq.generated);
      seq.tokens.push(token);
      seq.generated++;
      const finished = seq.generated >= seq.maxTokens;
      if (finished) done.push(seq);
      seq.request.onToken(token, finished);
    }
    for (const seq of done) {
      if (seq.state !== "running") continue;
      this.#running.splice(this.#running.indexOf(seq), 1);
      this.#freeBlocks(seq);
      seq.state = "finished";
    }
  }

  /** Plans and applies one pass at once (no simulated time passes). */
  step(): StepPlan {
    const plan = this.schedule();
    this.apply(plan);
    return plan;
  }

  /** The worker's load now, in the KV router's metrics shape (with its host tier, if any). */
  metrics(): ForwardPassMetrics {
    const bm = this.blockManager;
    const host = bm.hostBlocks > 0
      ? { kv_host_blocks: bm.hostCachedBlocks, kv_host_total_blocks: bm.hostBlocks }
      : {};
    return {
      request_active_slots: this.#running.length,
      request_total_slots: this.maxNumSeqs,
      kv_active_blocks: bm.activeBlocks,
      kv_total_blocks: bm.numGpuBlocks,
      num_requests_waiting: this.#waiting.length,
      gpu_cache_usage_perc: bm.usage,
      gpu_prefix_cache_hit_rate: this.#promptTokens === 0
        ? 0
        : this.#cachedTokens / this.#promptTokens,
      ...host,
    };
  }

  #preempt(index: number): Sequence {
    const [seq] = this.#running.splice(index, 1);
    this.#freeBlocks(seq!);
    seq!.numComputed = 0;
    seq!.preemptions++;
    seq!.state = "waiting";
    this.#waiting.unshift(seq!);
    return seq!;
  }

  #freeBlocks(seq: Sequence): void {
    const held = seq.blocks.slice(0, seq.heldFull).map((b) => b.sequenceHash).reverse();
    this.blockManager.release(held, seq.heldAnonymous);
    seq.heldFull = 0;
    seq.heldAnonymous = 0;
  }
}
