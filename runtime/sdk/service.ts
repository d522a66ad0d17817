// The SDK's decorators (seed 004): @service on a class, @endpoint / @asyncOnStart /
// @asyncOnShutdown on its methods, depends() fields that become clients of other services,
// link() edits of the graph, and dynamoContext for code running inside a service.

import type { Client } from "../client.ts";
import type { Component } from "../component.ts";
import type { Context } from "../context.ts";
import type { DistributedRuntime } from "../distributed_runtime.ts";
import { DynamoError } from "../errors.ts";
import { validateName } from "../names.ts";
import { isPlainObject, mergeConfig, ServiceConfig } from "./config.ts";
import { ServiceDefinitionError, type ValidationIssue } from "./errors.ts";

/** Resources a service asks for (Kubernetes requests/limits; `gpu` also matters locally). */
export interface ServiceResources {
  /** GPUs per replica (`nvidia.com/gpu`). */
  gpu?: number | string;
  /** CPU per replica, Kubernetes notation ("10", "500m"). */
  cpu?: number | string;
  /** Memory per replica, Kubernetes notation ("20Gi"). */
  memory?: string;
}

/** The `dynamo` settings of a service. */
export interface DynamoServiceSettings {
  /** Namespace the service registers under (default "dynamo"). */
  namespace?: string;
  /** Serve the endpoints through the distributed runtime (default true). */
  enabled?: boolean;
}

/** Options of {@linkcode service}: the decorator's settings, overridable by `ServiceArgs`. */
export interface ServiceOptions {
  /** Where the service registers, and whether it is served at all. */
  dynamo?: DynamoServiceSettings;
  /** What each replica needs (GPUs, CPUs, memory), for deployment. */
  resources?: ServiceResources;
  /** Replicas (processes) `dynamo serve` starts; Kubernetes replicas (default 1). */
  workers?: number;
}

/** A service's settings after decorator, YAML and CLI are merged. */
export interface EffectiveServiceSettings {
  /** Component name: the class name. */
  name: string;
  /** Namespace the service registers under. */
  namespace: string;
  /** Whether the endpoints are served through the distributed runtime. */
  enabled: boolean;
  /** Replicas (processes) to start. */
  workers: number;
  /** What each replica needs. */
  resources: ServiceResources;
}

/** What {@linkcode RequestSchema.safeParse} returns: the parsed request or its problems. */
export type RequestParseResult =
  | { readonly success: true; readonly data: unknown }
  | { readonly success: false; readonly error: { readonly issues: readonly ValidationIssue[] } };

/**
 * A request schema as `@endpoint` uses it: a zod schema (`z.object({...})`) is one. Declared
 * here so the public API names no zod type.
 */
export interface RequestSchema {
  /** Checks (and may transform) a request without throwing. */
  safeParse(data: unknown): RequestParseResult;
}

/** Options of {@linkcode endpoint}. */
export interface EndpointOptions {
  /** Endpoint name (default: the method's name). */
  name?: string;
  /** Validates (and may transform) each request before the method sees it. */
  request?: RequestSchema;
}

/** @internal What the decorators record about one endpoint. */
export interface EndpointMeta {
  name: string;
  method: string | symbol;
  request: RequestSchema | undefined;
}

/** @internal What the decorators record about a service class. */
export interface ServiceMeta {
  name: string;
  options: ServiceOptions;
  endpoints: EndpointMeta[];
  onStart: (string | symbol)[];
  onShutdown: (string | symbol)[];
  /** Set by link(): the only dependencies kept in the graph. */
  links: ServiceClass[] | undefined;
}

/** A class decorated with {@linkcode service}. */
// deno-lint-ignore ban-types
export type ServiceClass = Function;

const SERVICE_META = new WeakMap<ServiceClass, ServiceMeta>();
const PENDING = Symbol("dynamo.sdk.members");

interface PendingMembers {
  endpoints: EndpointMeta[];
  onStart: (string | symbol)[];
  onShutdown: (string | symbol)[];
}

