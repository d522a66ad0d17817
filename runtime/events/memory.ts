// The in-process event plane: a bus shared by the runtimes of one embedded cluster, and
// one plane per runtime over it (closing a runtime ends only its own subscriptions).

import { DynamoError } from "../errors.ts";
import type { EventPlane, EventSubscribeOptions, EventSubscription } from "./types.ts";
import { subjectMatches, validateSubject } from "./subject.ts";
import { QueueSubscription } from "./_subscription.ts";

const WILDCARD = /(^|\.)(\*|>)(\.|$)/;

/**
 * In-process subject routing: exact subjects through a map, wildcard patterns by
 * matching. Delivery is synchronous into each subscription's queue.
 */
export class LocalEventBus {
  readonly #exact = new Map<string, Set<QueueSubscription>>();
  readonly #patterns = new Map<QueueSubscription, string>();

  /** Delivers `payload` to every subscription matching `subject`. */
  publish(subject: string, payload: Uint8Array): void {
    const exact = this.#exact.get(subject);
    if (exact) { for (const sub of exact) sub.deliver({ subject, payload }); }
    for (const [sub, pattern] of this.#patterns) {
      if (subjectMatches(pattern, subject)) sub.deliver({ subject, payload });
    }
  }

  /** Routes events matching `pattern` to `sub` until the returned function is called. */
  attach(pattern: string, sub: QueueSubscription): () => void {
    if (WILDCARD.test(pattern)) {
      this.#patterns.set(sub, pattern);
      return () => void this.#patterns.delete(sub);
    }
    let set = this.#exact.get(pattern);
    if (!set) this.#exact.set(pattern, set = new Set());
    set.add(sub);
    return () => {
      set.delete(sub);
      if (set.size === 0 && this.#exact.get(pattern) === set) this.#exact.delete(pattern);
    };
  }
}

/**
 * One runtime's view of a {@linkcode LocalEventBus}.
 *
 * @example
 * ```ts
 * const bus = new LocalEventBus();
 * const a = new LocalEventPlane(bus), b = new LocalEventPlane(bus);
 * const sub = b.subscribe("ns.events.>");
 * await a.publish("ns.events.kv", new Uint8Array([1]));
 * for await (const { subject } of sub) { console.log(subject); break; }
 * ```
 */
export class LocalEventPlane implements EventPlane {
  readonly kind = "local";
  readonly #bus: LocalEventBus;
  readonly #subs = new Set<QueueSubscription>();
  #closed = false;

  /**
   * Creates a runtime's event plane on the cluster's shared bus.
   * @param bus the bus shared with the other runtimes of the cluster
   */
  constructor(bus: LocalEventBus) {
    this.#bus = bus;
  }

  publish(subject: string, payload: Uint8Array): Promise<void> {
    try {
      if (this.#closed) throw new DynamoError("the event plane is closed");
      validateSubject(subject, false);
      // One copy, so the publisher may reuse its buffer.
      this.#bus.publish(subject, payload.slice());
      return Promise.resolve();
    } catch (err) {
      return Promise.reject(err);
    }
  }

  subscribe(subject: string, options: EventSubscribeOptions = {}): EventSubscription {
    if (this.#closed) throw new DynamoError("the event plane is closed");
    validateSubject(subject, true);
    // An aborted signal gives a subscription that has already ended.
    if (options.signal?.aborted) {
      return new QueueSubscription(() => {}, Promise.resolve(), options.signal);
    }
    let detach = () => {};
    const sub: QueueSubscription = new QueueSubscription(
      () => {
        detach();
        this.#subs.delete(sub);
      },
      Promise.resolve(),
      options.signal,
    );
    detach = this.#bus.attach(subject, sub);
    this.#subs.add(sub);
    return sub;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#subs].map((s) => s.unsubscribe()));
  }
}
