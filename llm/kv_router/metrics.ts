/**
 * Worker load metrics for KV routing. {@linkcode KvMetricsPublisher} serves a
 * `load_metrics` endpoint (which puts the worker in discovery and answers scrapes) and
 * pushes every update on the component's `load_metrics` event subject.
 * {@linkcode KvMetricsAggregator} keeps the latest push per worker, scrapes the endpoint
 * of workers it has not heard from yet, and reports only workers whose endpoint is live:
 * a worker that leaves discovery leaves the metrics.
 *
 * Pushed and served metrics are JSON `{worker_id, ...ForwardPassMetrics}`.
 *
 * @module
 */

import { z } from "zod";
import type { Client } from "../../runtime/client.ts";
import { withDeadline } from "../../runtime/_deadline.ts";
import type { Component } from "../../runtime/component.ts";
import { DynamoError, InvalidArgumentError, TimeoutError } from "../../runtime/errors.ts";
import type { EventSubscription } from "../../runtime/events/mod.ts";
import type { Logger } from "../../runtime/logger.ts";
import {
  type AggregatedMetrics,
  type EndpointKvMetrics,
  type ForwardPassMetrics,
  LOAD_METRICS,
} from "./protocols.ts";

/** Metrics as {@linkcode KvMetricsPublisher.publish} takes them (camelCase). */
export interface KvMetrics {
  /** Requests being served. */
  requestActiveSlots: number;
  /** Requests the worker can serve at once. */
  requestTotalSlots: number;
  /** KV cache blocks in use. */
  kvActiveBlocks: number;
  /** KV cache blocks in all. */
  kvTotalBlocks: number;
  /** Requests queued, not yet scheduled. */
  numRequestsWaiting: number;
  /** Fraction of the GPU KV cache in use (0..1). */
  gpuCacheUsagePerc: number;
  /** Fraction of prompt blocks found in the prefix cache (0..1). */
  gpuPrefixCacheHitRate: number;
  /** Milliseconds until the forward pass in flight ends (0: idle), for pass timing. */
  passMsLeft?: number;
  /** Prompt tokens prefilled in that pass. */
  passPrefillTokens?: number;
  /** Milliseconds to copy one KV block from a peer, when the worker can fetch. */
  kvFetchMsPerBlock?: number;
  /** Milliseconds to copy one KV block from host memory to the device, when it has a host tier. */
  kvOnboardMsPerBlock?: number;
  /** KV blocks held in the worker's host-memory tier, when it has one. */
  kvHostBlocks?: number;
  /** KV blocks that tier holds at most. */
  kvHostTotalBlocks?: number;
}

/** The optional fields, camelCase and on the wire. */
const OPTIONAL: [keyof KvMetrics, keyof ForwardPassMetrics][] = [
  ["passMsLeft", "pass_ms_left"],
  ["passPrefillTokens", "pass_prefill_tokens"],
  ["kvFetchMsPerBlock", "kv_fetch_ms_per_block"],
  ["kvOnboardMsPerBlock", "kv_onboard_ms_per_block"],
  ["kvHostBlocks", "kv_host_blocks"],
  ["kvHostTotalBlocks", "kv_host_total_blocks"],
];

const FIELDS: [keyof KvMetrics, keyof ForwardPassMetrics][] = [
  ["requestActiveSlots", "request_active_slots"],
  ["requestTotalSlots", "request_total_slots"],
  ["kvActiveBlocks", "kv_active_blocks"],
  ["kvTotalBlocks", "kv_total_blocks"],
  ["numRequestsWaiting", "num_requests_waiting"],
  ["gpuCacheUsagePerc", "gpu_cache_usage_perc"],
  ["gpuPrefixCacheHitRate", "gpu_prefix_cache_hit_rate"],
];

