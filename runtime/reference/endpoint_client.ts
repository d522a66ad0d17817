// One reference (ai-dynamo 1.6.1) endpoint as our pipeline sees an endpoint: its instances
// followed in etcd, requests sent by round robin, at random or to a named instance, answers as
// ResponseStreams whose context stops the worker. An adapter over ReferenceClient, so that the
// route, migration and cancellation stages serve reference workers unchanged.

import { z } from "zod";
import { Context } from "../context.ts";
import type { Discovery } from "../discovery/types.ts";
import { idSet, type IdWatch, waitForIds } from "../_id_set.ts";
import { watchPrefix } from "../discovery/watch_prefix.ts";
import { CancelledError, DynamoError, NoInstancesError, TimeoutError } from "../errors.ts";
import { type Logger, silentLogger } from "../logger.ts";
import type { ResponseStream } from "../stream.ts";
import type { ReferenceClient } from "./client.ts";
import { ReferenceWorkerRefusedError } from "./errors.ts";
import {
  parseReferenceInstance,
  REFERENCE_INSTANCES_PREFIX,
  type ReferenceEndpoint,
  type ReferenceInstance,
} from "./instances.ts";
import type { ReferenceEngineOutput, ReferencePreprocessedRequest } from "./request.ts";

/** How requests and answers are translated between the caller's types and the reference's. */
export interface ReferenceCodec<Out> {
  /** Builds the worker's PreprocessedRequest from the caller's request (throws on bad input). */
  toRequest(request: unknown): ReferencePreprocessedRequest;
  /** Turns one of the worker's outputs into the caller's item. */
  fromOutput(output: ReferenceEngineOutput): Out;
  /** True for an item that ends the sequence (the rest of the stream is drained, not stopped). */
  isLast(item: Out): boolean;
}

/** Options of {@linkcode ReferenceEndpointClient.start}. */
export interface ReferenceEndpointClientOptions<Out> {
  /** Speaks to the workers (shared by every endpoint of a frontend). */
  client: ReferenceClient;
  /** Translates requests and outputs. */
  codec: ReferenceCodec<Out>;
  /** How long an instance reported down is skipped (ms, default 2,000). */
  downMs?: number;
  /** Hears of watch failures. */
  logger?: Logger;
}

/** Options of a request sent through a {@linkcode ReferenceEndpointClient}. */
export interface ReferenceSendOptions {
  /** The request's context: stopping it sends the worker "stop". */
  context?: Context;
  /** Aborting cancels the request. */
  signal?: AbortSignal;
  /** roundRobin/random: choose only among these instance ids. */
  instances?: readonly string[] | ReadonlySet<string>;
}

/** The reference endpoint's instances, followed in discovery, and requests to them. */
export class ReferenceEndpointClient<Out = ReferenceEngineOutput> {
  /** `namespace/component/endpoint`. */
  readonly path: string;
  /** What kind of workers this client reaches (for the model layer's routers). */
  readonly kind = "reference";
  readonly #discovery: Discovery;
  readonly #prefix: string;
  readonly #options: ReferenceEndpointClientOptions<Out>;
  readonly #instances = new Map<string, ReferenceInstance>();
  readonly #down = new Map<string, number>();
  #ids: string[] = [];
  #next = 0;
  readonly #waiters = new Set<() => void>();
  readonly #stop = new AbortController();
  /** What `waitForInstances` watches. */
  readonly #idWatch: IdWatch;
  #watching: Promise<void> | undefined;

