// The event plane through the hub: NATS-core-like publish/subscribe with "*" and ">"
// wildcards; at most once, in order per publisher, nothing kept for late subscribers.

import { DynamoError } from "../errors.ts";
import type { EventPlane, EventSubscribeOptions, EventSubscription } from "../events/types.ts";
import { validateSubject } from "../events/subject.ts";
import { QueueSubscription } from "../events/_subscription.ts";
import { HubConnection, type HubConnectionOptions } from "./connection.ts";

/** Options of {@linkcode HubEventPlane}. */
export interface HubEventPlaneOptions {
  /** Hold a reference to the connection and release it on close (default false: the runtime owns it). */
  owned?: boolean;
}

/**
 * An {@linkcode EventPlane} whose bus is the hub's. Subscriptions are restored when the
 * connection is re-established; events published meanwhile are lost, as on NATS core.
 *
 * @example
 * ```ts
 * const events = await HubEventPlane.connect("127.0.0.1:4300");
 * const sub = events.subscribe("ns.kv_events.>");
 * await sub.ready;
 * await events.publish("ns.kv_events.worker1", new TextEncoder().encode("{}"));
 * for await (const { subject, payload } of sub) break;
 * ```
 */
export class HubEventPlane implements EventPlane {
  readonly kind = "hub";
  readonly hub: HubConnection;
  readonly #owned: boolean;
  readonly #subs = new Map<number, { pattern: string; sub: QueueSubscription }>();
  readonly #offEvent: () => void;
  readonly #offSession: () => void;
  #closed = false;

  /** @param hub the process's hub connection */
  constructor(hub: HubConnection, options: HubEventPlaneOptions = {}) {
    this.hub = hub;
    this.#owned = options.owned ?? false;
    if (this.#owned) hub.acquire();
    this.#offEvent = hub.on("event", (msg, bytes) => {
      // One frame per subscription, so the bytes are this subscriber's own.
      this.#subs.get(msg.esid as number)?.sub.deliver({
        subject: String(msg.subject),
        payload: bytes,
      });
    });
    this.#offSession = hub.onSession((session) => {
      for (const [esid, { pattern }] of this.#subs) {
        session.send({ op: "esub", esid, subject: pattern });
      }
    });
  }

  /**
   * Connects to the hub at `address` and returns an event plane that owns the connection.
   * @throws {HubConnectionError} the hub cannot be reached or refused the token
   */
  static async connect(address: string, options?: HubConnectionOptions): Promise<HubEventPlane> {
    return new HubEventPlane(await HubConnection.connect(address, options), { owned: true });
  }

  async publish(subject: string, payload: Uint8Array): Promise<void> {
    this.#open();
    validateSubject(subject, false);
    (await this.hub.session()).send({ op: "pub", subject }, payload);
  }

  subscribe(subject: string, options: EventSubscribeOptions = {}): EventSubscription {
    this.#open();
    validateSubject(subject, true);
    if (options.signal?.aborted) {
      return new QueueSubscription(() => {}, Promise.resolve(), options.signal);
    }
    const esid = this.hub.nextId();
    const ready = this.hub.call({ op: "esub", esid, subject }).then(() => {});
    const sub = new QueueSubscription(
      async () => {
        if (!this.#subs.delete(esid)) return;
        if (this.hub.connected) await this.hub.call({ op: "eunsub", esid }).catch(() => {});
      },
      ready,
      options.signal,
    );
    this.#subs.set(esid, { pattern: subject, sub });
    // A subscription the hub never took ends at once instead of waiting forever.
    ready.catch(() => void sub.unsubscribe());
    return sub;
  }

  /** Ends every subscription made here (and releases the connection when owned). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#subs.values()].map(({ sub }) => sub.unsubscribe()));
    this.#offEvent();
    this.#offSession();
    if (this.#owned) await this.hub.release();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("hub event plane is closed");
  }
}
