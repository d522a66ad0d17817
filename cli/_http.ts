// Serving the OpenAI frontend on a port: shared by `dynamo frontend` and `dynamo run`.
// Graceful stop: no new connections, in-flight streams drain (with a deadline), then the
// model watch and the runtime stop.

import {
  createFrontend,
  type DistributedRuntime,
  FrontendMetrics,
  type KvRouterSettings,
  type Logger,
  type MetricsRegistry,
  ModelManager,
  registerProcessMetrics,
  type RouterMode,
} from "../mod.ts";
import { guardFrontend, type GuardOptions } from "../llm/http/guard.ts";
import type { Io } from "./_common.ts";
import { backendsInfo } from "../runtime/backends.ts";
import { withCors } from "../llm/http/cors.ts";
import type { ReferenceWorkersOptions } from "../llm/model/registry.ts";
import { warmRequestPath } from "../llm/http/warm.ts";
import { type DecisionLog, openDecisionLog } from "../llm/kv_router/decision_log.ts";
import { InvalidArgumentError } from "../runtime/errors.ts";

/** Options of {@linkcode serveFrontend}. */
export interface ServeFrontendOptions {
  port: number;
  hostname: string;
  routerMode: RouterMode;
  /** Settings of the KV router (router mode "kv"). */
  kvRouter?: KvRouterSettings;
  /** Append each KV routing decision to this file as a JSON line (router mode "kv"). */
  routerDecisionLog?: string;
  /** Serve only the models registered in this namespace (default: every namespace). */
  namespace?: string;
  logger: Logger;
  /** Deadline for draining in-flight requests at shutdown, in ms. */
  drainTimeoutMs?: number;
  /** Admission limits and the optional API key (the frontend's metrics are added here). */
  guard?: Omit<GuardOptions, "metrics">;
  /** Extra `/health` check: why the service is unhealthy, or undefined. */
  checkHealth?: () => Promise<string | undefined>;
  /** Origins browsers may call the API from (CORS); none: no CORS headers. */
  corsAllowOrigins?: readonly string[];
  /** The tool-call parser of models whose card names none (`--dyn-tool-call-parser`). */
  toolCallParser?: string;
  /** The reasoning parser of models whose card names none (`--dyn-reasoning-parser`). */
  reasoningParser?: string;
  /** Workers' metrics to show on the frontend's `/metrics` too (workers in this process). */
  workerMetrics?: MetricsRegistry;
  /** Also serve reference (ai-dynamo 1.6.1) workers' models (`--reference-workers`). */
  referenceWorkers?: ReferenceWorkersOptions;
  /**
   * Run the per-request code on synthetic requests before listening, so the first requests
   * are not served interpreted (default true; ~30 ms at start: llm/http/warm.ts).
   */
  warmUp?: boolean;
}

/** A running frontend. */
export interface RunningFrontend {
  readonly url: string;
  /** Stops accepting, drains in-flight requests, stops watching models. */
  shutdown(): Promise<void>;
  /** Resolves when the server has stopped. */
  readonly finished: Promise<void>;
}

/** Starts the HTTP frontend over `runtime` and prints where it listens. */
export async function serveFrontend(
  runtime: DistributedRuntime,
  options: ServeFrontendOptions,
  io: Io,
): Promise<RunningFrontend> {
  const metrics = new FrontendMetrics();
  registerProcessMetrics(metrics.registry);
  if (options.workerMetrics) metrics.include(options.workerMetrics);
  const decisions = options.routerDecisionLog === undefined
    ? undefined
    : openLog(options.routerDecisionLog, options.logger);
  const models = new ModelManager(runtime, {
    routerMode: options.routerMode,
    kvRouter: {
      ...options.kvRouter,
      onRoute: decisions === undefined
        ? (d) => metrics.observeRoute(d)
        : (d) => (metrics.observeRoute(d), decisions.write(d)),
    },
    namespace: options.namespace,
    logger: options.logger,
    referenceWorkers: options.referenceWorkers,
  });
  await models.start();
  const frontend = createFrontend({
    models,
    metrics,
    logger: options.logger,
    backends: backendsInfo(runtime),
    checkHealth: options.checkHealth,
    toolCallParser: options.toolCallParser,
    reasoningParser: options.reasoningParser,
    tracing: runtime.tracing,
  });
  frontend.metrics.registry.setDefaultLabels({
    dynamo_namespace: options.namespace ?? "dynamo",
    dynamo_component: "frontend",
    dynamo_endpoint: "http",
  });
  const guard = guardFrontend(frontend.fetch, { ...options.guard, metrics: frontend.metrics });
  if (options.warmUp !== false) {
    const warm = await warmRequestPath();
    options.logger.debug("request path warmed", { rounds: warm.rounds, ms: Math.round(warm.ms) });
  }
  const listening = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve(
    {
      port: options.port,
      hostname: options.hostname,
      onListen: (addr) => listening.resolve(addr as Deno.NetAddr),
    },
    options.corsAllowOrigins?.length
      ? withCors(guard.fetch, { allowOrigins: options.corsAllowOrigins })
      : guard.fetch,
  );
  const addr = await listening.promise;
  const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
  const url = `http://${host}:${addr.port}`;
  io.out(`dynamo frontend listening on ${url} (router: ${options.routerMode})`);
  // Whether a key is required, never the key.
  options.logger.info("admission", {
    max_inflight: guard.limits.maxInflight,
    max_queued: guard.limits.maxQueued,
    queue_timeout_ms: guard.limits.queueTimeoutMs,
    api_key: options.guard?.apiKey === undefined ? "off" : "required",
  });
  let stopping: Promise<void> | undefined;
  return {
    url,
    finished: server.finished,
    shutdown() {
      stopping ??= (async () => {
        const drain = server.shutdown();
        let timer: ReturnType<typeof setTimeout> | undefined;
        const deadline = new Promise<void>((
          r,
        ) => (timer = setTimeout(r, options.drainTimeoutMs ?? 30_000)));
        await Promise.race([drain, deadline]);
        clearTimeout(timer);
        await models.close();
        decisions?.close();
      })();
      return stopping;
    },
  };
}

/** The decision log at `path`, or an error that names the flag and the file. */
function openLog(path: string, logger: Logger): DecisionLog {
  try {
    return openDecisionLog(
      path,
      (err) =>
        logger.error("router decision log: writing failed; no more decisions logged", {
          path,
          error: String(err),
        }),
    );
  } catch (err) {
    throw new InvalidArgumentError(
      `--router-decision-log: cannot open ${JSON.stringify(path)}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

/** Resolves on the first SIGINT or SIGTERM (the listeners are removed by `dispose`). */
export function untilSignal(): { signalled: Promise<Deno.Signal>; dispose: () => void } {
  const got = Promise.withResolvers<Deno.Signal>();
  const handlers = (["SIGINT", "SIGTERM"] as Deno.Signal[]).map((s) => {
    const h = () => got.resolve(s);
    Deno.addSignalListener(s, h);
    return [s, h] as const;
  });
  return {
    signalled: got.promise,
    dispose: () => handlers.forEach(([s, h]) => Deno.removeSignalListener(s, h)),
  };
}
