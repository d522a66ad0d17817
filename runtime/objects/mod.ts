/**
 * The object plane: named blobs too big for discovery (tokenizer files of model cards).
 * {@linkcode MemoryObjectStore} for the embedded default, {@linkcode NatsObjectStore} on
 * a NATS JetStream object-store bucket.
 * @module
 */

/** Named, immutable blobs. */
export interface ObjectStore {
  readonly kind: string;
  /** Stores `data` under `name` (overwrites). */
  put(name: string, data: Uint8Array): Promise<void>;
  /** The blob, or undefined when there is none. */
  get(name: string): Promise<Uint8Array | undefined>;
  /** True when `name` exists. */
  has(name: string): Promise<boolean>;
}

export { MemoryObjectStore } from "./memory.ts";
export { NatsObjectStore } from "./nats.ts";
