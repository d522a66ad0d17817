// The shapes of the frontend's metrics as our API shows them: what the frontend and its
// callers use of prom-client's registry, counters, gauges and histograms (prom-client's own
// objects are these), so the public API names no prom-client type.

/** Label values of one series, by label name. */
export type MetricLabels = Partial<Record<string, string | number>>;

/** The registry the frontend's series live on: what `/metrics` renders. */
export interface MetricsRegistry {
  /** The exposition's content type, for the `/metrics` response. */
  readonly contentType: string;
  /** Sets labels every series of the registry carries (e.g. `dynamo_namespace`). */
  setDefaultLabels(labels: Record<string, string>): void;
  /** The text exposition of every series. */
  metrics(): Promise<string>;
}

/** A counter with labels. */
export interface CounterMetric {
  /** Adds `value` (default 1) to the series of `labels`. */
  inc(labels: MetricLabels, value?: number): void;
}

/** A gauge with labels. */
export interface GaugeMetric {
  /** Adds `value` (default 1) to the series of `labels`. */
  inc(labels: MetricLabels, value?: number): void;
  /** Subtracts `value` (default 1) from the series of `labels`. */
  dec(labels: MetricLabels, value?: number): void;
}

/** A histogram with labels. */
export interface HistogramMetric {
  /** Records one observation in the series of `labels`. */
  observe(labels: MetricLabels, value: number): void;
  /** Creates the series of `labels` with every bucket at zero. */
  zero(labels: MetricLabels): void;
}