  private constructor(
    discovery: Discovery,
    endpoint: ReferenceEndpoint,
    options: ReferenceEndpointClientOptions<Out>,
  ) {
    this.#discovery = discovery;
    this.path = `${endpoint.namespace}/${endpoint.component}/${endpoint.endpoint}`;
    this.#prefix = `${REFERENCE_INSTANCES_PREFIX}${this.path}/`;
    this.#options = options;
    this.#idWatch = {
      ids: () => this.#ids,
      waiters: this.#waiters,
      closed: this.#stop.signal,
      path: this.path,
      noun: "reference instance(s)",
    };
  }

  /**
   * Starts following the endpoint's reference instances.
   *
   * @param discovery the reference's etcd
   * @param endpoint namespace, component, endpoint
   * @param options the reference client, the codec, logger
   * @returns the client, once the current instances are listed
   *
   * @example
   * ```ts ignore
   * const workers = await ReferenceEndpointClient.start(discovery,
   *   { namespace: "dynamo", component: "backend", endpoint: "generate" },
   *   { client: ReferenceClient.create(), codec });
   * for await (const out of await workers.roundRobin(request)) console.log(out);
   * ```
   */
  static async start<Out>(
    discovery: Discovery,
    endpoint: ReferenceEndpoint,
    options: ReferenceEndpointClientOptions<Out>,
  ): Promise<ReferenceEndpointClient<Out>> {
    const c = new ReferenceEndpointClient(discovery, endpoint, options);
    await c.#start();
    return c;
  }

  #start(): Promise<void> {
    const ready = Promise.withResolvers<void>();
    const prefix = this.#prefix;
    // Our own workers' records share the prefix; they are not reference records and are
    // skipped (silently: they are not malformed, only not ours to read here).
    const schema = z.object({ key: z.string(), value: z.unknown() }).transform(
      ({ key, value }) => parseReferenceInstance(prefix + key, JSON.stringify(value)),
    );
    this.#watching = (async () => {
      for await (
        const ev of watchPrefix(this.#discovery, prefix, { schema, signal: this.#stop.signal })
      ) {
        if (ev.type === "synced") {
          this.#instances.clear();
          this.#down.clear();
          for (const i of ev.records.values()) this.#instances.set(i.instanceId, i);
          ready.resolve();
        } else if (ev.type === "put") {
          this.#instances.set(ev.value.instanceId, ev.value);
          this.#down.delete(ev.value.instanceId);
        } else {
          this.#instances.delete(ev.previous.instanceId);
          this.#down.delete(ev.previous.instanceId);
        }
        this.#ids = [...this.#instances.keys()].sort();
        for (const wake of [...this.#waiters]) wake();
      }
      ready.reject(new DynamoError(`watch of reference ${this.path} ended before it synced`));
    })().catch((err) => {
      ready.reject(err);
      (this.#options.logger ?? silentLogger).warn("reference instance watch ended", {
        endpoint: this.path,
        error: err instanceof Error ? err.message : String(err),
      });
    });
    return ready.promise;
  }

  /** The reference client the requests go through (for the endpoint's other calls). */
  get referenceClient(): ReferenceClient {
    return this.#options.client;
  }

  /** Ids of the instances known now, sorted. */
  instanceIds(): string[] {
    return [...this.#ids];
  }

  /**
   * Resolves once at least `count` (default 1) instances, among `among` when given, are known.
   * @throws {TimeoutError} `timeoutMs` passed first
   * @throws {RuntimeShutdownError} the client is closed first
   */
  waitForInstances(
    options: {
      signal?: AbortSignal;
      timeoutMs?: number;
      count?: number;
      among?: readonly string[] | ReadonlySet<string>;
    } = {},
  ): Promise<string[]> {
    return waitForIds(this.#idWatch, options);
  }

  /** Sends to the next instance in round-robin order. */
  roundRobin<T = Out>(
    request: unknown,
    options: ReferenceSendOptions = {},
  ): Promise<ResponseStream<T>> {
    return this.#routed<T>(request, options, (ids) => ids[this.#next++ % ids.length]!);
  }

  /** Sends to an instance picked uniformly at random. */
  random<T = Out>(
    request: unknown,
    options: ReferenceSendOptions = {},
  ): Promise<ResponseStream<T>> {
    return this.#routed<T>(request, options, (ids) => ids[Math.floor(Math.random() * ids.length)]!);
  }

  /**
   * Sends to one named instance.
   * @throws {NoInstancesError} the instance is not known or refused the connection
   */
  direct<T = Out>(
    request: unknown,
    instanceId: string,
    options: ReferenceSendOptions = {},
  ): Promise<ResponseStream<T>> {
    const instance = this.#instances.get(instanceId);
    if (instance === undefined) {
      return Promise.reject(new NoInstancesError(this.path, instanceId));
    }
    return this.#send<T>(instance, request, options);
  }

  /** Instance ids minus those recently reported down: where a request may go now. */
  availableInstanceIds(): string[] {
    return [...this.#available()];
  }

  /** Skips `instanceId` for a while (its stream broke); discovery will confirm or clear it. */
  reportInstanceDown(instanceId: string): void {
    this.#down.set(instanceId, Date.now() + (this.#options.downMs ?? 2000));
  }

  /** Stops following the instances (the reference client is the caller's to close). */
  async close(): Promise<void> {
    this.#stop.abort();
    for (const wake of [...this.#waiters]) wake();
    await this.#watching;
  }

  #available(): string[] {
    if (this.#down.size === 0) return this.#ids;
    const now = Date.now();
    const up = this.#ids.filter((id) => (this.#down.get(id) ?? 0) <= now);
    return up.length > 0 ? up : this.#ids;
  }

  async #routed<T>(
    request: unknown,
    options: ReferenceSendOptions,
    pick: (ids: string[]) => string,
  ): Promise<ResponseStream<T>> {
    // A worker that refuses the connection (it died before its lease expired) is skipped and
    // the request, never taken by anyone, goes to another one.
    const tried = new Set<string>();
    const allowed = options.instances === undefined ? undefined : idSet(options.instances);
    for (;;) {
      const ids = this.#available().filter((id) =>
        !tried.has(id) && (allowed === undefined || allowed.has(id))
      );
      if (ids.length === 0) throw new NoInstancesError(this.path);
      const id = pick(ids);
      tried.add(id);
      try {
        return await this.#send<T>(this.#instances.get(id)!, request, options);
      } catch (err) {
        if (!(err instanceof NoInstancesError)) throw err;
      }
    }
  }

  async #send<T>(
    instance: ReferenceInstance,
    request: unknown,
    options: ReferenceSendOptions,
  ): Promise<ResponseStream<T>> {
    const context = options.context ?? new Context();
    const signal = options.signal
      ? AbortSignal.any([options.signal, context.signal])
      : context.signal;
    const { codec, client } = this.#options;
    const body = codec.toRequest(request);
    const outputs = client.generate(instance, body, { signal });
    // Opened once the first output is in: failures before it (refused, no call home, an error
    // prologue) reject here, as an opening stream of our own plane does.
    let first: IteratorResult<ReferenceEngineOutput>;
    try {
      first = await outputs.next();
    } catch (err) {
      if (err instanceof ReferenceWorkerRefusedError) {
        this.reportInstanceDown(instance.instanceId);
        throw Object.assign(new NoInstancesError(this.path, instance.instanceId), { cause: err });
      }
      if (err instanceof TimeoutError) this.reportInstanceDown(instance.instanceId);
      if (signal.aborted && !(err instanceof CancelledError)) {
        throw new CancelledError("request cancelled", { cause: err });
      }
      throw err;
    }
    return {
      context,
      instanceId: instance.instanceId,
      [Symbol.asyncIterator]: () => items<T>(outputs, first, codec as ReferenceCodec<unknown>),
    };
  }
}

async function* items<T>(
  outputs: AsyncGenerator<ReferenceEngineOutput, void, undefined>,
  first: IteratorResult<ReferenceEngineOutput>,
  codec: ReferenceCodec<unknown>,
): AsyncGenerator<T, void, undefined> {
  let last = false;
  let done = false;
  try {
    let r = first;
    while (!r.done) {
      const item = codec.fromOutput(r.value);
      last = codec.isLast(item);
      yield item as T;
      r = await outputs.next();
    }
    done = true;
  } finally {
    if (!done) {
      if (last) {
        // The sequence is over and only the worker's end marker is left: read it in the
        // background (the client's idle deadline bounds it) rather than tell the worker to stop.
        (async () => {
          for await (const _ of { [Symbol.asyncIterator]: () => outputs }) { /* drain */ }
        })().catch(() => {});
      } else {
        // Stops the worker (the reference's "stop" control message).
        await outputs.return().catch(() => {});
      }
    }
  }
}
