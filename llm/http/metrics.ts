// The frontend's Prometheus metrics (names and labels of DESIGN.md §5), on a registry of
// its own so several frontends in one process do not collide.

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { counterSeries, gaugeSeries, histogramSeries } from "../../runtime/metrics/fast_series.ts";
import type {
  CounterMetric,
  GaugeMetric,
  HistogramMetric,
  MetricsRegistry,
} from "../../runtime/metrics/metric_types.ts";
import { DURATION_BUCKETS } from "../../runtime/metrics/runtime_metrics.ts";

const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144];

/** Labels every request metric carries. */
export interface RequestLabels {
  /** The model's name as the request gave it. */
  model: string;
  /** "chat_completions", "completions", "responses" or "embeddings". */
  endpoint: string;
  /** "stream" or "unary". */
  request_type: string;
}

/** One model's series. */
export interface ModelMetrics {
  /** Requests of the model being handled now. */
  inflight: { inc(): void; dec(): void };
  /** Time from request to last byte (s). */
  duration: { observe(value: number): void };
  /** Time to the first generated token (s). */
  ttft: { observe(value: number): void };
  /** Time between generated tokens (s). */
  itl: { observe(value: number): void };
  /** Prompt length in tokens. */
  inputTokens: { observe(value: number): void };
  /** Generated tokens per request. */
  outputTokens: { observe(value: number): void };
  /** Requests moved to another instance after a worker failed. */
  migrations: { inc(): void };
  /** Clients that went away before their answer was complete. */
  disconnected: { inc(): void };
  /** Worker items refused at the frontend's door. */
  invalidOutputs: { inc(): void };
}

/** One KV routing decision, as {@linkcode FrontendMetrics.observeRoute} counts it. */
export interface RouteObservation {
  /** The chosen worker's instance id. */
  instanceId: string;
  /** Blocks of the prompt the chosen worker holds cached (predicted). */
  overlapBlocks: number;
  /** Full KV blocks of the prompt. */
  requestBlocks: number;
}

/** The frontend's metrics. */
export class FrontendMetrics {
  readonly #registry = new Registry();
  /** The registry every series lives on; `/metrics` renders it. */
  readonly registry: MetricsRegistry = this.#registry;
  /** Requests handled, by model, endpoint, request type and final status. */
  readonly requests: CounterMetric;
  /** Requests being handled now, by model. */
  readonly inflight: GaugeMetric;
  /** Time from request to last byte (s), by model. */
  readonly duration: HistogramMetric;
  /** Time from request to first generated token (s), by model. */
  readonly ttft: HistogramMetric;
  /** Time between generated tokens (s), by model. */
  readonly itl: HistogramMetric;
  /** Prompt length in tokens, by model. */
  readonly inputTokens: HistogramMetric;
  /** Generated tokens per request, by model. */
  readonly outputTokens: HistogramMetric;
  /** Requests moved to another instance after a worker failed, by model. */
  readonly migrations: CounterMetric;
  /** Clients that went away before their answer was complete, by model (a gauge that only rises). */
  readonly disconnected: GaugeMetric;
  /** Worker items refused at the frontend's door (bad token ids, finish reasons, shapes). */
  readonly invalidOutputs: CounterMetric;
  /** Requests refused before the frontend saw them (reason: overloaded, unauthorized, ...). */
  readonly rejected: CounterMetric;
  /** Generation requests admitted by the guard and not finished (read at scrape time). */
  readonly admitted: GaugeMetric;
  /** Generation requests waiting for a slot (read at scrape time). */
  readonly queued: GaugeMetric;
  /** KV router decisions, by chosen worker (`worker_id`). */
  readonly routerDecisions: CounterMetric;
  /** Prompt KV blocks the KV router routed, by chosen worker. */
  readonly routerPromptBlocks: CounterMetric;
  /** Of those, blocks the chosen worker held cached (the router's prediction), by worker. */
  readonly routerCachedBlocks: CounterMetric;
  /** Predicted KV cache hit rate of each routed request (0..1). */
  readonly kvHitRate: HistogramMetric;
  #admission?: () => { admitted: number; queued: number };

