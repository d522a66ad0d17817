// The worker side's Prometheus metrics: what every endpoint a runtime serves counts
// (`dynamo_component_*`, the reference's work-handler names and labels), the KV cache and
// load its engine reports (`dynamo_component_kvstats_*`), and the runtime's uptime. One
// registry per runtime, which the system server (`DYN_SYSTEM_PORT`) renders.

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { counterSeries, gaugeSeries, histogramSeries } from "./fast_series.ts";
import type { MetricsRegistry } from "./metric_types.ts";

/** Seconds: from a millisecond to two minutes (the runtime's and the frontend's latency histograms). */
export const DURATION_BUCKETS: readonly number[] = [
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
  120,
];

/**
 * Why a worker-side request failed: the `error_type` label of
 * `dynamo_component_errors_total` (the reference's values).
 * - `deserialization`: the request could not be decoded;
 * - `response_stream`: the caller's response stream could not be reached;
 * - `generate`: the handler threw (before or after its first item).
 */
export type EndpointErrorType = "deserialization" | "response_stream" | "generate";

const ERROR_TYPES: readonly EndpointErrorType[] = [
  "deserialization",
  "response_stream",
  "generate",
];

/** What one request did, filled in while it is served. */
export interface RequestTally {
  /** Bytes of response items sent (serialized JSON; 0 on the in-process plane, which sends values). */
  responseBytes: number;
  /** Set when the request failed. */
  error?: EndpointErrorType;
}

/** One served endpoint's series, found once when it starts serving. */
export interface EndpointStats {
  /**
   * Counts a request that arrived and is now in flight.
   * @param requestBytes its size on the wire (0 on the in-process plane)
   */
  begin(requestBytes: number): void;
  /**
   * Counts the end of a request begun with {@linkcode EndpointStats.begin}.
   * @param startMs when it began (`performance.now()`)
   * @param tally what it sent and whether it failed
   */
  end(startMs: number, tally: RequestTally): void;
}

/** A worker's engine load, as `KvMetricsPublisher` publishes it (wire names). */
export interface KvStatsSample {
  /** Requests being served. */
  request_active_slots: number;
  /** Requests the worker can serve at once. */
  request_total_slots: number;
  /** KV cache blocks in use. */
  kv_active_blocks: number;
  /** KV cache blocks in all. */
  kv_total_blocks: number;
  /** Requests queued, not yet scheduled. */
  num_requests_waiting: number;
  /** Fraction of the KV cache in use (0..1). */
  gpu_cache_usage_perc: number;
  /** Fraction of prompt blocks found in the prefix cache (0..1). */
  gpu_prefix_cache_hit_rate: number;
  /** KV blocks held in a host-memory tier (only from workers that have one). */
  kv_host_blocks?: number;
  /** KV blocks that tier holds at most. */
  kv_host_total_blocks?: number;
}

/**
 * The Prometheus metrics of one runtime's components.
 *
 * Names: `dynamo_component_requests_total`, `_errors_total` (label `error_type`),
 * `_inflight_requests`, `_request_duration_seconds`, `_request_bytes_total`,
 * `_response_bytes_total` (labels `dynamo_namespace`, `dynamo_component`, `dynamo_endpoint`);
 * `dynamo_component_kvstats_active_blocks`, `_total_blocks`, `_gpu_cache_usage_percent`,
 * `_gpu_prefix_cache_hit_rate` (and `_host_blocks`, `_host_total_blocks` for workers with a
 * host-memory KV tier) and `dynamo_component_worker_request_active_slots`,
 * `_request_total_slots`, `_num_requests_waiting` (labels `dynamo_namespace`,
 * `dynamo_component`, `worker_id`); `dynamo_component_uptime_seconds`.
 *
 * @example
 * ```ts
 * const metrics = new RuntimeMetrics();
 * const stats = metrics.endpoint("ns", "backend", "generate");
 * const start = performance.now();
 * stats.begin(120);
 * stats.end(start, { responseBytes: 64 });
 * console.log(await metrics.render());
 * ```
 */
export class RuntimeMetrics {
  readonly #registry = new Registry();
  /** The registry every series lives on; the system server's `/metrics` renders it. */
  readonly registry: MetricsRegistry = this.#registry;
  readonly #requests: Counter;
  readonly #errors: Counter;
  readonly #inflight: Gauge;
  readonly #duration: Histogram;
  readonly #requestBytes: Counter;
  readonly #responseBytes: Counter;
  readonly #kv: { [K in keyof KvStatsSample]: Gauge };
  readonly #started = performance.now();

