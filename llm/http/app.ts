// The OpenAI-compatible HTTP frontend as a plain fetch handler (no socket: tests call it
// directly, the CLI hands it to Deno.serve). It only wires routes to the request pipeline
// (llm/pipeline/): parse -> resolve model -> admit -> the model's composed pipeline ->
// encode; one error boundary turns typed errors into OpenAI error objects.

import type { BackendsInfo } from "../../runtime/backends.ts";
import { Context } from "../../runtime/context.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import type { TraceSpan, Tracing } from "../../runtime/tracing/types.ts";
import type { ModelManager } from "../model/registry.ts";
import { RequestError } from "../openai/errors.ts";
import { admit } from "../pipeline/admit.ts";
import { ModelPipelines } from "../pipeline/compose.ts";
import { jsonResponse, sseResponse } from "../pipeline/encode.ts";
import { errorResponse } from "../pipeline/error_boundary.ts";
import { type EndpointKind, parseRequest } from "../pipeline/parse.ts";
import { resolveModel } from "../pipeline/resolve.ts";
import { reasoningFormat } from "../parsers/reasoning.ts";
import { toolCallFormat } from "../parsers/tool_calls.ts";
import { routePath } from "./guard.ts";
import { FrontendMetrics } from "./metrics.ts";

export { aggregateChunks } from "../pipeline/encode.ts";

/** Options of {@linkcode createFrontend}. */
export interface FrontendOptions {
  /** The registered models the frontend serves. */
  models: ModelManager;
  /** Where the frontend counts requests (default: a new registry of its own). */
  metrics?: FrontendMetrics;
  /** Where the frontend logs (default: silent). */
  logger?: Logger;
  /** Largest request body in bytes (default 32 MiB). */
  maxBodyBytes?: number;
  /**
   * The runtime's backends, reported by `/health` (so that a frontend on the in-process
   * default, which no other process can reach, says so there too).
   */
  backends?: BackendsInfo;
  /**
   * Extra health check for `/health` (e.g. that an upstream server answers): resolves to why
   * the service is unhealthy, or undefined when it is healthy.
   */
  checkHealth?: () => Promise<string | undefined>;
  /**
   * The tool-call parser of chat answers (hermes, llama3_json, mistral, pythonic,
   * deepseek_v3, deepseek_v3_1) for models whose card names none: requests with `tools` are
   * then served. Without one, such requests get a 400.
   */
  toolCallParser?: string;
  /** The reasoning parser (basic, qwen3, deepseek_r1) for models whose card names none. */
  reasoningParser?: string;
  /**
   * OpenTelemetry tracing (default: off): each generation request gets an HTTP server span,
   * the child of the request's `traceparent` header when it has a valid one, and its stages
   * (preprocess, route, request plane) child spans. Usually the runtime's `tracing`.
   */
  tracing?: Tracing;
}

/** The frontend: a fetch handler and its metrics. */
export interface Frontend {
  /** Answers one HTTP request (OpenAI routes, `/health`, `/live`, `/metrics`). */
  fetch(request: Request): Promise<Response>;
  /** The frontend's Prometheus metrics. */
  readonly metrics: FrontendMetrics;
}

/**
 * Builds the OpenAI frontend over a {@linkcode ModelManager}.
 *
 * @throws {UnknownParserError} `toolCallParser` or `reasoningParser` is not a known name
 * @example
 * ```ts
 * import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
 * import { ModelManager } from "../model/registry.ts";
 *
 * const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
 * const models = new ModelManager(runtime);
 * await models.start();
 * const frontend = createFrontend({ models });
 * // A server: Deno.serve({ port: 8000 }, frontend.fetch). Or call it without a socket:
 * const res = await frontend.fetch(new Request("http://localhost/v1/models"));
 * console.log(await res.json()); // { object: "list", data: [] }
 * await models.close();
 * await runtime.shutdown();
 * ```
 */