/** Member records of this class's metadata, copying the parent class's on first write. */
function pending(metadata: DecoratorMetadataObject): PendingMembers {
  const bag = metadata as Record<PropertyKey, unknown>;
  if (!Object.hasOwn(bag, PENDING)) {
    const inherited = bag[PENDING] as PendingMembers | undefined;
    bag[PENDING] = {
      endpoints: [...(inherited?.endpoints ?? [])],
      onStart: [...(inherited?.onStart ?? [])],
      onShutdown: [...(inherited?.onShutdown ?? [])],
    };
  }
  return bag[PENDING] as PendingMembers;
}

/** The metadata of a service class, or undefined for any other value. */
export function serviceMeta(cls: unknown): ServiceMeta | undefined {
  return typeof cls === "function" ? SERVICE_META.get(cls) : undefined;
}

/**
 * The metadata of a service class.
 * @throws {ServiceDefinitionError} it is not a `@service` class
 */
export function requireServiceMeta(cls: unknown, what = "value"): ServiceMeta {
  const meta = serviceMeta(cls);
  if (!meta) {
    const name = typeof cls === "function" ? cls.name || "(anonymous class)" : String(cls);
    throw new ServiceDefinitionError(`${what} ${name} is not a @service class`);
  }
  return meta;
}

function checkOptions(name: string, options: ServiceOptions): void {
  const raw: unknown = options;
  if (!isPlainObject(raw)) {
    throw new ServiceDefinitionError(
      `@service on ${name}: options must be an object, got ${JSON.stringify(options)}`,
    );
  }
  if (
    options.workers !== undefined && (!Number.isInteger(options.workers) || options.workers < 1)
  ) {
    throw new ServiceDefinitionError(
      `@service on ${name}: workers must be a whole number >= 1, got ${
        JSON.stringify(options.workers)
      }`,
    );
  }
  if (options.dynamo?.namespace !== undefined) {
    validateName(`@service on ${name}: namespace`, options.dynamo.namespace);
  }
}

/** What `@service(options)` returns: the class decorator itself. */
export type ServiceDecorator = (value: ServiceClass, context: ClassDecoratorContext) => void;

/**
 * Declares a class as a Dynamo service: its `@endpoint` methods are served as
 * `namespace/ClassName/endpoint`, and `dynamo serve` starts `workers` processes of it.
 *
 * @example
 * ```ts
 * @service({ dynamo: { namespace: "demo" }, resources: { gpu: 1 }, workers: 2 })
 * class Worker {
 *   @endpoint()
 *   async *generate(req: { text: string }) {
 *     yield req.text;
 *   }
 * }
 * ```
 */
export function service(options?: ServiceOptions): ServiceDecorator;
/** Declares a class as a Dynamo service with default settings (`@service` without arguments). */
export function service(value: ServiceClass, context: ClassDecoratorContext): void;
export function service(
  optionsOrValue: ServiceOptions | ServiceClass = {},
  context?: ClassDecoratorContext,
): ServiceDecorator | void {
  if (typeof optionsOrValue === "function") return decorateService({})(optionsOrValue, context!);
  return decorateService(optionsOrValue);
}

function decorateService(options: ServiceOptions): ServiceDecorator {
  return (value, context) => {
    if (context.kind !== "class") {
      throw new ServiceDefinitionError(`@service decorates classes, not a ${context.kind}`);
    }
    const name = validateName("service class", value.name);
    checkOptions(name, options);
    const members = pending(context.metadata);
    const seen = new Set<string>();
    for (const ep of members.endpoints) {
      if (seen.has(ep.name)) {
        throw new ServiceDefinitionError(`${name} has two endpoints named ${ep.name}`);
      }
      seen.add(ep.name);
    }
    SERVICE_META.set(value, {
      name,
      options: structuredClone(options),
      endpoints: members.endpoints,
      onStart: members.onStart,
      onShutdown: members.onShutdown,
      links: undefined,
    });
    // `Worker.dynamoAddress()` and `Worker.link(Backend)` (DESIGN §3). A decorator cannot
    // change the class's type: service_statics.d.ts types them for this repository; the
    // published package documents the functions dynamoAddress() and link() instead.
    Object.defineProperties(value, {
      dynamoAddress: {
        value: () => dynamoAddress(value),
        configurable: true,
        writable: true,
      },
      link: {
        value: <T extends ServiceClass>(next: T) => link(value, next),
        configurable: true,
        writable: true,
      },
    });
  };
}

