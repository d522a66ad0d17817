// The upstream engine: forwards OpenAI requests to an OpenAI-compatible server a user
// already runs (vLLM, SGLang, llama.cpp's server), so the frontend, routing and
// migration can sit in front of it. A Text-input handler: OpenAI request in, chunks out.

import { EventSourceParserStream } from "eventsource-parser/stream";
import type { Context } from "../../runtime/context.ts";
import { DynamoError, InvalidArgumentError, UpstreamError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import type { LoadedModel } from "../model/model_source.ts";
import { ModelInput, ModelType } from "../protocols.ts";

export { UpstreamError };

/** Options of {@linkcode openaiUpstream}. */
export interface OpenAIUpstreamOptions {
  /**
   * Base URL, e.g. "http://127.0.0.1:8001" (a trailing /v1 is accepted), or several servers
   * of the same model: each request goes to the reachable one with the fewest requests in
   * flight (ties in turn).
   */
  baseUrl: string | readonly string[];
  /** Model name to ask the upstream for (default: the request's). */
  upstreamModel?: string;
  /** Bearer token for the upstream. */
  apiKey?: string;
  /** Deadline for the upstream's response headers in ms (default 60000). */
  connectTimeoutMs?: number;
  /**
   * How long an upstream that could not be reached is passed over before it is checked again
   * (`GET /v1/models`, started by the next request, which goes elsewhere meanwhile), in ms
   * (default 5000). While every upstream is down, requests still try the one down longest.
   */
  retryAfterMs?: number;
  /** fetch to use (tests). */
  fetch?: typeof fetch;
  /** Where an upstream that cannot be reached (and its return) is reported, once per change. */
  logger?: Logger;
}

/** One upstream server and what the handler knows of it. */
interface Upstream {
  base: URL;
  inflight: number;
  /** performance.now() when it was last found unreachable; undefined while it answers. */
  downSince?: number;
  /** Whether a health check of this down upstream is under way. */
  probing?: boolean;
}

/**
 * Builds a Text-input handler that forwards to OpenAI-compatible servers. A streaming request
 * is forwarded streamed, with the upstream's usage chunk always asked for and passed on (the
 * frontend counts tokens from it, and drops it for clients that did not ask); a non-streaming
 * one is forwarded as is and its whole answer (usage, tool calls, logprobs, reasoning) passed
 * on. A request whose upstream cannot be reached goes to the next one before anything was sent.
 *
 * @example
 * ```ts
 * await endpoint.serveEndpoint(openaiUpstream({ baseUrl: "http://127.0.0.1:8001" }));
 * ```
 */
export function openaiUpstream(
  options: OpenAIUpstreamOptions,
): (req: Record<string, unknown>, ctx: Context) => AsyncGenerator<Record<string, unknown>> {
  const upstreams: Upstream[] = upstreamBases(options.baseUrl).map((base) => ({
    base,
    inflight: 0,
  }));
  const doFetch = options.fetch ?? fetch;
  const connectTimeoutMs = options.connectTimeoutMs ?? 60_000;
  const retryAfterMs = options.retryAfterMs ?? 5_000;
  let turn = 0;
  // Reported once per change, not once per request.
  const reached = (u: Upstream) => {
    if (u.downSince === undefined) return;
    u.downSince = undefined;
    options.logger?.info("upstream reachable again", { upstream: u.base.origin });
  };
  const failed = (u: Upstream, why: string): UpstreamError => {
    if (u.downSince === undefined) {
      options.logger?.warn("upstream unreachable", { upstream: u.base.origin, error: why });
    }
    u.downSince = performance.now();
    return new UpstreamError(502, `cannot reach upstream ${u.base.origin}: ${why}`);
  };
  /** Checks a down upstream in the background; it takes requests again once it answers. */
  const probe = (u: Upstream) => {
    u.probing = true;
    checkOne(u.base, options, PROBE_TIMEOUT_MS)
      .then((problem) => {
        if (problem === undefined) reached(u);
        else if (u.downSince !== undefined) u.downSince = performance.now();
      })
      .catch(() => {})
      .finally(() => u.probing = false);
  };
  /** Upstreams in the order to try: reachable ones by load (ties in turn), then down ones. */
  const order = (): Upstream[] => {
    const now = performance.now();
    const start = turn++ % upstreams.length;
    const rotated = [...upstreams.slice(start), ...upstreams.slice(0, start)];
    const up = rotated.filter((u) => u.downSince === undefined);
    const down = rotated.filter((u) => u.downSince !== undefined)
      .sort((a, b) => a.downSince! - b.downSince!);
    for (const u of down) {
      if (!u.probing && now - u.downSince! >= retryAfterMs && up.length > 0) probe(u);
    }
    // A stable sort keeps the rotation among equally loaded upstreams.
    return [...up.sort((a, b) => a.inflight - b.inflight), ...down];
  };

  return async function* upstream(req: Record<string, unknown>, ctx: Context) {
    if (typeof req !== "object" || req === null) {
      throw new InvalidArgumentError("upstream engine needs an OpenAI request object");
    }
    const isChat = Array.isArray(req.messages);
    const path = isChat ? "v1/chat/completions" : "v1/completions";
    const ourModel = req.model;
    const streamed = req.stream === true;
    const body = {
      ...req,
      model: options.upstreamModel ?? req.model,
      ...(streamed && { stream_options: { include_usage: true } }),
    };
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept: streamed ? "text/event-stream" : "application/json",
    };
    if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
    let res: Response | undefined;
    let chosen: Upstream | undefined;
    let lastError: UpstreamError | undefined;
    for (const u of order()) {
      // The deadline is for the headers only: the signal also ends the body, which may
      // stream for as long as the generation lasts.
      const timeout = new AbortController();
      const timer = setTimeout(
        () => timeout.abort(new DOMException("upstream headers deadline", "TimeoutError")),
        connectTimeoutMs,
      );
      const signal = AbortSignal.any([ctx.signal, timeout.signal]);
      u.inflight++;
      try {
        res = await doFetch(new URL(path, u.base), {
          method: "POST",
          headers,
          body: JSON.stringify(body),
          signal,
        });
        chosen = u;
        break;
      } catch (err) {
        u.inflight--;
        ctx.signal.throwIfAborted();
        lastError = failed(
          u,
          timeout.signal.aborted
            ? `no answer within ${connectTimeoutMs} ms`
            : (err as Error).message,
        );
      } finally {
        clearTimeout(timer);
      }
    }
    if (!res || !chosen) throw lastError!;
    const u = chosen;
    try {
      reached(u);
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
      if (!res.body) throw new DynamoError(`upstream ${u.base.origin} sent no body`);
      // An upstream that streams whatever it is asked gets its chunks folded by the frontend.
      const sse = res.headers.get("content-type")?.includes("text/event-stream") === true;
      if (!streamed && !sse) {
        const answer = parseObject(await res.text(), u.base);
        if (answer.error) throw new UpstreamError(502, JSON.stringify(answer.error));
        yield { ...answer, model: ourModel };
        return;
      }
      yield* events(res.body, u.base, ourModel);
    } finally {
      u.inflight--;
    }
  };
}

