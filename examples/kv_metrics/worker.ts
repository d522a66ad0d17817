// Seed 000's KV-metrics worker (kv_metrics_worker.py): a service that publishes KV metrics
// through a KvMetricsPublisher, for a KV router's KvMetricsAggregator, and streams back
// the words of each request. Serve it on its own:
//
//   deno task dynamo serve examples/kv_metrics/worker.ts:YourWorker

import { z } from "zod";
import {
  asyncOnShutdown,
  asyncOnStart,
  type Component,
  dynamoContext,
  endpoint,
  KvMetricsPublisher,
  type Logger,
  service,
} from "../../mod.ts";

/** Where the worker registers (the seed's namespace). */
export const NAMESPACE = "your_namespace";

/** What YourWorker.generate takes (a wire type). */
export const RequestType = z.object({ text: z.string() });
/** What YourWorker.generate takes (a wire type). */
export type RequestType = z.infer<typeof RequestType>;

/** What YourWorker.generate yields (a wire type). */
export interface ResponseType {
  text: string;
}

/** A worker that publishes (random, for demonstration) KV metrics as it generates. */
@service({ dynamo: { namespace: NAMESPACE } })
export class YourWorker {
  #component!: Component;
  #log!: Logger;
  readonly metricsPublisher = new KvMetricsPublisher();

  // Some metrics for the worker to track.
  requestActiveSlots = 0;
  requestTotalSlots = 1024;
  kvActiveBlocks = 0;
  kvTotalBlocks = 1024;
  numRequestsWaiting = 0;
  gpuCacheUsagePerc = 0.0;
  gpuPrefixCacheHitRate = 0.0;

  @asyncOnStart
  async init(): Promise<void> {
    this.#component = dynamoContext.component;
    this.#log = dynamoContext.runtime.logger;
    // Register an endpoint for consumers of the KV metrics (KvMetricsAggregator) to
    // listen/gather on.
    await this.metricsPublisher.createEndpoint(this.#component);
    // Publish initial metrics to register this worker as a candidate for KV routing.
    this.#publish();
  }

  /**
   * Fills the frequently changing metrics with random data for demonstration; a real
   * worker tracks them or asks its inference engine.
   */
  publishKvMetrics(): void {
    this.kvActiveBlocks = randInt(0, 1024);
    this.numRequestsWaiting = randInt(0, 100);
    this.gpuCacheUsagePerc = Math.random();
    this.gpuPrefixCacheHitRate = Math.random();
    this.#publish();
  }

  /** Generates tokens (the request's words), updating the KV metrics at every step. */
  @endpoint({ request: RequestType })
  async *generate(request: RequestType): AsyncGenerator<ResponseType> {
    // One more active request while this one runs.
    this.requestActiveSlots += 1;
    try {
      this.#log.info("Worker endpoint received", { text: request.text });
      for (const token of request.text.split(/\s+/).filter(Boolean)) {
        this.publishKvMetrics();
        this.#log.info("Returning token", { token });
        yield { text: token };
      }
    } finally {
      this.requestActiveSlots -= 1;
    }
  }

  @asyncOnShutdown
  close(): Promise<void> {
    this.metricsPublisher.close();
    return Promise.resolve();
  }

  #publish(): void {
    this.metricsPublisher.publish(
      this.requestActiveSlots,
      this.requestTotalSlots,
      this.kvActiveBlocks,
      this.kvTotalBlocks,
      this.numRequestsWaiting,
      this.gpuCacheUsagePerc,
      this.gpuPrefixCacheHitRate,
    );
  }
}

/** A whole number in [min, max], like Python's random.randint. */
function randInt(min: number, max: number): number {
  return min + Math.floor(Math.random() * (max - min + 1));
}
