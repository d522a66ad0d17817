// The decode worker's KV memory: a registered DRAM region cut into blocks, a free list,
// local (deterministic) prefill, byte-exact verification, and waits on the transfer
// agent's notifications (which arrive by polling `getNewNotifs`).

import type { TransferAgent } from "../../native/mod.ts";
import type { MemoryRegion } from "../../native/mod.ts";
import { DynamoError, InvalidArgumentError, TimeoutError } from "../../runtime/errors.ts";
import { fillKvBlock, splitBlocks, verifyKvBlock } from "./kv_bytes.ts";
import { type DecodeMemoryInfo, parsePrefillNotif } from "./protocol.ts";

/** A block's bytes differ from what its tokens determine. */
export class KvVerificationError extends DynamoError {
  readonly blockIndex: number;
  readonly byteOffset: number;
  constructor(blockIndex: number, byteOffset: number) {
    super(`KV block ${blockIndex} is wrong at byte ${byteOffset}`);
    this.blockIndex = blockIndex;
    this.byteOffset = byteOffset;
  }
}

/** The prefill worker skipped the request (it had expired). */
export class PrefillSkippedError extends DynamoError {}

/** Not enough free KV blocks. */
export class KvCacheFullError extends DynamoError {}

/** Options of {@linkcode DecodeKvCache}. */
export interface DecodeKvCacheOptions {
  /** Blocks in the region. */
  numBlocks: number;
  /** Bytes per block. */
  blockBytes: number;
  /** Notification poll period in ms; default 2. */
  pollMs?: number;
}

/** Options of {@linkcode DecodeKvCache.waitPrefilled}. */
export interface WaitPrefilledOptions {
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * The decode worker's KV blocks in shared memory that prefill workers write into.
 *
 * @example
 * ```ts
 * const kv = new DecodeKvCache(new TransferAgent("decode-0"), { numBlocks: 64, blockBytes: 4096 });
 * const ids = kv.allocate(3);
 * kv.fillLocal(ids, prompt, 16);
 * kv.verify(ids, prompt, 16); // 3
 * kv.free(ids);
 * ```
 */
export class DecodeKvCache {
  readonly agent: TransferAgent;
  readonly numBlocks: number;
  readonly blockBytes: number;
  readonly #region: MemoryRegion;
  readonly #info: DecodeMemoryInfo;
  readonly #free: number[];
  readonly #waiters = new Map<string, (done: boolean) => void>();
  // Notifications nobody waited for yet: request id -> done (false: skipped).
  readonly #arrived = new Map<string, boolean>();
  readonly #pollMs: number;
  #timer: ReturnType<typeof setInterval> | undefined;

  /**
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
    this.#pollMs = options.pollMs ?? 2;
    this.#region = agent.allocate("DRAM", numBlocks * blockBytes);
    agent.registerMemory(this.#region);
    this.#info = {
      agent_name: agent.name,
      metadata: new TextDecoder().decode(agent.getAgentMetadata()),
      descs: agent.getXferDescs({ region: this.#region, blockBytes }),
      block_bytes: blockBytes,
    };
    this.#free = Array.from({ length: numBlocks }, (_, i) => i);
  }

  /** What prefill workers need to write here (publish it once). */
  memoryInfo(): DecodeMemoryInfo {
    return this.#info;
  }

  /** Free blocks. */
  get freeBlocks(): number {
    return this.#free.length;
  }

  /**
   * @param n blocks wanted
   * @returns block ids (indices into the published descriptor list)
   * @throws {KvCacheFullError} fewer than `n` are free
   */
  allocate(n: number): number[] {
    if (n > this.#free.length) {
      throw new KvCacheFullError(`need ${n} KV blocks, ${this.#free.length} free`);
    }
    return this.#free.splice(0, n);
  }

  /** Returns blocks to the free list. */
  free(ids: readonly number[]): void {
    this.#free.push(...ids);
  }

  /** Local prefill: writes each block's pattern into `ids`. */
  fillLocal(ids: readonly number[], tokens: readonly number[], blockSize: number): void {
    const blocks = splitBlocks(tokens, blockSize);
    const buf = new Uint8Array(this.blockBytes);
    for (const [i, t] of blocks.entries()) {
      fillKvBlock(buf, t, i);
      this.agent.writeMemory(this.#region, ids[i]! * this.blockBytes, buf);
    }
  }

  /**
   * Checks every byte of the prompt's blocks.
   *
   * @returns blocks verified
   * @throws {KvVerificationError} the first wrong block
   */
  verify(ids: readonly number[], tokens: readonly number[], blockSize: number): number {
    const blocks = splitBlocks(tokens, blockSize);
    for (const [i, t] of blocks.entries()) {
      const bytes = this.agent.readMemory(this.#region, ids[i]! * this.blockBytes, this.blockBytes);
      const bad = verifyKvBlock(bytes, t, i);
      if (bad >= 0) throw new KvVerificationError(i, bad);
    }
    return blocks.length;
  }

  /**
   * Waits for a prefill worker's done-notification for `requestId`.
   *
   * @throws {TimeoutError} none came within `timeoutMs`
   */
  async waitPrefilled(requestId: string, options: WaitPrefilledOptions): Promise<void> {
    options.signal?.throwIfAborted();
    this.#poll();
    const early = this.#arrived.get(requestId);
    if (early !== undefined) {
      this.#arrived.delete(requestId);
      if (early) return;
      throw new PrefillSkippedError(`the prefill worker skipped ${requestId}`);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.#waiters.set(
          requestId,
          (done) =>
            done
              ? resolve()
              : reject(new PrefillSkippedError(`the prefill worker skipped ${requestId}`)),
        );
        this.#startPolling();
        timer = setTimeout(
          () =>
            reject(
              new TimeoutError(
                `no prefill-done notification for ${requestId} within ${options.timeoutMs} ms`,
              ),
            ),
          options.timeoutMs,
        );
        if (options.signal) {
          const signal = options.signal;
          onAbort = () => reject(signal.reason);
          signal.addEventListener("abort", onAbort, { once: true });
        }
      });
    } finally {
      clearTimeout(timer);
      if (onAbort) options.signal?.removeEventListener("abort", onAbort);
      this.#waiters.delete(requestId);
      this.#stopPollingIfIdle();
    }
  }

  /**
   * Whether a (done or skipped) notification arrived for a request nobody waits for (a
   * late one); consumes it.
   */
  takeLate(requestId: string): boolean {
    this.#poll();
    return this.#arrived.delete(requestId);
  }

  /** Stops polling and releases the region (the agent stays open). */
  close(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.agent.releaseMemory(this.#region);
  }

  #poll(): void {
    for (const bodies of this.agent.getNewNotifs().values()) {
      for (const body of bodies) {
        const n = parsePrefillNotif(body);
        if (n === undefined) continue;
        const w = this.#waiters.get(n.requestId);
        if (w) w(n.done);
        else this.#arrived.set(n.requestId, n.done);
      }
    }
  }

  #startPolling(): void {
    this.#timer ??= setInterval(() => this.#poll(), this.#pollMs);
  }

  #stopPollingIfIdle(): void {
    if (this.#waiters.size === 0 && this.#timer !== undefined) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
