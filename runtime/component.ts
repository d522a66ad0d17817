// Namespace -> component -> endpoint: the names a worker registers under, and the
// endpoint's two faces: serveEndpoint() (worker) and client() (caller).

import { Client } from "./client.ts";
import type { Context } from "./context.ts";
import type { Discovery } from "./discovery/mod.ts";
import {
  componentEventSubject,
  type EventPlane,
  type EventSubscribeOptions,
  type EventSubscription,
  validateSubject,
} from "./events/mod.ts";
import type { ObjectStore } from "./objects/mod.ts";
import { DynamoError, InvalidArgumentError, RuntimeShutdownError } from "./errors.ts";
import type { Logger } from "./logger.ts";
import type { RouteTrace } from "./route_trace.ts";
import type { Tracing } from "./tracing/types.ts";
import { componentKey, instanceKey } from "./keys.ts";
import {
  encodeInstanceRecord,
  type InstanceRecord,
  instanceSubject,
  validateName,
} from "./names.ts";
import { type Handler, serveRequest } from "./serve_request.ts";
import { referenceRequestServer } from "./reference/serve_requests.ts";
import { serveLocal } from "./local_call.ts";
import type { LocalRequestPlane } from "./transport/local.ts";
import type { TcpRequestPlane } from "./transport/tcp.ts";
import { isTwoPartMessage } from "./transport/reference_wire.ts";
import type { EndpointStats, RequestTally, RuntimeMetrics } from "./metrics/runtime_metrics.ts";
import {
  decodeRequest,
  type RequestHeader,
  type RequestPayload,
  type RequestPlane,
} from "./transport/mod.ts";

/** @internal What namespaces, components and endpoints need from their runtime. */
export interface RuntimeInternals {
  readonly discovery: Discovery;
  readonly plane: RequestPlane;
  /** Publish/subscribe for KV events and metrics. */
  readonly events: EventPlane;
  /** Blobs too big for discovery (model files). */
  readonly objects: ObjectStore;
  readonly logger: Logger;
  /** This process's instance id (lowercase hex). */
  readonly instanceId: string;
  /** Where served endpoints count their requests, and workers record their load. */
  readonly metrics: RuntimeMetrics;
  /** Aborts when the runtime starts shutting down. */
  readonly shutdownSignal: AbortSignal;
  readonly connectTimeoutMs: number;
  /** Idle deadline of this runtime's clients' response streams (ms; default the stream's). */
  readonly streamIdleTimeoutMs?: number;
  /** Heartbeat period of this runtime's endpoints' silent streams (ms; default the stream's). */
  readonly heartbeatMs?: number;
  /** TTL of this runtime's lease, in seconds. */
  readonly leaseTtlSeconds: number;
  /** Routing trace for this runtime's clients (off when unset). */
  readonly routeTrace?: RouteTrace;
  /** OpenTelemetry tracing of this runtime's endpoints' requests (off when unset). */
  readonly tracing?: Tracing;
  /** Puts `key` on the runtime's lease, and again on every new lease after a loss. */
  registerKey(key: string, value: string): Promise<void>;
  /** Deletes a key put with registerKey. */
  unregisterKey(key: string): Promise<void>;
  /** Tracks work the runtime's shutdown must wait for. */
  track(task: Promise<unknown>): void;
  /** Tracks clients to close at shutdown. */
  trackClient(client: Client): void;
}

/** A pipeline's name space. */
export class Namespace {
  /** The namespace's name. */
  readonly name: string;
  readonly #rt: RuntimeInternals;

  /** @internal use `runtime.namespace(name)` */
  constructor(rt: RuntimeInternals, name: string) {
    this.#rt = rt;
    this.name = validateName("namespace", name);
  }

  /** A load-balanced service in this namespace. */
  component(name: string): Component {
    return new Component(this.#rt, this, name);
  }
}

/** A load-balanced service of a namespace ("backend", "prefill", ...). */
export class Component {
  /** The component's name. */
  readonly name: string;
  /** The namespace it belongs to. */
  readonly namespace: Namespace;
  readonly #rt: RuntimeInternals;

  /** @internal use `namespace.component(name)` */
  constructor(rt: RuntimeInternals, namespace: Namespace, name: string) {
    this.#rt = rt;
    this.namespace = namespace;
    this.name = validateName("component", name);
  }

