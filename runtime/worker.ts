// dynamoWorker: the edge where a worker script gets its runtime from the environment,
// SIGINT/SIGTERM become a graceful shutdown, and `DYN_SYSTEM_PORT` opens the system server.

import { announceBackends } from "./backends.ts";
import { DistributedRuntime, type FromEnvOptions } from "./distributed_runtime.ts";
import { registerProcessMetrics } from "./metrics/process.ts";
import { startSystemServer, systemServerFromEnv } from "./metrics/system_server.ts";

/** Options of {@linkcode dynamoWorker}. */
export interface DynamoWorkerOptions extends FromEnvOptions {
  /** Use this runtime instead of building one from the environment. */
  runtime?: DistributedRuntime;
  /** Signals that start a graceful shutdown (default SIGINT and SIGTERM). */
  signals?: Deno.Signal[];
}

/**
 * Runs `fn` with a runtime built from the environment. SIGINT or SIGTERM shuts the
 * runtime down gracefully (endpoints stop, `serveEndpoint` resolves); a second signal
 * exits at once. The runtime is shut down when `fn` settles.
 *
 * With `DYN_SYSTEM_PORT` (or `DYN_SYSTEM_ENABLED=true`) in the environment, a system server
 * runs alongside on `DYN_SYSTEM_HOST` (default 0.0.0.0): `/metrics` (the runtime's
 * `dynamo_component_*` metrics and the process's), `/health`, `/live`; see
 * {@linkcode systemServerFromEnv}. It logs the URL it listens on ("system server listening").
 *
 * @throws {InvalidArgumentError} a bad `DYN_SYSTEM_*` value (before the runtime is built)
 * @example
 * ```ts
 * await dynamoWorker(async (runtime) => {
 *   const endpoint = runtime.namespace("ns").component("backend").endpoint("generate");
 *   await endpoint.serveEndpoint(async function* (req: { text: string }) { yield req.text; });
 * });
 * ```
 */
export async function dynamoWorker<T>(
  fn: (runtime: DistributedRuntime) => Promise<T>,
  options: DynamoWorkerOptions = {},
): Promise<T> {
  const system = systemServerFromEnv(options.env ?? Deno.env.toObject());
  const runtime = options.runtime ??
    (await DistributedRuntime.fromEnv({ tracingServiceName: "dynamo-worker", ...options }));
  announceBackends(runtime, runtime.logger, "worker");
  let server;
  if (system) {
    registerProcessMetrics(runtime.metrics.registry);
    try {
      server = await startSystemServer({
        ...system,
        registry: runtime.metrics.registry,
        notReady: () => runtime.shutdownSignal.aborted ? "shutting down" : undefined,
      });
    } catch (err) {
      await runtime.shutdown();
      throw err;
    }
    runtime.logger.info("system server listening", { url: server.url });
  }
  const signals = options.signals ??
    (Deno.build.os === "windows" ? ["SIGINT"] : ["SIGINT", "SIGTERM"]);
  let received = 0;
  const onSignal = () => {
    received++;
    if (received > 1) {
      runtime.logger.warn("second signal: exiting now");
      Deno.exit(130);
    }
    runtime.logger.info("signal received: shutting down gracefully");
    runtime.shutdown().catch((err) =>
      runtime.logger.error("shutdown failed", { error: String(err) })
    );
  };
  for (const s of signals) Deno.addSignalListener(s, onSignal);
  try {
    return await fn(runtime);
  } finally {
    for (const s of signals) Deno.removeSignalListener(s, onSignal);
    await runtime.shutdown();
    await server?.close();
  }
}