/** What `@endpoint(options)` returns: the method decorator itself. */
export type EndpointDecorator = (value: unknown, context: ClassMethodDecoratorContext) => void;

function checkMethod(decorator: string, context: ClassMethodDecoratorContext): void {
  if (context.kind !== "method" || context.static || context.private) {
    throw new ServiceDefinitionError(
      `${decorator} decorates public instance methods, not ${
        context.static ? "a static " : context.private ? "a private " : "a "
      }${context.kind} (${String(context.name)})`,
    );
  }
}

/**
 * Marks an async-generator method as an endpoint (seed 000's `@dynamo_endpoint`). The name
 * defaults to the method's; `request` is a zod schema that every request must match.
 *
 * @example
 * ```ts
 * import { z } from "zod";
 *
 * @service({ dynamo: { namespace: "demo" } })
 * class Chat {
 *   @endpoint({ name: "my_chat_completions_endpoint", request: z.object({ text: z.string() }) })
 *   async *generate(req: { text: string }) {
 *     yield req.text;
 *   }
 * }
 * ```
 */
export function endpoint(options?: EndpointOptions): EndpointDecorator;
/** Marks a method as an endpoint named after it (`@endpoint` without arguments). */
export function endpoint(value: unknown, context: ClassMethodDecoratorContext): void;
export function endpoint(
  optionsOrValue: EndpointOptions | unknown = {},
  context?: ClassMethodDecoratorContext,
): EndpointDecorator | void {
  if (context !== undefined) return decorateEndpoint({})(optionsOrValue, context);
  return decorateEndpoint((optionsOrValue ?? {}) as EndpointOptions);
}

function decorateEndpoint(options: EndpointOptions): EndpointDecorator {
  if (options.request !== undefined && typeof options.request.safeParse !== "function") {
    throw new ServiceDefinitionError(`@endpoint: request must be a zod schema`);
  }
  return (_value, context) => {
    checkMethod("@endpoint", context);
    const name = validateName("endpoint", options.name ?? String(context.name));
    const members = pending(context.metadata);
    members.endpoints = members.endpoints.filter((e) => e.method !== context.name);
    members.endpoints.push({ name, method: context.name, request: options.request });
  };
}

/**
 * Runs the method (awaited) after the service is constructed and before its endpoints
 * are served: async set-up such as loading a model or connecting to another service.
 */
export function asyncOnStart(_value: unknown, context: ClassMethodDecoratorContext): void {
  checkMethod("@asyncOnStart", context);
  const members = pending(context.metadata);
  if (!members.onStart.includes(context.name)) members.onStart.push(context.name);
}

/** Runs the method (awaited) after the service's endpoints stopped, at shutdown. */
export function asyncOnShutdown(_value: unknown, context: ClassMethodDecoratorContext): void {
  checkMethod("@asyncOnShutdown", context);
  const members = pending(context.metadata);
  if (!members.onShutdown.includes(context.name)) members.onShutdown.push(context.name);
}

/**
 * A service's settings after configuration: decorator < `ServiceArgs` of `config`.
 * @throws {ServiceDefinitionError} the class is not a service, or the merged settings are bad
 */
export function effectiveSettings(
  cls: ServiceClass,
  config: ServiceConfig = ServiceConfig.getInstance(),
): EffectiveServiceSettings {
  const meta = requireServiceMeta(cls);
  const merged = mergeConfig<Record<string, unknown>>(
    meta.options as Record<string, unknown>,
    config.serviceArgs(meta.name),
  ) as ServiceOptions;
  checkOptions(`${meta.name} (with ServiceArgs)`, merged);
  return {
    name: meta.name,
    namespace: merged.dynamo?.namespace ?? "dynamo",
    enabled: merged.dynamo?.enabled ?? true,
    workers: merged.workers ?? 1,
    resources: merged.resources ?? {},
  };
}

