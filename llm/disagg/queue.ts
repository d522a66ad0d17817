// The prefill queue between decode and prefill workers (seed 000: a JetStream work
// queue). An interface plus the embedded, in-process implementation: at-least-once
// delivery, an item taken but not acked within `ackWaitMs` goes back to the queue's head.

import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";

/** The queue was closed. */
export class PrefillQueueClosedError extends DynamoError {}

/** One delivery of a queued item. */
export interface QueuedItem<T> {
  /** Stable across redeliveries of the same item. */
  readonly id: string;
  /** The queued item. */
  readonly data: T;
  /** 1 on the first delivery, 2 on the first redelivery, ... */
  readonly deliveries: number;
  /**
   * Marks the item done.
   *
   * @returns false when this delivery was already superseded (its deadline passed)
   */
  ack(): Promise<boolean>;
}

/** Options of {@linkcode PrefillQueue.dequeue}. */
export interface DequeueOptions {
  /** Longest wait for an item in ms; default: wait until one comes or `signal` aborts. */
  timeoutMs?: number;
  /** Stops the wait. */
  signal?: AbortSignal;
}

/** A work queue of remote prefill requests (embedded here; JetStream in production). */
export interface PrefillQueue<T> {
  /** Adds an item at the tail. */
  enqueue(data: T): Promise<void>;
  /**
   * Takes the item at the head.
   *
   * @returns the item, or undefined when `timeoutMs` passed first
   */
  dequeue(options?: DequeueOptions): Promise<QueuedItem<T> | undefined>;
  /** Items waiting (not counting those delivered and not yet acked). */
  size(): Promise<number>;
  /** Fails pending and later calls with {@linkcode PrefillQueueClosedError}. */
  close(): Promise<void>;
}

/** Options of {@linkcode EmbeddedPrefillQueue}. */
export interface EmbeddedPrefillQueueOptions {
  /** How long a delivered item may stay un-acked before redelivery; default 30 000 ms. */
  ackWaitMs?: number;
}

interface Entry<T> {
  id: string;
  data: T;
  deliveries: number;
  timer?: ReturnType<typeof setTimeout>;
}

/**
 * The in-process {@linkcode PrefillQueue}: FIFO, each item to one consumer at a time,
 * redelivered at the head when not acked within `ackWaitMs`.
 *
 * @example
 * ```ts
 * const q = new EmbeddedPrefillQueue<{ rid: string }>({ ackWaitMs: 5000 });
 * await q.enqueue({ rid: "a" });
 * const item = await q.dequeue({ timeoutMs: 100 });
 * await item?.ack();
 * ```
 */
export class EmbeddedPrefillQueue<T> implements PrefillQueue<T> {
  readonly #ackWaitMs: number;
  readonly #ready: Entry<T>[] = [];
  readonly #inFlight = new Map<string, Entry<T>>();
  readonly #waiters: ((e: Entry<T> | Error) => void)[] = [];
  #next = 0;
  #closed = false;

  /**
   * Creates an empty in-process queue.
   *
   * @param options the ack deadline
   * @throws {InvalidArgumentError} `ackWaitMs` is not a positive number
   */
  constructor(options: EmbeddedPrefillQueueOptions = {}) {
    const w = options.ackWaitMs ?? 30_000;
    if (typeof w !== "number" || !(w > 0)) {
      throw new InvalidArgumentError(`ackWaitMs must be a number > 0, got ${w}`);
    }
    this.#ackWaitMs = w;
  }

  enqueue(data: T): Promise<void> {
    if (this.#closed) return Promise.reject(new PrefillQueueClosedError("prefill queue closed"));
    this.#offer({ id: String(++this.#next), data, deliveries: 0 }, false);
    return Promise.resolve();
  }

  async dequeue(options: DequeueOptions = {}): Promise<QueuedItem<T> | undefined> {
    const { timeoutMs, signal } = options;
    signal?.throwIfAborted();
    if (this.#closed) throw new PrefillQueueClosedError("prefill queue closed");
    const head = this.#ready.shift();
    if (head) return this.#deliver(head);
    if (timeoutMs !== undefined && timeoutMs <= 0) return undefined;
    let waiter!: (e: Entry<T> | Error) => void;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const got = await new Promise<Entry<T> | Error | undefined>((resolve) => {
        waiter = resolve;
        this.#waiters.push(waiter);
        const leave = (v: Error | undefined) => {
          const i = this.#waiters.indexOf(waiter);
          if (i >= 0) this.#waiters.splice(i, 1);
          resolve(v);
        };
        if (timeoutMs !== undefined) timer = setTimeout(() => leave(undefined), timeoutMs);
        if (signal) {
          onAbort = () =>
            leave(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
          signal.addEventListener("abort", onAbort, { once: true });
        }
      });
      if (got instanceof Error) throw got;
      return got && this.#deliver(got);
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  size(): Promise<number> {
    return Promise.resolve(this.#ready.length);
  }

  close(): Promise<void> {
    this.#closed = true;
    for (const e of this.#inFlight.values()) clearTimeout(e.timer);
    this.#inFlight.clear();
    this.#ready.length = 0;
    for (const w of this.#waiters.splice(0)) w(new PrefillQueueClosedError("prefill queue closed"));
    return Promise.resolve();
  }

  // A waiting consumer gets the entry at once; otherwise it joins the tail (new) or the
  // head (redelivered, so order is kept as far as possible).
  #offer(e: Entry<T>, head: boolean): void {
    const w = this.#waiters.shift();
    if (w) w(e);
    else if (head) this.#ready.unshift(e);
    else this.#ready.push(e);
  }

  #deliver(e: Entry<T>): QueuedItem<T> {
    const delivery = ++e.deliveries;
    this.#inFlight.set(e.id, e);
    e.timer = setTimeout(() => {
      if (this.#inFlight.get(e.id) !== e || e.deliveries !== delivery) return;
      this.#inFlight.delete(e.id);
      this.#offer(e, true);
    }, this.#ackWaitMs);
    return {
      id: e.id,
      data: e.data,
      deliveries: delivery,
      ack: () => {
        if (this.#inFlight.get(e.id) !== e || e.deliveries !== delivery) {
          return Promise.resolve(false);
        }
        clearTimeout(e.timer);
        this.#inFlight.delete(e.id);
        return Promise.resolve(true);
      },
    };
  }
}
