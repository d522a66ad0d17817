// The decode worker's memory for prefilled state blobs (the state variant of disaggregation,
// where a prefill's result is one engine-specific blob rather than KV blocks): a registered
// DRAM region cut into slots of fixed-size chunks. A request takes a slot, a prefill worker
// writes the framed blob into its chunks with one WRITE and notifies; the blob is read out
// and the slot goes back.

import type { MemoryRegion, TransferAgent } from "../../native/mod.ts";
import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";
import { PrefillNotifs, type WaitPrefilledOptions } from "./prefill_notifs.ts";
import { type DecodeMemoryInfo, STATE_FRAME_BYTES } from "./protocol.ts";

/** Default chunk size: 64 KiB, the transfer agent's inline limit. */
export const DEFAULT_STATE_CHUNK_BYTES = 64 * 1024;

/** A slot's frame names a blob longer than the slot holds. */
export class StateFrameError extends DynamoError {
  /** The slot. */
  readonly slot: number;
  /** The length the frame claims. */
  readonly claimed: number;
  /** The most the slot holds. */
  readonly capacity: number;
  /** Creates the error for one slot. */
  constructor(slot: number, claimed: number, capacity: number) {
    super(`state slot ${slot} claims a blob of ${claimed} bytes; it holds at most ${capacity}`);
    this.slot = slot;
    this.claimed = claimed;
    this.capacity = capacity;
  }
}

/** Options of {@linkcode StateInbox}. */
export interface StateInboxOptions {
  /** Slots: remote prefills in flight at once (more prefill locally). */
  slots: number;
  /** Largest blob a slot holds, in bytes (rounded up to whole chunks with the frame). */
  slotBytes: number;
  /** Bytes per chunk (one transfer descriptor); default {@linkcode DEFAULT_STATE_CHUNK_BYTES}. */
  chunkBytes?: number;
  /** Notification poll period in ms; default 2. */
  pollMs?: number;
}

/** A slot taken for one request. */
export interface StateSlot {
  /** The slot's number. */
  readonly index: number;
  /** Its first chunk: an index into the published descriptor list. */
  readonly firstChunk: number;
  /** Chunks in it. */
  readonly chunkCount: number;
}

/**
 * Slots of registered memory that prefill workers write state blobs into.
 *
 * @example
 * ```ts ignore
 * const inbox = new StateInbox(new TransferAgent("decode-0"), { slots: 4, slotBytes: 16 << 20 });
 * const slot = inbox.takeSlot()!;
 * // queue {first_chunk: slot.firstChunk, chunk_count: slot.chunkCount, ...}, then:
 * await inbox.waitWritten(requestId, { timeoutMs: 10_000 });
 * const blob = inbox.read(slot);
 * inbox.releaseSlot(slot);
 * ```
 */
export class StateInbox {
  /** The decode worker's transfer agent, which owns the region. */
  readonly agent: TransferAgent;
  /** Slots in the region. */
  readonly slots: number;
  /** Bytes per chunk. */
  readonly chunkBytes: number;
  /** Chunks per slot. */
  readonly chunksPerSlot: number;
  /** Largest blob a slot holds. */
  readonly slotBytes: number;
  readonly #region: MemoryRegion;
  readonly #info: DecodeMemoryInfo;
  readonly #notifs: PrefillNotifs;
  readonly #free: number[];
  readonly #taken = new Set<number>();
  // Slots of requests given up on while a prefill worker may still write them: kept out of
  // the free list until their late notification comes (or forever, a bounded leak).
  readonly #abandoned = new Map<string, number>();

