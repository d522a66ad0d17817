// The OpenAI-compatible HTTP frontend as a plain fetch handler (no socket: tests call it
// directly, the CLI hands it to Deno.serve). One error boundary turns typed errors into
// OpenAI error objects with the right status.

import { Context } from "../../runtime/context.ts";
import { DynamoError, NoInstancesError, RemoteError } from "../../runtime/errors.ts";
import { type Logger, silentLogger } from "../../runtime/logger.ts";
import { isMigratable, MigrationExhaustedError, openMigrating } from "../pipeline/migration.ts";
import type { ModelManager, ServedModel } from "../model/registry.ts";
import type { ChatCompletionRequest, CompletionRequest } from "../openai/types.ts";
import { RequestError } from "../openai/errors.ts";
import { validateChatRequest, validateCompletionRequest } from "../openai/validate.ts";
import { OutputProcessor } from "../pipeline/postprocessor.ts";
import { routePath } from "./guard.ts";
import { choiceRequest } from "../preprocess/preprocessor.ts";
import type { FinishReason, LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { ModelInput } from "../protocols.ts";
import { readJsonBody } from "./body.ts";
import { FrontendMetrics } from "./metrics.ts";
import { choiceJson } from "./sse_choice.ts";

/** Options of {@linkcode createFrontend}. */
export interface FrontendOptions {
  models: ModelManager;
  metrics?: FrontendMetrics;
  logger?: Logger;
  /** Largest request body in bytes (default 32 MiB). */
  maxBodyBytes?: number;
}

/** The frontend: a fetch handler and its metrics. */
export interface Frontend {
  fetch(request: Request): Promise<Response>;
  readonly metrics: FrontendMetrics;
}

type Kind = "chat" | "completion";

const JSON_HEADERS = { "content-type": "application/json" };
const encoder = new TextEncoder();

function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { ...JSON_HEADERS, ...headers } });
}

function errorResponse(err: unknown, log: Logger): Response {
  if (err instanceof RequestError) return json(err.toJSON(), err.status);
  if (err instanceof NoInstancesError) {
    return json(
      {
        error: {
          message: err.message,
          type: "service_unavailable",
          param: null,
          code: "no_instances",
        },
      },
      503,
      { "retry-after": "1" },
    );
  }
  if (err instanceof MigrationExhaustedError) {
    return json({
      error: {
        message: err.message,
        type: "internal_error",
        param: null,
        code: "migration_exhausted",
      },
    }, 500);
  }
  if (err instanceof RemoteError && err.remoteName === "UpstreamError") {
    // An upstream OpenAI server's own error: keep client errors as they were, 502 otherwise.
    const m = /^HTTP (\d{3}): ([\s\S]*)$/.exec(err.message);
    const status = m ? Number(m[1]) : 502;
    return json(
      {
        error: {
          message: m?.[2] ?? err.message,
          type: status < 500 ? "invalid_request_error" : "upstream_error",
          param: null,
          code: null,
        },
      },
      status >= 400 && status < 500 ? status : 502,
    );
  }
  if (err instanceof RemoteError) {
    return json({
      error: {
        message: `engine error: ${err.message}`,
        type: "internal_error",
        param: null,
        code: err.remoteName,
      },
    }, 500);
  }
  log.error("request failed", {
    error: err instanceof Error ? err.stack ?? err.message : String(err),
  });
  const message = err instanceof DynamoError ? err.message : "internal error";
  return json({ error: { message, type: "internal_error", param: null, code: null } }, 500);
}

/**
 * Builds the OpenAI frontend over a {@linkcode ModelManager}.
 *
 * @example
 * ```ts
 * const frontend = createFrontend({ models });
 * Deno.serve({ port: 8000 }, frontend.fetch);
 * ```
 */
