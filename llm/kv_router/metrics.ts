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

import type { Client } from "../../runtime/client.ts";
import type { Component } from "../../runtime/component.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
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
  requestActiveSlots: number;
  requestTotalSlots: number;
  kvActiveBlocks: number;
  kvTotalBlocks: number;
  numRequestsWaiting: number;
  gpuCacheUsagePerc: number;
  gpuPrefixCacheHitRate: number;
}

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
  return out;
}

/**
 * Publishes one worker's load metrics.
 *
 * @example
 * ```ts
 * const metrics = new KvMetricsPublisher();
 * await metrics.createEndpoint(component);
 * metrics.publish({ requestActiveSlots: 0, requestTotalSlots: 1024, kvActiveBlocks: 0,
 *   kvTotalBlocks: 1024, numRequestsWaiting: 0, gpuCacheUsagePerc: 0, gpuPrefixCacheHitRate: 0 });
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
    if (this.#latest) this.#push(this.#latest);
  }

  /**
   * Records the worker's current metrics and pushes them to aggregators. Takes an object,
   * or the seven numbers in the seeds' positional order.
   * @throws {InvalidArgumentError} a missing or non-numeric field
   */
  publish(metrics: KvMetrics): void;
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
    const bytes = new TextEncoder().encode(JSON.stringify(m));
    this.#component!.publishEvent(LOAD_METRICS, bytes).catch((err) =>
      this.#log?.debug("cannot push load metrics", { error: String(err) })
    );
  }
}

/** Options of {@linkcode KvMetricsAggregator}. */
export interface KvMetricsAggregatorOptions {
  /** Deadline of a scrape of one worker, in ms (default 2000). */
  scrapeTimeoutMs?: number;
}

function parseMetrics(value: unknown): EndpointKvMetrics | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const m = value as Record<string, unknown>;
  if (typeof m.worker_id !== "string") return undefined;
  for (const [, snake] of FIELDS) if (typeof m[snake] !== "number") return undefined;
  return m as unknown as EndpointKvMetrics;
}

/**
 * Collects the load metrics of a component's workers.
 *
 * @example
 * ```ts
 * const aggregator = new KvMetricsAggregator(runtime.namespace("ns").component("backend"));
 * for (const e of (await aggregator.getMetrics()).endpoints) console.log(e.worker_id, e.kv_active_blocks);
 * ```
 */
export class KvMetricsAggregator {
  readonly #component: Component;
  readonly #latest = new Map<string, EndpointKvMetrics>();
  readonly #sub: EventSubscription;
  readonly #client: Promise<Client>;
  readonly #consuming: Promise<void>;
  readonly #scrapeTimeoutMs: number;
  readonly #log: Logger;

  /** @param component the workers' component */
  constructor(component: Component, options: KvMetricsAggregatorOptions = {}) {
    const rt = component.runtimeInternals;
    this.#component = component;
    this.#scrapeTimeoutMs = options.scrapeTimeoutMs ?? 2000;
    this.#log = rt.logger.child({ component: component.path, kv_metrics_aggregator: true });
    this.#sub = component.subscribeEvents(LOAD_METRICS, { signal: rt.shutdownSignal });
    this.#client = component.endpoint(LOAD_METRICS).client();
    this.#client.catch(() => {});
    this.#consuming = this.#consume();
    rt.track(this.#consuming);
  }

  /**
   * The latest metrics of every live worker, sorted by worker id. Workers not heard from
   * yet are scraped; those that do not answer in time are left out.
   */
  async getMetrics(): Promise<AggregatedMetrics> {
    const client = await this.#client;
    await this.#sub.ready;
    const live = new Set(client.instanceIds());
    for (const id of this.#latest.keys()) if (!live.has(id)) this.#latest.delete(id);
    await Promise.all(
      [...live].filter((id) => !this.#latest.has(id)).map((id) => this.#scrape(client, id)),
    );
    const endpoints = [...live].map((id) => this.#latest.get(id)).filter((m) => m !== undefined)
      .sort((a, b) => (a.worker_id < b.worker_id ? -1 : a.worker_id > b.worker_id ? 1 : 0));
    return { endpoints };
  }

  /** Stops listening. */
  async close(): Promise<void> {
    await this.#sub.unsubscribe();
    await this.#consuming;
    await (await this.#client.catch(() => undefined))?.close();
  }

  async #consume(): Promise<void> {
    for await (const msg of this.#sub) {
      try {
        const m = parseMetrics(JSON.parse(new TextDecoder().decode(msg.payload)));
        if (m) this.#latest.set(m.worker_id, m);
      } catch {
        this.#log.debug("ignoring malformed load metrics");
      }
    }
  }

  async #scrape(client: Client, id: string): Promise<void> {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), this.#scrapeTimeoutMs);
    try {
      for await (const item of await client.direct({}, id, { signal: ac.signal })) {
        const m = parseMetrics(item);
        if (m && !this.#latest.has(id)) this.#latest.set(id, m);
        break;
      }
    } catch (err) {
      this.#log.debug("cannot scrape load metrics", { worker: id, error: String(err) });
    } finally {
      clearTimeout(timer);
    }
  }
}
