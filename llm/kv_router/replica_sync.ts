/**
 * Several frontends, one picture of load: each KV router replica shares the changes of its
 * load book (a request booked on a worker, its prefill done, its end) on the component's
 * `active_sequences_events` subject, and books the other replicas' requests in its own book
 * under `remote:` ids. KV events already reach every replica; with this, so does the load the
 * others put on each worker, and two frontends route as one would (the reference's
 * `--router-replica-sync`).
 *
 * A replica that stops (crash, network) stops sending `free`s: remote bookings older than
 * `ttlMs` are dropped, so its requests do not weigh on workers forever.
 *
 * @module
 */

import type { Component } from "../../runtime/component.ts";
import type { EventSubscription } from "../../runtime/events/types.ts";
import type { Logger } from "../../runtime/logger.ts";
import { type ActiveSequences, type BookingEvent, REMOTE_BOOKING_PREFIX } from "./scheduler.ts";

/** The event subject replicas share bookings on (the reference's topic name). */
export const ACTIVE_SEQUENCES_EVENTS = "active_sequences_events";

/** Options of {@linkcode ReplicaSync}. */
export interface ReplicaSyncOptions {
  /** This replica's id (default: a random UUID). */
  routerId?: string;
  /** Remote bookings older than this are dropped, in ms (default 600000: 10 minutes). */
  ttlMs?: number;
  /** Where refusals and failures are logged. */
  logger?: Logger;
}

/** One shared booking change on the wire. */
interface WireBooking {
  router_id: string;
  event: BookingEvent;
}

const MAX_ID = 1024;

/**
 * Shares one router's bookings with its replicas and books theirs.
 *
 * @example
 * ```ts ignore
 * let sync: ReplicaSync | undefined;
 * const book = new ActiveSequences(16, { onBooking: (e) => sync?.publish(e) });
 * sync = new ReplicaSync(component, book);
 * ```
 */
export class ReplicaSync {
  /** This replica's id. */
  readonly routerId: string;
  readonly #component: Component;
  readonly #book: ActiveSequences;
  readonly #sub: EventSubscription;
  readonly #serving: Promise<void>;
  readonly #booked = new Map<string, number>();
  readonly #ttlMs: number;
  readonly #sweep: ReturnType<typeof setInterval>;
  readonly #log: Logger | undefined;
  #refused = 0;

  /**
   * Starts listening to the other replicas' bookings on `component`.
   *
   * @param component the workers' component (the subject is its `active_sequences_events`)
   * @param book the router's load book, where remote bookings go
   * @param options id, remote booking lifetime, logger
   */
  constructor(component: Component, book: ActiveSequences, options: ReplicaSyncOptions = {}) {
    this.routerId = options.routerId ?? crypto.randomUUID();
    this.#component = component;
    this.#book = book;
    this.#ttlMs = options.ttlMs ?? 600_000;
    this.#log = options.logger;
    const rt = component.runtimeInternals;
    this.#sub = component.subscribeEvents(ACTIVE_SEQUENCES_EVENTS, { signal: rt.shutdownSignal });
    this.#serving = this.#serve();
    this.#serving.catch((err) => this.#log?.warn("replica sync stopped", { error: String(err) }));
    this.#sweep = setInterval(() => this.#expire(), Math.min(this.#ttlMs, 10_000));
    Deno.unrefTimer(this.#sweep);
  }

  /** Resolves once other replicas' bookings reach this one. */
  get ready(): Promise<void> {
    return this.#sub.ready ?? Promise.resolve();
  }

  /** Messages refused at the door so far. */
  get refused(): number {
    return this.#refused;
  }

  /** Remote bookings held now. */
  get remoteBookings(): number {
    return this.#booked.size;
  }

  /**
   * Shares one of this router's booking changes (errors are logged: a lost message only
   * makes the others' picture slightly stale until the booking's end or expiry).
   *
   * @param event the change
   */
  publish(event: BookingEvent): void {
    const wire: WireBooking = { router_id: this.routerId, event };
    const bytes = new TextEncoder().encode(JSON.stringify(wire));
    this.#component.publishEvent(ACTIVE_SEQUENCES_EVENTS, bytes).catch((err) =>
      this.#log?.debug("booking not shared", { error: String(err) })
    );
  }

  /** Stops listening and drops the remote bookings. */
  async close(): Promise<void> {
    clearInterval(this.#sweep);
    await this.#sub.unsubscribe();
    await this.#serving.catch(() => {});
    for (const key of this.#booked.keys()) this.#book.free(key);
    this.#booked.clear();
  }

  async #serve(): Promise<void> {
    for await (const msg of this.#sub) {
      let wire: WireBooking;
      try {
        wire = parseBooking(JSON.parse(new TextDecoder().decode(msg.payload)));
      } catch (err) {
        this.#refused++;
        this.#log?.debug("refused a replica booking", { error: String(err) });
        continue;
      }
      if (wire.router_id === this.routerId) continue;
      this.#apply(wire);
    }
  }

  #apply({ router_id, event }: WireBooking): void {
    const key = `${REMOTE_BOOKING_PREFIX}${router_id}/${event.request_id}`;
    if (event.kind === "add") {
      if (this.#book.has(key)) return;
      this.#book.add(key, event.worker_id, event.prompt_tokens, event.overlap_blocks);
      this.#booked.set(key, Date.now());
    } else if (event.kind === "prefill_done") {
      this.#book.progress(key, 0);
    } else {
      this.#book.free(key);
      this.#booked.delete(key);
    }
  }

  #expire(): void {
    const cutoff = Date.now() - this.#ttlMs;
    for (const [key, at] of this.#booked) {
      if (at > cutoff) continue;
      this.#book.free(key);
      this.#booked.delete(key);
    }
  }
}

/** The door: a booking message from another replica, checked field by field. */
function parseBooking(value: unknown): WireBooking {
  const fail = (why: string): never => {
    throw new TypeError(`not a replica booking: ${why}`);
  };
  if (typeof value !== "object" || value === null) fail("not an object");
  const v = value as Record<string, unknown>;
  const id = (x: unknown, name: string) =>
    typeof x === "string" && x !== "" && x.length <= MAX_ID ? x : fail(`bad ${name}`);
  const count = (x: unknown, name: string) =>
    Number.isSafeInteger(x) && (x as number) >= 0 ? x as number : fail(`bad ${name}`);
  const routerId = id(v.router_id, "router_id");
  const e = v.event as Record<string, unknown> | null;
  if (typeof e !== "object" || e === null) fail("no event");
  const requestId = id(e!.request_id, "request_id");
  switch (e!.kind) {
    case "add":
      return {
        router_id: routerId,
        event: {
          kind: "add",
          request_id: requestId,
          worker_id: id(e!.worker_id, "worker_id"),
          prompt_tokens: count(e!.prompt_tokens, "prompt_tokens"),
          overlap_blocks: count(e!.overlap_blocks, "overlap_blocks"),
        },
      };
    case "prefill_done":
    case "free":
      return { router_id: routerId, event: { kind: e!.kind, request_id: requestId } };
    default:
      return fail(`unknown kind ${JSON.stringify(e!.kind)}`);
  }
}
