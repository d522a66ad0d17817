/**
 * The networked KV indexer over the {@linkcode RadixTree}: {@linkcode KvIndexer} follows
 * the workers' KV events (component subject `kv_events`). Each worker numbers its events 1,
 * 2, 3, ...; the indexer applies them in order and, when it sees a gap (a lost event, or a
 * worker it met mid-stream), resynchronises that worker: it publishes a request on
 * `kv_resync` naming the worker and a reply subject (`kv_state.{indexer}`); the worker's
 * {@linkcode KvEventPublisher} answers with a dump of the blocks it holds and the last
 * event id the dump reflects, in chunks. Meanwhile the worker's events are buffered; once
 * the dump is in, the indexer replaces the worker's blocks with it and applies the buffered
 * events that come after it. At start the indexer asks every worker (`"*"`) for its state,
 * so it can start after them. Workers are removed when their last instance under the
 * component leaves discovery. (That bookkeeping lives in event_intake.ts; the discovery
 * side in instance_watch.ts.)
 *
 * Lookups wait for that start (subscriptions ready, discovery synced, the `"*"` request
 * sent) for at most `readyTimeoutMs`; a start that failed is tried again by the next
 * lookup.
 *
 * @module
 */

import type { Component } from "../../runtime/component.ts";
import { withDeadline } from "../../runtime/_deadline.ts";
import { DynamoError, InvalidArgumentError, TimeoutError } from "../../runtime/errors.ts";
import type { EventSubscription } from "../../runtime/events/mod.ts";
import type { Logger } from "../../runtime/logger.ts";
import type { RuntimeInternals } from "../../runtime/component.ts";
import { checkBlockSize } from "./_block_size.ts";
import { type BlockHash, computeLocalHashes } from "./hashing.ts";
import { KvEventIntake } from "./event_intake.ts";
import { InstanceWatch } from "./instance_watch.ts";
import {
  decodeKvStateChunk,
  decodeRouterEvent,
  KV_EVENTS,
  KV_RESYNC,
  KV_STATE,
  KvMessageError,
  type KvResyncRequest,
  type KvStateChunk,
  type OverlapScores,
  type RouterEvent,
} from "./protocols.ts";
import type { RadixTree } from "./radix_tree.ts";
import { TieredIndex } from "./tiered_index.ts";

/** Options of {@linkcode KvIndexer}. */
export interface KvIndexerOptions {
  /** How long to wait for a worker's state dump before asking again, in ms (default 2000). */
  resyncTimeoutMs?: number;
  /** Requests per resync before the worker's state is dropped (default 3). */
  resyncAttempts?: number;
  /** Events buffered per worker while its dump is awaited (default 100000). */
  maxBufferedEvents?: number;
  /** Report per-block lookup frequencies within this window, in ms (default: off). */
  frequencyWindowMs?: number;
  /**
   * How long a lookup waits for the indexer to start (event subscriptions ready,
   * discovery synced, workers asked for their state), in ms (default 5000).
   */
  readyTimeoutMs?: number;
  /** Told of each KV event or state chunk refused at the door (a metrics hook). */
  onInvalidMessage?: (err: KvMessageError) => void;
}

/** Workers whose first invalid message was logged, remembered at most (then forgotten). */
const MAX_WARNED = 10_000;