  /**
   * Allocates and registers the region on the agent.
   *
   * @param agent the decode worker's transfer agent
   * @param options slots and their size
   * @throws {InvalidArgumentError} a bad slot count or size
   */
  constructor(agent: TransferAgent, options: StateInboxOptions) {
    const { slots, slotBytes } = options;
    const chunkBytes = options.chunkBytes ?? DEFAULT_STATE_CHUNK_BYTES;
    if (!Number.isInteger(slots) || slots < 1) {
      throw new InvalidArgumentError(`slots must be an integer >= 1, got ${slots}`);
    }
    if (!Number.isInteger(chunkBytes) || chunkBytes < STATE_FRAME_BYTES) {
      throw new InvalidArgumentError(
        `chunkBytes must be an integer >= ${STATE_FRAME_BYTES}, got ${chunkBytes}`,
      );
    }
    // The frame is a u32: a slot past 4 GiB could not say its blob's length.
    if (!Number.isInteger(slotBytes) || slotBytes < 1 || slotBytes > 2 ** 32 - 1 - chunkBytes) {
      throw new InvalidArgumentError(
        `slotBytes must be an integer in [1, 4 GiB), got ${slotBytes}`,
      );
    }
    this.agent = agent;
    this.slots = slots;
    this.chunkBytes = chunkBytes;
    this.chunksPerSlot = Math.ceil((slotBytes + STATE_FRAME_BYTES) / chunkBytes);
    this.slotBytes = this.chunksPerSlot * chunkBytes - STATE_FRAME_BYTES;
    this.#region = agent.allocate("DRAM", slots * this.chunksPerSlot * chunkBytes);
    agent.registerMemory(this.#region);
    this.#info = {
      agent_name: agent.name,
      metadata: new TextDecoder().decode(agent.getAgentMetadata()),
      descs: agent.getXferDescs({ region: this.#region, blockBytes: chunkBytes }),
      block_bytes: chunkBytes,
    };
    this.#notifs = new PrefillNotifs(agent, { pollMs: options.pollMs });
    this.#free = Array.from({ length: slots }, (_, i) => i);
  }

  /** What prefill workers need to write here (publish it once). */
  memoryInfo(): DecodeMemoryInfo {
    return this.#info;
  }

  /** Slots free now (abandoned ones whose late write has landed count as free). */
  get freeSlots(): number {
    this.#reclaim();
    return this.#free.length;
  }

  /**
   * Takes a free slot for one request; its frame is cleared, so a stale blob is never read.
   *
   * @returns the slot, or undefined when all are taken (prefill locally)
   */
  takeSlot(): StateSlot | undefined {
    this.#reclaim();
    const index = this.#free.shift();
    if (index === undefined) return undefined;
    this.#taken.add(index);
    this.agent.writeMemory(this.#region, this.#offset(index), new Uint8Array(STATE_FRAME_BYTES));
    return { index, firstChunk: index * this.chunksPerSlot, chunkCount: this.chunksPerSlot };
  }

  /**
   * Gives a slot back.
   *
   * @param slot a slot from {@linkcode takeSlot}, not yet given back
   * @throws {InvalidArgumentError} it is not taken
   */
  releaseSlot(slot: StateSlot): void {
    if (!this.#taken.delete(slot.index)) {
      throw new InvalidArgumentError(`state slot ${slot.index} is not taken`);
    }
    this.#free.push(slot.index);
  }

  /**
   * Gives up on a slot whose prefill may still be written (the wait timed out or was
   * cancelled): it stays out of use until that request's late notification comes.
   *
   * @param slot a taken slot
   * @param requestId the request the slot was queued for
   * @throws {InvalidArgumentError} it is not taken
   */
  abandon(slot: StateSlot, requestId: string): void {
    if (!this.#taken.delete(slot.index)) {
      throw new InvalidArgumentError(`state slot ${slot.index} is not taken`);
    }
    this.#abandoned.set(requestId, slot.index);
  }

  /**
   * Waits for the prefill worker's done-notification for `requestId`.
   *
   * @param requestId the request's id
   * @param options deadline and cancellation
   * @throws {TimeoutError} none came within `timeoutMs`
   * @throws {PrefillSkippedError} the prefill worker skipped it
   */
  waitWritten(requestId: string, options: WaitPrefilledOptions): Promise<void> {
    return this.#notifs.waitPrefilled(requestId, options);
  }

  /**
   * Reads the blob a prefill worker wrote into a slot (a copy; the slot can go back).
   *
   * @param slot a taken slot whose notification came
   * @returns the blob's bytes
   * @throws {StateFrameError} the frame claims more than the slot holds
   */
  read(slot: StateSlot): Uint8Array {
    const at = this.#offset(slot.index);
    const frame = this.agent.readMemory(this.#region, at, STATE_FRAME_BYTES);
    const length = new DataView(frame.buffer, frame.byteOffset, STATE_FRAME_BYTES)
      .getUint32(0, true);
    if (length > this.slotBytes) throw new StateFrameError(slot.index, length, this.slotBytes);
    return this.agent.readMemory(this.#region, at + STATE_FRAME_BYTES, length);
  }

  /** Stops polling and releases the region (the agent stays open). */
  close(): void {
    this.#notifs.close();
    this.agent.releaseMemory(this.#region);
  }

  #offset(index: number): number {
    return index * this.chunksPerSlot * this.chunkBytes;
  }

  #reclaim(): void {
    for (const [rid, index] of this.#abandoned) {
      if (this.#notifs.takeLate(rid)) {
        this.#abandoned.delete(rid);
        this.#free.push(index);
      }
    }
  }
}
