// DistributedRuntime: one per process. Holds the discovery client and its lease (whose id
// is the instance id), the request plane, and the shutdown sequence.

import type { Client } from "./client.ts";
import { Namespace, type RuntimeInternals } from "./component.ts";
import type { Discovery, Lease } from "./discovery/types.ts";
import { InvalidArgumentError, RuntimeShutdownError } from "./errors.ts";
import { type Logger, loggerFromSettings, logSettingsFromEnv, silentLogger } from "./logger.ts";
import { jsonLinesRouteTrace, type RouteTrace } from "./route_trace.ts";
import { tracingFromEnv } from "./tracing/otel.ts";
import type { Tracing } from "./tracing/types.ts";
import type { RequestPlane } from "./transport/types.ts";
import { natsConnectionOf } from "./transport/tcp.ts";
import { RuntimeMetrics } from "./metrics/runtime_metrics.ts";
import type { ObjectStore } from "./objects/types.ts";
import { NatsObjectStore } from "./objects/nats.ts";
import type { EventPlane } from "./events/types.ts";
import { LocalEventPlane } from "./events/memory.ts";
import { NatsEventPlane } from "./events/nats.ts";
import { HubObjectStore } from "./hub/objects.ts";
import { HubEventPlane } from "./hub/events.ts";
import {
  connectHub,
  hubEventPlane,
  makeDiscovery,
  makePlane,
  tlsFromEnv,
} from "./_connect_backends.ts";
import {
  type DistributedRuntimeOptions,
  EmbeddedCluster,
  type FromEnvOptions,
} from "./runtime_options.ts";

export {
  type DistributedRuntimeOptions,
  EmbeddedCluster,
  type FromEnvOptions,
  type TlsFiles,
} from "./runtime_options.ts";

/**
 * The distributed runtime of one process.
 *
 * @example
 * ```ts
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const endpoint = runtime.namespace("ns").component("backend").endpoint("generate");
 * ```
 */
export class DistributedRuntime {
  /** Keys, leases and watches: etcd, the hub, or in memory. */
  readonly discovery: Discovery;
  /** Where requests go and response streams come back: NATS, the hub, or in process. */
  readonly plane: RequestPlane;
  /** Publish/subscribe (KV events, metrics): NATS core with NATS, in-process otherwise. */
  readonly events: EventPlane;
  /** Blobs (model files): JetStream object store with NATS, in memory otherwise. */
  readonly objects: ObjectStore;
  /** Where the runtime logs. */
  readonly logger: Logger;
  /** The runtime's OpenTelemetry tracing, when on (hand it to the frontend too). */
  readonly tracing: Tracing | undefined;
  /** This process's instance id: the first lease's id, in lowercase hex. */
  readonly instanceId: string;
  /**
   * The Prometheus metrics of the endpoints this runtime serves (`dynamo_component_*`) and of
   * the engine load its workers publish; a worker's system server renders them.
   */
  readonly metrics: RuntimeMetrics;
  readonly #internals: RuntimeInternals;
  #lease: Lease;
  readonly #keys = new Map<string, string>();
  readonly #shutdown = new AbortController();
  readonly #tasks = new Set<Promise<unknown>>();
  readonly #clients = new Set<Client>();
  #shutdownDone: Promise<void> | undefined;
  #recovering: Promise<void> | undefined;
  /** Tracing made by `fromEnv`: shut down (its last spans exported) with the runtime. */
  #ownsTracing = false;

