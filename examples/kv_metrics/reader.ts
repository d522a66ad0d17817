// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Reads the KV metrics of seed 000's KV-metrics worker through a KvMetricsAggregator,
// as a KV router does, and prints `getMetrics().endpoints` (one JSON line per worker).
// Run it beside `dynamo serve examples/kv_metrics/worker.ts:YourWorker` with the same
// backend environment (the DYN_HUB line serve prints, or ETCD_ENDPOINTS + NATS_SERVER):
//
//   deno run -A examples/kv_metrics/reader.ts [--workers N] [--polls N] [--interval-ms MS]

import { parseArgs } from "node:util";
import {
  type DistributedRuntime,
  dynamoWorker,
  type EndpointKvMetrics,
  KvMetricsAggregator,
  TimeoutError,
} from "../../mod.ts";
import { YourWorker } from "./worker.ts";

/** Options of {@linkcode readMetrics}. */
export interface ReadMetricsOptions {
  /** Wait until this many workers report metrics (default 1). */
  workers?: number;
  /** How many times to print the metrics (default 1). */
  polls?: number;
  /** Time between polls, in ms (default 1000). */
  intervalMs?: number;
  /** How long to wait for the workers, in ms (default 30000). */
  timeoutMs?: number;
  /** Called with the endpoints of each poll (default: print each as a JSON line). */
  onMetrics?: (endpoints: EndpointKvMetrics[]) => void;
}

/**
 * Waits for `workers` workers of YourWorker to report, then prints their metrics `polls`
 * times.
 *
 * @returns the endpoints of the last poll
 * @throws {TimeoutError} fewer than `workers` workers reported within `timeoutMs`
 */
export async function readMetrics(
  runtime: DistributedRuntime,
  options: ReadMetricsOptions = {},
): Promise<EndpointKvMetrics[]> {
  const want = options.workers ?? 1;
  const polls = options.polls ?? 1;
  const intervalMs = options.intervalMs ?? 1000;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const onMetrics = options.onMetrics ??
    ((endpoints) => endpoints.forEach((e) => console.log(JSON.stringify(e))));
  const [namespace, component] = YourWorker.dynamoAddress();
  const kvListener = runtime.namespace(namespace).component(component);
  const aggregator = new KvMetricsAggregator(kvListener);
  try {
    const deadline = Date.now() + timeoutMs;
    let endpoints = (await aggregator.getMetrics()).endpoints;
    while (endpoints.length < want) {
      if (Date.now() >= deadline) {
        throw new TimeoutError(
          `${want} worker(s) of ${namespace}/${component} should report KV metrics within ` +
            `${timeoutMs} ms; ${endpoints.length} did`,
        );
      }
      await new Promise((r) => setTimeout(r, 100));
      endpoints = (await aggregator.getMetrics()).endpoints;
    }
    for (let i = 0; i < polls; i++) {
      if (i > 0) {
        await new Promise((r) => setTimeout(r, intervalMs));
        endpoints = (await aggregator.getMetrics()).endpoints;
      }
      onMetrics(endpoints);
    }
    return endpoints;
  } finally {
    await aggregator.close();
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      workers: { type: "string", default: "1" },
      polls: { type: "string", default: "1" },
      "interval-ms": { type: "string", default: "1000" },
    },
  });
  await dynamoWorker((runtime) =>
    readMetrics(runtime, {
      workers: Number(values.workers),
      polls: Number(values.polls),
      intervalMs: Number(values["interval-ms"]),
    })
  );
}
