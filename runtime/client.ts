// A client of one endpoint: watches its instances and sends requests to them by
// round robin, at random, or to a named instance.

import { z } from "zod";
import { Context } from "./context.ts";
import type { Discovery } from "./discovery/mod.ts";
import { watchPrefix } from "./discovery/watch_prefix.ts";
import { CancelledError, DynamoError, NoInstancesError, TimeoutError } from "./errors.ts";
import type { Logger } from "./logger.ts";
import type { RouteTrace } from "./route_trace.ts";
import { instancePrefix } from "./keys.ts";
import { instanceRecordSchema } from "./names.ts";
import { hurryStream, openStream, type OpenStreamOptions, type ResponseStream } from "./stream.ts";
import { callLocal, localEndpoint } from "./local_call.ts";
import { idSet, idsWithin, type IdWatch, waitForIds } from "./_id_set.ts";
import type { LocalRequestPlane } from "./transport/local.ts";
import type { RequestPlane } from "./transport/mod.ts";
import { natsConnectionOf } from "./transport/tcp.ts";
import { ReferenceClient } from "./reference/client.ts";
import { ReferenceWorkerRefusedError } from "./reference/errors.ts";
import { parseReferenceInstance, type ReferenceInstance } from "./reference/instances.ts";
import type { ReferencePreprocessedRequest } from "./reference/request.ts";

/** Options of a request sent through a {@linkcode Client}. */
export interface GenerateOptions {
  /** The request's context (its id becomes the request id); stopping it stops the worker. */
  context?: Context;
  /** Aborting cancels the request (the worker's context is stopped). */
  signal?: AbortSignal;
  /**
   * roundRobin/random: choose only among these instance ids (e.g. those serving one model); a
   * set is read as it is, without a copy.
   */
  instances?: readonly string[] | ReadonlySet<string>;
}

/** Options of {@linkcode Client.waitForInstances}. */
export interface WaitForInstancesOptions {
  /** Stops waiting when aborted. */
  signal?: AbortSignal;
  /** Deadline in ms (default: none besides `signal`). */
  timeoutMs?: number;
  /** How many instances to wait for (default 1). */
  count?: number;
  /** Count only these instance ids (e.g. those a model entry names). */
  among?: readonly string[] | ReadonlySet<string>;
}

/** @internal What a client needs from its runtime. */
export interface ClientDeps {
  discovery: Discovery;
  plane: RequestPlane;
  logger: Logger;
  connectTimeoutMs: number;
  /**
   * How long an instance reported down is skipped, in ms (default 2000). Longer than the
   * workers' lease TTL, a dead instance stays skipped until discovery drops it.
   */
  downMs?: number;
  /** Told of every routing decision and of instances dropped or skipped (off when unset). */
  trace?: RouteTrace;
  /** Idle deadline of a response stream (ms; default the stream's own, 10 000). */
  streamIdleTimeoutMs?: number;
}

/**
 * Once an instance has left discovery, how long its open streams may stay silent (ms): a
 * worker draining on its way out sends a heartbeat every second; a stopped one whose lease
 * expired sends nothing and is given up on this soon.
 */
const GONE_IDLE_MS = 3000;

/** How long an instance that did not answer is skipped before discovery is trusted again. */
const DOWN_MS = 2000;

/**
 * A client of one endpoint. Get one with `endpoint.client()`.
 *
 * @example
 * ```ts
 * import { DistributedRuntime } from "./distributed_runtime.ts";
 *
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const endpoint = runtime.namespace("ns").component("backend").endpoint("generate");
 * const serving = endpoint.serveEndpoint(async function* (req: { text: string }) {
 *   yield* req.text.split(" ");
 * });
 * const client = await endpoint.client();
 * await client.waitForInstances({ timeoutMs: 5000 });
 * for await (const item of await client.generate({ text: "hello world" })) console.log(item);
 * await runtime.shutdown();
 * await serving;
 * ```
 */
export class Client {
  /** `namespace/component/endpoint`. */
  readonly path: string;
  readonly #deps: ClientDeps;
  readonly #prefix: string;
  readonly #instances = new Map<string, string>(); // id -> subject
  /** Instances that speak the reference's wire only (its own workers): id -> where. */
  readonly #referenceWorkers = new Map<string, ReferenceInstance>();
  /** Calls those, made on first use. */
  #referenceClient: ReferenceClient | undefined;
  readonly #down = new Map<string, number>(); // id -> skip until (ms)
  #ids: string[] = [];
  /** Streams open to each instance, hurried when the instance leaves discovery. */
  readonly #open = new Map<string, Set<ResponseStream<unknown>>>();
  #next = 0;
  readonly #waiters = new Set<() => void>();
  readonly #stop = new AbortController();
  /** What `waitForInstances` watches. */
  readonly #idWatch: IdWatch;
  #watching: Promise<void> | undefined;

