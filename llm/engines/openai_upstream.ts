// The upstream engine: forwards OpenAI requests to an OpenAI-compatible server a user
// already runs (vLLM, SGLang, llama.cpp's server), so the frontend, routing and
// migration can sit in front of it. A Text-input handler: OpenAI request in, chunks out.

import { EventSourceParserStream } from "eventsource-parser/stream";
import type { Context } from "../../runtime/context.ts";
import { DynamoError, InvalidArgumentError, UpstreamError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";

export { UpstreamError };

/** Options of {@linkcode openaiUpstream}. */
export interface OpenAIUpstreamOptions {
  /** Base URL, e.g. "http://127.0.0.1:8001" (a trailing /v1 is accepted). */
  baseUrl: string;
  /** Model name to ask the upstream for (default: the request's). */
  upstreamModel?: string;
  /** Bearer token for the upstream. */
  apiKey?: string;
  /** Deadline for the upstream's response headers in ms (default 60000). */
  connectTimeoutMs?: number;
  /** fetch to use (tests). */
  fetch?: typeof fetch;
  /** Where an upstream that cannot be reached (and its return) is reported, once per change. */
  logger?: Logger;
}

/**
 * Builds a Text-input handler that forwards to an OpenAI-compatible server.
 *
 * @example
 * ```ts
 * await endpoint.serveEndpoint(openaiUpstream({ baseUrl: "http://127.0.0.1:8001" }));
 * ```
 */
export function openaiUpstream(
  options: OpenAIUpstreamOptions,
): (req: Record<string, unknown>, ctx: Context) => AsyncGenerator<Record<string, unknown>> {
  const base = upstreamBase(options.baseUrl);
  const doFetch = options.fetch ?? fetch;
  const connectTimeoutMs = options.connectTimeoutMs ?? 60_000;
  // Reported once per change, not once per request.
  let unreachable = false;
  const reached = () => {
    if (!unreachable) return;
    unreachable = false;
    options.logger?.info("upstream reachable again", { upstream: base.origin });
  };
  const failed = (why: string): UpstreamError => {
    if (!unreachable) {
      unreachable = true;
      options.logger?.warn("upstream unreachable", { upstream: base.origin, error: why });
    }
    return new UpstreamError(502, `cannot reach upstream ${base.origin}: ${why}`);
  };

  return async function* upstream(req: Record<string, unknown>, ctx: Context) {
    if (typeof req !== "object" || req === null) {
      throw new InvalidArgumentError("upstream engine needs an OpenAI request object");
    }
    const isChat = Array.isArray(req.messages);
    const url = new URL(isChat ? "v1/chat/completions" : "v1/completions", base);
    const ourModel = req.model;
    const body = {
      ...req,
      model: options.upstreamModel ?? req.model,
      stream: true,
      stream_options: { include_usage: true },
    };
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: "text/event-stream",
    };
    if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
    const timeout = AbortSignal.timeout(connectTimeoutMs);
    const signal = AbortSignal.any([ctx.signal, timeout]);
    let res: Response;
    try {
      res = await doFetch(url, { method: "POST", headers, body: JSON.stringify(body), signal });
    } catch (err) {
      ctx.signal.throwIfAborted();
      throw failed(
        timeout.aborted ? `no answer within ${connectTimeoutMs} ms` : (err as Error).message,
      );
    }
    reached();
    if (!res.ok) {
      const text = await res.text().catch(() => "");
      let message = text;
      try {
        message = (JSON.parse(text) as { error?: { message?: string } }).error?.message ?? text;
      } catch {
        // not JSON: keep the text
      }
      throw new UpstreamError(res.status, message || res.statusText);
    }
    if (!res.body) throw new DynamoError(`upstream ${url.origin} sent no body`);
    const wantUsage =
      (req.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
    const events = res.body
      .pipeThrough(new TextDecoderStream())
      .pipeThrough(new EventSourceParserStream())
      .getReader();
    try {
      for (;;) {
        const { done, value: event } = await events.read();
        if (done) break;
        const data = event.data;
        if (data === "" || data === "[DONE]") continue;
        let chunk: Record<string, unknown>;
        try {
          chunk = JSON.parse(data) as Record<string, unknown>;
        } catch {
          throw new UpstreamError(502, `upstream ${url.origin} sent an event that is not JSON`);
        }
        if (typeof chunk !== "object" || chunk === null) {
          throw new UpstreamError(
            502,
            `upstream ${url.origin} sent an event that is not an object`,
          );
        }
        if (chunk.error) throw new UpstreamError(502, JSON.stringify(chunk.error));
        const choices = chunk.choices as unknown[] | undefined;
        if (!wantUsage && chunk.usage && (!choices || choices.length === 0)) continue;
        if (!wantUsage) delete chunk.usage;
        yield { ...chunk, model: ourModel };
      }
    } finally {
      await events.cancel().catch(() => {});
    }
  };
}

/** The upstream's base URL (without /v1), checked. */
function upstreamBase(baseUrl: string): URL {
  let base: URL;
  try {
    base = new URL(baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "") + "/");
  } catch {
    throw new InvalidArgumentError(`upstream URL must be like http://HOST:PORT, got "${baseUrl}"`);
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new InvalidArgumentError(`upstream URL must be http(s), got "${baseUrl}"`);
  }
  return base;
}

/**
 * Checks that an upstream answers at all (`GET /v1/models`, any HTTP status counts).
 *
 * @param options the upstream's URL, key, and fetch
 * @param timeoutMs how long to wait (default 2000)
 * @returns undefined when it answered, else why not
 * @example
 * ```ts ignore
 * const problem = await checkUpstream({ baseUrl: "http://127.0.0.1:8001" });
 * ```
 */
export async function checkUpstream(
  options: Pick<OpenAIUpstreamOptions, "baseUrl" | "apiKey" | "fetch">,
  timeoutMs = 2000,
): Promise<string | undefined> {
  const base = upstreamBase(options.baseUrl);
  const headers: Record<string, string> = {};
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  try {
    const res = await (options.fetch ?? fetch)(new URL("v1/models", base), {
      headers,
      signal: AbortSignal.timeout(timeoutMs),
    });
    await res.body?.cancel();
    return undefined;
  } catch (err) {
    return `upstream ${base.origin} cannot be reached: ${
      err instanceof Error && err.name === "TimeoutError"
        ? `no answer within ${timeoutMs} ms`
        : (err as Error).message
    }`;
  }
}