function toWire(m: KvMetrics | number[]): ForwardPassMetrics {
  const out = {} as ForwardPassMetrics;
  FIELDS.forEach(([camel, snake], i) => {
    const v = Array.isArray(m) ? m[i] : m[camel];
    if (typeof v !== "number" || !Number.isFinite(v)) {
      throw new InvalidArgumentError(`${camel} must be a finite number, got ${v}`);
    }
    out[snake] = v;
  });
  if (!Array.isArray(m)) {
    for (const [camel, snake] of OPTIONAL) {
      const v = m[camel];
      if (v === undefined) continue;
      if (typeof v !== "number" || !(v >= 0) || v === Infinity) {
        throw new InvalidArgumentError(`${camel} must be a finite number >= 0, got ${v}`);
      }
      out[snake] = v;
    }
  }
  return out;
}

/**
 * An engine's wire-named load ({@linkcode ForwardPassMetrics}) as {@linkcode KvMetricsPublisher.publish} takes it.
 *
 * @param m the engine's metrics
 * @returns the same numbers, camelCase
 * @example
 * ```ts ignore
 * publisher.publish(fromForwardPassMetrics(engine.metrics()));
 * ```
 */
export function fromForwardPassMetrics(m: ForwardPassMetrics): KvMetrics {
  const out = {} as KvMetrics;
  for (const [camel, snake] of FIELDS) out[camel] = m[snake]!;
  for (const [camel, snake] of OPTIONAL) if (m[snake] !== undefined) out[camel] = m[snake];
  return out;
}

/**
 * Publishes one worker's load metrics.
 *
 * @example
 * ```ts
 * import { DistributedRuntime, KvMetricsPublisher } from "../../mod.ts";
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const component = runtime.namespace("demo").component("backend");
 * const metrics = new KvMetricsPublisher();
 * await metrics.createEndpoint(component);
 * metrics.publish({ requestActiveSlots: 0, requestTotalSlots: 1024, kvActiveBlocks: 0,
 *   kvTotalBlocks: 1024, numRequestsWaiting: 0, gpuCacheUsagePerc: 0, gpuPrefixCacheHitRate: 0 });
 * metrics.close();
 * await runtime.shutdown();
 * ```
 */
export class KvMetricsPublisher {
  #latest: EndpointKvMetrics | undefined;
  #component: Component | undefined;
  #log: Logger | undefined;
  #stop = new AbortController();

  /** The latest metrics published (undefined before the first). */
  get latest(): EndpointKvMetrics | undefined {
    return this.#latest;
  }

