// The KvIndexer's event intake: applies each worker's KV events in event-id order and,
// on a gap, asks the worker for its state and applies the dump it sends back.

import type { Logger } from "../../runtime/logger.ts";
import type { BlockHash } from "./hashing.ts";
import type { KvStateChunk, KvStateEntry, RouterEvent, StorageTier } from "./protocols.ts";

/** What the intake applies events and dumps to: a `RadixTree`, or a `TieredIndex` of tiers. */
export interface BlockIndex {
  /** Applies an event; false when a `stored` event names a parent the worker does not hold. */
  applyEvent(event: RouterEvent): boolean;
  /** Stores one block (of a state dump) under its parent, in its tier. */
  storeBlock(
    workerId: string,
    parentHash: BlockHash | null,
    blockHash: BlockHash,
    tokensHash: BlockHash,
    tier?: StorageTier,
  ): boolean;
  /** Removes every block of a worker but keeps it known. */
  clearWorker(workerId: string): void;
  /** Removes every block of a worker and forgets it. */
  removeWorker(workerId: string): void;
}

/** Options of {@linkcode KvEventIntake}. */
export interface KvEventIntakeOptions {
  /** How long to wait for a worker's state dump before asking again, in ms (default 2000). */
  resyncTimeoutMs?: number;
  /** Requests per resync before the worker's state is dropped (default 3). */
  resyncAttempts?: number;
  /** Events buffered per worker while its dump is awaited (default 100000). */
  maxBufferedEvents?: number;
  logger: Logger;
  /** Once aborted, no more resync requests are sent. */
  signal: AbortSignal;
  /** Sends a resync request naming the worker and the nonce its dump must carry. */
  requestResync: (worker: string, nonce: string) => Promise<void>;
}

interface Resync {
  nonce: string;
  buffer: RouterEvent[];
  attempts: number;
  timer: ReturnType<typeof setTimeout> | undefined;
}

interface WorkerSync {
  /** Id of the last event applied (0: none yet, state known empty). */
  last: number;
  resync: Resync | undefined;
}

/** Workers remembered as gone (their stray events ignored), at most. */
const MAX_GONE = 10_000;
/** Workers tracked at once, at most (events naming one more are dropped until one leaves). */
export const MAX_WORKERS = 10_000;
/** State dumps being received at once, at most (a chunk starting one more is dropped). */
export const MAX_OPEN_DUMPS = 1024;
/** Blocks all open state dumps together may hold, at most (the dump going over is dropped). */
export const MAX_DUMP_ENTRIES = 1 << 22;

/**
 * Per-worker event-id bookkeeping in front of a {@linkcode BlockIndex}: events in order,
 * duplicates dropped, a gap buffers the worker's events until its state dump is in.
 */
export class KvEventIntake {
  readonly #tree: BlockIndex;
  readonly #log: Logger;
  readonly #signal: AbortSignal;
  readonly #requestResync: (worker: string, nonce: string) => Promise<void>;
  readonly #timeoutMs: number;
  readonly #attempts: number;
  readonly #maxBuffered: number;
  readonly #sync = new Map<string, WorkerSync>();
  /** Dumps being received: `${worker}\0${nonce}` -> entries so far. */
  readonly #dumps = new Map<string, { next: number; entries: KvStateEntry[] }>();
  /** Workers that left discovery; their stray events and dumps are ignored. */
  readonly #gone = new Set<string>();
  /** Entries held by all open dumps together. */
  #dumpEntries = 0;
  #nonce = 0;

  constructor(tree: BlockIndex, options: KvEventIntakeOptions) {
    this.#tree = tree;
    this.#log = options.logger;
    this.#signal = options.signal;
    this.#requestResync = options.requestResync;
    this.#timeoutMs = options.resyncTimeoutMs ?? 2000;
    this.#attempts = options.resyncAttempts ?? 3;
    this.#maxBuffered = options.maxBufferedEvents ?? 100_000;
  }

