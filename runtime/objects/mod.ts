/**
 * The object plane: named blobs too big for discovery (tokenizer files of model cards).
 * {@linkcode MemoryObjectStore} for the embedded default, {@linkcode NatsObjectStore} on
 * a NATS JetStream object-store bucket.
 * @module
 */

export type { ObjectStore } from "./types.ts";
export { MemoryObjectStore } from "./memory.ts";
export { NatsObjectStore } from "./nats.ts";