  /**
   * Serves the `load_metrics` endpoint on `component` and starts pushing updates there.
   * Resolves once the endpoint is in discovery.
   * @throws {RuntimeShutdownError} the runtime is shutting down
   */
  async createEndpoint(component: Component): Promise<void> {
    const rt = component.runtimeInternals;
    this.#component = component;
    this.#log = rt.logger.child({ component: component.path, kv_metrics: rt.instanceId });
    const endpoint = component.endpoint(LOAD_METRICS);
    const latest = () => this.#latest ?? null;
    const serving = endpoint.serveEndpoint(async function* () {
      yield latest();
    }, { signal: this.#stop.signal });
    serving.catch((err) => this.#log?.warn("load_metrics endpoint failed", { error: String(err) }));
    // Resolve once the instance is visible, so aggregators started after us find it.
    const client: Client = await endpoint.client();
    try {
      await Promise.race([
        client.waitForInstances({ among: [rt.instanceId], timeoutMs: rt.connectTimeoutMs }),
        serving.then(() => {
          throw new InvalidArgumentError("the load_metrics endpoint stopped before it registered");
        }),
      ]);
    } finally {
      await client.close();
    }
    if (this.#latest) this.#push(this.#latest = { ...this.#latest, worker_id: rt.instanceId });
  }

  /**
   * Records the worker's current metrics and pushes them to aggregators. Takes an object,
   * or the seven numbers in the seeds' positional order.
   * @throws {InvalidArgumentError} a missing or non-numeric field
   */
  publish(metrics: KvMetrics): void;
  /** Records the worker's current metrics, given as the seven numbers in the seeds' order. */
  publish(
    requestActiveSlots: number,
    requestTotalSlots: number,
    kvActiveBlocks: number,
    kvTotalBlocks: number,
    numRequestsWaiting: number,
    gpuCacheUsagePerc: number,
    gpuPrefixCacheHitRate: number,
  ): void;
  publish(first: KvMetrics | number, ...rest: number[]): void {
    const wire = toWire(typeof first === "number" ? [first, ...rest] : first);
    const workerId = this.#component?.runtimeInternals.instanceId ?? "";
    this.#latest = { worker_id: workerId, ...wire };
    if (this.#component) this.#push(this.#latest);
  }

  /** Stops serving the endpoint. */
  close(): void {
    this.#stop.abort();
  }

  #push(m: EndpointKvMetrics): void {
    const component = this.#component!;
    // The worker's own /metrics (system server) shows the same load.
    component.runtimeInternals.metrics.setKvStats(
      component.namespace.name,
      component.name,
      m.worker_id,
      m,
    );
    const bytes = new TextEncoder().encode(JSON.stringify(m));
    component.publishEvent(LOAD_METRICS, bytes).catch((err) =>
      this.#log?.debug("cannot push load metrics", { error: String(err) })
    );
  }
}

/** Options of {@linkcode KvMetricsAggregator}. */
export interface KvMetricsAggregatorOptions {
  /** Deadline of a scrape of one worker, in ms (default 2000). */
  scrapeTimeoutMs?: number;
  /**
   * How long {@linkcode KvMetricsAggregator.getMetrics} waits for the aggregator to start
   * (its client of the workers' `load_metrics` endpoint and its event subscription), in
   * ms (default 5000).
   */
  readyTimeoutMs?: number;
}

/** Longest worker id a metrics message may carry. */
const MAX_WORKER_ID = 1024;
/** Workers whose pushed metrics are kept between two getMetrics calls, at most. */
const MAX_WORKERS = 10_000;

const count = z.int().nonnegative();
const fraction = z.number().min(0).max(1);
/** Milliseconds a worker may claim: finite, at most an hour. */
const millis = z.number().min(0).max(3_600_000);

/**
 * Load metrics as they come off the network: counts are whole numbers >= 0, fractions are
 * in [0, 1], nothing is NaN or infinite (JSON's `1e999` parses to Infinity), so nothing a
 * worker sends can make a routing cost NaN. Unknown fields are dropped.
 */
export const endpointKvMetricsSchema = z.object({
  worker_id: z.string().max(MAX_WORKER_ID),
  request_active_slots: count,
  request_total_slots: count,
  kv_active_blocks: count,
  kv_total_blocks: count,
  num_requests_waiting: count,
  gpu_cache_usage_perc: fraction,
  gpu_prefix_cache_hit_rate: fraction,
  pass_ms_left: millis.optional(),
  pass_prefill_tokens: count.optional(),
  kv_fetch_ms_per_block: millis.optional(),
  kv_onboard_ms_per_block: millis.optional(),
  kv_host_blocks: count.optional(),
  kv_host_total_blocks: count.optional(),
});

/**
 * Checks one load-metrics message from a worker (a push or a scrape answer).
 *
 * @param value the parsed JSON
 * @returns the metrics, typed and holding only the known fields, or the reason they are invalid
 */
export function parseLoadMetrics(
  value: unknown,
): { ok: true; metrics: EndpointKvMetrics } | { ok: false; reason: string } {
  const r = endpointKvMetricsSchema.safeParse(value);
  if (r.success) return { ok: true, metrics: r.data };
  const issue = r.error.issues[0];
  return {
    ok: false,
    reason: issue ? `${issue.path.join(".") || "(root)"}: ${issue.message}` : "invalid",
  };
}

/**
 * Collects the load metrics of a component's workers.
 *
 * @example
 * ```ts
 * import { DistributedRuntime, KvMetricsAggregator } from "../../mod.ts";
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const aggregator = new KvMetricsAggregator(runtime.namespace("ns").component("backend"));
 * for (const e of (await aggregator.getMetrics()).endpoints) {
 *   console.log(e.worker_id, e.kv_active_blocks);
 * }
 * await aggregator.close();
 * await runtime.shutdown();
 * ```
 */
export class KvMetricsAggregator {
  readonly #component: Component;
  readonly #latest = new Map<string, EndpointKvMetrics>();
  /** When each worker's latest metrics came (performance.now()), to age its pass timing. */
  readonly #receivedAt = new Map<string, number>();
  #sub!: EventSubscription;
  /** The subscription's `ready` rejected: the next getMetrics() subscribes again. */
  #subFailed = false;
  #client!: Promise<Client>;
  #clientFailed = false;
  #consuming!: Promise<void>;
  readonly #scrapeTimeoutMs: number;
  readonly #readyTimeoutMs: number;
  readonly #log: Logger;
  #closed = false;
  #invalid = 0;
  readonly #warned = new Set<string>();

  /**
   * Creates an aggregator of the load metrics a component's workers publish.
   *
   * @param component the workers' component
   * @param options scrape and start-up deadlines
   */
  constructor(component: Component, options: KvMetricsAggregatorOptions = {}) {
    const rt = component.runtimeInternals;
    this.#component = component;
    this.#scrapeTimeoutMs = options.scrapeTimeoutMs ?? 2000;
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 5000;
    this.#log = rt.logger.child({ component: component.path, kv_metrics_aggregator: true });
    this.#subscribe();
    this.#connect();
  }

  /**
   * The latest metrics of every live worker, sorted by worker id. Workers not heard from
   * yet are scraped; those that do not answer in time are left out.
   *
   * @returns one entry per live worker that publishes metrics
   * @throws {TimeoutError} the aggregator did not start within `readyTimeoutMs` (the
   *   message names what it waited for); a later call waits again
   * @throws {DynamoError} its start failed (the message says how); a later call retries
   */
  async getMetrics(): Promise<AggregatedMetrics> {
    const client = await this.#ready();
    const live = new Set(client.instanceIds());
    for (const id of this.#latest.keys()) {
      if (live.has(id)) continue;
      this.#latest.delete(id);
      this.#receivedAt.delete(id);
    }
    await Promise.all(
      [...live].filter((id) => !this.#latest.has(id)).map((id) => this.#scrape(client, id)),
    );
    const endpoints = [...live].map((id) => this.#latest.get(id)).filter((m) => m !== undefined)
      .sort((a, b) => (a.worker_id < b.worker_id ? -1 : a.worker_id > b.worker_id ? 1 : 0));
    return { endpoints };
  }

  /**
   * The latest metrics a worker pushed, without waiting (undefined when none came yet).
   *
   * @param workerId the worker's instance id
   */
  latest(workerId: string): EndpointKvMetrics | undefined {
    return this.#latest.get(workerId);
  }

  /**
   * The worker's pass in flight as its latest metrics told it, aged by the time since they
   * came: milliseconds left (0 once it should have ended), the prompt tokens in it, and its whole
   * length (workers announce a pass as it starts).
   *
   * @param workerId the worker's instance id
   * @param now the clock the arrival times were read on (default performance.now())
   * @returns undefined when the worker publishes no pass timing (or nothing yet)
   */
  passTiming(
    workerId: string,
    now: number = performance.now(),
  ): { msLeft: number; prefillTokens: number; passMs: number } | undefined {
    const m = this.#latest.get(workerId);
    if (m?.pass_ms_left === undefined) return undefined;
    const age = now - (this.#receivedAt.get(workerId) ?? now);
    return {
      msLeft: Math.max(0, m.pass_ms_left - age),
      prefillTokens: m.pass_prefill_tokens ?? 0,
      // Announced as the pass starts: then the time left is the whole pass.
      passMs: m.pass_ms_left,
    };
  }

  /** Stops listening. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#sub.unsubscribe();
    await this.#consuming;
    await (await this.#client.catch(() => undefined))?.close();
  }

  #subscribe(): void {
    const rt = this.#component.runtimeInternals;
    const sub = this.#component.subscribeEvents(LOAD_METRICS, { signal: rt.shutdownSignal });
    this.#sub = sub;
    this.#subFailed = false;
    (sub.ready ?? Promise.resolve()).catch(() => {
      if (this.#sub === sub) this.#subFailed = true;
    });
    this.#consuming = this.#consume(sub);
    rt.track(this.#consuming);
  }

  #connect(): void {
    const client = this.#component.endpoint(LOAD_METRICS).client();
    this.#client = client;
    this.#clientFailed = false;
    client.catch(() => {
      if (this.#client === client) this.#clientFailed = true;
    });
  }

  /** The client, once it and the subscription are up, retrying what failed before. */
  async #ready(): Promise<Client> {
    if (this.#closed) throw new DynamoError(`the KvMetricsAggregator of ${this.#path} is closed`);
    if (this.#subFailed) {
      await this.#sub.unsubscribe();
      await this.#consuming;
      this.#subscribe();
    }
    if (this.#clientFailed) this.#connect();
    const sub = this.#sub;
    let waiting = `the client of ${this.#path}'s ${LOAD_METRICS} endpoint (discovery)`;
    const start = async () => {
      let client: Client;
      try {
        client = await this.#client;
      } catch (err) {
        throw new DynamoError(
          `the KvMetricsAggregator of ${this.#path} cannot watch its workers: ${errorText(err)}`,
          { cause: err },
        );
      }
      waiting = `the ${LOAD_METRICS} event subscription of ${this.#path}`;
      try {
        await sub.ready;
      } catch (err) {
        throw new DynamoError(
          `the KvMetricsAggregator of ${this.#path} cannot subscribe to ${LOAD_METRICS} ` +
            `events: ${errorText(err)}`,
          { cause: err },
        );
      }
      return client;
    };
    const ms = this.#readyTimeoutMs;
    return await withDeadline(
      start(),
      ms,
      () =>
        new TimeoutError(
          `the KvMetricsAggregator of ${this.#path} was not ready after ${ms} ms: ` +
            `still waiting for ${waiting}`,
        ),
    );
  }

  get #path(): string {
    return this.#component.path;
  }

  /** Load metrics refused at the door so far (pushes and scrape answers). */
  get invalidMessages(): number {
    return this.#invalid;
  }

  // The door: a push or scrape answer that is not valid JSON metrics within bounds is
  // dropped (counted; the first one of each worker logged at warn), and the worker's last
  // valid metrics stay.
  #check(value: unknown, from: string | undefined): EndpointKvMetrics | undefined {
    const r = parseLoadMetrics(value);
    if (r.ok) return r.metrics;
    this.#refuse(from, r.reason);
    return undefined;
  }

  #refuse(from: string | undefined, reason: string): void {
    this.#invalid++;
    const who = from ?? "";
    if (this.#warned.has(who)) {
      this.#log.debug("ignoring invalid load metrics", { worker: from, reason });
      return;
    }
    if (this.#warned.size >= 10_000) this.#warned.clear();
    this.#warned.add(who);
    this.#log.warn("ignoring invalid load metrics (further ones from this worker at debug)", {
      worker: from,
      reason,
    });
  }

  async #consume(sub: EventSubscription): Promise<void> {
    for await (const msg of sub) {
      let value: unknown;
      try {
        value = JSON.parse(new TextDecoder().decode(msg.payload));
      } catch {
        this.#refuse(undefined, "not JSON");
        continue;
      }
      const claimed = (value as { worker_id?: unknown } | null)?.worker_id;
      const m = this.#check(value, typeof claimed === "string" ? claimed.slice(0, 80) : undefined);
      // getMetrics prunes workers that left; between calls, forged ids cannot pile up past this.
      if (
        m && m.worker_id !== "" &&
        (this.#latest.has(m.worker_id) || this.#latest.size < MAX_WORKERS)
      ) {
        this.#latest.set(m.worker_id, m);
        this.#receivedAt.set(m.worker_id, performance.now());
      }
    }
  }

  async #scrape(client: Client, id: string): Promise<void> {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), this.#scrapeTimeoutMs);
    try {
      for await (const item of await client.direct({}, id, { signal: ac.signal })) {
        const m = this.#check(item, id);
        // The answer is the instance's own: it is filed (and reported) under that id.
        if (m && !this.#latest.has(id)) {
          this.#latest.set(id, { ...m, worker_id: id });
          this.#receivedAt.set(id, performance.now());
        }
        break;
      }
    } catch (err) {
      this.#log.debug("cannot scrape load metrics", { worker: id, error: String(err) });
    } finally {
      clearTimeout(timer);
    }
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
