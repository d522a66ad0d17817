// The event plane on NATS core, sharing the runtime's connection with the request plane.

import type { NatsConnection } from "../nats_connection.ts";
import { DynamoError, InvalidArgumentError } from "../errors.ts";
import type { EventPlane, EventSubscribeOptions, EventSubscription } from "./types.ts";
import { validateSubject } from "./subject.ts";
import { QueueSubscription } from "./_subscription.ts";

/**
 * Events over NATS core subjects. Does not own the connection: `close()` ends this
 * plane's subscriptions and leaves the connection to its owner.
 *
 * @example
 * ```ts
 * const events = new NatsEventPlane(natsRequestPlane.nc);
 * await events.publish("ns_backend.events.kv_events", bytes);
 * ```
 */
export class NatsEventPlane implements EventPlane {
  readonly kind = "nats";
  /** The connection events are published and received on (the runtime owns it). */
  readonly nc: NatsConnection;
  readonly #subs = new Set<QueueSubscription>();
  #closed = false;

  /**
   * Creates an event plane on a NATS connection.
   * @param nc the runtime's NATS connection
   */
  constructor(nc: NatsConnection) {
    this.nc = nc;
  }

  publish(subject: string, payload: Uint8Array): Promise<void> {
    try {
      if (this.#closed || this.nc.isClosed()) throw new DynamoError("the event plane is closed");
      validateSubject(subject, false);
      const max = this.nc.info?.max_payload;
      if (max !== undefined && payload.length > max) {
        throw new InvalidArgumentError(
          `event of ${payload.length} bytes on ${subject} is over the server's limit of ${max}`,
        );
      }
      this.nc.publish(subject, payload);
      return Promise.resolve();
    } catch (err) {
      return Promise.reject(err);
    }
  }

  subscribe(subject: string, options: EventSubscribeOptions = {}): EventSubscription {
    if (this.#closed || this.nc.isClosed()) throw new DynamoError("the event plane is closed");
    validateSubject(subject, true);
    // An aborted signal gives a subscription that has already ended.
    if (options.signal?.aborted) {
      return new QueueSubscription(() => {}, Promise.resolve(), options.signal);
    }
    // Assigned once the NATS subscription it closes over exists.
    // deno-lint-ignore prefer-const
    let sub: QueueSubscription | undefined;
    const nsub = this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) void sub?.unsubscribe();
        else sub?.deliver({ subject: msg.subject, payload: msg.data });
      },
    });
    sub = new QueueSubscription(
      () => {
        this.#subs.delete(sub!);
        if (!nsub.isClosed()) nsub.unsubscribe();
      },
      // A round trip after the SUB: the server has the subscription.
      this.nc.flush(),
      options.signal,
    );
    // The connection closing (runtime shutdown) ends the subscription too.
    nsub.closed.then(() => sub.unsubscribe(), () => sub.unsubscribe());
    this.#subs.add(sub);
    return sub;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#subs].map((s) => s.unsubscribe()));
  }
}
