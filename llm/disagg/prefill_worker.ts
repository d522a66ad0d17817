// The prefill side: take remote prefill requests off the queue, compute the blocks the
// decode worker does not have cached (the mocker's deterministic fill), write them into
// its memory in one batched WRITE and notify it.

import type { DlistHandle, MemoryRegion, TransferAgent } from "../../native/mod.ts";
import type { Logger } from "../../runtime/logger.ts";
import { fillKvBlock, splitBlocks } from "./kv_bytes.ts";
import {
  type DecodeMemoryInfo,
  prefillDoneNotif,
  prefillSkippedNotif,
  type RemotePrefillRequest,
} from "./protocol.ts";
import { checkPrefillRequest, InvalidPrefillRequestError } from "./prefill_request.ts";
import { type PrefillLoopOptions, runPrefillLoop } from "./prefill_loop.ts";
import { DecodePeers } from "./_decode_peers.ts";
import type { PrefillQueue } from "./queue.ts";

/** Options of {@linkcode PrefillWorker}. */
export interface PrefillWorkerOptions {
  /** Bytes per KV block (must match the decode worker's). */
  blockBytes: number;
  /** Staging blocks, i.e. the longest prompt in blocks; default 1024. */
  maxBlocks?: number;
  /** Finds a decode worker's published memory; called once per decode agent. */
  resolveDecode: (agentName: string) => Promise<DecodeMemoryInfo>;
  /** Simulated compute time per request in ms (the mocker's prefill time); default 0. */
  prefillDelayMs?: number;
  /** Where the worker logs. */
  logger?: Logger;
  /** Epoch ms now; default Date.now (tests inject). */
  now?: () => number;
}

/** Options of {@linkcode PrefillWorker.run}: the loop's signal, poll and callbacks. */
export type PrefillRunOptions = Pick<
  PrefillLoopOptions<RemotePrefillRequest, PrefillResult>,
  "signal" | "pollMs" | "onStart" | "onResult"
>;

/** What one handled request did. */
export interface PrefillResult {
  /** The request id. */
  requestId: string;
  /**
   * Blocks written (the prompt's blocks from `first_block` on); 0 when the request had
   * expired and was skipped.
   */
  blocks: number;
  /** Whether the request had expired and was skipped. */
  skipped: boolean;
}

/**
 * A prefill worker around a {@linkcode TransferAgent}.
 *
 * @example
 * ```ts ignore
 * const worker = new PrefillWorker(new TransferAgent("prefill-0"), {
 *   blockBytes: 4096, resolveDecode: async () => decodeKv.memoryInfo() });
 * await worker.run(queue, { signal });
 * ```
 */
export class PrefillWorker {
  /** The prefill worker's transfer agent. */
  readonly agent: TransferAgent;
  readonly #opts: PrefillWorkerOptions;
  readonly #staging: MemoryRegion;
  readonly #local: DlistHandle;
  readonly #peers: DecodePeers;
  readonly #now: () => number;
  readonly #maxBlocks: number;

  /**
   * Creates a prefill worker with staging memory on `agent`.
   *
   * @param agent the prefill worker's transfer agent
   * @param options geometry and how to find decode workers
   */
  constructor(agent: TransferAgent, options: PrefillWorkerOptions) {
    this.agent = agent;
    this.#opts = options;
    this.#peers = new DecodePeers(agent, options.resolveDecode, options.blockBytes, "block");
    this.#now = options.now ?? Date.now;
    const maxBlocks = this.#maxBlocks = options.maxBlocks ?? 1024;
    this.#staging = agent.allocate("DRAM", maxBlocks * options.blockBytes);
    agent.registerMemory(this.#staging);
    this.#local = agent.prepXferDlist(
      "",
      agent.getXferDescs({ region: this.#staging, blockBytes: options.blockBytes }),
    );
  }

  /**
   * Prefills one request: fills its blocks from `first_block` on, writes them to the
   * decode worker, notifies.
   *
   * @param request the request as it came off the queue (checked here)
   * @returns what was done
   * @throws {InvalidPrefillRequestError} the request is malformed, does not fit this
   *   worker's staging memory, or names blocks outside the decode worker's list
   * @throws {TransferError} the transfer failed
   */
  handle(request: unknown): Promise<PrefillResult> {
    try {
      return this.#handle(checkPrefillRequest(request, { maxBlocks: this.#maxBlocks }));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  async #handle(req: RemotePrefillRequest): Promise<PrefillResult> {
    if (req.expires_at <= this.#now()) {
      // The decode worker prefilled it itself; tell it (best effort) so it can reuse the
      // blocks. Never fails: an expired request must leave the queue.
      this.#opts.logger?.warn("skipping an expired remote prefill", { request_id: req.request_id });
      try {
        const peer = await this.#peers.get(req.engine_agent);
        this.agent.sendNotif(peer.info.agent_name, prefillSkippedNotif(req.request_id));
      } catch (e) {
        this.#opts.logger?.warn("cannot tell the decode worker", {
          request_id: req.request_id,
          error: e instanceof Error ? e.message : String(e),
        });
      }
      return { requestId: req.request_id, blocks: 0, skipped: true };
    }
    const blocks = splitBlocks(req.token_ids, req.block_size);
    // The decode worker holds the blocks before `first` in its prefix cache already.
    const first = req.first_block ?? 0;
    const count = blocks.length - first; // the door saw to 0 <= count <= maxBlocks
    const peer = await this.#peers.get(req.engine_agent);
    const descs = peer.info.descs.descs.length;
    for (let j = 0; j < count; j++) {
      if (req.block_ids[j]! >= descs) {
        throw new InvalidPrefillRequestError(
          `block_ids[${j}] is ${req.block_ids[j]}, outside decode ${req.engine_agent}'s ` +
            `${descs} blocks`,
          req.request_id,
        );
      }
    }
    const delay = this.#opts.prefillDelayMs ?? 0;
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    if (count === 0) {
      this.agent.sendNotif(peer.info.agent_name, prefillDoneNotif(req.request_id));
      return { requestId: req.request_id, blocks: 0, skipped: false };
    }
    const bb = this.#opts.blockBytes;
    const buf = new Uint8Array(bb);
    for (let j = 0; j < count; j++) {
      fillKvBlock(buf, blocks[first + j]!, first + j);
      this.agent.writeMemory(this.#staging, j * bb, buf);
    }
    const xfer = this.agent.makePreppedXfer(
      "WRITE",
      this.#local,
      Array.from({ length: count }, (_, j) => j),
      peer.remote,
      req.block_ids.slice(0, count),
      prefillDoneNotif(req.request_id),
    );
    try {
      if (this.agent.transfer(xfer) !== "DONE") await this.agent.waitXfer(xfer);
    } finally {
      this.agent.releaseXferHandle(xfer);
    }
    return { requestId: req.request_id, blocks: count, skipped: false };
  }

  /**
   * Serves `queue` until `signal` aborts: dequeue, handle, ack. An invalid request is
   * acked and dropped with a log line (it would fail again); a failed one is not acked
   * (the queue redelivers it).
   *
   * @param queue the prefill queue
   * @param options `signal` ends the loop; `onStart` sees each request taken,
   *   `onResult` each one handled
   */
  run(
    queue: PrefillQueue<RemotePrefillRequest>,
    options: PrefillRunOptions,
  ): Promise<void> {
    return runPrefillLoop(queue, {
      ...options,
      check: (data) => checkPrefillRequest(data, { maxBlocks: this.#maxBlocks }),
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
