// Discovery on etcd v3 through npm:etcd3: leases with keep-alive, keys on leases, and
// list-then-watch from the listed revision so no change between the two is missed.

import { Buffer } from "node:buffer";
import { Etcd3, type IOptions, type Lease as EtcdLease } from "etcd3";
import { ExponentialBackoff } from "cockatiel";
import { AsyncQueue } from "../_queue.ts";
import { withDeadline } from "../_deadline.ts";
import { DynamoError, InvalidArgumentError } from "../errors.ts";
import type { Discovery, KeyValue, Lease, PutOptions, WatchEvent, WatchOptions } from "./types.ts";

/** Options of {@linkcode EtcdDiscovery}. */
export interface EtcdDiscoveryOptions {
  /** Endpoints, e.g. `["http://127.0.0.1:2379"]`. */
  endpoints: string[];
  /** Deadline of each unary call in ms (default 5000). */
  callTimeoutMs?: number;
  /** Password authentication. */
  auth?: { username: string; password: string };
  /** TLS: PEM root certificates (and an optional client key pair). */
  tls?: {
    rootCertificate?: Uint8Array;
    privateKey?: Uint8Array;
    certChain?: Uint8Array;
    /** Name to ask for (SNI) and verify the certificate against, instead of the endpoint's host. */
    serverName?: string;
  };
}

const decoder = new TextDecoder();
const text = (b: Uint8Array | string | null | undefined) =>
  b == null ? "" : typeof b === "string" ? b : decoder.decode(b);

/** Discovery backed by an etcd v3 cluster. */
export class EtcdDiscovery implements Discovery {
  readonly kind = "etcd";
  readonly #client: Etcd3;
  /** Deadline of each call, and of a watch's creation (ms). */
  readonly #callTimeoutMs: number;
  readonly #leases = new Set<EtcdLease>();
  readonly #watches = new Set<AbortController>();
  #closed = false;

