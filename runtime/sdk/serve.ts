// Runs one service on a runtime: constructs the class with its configuration, connects its
// depends() fields, runs @asyncOnStart hooks, serves its endpoints, and at shutdown runs
// @asyncOnShutdown hooks. `dynamo serve` runs one of these per process.

import type { Context } from "../context.ts";
import type { DistributedRuntime } from "../distributed_runtime.ts";
import { DynamoError, InvalidArgumentError, TimeoutError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { instanceKey } from "../keys.ts";
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
  /**
   * Deadline for the endpoints to show up in discovery once they serve, in ms (default
   * 60000); past it the service stops and serveService throws a TimeoutError.
   */
  registerTimeoutMs?: number;
}

const DEFAULT_REGISTER_TIMEOUT_MS = 60_000;
/** How often serveService looks for its endpoints' instance keys in discovery. */
const REGISTER_POLL_MS = 20;

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

/** Resolves after `ms`, or at once when `signal` aborts; the timer never outlives it. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * Serves one `@service` class on `runtime` and resolves once every endpoint is registered
 * in discovery (so clients can find it). Sets {@linkcode dynamoContext} for the service.
 * When serving fails after the `@asyncOnStart` hooks ran (or `signal` aborts before the
 * service is ready), the endpoints stop and the `@asyncOnShutdown` hooks run before the
 * error is thrown, so what the start hooks opened is closed.
 *
 * @throws {ServiceDefinitionError} the class is not a service
 * @throws {Error} whatever the constructor or an `@asyncOnStart` hook threw, or the
 *   endpoints failed to start with
 * @throws {TimeoutError} the endpoints were not in discovery within `registerTimeoutMs`
 * @throws {unknown} `signal.reason` when `signal` aborted before the service was ready
 *
 * @example
 * ```ts ignore
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
  const signal = options.signal;
  signal?.throwIfAborted();
  const registerTimeoutMs = options.registerTimeoutMs ?? DEFAULT_REGISTER_TIMEOUT_MS;
  if (!(registerTimeoutMs > 0)) {
    throw new InvalidArgumentError(`registerTimeoutMs must be > 0, got ${registerTimeoutMs}`);
  }
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

  // Listening before the start hooks run, so an abort while they run is not missed.
  const stop = new AbortController();
  const onAbort = () => stop.abort();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    await call(meta.onStart, "start");
  } catch (err) {
    signal?.removeEventListener("abort", onAbort);
    throw err;
  }

  const paths = meta.endpoints.map((e) => `${settings.namespace}/${meta.name}/${e.name}`);
  const serving: Promise<void>[] = [];
  const stopped = () => Promise.allSettled(serving);
  try {
    signal?.throwIfAborted();
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
      await waitRegistered(
        runtime,
        meta.endpoints.map((ep) => ({
          path: `${settings.namespace}/${meta.name}/${ep.name}`,
          key: instanceKey(settings.namespace, meta.name, ep.name, runtime.instanceId),
        })),
        serving,
        stop.signal,
        registerTimeoutMs,
        meta.name,
      );
    }
    signal?.throwIfAborted();
  } catch (err) {
    // The start hooks ran: stop what is serving and let the shutdown hooks close what the
    // start hooks opened (an engine, a publisher), then report the original failure.
    stop.abort();
    await stopped();
    signal?.removeEventListener("abort", onAbort);
    for (const m of meta.onShutdown) {
      try {
        await call([m], "shutdown");
      } catch (hookErr: unknown) {
        log.error("shutdown hook failed after the service failed to start", {
          method: String(m),
          error: String(hookErr),
        });
      }
    }
    log.info("service stopped before it was ready", { error: String(err) });
    // Stopped by the caller: say so, rather than what stopping did to the endpoints.
    throw signal?.aborted ? signal.reason : err;
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
    const results = await stopped();
    signal?.removeEventListener("abort", onAbort);
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

/**
 * Waits until each endpoint's instance key is in discovery.
 * @throws {TimeoutError} not all of them within `timeoutMs`
 * @throws {Error} what an endpoint failed to start with
 * @throws {DynamoError} an endpoint stopped (the runtime shut down, `stop` aborted) first
 */
async function waitRegistered(
  runtime: DistributedRuntime,
  endpoints: { path: string; key: string }[],
  serving: Promise<void>[],
  stop: AbortSignal,
  timeoutMs: number,
  name: string,
): Promise<void> {
  // An endpoint's serveEndpoint settles only when it stopped or failed to start.
  const ended = Promise.race(serving).then(
    () => ({ error: new DynamoError(`${name} stopped before its endpoints were registered`) }),
    (error: unknown) => ({ error }),
  );
  const expired = new AbortController();
  const timer = setTimeout(() => expired.abort(), timeoutMs);
  const timedOut = new Promise<"timeout">((resolve) => {
    expired.signal.addEventListener("abort", () => resolve("timeout"), { once: true });
  });
  try {
    for (const { path, key } of endpoints) {
      for (;;) {
        // A discovery backend that stopped answering must not hold us past the deadline.
        const found = await Promise.race([
          runtime.discovery.get(key).then((v) => v !== undefined),
          ended,
          timedOut,
        ]);
        if (found === true) break;
        if (found === "timeout") {
          throw new TimeoutError(
            `${name}: ${path} was not registered in discovery within ${timeoutMs} ms ` +
              `(instance key ${key}); is the discovery backend reachable?`,
          );
        }
        if (typeof found === "object") throw found.error;
        if (stop.aborted) {
          // serveEndpoint settles soon after; its outcome names the cause.
          throw (await ended).error;
        }
        await pause(REGISTER_POLL_MS, expired.signal);
      }
    }
  } finally {
    clearTimeout(timer);
    expired.abort();
  }
}
