// Discovery through the hub: the hub holds the keys and leases (a MemoryStore); a lease
// lives as long as the connection that granted it, so a crashed process's keys vanish
// as soon as the hub sees its socket close.

import { AsyncQueue } from "../_queue.ts";
import { DynamoError, InvalidArgumentError } from "../errors.ts";
import type {
  Discovery,
  KeyValue,
  Lease,
  PutOptions,
  WatchEvent,
  WatchOptions,
} from "../discovery/types.ts";
import { HubConnection, type HubConnectionOptions, type HubSession } from "./connection.ts";
import { HubConnectionError } from "./protocol.ts";

interface LeaseEntry {
  session: HubSession;
  controller: AbortController;
}

/**
 * A {@linkcode Discovery} whose store is the hub's. Watch semantics are
 * MemoryDiscovery's: snapshot, "synced", then every change with no gap. A watch ends
 * with {@linkcode HubConnectionError} when the connection breaks; leases are then lost.
 *
 * @example
 * ```ts
 * const discovery = await HubDiscovery.connect("127.0.0.1:4300");
 * const lease = await discovery.grantLease(10);
 * await discovery.put("v1/instances/ns/c/e/" + lease.id, "{}", { lease });
 * ```
 */
export class HubDiscovery implements Discovery {
  readonly kind = "hub";
  readonly hub: HubConnection;
  readonly #leases = new Map<string, LeaseEntry>();
  readonly #watches = new Map<number, AsyncQueue<WatchEvent>>();
  readonly #offLost: () => void;
  readonly #offWatch: () => void;
  #closed = false;

  /** @param hub the process's hub connection (a reference is held until close) */
  constructor(hub: HubConnection) {
    this.hub = hub;
    hub.acquire();
    this.#offWatch = hub.on("watch", (msg) => {
      const queue = this.#watches.get(msg.wid as number);
      if (queue) void queue.push(msg.event as WatchEvent);
    });
    this.#offLost = hub.onLost((session, err) => {
      for (const [id, entry] of this.#leases) {
        if (entry.session !== session) continue;
        this.#leases.delete(id);
        entry.controller.abort(
          new HubConnectionError(`lease ${id} lost with the hub connection: ${err.message}`),
        );
      }
      for (const queue of this.#watches.values()) queue.close(err);
      this.#watches.clear();
    });
  }

  /**
   * Connects to the hub at `address` and returns a discovery that owns the connection.
   * @throws {HubConnectionError} the hub cannot be reached or refused the token
   */
  static async connect(address: string, options?: HubConnectionOptions): Promise<HubDiscovery> {
    return new HubDiscovery(await HubConnection.connect(address, options));
  }

  async grantLease(ttlSeconds: number): Promise<Lease> {
    this.#open();
    if (!(ttlSeconds > 0) || !Number.isFinite(ttlSeconds)) {
      throw new InvalidArgumentError(`lease TTL must be > 0 seconds, got ${ttlSeconds}`);
    }
    const session = await this.hub.session();
    const { msg } = await session.call({ op: "grant", ttl: ttlSeconds });
    const id = String(msg.lease);
    const controller = new AbortController();
    const entry: LeaseEntry = { session, controller };
    if (!session.alive) {
      controller.abort(new HubConnectionError(`lease ${id} lost with the hub connection`));
    } else this.#leases.set(id, entry);
    const leases = this.#leases;
    return {
      id,
      ttlSeconds,
      lost: controller.signal,
      async revoke() {
        leases.delete(id);
        // A broken connection took the lease with it already.
        if (session.alive) await session.call({ op: "revoke", lease: id });
      },
    };
  }

  async put(key: string, value: string, options: PutOptions = {}): Promise<void> {
    this.#open();
    await this.hub.call({
      op: "put",
      key,
      value,
      ...(options.lease ? { lease: options.lease.id } : {}),
    });
  }

  async get(key: string): Promise<string | undefined> {
    this.#open();
    const { msg } = await this.hub.call({ op: "get", key });
    return typeof msg.value === "string" ? msg.value : undefined;
  }

  async delete(key: string): Promise<void> {
    this.#open();
    await this.hub.call({ op: "del", key });
  }

  async list(prefix: string): Promise<KeyValue[]> {
    this.#open();
    const { msg } = await this.hub.call({ op: "list", prefix });
    return msg.kvs as KeyValue[];
  }

  async *watch(prefix: string, options: WatchOptions = {}): AsyncIterable<WatchEvent> {
    this.#open();
    const { signal } = options;
    signal?.throwIfAborted();
    const session = await this.hub.session();
    const wid = this.hub.nextId();
    const queue = new AsyncQueue<WatchEvent>();
    this.#watches.set(wid, queue);
    const onAbort = () => queue.close();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await session.call({ op: "watch", wid, prefix });
      yield* queue;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      this.#watches.delete(wid);
      queue.close();
      session.send({ op: "unwatch", wid });
    }
  }

  /** Closes the watches and drops this discovery's reference to the connection; leases are left to the hub (revoke them first for a clean exit). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#offLost();
    this.#offWatch();
    for (const queue of this.#watches.values()) queue.close();
    this.#watches.clear();
    this.#leases.clear();
    await this.hub.release();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("hub discovery is closed");
  }
}
