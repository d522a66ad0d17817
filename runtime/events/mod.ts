/**
 * The event plane: fire-and-forget publish/subscribe on NATS-style subjects, for KV cache
 * events and load metrics. At most once, in order per publisher and subject, nothing kept
 * for late subscribers (NATS core semantics). Two implementations: in-process
 * ({@linkcode LocalEventPlane} over a {@linkcode LocalEventBus} shared by the runtimes of
 * one embedded cluster) and NATS core ({@linkcode NatsEventPlane}, on the runtime's
 * connection).
 * @module
 */

import { InvalidArgumentError } from "../errors.ts";
import { slug, validateName } from "../names.ts";

/** One event as a subscriber receives it. */
export interface EventMessage {
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

const TOKEN = /^[A-Za-z0-9_\-$:]+$/;

/**
 * Checks a subject: non-empty tokens split on "."; with `wildcards`, a token may be "*"
 * and the last one ">".
 * @throws {InvalidArgumentError} a malformed subject
 */
export function validateSubject(subject: string, wildcards: boolean): string {
  if (typeof subject !== "string" || subject.length === 0) {
    throw new InvalidArgumentError(`an event subject must be a non-empty string, got ${subject}`);
  }
  const tokens = subject.split(".");
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (TOKEN.test(t)) continue;
    if (wildcards && (t === "*" || (t === ">" && i === tokens.length - 1))) continue;
    throw new InvalidArgumentError(
      `malformed event subject ${JSON.stringify(subject)}: token ${JSON.stringify(t)}` +
        (wildcards ? "" : " (wildcards are for subscribing only)"),
    );
  }
  return subject;
}

/** True when `subject` matches `pattern` ("*" one token, a final ">" one or more). */
export function subjectMatches(pattern: string, subject: string): boolean {
  if (pattern === subject) return true;
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    const t = p[i]!;
    if (t === ">") return s.length > i;
    if (i >= s.length) return false;
    if (t !== "*" && t !== s[i]) return false;
  }
  return p.length === s.length;
}

/**
 * The subject of a component's events named `name`: `{slug(namespace_component)}.events.{name}`.
 * `name` may hold several "."-separated tokens (and wildcards, for subscribing).
 */
export function componentEventSubject(namespace: string, component: string, name: string): string {
  validateName("namespace", namespace);
  validateName("component", component);
  return `${slug(`${namespace}_${component}`)}.events.${name}`;
}

export { LocalEventBus, LocalEventPlane } from "./memory.ts";
export { NatsEventPlane } from "./nats.ts";