/**
 * `[namespace, component]` of a service (seed 004's `dynamo_address()`), with the
 * namespace after `ServiceArgs` overrides. `@service` also gives the class a static
 * `Worker.dynamoAddress()` (typed by runtime/sdk/service_statics.d.ts in this repository).
 * @throws {ServiceDefinitionError} the class is not a service
 */
export function dynamoAddress(
  cls: ServiceClass,
  config: ServiceConfig = ServiceConfig.getInstance(),
): [string, string] {
  const s = effectiveSettings(cls, config);
  return [s.namespace, s.name];
}

/**
 * Keeps only the dependencies of `cls` on linked services (each call adds one) when the
 * graph is resolved; returns `next` so calls chain. `@service` also gives the class a static
 * `Worker.link(Backend)` (typed by runtime/sdk/service_statics.d.ts in this repository).
 * @throws {ServiceDefinitionError} either class is not a service
 */
export function link<T extends ServiceClass>(cls: ServiceClass, next: T): T {
  const meta = requireServiceMeta(cls, "link() on");
  requireServiceMeta(next, "link() target");
  meta.links ??= [];
  if (!meta.links.includes(next)) meta.links.push(next);
  return next;
}

/** Forgets every link() of `cls` (its graph follows all of its depends() again). */
export function unlink(cls: ServiceClass): void {
  requireServiceMeta(cls).links = undefined;
}

// ---------------------------------------------------------------------------------------
// depends()

/** Options of one call through a {@linkcode depends} client. */
export interface DependencyCallOptions {
  /** The caller's context: stopping it stops the remote request. */
  context?: Context;
  /** Cancels the call. */
  signal?: AbortSignal;
  /** How long to wait for an instance of the other service, in ms (default 30000). */
  timeoutMs?: number;
}

/** The method of a {@linkcode DependencyClient} that calls endpoint method `F` remotely. */
export type EndpointCall<F> = F extends
  (request: infer R, ...rest: never[]) => AsyncIterable<infer I> | Promise<infer I>
  ? (request: R, options?: DependencyCallOptions) => AsyncIterable<I>
  : never;

/** The client a `depends(Other)` field becomes: one method per endpoint of `Other`. */
export type DependencyClient<T> = {
  readonly [
    K in keyof T as T[K] extends (...args: never[]) => AsyncIterable<unknown> ? K : never
  ]: EndpointCall<T[K]>;
};

/** @internal How a running service wires a dependency to its runtime. */
export interface DependencyBinding {
  runtime: DistributedRuntime;
  config: ServiceConfig;
  /** Set when link() removed this dependency from the graph. */
  removedBy?: string;
}

/** @internal The state behind one depends() field. */
export class DependencyHandle {
  readonly target: ServiceClass;
  binding: DependencyBinding | undefined;
  readonly #clients = new Map<string, Promise<Client>>();

  constructor(target: ServiceClass) {
    this.target = target;
  }

  client(endpointName: string): Promise<Client> {
    const b = this.binding;
    const meta = requireServiceMeta(this.target);
    if (!b) {
      throw new DynamoError(
        `depends(${meta.name}) is not connected: the service is not running under ` +
          `dynamo serve (or serveService)`,
      );
    }
    if (b.removedBy) {
      throw new DynamoError(
        `depends(${meta.name}) is not part of the graph: ${b.removedBy}.link() removed it`,
      );
    }
    let c = this.#clients.get(endpointName);
    if (!c) {
      const [ns, component] = dynamoAddress(this.target, b.config);
      c = b.runtime.namespace(ns).component(component).endpoint(endpointName).client();
      c.catch(() => this.#clients.delete(endpointName));
      this.#clients.set(endpointName, c);
    }
    return c;
  }

  async *call(
    endpointName: string,
    request: unknown,
    options: DependencyCallOptions = {},
  ): AsyncGenerator<unknown> {
    const client = await this.client(endpointName);
    await client.waitForInstances({
      signal: options.signal ?? options.context?.signal,
      timeoutMs: options.timeoutMs ?? 30_000,
    });
    yield* await client.generate(request, { context: options.context, signal: options.signal });
  }
}

const HANDLE = Symbol("dynamo.sdk.dependency");

/** @internal The handle behind a depends() client, or undefined for other values. */
export function dependencyHandle(value: unknown): DependencyHandle | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  return (value as { [HANDLE]?: DependencyHandle })[HANDLE];
}