export function createFrontend(options: FrontendOptions): Frontend {
  const models = options.models;
  const metrics = options.metrics ?? new FrontendMetrics();
  const log = options.logger ?? silentLogger;
  const maxBody = options.maxBodyBytes ?? 32 * 1024 * 1024;
  const tracing = options.tracing;
  // An unknown name fails here, not at the first request.
  if (options.toolCallParser !== undefined) toolCallFormat(options.toolCallParser);
  if (options.reasoningParser !== undefined) reasoningFormat(options.reasoningParser);
  const pipelines = new ModelPipelines({
    metrics,
    logger: log,
    toolCallParser: options.toolCallParser,
    reasoningParser: options.reasoningParser,
  });

  async function route(request: Request): Promise<Response> {
    const path = routePath(request.url);
    const method = request.method;
    const only = (m: string) => {
      if (method !== m) {
        throw new RequestError(405, `method ${method} not allowed on ${path}; use ${m}`, {
          code: "method_not_allowed",
        });
      }
    };
    switch (path) {
      case "/v1/chat/completions":
        only("POST");
        return await generate("chat", request);
      case "/v1/completions":
        only("POST");
        return await generate("completion", request);
      case "/v1/models":
        only("GET");
        return jsonResponse({ object: "list", data: models.list().map(modelObject) });
      case "/health":
        if (!models.synced) {
          return jsonResponse({ status: "unhealthy", message: "discovery not synced yet" }, 503);
        }
        {
          const problem = await options.checkHealth?.();
          if (problem !== undefined) {
            return jsonResponse({ status: "unhealthy", message: problem }, 503);
          }
        }
        return jsonResponse({
          status: "healthy",
          models: models.list().map((m) => ({ name: m.name, instances: m.instanceCount })),
          ...(options.backends ? { backends: options.backends } : {}),
        });
      case "/live":
        return jsonResponse({ status: "live" });
      case "/metrics":
        only("GET");
        return new Response(await metrics.render(), {
          headers: { "content-type": metrics.registry.contentType },
        });
      default:
        if (path.startsWith("/v1/models/")) {
          only("GET");
          // Model ids may hold slashes ("org/name"): the rest of the path is the id.
          const id = decodeURIComponent(path.slice("/v1/models/".length));
          const model = models.get(id);
          if (!model) throw RequestError.modelNotFound(id);
          return jsonResponse(modelObject(model));
        }
        throw new RequestError(404, `no route for ${method} ${path}`, { code: "not_found" });
    }
  }

  // Chosen once: with tracing off, a request takes no extra step at all.
  const generate = tracing === undefined ? generateIn : generateTraced;

  async function generateTraced(kind: EndpointKind, request: Request): Promise<Response> {
    const span = tracing!.startSpan(
      kind === "chat" ? "POST /v1/chat/completions" : "POST /v1/completions",
      {
        kind: "server",
        traceparent: request.headers.get("traceparent"),
        tracestate: request.headers.get("tracestate"),
        attributes: { "http.request.method": "POST" },
      },
    );
    try {
      return await generateIn(kind, request, span);
    } catch (err) {
      // Failed before its admission (a bad body, an unknown model) or with it (then ended there).
      span.fail(err);
      span.end();
      throw err;
    }
  }

  async function generateIn(
    kind: EndpointKind,
    request: Request,
    span?: TraceSpan,
  ): Promise<Response> {
    const req = await parseRequest(request, kind, maxBody);
    const model = resolveModel(models, req.model);
    const admission = admit(metrics, model.name, kind, req.stream === true);
    // Internal ids stay unique (routing books load by them); a client's own id is echoed.
    const ctx = new Context(crypto.randomUUID());
    const echoId = clientRequestId(request) ?? ctx.id;
    if (span !== undefined) {
      span.setAttribute("gen_ai.request.model", model.name);
      span.setAttribute("dynamo.request_id", ctx.id);
      ctx.trace = span;
      admission.trace = span;
    }
    try {
      const pipeline = await pipelines.get(model);
      const run = await pipeline.start(kind, req, ctx, admission);
      if (req.stream) {
        return sseResponse(run.sse(), ctx, admission, echoId);
      }
      const response = await run.collect();
      admission.finish("success");
      return jsonResponse(response, 200, { "x-request-id": echoId });
    } catch (err) {
      ctx.kill();
      span?.fail(err);
      admission.finish("error");
      throw err;
    }
  }

  return {
    metrics,
    async fetch(request: Request): Promise<Response> {
      try {
        return await route(request);
      } catch (err) {
        return errorResponse(err, log);
      }
    },
  };
}

/** A model as `/v1/models` lists it. */
function modelObject(m: { name: string; created: number }) {
  return { id: m.name, object: "model", created: m.created, owned_by: "dynamo" };
}

/** Request ids a client may choose: short, and safe in logs and headers. */
const CLIENT_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The client's `x-request-id` when it is a safe one, to send back on the response (a client
 * matches answers to requests by it); without one, the response carries the server's id.
 */
function clientRequestId(request: Request): string | undefined {
  const given = request.headers.get("x-request-id");
  return given !== null && CLIENT_REQUEST_ID.test(given) ? given : undefined;
}
