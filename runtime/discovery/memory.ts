// In-memory discovery for the embedded default: one MemoryStore shared by every runtime
// of the process, each runtime holding its own MemoryDiscovery view onto it.

import { AsyncQueue } from "../_queue.ts";
import { DynamoError, InvalidArgumentError } from "../errors.ts";
import type { Discovery, KeyValue, Lease, PutOptions, WatchEvent, WatchOptions } from "./types.ts";

interface MemoryLeaseState {
  id: string;
  ttlSeconds: number;
  keys: Set<string>;
  controller: AbortController;
  expiry: ReturnType<typeof setTimeout> | undefined;
}

/** The shared state behind {@linkcode MemoryDiscovery}: keys, leases and watchers. */
export class MemoryStore {
  #data = new Map<string, { value: string; lease: string | undefined }>();
  #leases = new Map<string, MemoryLeaseState>();
  #watchers = new Set<{ prefix: string; queue: AsyncQueue<WatchEvent> }>();

  /** Number of live leases (for tests). */
  get leaseCount(): number {
    return this.#leases.size;
  }

  /** @internal */
  grant(ttlSeconds: number): MemoryLeaseState {
    let id: string;
    do {
      const bytes = crypto.getRandomValues(new Uint8Array(8));
      bytes[0]! &= 0x7f; // positive int64, as etcd's
      id = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("").replace(/^0+/, "");
    } while (id === "" || this.#leases.has(id));
    const state: MemoryLeaseState = {
      id,
      ttlSeconds,
      keys: new Set(),
      controller: new AbortController(),
      expiry: undefined,
    };
    this.#leases.set(id, state);
    return state;
  }

  /** Stops keeping `leaseId` alive: it expires after its TTL, as when a process dies. */
  abandonLease(leaseId: string): void {
    const state = this.#leases.get(leaseId);
    if (!state || state.expiry !== undefined) return;
    state.expiry = setTimeout(() => this.expireLease(leaseId), state.ttlSeconds * 1000);
  }

  /** Expires `leaseId` now: its keys are deleted and its holder sees the lease lost. */
  expireLease(leaseId: string): void {
    const state = this.#leases.get(leaseId);
    if (!state) return;
    this.#dropLease(state);
    state.controller.abort(new DynamoError(`lease ${leaseId} expired`));
  }

  /** @internal */
  revoke(leaseId: string): void {
    const state = this.#leases.get(leaseId);
    if (state) this.#dropLease(state);
  }

  #dropLease(state: MemoryLeaseState): void {
    clearTimeout(state.expiry);
    this.#leases.delete(state.id);
    for (const key of state.keys) this.delete(key);
  }

  /** @internal */
  put(key: string, value: string, leaseId: string | undefined): void {
    if (leaseId !== undefined) {
      const state = this.#leases.get(leaseId);
      if (!state) throw new DynamoError(`lease ${leaseId} not found`);
      state.keys.add(key);
    }
    const old = this.#data.get(key);
    if (old?.lease !== undefined && old.lease !== leaseId) {
      this.#leases.get(old.lease)?.keys.delete(key);
    }
    this.#data.set(key, { value, lease: leaseId });
    this.#notify({ type: "put", key, value });
  }

  /** @internal */
  get(key: string): string | undefined {
    return this.#data.get(key)?.value;
  }

  /** @internal */
  delete(key: string): void {
    const old = this.#data.get(key);
    if (!old) return;
    this.#data.delete(key);
    if (old.lease !== undefined) this.#leases.get(old.lease)?.keys.delete(key);
    this.#notify({ type: "delete", key });
  }

  /** @internal */
  list(prefix: string): KeyValue[] {
    const out: KeyValue[] = [];
    for (const [key, { value }] of this.#data) if (key.startsWith(prefix)) out.push({ key, value });
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** @internal Registers a watcher and returns its snapshot, atomically. */
  watch(prefix: string, queue: AsyncQueue<WatchEvent>): () => void {
    for (const kv of this.list(prefix)) void queue.push({ type: "put", ...kv });
    void queue.push({ type: "synced" });
    const watcher = { prefix, queue };
    this.#watchers.add(watcher);
    return () => this.#watchers.delete(watcher);
  }

  #notify(event: WatchEvent & { key: string }): void {
    for (const w of this.#watchers) if (event.key.startsWith(w.prefix)) void w.queue.push(event);
  }
}

/**
 * Discovery inside one process. Runtimes that share a {@linkcode MemoryStore} see each
 * other; closing a view without revoking its leases lets them expire after their TTL,
 * as a killed process's leases do in etcd.
 */
export class MemoryDiscovery implements Discovery {
  readonly kind = "memory";
  /** The state this view shares with the other views of the store. */
  readonly store: MemoryStore;
  #leases = new Set<string>();
  #watches = new Set<AsyncQueue<WatchEvent>>();
  #closed = false;

  /**
   * Creates a view of `store`.
   * @param store shared state (default: a new, private store)
   */
  constructor(store: MemoryStore = new MemoryStore()) {
    this.store = store;
  }

  grantLease(ttlSeconds: number): Promise<Lease> {
    this.#open();
    if (!(ttlSeconds > 0)) {
      throw new InvalidArgumentError(`lease TTL must be > 0 seconds, got ${ttlSeconds}`);
    }
    const state = this.store.grant(ttlSeconds);
    this.#leases.add(state.id);
    const store = this.store;
    const leases = this.#leases;
    return Promise.resolve({
      id: state.id,
      ttlSeconds,
      lost: state.controller.signal,
      revoke() {
        leases.delete(state.id);
        store.revoke(state.id);
        return Promise.resolve();
      },
    });
  }

  put(key: string, value: string, options: PutOptions = {}): Promise<void> {
    this.#open();
    this.store.put(key, value, options.lease?.id);
    return Promise.resolve();
  }

  get(key: string): Promise<string | undefined> {
    this.#open();
    return Promise.resolve(this.store.get(key));
  }

  delete(key: string): Promise<void> {
    this.#open();
    this.store.delete(key);
    return Promise.resolve();
  }

  list(prefix: string): Promise<KeyValue[]> {
    this.#open();
    return Promise.resolve(this.store.list(prefix));
  }

  async *watch(prefix: string, options: WatchOptions = {}): AsyncIterable<WatchEvent> {
    this.#open();
    const { signal } = options;
    signal?.throwIfAborted();
    const queue = new AsyncQueue<WatchEvent>();
    const unwatch = this.store.watch(prefix, queue);
    this.#watches.add(queue);
    const onAbort = () => queue.close();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      yield* queue;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      unwatch();
      this.#watches.delete(queue);
      queue.close();
    }
  }

  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    for (const id of this.#leases) this.store.abandonLease(id);
    this.#leases.clear();
    for (const q of this.#watches) q.close();
    return Promise.resolve();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("memory discovery is closed");
  }
}