  /** Workers whose state dump is awaited (their events are buffered meanwhile). */
  get pendingResyncs(): string[] {
    return [...this.#sync].filter(([, st]) => st.resync).map(([w]) => w);
  }

  /**
   * Applies one event through the per-worker event-id bookkeeping: in order, duplicates
   * dropped, a gap starts a resync of the worker, and so does event 1 coming again (the
   * worker restarted, or a duplicate: its state dump settles which).
   */
  applyEvent(ev: RouterEvent): void {
    const w = ev.worker_id;
    if (this.#gone.has(w)) return;
    const id = ev.event.event_id;
    const st = this.#sync.get(w);
    if (!st) {
      if (this.#sync.size >= MAX_WORKERS) {
        this.#log.debug("too many workers tracked; dropping an event of a new one", { worker: w });
        return;
      }
      if (id === 1) {
        this.#sync.set(w, { last: 1, resync: undefined });
        this.#apply(ev);
      } else this.#startResync(w, ev);
      return;
    }
    if (st.resync) {
      if (st.resync.buffer.length < this.#maxBuffered) st.resync.buffer.push(ev);
      return;
    }
    if (id === st.last + 1) {
      st.last = id;
      this.#apply(ev);
    } else if (id === 1) {
      // Id 1 again: either the worker's publisher started over (and so did its cache), or
      // event 1 came twice (a redelivery, an overlap of subscriptions). The wire carries
      // nothing that tells them apart (no publisher epoch), and guessing wrong costs either
      // the worker's whole state (clearing on a duplicate) or a stale one (ignoring a
      // restart). So ask the worker: its dump is its state now, whichever it was, and the
      // tree keeps the old state until the dump replaces it.
      this.#log.debug("event 1 again (restart or duplicate); resynchronising", {
        worker: w,
        last: st.last,
      });
      this.#startResync(w, ev);
    } else if (id > st.last) {
      this.#log.debug("event gap; resynchronising", { worker: w, last: st.last, got: id });
      this.#startResync(w, ev);
    }
  }

  /** Takes one chunk of a worker's state dump; the last one applies the whole dump. */
  applyChunk(c: KvStateChunk): void {
    if (this.#gone.has(c.worker_id)) return;
    const key = `${c.worker_id}\0${c.nonce}`;
    let d = this.#dumps.get(key);
    if (c.index === 0) {
      if (d) this.#dropDump(key);
      else if (this.#dumps.size >= MAX_OPEN_DUMPS) {
        // Too many dumps open at once (nonces are the sender's to choose): the oldest goes.
        const oldest = this.#dumps.keys().next().value!;
        this.#log.warn("too many state dumps open at once; dropping the oldest", {
          open: this.#dumps.size,
        });
        this.#dropDump(oldest);
      }
      this.#dumps.set(key, d = { next: 0, entries: [] });
    }
    if (!d || d.next !== c.index) {
      this.#dropDump(key); // a chunk went missing: wait for another dump
      return;
    }
    if (this.#dumpEntries + c.entries.length > MAX_DUMP_ENTRIES) {
      this.#dropDump(key);
      this.#log.warn("state dumps over the block limit; dropped one", {
        worker: c.worker_id,
        limit: MAX_DUMP_ENTRIES,
      });
      return;
    }
    this.#dumpEntries += c.entries.length;
    for (const e of c.entries) d.entries.push(e);
    d.next++;
    if (!c.last) return;
    this.#dropDump(key);
    this.#applyDump(c.worker_id, c.last_event_id, d.entries);
  }

  /** Forgets a worker and its blocks. */
  removeWorker(workerId: string): void {
    this.#tree.removeWorker(workerId);
    const st = this.#sync.get(workerId);
    if (st?.resync?.timer !== undefined) clearTimeout(st.resync.timer);
    this.#sync.delete(workerId);
    for (const key of this.#dumps.keys()) {
      if (key.startsWith(`${workerId}\0`)) this.#dropDump(key);
    }
  }

  /** The worker's last instance left discovery: forget it, and ignore its stray events. */
  workerLeft(workerId: string): void {
    this.#log.debug("worker left discovery", { worker: workerId });
    this.removeWorker(workerId);
    this.#gone.add(workerId);
    if (this.#gone.size > MAX_GONE) this.#gone.delete(this.#gone.values().next().value!);
  }

  /** The worker is (back) in discovery: take its events again. */
  workerJoined(workerId: string): void {
    this.#gone.delete(workerId);
  }

  /** Stops the resync timers. */
  close(): void {
    for (const st of this.#sync.values()) {
      if (st.resync?.timer !== undefined) clearTimeout(st.resync.timer);
    }
  }

  #dropDump(key: string): void {
    const d = this.#dumps.get(key);
    if (!d) return;
    this.#dumpEntries -= d.entries.length;
    this.#dumps.delete(key);
  }

  #apply(ev: RouterEvent): void {
    if (!this.#tree.applyEvent(ev)) {
      this.#log.debug("stored event under a parent the worker does not hold; dropped", {
        worker: ev.worker_id,
        event: ev.event.event_id,
      });
    }
  }

  #startResync(w: string, first: RouterEvent | undefined): void {
    let st = this.#sync.get(w);
    if (!st) this.#sync.set(w, st = { last: 0, resync: undefined });
    if (st.resync?.timer !== undefined) clearTimeout(st.resync.timer);
    st.resync = {
      nonce: `r${++this.#nonce}`,
      buffer: first ? [first] : [],
      attempts: 0,
      timer: undefined,
    };
    this.#sendResync(w, st.resync);
  }

  #sendResync(w: string, r: Resync): void {
    if (this.#signal.aborted) return;
    r.attempts++;
    this.#requestResync(w, r.nonce).catch((err) =>
      this.#log.warn("cannot send resync request", { worker: w, error: String(err) })
    );
    r.timer = setTimeout(() => {
      r.timer = undefined;
      if (this.#sync.get(w)?.resync !== r) return;
      if (r.attempts < this.#attempts) {
        this.#sendResync(w, r);
        return;
      }
      this.#log.warn("worker did not answer resync requests; dropping its state", {
        worker: w,
        attempts: r.attempts,
      });
      this.removeWorker(w);
    }, this.#timeoutMs);
  }

  #applyDump(w: string, lastEventId: number, entries: KvStateEntry[]): void {
    let st = this.#sync.get(w);
    if (st && !st.resync && st.last >= lastEventId) return; // nothing newer in it
    if (!st && this.#sync.size >= MAX_WORKERS) return;
    if (!st) this.#sync.set(w, st = { last: 0, resync: undefined });
    const buffered = st.resync?.buffer ?? [];
    if (st.resync?.timer !== undefined) clearTimeout(st.resync.timer);
    st.resync = undefined;
    this.#tree.clearWorker(w);
    for (const e of entries) {
      this.#tree.storeBlock(w, e.parent_hash, e.block_hash, e.tokens_hash, e.storage_tier);
    }
    st.last = lastEventId;
    this.#log.debug("worker state loaded", {
      worker: w,
      blocks: entries.length,
      last: lastEventId,
      buffered: buffered.length,
    });
    buffered.sort((a, b) => a.event.event_id - b.event.event_id);
    // Events the dump already reflects are dropped here: applyEvent would take a stale
    // id 1 for a restart and ask for the state again.
    for (const ev of buffered) if (ev.event.event_id > lastEventId) this.applyEvent(ev);
  }
}
