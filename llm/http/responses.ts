// `POST /v1/responses`: the Responses API served by the model's chat pipeline. Not streamed:
// the chat completion becomes a Response object. Streamed: the chat chunks become the Responses
// events (response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta ... .done, response.content_part.done,
// response.output_item.done, function_call_arguments.delta/.done for tool calls, then
// response.completed, response.incomplete or response.failed), each `event: TYPE` + `data: JSON`
// with a growing `sequence_number`.

import { Context } from "../../runtime/context.ts";
import type { ServedModel } from "../model/served_model.ts";
import {
  chatToResponse,
  functionCallItem,
  inResponsesTerms,
  itemId,
  messageItem,
  outputTextPart,
  reasoningItem,
  type ResponseBase,
  responseObject,
  type ResponseOutputItem,
  responsesRequest,
  type ResponseUsage,
  responseUsage,
} from "../openai/responses.ts";
import { Admission } from "../pipeline/admit.ts";
import type { ModelPipelines } from "../pipeline/compose.ts";
import { jsonResponse, sseResponse, type SseSource } from "../pipeline/encode.ts";
import { resolveModel } from "../pipeline/resolve.ts";
import { readJsonBody } from "./body.ts";
import type { FrontendMetrics } from "./metrics.ts";

/** What the responses route needs from the frontend. */
export interface ResponsesRouteOptions {
  /** Where models are looked up. */
  models: { get(name: string): ServedModel | undefined; recentlyServed?(name: string): boolean };
  /** The models' composed pipelines. */
  pipelines: ModelPipelines;
  /** Where requests are counted. */
  metrics: FrontendMetrics;
  /** Largest request body in bytes. */
  maxBodyBytes: number;
}

/**
 * Answers one `POST /v1/responses`.
 *
 * @param request the HTTP request
 * @param requestId the id to answer under (the client's `x-request-id` when valid)
 * @param options models, pipelines, metrics, body limit
 * @returns the Response object, or its events
 * @throws {RequestError} 400 for a bad body, 404 for an unknown model
 */
export async function responsesRoute(
  request: Request,
  requestId: string,
  options: ResponsesRouteOptions,
): Promise<Response> {
  const { chat, echo, stream } = responsesRequest(
    await readJsonBody(request, options.maxBodyBytes),
  );
  const model = resolveModel(options.models, chat.model);
  const admission = new Admission(options.metrics, {
    model: model.name,
    endpoint: "responses",
    request_type: stream ? "stream" : "unary",
  });
  const ctx = new Context(crypto.randomUUID());
  const base: ResponseBase = {
    id: `resp_${requestId}`,
    created_at: Math.floor(Date.now() / 1000),
    model: model.name,
    echo,
  };
  try {
    const pipeline = await options.pipelines.get(model);
    const run = await pipeline.start("chat", chat, ctx, admission, requestId);
    if (stream) {
      const events = new ResponsesEvents(run.sse(), base, () => admission.finish("error"));
      return sseResponse(events, ctx, admission, requestId);
    }
    const body = chatToResponse(await run.collect(), base);
    admission.finish("success");
    return jsonResponse(body, 200, { "x-request-id": requestId });
  } catch (err) {
    ctx.kill();
    admission.finish("error");
    throw inResponsesTerms(err);
  }
}

/** A chat chunk's first choice, as far as the events need it. */
interface ChunkChoice {
  delta?: {
    content?: string | null;
    reasoning_content?: string | null;
    tool_calls?: {
      index: number;
      id?: string;
      function?: { name?: string; arguments?: string };
    }[];
  };
  finish_reason?: string | null;
}

/** The chat stream's server-sent events turned into the Responses API's. */
class ResponsesEvents implements SseSource {
  readonly #chat: SseSource;
  readonly #base: ResponseBase;
  readonly #events: AsyncGenerator<string, void, void>;
  readonly #onFailed: () => void;
  #sequence = 0;

  /**
   * @param chat the chat pipeline's events
   * @param base what every Response object of the request shares
   * @param onFailed called when the stream ends with `response.failed`
   */
  constructor(chat: SseSource, base: ResponseBase, onFailed: () => void) {
    this.#chat = chat;
    this.#base = base;
    this.#onFailed = onFailed;
    this.#events = this.#run();
  }

