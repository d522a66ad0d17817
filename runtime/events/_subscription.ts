// A subscription fed by a backend callback: a queue the consumer iterates, ended by
// unsubscribe(), the consumer breaking out, an abort signal, or the plane closing.

import { AsyncQueue } from "../_queue.ts";
import type { EventMessage, EventSubscription } from "./types.ts";

/** Backend half of a subscription. */
export class QueueSubscription implements EventSubscription {
  readonly ready: Promise<void>;
  readonly #queue = new AsyncQueue<EventMessage>();
  readonly #detach: () => Promise<void> | void;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => void this.unsubscribe();
  #done: Promise<void> | undefined;
  #iterated = false;

  /**
   * Creates a subscription a backend feeds through {@linkcode QueueSubscription.deliver}.
   * @param detach stops the backend's delivery (called once)
   * @param ready resolves once the backend routes events here
   * @param signal ends the subscription when aborted
   */
  constructor(
    detach: () => Promise<void> | void,
    ready: Promise<void>,
    signal: AbortSignal | undefined,
  ) {
    this.#detach = detach;
    this.#signal = signal;
    this.ready = ready;
    ready.catch(() => {});
    if (signal?.aborted) void this.unsubscribe();
    else signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** True once the subscription ended. */
  get closed(): boolean {
    return this.#done !== undefined;
  }

  /** Hands an event to the consumer (dropped once ended). */
  deliver(message: EventMessage): void {
    void this.#queue.push(message);
  }

  /** Ends the subscription; the consumer's loop ends. Idempotent. */
  unsubscribe(): Promise<void> {
    this.#done ??= (async () => {
      this.#signal?.removeEventListener("abort", this.#onAbort);
      this.#queue.clear();
      await this.#detach();
    })();
    return this.#done;
  }

  /** The events, in order, for a single consumer; breaking out unsubscribes. */
  async *[Symbol.asyncIterator](): AsyncIterator<EventMessage> {
    if (this.#iterated) {
      if (this.closed) return;
      throw new Error("an event subscription has a single consumer");
    }
    this.#iterated = true;
    try {
      yield* this.#queue;
    } finally {
      await this.unsubscribe();
    }
  }
}