  /** Connects lazily: the first call opens the connection. */
  constructor(options: EtcdDiscoveryOptions) {
    if (options.endpoints.length === 0) {
      throw new InvalidArgumentError("etcd discovery needs at least one endpoint, got none");
    }
    for (const e of options.endpoints) {
      if (!/^https?:\/\/[^/]+$/.test(e)) {
        throw new InvalidArgumentError(`etcd endpoint must look like http://HOST:PORT, got "${e}"`);
      }
    }
    const secure = options.tls !== undefined ||
      options.endpoints.some((e) => e.startsWith("https:"));
    const ipHost = options.endpoints.find((e) =>
      /^https?:\/\/(\d+\.\d+\.\d+\.\d+|\[[^\]]*\])/.test(e)
    );
    // grpc-js sends the endpoint's host as the TLS server name, and Deno's node:tls refuses an
    // IP address there: every call would fail with UNAVAILABLE after the dial timeout.
    if (secure && ipHost !== undefined && !options.tls?.serverName) {
      throw new InvalidArgumentError(
        `etcd over TLS needs a host name, not an IP address, in its endpoints (got "${ipHost}"): ` +
          "use the name on the server's certificate, or set the server name (ETCD_TLS_SERVER_NAME)",
      );
    }
    const timeout = this.#callTimeoutMs = options.callTimeoutMs ?? 5000;
    const etcdOptions: IOptions = {
      hosts: options.endpoints,
      dialTimeout: timeout,
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + timeout }),
      // Reconnect watches quickly after an etcd restart (the library's default waits up to 30 s).
      // (etcd3's typings ask for an IBackoff, but it calls `.next()` on what it gets: a factory.)
      faultHandling: {
        watchBackoff: new ExponentialBackoff({ initialDelay: 100, maxDelay: 2000 }) as never,
      },
    };
    if (options.auth) etcdOptions.auth = options.auth;
    if (options.tls?.serverName) {
      etcdOptions.grpcOptions = { "grpc.ssl_target_name_override": options.tls.serverName };
    }
    if (options.tls) {
      etcdOptions.credentials = {
        rootCertificate: toBuffer(options.tls.rootCertificate),
        privateKey: toBuffer(options.tls.privateKey),
        certChain: toBuffer(options.tls.certChain),
      } as NonNullable<IOptions["credentials"]>;
    }
    this.#client = new Etcd3(etcdOptions);
  }

  async grantLease(ttlSeconds: number): Promise<Lease> {
    this.#open();
    if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) {
      throw new InvalidArgumentError(
        `etcd lease TTL must be a whole number >= 1 s, got ${ttlSeconds}`,
      );
    }
    const lease = this.#client.lease(ttlSeconds);
    const controller = new AbortController();
    lease.on("lost", (err) => controller.abort(new DynamoError(`etcd lease lost: ${err.message}`)));
    let decimal: string;
    try {
      decimal = await lease.grant();
    } catch (err) {
      lease.release();
      throw new DynamoError(`cannot grant an etcd lease: ${errMessage(err)}`, { cause: err });
    }
    this.#leases.add(lease);
    const leases = this.#leases;
    return {
      id: BigInt(decimal).toString(16),
      ttlSeconds,
      lost: controller.signal,
      async revoke() {
        leases.delete(lease);
        try {
          await lease.revoke();
        } catch (err) {
          // Already gone on the server (expired or etcd wiped) is what we wanted anyway.
          if (!/not found|lease/i.test(errMessage(err))) throw err;
        } finally {
          lease.release();
        }
      },
      [LEASE]: decimal,
    } as Lease;
  }

  async put(key: string, value: string, options: PutOptions = {}): Promise<void> {
    this.#open();
    const builder = this.#client.put(key).value(value);
    if (options.lease) {
      const decimal = (options.lease as Lease & { [LEASE]?: string })[LEASE];
      if (decimal === undefined) {
        throw new InvalidArgumentError("lease was not granted by this etcd discovery");
      }
      builder.lease(decimal);
    }
    await builder.exec();
  }

  async get(key: string): Promise<string | undefined> {
    this.#open();
    const v = await this.#client.get(key).string();
    return v ?? undefined;
  }

  async delete(key: string): Promise<void> {
    this.#open();
    await this.#client.delete().key(key).exec();
  }

  async list(prefix: string): Promise<KeyValue[]> {
    this.#open();
    const res = await this.#client.getAll().prefix(prefix).sort("Key", "Ascend").exec();
    return res.kvs.map((kv) => ({ key: text(kv.key), value: text(kv.value) }));
  }

  async *watch(prefix: string, options: WatchOptions = {}): AsyncIterable<WatchEvent> {
    this.#open();
    options.signal?.throwIfAborted();
    const controller = new AbortController();
    this.#watches.add(controller);
    const queue = new AsyncQueue<WatchEvent>();
    const stop = () => queue.close();
    options.signal?.addEventListener("abort", stop, { once: true });
    controller.signal.addEventListener("abort", stop, { once: true });
    let watcher: Awaited<ReturnType<ReturnType<Etcd3["watch"]>["create"]>> | undefined;
    /** A watch being created that nobody will read: cancelled once it exists. */
    let pending: Promise<NonNullable<typeof watcher>> | undefined;
    try {
      const res = await this.#client.getAll().prefix(prefix).exec();
      // The watch starts right after the listing's revision: nothing between is missed. The
      // listing goes to the consumer while it is being created; its creation (a stream call:
      // no deadline of its own) gets one.
      const next = (BigInt(res.header.revision) + 1n).toString();
      const creating = pending = this.#client.watch().prefix(prefix).startRevision(next).create();
      creating.catch(() => {}); // seen below, or dropped with the listing
      for (const kv of res.kvs) yield { type: "put", key: text(kv.key), value: text(kv.value) };
      yield { type: "synced" };
      const timeoutMs = this.#callTimeoutMs;
      watcher = await withDeadline(
        creating,
        timeoutMs,
        () => new DynamoError(`etcd watch of ${prefix} was not created within ${timeoutMs} ms`),
      );
      pending = undefined;
      watcher.on(
        "put",
        (kv) => void queue.push({ type: "put", key: text(kv.key), value: text(kv.value) }),
      );
      watcher.on("delete", (kv) => void queue.push({ type: "delete", key: text(kv.key) }));
      watcher.on(
        "error",
        (err) => queue.close(new DynamoError(`etcd watch of ${prefix} failed: ${err.message}`)),
      );
      yield* queue;
    } finally {
      options.signal?.removeEventListener("abort", stop);
      this.#watches.delete(controller);
      queue.close();
      void pending?.then((late) => late.cancel(), () => {});
      await watcher?.cancel().catch(() => {});
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const w of this.#watches) w.abort();
    for (const lease of this.#leases) lease.release(); // stop keep-alives; the server expires them
    this.#leases.clear();
    // Let watch generators run their `finally` (cancel) before the channel goes.
    await new Promise((r) => setTimeout(r, 0));
    this.#client.close();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("etcd discovery is closed");
  }
}

const LEASE = Symbol("etcdLeaseDecimal");

// grpc-js's createSsl() rejects anything that is not a Node Buffer.
function toBuffer(b: Uint8Array | undefined): Buffer | undefined {
  return b === undefined ? undefined : Buffer.from(b);
}

function errMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