  private constructor(
    discovery: Discovery,
    plane: RequestPlane,
    objects: ObjectStore,
    lease: Lease,
    logger: Logger,
    connectTimeoutMs: number,
    events: EventPlane,
    routeTrace: RouteTrace | undefined,
    liveness: { streamIdleTimeoutMs?: number; heartbeatMs?: number },
    metrics: RuntimeMetrics,
    tracing: Tracing | undefined,
  ) {
    this.discovery = discovery;
    this.metrics = metrics;
    this.plane = plane;
    this.events = events;
    this.objects = objects;
    this.logger = logger;
    this.tracing = tracing;
    this.#lease = lease;
    this.instanceId = lease.id;
    this.#watchLease(lease);
    // deno-lint-ignore no-this-alias
    const self = this;
    this.#internals = {
      discovery,
      plane,
      events,
      objects,
      logger,
      instanceId: lease.id,
      metrics: this.metrics,
      shutdownSignal: this.#shutdown.signal,
      connectTimeoutMs,
      ...liveness,
      routeTrace,
      tracing,
      leaseTtlSeconds: lease.ttlSeconds,
      registerKey: (k, v) => self.#registerKey(k, v),
      unregisterKey: (k) => self.#unregisterKey(k),
      track: (task) => {
        self.#tasks.add(task);
        task.finally(() => self.#tasks.delete(task)).catch(() => {});
      },
      trackClient: (c) => void self.#clients.add(c),
    };
  }

  /**
   * Builds a runtime from explicit options.
   * @throws {InvalidArgumentError} bad options
   * @throws {DynamoError} a backend could not be reached
   */
  static async connect(options: DistributedRuntimeOptions = {}): Promise<DistributedRuntime> {
    const logger = options.logger ?? silentLogger;
    const ttl = options.leaseTtlSeconds ?? 10;
    if (!Number.isInteger(ttl) || ttl < 1) {
      throw new InvalidArgumentError(`leaseTtlSeconds must be a whole number >= 1, got ${ttl}`);
    }
    for (const name of ["streamIdleTimeoutMs", "heartbeatMs"] as const) {
      const ms = options[name];
      if (ms !== undefined && !(Number.isFinite(ms) && ms > 0)) {
        throw new InvalidArgumentError(`${name} must be a number of ms > 0, got ${ms}`);
      }
    }
    const embedded = options.embedded ?? new EmbeddedCluster();
    // One hub connection per runtime, shared by its discovery, request plane and objects;
    // the reference held here is dropped once they hold theirs.
    const hub = await connectHub(options);
    hub?.acquire();
    let discovery: Discovery;
    let plane: RequestPlane;
    try {
      discovery = await makeDiscovery(options, embedded, hub);
      try {
        plane = await makePlane(options, embedded, hub);
      } catch (err) {
        await discovery.close();
        throw err;
      }
    } finally {
      await hub?.release();
    }
    let lease: Lease;
    try {
      lease = await discovery.grantLease(ttl);
    } catch (err) {
      await plane.close();
      await discovery.close();
      throw err;
    }
    const nc = natsConnectionOf(plane);
    const objects = nc ? new NatsObjectStore(nc) : hub ? new HubObjectStore(hub) : embedded.objects;
    const rt = new DistributedRuntime(
      discovery,
      plane,
      objects,
      lease,
      logger,
      options.connectTimeoutMs ?? 5000,
      options.events ??
        (nc
          ? new NatsEventPlane(nc)
          : hub
          ? hubEventPlane(new HubEventPlane(hub))
          : new LocalEventPlane(embedded.events)),
      options.routeTrace,
      { streamIdleTimeoutMs: options.streamIdleTimeoutMs, heartbeatMs: options.heartbeatMs },
      options.metrics ?? new RuntimeMetrics(),
      options.tracing,
    );
    logger.debug("runtime connected", {
      discovery: discovery.kind,
      plane: plane.kind,
      instance: lease.id,
    });
    return rt;
  }

