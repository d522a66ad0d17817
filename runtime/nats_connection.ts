// The NATS connection the planes on NATS share (request plane, event plane, object store)
// and the JetStream prefill queue takes: one name for it in our public API.

import type { NatsConnection as NatsJsConnection } from "nats";

/**
 * A connection to a NATS server: what `connect()` of npm:nats returns, and what
 * `runtimeNatsConnection(runtime)` lends out of a runtime on NATS (the runtime owns it).
 */
export type NatsConnection = NatsJsConnection;