/** One event-plane subscription of the indexer, and how its start went. */
interface Feed {
  /** What it is, for errors: "the kv_events subscription of ns/backend". */
  what: string;
  name: string;
  handle: (payload: Uint8Array) => void;
  sub: EventSubscription;
  /** Its `ready` settled: "ok", or "failed" (subscribe again on the next start). */
  state: "waiting" | "ok" | "failed";
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

let indexerSeq = 0;

/**
 * Follows a component's KV events and scores workers by cached prefix.
 *
 * @example
 * ```ts
 * import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
 *
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const indexer = new KvIndexer(runtime.namespace("ns").component("backend"), 16);
 * const tokenIds = Array.from({ length: 64 }, (_, i) => i);
 * const { scores } = await indexer.findMatchesForRequest(tokenIds, 0);
 * // worker id -> blocks of tokenIds it holds, from its KV events (KvEventPublisher)
 * console.log(scores.size); // 0: no worker published any yet
 * await indexer.close();
 * await runtime.shutdown();
 * ```
 */
export class KvIndexer {
  /** The workers' blocks per storage tier (synchronous; for routers and tests). */
  readonly index: TieredIndex;
  readonly #blockSize: number;
  readonly #rt: RuntimeInternals;
  readonly #component: Component;
  readonly #log: Logger;
  readonly #stop = new AbortController();
  readonly #signal: AbortSignal;
  readonly #feeds: Feed[];
  readonly #replyName: string;
  readonly #intake: KvEventIntake;
  readonly #watch: InstanceWatch;
  #watchSynced = false;
  /** The start under way (undefined: none, or the last one failed). */
  #starting: Promise<void> | undefined;
  #started = false;
  #resyncSent = false;
  readonly #readyTimeoutMs: number;
  readonly #tasks: Promise<void>[] = [];
  #nonce = 0;
  readonly #onInvalid: ((err: KvMessageError) => void) | undefined;
  /** Workers whose invalid messages were already logged at warn level. */
  readonly #warned = new Set<string>();
  #invalid = 0;