  /** `namespace/component`. */
  get path(): string {
    return `${this.namespace.name}/${this.name}`;
  }

  /** @internal the runtime this component belongs to */
  get runtimeInternals(): RuntimeInternals {
    return this.#rt;
  }

  /**
   * Declares the service (the seeds call this before serving). Records it in discovery
   * under the runtime's lease, so tools can list live components.
   */
  async createService(): Promise<Component> {
    if (this.#rt.shutdownSignal.aborted) {
      throw new RuntimeShutdownError("the runtime is shutting down");
    }
    await this.#rt.registerKey(
      componentKey(this.namespace.name, this.name, this.#rt.instanceId),
      JSON.stringify({
        namespace: this.namespace.name,
        component: this.name,
        instance_id: this.#rt.instanceId,
      }),
    );
    return this;
  }

  /** An endpoint of this component ("generate", "load_metrics", ...). */
  endpoint(name: string): Endpoint {
    return new Endpoint(this.#rt, this, name);
  }

  /**
   * The event-plane subject of this component's events named `name`:
   * `{slug(namespace_component)}.events.{name}`.
   */
  eventSubject(name: string): string {
    return componentEventSubject(this.namespace.name, this.name, name);
  }

  /**
   * Publishes `payload` as this component's event `name` ("kv_events", ...).
   * @throws {InvalidArgumentError} a malformed name (tokens split on ".", no wildcards)
   *
   * @example
   * ```ts ignore
   * await component.publishEvent("kv_events", new TextEncoder().encode("{}"));
   * ```
   */
  publishEvent(name: string, payload: Uint8Array): Promise<void> {
    try {
      return this.#rt.events.publish(validateSubject(this.eventSubject(name), false), payload);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Subscribes to this component's events `name` ("*" and a final ">" allowed). The
   * subscription ends on `unsubscribe()`, `options.signal`, or runtime shutdown.
   *
   * @example
   * ```ts ignore
   * for await (const { payload } of component.subscribeEvents("kv_events")) { ... }
   * ```
   */
  subscribeEvents(name: string, options?: EventSubscribeOptions): EventSubscription {
    return this.#rt.events.subscribe(this.eventSubject(name), options);
  }
}

/** Options of {@linkcode Endpoint.serveEndpoint}. */
export interface ServeEndpointOptions {
  /**
   * At shutdown, let in-flight requests finish (up to `shutdownTimeoutMs`) instead of
   * killing them (default true). Killed requests end without a sentinel, so callers may
   * migrate them.
   */
  gracefulShutdown?: boolean;
  /** Deadline for in-flight requests at a graceful shutdown, in ms (default 30000). */
  shutdownTimeoutMs?: number;
  /** Stops serving this endpoint when aborted. */
  signal?: AbortSignal;
}

/** An endpoint: what a worker serves and a client calls. */
export class Endpoint {
  /** The endpoint's name. */
  readonly name: string;
  /** The component it belongs to. */
  readonly component: Component;
  readonly #rt: RuntimeInternals;

  /** @internal use `component.endpoint(name)` */
  constructor(rt: RuntimeInternals, component: Component, name: string) {
    this.#rt = rt;
    this.component = component;
    this.name = validateName("endpoint", name);
  }

  /** `namespace/component/endpoint`. */
  get path(): string {
    return `${this.component.path}/${this.name}`;
  }

  /** This process's instance id for the endpoint. */
  get instanceId(): string {
    return this.#rt.instanceId;
  }

  /** The request-plane subject of this process's instance. */
  get subject(): string {
    return instanceSubject(
      this.component.namespace.name,
      this.component.name,
      this.name,
      this.#rt.instanceId,
    );
  }

  /**
   * Serves `handler` on this endpoint and registers the instance in discovery. Resolves
   * when the endpoint stops: the runtime shut down or `options.signal` aborted.
   *
   * @param handler `(request, context) => AsyncIterable`; the context argument is optional
   * @throws {RuntimeShutdownError} the runtime is shutting down
   *
   * @example
   * ```ts
   * import { DistributedRuntime } from "./distributed_runtime.ts";
   *
   * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
   * const endpoint = runtime.namespace("ns").component("backend").endpoint("generate");
   * const serving = endpoint.serveEndpoint(async function* (req: { text: string }) {
   *   for (const word of req.text.split(" ")) yield word;
   * });
   * await (await endpoint.client()).waitForInstances({ timeoutMs: 5000 }); // registered
   * // ... clients call it until the runtime shuts down (dynamoWorker does on SIGTERM).
   * await runtime.shutdown();
   * await serving; // resolved: the endpoint stopped
   * ```
   */
  async serveEndpoint(handler: Handler<never>, options: ServeEndpointOptions = {}): Promise<void> {
    if (typeof handler !== "function") {
      throw new InvalidArgumentError(
        `serveEndpoint needs a handler function, got ${typeof handler}`,
      );
    }
    const rt = this.#rt;
    if (rt.shutdownSignal.aborted) throw new RuntimeShutdownError("the runtime is shutting down");
    options.signal?.throwIfAborted();
    const ns = this.component.namespace.name;
    const key = instanceKey(ns, this.component.name, this.name, rt.instanceId);
    // On the TCP plane the worker's listener routes by endpoint path, as the reference's does.
    const tcp = rt.plane.kind === "tcp";
    const subject = tcp
      ? `${rt.instanceId}/${ns}/${this.component.name}/${this.name}`
      : this.subject;
    const log = rt.logger.child({ endpoint: this.path });
    const inflight = new Set<Promise<void>>();
    const contexts = new Set<Context>();
    const stats = rt.metrics.endpoint(ns, this.component.name, this.name);
    /**
     * Counts a request served without `#handle` (the reference's wire, or a caller in this
     * process) with the endpoint's others, until the function it returns is called.
     */
    const track = (ctx: Context): (tally: RequestTally) => void => {
      const start = performance.now();
      stats.begin(0);
      contexts.add(ctx);
      const { promise, resolve } = Promise.withResolvers<void>();
      inflight.add(promise);
      return (tally) => {
        contexts.delete(ctx);
        inflight.delete(promise);
        resolve();
        stats.end(start, tally);
      };
    };

    // The reference's framing too, on the TCP plane (the same listener: the reference's callers
    // reach this endpoint at the same address and path) and on NATS (the same subject).
    const reference = tcp || rt.plane.kind === "nats"
      ? referenceRequestServer({
        path: subject,
        handler: handler as Handler<never, unknown>,
        logger: log,
        callHomeTimeoutMs: rt.connectTimeoutMs,
        onContext: (ctx, ended) => {
          // Sizes are not tallied on this path.
          const done = track(ctx);
          void ended.then(() => done({ responseBytes: 0 }));
        },
      })
      : undefined;
    const onRequest = (payload: RequestPayload) => {
      if (reference && isTwoPartMessage(payload)) {
        // The reference's NATS request plane (acknowledged empty, as the plane does ours).
        try {
          reference.handle({ endpointPath: subject, headers: {}, payload });
        } catch (err) {
          log.warn("refusing a reference request", { error: String(err) });
        }
        return;
      }
      const task = this.#handle(payload, handler as Handler, log, contexts, stats);
      inflight.add(task);
      task.then(() => inflight.delete(task), (err) => {
        inflight.delete(task);
        log.error("request handling failed", { error: String(err) });
      });
    };
    const sub = await rt.plane.serve(subject, onRequest);
    // Callers in this process call the handler directly (runtime/local_call.ts); requests
    // traced here keep the frame path, which makes their spans.
    const withdrawLocal = rt.plane.kind === "local" && rt.tracing === undefined
      ? serveLocal((rt.plane as LocalRequestPlane).bus, subject, {
        handler: handler as Handler,
        logger: log,
        begin: track,
      })
      : undefined;
    const referenceSub = reference && tcp
      ? await (rt.plane as TcpRequestPlane).serveReference(subject, reference.handle)
      : undefined;
    // The reference's record (its key, its fields), our facts in `dynamo_deno`.
    const record: InstanceRecord = {
      type: "Endpoint",
      component: this.component.name,
      endpoint: this.name,
      namespace: ns,
      instance_id: rt.instanceId,
      transport: tcp
        ? { tcp: `${sub.address}/${subject}` }
        : rt.plane.kind === "nats"
        ? { nats_tcp: subject }
        : { local: subject },
      device_type: "cpu",
      request_plane_codec: "msgpack",
      dynamo_deno: { instance_id: rt.instanceId, wire: "dynamo" },
    };
    try {
      await rt.registerKey(key, encodeInstanceRecord(record));
    } catch (err) {
      withdrawLocal?.();
      await sub.unsubscribe();
      await referenceSub?.unsubscribe();
      throw new DynamoError(`cannot register ${this.path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    log.info("serving", { instance: rt.instanceId, subject });

    const stopped = Promise.withResolvers<void>();
    const stop = () => stopped.resolve();
    rt.shutdownSignal.addEventListener("abort", stop, { once: true });
    options.signal?.addEventListener("abort", stop, { once: true });
    // A shutdown that began while the endpoint was registering fired before these listeners.
    if (rt.shutdownSignal.aborted || options.signal?.aborted) stop();
    const done = (async () => {
      await stopped.promise;
      rt.shutdownSignal.removeEventListener("abort", stop);
      options.signal?.removeEventListener("abort", stop);
      // Leave discovery first so callers stop routing here, then stop taking requests.
      await rt.unregisterKey(key).catch((err) =>
        log.warn("unregister failed", { error: String(err) })
      );
      withdrawLocal?.();
      await sub.unsubscribe().catch(() => {});
      reference?.close();
      await referenceSub?.unsubscribe().catch(() => {});
      const graceful = options.gracefulShutdown ?? true;
      if (!graceful) { for (const ctx of contexts) ctx.kill(); }
      if (inflight.size > 0) {
        log.info("waiting for in-flight requests", { count: inflight.size, graceful });
        let timer: ReturnType<typeof setTimeout> | undefined;
        const deadline = new Promise<"timeout">((
          r,
        ) => (timer = setTimeout(() => r("timeout"), options.shutdownTimeoutMs ?? 30_000)));
        const result = await Promise.race([Promise.allSettled([...inflight]), deadline]);
        clearTimeout(timer);
        if (result === "timeout") {
          log.warn("in-flight requests outlived the shutdown deadline; killing them", {
            count: inflight.size,
          });
          for (const ctx of contexts) ctx.kill();
        }
      }
      log.info("stopped");
    })();
    rt.track(done);
    await done;
  }

  async #handle(
    payload: RequestPayload,
    handler: Handler,
    log: Logger,
    contexts: Set<Context>,
    stats: EndpointStats,
  ): Promise<void> {
    const start = performance.now();
    stats.begin(payload instanceof Uint8Array ? payload.byteLength : 0);
    const tally: RequestTally = { responseBytes: 0 };
    let ctx: Context | undefined;
    try {
      let header: RequestHeader;
      let body: unknown;
      try {
        ({ header, body } = decodeRequest(payload));
      } catch (err) {
        tally.error = "deserialization";
        log.warn("dropping malformed request", { error: String(err) });
        return;
      }
      let conn;
      try {
        conn = await this.#rt.plane.dial(header.connection_info);
      } catch (err) {
        tally.error = "response_stream";
        log.warn("cannot reach the caller", { request: header.id, error: String(err) });
        return;
      }
      await serveRequest(conn, header, body, handler, {
        logger: log,
        heartbeatMs: this.#rt.heartbeatMs,
        tracing: this.#rt.tracing,
        onContext: (c) => contexts.add(ctx = c),
        tally,
      });
    } finally {
      if (ctx) contexts.delete(ctx);
      stats.end(start, tally);
    }
  }

  /**
   * A client of this endpoint, already watching its instances.
   */
  async client(): Promise<Client> {
    const rt = this.#rt;
    if (rt.shutdownSignal.aborted) throw new RuntimeShutdownError("the runtime is shutting down");
    const client = new Client(
      {
        discovery: rt.discovery,
        plane: rt.plane,
        logger: rt.logger,
        connectTimeoutMs: rt.connectTimeoutMs,
        streamIdleTimeoutMs: rt.streamIdleTimeoutMs,
        trace: rt.routeTrace,
        // A dead worker leaves discovery within its lease TTL (taken to be this runtime's)
        // plus the time etcd takes to expire it and tell: skip a failed instance that long.
        downMs: Math.max(2000, (rt.leaseTtlSeconds + 2) * 1000),
      },
      this.component.namespace.name,
      this.component.name,
      this.name,
    );
    await client.start();
    rt.trackClient(client);
    return client;
  }
}
