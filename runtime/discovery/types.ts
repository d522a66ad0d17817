// The discovery plane's interface and its types; every backend implements it.

/** One stored key. */
export interface KeyValue {
  /** The key. */
  key: string;
  /** Its value. */
  value: string;
}

/** A change under a watched prefix. */
export type WatchEvent =
  | { type: "put"; key: string; value: string }
  | { type: "delete"; key: string }
  /** Sent once, after the snapshot of existing keys. */
  | { type: "synced" };

/**
 * A lease: keys put under it vanish when it is revoked or expires. Implementations keep
 * it alive on their own until it is revoked or lost.
 */
export interface Lease {
  /** Lowercase hex lease id. */
  readonly id: string;
  /** The TTL it was granted with (seconds). */
  readonly ttlSeconds: number;
  /** Aborts when the lease was lost (expired or unknown to the server) without a revoke. */
  readonly lost: AbortSignal;
  /** Deletes the lease and every key under it. */
  revoke(): Promise<void>;
}

/** Options of {@linkcode Discovery.watch}. */
export interface WatchOptions {
  /** Ends the watch. */
  signal?: AbortSignal;
}

/** Options of {@linkcode Discovery.put}. */
export interface PutOptions {
  /** Attach the key to this lease. */
  lease?: Lease;
}

/** A key-value store with leases and prefix watches (etcd's shape). */
export interface Discovery {
  /** Which backend this is ("memory" or "etcd"). */
  readonly kind: string;
  /** Grants a lease with this TTL and keeps it alive until revoked or lost. */
  grantLease(ttlSeconds: number): Promise<Lease>;
  /** Stores `value` under `key`, attached to `options.lease` when given. */
  put(key: string, value: string, options?: PutOptions): Promise<void>;
  /** The value under `key`, or undefined when there is none. */
  get(key: string): Promise<string | undefined>;
  /** Deletes `key` (nothing happens when it does not exist). */
  delete(key: string): Promise<void>;
  /** Every key under `prefix`, sorted by key. */
  list(prefix: string): Promise<KeyValue[]>;
  /**
   * Watches `prefix`: first one "put" per existing key (the snapshot), then one "synced",
   * then every change, with no gap between snapshot and changes. Ends when `signal` aborts or the consumer breaks.
   */
  watch(prefix: string, options?: WatchOptions): AsyncIterable<WatchEvent>;
  /** Closes connections; leases are left to expire (revoke them first for a clean exit). */
  close(): Promise<void>;
}