  /**
   * Creates an indexer that follows the KV events of `component`'s workers.
   * @param component the workers' component
   * @param blockSize tokens per KV block (the workers' `kv_cache_block_size`)
   * @param options resync and start-up tuning
   * @throws {InvalidArgumentError} a bad block size or timeout
   */
  constructor(component: Component, blockSize: number, options: KvIndexerOptions = {}) {
    checkBlockSize(blockSize);
    this.#blockSize = blockSize;
    this.#component = component;
    this.#rt = component.runtimeInternals;
    this.index = new TieredIndex({ frequencyWindowMs: options.frequencyWindowMs });
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 5000;
    this.#onInvalid = options.onInvalidMessage;
    if (!(this.#readyTimeoutMs > 0)) {
      throw new InvalidArgumentError(`readyTimeoutMs must be > 0, got ${this.#readyTimeoutMs}`);
    }
    const id = `${this.#rt.instanceId}-${++indexerSeq}`;
    this.#log = this.#rt.logger.child({ component: component.path, kv_indexer: id });
    this.#signal = AbortSignal.any([this.#stop.signal, this.#rt.shutdownSignal]);
    this.#replyName = `${KV_STATE}.${id}`;
    this.#intake = new KvEventIntake(this.index, {
      resyncTimeoutMs: options.resyncTimeoutMs,
      resyncAttempts: options.resyncAttempts,
      maxBufferedEvents: options.maxBufferedEvents,
      logger: this.#log,
      signal: this.#signal,
      requestResync: (worker, nonce) => this.requestResync(worker, nonce),
    });
    this.#feeds = [
      this.#feed(KV_EVENTS, (bytes) => this.#onEvent(bytes)),
      this.#feed(this.#replyName, (bytes) => this.#onChunk(bytes)),
    ];
    this.#watch = new InstanceWatch(this.#rt, component, this.#signal, {
      left: (w) => this.#intake.workerLeft(w),
      joined: (w) => this.#intake.workerJoined(w),
    });
    void this.#watch.synced.then(() => (this.#watchSynced = true));
    this.#track(this.#watch.done);
    for (const f of this.#feeds) this.#track(this.#consume(f));
    this.#begin().catch(() => {}); // logged in #begin; lookups see the error
  }

  /** The blocks on the workers' devices (`index` has every tier). */
  get tree(): RadixTree {
    return this.index.device;
  }

  /** Tokens per KV block. */
  blockSize(): number {
    return this.#blockSize;
  }

  /**
   * Resolves once the indexer follows events and discovery and has asked the workers for
   * their state (their dumps arrive after). Each read waits at most `readyTimeoutMs`, and
   * starts the indexer again if its last start failed.
   *
   * @throws {TimeoutError} not started in time (the message names what it waits for)
   * @throws {DynamoError} the start failed (the message says how), or the indexer is closed
   */
  get ready(): Promise<void> {
    return this.#whenReady();
  }

  /** Workers whose state dump is awaited (their events are buffered meanwhile). */
  get pendingResyncs(): string[] {
    return this.#intake.pendingResyncs;
  }

  /** KV events and state chunks refused at the door so far. */
  get invalidMessages(): number {
    return this.#invalid;
  }

  /**
   * Scores workers by how much of the request's prefix they cache.
   *
   * @param tokenIds the request's token ids
   * @param loraId LoRA adapter id (0 or absent: the base model)
   * @returns matched blocks per worker
   * @throws {InvalidArgumentError} a bad LoRA id
   * @throws {TimeoutError} the indexer did not start in time (see {@linkcode ready})
   * @throws {DynamoError} its start failed; the next lookup tries again
   */
  async findMatchesForRequest(tokenIds: ArrayLike<number>, loraId = 0): Promise<OverlapScores> {
    if (!this.#started) await this.#whenReady();
    return this.index.findOverlap(computeLocalHashes(tokenIds, this.#blockSize, loraId));
  }

  /**
   * Scores workers by how much of a prefix, given as local block hashes, they cache.
   * @throws {TimeoutError} the indexer did not start in time (see {@linkcode ready})
   * @throws {DynamoError} its start failed; the next lookup tries again
   */
  async findMatches(localHashes: ArrayLike<BlockHash>): Promise<OverlapScores> {
    if (!this.#started) await this.#whenReady();
    return this.index.findOverlap(localHashes);
  }

  /**
   * Applies one event through the per-worker event-id bookkeeping: in order, duplicates
   * dropped, a gap starts a resync of the worker, and so does event 1 coming again (the
   * worker restarted, or a duplicate: its state dump settles which).
   */
  applyEvent(ev: RouterEvent): void {
    this.#intake.applyEvent(ev);
  }

  /** Forgets a worker and its blocks. */
  removeWorker(workerId: string): void {
    this.#intake.removeWorker(workerId);
  }

  /** Asks a worker (or every worker, with "*") for its state. */
  async requestResync(workerId: string, nonce = `n${++this.#nonce}`): Promise<void> {
    const req: KvResyncRequest = { worker_id: workerId, reply: this.#replyName, nonce };
    await this.#component.publishEvent(KV_RESYNC, new TextEncoder().encode(JSON.stringify(req)));
  }

  /** Stops following events and discovery. */
  async close(): Promise<void> {
    this.#stop.abort();
    this.#intake.close();
    await Promise.allSettled(this.#feeds.map((f) => f.sub.unsubscribe()));
    await Promise.allSettled(this.#tasks);
  }

  #track(task: Promise<void>): void {
    this.#tasks.push(task);
    this.#rt.track(task);
    task.catch((err) => this.#log.warn("indexer task failed", { error: String(err) }));
  }

  #feed(name: string, handle: (payload: Uint8Array) => void): Feed {
    const f: Feed = {
      what: `the ${name} subscription of ${this.#component.path}`,
      name,
      handle,
      sub: undefined!,
      state: "waiting",
    };
    this.#subscribe(f);
    return f;
  }

  #subscribe(f: Feed): void {
    const sub = this.#component.subscribeEvents(f.name, { signal: this.#signal });
    f.sub = sub;
    f.state = "waiting";
    (sub.ready ?? Promise.resolve()).then(
      () => void (f.sub === sub && (f.state = "ok")),
      () => void (f.sub === sub && (f.state = "failed")),
    );
  }

  /**
   * Waits (at most `readyTimeoutMs`) for the start under way, or begins one when there is
   * none (the last one failed).
   */
  #whenReady(): Promise<void> {
    if (this.#started) return Promise.resolve();
    if (this.#signal.aborted) {
      return Promise.reject(
        new DynamoError(`the KvIndexer of ${this.#component.path} is closed; it never started`),
      );
    }
    const ms = this.#readyTimeoutMs;
    return withDeadline(
      this.#begin(),
      ms,
      () =>
        new TimeoutError(
          `the KvIndexer of ${this.#component.path} was not ready after ${ms} ms: ` +
            `still waiting for ${this.#pendingStart()}`,
        ),
    );
  }

  /** The start under way, or a new one. */
  #begin(): Promise<void> {
    if (this.#starting) return this.#starting;
    const starting: Promise<void> = this.#start().then(
      () => {
        this.#started = true;
      },
      (err) => {
        if (this.#starting === starting) this.#starting = undefined;
        this.#log.warn("indexer start failed; the next lookup tries again", {
          error: errorText(err),
        });
        throw err;
      },
    );
    this.#starting = starting;
    return starting;
  }

  async #start(): Promise<void> {
    this.#resyncSent = false;
    // A subscription whose `ready` failed may never have reached the server: renew it.
    for (const f of this.#feeds) {
      if (f.state !== "failed") continue;
      await f.sub.unsubscribe();
      this.#subscribe(f);
      this.#track(this.#consume(f));
    }
    await Promise.all([
      ...this.#feeds.map(async (f) => {
        try {
          await f.sub.ready;
        } catch (err) {
          throw new DynamoError(
            `the KvIndexer of ${this.#component.path} cannot start: ${f.what} failed: ` +
              errorText(err),
            { cause: err },
          );
        }
      }),
      this.#watch.synced,
    ]);
    if (this.#signal.aborted) {
      throw new DynamoError(`the KvIndexer of ${this.#component.path} was closed while starting`);
    }
    try {
      await this.requestResync("*");
    } catch (err) {
      throw new DynamoError(
        `the KvIndexer of ${this.#component.path} cannot ask the workers for their state ` +
          `(${KV_RESYNC}): ${errorText(err)}`,
        { cause: err },
      );
    }
    this.#resyncSent = true;
  }

  /** What the start under way still waits for. */
  #pendingStart(): string {
    const parts = this.#feeds.filter((f) => f.state === "waiting").map((f) => f.what);
    if (!this.#watchSynced) {
      parts.push(`the discovery watch of ${this.#component.path}'s instances to sync`);
    }
    if (parts.length === 0 && !this.#resyncSent) {
      parts.push(`the ${KV_RESYNC} request to the workers to be sent`);
    }
    return parts.join(", ") || "nothing (it has just started)";
  }

  // The door: every event and chunk is decoded and checked (bounds, ids, counts) before the
  // intake sees it. A bad one is dropped, counted, and logged once per worker at warn level.
  #onEvent(bytes: Uint8Array): void {
    let ev: RouterEvent;
    try {
      ev = decodeRouterEvent(bytes);
    } catch (err) {
      this.#refuse(err);
      return;
    }
    this.applyEvent(ev);
  }

  #onChunk(bytes: Uint8Array): void {
    let chunk: KvStateChunk;
    try {
      chunk = decodeKvStateChunk(bytes);
    } catch (err) {
      this.#refuse(err);
      return;
    }
    this.#intake.applyChunk(chunk);
  }

  #refuse(err: unknown): void {
    const e = err instanceof KvMessageError ? err : new KvMessageError(errorText(err));
    this.#invalid++;
    this.#onInvalid?.(e);
    const who = e.workerId ?? "";
    if (this.#warned.has(who)) {
      this.#log.debug("ignoring an invalid KV message", { error: e.message });
      return;
    }
    if (this.#warned.size >= MAX_WARNED) this.#warned.clear();
    this.#warned.add(who);
    this.#log.warn("ignoring an invalid KV message (further ones from this worker at debug)", {
      worker: e.workerId,
      reason: e.reason,
    });
  }

  async #consume(f: Feed): Promise<void> {
    for await (const msg of f.sub) {
      try {
        f.handle(msg.payload);
      } catch (err) {
        this.#log.warn(`ignoring a message on ${f.name} that could not be handled`, {
          error: String(err),
        });
      }
    }
  }
}