  /**
   * Builds a runtime from the environment: with `ETCD_ENDPOINTS` or `NATS_SERVER` set,
   * etcd + NATS (the unset one at its local default), requests on the TCP plane unless
   * `DYN_REQUEST_PLANE=nats` (events and objects on NATS either way); otherwise, with `DYN_HUB=host:port`
   * set, the hub at that address (`dynamo hub`, or the `dynamo serve` parent; token in
   * `DYN_HUB_TOKEN`); otherwise the embedded default. ETCD_ENDPOINTS / NATS_SERVER take
   * precedence over DYN_HUB.
   * Also reads `DYN_LEASE_TTL`, `DYN_TCP_RPC_HOST`, `DYN_LOG` (the reference's filter syntax,
   * see `logSettingsFromEnv`) and `DYN_LOGGING_JSONL` (or `DYN_LOG_JSON`),
   * `DYN_ROUTE_TRACE=1` (a JSON-lines routing trace on standard error, see `routeTrace`),
   * `ETCD_USERNAME`/`ETCD_PASSWORD`, `NATS_USER`/`NATS_PASSWORD`/`NATS_TOKEN`, and the TLS
   * files `ETCD_TLS_CA`/`ETCD_TLS_CERT`/`ETCD_TLS_KEY` (and `ETCD_TLS_SERVER_NAME`) and
   * `NATS_TLS_CA`/`NATS_TLS_CERT`/`NATS_TLS_KEY` (any NATS_TLS_* set makes NATS require TLS),
   * and the OpenTelemetry variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`, ...:
   * {@linkcode tracingFromEnv}) unless `tracing` is given.
   */
  static async fromEnv(options: FromEnvOptions = {}): Promise<DistributedRuntime> {
    const env = options.env ?? Deno.env.toObject();
    const real = Boolean(env.ETCD_ENDPOINTS || env.NATS_SERVER);
    const hub = !real && Boolean(env.DYN_HUB);
    const opts: DistributedRuntimeOptions = { ...options };
    opts.discovery = real ? "etcd" : hub ? "hub" : "memory";
    opts.requestPlane = real ? "tcp" : hub ? "hub" : "local";
    const chosen = env.DYN_REQUEST_PLANE?.trim();
    if (chosen) {
      if (chosen !== "tcp" && chosen !== "nats") {
        throw new InvalidArgumentError(
          `DYN_REQUEST_PLANE must be "tcp" or "nats", got ${JSON.stringify(chosen)}`,
        );
      }
      // The embedded default has no other process to reach; hub mode has no NATS.
      if (real || (hub && chosen === "tcp")) opts.requestPlane = chosen;
    }
    if (hub) {
      opts.hubAddress = env.DYN_HUB!.trim();
      if (env.DYN_HUB_TOKEN) opts.hubToken = env.DYN_HUB_TOKEN;
    }
    if (env.ETCD_ENDPOINTS) {
      opts.etcdEndpoints = env.ETCD_ENDPOINTS.split(",").map((s) => s.trim()).filter(Boolean);
    }
    if (env.NATS_SERVER) {
      opts.natsServer = env.NATS_SERVER.split(",").map((s) => s.trim()).filter(Boolean);
    }
    if (env.DYN_LEASE_TTL) opts.leaseTtlSeconds = Number(env.DYN_LEASE_TTL);
    if (env.DYN_STREAM_IDLE_TIMEOUT_MS) {
      opts.streamIdleTimeoutMs = Number(env.DYN_STREAM_IDLE_TIMEOUT_MS);
    }
    if (env.DYN_HEARTBEAT_MS) opts.heartbeatMs = Number(env.DYN_HEARTBEAT_MS);
    if (env.DYN_TCP_RPC_HOST) opts.tcpHost = env.DYN_TCP_RPC_HOST;
    if (env.DYN_ROUTE_TRACE === "1" && !opts.routeTrace) opts.routeTrace = jsonLinesRouteTrace();
    if (env.ETCD_USERNAME) {
      opts.etcdAuth = { username: env.ETCD_USERNAME, password: env.ETCD_PASSWORD ?? "" };
    }
    if (env.NATS_USER || env.NATS_TOKEN) {
      opts.natsAuth = { user: env.NATS_USER, pass: env.NATS_PASSWORD, token: env.NATS_TOKEN };
    }
    const etcdTls = tlsFromEnv(env, "ETCD");
    if (etcdTls) opts.etcdTls = etcdTls;
    const natsTls = tlsFromEnv(env, "NATS");
    if (natsTls) opts.natsTls = natsTls;
    if (!options.logger) opts.logger = loggerFromSettings(logSettingsFromEnv(env));
    let ownsTracing = false;
    if (options.tracing === undefined) {
      opts.tracing = await tracingFromEnv(env, { defaultServiceName: options.tracingServiceName });
      ownsTracing = opts.tracing !== undefined;
    }
    let rt: DistributedRuntime;
    try {
      rt = await DistributedRuntime.connect(opts);
    } catch (err) {
      if (ownsTracing) await opts.tracing!.shutdown().catch(() => {});
      throw err;
    }
    rt.#ownsTracing = ownsTracing;
    return rt;
  }

