// The object plane's interface; every backend implements it.

/** Named, immutable blobs. */
export interface ObjectStore {
  /** Which backend this is ("memory", "nats" or "hub"). */
  readonly kind: string;
  /** Stores `data` under `name` (overwrites). */
  put(name: string, data: Uint8Array): Promise<void>;
  /** The blob, or undefined when there is none. */
  get(name: string): Promise<Uint8Array | undefined>;
  /** True when `name` exists. */
  has(name: string): Promise<boolean>;
}
