// The prefill side of the state variant: take remote state prefill requests off the queue,
// have the engine produce the prompt's state as one blob, write it (framed with its length)
// into the decode worker's slot with one WRITE of whole chunks, and notify it.

import type { DlistHandle, MemoryRegion, TransferAgent } from "../../native/mod.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import { type PrefillLoopOptions, runPrefillLoop } from "./prefill_loop.ts";
import { checkStatePrefillRequest, InvalidPrefillRequestError } from "./prefill_request.ts";
import {
  type DecodeMemoryInfo,
  prefillDoneNotif,
  prefillSkippedNotif,
  type RemoteStatePrefillRequest,
  STATE_FRAME_BYTES,
} from "./protocol.ts";
import { DecodePeers } from "./_decode_peers.ts";
import type { PrefillQueue } from "./queue.ts";

/** Options of {@linkcode StatePrefillWorker}. */
export interface StatePrefillWorkerOptions {
  /** Bytes per chunk (must match the decode worker's published `block_bytes`). */
  chunkBytes: number;
  /** Staging chunks, i.e. the largest framed blob this worker sends. */
  maxChunks: number;
  /**
   * Computes the request's state as one blob (e.g. `LlamaCppDisagg.prefill`). A failure
   * skips the request: the decode worker is told and prefills locally.
   */
  produce: (request: RemoteStatePrefillRequest) => Promise<Uint8Array>;
  /** Finds a decode worker's published memory; called once per decode agent. */
  resolveDecode: (agentName: string) => Promise<DecodeMemoryInfo>;
  /** Where the worker logs. */
  logger?: Logger;
  /** Epoch ms now; default Date.now (tests inject). */
  now?: () => number;
}

/** Options of {@linkcode StatePrefillWorker.run}: the loop's signal, poll and callbacks. */
export type StatePrefillRunOptions = Pick<
  PrefillLoopOptions<RemoteStatePrefillRequest, StatePrefillResult>,
  "signal" | "pollMs" | "onStart" | "onResult"
>;

/** What one handled state request did. */
export interface StatePrefillResult {
  /** The request id. */
  requestId: string;
  /** Blob bytes written (0 when skipped). */
  bytes: number;
  /** Chunks the WRITE moved (0 when skipped). */
  chunks: number;
  /** Whether it was skipped: expired, or the engine could not produce a blob that fits. */
  skipped: boolean;
  /** Why it was skipped, when not for expiry. */
  reason?: string;
}

/**
 * A prefill worker for engines whose prefill result is one state blob.
 *
 * @example
 * ```ts ignore
 * const worker = new StatePrefillWorker(new TransferAgent("prefill-0"), {
 *   chunkBytes: inbox.chunkBytes, maxChunks: inbox.chunksPerSlot,
 *   produce: (r) => disagg.prefill(r.token_ids), resolveDecode: async () => inbox.memoryInfo() });
 * await worker.run(queue, { signal });
 * ```
 */
export class StatePrefillWorker {
  /** The prefill worker's transfer agent. */
  readonly agent: TransferAgent;
  readonly #opts: StatePrefillWorkerOptions;
  readonly #staging: MemoryRegion;
  readonly #local: DlistHandle;
  readonly #peers: DecodePeers;
  readonly #now: () => number;

