/**
 * The KV router's worker selection: the cost of sending a request to each worker from its
 * cached prefix and its predicted load, and the router's own book of the requests it has
 * in flight per worker (load between metric updates).
 *
 * Cost (lower is better), per worker:
 * `overlapScoreWeight * prefillBlocks + decodeBlocks`, where `prefillBlocks` is what the
 * worker would still have to prefill (the request's uncached blocks plus the uncached
 * blocks of its own requests whose first token has not come yet) and `decodeBlocks` is
 * the KV blocks its active requests hold plus this request's.
 *
 * @module
 */

import { InvalidArgumentError } from "../../runtime/errors.ts";

/** What the router knows of one worker when it picks. */
export interface WorkerCandidate {
  /** The worker's instance id. */
  workerId: string;
  /** Blocks of the request's prefix this worker has cached. */
  overlapBlocks: number;
  /** Blocks the request's prompt fills. */
  requestBlocks: number;
  /** Predicted KV blocks held by the worker's active requests. */
  activeBlocks: number;
  /** Predicted blocks still to prefill on the worker (requests with no first token yet). */
  prefillBlocks: number;
  /** Requests the router has in flight on the worker. */
  activeRequests: number;
  /**
   * Requests the router has on the worker that have no first token yet (default 0): the
   * default cost counts the delay this request's prefill adds to them.
   */
  waitingRequests?: number;
  /**
   * Milliseconds until the worker's forward pass in flight ends (0: idle), when the worker
   * says when its passes start and how long they take; a new request waits for it first.
   */
  passLeftMs?: number;
  /** Prompt tokens being prefilled in that pass (also part of `prefillBlocks`' work). */
  passPrefillTokens?: number;
  /** How long that pass takes in all, as announced when it started (the next one's likely length). */
  passMs?: number;
  /**
   * Milliseconds to copy one KV block from a peer that holds it, when the worker can load its
   * prompt's cached prefix from another worker instead of computing it (peer KV fetch).
   */
  fetchMsPerBlock?: number;
  /** Of `overlapBlocks`, the blocks it would copy from `fetchFrom` ({@linkcode withPeerFetch}). */
  fetchBlocks?: number;
  /** The worker it would copy them from. */
  fetchFrom?: string;
  /**
   * Of `overlapBlocks`, those the worker holds below its device (host memory) and copies up
   * before the request's prefill, where it says how long that takes (`onboardMsPerBlock`).
   */
  onboardBlocks?: number;
  /** Milliseconds to copy one block from the worker's host memory to its device. */
  onboardMsPerBlock?: number;
}

/** What a cost function sees. */
export interface CostFunctionInput {
  /** Every worker the request may go to. */
  candidates: readonly WorkerCandidate[];
  /** The request's prompt length in tokens. */
  tokenLength: number;
  /** Tokens per KV block. */
  blockSize: number;
}

/**
 * Picks a worker. Returns its id, or (to keep the router's tie-breaking and temperature)
 * a cost per worker id, lower is better.
 */
export type CostFunction = (
  input: CostFunctionInput,
) => string | Map<string, number> | Promise<string | Map<string, number>>;

/**
 * The reference cost of every candidate.
 *
 * @param queuedPrefillWeight how much the blocks other requests still prefill on a worker
 *   count next to this request's own uncached blocks (default 1, the reference). Lower
 *   values keep more requests on the worker that caches their prefix even when it has
 *   prompts queued: more prefix hits, at some cost in time to first token under load.
 */
export function defaultCosts(
  candidates: readonly WorkerCandidate[],
  overlapScoreWeight: number,
  queuedPrefillWeight = 1,
): Map<string, number> {
  const costs = new Map<string, number>();
  for (const c of candidates) {
    const prefill = c.requestBlocks - c.overlapBlocks + queuedPrefillWeight * c.prefillBlocks;
    const decode = c.activeBlocks + c.requestBlocks;
    costs.set(c.workerId, overlapScoreWeight * prefill + decode);
  }
  return costs;
}

/**
 * Picks from costs: temperature 0 takes the lowest (ties broken at random); a positive
 * temperature samples from a softmax over the costs normalised to [0, 1].
 *
 * @param costs cost per worker id, lower is better; each must be a finite number
 * @param temperature 0 for the cheapest, above 0 to sample
 * @param random a source of numbers in [0, 1) (default Math.random)
 * @returns the picked worker id
 * @throws {InvalidArgumentError} no costs, or a cost that is not a finite number (a
 *   custom cost function's NaN or Infinity would otherwise pick arbitrarily)
 *
 * @example
 * ```ts
 * pickByCost(new Map([["w1", 12], ["w2", 20]]), 0); // "w1"
 * ```
 */
