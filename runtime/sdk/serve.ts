// Runs one service on a runtime: constructs the class with its configuration, connects its
// depends() fields, runs @asyncOnStart hooks, serves its endpoints, and at shutdown runs
// @asyncOnShutdown hooks. `dynamo serve` runs one of these per process.

import type { Context } from "../context.ts";
import type { DistributedRuntime } from "../distributed_runtime.ts";
import { DynamoError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { instanceKey } from "../names.ts";
import { ServiceConfig } from "./config.ts";
import { RequestValidationError } from "./errors.ts";
import type { GraphNode } from "./graph.ts";
import {
  dependencyHandle,
  effectiveSettings,
  type EndpointMeta,
  requireServiceMeta,
  type ServiceClass,
  setDynamoContext,
} from "./service.ts";

/** Options of {@linkcode serveService}. */
export interface ServeServiceOptions {
  /**
   * Configuration (default: the process-wide `ServiceConfig.getInstance()`); when given, it
   * becomes the process-wide one, as dynamoContext does.
   */
  config?: ServiceConfig;
  /** The service's node of a resolved graph: dependencies link() removed are refused. */
  node?: GraphNode;
  /** Stops the service when aborted (the runtime's shutdown stops it too). */
  signal?: AbortSignal;
  /** Default: the runtime's logger. */
  logger?: Logger;
  /** Deadline for in-flight requests at shutdown, in ms (default 30000). */
  shutdownTimeoutMs?: number;
}

/** A service being served by {@linkcode serveService}. */
export interface ServingService {
  /** The service's (class) name. */
  readonly name: string;
  /** The constructed service object. */
  readonly instance: object;
  /** `namespace/name/endpoint` of each endpoint. */
  readonly endpoints: string[];
  /** Resolves when the endpoints stopped and the shutdown hooks ran. */
  readonly done: Promise<void>;
  /** Stops serving (shutdown hooks run) and waits for it. */
  stop(): Promise<void>;
}

function isAsyncIterable(v: unknown): v is AsyncIterable<unknown> {
  return typeof v === "object" && v !== null && Symbol.asyncIterator in v;
}

function endpointHandler(instance: object, path: string, ep: EndpointMeta) {
  const method = (instance as Record<PropertyKey, unknown>)[ep.method];
  if (typeof method !== "function") {
    throw new DynamoError(`${path}: the endpoint method ${String(ep.method)} is gone`);
  }
  return async function* (request: unknown, context: Context): AsyncGenerator<unknown> {
    let req = request;
    if (ep.request) {
      // Like Pydantic's model_validate_json: a JSON string request is parsed first.
      if (typeof req === "string") {
        try {
          req = JSON.parse(req);
        } catch {
          // validate the string itself
        }
      }
      const checked = ep.request.safeParse(req);
      if (!checked.success) {
        throw new RequestValidationError(
          path,
          checked.error.issues.map((i) => ({ path: i.path, message: i.message })),
        );
      }
      req = checked.data;
    }
    const out: unknown = method.call(instance, req, context);
    if (isAsyncIterable(out)) yield* out;
    else yield await out;
  };
}

/**
 * Serves one `@service` class on `runtime` and resolves once every endpoint is registered
 * in discovery (so clients can find it). Sets {@linkcode dynamoContext} for the service.
 *
 * @throws {ServiceDefinitionError} the class is not a service
 * @throws {Error} whatever the constructor or an `@asyncOnStart` hook threw
 *
 * @example
 * ```ts
 * const runtime = await DistributedRuntime.connect();
 * const backend = await serveService(Backend, runtime);
 * // ... later
 * await backend.stop();
 * ```
 */
export async function serveService(
  cls: ServiceClass,
  runtime: DistributedRuntime,
  options: ServeServiceOptions = {},
): Promise<ServingService> {
  const meta = requireServiceMeta(cls);
  const config = options.config ?? ServiceConfig.getInstance();
  const settings = effectiveSettings(cls, config);
  const log = (options.logger ?? runtime.logger).child({ service: meta.name });
  const component = runtime.namespace(settings.namespace).component(meta.name);
  setDynamoContext({ runtime, component, namespace: settings.namespace });

  // Code in the service reads ServiceConfig.getInstance() (and dynamoAddress() through it)
  // at any time, so the configuration it was started with becomes the process-wide one.
  if (options.config) ServiceConfig.setInstance(config);
  const instance = new (cls as new (params: Record<string, unknown>) => object)(
    config.params(meta.name),
  );
  const kept = options.node ? new Set(options.node.dependencies.map((d) => d.service)) : undefined;
  for (const value of Object.values(instance)) {
    const h = dependencyHandle(value);
    if (!h) continue;
    const target = requireServiceMeta(h.target).name;
    h.binding = {
      runtime,
      config,
      removedBy: kept && !kept.has(target) ? meta.name : undefined,
    };
  }

  const call = async (methods: (string | symbol)[], what: string) => {
    for (const m of methods) {
      const fn = (instance as Record<PropertyKey, unknown>)[m];
      if (typeof fn !== "function") continue;
      log.debug(`running ${what} hook`, { method: String(m) });
      await fn.call(instance);
    }
  };
  await call(meta.onStart, "start");

  const stop = new AbortController();
  const onAbort = () => stop.abort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  const paths = meta.endpoints.map((e) => `${settings.namespace}/${meta.name}/${e.name}`);
  const serving: Promise<void>[] = [];
  if (settings.enabled) {
    await component.createService();
    for (const ep of meta.endpoints) {
      const path = `${settings.namespace}/${meta.name}/${ep.name}`;
      serving.push(
        component.endpoint(ep.name).serveEndpoint(endpointHandler(instance, path, ep), {
          signal: stop.signal,
          shutdownTimeoutMs: options.shutdownTimeoutMs,
        }),
      );
    }
  }
  const stopped = Promise.allSettled(serving);
  // Registered = every instance key is in discovery (or an endpoint failed to start).
  const failed = Promise.race(serving.map((p) => p.then(() => "stopped" as const)));
  failed.catch(() => {});
  for (const ep of settings.enabled ? meta.endpoints : []) {
    const key = instanceKey(settings.namespace, meta.name, ep.name, runtime.instanceId);
    while ((await runtime.discovery.get(key)) === undefined) {
      const early = await Promise.race([
        failed.then((r) => r, (err: unknown) => err),
        new Promise((r) => setTimeout(r, 20, "poll")),
      ]);
      if (early !== "poll") {
        stop.abort();
        await stopped;
        if (early instanceof Error) throw early;
        throw new DynamoError(`${meta.name} stopped before its endpoints were registered`);
      }
    }
  }
  log.info("service ready", { endpoints: paths, instance: runtime.instanceId });

  const done = (async () => {
    if (serving.length === 0) {
      // Nothing served: run until stopped.
      await new Promise<void>((resolve) => {
        if (runtime.shutdownSignal.aborted || stop.signal.aborted) return resolve();
        runtime.shutdownSignal.addEventListener("abort", () => resolve(), { once: true });
        stop.signal.addEventListener("abort", () => resolve(), { once: true });
      });
    }
    const results = await stopped;
    options.signal?.removeEventListener("abort", onAbort);
    try {
      await call(meta.onShutdown, "shutdown");
    } finally {
      log.info("service stopped");
    }
    const failure = results.find((r) => r.status === "rejected");
    if (failure) throw (failure as PromiseRejectedResult).reason;
  })();
  done.catch(() => {});
  return {
    name: meta.name,
    instance,
    endpoints: paths,
    done,
    async stop() {
      stop.abort();
      await done;
    },
  };
}