  /**
   * Creates the worker with `maxChunks` chunks of staging memory on `agent`.
   *
   * @param agent the prefill worker's transfer agent
   * @param options geometry, the engine's producer, how to find decode workers
   * @throws {InvalidArgumentError} a bad chunk size or count
   */
  constructor(agent: TransferAgent, options: StatePrefillWorkerOptions) {
    const { chunkBytes, maxChunks } = options;
    if (!Number.isInteger(chunkBytes) || chunkBytes < STATE_FRAME_BYTES) {
      throw new InvalidArgumentError(`chunkBytes must be an integer >= 4, got ${chunkBytes}`);
    }
    if (!Number.isInteger(maxChunks) || maxChunks < 1) {
      throw new InvalidArgumentError(`maxChunks must be an integer >= 1, got ${maxChunks}`);
    }
    this.agent = agent;
    this.#opts = options;
    this.#peers = new DecodePeers(agent, options.resolveDecode, options.chunkBytes, "chunk");
    this.#now = options.now ?? Date.now;
    this.#staging = agent.allocate("DRAM", maxChunks * chunkBytes);
    agent.registerMemory(this.#staging);
    this.#local = agent.prepXferDlist(
      "",
      agent.getXferDescs({ region: this.#staging, blockBytes: chunkBytes }),
    );
  }

  /**
   * Prefills one request: produces the blob, writes it into the decode worker's slot,
   * notifies.
   *
   * @param request the request as it came off the queue (checked here)
   * @returns what was done
   * @throws {InvalidPrefillRequestError} the request is malformed or names a slot outside
   *   the decode worker's memory
   * @throws {TransferError} the transfer failed
   */
  handle(request: unknown): Promise<StatePrefillResult> {
    try {
      return this.#handle(checkStatePrefillRequest(request));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  async #handle(req: RemoteStatePrefillRequest): Promise<StatePrefillResult> {
    const skip = async (reason?: string): Promise<StatePrefillResult> => {
      this.#opts.logger?.warn("skipping a remote state prefill", {
        request_id: req.request_id,
        reason: reason ?? "expired",
      });
      // Best effort: the decode worker falls back to local prefill at its deadline anyway.
      try {
        const peer = await this.#peers.get(req.engine_agent);
        this.agent.sendNotif(peer.info.agent_name, prefillSkippedNotif(req.request_id));
      } catch (e) {
        this.#opts.logger?.warn("cannot tell the decode worker", {
          request_id: req.request_id,
          error: e instanceof Error ? e.message : String(e),
        });
      }
      return { requestId: req.request_id, bytes: 0, chunks: 0, skipped: true, reason };
    };
    if (req.expires_at <= this.#now()) return await skip();
    const peer = await this.#peers.get(req.engine_agent);
    const descs = peer.info.descs.descs.length;
    if (req.first_chunk + req.chunk_count > descs) {
      throw new InvalidPrefillRequestError(
        `chunks ${req.first_chunk}..${req.first_chunk + req.chunk_count} lie outside decode ` +
          `${req.engine_agent}'s ${descs} chunks`,
        req.request_id,
      );
    }
    let blob: Uint8Array;
    try {
      blob = await this.#opts.produce(req);
    } catch (e) {
      return await skip(`the engine cannot prefill it: ${e instanceof Error ? e.message : e}`);
    }
    const { chunkBytes, maxChunks } = this.#opts;
    const chunks = Math.ceil((blob.length + STATE_FRAME_BYTES) / chunkBytes);
    if (chunks > req.chunk_count || chunks > maxChunks) {
      return await skip(
        `its state of ${blob.length} bytes needs ${chunks} chunks; the slot has ` +
          `${req.chunk_count}, the staging memory ${maxChunks}`,
      );
    }
    const frame = new Uint8Array(STATE_FRAME_BYTES);
    new DataView(frame.buffer).setUint32(0, blob.length, true);
    this.agent.writeMemory(this.#staging, 0, frame);
    this.agent.writeMemory(this.#staging, STATE_FRAME_BYTES, blob);
    const xfer = this.agent.makePreppedXfer(
      "WRITE",
      this.#local,
      Array.from({ length: chunks }, (_, j) => j),
      peer.remote,
      Array.from({ length: chunks }, (_, j) => req.first_chunk + j),
      prefillDoneNotif(req.request_id),
    );
    try {
      if (this.agent.transfer(xfer) !== "DONE") await this.agent.waitXfer(xfer);
    } finally {
      this.agent.releaseXferHandle(xfer);
    }
    return { requestId: req.request_id, bytes: blob.length, chunks, skipped: false };
  }

  /**
   * Serves `queue` until `signal` aborts: dequeue, handle, ack. An invalid request is
   * acked and dropped with a log line (it would fail again); a failed transfer is not
   * acked (the queue redelivers it).
   *
   * @param queue the prefill queue
   * @param options `signal` ends the loop; `onStart` sees each request taken,
   *   `onResult` each one handled
   * @returns when `signal` aborts
   */
  run(
    queue: PrefillQueue<RemoteStatePrefillRequest>,
    options: StatePrefillRunOptions,
  ): Promise<void> {
    return runPrefillLoop(queue, {
      ...options,
      check: checkStatePrefillRequest,
      handle: (req) => this.#handle(req),
      requestId: (req) => req.request_id,
      logger: this.#opts.logger,
    });
  }

  /** Releases the staging memory (the agent stays open). */
  close(): void {
    this.agent.releaseDlistHandle(this.#local);
    this.agent.releaseMemory(this.#staging);
  }
}