export function createFrontend(options: FrontendOptions): Frontend {
  const models = options.models;
  const metrics = options.metrics ?? new FrontendMetrics();
  const log = options.logger ?? silentLogger;
  const maxBody = options.maxBodyBytes ?? 32 * 1024 * 1024;

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
        return json({
          object: "list",
          data: models.list().map((m) => ({
            id: m.name,
            object: "model",
            created: m.created,
            owned_by: "dynamo",
          })),
        });
      case "/health":
        if (!models.synced) {
          return json({ status: "unhealthy", message: "discovery not synced yet" }, 503);
        }
        return json({
          status: "healthy",
          models: models.list().map((m) => ({ name: m.name, instances: m.instanceCount })),
        });
      case "/live":
        return json({ status: "live" });
      case "/metrics":
        only("GET");
        return new Response(await metrics.render(), {
          headers: { "content-type": metrics.registry.contentType },
        });
      default:
        throw new RequestError(404, `no route for ${method} ${path}`, { code: "not_found" });
    }
  }

  async function generate(kind: Kind, request: Request): Promise<Response> {
    const body = await readJsonBody(request, maxBody);
    const req = kind === "chat" ? validateChatRequest(body) : validateCompletionRequest(body);
    const model = models.get(req.model);
    if (!model) {
      throw new RequestError(404, `The model \`${req.model}\` does not exist.`, {
        type: "invalid_request_error",
        param: "model",
        code: "model_not_found",
      });
    }
    const labels = {
      model: model.name,
      endpoint: kind === "chat" ? "chat_completions" : "completions",
      request_type: req.stream ? "stream" : "unary",
    };
    const started = performance.now();
    const series = metrics.forModel(model.name);
    series.inflight.inc();
    let finished = false;
    const finish = (status: "success" | "error" | "cancelled") => {
      if (finished) return;
      finished = true;
      series.inflight.dec();
      metrics.countRequest(labels, status);
      series.duration.observe((performance.now() - started) / 1000);
    };
    const ctx = new Context(crypto.randomUUID());
    try {
      const run = model.modelInput === ModelInput.Tokens
        ? await startTokens(kind, req, model, ctx, started)
        : await startText(req, model, ctx);
      if (req.stream) {
        const onDisconnect = () => series.disconnected.inc();
        return streamResponse(run, ctx, request, onDisconnect, finish);
      }
      const response = await run.collect();
      finish("success");
      return json(response);
    } catch (err) {
      ctx.kill();
      finish("error");
      throw err;
    }
  }

  /** A started generation: SSE chunks as they come, or the whole response. */
  interface Run {
    chunks: AsyncIterable<unknown>;
    collect(): Promise<unknown>;
    /** The SSE events themselves, without the generators of `chunks` (one choice). */
    sse?(): SseSource;
  }

  async function startTokens(
    kind: Kind,
    req: ChatCompletionRequest | CompletionRequest,
    model: ServedModel,
    ctx: Context,
    started: number,
  ): Promise<Run> {
    const { card, tokenizer, preprocessor } = await model.pipeline();
    const { ttft, itl, outputTokens, inputTokens, migrations } = metrics.forModel(model.name);
    const { request: pre, promptTokens, n } = kind === "chat"
      ? preprocessor.chat(req as ChatCompletionRequest)
      : preprocessor.completion(req as CompletionRequest);
    inputTokens.observe(promptTokens);
    const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${ctx.id}`;
    const created = Math.floor(Date.now() / 1000);
    const send = (r: PreprocessedRequest, c: Context) => model.generate<LLMEngineOutput>(r, c);
    // n choices are n engine requests (each its own seed when one is given).
    const choiceRequests = Array.from({ length: n }, (_, i) => choiceRequest(pre, i));
    const streams = await Promise.all(choiceRequests.map((r) =>
      openMigrating(send, r, ctx, {
        limit: card.migration_limit,
        logger: log,
        onMigrate: () => migrations.inc(),
        onInstanceFailed: (id) => model.reportInstanceDown(id),
      })
    ));
    const processors = choiceRequests.map((r) => OutputProcessor.forRequest(tokenizer, r));
    const includeUsage = req.stream_options?.include_usage === true;
    const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
    const chat = kind === "chat";
    // Prompt tokens served from an engine's prefix cache, when the engine says (choice 0's:
    // every choice has the same prompt).
    let cachedTokens: number | undefined;
    const usage = () => {
      const completion = processors.reduce((s, p) => s + p.completionTokens, 0);
      return {
        prompt_tokens: promptTokens,
        completion_tokens: completion,
        total_tokens: promptTokens + completion,
        ...(cachedTokens === undefined
          ? {}
          : { prompt_tokens_details: { cached_tokens: cachedTokens } }),
      };
    };
    const base = { id, object, created, model: model.name };

    const observeToken = (() => {
      let firstAt = 0;
      let lastAt = 0;
      return () => {
        const now = performance.now();
        if (firstAt === 0) {
          firstAt = now;
          ttft.observe((now - started) / 1000);
        } else {
          itl.observe((now - lastAt) / 1000);
        }
        lastAt = now;
      };
    })();

    /** One choice's (delta, finish) events. */
    async function* choiceEvents(index: number): AsyncGenerator<ChoiceEvent> {
      const proc = processors[index]!;
      for await (const out of streams[index]!) {
        if (out.token_ids.length > 0) observeToken();
        if (index === 0 && out.cached_tokens !== undefined) cachedTokens ??= out.cached_tokens;
        const delta = proc.push(out);
        if (delta.finishReason) {
          yield { index, text: delta.text, reason: openaiReason(delta.finishReason) };
          return;
        }
        if (delta.text !== "") yield { index, text: delta.text, reason: null };
      }
      const tail = proc.finish();
      yield {
        index,
        text: tail.text,
        reason: tail.finishReason ? openaiReason(tail.finishReason) : "stop",
      };
    }

    // All choices' events, merged in arrival order (one choice: its own events, no merging).
    function events(): AsyncIterable<ChoiceEvent> {
      return n === 1 ? choiceEvents(0) : mergeChoices();
    }
    async function* mergeChoices(): AsyncGenerator<ChoiceEvent> {
      const iterators = processors.map((_, i) => choiceEvents(i));
      const pending = new Map<
        number,
        Promise<{ index: number; r: IteratorResult<ChoiceEvent> }>
      >();
      const pull = (i: number) =>
        pending.set(i, iterators[i]!.next().then((r) => ({ index: i, r })));
      iterators.forEach((_, i) => pull(i));
      try {
        while (pending.size > 0) {
          const { index, r } = await Promise.race(pending.values());
          if (r.done) {
            pending.delete(index);
            continue;
          }
          pull(index);
          yield r.value;
        }
      } finally {
        for (const [i] of pending) void iterators[i]!.return(undefined);
      }
    }
    const observeOutput = () => outputTokens.observe(usage().completion_tokens);

    /**
     * Choice 0's SSE events straight from its stream (n = 1): what `chunks` makes, without
     * the generator layers, and the last chunk, usage and [DONE] in one write.
     */
    function singleChoiceSse(): SseSource {
      const proc = processors[0]!;
      const it = streams[0]![Symbol.asyncIterator]();
      const head = "data: " + JSON.stringify(base).slice(0, -1) + ',"choices":[';
      let first = true;
      let ended = false;
      let observed = false;
      const chunk = (text: string, reason: FinishReason | null) => {
        const event = head + choiceJson(chat, 0, text, reason, first) + "]}\n\n";
        first = false;
        return event;
      };
      const end = (text: string, reason: FinishReason | null): SseStep => {
        ended = true;
        const last = chunk(text, reason);
        observed = true;
        observeOutput();
        const usageEvent = includeUsage
          ? `data: ${JSON.stringify({ ...base, choices: [], usage: usage() })}\n\n`
          : "";
        return { text: last + usageEvent + "data: [DONE]\n\n", last: true };
      };
      return {
        async next(): Promise<SseStep> {
          for (;;) {
            const r = await it.next();
            if (r.done) {
              const tail = proc.finish();
              return end(tail.text, tail.finishReason ? openaiReason(tail.finishReason) : "stop");
            }
            const out = r.value;
            if (out.token_ids.length > 0) observeToken();
            if (out.cached_tokens !== undefined) cachedTokens ??= out.cached_tokens;
            const delta = proc.push(out);
            if (delta.finishReason) {
              const reason = openaiReason(delta.finishReason);
              closeQuietly(it); // the choice is over: the engine's stream is not read further
              return end(delta.text, reason);
            }
            if (delta.text !== "") return { text: chunk(delta.text, null), last: false };
          }
        },
        close() {
          if (!observed) {
            observed = true;
            observeOutput();
          }
          if (!ended) {
            ended = true;
            closeQuietly(it);
          }
        },
      };
    }

    return {
      sse: n === 1 ? singleChoiceSse : undefined,
      chunks: (async function* () {
        const first = new Set<number>();
        // Every chunk of a request starts the same: serialize that part once.
        const head = JSON.stringify(base).slice(0, -1) + ',"choices":[';
        try {
          for await (const ev of events()) {
            const isFirst = !first.has(ev.index);
            first.add(ev.index);
            yield new RawJson(
              head + choiceJson(chat, ev.index, ev.text, ev.reason, isFirst) + "]}",
            );
          }
        } finally {
          observeOutput();
        }
        if (includeUsage) yield { ...base, choices: [], usage: usage() };
      })(),
      async collect() {
        const texts = Array.from({ length: n }, () => "");
        const reasons: (FinishReason | null)[] = Array.from({ length: n }, () => null);
        try {
          for await (const ev of events()) {
            texts[ev.index] += ev.text;
            if (ev.reason) reasons[ev.index] = ev.reason;
          }
        } finally {
          observeOutput();
        }
        const choices = texts.map((text, index) =>
          kind === "chat"
            ? {
              index,
              message: { role: "assistant", content: text },
              logprobs: null,
              finish_reason: reasons[index],
            }
            : { index, text, logprobs: null, finish_reason: reasons[index] }
        );
        return {
          id,
          object: kind === "chat" ? "chat.completion" : "text_completion",
          created,
          model: model.name,
          choices,
          usage: usage(),
        };
      },
    };
  }

  async function startText(
    req: ChatCompletionRequest | CompletionRequest,
    model: ServedModel,
    ctx: Context,
  ): Promise<Run> {
    // Text engines take the OpenAI request as is and yield OpenAI objects. A stream fails
    // over to another instance only before its first item: text cannot be resumed.
    let attempts = 0;
    const card = await model.card();
    let stream;
    for (;;) {
      try {
        stream = await model.generate<Record<string, unknown>>(req, ctx);
        break;
      } catch (err) {
        if (!isMigratable(err) || ctx.isStopped() || attempts >= card.migration_limit) throw err;
        attempts++;
        metrics.migrations.inc({ model: model.name });
      }
    }
    return {
      chunks: stream,
      async collect() {
        const chunks: Record<string, unknown>[] = [];
        for await (const c of stream) chunks.push(c);
        // An engine that answers non-streaming requests with a full response object.
        if (
          chunks.length === 1 && chunks[0]!.object !== "chat.completion.chunk" &&
          chunks[0]!.object !== "text_completion"
        ) {
          return chunks[0];
        }
        return aggregateChunks(chunks);
      },
    };
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

/** A chunk already serialized to JSON. */
class RawJson {
  constructor(readonly json: string) {}
}

/** One piece of one choice's answer. */
interface ChoiceEvent {
  index: number;
  text: string;
  reason: FinishReason | null;
}

/** OpenAI has no "cancelled" or "error": a cancelled choice just stopped; an error is an error. */
function openaiReason(reason: FinishReason): FinishReason {
  if (reason === "error") throw new DynamoError("the engine ended the sequence with an error");
  if (reason === "cancelled" || reason === "eos") return "stop";
  return reason;
}

/** Folds OpenAI stream chunks into one response (for non-streaming clients of text engines). */
export function aggregateChunks(chunks: Record<string, unknown>[]): Record<string, unknown> {
  const first = chunks[0] ?? {};
  const isChat = first.object === "chat.completion.chunk";
  const choices = new Map<number, { text: string; finish_reason: unknown }>();
  let usage: unknown = undefined;
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const ch of (c.choices as Record<string, unknown>[] | undefined) ?? []) {
      const index = Number(ch.index ?? 0);
      const acc = choices.get(index) ?? { text: "", finish_reason: null };
      const delta = isChat
        ? (ch.delta as { content?: string } | undefined)?.content
        : ch.text as string | undefined;
      acc.text += delta ?? "";
      if (ch.finish_reason) acc.finish_reason = ch.finish_reason;
      choices.set(index, acc);
    }
  }
  return {
    id: first.id,
    object: isChat ? "chat.completion" : "text_completion",
    created: first.created,
    model: first.model,
    choices: [...choices.entries()].sort((a, b) => a[0] - b[0]).map(([index, c]) =>
      isChat
        ? {
          index,
          message: { role: "assistant", content: c.text },
          logprobs: null,
          finish_reason: c.finish_reason,
        }
        : { index, text: c.text, logprobs: null, finish_reason: c.finish_reason }
    ),
    ...(usage ? { usage } : {}),
  };
}

/** Streams a run as server-sent events; a client that goes away kills the request. */
function streamResponse(
  run: { chunks: AsyncIterable<unknown>; sse?(): SseSource },
  ctx: Context,
  request: Request,
  onDisconnect: () => void,
  finish: (status: "success" | "error" | "cancelled") => void,
): Response {
  const source = run.sse?.() ?? sseFromChunks(run.chunks);
  let done = false;
  const disconnect = () => {
    if (done) return;
    done = true;
    ctx.kill();
    onDisconnect();
    finish("cancelled");
    source.close();
  };
  request.signal.addEventListener("abort", disconnect, { once: true });
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const step = await source.next();
        if (done) return;
        controller.enqueue(encoder.encode(step.text));
        if (step.last) {
          done = true;
          request.signal.removeEventListener("abort", disconnect);
          finish("success");
          controller.close();
        }
      } catch (err) {
        if (done) return;
        done = true;
        request.signal.removeEventListener("abort", disconnect);
        source.close();
        const message = err instanceof Error ? err.message : String(err);
        const code = err instanceof MigrationExhaustedError ? "migration_exhausted" : null;
        controller.enqueue(
          encoder.encode(
            `data: ${
              JSON.stringify({ error: { message, type: "internal_error", param: null, code } })
            }\n\n`,
          ),
        );
        finish("error");
        controller.close();
        ctx.kill();
      }
    },
    cancel() {
      disconnect();
    },
  }, { highWaterMark: 0 });
  return new Response(body, { headers: SSE_HEADERS });
}

const SSE_HEADERS: Record<string, string> = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  connection: "keep-alive",
};

/** SSE events of a run, as text; `last` once they end with `data: [DONE]`. */
interface SseStep {
  text: string;
  last: boolean;
}

/** Where a streamed response's events come from. */
interface SseSource {
  next(): Promise<SseStep>;
  /** The client went away or the stream failed: stop reading the engine. */
  close(): void;
}

/** The events of a run's chunks, one per chunk, then [DONE]. */
function sseFromChunks(chunks: AsyncIterable<unknown>): SseSource {
  const iterator = chunks[Symbol.asyncIterator]();
  return {
    async next(): Promise<SseStep> {
      const r = await iterator.next();
      if (r.done) return { text: "data: [DONE]\n\n", last: true };
      const data = r.value instanceof RawJson ? r.value.json : JSON.stringify(r.value);
      return { text: `data: ${data}\n\n`, last: false };
    },
    close() {
      closeQuietly(iterator);
    },
  };
}

/** Ends an iterator without waiting; a failure to end is of no interest any more. */
function closeQuietly(iterator: AsyncIterator<unknown>): void {
  iterator.return?.().catch(() => {});
}