  /**
   * Creates the frontend's series on a registry of their own.
   * @param constLabels labels added to every series (e.g. dynamo_namespace)
   */
  constructor(constLabels: Record<string, string> = {}) {
    const registers = [this.#registry];
    this.registry.setDefaultLabels(constLabels);
    const p = "dynamo_frontend_";
    this.requests = new Counter({
      name: `${p}requests_total`,
      help: "Requests handled, by final status",
      labelNames: ["model", "endpoint", "request_type", "status"],
      registers,
    });
    this.inflight = new Gauge({
      name: `${p}inflight_requests`,
      help: "Requests being handled now",
      labelNames: ["model"],
      registers,
    });
    this.duration = new Histogram({
      name: `${p}request_duration_seconds`,
      help: "Time from request to last byte",
      labelNames: ["model"],
      buckets: [...DURATION_BUCKETS],
      registers,
    });
    this.ttft = new Histogram({
      name: `${p}time_to_first_token_seconds`,
      help: "Time from request to first generated token",
      labelNames: ["model"],
      buckets: [...DURATION_BUCKETS],
      registers,
    });
    this.itl = new Histogram({
      name: `${p}inter_token_latency_seconds`,
      help: "Time between generated tokens",
      labelNames: ["model"],
      buckets: [...DURATION_BUCKETS],
      registers,
    });
    this.inputTokens = new Histogram({
      name: `${p}input_sequence_tokens`,
      help: "Prompt length in tokens",
      labelNames: ["model"],
      buckets: TOKEN_BUCKETS,
      registers,
    });
    this.outputTokens = new Histogram({
      name: `${p}output_sequence_tokens`,
      help: "Generated tokens per request",
      labelNames: ["model"],
      buckets: TOKEN_BUCKETS,
      registers,
    });
    this.migrations = new Counter({
      name: `${p}model_migration_total`,
      help: "Requests moved to another instance after a worker failed",
      labelNames: ["model"],
      registers,
    });
    // A gauge, as the reference's: a counter's name would have to end in _total.
    this.disconnected = new Gauge({
      name: `${p}disconnected_clients`,
      help: "Clients that went away before their response was complete",
      labelNames: ["model"],
      registers,
    });
    this.invalidOutputs = new Counter({
      name: `${p}invalid_worker_outputs_total`,
      help: "Items a worker sent that were not valid engine outputs (each failed its request)",
      labelNames: ["model"],
      registers,
    });
    this.rejected = new Counter({
      name: `${p}rejected_requests_total`,
      help: "Requests refused by admission control or the API-key check, by reason",
      labelNames: ["reason"],
      registers,
    });
    // Read from the guard when scraped: nothing to update per request.
    const admission = () => this.#admission?.() ?? { admitted: 0, queued: 0 };
    this.admitted = new Gauge({
      name: `${p}admitted_requests`,
      help: "Generation requests admitted and not finished (against --max-inflight)",
      registers,
      collect() {
        this.set(admission().admitted);
      },
    });
    this.queued = new Gauge({
      name: `${p}queued_requests`,
      help: "Generation requests waiting for a slot (against --max-queued)",
      registers,
      collect() {
        this.set(admission().queued);
      },
    });
    this.routerDecisions = new Counter({
      name: `${p}router_decisions_total`,
      help: "KV router decisions, by chosen worker",
      labelNames: ["worker_id"],
      registers,
    });
    this.routerPromptBlocks = new Counter({
      name: `${p}router_prompt_blocks_total`,
      help: "Prompt KV blocks the KV router routed, by chosen worker",
      labelNames: ["worker_id"],
      registers,
    });
    this.routerCachedBlocks = new Counter({
      name: `${p}router_cached_blocks_total`,
      help: "Routed prompt blocks the chosen worker held cached (predicted), by worker",
      labelNames: ["worker_id"],
      registers,
    });
    this.kvHitRate = new Histogram({
      name: `${p}kv_hit_rate`,
      help: "Predicted KV cache hit rate of each routed request (0.0-1.0)",
      buckets: [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1],
      registers,
    });
    this.#kvHitRate = histogramSeries(this.kvHitRate, {});
  }

  /**
   * Counts one KV routing decision (the KV router's `onRoute`): cheap, one series lookup
   * per worker.
   * @param decision the chosen worker, its cached prefix and the prompt's size, in blocks
   */
  observeRoute(decision: RouteObservation): void {
    let series = this.#routeSeries.get(decision.instanceId);
    if (!series) {
      const labels = { worker_id: decision.instanceId };
      series = {
        decisions: counterSeries(this.routerDecisions, labels),
        prompt: counterSeries(this.routerPromptBlocks, labels),
        cached: counterSeries(this.routerCachedBlocks, labels),
      };
      this.#routeSeries.set(decision.instanceId, series);
    }
    series.decisions.inc();
    series.prompt.add(decision.requestBlocks);
    series.cached.add(decision.overlapBlocks);
    this.#kvHitRate.observe(
      decision.requestBlocks > 0 ? decision.overlapBlocks / decision.requestBlocks : 0,
    );
  }

