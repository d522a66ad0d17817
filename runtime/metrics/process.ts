// Process metrics for a registry: prom-client's default collectors, which run under Deno
// through its Node compatibility (CPU seconds, resident and heap memory, open file
// descriptors, event-loop lag and its percentiles). Registered only where a registry is
// served (the frontend's port, a worker's system server), not when one is made.

import { collectDefaultMetrics, type Registry } from "prom-client";
import type { MetricsRegistry } from "./metric_types.ts";

/** Registries that already have the process collectors (a second call would throw). */
const registered = new WeakSet<MetricsRegistry>();

/**
 * Adds the process's metrics to `registry`: `process_cpu_seconds_total`,
 * `process_resident_memory_bytes`, `process_heap_bytes`, `process_open_fds`,
 * `process_start_time_seconds`, `nodejs_eventloop_lag_seconds` (measured at each scrape)
 * and `nodejs_eventloop_lag_p50_seconds`/`_p90_`/`_p99_` (sampled every 10 ms), with
 * `nodejs_heap_size_used_bytes` and the like. Calling it again for the same registry does
 * nothing.
 *
 * @param registry a registry from {@linkcode RuntimeMetrics} or `FrontendMetrics`
 * @example
 * ```ts
 * import { RuntimeMetrics } from "./runtime_metrics.ts";
 *
 * const metrics = new RuntimeMetrics();
 * registerProcessMetrics(metrics.registry);
 * ```
 */
export function registerProcessMetrics(registry: MetricsRegistry): void {
  if (registered.has(registry)) return;
  registered.add(registry);
  // Our registries are prom-client's (metric_types.ts describes what we use of them).
  collectDefaultMetrics({
    register: registry as unknown as Registry,
    eventLoopMonitoringPrecision: 10,
  });
}