  /** Creates the series on a registry of their own (several runtimes in one process do not collide). */
  constructor() {
    const registers = [this.#registry];
    const p = "dynamo_component_";
    const endpointLabels = ["dynamo_namespace", "dynamo_component", "dynamo_endpoint"];
    this.#requests = new Counter({
      name: `${p}requests_total`,
      help: "Requests an endpoint received",
      labelNames: endpointLabels,
      registers,
    });
    this.#errors = new Counter({
      name: `${p}errors_total`,
      help: "Requests an endpoint failed, by error_type",
      labelNames: [...endpointLabels, "error_type"],
      registers,
    });
    this.#inflight = new Gauge({
      name: `${p}inflight_requests`,
      help: "Requests an endpoint is serving now",
      labelNames: endpointLabels,
      registers,
    });
    this.#duration = new Histogram({
      name: `${p}request_duration_seconds`,
      help: "Time from a request's arrival to the end of its response stream",
      labelNames: endpointLabels,
      buckets: [...DURATION_BUCKETS],
      registers,
    });
    this.#requestBytes = new Counter({
      name: `${p}request_bytes_total`,
      help: "Bytes of requests received (0 on the in-process request plane)",
      labelNames: endpointLabels,
      registers,
    });
    this.#responseBytes = new Counter({
      name: `${p}response_bytes_total`,
      help: "Bytes of response items sent (0 on the in-process request plane)",
      labelNames: endpointLabels,
      registers,
    });
    const started = this.#started;
    new Gauge({
      name: `${p}uptime_seconds`,
      help: "Seconds since the runtime started",
      registers,
      collect() {
        this.set((performance.now() - started) / 1000);
      },
    });
    const kvLabels = ["dynamo_namespace", "dynamo_component", "worker_id"];
    const gauge = (name: string, help: string) =>
      new Gauge({ name: `${p}${name}`, help, labelNames: kvLabels, registers });
    this.#kv = {
      kv_active_blocks: gauge("kvstats_active_blocks", "KV cache blocks in use"),
      kv_total_blocks: gauge("kvstats_total_blocks", "KV cache blocks in all"),
      gpu_cache_usage_perc: gauge(
        "kvstats_gpu_cache_usage_percent",
        "Fraction of the KV cache in use (0.0-1.0)",
      ),
      gpu_prefix_cache_hit_rate: gauge(
        "kvstats_gpu_prefix_cache_hit_rate",
        "Fraction of prompt blocks found in the prefix cache (0.0-1.0)",
      ),
      request_active_slots: gauge("worker_request_active_slots", "Requests being served"),
      request_total_slots: gauge("worker_request_total_slots", "Requests servable at once"),
      num_requests_waiting: gauge(
        "worker_num_requests_waiting",
        "Requests queued in the engine, not yet scheduled",
      ),
      kv_host_blocks: gauge(
        "kvstats_host_blocks",
        "KV cache blocks held in the host-memory tier, off the GPU",
      ),
      kv_host_total_blocks: gauge(
        "kvstats_host_total_blocks",
        "KV cache blocks the host-memory tier holds at most",
      ),
    };
  }

  /**
   * The series of one endpoint (made at zero, error types included, so that dashboards see
   * them before the first request or failure).
   */
  endpoint(namespace: string, component: string, endpoint: string): EndpointStats {
    const labels = {
      dynamo_namespace: namespace,
      dynamo_component: component,
      dynamo_endpoint: endpoint,
    };
    // The series exist from now on, at zero (the handles below would make them at first use).
    for (const c of [this.#requests, this.#requestBytes, this.#responseBytes]) c.inc(labels, 0);
    for (const t of ERROR_TYPES) this.#errors.inc({ ...labels, error_type: t }, 0);
    this.#inflight.inc(labels, 0);
    this.#duration.zero(labels);
    const requests = counterSeries(this.#requests, labels);
    const inflight = gaugeSeries(this.#inflight, labels);
    const duration = histogramSeries(this.#duration, labels);
    const requestBytes = counterSeries(this.#requestBytes, labels);
    const responseBytes = counterSeries(this.#responseBytes, labels);
    const errors = new Map(
      ERROR_TYPES.map((t) => [t, counterSeries(this.#errors, { ...labels, error_type: t })]),
    );
    return {
      begin(bytes: number): void {
        requests.inc();
        inflight.inc();
        if (bytes > 0) requestBytes.add(bytes);
      },
      end(startMs: number, tally: RequestTally): void {
        inflight.dec();
        duration.observe((performance.now() - startMs) / 1000);
        if (tally.responseBytes > 0) responseBytes.add(tally.responseBytes);
        if (tally.error !== undefined) errors.get(tally.error)!.inc();
      },
    };
  }

  /**
   * Records a worker's latest engine load (called as often as it publishes).
   * @param namespace the worker's namespace
   * @param component the worker's component
   * @param workerId the worker's instance id
   * @param sample the load, in the wire's names
   */
  setKvStats(
    namespace: string,
    component: string,
    workerId: string,
    sample: KvStatsSample,
  ): void {
    const labels = {
      dynamo_namespace: namespace,
      dynamo_component: component,
      worker_id: workerId,
    };
    for (const key of Object.keys(this.#kv) as (keyof KvStatsSample)[]) {
      // A field a worker does not report (no host tier) gets no series.
      const value = sample[key];
      if (value !== undefined) this.#kv[key]!.set(labels, value);
    }
  }

  /** The text exposition of every series. */
  render(): Promise<string> {
    return this.registry.metrics();
  }
}
