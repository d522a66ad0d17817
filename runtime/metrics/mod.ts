/**
 * Prometheus metrics of the runtime: what every served endpoint counts
 * (`dynamo_component_*`), the engine load workers report, process metrics, and the system
 * server that serves them on a worker (`DYN_SYSTEM_PORT`).
 *
 * @module
 */

export {
  type EndpointErrorType,
  type EndpointStats,
  type KvStatsSample,
  type RequestTally,
  RuntimeMetrics,
} from "./runtime_metrics.ts";
export { registerProcessMetrics } from "./process.ts";
export {
  startSystemServer,
  type SystemServer,
  type SystemServerAddress,
  systemServerFromEnv,
  type SystemServerOptions,
} from "./system_server.ts";
export type {
  CounterMetric,
  GaugeMetric,
  HistogramMetric,
  MetricLabels,
  MetricsRegistry,
} from "./metric_types.ts";