  async next(): Promise<{ text: string; last: boolean }> {
    const step = await this.#events.next();
    if (step.done) return { text: "", last: true };
    // The generator's last event is the final response event.
    return { text: step.value, last: this.#finished };
  }

  close(): void {
    this.#chat.close();
  }

  #finished = false;

  #event(type: string, fields: Record<string, unknown>): string {
    const data = { type, sequence_number: this.#sequence++, ...fields };
    return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
  }

  /** The chat stream's chunk objects (its `data:` lines; [DONE] ends it). */
  async *#chunks(): AsyncGenerator<Record<string, unknown>> {
    for (;;) {
      const step = await this.#chat.next();
      for (const block of step.text.split("\n\n")) {
        if (!block.startsWith("data: ")) continue;
        const data = block.slice("data: ".length);
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
      if (step.last) return;
    }
  }

  async *#run(): AsyncGenerator<string, void, void> {
    const base = this.#base;
    const output: ResponseOutputItem[] = [];
    yield this.#event("response.created", { response: responseObject(base, "in_progress", []) });
    yield this.#event("response.in_progress", {
      response: responseObject(base, "in_progress", []),
    });
    let message: { id: string; index: number; text: string } | undefined;
    let reasoning = "";
    const calls: { id: string; name: string; arguments: string }[] = [];
    let finish: string | null = null;
    let usage: ResponseUsage | undefined;
    const closeReasoning = function* (this: ResponsesEvents): Generator<string> {
      if (reasoning === "") return;
      const item = reasoningItem(itemId("rs"), reasoning);
      reasoning = "";
      const index = output.length;
      output.push(item);
      yield this.#event("response.output_item.added", {
        output_index: index,
        item: { ...item, content: [] },
      });
      const text = (item.content as { text: string }[])[0]!.text;
      yield this.#event("response.reasoning_text.delta", {
        item_id: item.id,
        output_index: index,
        content_index: 0,
        delta: text,
      });
      yield this.#event("response.reasoning_text.done", {
        item_id: item.id,
        output_index: index,
        content_index: 0,
        text,
      });
      yield this.#event("response.output_item.done", { output_index: index, item });
    }.bind(this);
    try {
      for await (const chunk of this.#chunks()) {
        if (chunk.usage) usage = responseUsage(chunk.usage);
        const choices = Array.isArray(chunk.choices) ? chunk.choices as ChunkChoice[] : [];
        const choice = choices[0];
        if (choice === undefined) continue;
        const delta = choice.delta ?? {};
        if (delta.reasoning_content) reasoning += delta.reasoning_content;
        if (delta.content) {
          yield* closeReasoning();
          if (message === undefined) {
            message = { id: itemId("msg"), index: output.length, text: "" };
            output.push(messageItem(message.id, "", "in_progress"));
            yield this.#event("response.output_item.added", {
              output_index: message.index,
              item: messageItem(message.id, "", "in_progress"),
            });
            yield this.#event("response.content_part.added", {
              item_id: message.id,
              output_index: message.index,
              content_index: 0,
              part: outputTextPart(""),
            });
          }
          message.text += delta.content;
          yield this.#event("response.output_text.delta", {
            item_id: message.id,
            output_index: message.index,
            content_index: 0,
            delta: delta.content,
            logprobs: [],
          });
        }
        for (const t of delta.tool_calls ?? []) {
          const call = calls[t.index] ??= { id: "", name: "", arguments: "" };
          call.id ||= t.id ?? "";
          call.name ||= t.function?.name ?? "";
          call.arguments += t.function?.arguments ?? "";
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      yield* closeReasoning();
      if (message !== undefined) {
        const done = messageItem(message.id, message.text, "completed");
        output[message.index] = done;
        const common = { item_id: message.id, output_index: message.index, content_index: 0 };
        yield this.#event("response.output_text.done", {
          ...common,
          text: message.text,
          logprobs: [],
        });
        yield this.#event("response.content_part.done", {
          ...common,
          part: outputTextPart(message.text),
        });
        yield this.#event("response.output_item.done", {
          output_index: message.index,
          item: done,
        });
      }
      for (const call of calls.filter((c) => c !== undefined)) {
        const id = itemId("fc");
        const index = output.length;
        const done = functionCallItem(id, call, "completed");
        output.push(done);
        yield this.#event("response.output_item.added", {
          output_index: index,
          item: functionCallItem(id, { ...call, arguments: "" }, "in_progress"),
        });
        yield this.#event("response.function_call_arguments.delta", {
          item_id: id,
          output_index: index,
          delta: call.arguments,
        });
        yield this.#event("response.function_call_arguments.done", {
          item_id: id,
          output_index: index,
          arguments: call.arguments,
        });
        yield this.#event("response.output_item.done", { output_index: index, item: done });
      }
      const incomplete = finish === "length";
      this.#finished = true;
      yield this.#event(incomplete ? "response.incomplete" : "response.completed", {
        response: responseObject(base, incomplete ? "incomplete" : "completed", output, {
          usage,
          ...(incomplete ? { incomplete: "max_output_tokens" } : {}),
        }),
      });
    } catch (err) {
      // The status line is long gone: the failure is the stream's last event.
      this.#chat.close();
      this.#finished = true;
      this.#onFailed();
      yield this.#event("response.failed", {
        response: responseObject(base, "failed", output, {
          error: {
            code: "server_error",
            message: err instanceof Error ? err.message : String(err),
          },
        }),
      });
    }
  }
}
