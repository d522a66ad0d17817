// The frontend's one error boundary: typed failures become OpenAI error objects with the
// HTTP status their class says (the request's own 4xx, 503 without workers, an upstream's
// status or 502 for a worker's invalid output, 503 for a frontend wait that ran out, 500 for
// engine failures).

import {
  DynamoError,
  NoInstancesError,
  RemoteError,
  TimeoutError,
  UpstreamError,
} from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import { RequestError } from "../openai/errors.ts";
import { jsonResponse } from "./encode.ts";
import { WorkerOutputError } from "./engine_output.ts";
import { MigrationExhaustedError } from "./migration.ts";

function openaiError(
  status: number,
  message: string,
  type: string,
  code: string | null,
  headers?: Record<string, string>,
): Response {
  return jsonResponse({ error: { message, type, param: null, code } }, status, headers);
}

/**
 * The response for a request that failed before its answer started.
 *
 * @param err what the request failed with
 * @param log where unexpected failures are logged (with their stack)
 * @returns an OpenAI error object with the status that fits `err`
 * @example
 * ```ts ignore
 * try { return await handle(request); } catch (err) { return errorResponse(err, log); }
 * ```
 */
export function errorResponse(err: unknown, log: Logger): Response {
  if (err instanceof RequestError) return jsonResponse(err.toJSON(), err.status);
  if (err instanceof NoInstancesError) {
    return openaiError(503, err.message, "service_unavailable", "no_instances", {
      "retry-after": "1",
    });
  }
  if (err instanceof TimeoutError) {
    // A wait with a deadline in the frontend (discovery's first listing of an endpoint): the
    // service is not ready; nothing reached a worker.
    return openaiError(503, err.message, "service_unavailable", "timeout", {
      "retry-after": "1",
    });
  }
  if (err instanceof MigrationExhaustedError) {
    return openaiError(500, err.message, "internal_error", "migration_exhausted");
  }
  if (err instanceof UpstreamError) {
    // An upstream OpenAI server's own error: keep client errors as they were, 502 otherwise.
    const clientError = err.status >= 400 && err.status < 500;
    return openaiError(
      clientError ? err.status : 502,
      err.message,
      err.status < 500 ? "invalid_request_error" : "upstream_error",
      null,
    );
  }
  if (err instanceof RemoteError && err.remoteName === "UpstreamError") {
    // From a worker that did not send the upstream's status along.
    return openaiError(502, err.message, "upstream_error", null);
  }
  if (err instanceof WorkerOutputError) {
    // Already logged (once, with the worker and the reason) where it was refused.
    return openaiError(502, err.message, "upstream_error", "invalid_worker_output");
  }
  if (err instanceof RemoteError) {
    return openaiError(500, `engine error: ${err.message}`, "internal_error", err.remoteName);
  }
  log.error("request failed", {
    error: err instanceof Error ? err.stack ?? err.message : String(err),
  });
  const message = err instanceof DynamoError ? err.message : "internal error";
  return openaiError(500, message, "internal_error", null);
}