  /** @internal use `endpoint.client()` */
  constructor(deps: ClientDeps, namespace: string, component: string, endpoint: string) {
    this.#deps = deps;
    this.path = `${namespace}/${component}/${endpoint}`;
    this.#prefix = instancePrefix(namespace, component, endpoint);
    this.#idWatch = {
      ids: () => this.#ids,
      waiters: this.#waiters,
      closed: this.#stop.signal,
      path: this.path,
      noun: "instance(s)",
    };
  }

  /** @internal Starts watching; resolves once the current instances are known. */
  start(): Promise<void> {
    let synced!: () => void;
    let failed!: (err: unknown) => void;
    const ready = new Promise<void>((resolve, reject) => ((synced = resolve), (failed = reject)));
    this.#watching = this.#watch(synced).then(
      () => failed(new DynamoError(`watch of ${this.path} ended before it synced`)),
      (err) => failed(err),
    );
    return ready;
  }

  async #watch(synced: () => void): Promise<void> {
    const prefix = this.#prefix;
    // Ours first (mux or our envelope); else a worker on the reference's wire only, read at
    // the reference client's own door.
    const schema = instanceRecordSchema.transform((r) => ({ ...r, reference: undefined }))
      .or(
        z.object({ key: z.string().min(1).max(1024), value: z.unknown() }).transform(
          (r, ctx) => {
            try {
              const reference = parseReferenceInstance(prefix + r.key, JSON.stringify(r.value));
              return { id: r.key, subject: "", reference };
            } catch (err) {
              ctx.issues.push({ code: "custom", message: (err as Error).message, input: r });
              return z.NEVER;
            }
          },
        ),
      );
    const events = watchPrefix(this.#deps.discovery, this.#prefix, {
      schema,
      signal: this.#stop.signal,
      logger: this.#deps.logger.child({ endpoint: this.path }),
      what: "instance record",
    });
    for await (const ev of events) {
      if (ev.type === "synced") {
        // A (re)started watch's listing replaces the instances whole; what discovery lists
        // now is trusted over an earlier "down" report, as a put is.
        const snapshot = new Map<string, string>();
        this.#referenceWorkers.clear();
        for (const { id, subject, reference } of ev.records.values()) {
          snapshot.set(id, subject);
          if (reference) this.#referenceWorkers.set(id, reference);
        }
        if (this.#deps.trace) this.#traceResync(snapshot);
        this.#instances.clear();
        for (const [id, subject] of snapshot) {
          this.#instances.set(id, subject);
          this.#down.delete(id);
        }
        synced();
      } else if (ev.type === "put") {
        const { id, subject, reference } = ev.value;
        if (this.#deps.trace && !this.#instances.has(id)) this.#trace("up", id);
        this.#instances.set(id, subject);
        if (reference) this.#referenceWorkers.set(id, reference);
        else this.#referenceWorkers.delete(id);
        this.#down.delete(id);
      } else {
        const { id } = ev.previous;
        if (this.#deps.trace && this.#instances.has(id)) this.#trace("gone", id);
        this.#instances.delete(id);
        this.#referenceWorkers.delete(id);
        this.#down.delete(id);
        for (const stream of this.#open.get(id) ?? []) hurryStream(stream, GONE_IDLE_MS);
      }
      this.#ids = [...this.#instances.keys()].sort();
      for (const wake of [...this.#waiters]) wake();
    }
  }

  #trace(event: "route" | "down" | "gone" | "up", instance: string): void {
    this.#deps.trace?.({ event, endpoint: this.path, instance });
  }

  /** Traces what a (re)started watch's snapshot adds to and drops from the known instances. */
  #traceResync(snapshot: Map<string, string>): void {
    for (const id of this.#instances.keys()) if (!snapshot.has(id)) this.#trace("gone", id);
    for (const id of snapshot.keys()) if (!this.#instances.has(id)) this.#trace("up", id);
  }

  /** Ids of the instances known now, sorted. */
  instanceIds(): string[] {
    return [...this.#ids];
  }

  /**
   * Resolves with the instance ids once at least `count` (default 1) are known.
   * @throws {TimeoutError} `timeoutMs` passed first
   * @throws {RuntimeShutdownError} the client is closed first
   */
  waitForInstances(options: WaitForInstancesOptions = {}): Promise<string[]> {
    return waitForIds(this.#idWatch, options);
  }

  /** Sends to the next instance in round-robin order (the default routing). */
  generate<T = unknown>(
    request: unknown,
    options: GenerateOptions = {},
  ): Promise<ResponseStream<T>> {
    return this.roundRobin<T>(request, options);
  }

  /** Sends to the next instance in round-robin order. */
  roundRobin<T = unknown>(
    request: unknown,
    options: GenerateOptions = {},
  ): Promise<ResponseStream<T>> {
    return this.#routed<T>(request, options, (ids) => ids[this.#next++ % ids.length]!);
  }

  /** Sends to an instance picked uniformly at random. */
  random<T = unknown>(request: unknown, options: GenerateOptions = {}): Promise<ResponseStream<T>> {
    return this.#routed<T>(request, options, (ids) => ids[Math.floor(Math.random() * ids.length)]!);
  }

  /**
   * Sends to one named instance.
   * @throws {NoInstancesError} the instance is not (or no longer) known
   */
  direct<T = unknown>(
    request: unknown,
    instanceId: string,
    options: GenerateOptions = {},
  ): Promise<ResponseStream<T>> {
    const subject = this.#instances.get(instanceId);
    if (subject === undefined) return Promise.reject(new NoInstancesError(this.path, instanceId));
    return this.#send<T>(subject, instanceId, request, options);
  }

  #routed<T>(
    request: unknown,
    options: GenerateOptions,
    pick: (ids: string[]) => string,
  ): Promise<ResponseStream<T>> {
    // The first try, without the bookkeeping of retries (most requests need no other): one
    // async step fewer per request; `#send` retries elsewhere if this instance did not answer.
    const ids = options.instances === undefined
      ? this.#available()
      : idsWithin(this.#available(), idSet(options.instances));
    if (ids.length === 0) return Promise.reject(new NoInstancesError(this.path));
    const id = pick(ids);
    return this.#send<T>(this.#instances.get(id)!, id, request, options, pick);
  }

  /**
   * Tries instances not in `tried` (and in `options.instances`, when given) until one takes
   * the request. An instance that did not answer (died before discovery noticed) is skipped
   * and the request, never accepted by anyone, goes to another one.
   */
  async #retry<T>(
    request: unknown,
    options: GenerateOptions,
    pick: (ids: string[]) => string,
    tried: Set<string>,
  ): Promise<ResponseStream<T>> {
    const allowed = options.instances === undefined ? undefined : idSet(options.instances);
    for (;;) {
      const ids = this.#available().filter((id) =>
        !tried.has(id) && (allowed === undefined || allowed.has(id))
      );
      if (ids.length === 0) throw new NoInstancesError(this.path);
      const id = pick(ids);
      tried.add(id);
      try {
        return await this.#send<T>(this.#instances.get(id)!, id, request, options);
      } catch (err) {
        if (!(err instanceof NoInstancesError)) throw err;
      }
    }
  }

  /** Instance ids minus those recently reported down: where a request may go now. */
  availableInstanceIds(): string[] {
    return [...this.#available()];
  }

  #available(): string[] {
    if (this.#down.size === 0) return this.#ids;
    const now = Date.now();
    const up = this.#ids.filter((id) => {
      const until = this.#down.get(id);
      if (until === undefined) return true;
      if (until > now) return false;
      this.#down.delete(id);
      return true;
    });
    // Every instance reported down is more likely a problem on this side (the connection
    // came back after an outage) than all of them dead: try them rather than refuse.
    return up.length > 0 ? up : this.#ids;
  }

  /**
   * Sends to one instance. With `retryWith` (a router's first try), an instance that did not
   * answer is skipped and the request goes to another one picked by it.
   */
  async #send<T>(
    subject: string,
    id: string,
    request: unknown,
    options: GenerateOptions,
    retryWith?: (ids: string[]) => string,
  ): Promise<ResponseStream<T>> {
    if (this.#deps.trace) this.#trace("route", id);
    const reference = this.#referenceWorkers.get(id);
    if (reference) {
      try {
        return await this.#sendReference<T>(reference, id, request, options);
      } catch (err) {
        if (retryWith === undefined || !(err instanceof NoInstancesError)) throw err;
        return await this.#retry(request, options, retryWith, new Set([id]));
      }
    }
    try {
      // Assigned once, but read by onEnd, which may in principle run before the assignment.
      // deno-lint-ignore prefer-const
      let stream: ResponseStream<T> | undefined;
      let ended = false;
      const streamOptions: OpenStreamOptions = {
        context: options.context,
        signal: options.signal,
        connectTimeoutMs: this.#deps.connectTimeoutMs,
        idleTimeoutMs: this.#deps.streamIdleTimeoutMs,
        onEnd: () => {
          ended = true;
          if (stream) this.#untrack(id, stream);
        },
      };
      // An endpoint served in this process is called directly, unless the request is traced.
      const plane = this.#deps.plane;
      const local = plane.kind === "local" && options.context?.trace === undefined
        ? localEndpoint((plane as LocalRequestPlane).bus, subject)
        : undefined;
      stream = local !== undefined
        ? await callLocal<T>(local, subject, id, request, streamOptions)
        : await openStream<T>(plane, subject, id, request, streamOptions);
      if (!ended) this.#track(id, stream);
      return stream;
    } catch (err) {
      if (err instanceof NoInstancesError) {
        this.reportInstanceDown(id);
        if (retryWith !== undefined) {
          return await this.#retry(request, options, retryWith, new Set([id]));
        }
        throw new NoInstancesError(this.path, id);
      }
      // No acknowledgement or no call-back in time: a dead or stuck worker that discovery
      // has not dropped yet. Other requests should not wait on it meanwhile.
      if (err instanceof TimeoutError) this.reportInstanceDown(id);
      throw err;
    }
  }

  /**
   * A request to a worker on the reference's wire only (the reference's own workers): its
   * framing, acknowledgement and call-home stream, through a {@linkcode ReferenceClient}. The
   * request goes as it is (a PreprocessedRequest, for the reference's engines), each engine
   * output comes back as an item; stopping the context sends the reference's "stop".
   */
  async #sendReference<T>(
    instance: ReferenceInstance,
    id: string,
    request: unknown,
    options: GenerateOptions,
  ): Promise<ResponseStream<T>> {
    this.#referenceClient ??= ReferenceClient.create({
      logger: this.#deps.logger,
      connectTimeoutMs: this.#deps.connectTimeoutMs,
      ackTimeoutMs: this.#deps.connectTimeoutMs,
      callHomeTimeoutMs: this.#deps.connectTimeoutMs,
      idleTimeoutMs: this.#deps.streamIdleTimeoutMs,
      // Workers on the reference's NATS request plane are sent to on the runtime's connection.
      nats: natsConnectionOf(this.#deps.plane),
    });
    const context = options.context ?? new Context();
    const abort = new AbortController();
    const unlink = context.onStop(() => abort.abort());
    const onAbort = () => context.kill();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    const done = () => {
      unlink();
      options.signal?.removeEventListener("abort", onAbort);
    };
    const outputs = this.#referenceClient.generate(
      instance,
      request as ReferencePreprocessedRequest,
      { signal: abort.signal },
    );
    // The first output (after the ack and the call home) before the stream is handed over:
    // a worker that refuses or cannot be reached is reported as the other planes report it.
    let first: IteratorResult<unknown>;
    try {
      first = await outputs.next();
    } catch (err) {
      done();
      if (err instanceof ReferenceWorkerRefusedError) {
        this.reportInstanceDown(id);
        throw new NoInstancesError(this.path, id);
      }
      if (err instanceof TimeoutError) this.reportInstanceDown(id);
      throw err;
    }
    const stream: ResponseStream<T> = {
      context,
      instanceId: id,
      async *[Symbol.asyncIterator]() {
        try {
          if (first.done) return;
          yield first.value as T;
          for await (const out of outputs) yield out as T;
        } catch (err) {
          // Stopped here: the worker was told, and the stream ends as ours do.
          if (err instanceof CancelledError && context.isStopped()) return;
          throw err;
        } finally {
          done();
          await outputs.return(undefined);
        }
      },
    };
    return stream;
  }

  #track(id: string, stream: ResponseStream<unknown>): void {
    let open = this.#open.get(id);
    if (!open) this.#open.set(id, open = new Set());
    open.add(stream);
  }

  #untrack(id: string, stream: ResponseStream<unknown>): void {
    const open = this.#open.get(id);
    if (open?.delete(stream) && open.size === 0) this.#open.delete(id);
  }

  /** Skips `instanceId` for a while (it failed to answer); discovery will confirm or clear it. */
  reportInstanceDown(instanceId: string): void {
    if (this.#deps.trace) this.#trace("down", instanceId);
    this.#down.set(instanceId, Date.now() + (this.#deps.downMs ?? DOWN_MS));
  }

  /** Stops watching. */
  async close(): Promise<void> {
    this.#stop.abort();
    for (const wake of [...this.#waiters]) wake();
    await this.#watching;
    await this.#referenceClient?.close();
  }
}