export function pickByCost(
  costs: Map<string, number>,
  temperature: number,
  random: () => number = Math.random,
): string {
  if (costs.size === 0) throw new InvalidArgumentError("no workers to pick from");
  let min = Infinity;
  let max = -Infinity;
  for (const [id, v] of costs) {
    if (typeof v !== "number" || !Number.isFinite(v)) {
      throw new InvalidArgumentError(
        `the cost of worker ${JSON.stringify(id)} must be a finite number, got ${String(v)}`,
      );
    }
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (temperature <= 0 || max === min) {
    const best: string[] = [];
    for (const [id, v] of costs) if (v === min) best.push(id);
    return best[Math.floor(random() * best.length)]!;
  }
  // Halves, so that the span of costs near the limits of a double does not overflow.
  const span = max / 2 - min / 2;
  const ids: string[] = [];
  const weights: number[] = [];
  let total = 0;
  for (const [id, v] of costs) {
    const w = Math.exp(-((v / 2 - min / 2) / span) / temperature);
    ids.push(id);
    weights.push(w);
    total += w;
  }
  let r = random() * total;
  for (let i = 0; i < ids.length; i++) {
    r -= weights[i]!;
    if (r < 0) return ids[i]!;
  }
  return ids[ids.length - 1]!;
}

interface ActiveRequest {
  workerId: string;
  /** KV blocks the request holds (prompt plus generated so far). */
  blocks: number;
  /** Uncached prompt blocks, until the first token. */
  prefillBlocks: number;
  tokens: number;
  /** When it was booked (ms, the book's clock), until its first output. */
  bookedAt?: number;
  /** Whether its first output came. */
  started?: boolean;
  /** The worker's load it was routed with: prefill tokens ahead (its own too), KV blocks. */
  routedWith?: { prefillTokens: number; activeBlocks: number };
}

/** Options of {@linkcode ActiveSequences}. */
export interface ActiveSequencesOptions {
  /**
   * Called at each request's first output with the load it was routed with and its time to
   * first token (what a TTFT model learns from).
   */
  onFirstOutput?: (
    routedWith: { prefillTokens: number; activeBlocks: number },
    ttftMs: number,
  ) => void;
  /** The clock, ms (default performance.now). */
  now?: () => number;
  /**
   * Told of every booking made here (not of those whose id starts with `remote:`, which other
   * routers made): what a replica shares with the others.
   */
  onBooking?: (event: BookingEvent) => void;
}

/** A change in a router's book, as replicas share it. */
export type BookingEvent =
  | {
    kind: "add";
    request_id: string;
    worker_id: string;
    prompt_tokens: number;
    overlap_blocks: number;
  }
  | { kind: "prefill_done"; request_id: string }
  | { kind: "free"; request_id: string };

/** Book ids of requests other routers booked (their changes are not shared again). */
export const REMOTE_BOOKING_PREFIX = "remote:";

/** A worker's predicted load in the router's book. */
export interface WorkerBook {
  /** KV blocks its active requests hold. */
  activeBlocks: number;
  /** Blocks still to prefill (requests with no first token yet). */
  prefillBlocks: number;
  /** Requests in flight on it. */
  requests: number;
  /** Requests on it with no first output yet (their prefill is queued or running). */
  waiting: number;
}

/**
 * The router's own book of requests in flight per worker: what it sent where, which still
 * prefill, and how many blocks they hold as they generate.
 */
export class ActiveSequences {
  readonly #blockSize: number;
  readonly #requests = new Map<string, ActiveRequest>();
  readonly #workers = new Map<string, WorkerBook>();
  readonly #onFirstOutput: ActiveSequencesOptions["onFirstOutput"];
  readonly #now: () => number;
  readonly #onBooking: ActiveSequencesOptions["onBooking"];
  #total = 0;

  /** Creates an empty book for workers with blocks of `blockSize` tokens. */
  constructor(blockSize: number, options: ActiveSequencesOptions = {}) {
    if (!Number.isInteger(blockSize) || blockSize <= 0) {
      throw new InvalidArgumentError(`blockSize must be a positive integer, got ${blockSize}`);
    }
    this.#blockSize = blockSize;
    this.#onFirstOutput = options.onFirstOutput;
    this.#now = options.now ?? (() => performance.now());
    this.#onBooking = options.onBooking;
  }

  #share(requestId: string, event: () => BookingEvent): void {
    if (this.#onBooking && !requestId.startsWith(REMOTE_BOOKING_PREFIX)) this.#onBooking(event());
  }

  /** Requests in flight on every worker together. */
  get totalRequests(): number {
    return this.#total;
  }

  #book(workerId: string): WorkerBook {
    let book = this.#workers.get(workerId);
    if (!book) {
      book = { activeBlocks: 0, prefillBlocks: 0, requests: 0, waiting: 0 };
      this.#workers.set(workerId, book);
    }
    return book;
  }

  /** The predicted load of a worker. */
  load(workerId: string): Readonly<WorkerBook> {
    return this.#workers.get(workerId) ??
      { activeBlocks: 0, prefillBlocks: 0, requests: 0, waiting: 0 };
  }

  /** True when the request is in the book. */
  has(requestId: string): boolean {
    return this.#requests.has(requestId);
  }

  /** Number of requests in the book. */
  get size(): number {
    return this.#requests.size;
  }

  /**
   * Records a request sent to a worker.
   * @throws {InvalidArgumentError} the request id is already in the book
   */
  add(requestId: string, workerId: string, promptTokens: number, overlapBlocks: number): void {
    if (this.#requests.has(requestId)) {
      throw new InvalidArgumentError(`request ${requestId} is already being tracked`);
    }
    const blocks = Math.ceil(promptTokens / this.#blockSize);
    const prefillBlocks = Math.max(0, blocks - overlapBlocks);
    const book = this.#book(workerId);
    const req: ActiveRequest = { workerId, blocks, prefillBlocks, tokens: promptTokens };
    if (this.#onFirstOutput) {
      req.bookedAt = this.#now();
      req.routedWith = {
        prefillTokens: (book.prefillBlocks + prefillBlocks) * this.#blockSize,
        activeBlocks: book.activeBlocks + blocks,
      };
    }
    this.#requests.set(requestId, req);
    book.activeBlocks += blocks;
    book.prefillBlocks += prefillBlocks;
    book.requests++;
    book.waiting++;
    this.#total++;
    this.#share(requestId, () => ({
      kind: "add",
      request_id: requestId,
      worker_id: workerId,
      prompt_tokens: promptTokens,
      overlap_blocks: overlapBlocks,
    }));
  }

  /** The request produced output: its prefill is done; `newTokens` grow its blocks. */
  progress(requestId: string, newTokens: number): void {
    const req = this.#requests.get(requestId);
    if (!req) return;
    const book = this.#book(req.workerId);
    if (req.prefillBlocks > 0) {
      book.prefillBlocks -= req.prefillBlocks;
      req.prefillBlocks = 0;
    }
    if (req.bookedAt !== undefined) {
      const ttft = this.#now() - req.bookedAt;
      req.bookedAt = undefined;
      this.#onFirstOutput?.(req.routedWith!, ttft);
    }
    if (!req.started) {
      req.started = true;
      book.waiting--;
      this.#share(requestId, () => ({ kind: "prefill_done", request_id: requestId }));
    }
    if (newTokens > 0) {
      req.tokens += newTokens;
      const blocks = Math.ceil(req.tokens / this.#blockSize);
      book.activeBlocks += blocks - req.blocks;
      req.blocks = blocks;
    }
  }

  /** The request ended (finished, failed or cancelled). */
  free(requestId: string): void {
    const req = this.#requests.get(requestId);
    if (!req) return;
    this.#requests.delete(requestId);
    const book = this.#book(req.workerId);
    book.activeBlocks -= req.blocks;
    book.prefillBlocks -= req.prefillBlocks;
    book.requests--;
    if (!req.started) book.waiting--;
    this.#total--;
    if (book.requests === 0) this.#workers.delete(req.workerId);
    this.#share(requestId, () => ({ kind: "free", request_id: requestId }));
  }

  /** Forgets a worker that left, and its requests. */
  removeWorker(workerId: string): void {
    for (const [id, req] of this.#requests) {
      if (req.workerId === workerId) {
        this.#requests.delete(id);
        this.#total--;
      }
    }
    this.#workers.delete(workerId);
  }
}