/** Deadline of the health check of an upstream found unreachable, in ms. */
const PROBE_TIMEOUT_MS = 2_000;

/** The chunks of an upstream's SSE body, each with our model name. */
async function* events(
  body: ReadableStream<Uint8Array>,
  base: URL,
  ourModel: unknown,
): AsyncGenerator<Record<string, unknown>> {
  const reader = body
    .pipeThrough(new TextDecoderStream())
    .pipeThrough(new EventSourceParserStream())
    .getReader();
  try {
    for (;;) {
      const { done, value: event } = await reader.read();
      if (done) break;
      const data = event.data;
      if (data === "" || data === "[DONE]") continue;
      const chunk = parseObject(data, base);
      if (chunk.error) throw new UpstreamError(502, JSON.stringify(chunk.error));
      yield { ...chunk, model: ourModel };
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

function parseObject(text: string, base: URL): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UpstreamError(502, `upstream ${base.origin} sent an answer that is not JSON`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UpstreamError(502, `upstream ${base.origin} sent an answer that is not an object`);
  }
  return value as Record<string, unknown>;
}

/** The upstreams' base URLs, checked: at least one. */
function upstreamBases(baseUrl: string | readonly string[]): URL[] {
  const list = typeof baseUrl === "string" ? [baseUrl] : [...baseUrl];
  if (list.length === 0) throw new InvalidArgumentError("needs at least one upstream URL");
  return list.map(upstreamBase);
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
 * Checks that the upstreams answer at all (`GET /v1/models`, any HTTP status counts): healthy
 * while at least one does.
 *
 * @param options the upstreams' URLs, key, and fetch
 * @param timeoutMs how long to wait (default 2000)
 * @returns undefined when one answered, else why none did
 * @example
 * ```ts ignore
 * const problem = await checkUpstream({ baseUrl: "http://127.0.0.1:8001" });
 * ```
 */
export async function checkUpstream(
  options: Pick<OpenAIUpstreamOptions, "baseUrl" | "apiKey" | "fetch">,
  timeoutMs = 2000,
): Promise<string | undefined> {
  const problems = await Promise.all(
    upstreamBases(options.baseUrl).map((base) => checkOne(base, options, timeoutMs)),
  );
  return problems.some((p) => p === undefined) ? undefined : problems.join("; ");
}

async function checkOne(
  base: URL,
  options: Pick<OpenAIUpstreamOptions, "apiKey" | "fetch">,
  timeoutMs: number,
): Promise<string | undefined> {
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

/** Options of {@linkcode upstreamModelCard}. */
export interface UpstreamModelCardOptions
  extends Pick<OpenAIUpstreamOptions, "baseUrl" | "apiKey" | "fetch"> {
  /** The upstream's model id (default: the one model it lists). */
  upstreamModel?: string;
  /** The name clients use (default: the upstream's model id). */
  modelName?: string;
  /** Context length to publish instead of the one the upstream reports. */
  contextLength?: number;
  /** Times a request may move to another instance (default 0). */
  migrationLimit?: number;
  /** Deadline for each upstream's `/v1/models` answer in ms (default 5000). */
  timeoutMs?: number;
}

/**
 * The card of a model an upstream serves, from its `GET /v1/models` (the first upstream that
 * answers): its name, and its context length where the server reports one (vLLM and SGLang
 * `max_model_len`, llama.cpp's server `meta.n_ctx_train`, else `context_length` or
 * `context_window`; 0 when none does). The tokenizer is not known: the card carries no
 * tokenizer files and says so in `user_data.upstream.tokenizer`; token counts come from the
 * upstream's `usage`. To describe the model with its own tokenizer files instead, register a
 * model folder with {@linkcode registerLlm} (`dynamo run --model-path`).
 *
 * @param options the upstreams, the model to describe, and overrides
 * @returns the card (Text input, chat and completions) with no files
 * @throws {UpstreamError} no upstream answers `/v1/models` with a model list (502), or the
 *   model asked for is not in it (404), or it lists several and none was named (400)
 * @example
 * ```ts ignore
 * const card = await publishModelCard(endpoint, await upstreamModelCard({ baseUrl }));
 * ```
 */
export async function upstreamModelCard(options: UpstreamModelCardOptions): Promise<LoadedModel> {
  const bases = upstreamBases(options.baseUrl);
  const timeoutMs = options.timeoutMs ?? 5_000;
  const headers: Record<string, string> = { accept: "application/json" };
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  const problems: string[] = [];
  for (const base of bases) {
    let listed: Record<string, unknown>[];
    try {
      const res = await (options.fetch ?? fetch)(new URL("v1/models", base), {
        headers,
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`GET /v1/models answered ${res.status}: ${text.slice(0, 200)}`);
      const data = parseObject(text, base).data;
      if (!Array.isArray(data)) throw new Error("GET /v1/models has no `data` list");
      listed = data.filter((m): m is Record<string, unknown> =>
        typeof m === "object" && m !== null && typeof m.id === "string"
      );
    } catch (err) {
      const why = err instanceof Error && err.name === "TimeoutError"
        ? `no answer within ${timeoutMs} ms`
        : (err as Error).message;
      problems.push(`${base.origin}: ${why}`);
      continue;
    }
    const ids = listed.map((m) => m.id as string);
    const wanted = options.upstreamModel;
    const entry = wanted === undefined
      ? listed.length === 1 ? listed[0] : undefined
      : listed.find((m) => m.id === wanted);
    if (entry === undefined) {
      if (wanted !== undefined) {
        throw new UpstreamError(
          404,
          `upstream ${base.origin} does not serve ${JSON.stringify(wanted)}; it lists ${
            ids.length === 0 ? "no models" : ids.map((i) => JSON.stringify(i)).join(", ")
          }`,
        );
      }
      throw new UpstreamError(
        400,
        ids.length === 0
          ? `upstream ${base.origin} lists no models`
          : `upstream ${base.origin} lists several models (${
            ids.map((i) => JSON.stringify(i)).join(", ")
          }): name the one to serve`,
      );
    }
    const id = entry.id as string;
    const reported = reportedContextLength(entry);
    return textModelCard(bases, options, {
      model: id,
      // vLLM's: the folder or repo id the server loaded the model from.
      ...(typeof entry.root === "string" && entry.root !== id && { root: entry.root }),
      context_length: reported ?? "not reported",
    }, reported);
  }
  throw new UpstreamError(
    502,
    `cannot read the model list (GET /v1/models) of any upstream: ${problems.join("; ")}`,
  );
}

/**
 * The card of a model whose upstreams cannot be asked for it (none answers yet): its name and
 * nothing else the upstreams would tell, which `user_data.upstream` says. With it a frontend
 * can start before its upstreams and report them down until they answer.
 *
 * @param options the upstreams, the model's upstream id (required), and overrides
 * @returns the card (Text input, chat and completions) with no files and, unless given, no
 *   context length (0)
 * @throws {InvalidArgumentError} no `upstreamModel`, or a bad URL
 * @example
 * ```ts ignore
 * const card = bareUpstreamCard({ baseUrl: "http://127.0.0.1:8001", upstreamModel: "m" });
 * ```
 */
export function bareUpstreamCard(options: UpstreamModelCardOptions): LoadedModel {
  if (options.upstreamModel === undefined || options.upstreamModel === "") {
    throw new InvalidArgumentError("a card without the upstream's model list needs its name");
  }
  return textModelCard(upstreamBases(options.baseUrl), options, {
    model: options.upstreamModel,
    context_length: "not reported (the upstream could not be reached)",
  });
}

/** A Text-input card for an upstream model, with what is known of it in `user_data`. */
function textModelCard(
  bases: URL[],
  options: UpstreamModelCardOptions,
  known: { model: string; [key: string]: unknown },
  reportedContext?: number,
): LoadedModel {
  return {
    card: {
      display_name: options.modelName ?? known.model,
      source_path: bases.map((b) => b.origin + b.pathname.replace(/\/$/, "")).join(","),
      model_type: ModelType.Chat | ModelType.Completions,
      model_input: ModelInput.Text,
      context_length: options.contextLength ?? reportedContext ?? 0,
      kv_cache_block_size: 16,
      migration_limit: options.migrationLimit ?? 0,
      files: {},
      eos_token_ids: [],
      user_data: {
        upstream: {
          ...known,
          urls: bases.map((b) => b.origin),
          tokenizer: "unknown: token counts come from the upstream's usage",
        },
      },
    },
    files: new Map(),
    localPath: bases[0]!.href,
  };
}

/** The context length an upstream's `/v1/models` entry reports, if any. */
function reportedContextLength(entry: Record<string, unknown>): number | undefined {
  const meta = entry.meta as Record<string, unknown> | undefined;
  for (
    const v of [entry.max_model_len, entry.context_length, entry.context_window, meta?.n_ctx_train]
  ) {
    if (typeof v === "number" && Number.isSafeInteger(v) && v > 0) return v;
  }
  return undefined;
}