  /** A namespace (a pipeline). */
  namespace(name: string): Namespace {
    return new Namespace(this.#internals, name);
  }

  /** Aborts when shutdown begins. */
  get shutdownSignal(): AbortSignal {
    return this.#shutdown.signal;
  }

  /** The lease the runtime's keys live on now (a new one after a loss). */
  get leaseId(): string {
    return this.#lease.id;
  }

  /** @internal */
  get internals(): RuntimeInternals {
    return this.#internals;
  }

  async #registerKey(key: string, value: string): Promise<void> {
    if (this.#shutdown.signal.aborted) {
      throw new RuntimeShutdownError("the runtime is shutting down");
    }
    this.#keys.set(key, value);
    await this.discovery.put(key, value, { lease: this.#lease });
  }

  async #unregisterKey(key: string): Promise<void> {
    this.#keys.delete(key);
    await this.discovery.delete(key);
  }

  #watchLease(lease: Lease): void {
    lease.lost.addEventListener("abort", () => {
      if (this.#shutdown.signal.aborted || lease !== this.#lease) return;
      this.logger.warn("lease lost; re-registering", {
        lease: lease.id,
        reason: String(lease.lost.reason),
      });
      this.#recovering ??= this.#recover().finally(() => (this.#recovering = undefined));
    }, { once: true });
  }

  /** Grants a new lease (retrying until discovery answers) and puts every key back on it. */
  async #recover(): Promise<void> {
    let delay = 250;
    while (!this.#shutdown.signal.aborted) {
      try {
        const lease = await this.discovery.grantLease(this.#lease.ttlSeconds);
        if (this.#shutdown.signal.aborted) {
          await lease.revoke().catch(() => {});
          return;
        }
        this.#lease = lease;
        this.#watchLease(lease);
        for (const [k, v] of this.#keys) await this.discovery.put(k, v, { lease });
        this.logger.info("re-registered after lease loss", {
          lease: lease.id,
          keys: this.#keys.size,
        });
        return;
      } catch (err) {
        this.logger.debug("discovery not back yet", { error: String(err) });
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 2000);
      }
    }
  }

  /**
   * Shuts down: endpoints leave discovery and stop taking requests, in-flight requests
   * finish (or are killed, per endpoint), clients stop, the lease is revoked, connections
   * close. Idempotent; every call resolves when shutdown is complete.
   */
  shutdown(): Promise<void> {
    this.#shutdownDone ??= this.#doShutdown();
    return this.#shutdownDone;
  }

  async #doShutdown(): Promise<void> {
    this.#shutdown.abort(new RuntimeShutdownError("runtime shut down"));
    await Promise.allSettled([...this.#tasks]);
    await Promise.allSettled([...this.#clients].map((c) => c.close()));
    await this.#recovering;
    await this.events.close().catch((err) =>
      this.logger.warn("event plane close failed", { error: String(err) })
    );
    try {
      await this.#lease.revoke();
    } catch (err) {
      this.logger.warn("lease revoke failed; it will expire", { error: String(err) });
    }
    await this.plane.close().catch((err) =>
      this.logger.warn("request plane close failed", { error: String(err) })
    );
    await this.discovery.close().catch((err) =>
      this.logger.warn("discovery close failed", { error: String(err) })
    );
    // The last spans go out (a collector that is gone must not hold the shutdown up long).
    const tracing = this.tracing;
    if (tracing !== undefined) {
      await (this.#ownsTracing ? tracing.shutdown() : tracing.forceFlush()).catch((err) =>
        this.logger.warn("exporting the last spans failed", { error: String(err) })
      );
    }
  }
}
