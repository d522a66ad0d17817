// The event plane's interface and its types; every backend implements it.

/** One event as a subscriber receives it. */
export interface EventMessage {
  /** The subject the event was published on. */
  subject: string;
  /** The published bytes; shared between subscribers, so treat them as read-only. */
  payload: Uint8Array;
}

/** Options of {@linkcode EventPlane.subscribe}. */
export interface EventSubscribeOptions {
  /** Ends the subscription. */
  signal?: AbortSignal;
}

/**
 * A live subscription: iterate it for events. It ends on `unsubscribe()`, when the
 * consumer breaks out of its loop, when `signal` aborts, and when the plane closes.
 */
export interface EventSubscription extends AsyncIterable<EventMessage> {
  /** Ends the subscription; the consumer's loop ends. */
  unsubscribe(): Promise<void>;
  /**
   * Resolves once the backend routes matching events here: events published after it
   * resolves reach this subscription (on NATS, once the server has the subscription).
   */
  readonly ready?: Promise<void>;
}

/** Publish/subscribe on subjects. */
export interface EventPlane {
  /** Which backend this is: "local", "nats", ... */
  readonly kind: string;
  /**
   * Publishes `payload` on `subject` (no wildcards). Resolves once it is on its way.
   * @throws {InvalidArgumentError} a malformed subject, or a payload over the backend's
   *   limit (1 MiB on a default NATS server)
   * @throws {DynamoError} the plane is closed
   */
  publish(subject: string, payload: Uint8Array): Promise<void>;
  /** NATS-style subjects: tokens split on ".", "*" matches one token, ">" the rest. */
  subscribe(subject: string, options?: EventSubscribeOptions): EventSubscription;
  /** Ends every subscription made through this plane. */
  close(): Promise<void>;
}