  readonly #routeSeries = new Map<
    string,
    {
      decisions: { inc(): void };
      prompt: { add(n: number): void };
      cached: { add(n: number): void };
    }
  >();
  readonly #kvHitRate: { observe(value: number): void };

  /** Makes the admission gauges read `read()` at each scrape (one guard per metrics object). */
  trackAdmission(read: () => { admitted: number; queued: number }): void {
    this.#admission = read;
  }

  readonly #models = new Map<string, ModelMetrics>();
  readonly #requestSeries = new Map<string, { inc(): void }>();

  /** The per-model series of one model (looked up once, not per observation). */
  forModel(model: string): ModelMetrics {
    let m = this.#models.get(model);
    if (!m) {
      const labels = { model };
      m = {
        inflight: gaugeSeries(this.inflight, labels),
        duration: histogramSeries(this.duration, labels),
        ttft: histogramSeries(this.ttft, labels),
        itl: histogramSeries(this.itl, labels),
        inputTokens: histogramSeries(this.inputTokens, labels),
        outputTokens: histogramSeries(this.outputTokens, labels),
        migrations: counterSeries(this.migrations, labels),
        disconnected: gaugeSeries(this.disconnected, labels),
        invalidOutputs: counterSeries(this.invalidOutputs, labels),
      };
      this.#models.set(model, m);
    }
    return m;
  }

  /** Counts one finished request. */
  countRequest(labels: RequestLabels, status: string): void {
    const key = `${labels.model}\0${labels.endpoint}\0${labels.request_type}\0${status}`;
    let series = this.#requestSeries.get(key);
    if (!series) {
      series = counterSeries(this.requests, { ...labels, status });
      this.#requestSeries.set(key, series);
    }
    series.inc();
  }

  readonly #included: MetricsRegistry[] = [];

  /**
   * Renders `registry` after the frontend's own series (e.g. the `dynamo_component_*` of
   * workers in the same process, as `dynamo run` has). Its metric names must differ from the
   * frontend's.
   */
  include(registry: MetricsRegistry): void {
    this.#included.push(registry);
  }

  /** The text exposition of every metric (the frontend's, then included registries'). */
  async render(): Promise<string> {
    const own = await this.registry.metrics();
    if (this.#included.length === 0) return own;
    const more = await Promise.all(this.#included.map((r) => r.metrics()));
    return [own, ...more].map((t) => t.endsWith("\n") ? t : t + "\n").join("");
  }
}
