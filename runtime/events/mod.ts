/**
 * The event plane: fire-and-forget publish/subscribe on NATS-style subjects, for KV cache
 * events and load metrics. At most once, in order per publisher and subject, nothing kept
 * for late subscribers (NATS core semantics). Two implementations: in-process
 * ({@linkcode LocalEventPlane} over a {@linkcode LocalEventBus} shared by the runtimes of
 * one embedded cluster) and NATS core ({@linkcode NatsEventPlane}, on the runtime's
 * connection).
 * @module
 */

export type {
  EventMessage,
  EventPlane,
  EventSubscribeOptions,
  EventSubscription,
} from "./types.ts";
export { componentEventSubject, subjectMatches, validateSubject } from "./subject.ts";
export { LocalEventBus, LocalEventPlane } from "./memory.ts";
export { NatsEventPlane } from "./nats.ts";
export { QueueSubscription } from "./_subscription.ts";