/** @internal Collects depends() calls while a class is constructed to find its graph edges. */
export const probe: { active: DependencyHandle[] | undefined } = { active: undefined };

/**
 * Declares a dependency on another service (a field initializer). `dynamo serve` starts
 * the other service too, and the field becomes a client whose methods are its endpoints.
 *
 * @example
 * ```ts
 * @service({ dynamo: { namespace: "demo" } })
 * class Backend {
 *   @endpoint()
 *   async *generate(req: { text: string }) {
 *     yield* req.text.split(" ");
 *   }
 * }
 *
 * @service({ dynamo: { namespace: "demo" } })
 * class Middle {
 *   backend = depends(Backend);
 *   @endpoint()
 *   async *generate(req: { text: string }) {
 *     for await (const item of this.backend.generate(req)) yield item;
 *   }
 * }
 * ```
 * @throws {ServiceDefinitionError} `target` is not a `@service` class
 */
export function depends<T extends object>(
  target: abstract new (...args: never[]) => T,
): DependencyClient<T> {
  const meta = requireServiceMeta(target, "depends() on");
  const handle = new DependencyHandle(target);
  probe.active?.push(handle);
  const client: Record<PropertyKey, unknown> = {};
  for (const ep of meta.endpoints) {
    const call = (request: unknown, options?: DependencyCallOptions) =>
      handle.call(ep.name, request, options);
    client[ep.method] = call;
    if (!(ep.name in client)) client[ep.name] = call;
  }
  Object.defineProperty(client, HANDLE, { value: handle });
  return Object.freeze(client) as DependencyClient<T>;
}

// ---------------------------------------------------------------------------------------
// dynamoContext

/** @internal Thrown by dynamoContext while a class is constructed only to find its graph. */
export class ProbeAbort extends Error {
  constructor() {
    super("dynamoContext is not available while the graph is being resolved");
    this.name = "ProbeAbort";
  }
}

/** What a service process knows about itself (seed 004's `dynamo_context`). */
export interface DynamoContextValue {
  /** The runtime the service process runs on. */
  runtime: DistributedRuntime;
  /** The service's component. */
  component: Component;
  /** The service's namespace name. */
  namespace: string;
}

let current: DynamoContextValue | undefined;

/** @internal Sets (or clears) what dynamoContext returns. */
export function setDynamoContext(value: DynamoContextValue | undefined): void {
  current = value;
}

function contextValue<K extends keyof DynamoContextValue>(key: K): DynamoContextValue[K] {
  if (probe.active) throw new ProbeAbort();
  if (!current) {
    throw new DynamoError(
      `dynamoContext.${key} is only available inside a service started by dynamo serve ` +
        `(or serveService), from its constructor on`,
    );
  }
  return current[key];
}

/**
 * The runtime, component and namespace of the service this process runs; available from
 * the service's constructor on.
 *
 * @example
 * ```ts
 * @service({ dynamo: { namespace: "demo" } })
 * class Backend {
 *   @endpoint()
 *   async *generate(req: { text: string }) {
 *     yield req.text;
 *   }
 * }
 *
 * @service({ dynamo: { namespace: "demo" } })
 * class Frontend {
 *   @asyncOnStart
 *   async init() {
 *     const [ns, name] = dynamoAddress(Backend); // the seeds' Backend.dynamoAddress()
 *     const client = await dynamoContext.runtime.namespace(ns).component(name)
 *       .endpoint("generate").client();
 *     await client.waitForInstances({ timeoutMs: 30_000 });
 *   }
 * }
 * ```
 */
export const dynamoContext: Readonly<DynamoContextValue> = Object.freeze({
  get runtime() {
    return contextValue("runtime");
  },
  get component() {
    return contextValue("component");
  },
  get namespace() {
    return contextValue("namespace");
  },
});
