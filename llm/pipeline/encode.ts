// The encode stage: a generation as an OpenAI response, either one JSON body or server-sent
// events. One SSE encoder frames every stream (tokens and text models alike); a tokens
// model's single choice is written straight from its engine stream, its last chunk, usage
// and [DONE] in one write.

import { WorkerOutputError } from "./engine_output.ts";
import { RequestError } from "../openai/errors.ts";
import type { Context } from "../../runtime/context.ts";
import { choiceJson, parsedChoiceJsons } from "../http/sse_choice.ts";
import type { FinishReason, LLMEngineOutput } from "../protocols.ts";
import type { Admission } from "./admit.ts";
import { MigrationExhaustedError, type Pollable } from "./migration.ts";
import {
  type ChoiceEvent,
  type ChoiceFinish,
  type ChoiceLogprobs,
  openaiReason,
  type TokenChoices,
} from "./postprocess.ts";
import type { IndexedToolCall } from "../parsers/chat_output.ts";
import type { ChatTokenLogprob, CompletionLogprobs } from "../openai/types.ts";
import { appendCompletionLogprobs } from "./logprobs.ts";
import type { EndpointKind } from "./parse.ts";

/** The next SSE text of a stream; `last` once it ends with `data: [DONE]`. */
export interface SseStep {
  text: string;
  last: boolean;
}

/** Where a streamed response's events come from. */
export interface SseSource {
  next(): Promise<SseStep>;
  /** The client went away or the stream failed: stop reading the engine. */
  close(): void;
}

/** The event that ends every stream. */
export const SSE_DONE = "data: [DONE]\n\n";

/** One event carrying `json`. */
export function sseEvent(json: string): string {
  return "data: " + json + "\n\n";
}

/** The event that reports a failure mid-stream (the status line is long gone). */
export function sseErrorEvent(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof RequestError) return sseEvent(JSON.stringify(err.toJSON()));
  const code = err instanceof MigrationExhaustedError
    ? "migration_exhausted"
    : err instanceof WorkerOutputError
    ? "invalid_worker_output"
    : null;
  return sseEvent(
    JSON.stringify({ error: { message, type: "internal_error", param: null, code } }),
  );
}

const SSE_HEADERS: Record<string, string> = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  connection: "keep-alive",
};
const JSON_HEADERS = { "content-type": "application/json" };
const encoder = new TextEncoder();

/** A JSON response. */
export function jsonResponse(
  body: unknown,
  status = 200,
  headers?: Record<string, string>,
): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: headers === undefined ? JSON_HEADERS : { ...JSON_HEADERS, ...headers },
  });
}

/**
 * Streams `source` as server-sent events; a client that goes away kills the request.
 *
 * The client's leaving is seen through the body stream's `cancel`, which Deno.serve calls as
 * soon as the connection closes, also while a `pull` waits for the engine (measured: ~1 ms
 * after the client's hang-up, within 0.3 ms of `request.signal`); listening on
 * `request.signal` as well would cost an AbortSignal per request for nothing.
 *
 * @param source the events
 * @param ctx the request's context (killed on disconnect and on failure)
 * @param admission ended once, with how the stream ended
 * @param requestId sent back as `x-request-id` (default: none)
 */
export function sseResponse(
  source: SseSource,
  ctx: Context,
  admission: Admission,
  requestId?: string,
): Response {
  let done = false;
  const disconnect = () => {
    if (done) return;
    done = true;
    ctx.kill();
    admission.series.disconnected.inc();
    admission.finish("cancelled");
    source.close();
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const step = await source.next();
        if (done) return;
        controller.enqueue(encoder.encode(step.text));
        if (step.last) {
          done = true;
          admission.finish("success");
          controller.close();
        }
      } catch (err) {
        if (done) return;
        done = true;
        source.close();
        controller.enqueue(encoder.encode(sseErrorEvent(err)));
        admission.finish("error");
        controller.close();
        ctx.kill();
      }
    },
    cancel() {
      disconnect();
    },
  }, { highWaterMark: 0 });
  // The id goes in with the others: setting a header on a built Response costs more.
  return new Response(body, {
    headers: requestId === undefined ? SSE_HEADERS : { ...SSE_HEADERS, "x-request-id": requestId },
  });
}

/** What every chunk of one response shares. */
export interface ChunkBase {
  id: string;
  object: "chat.completion.chunk" | "text_completion";
  created: number;
  model: string;
}

/** The chunk base of a response to a `kind` request. */
export function chunkBase(kind: EndpointKind, requestId: string, model: string): ChunkBase {
  return {
    id: `${kind === "chat" ? "chatcmpl" : "cmpl"}-${requestId}`,
    object: kind === "chat" ? "chat.completion.chunk" : "text_completion",
    created: Math.floor(Date.now() / 1000),
    model,
  };
}

/**
 * A tokens model's choices as SSE: one chunk per text delta, then (with `includeUsage`)
 * the usage chunk, then [DONE], the last three in one step.
 */
export function tokenSse(choices: TokenChoices, base: ChunkBase, includeUsage: boolean): SseSource {
  return choices.n === 1 && choices.parsers === undefined
    ? new SingleChoiceSse(choices, base, includeUsage)
    : new MergedChoicesSse(choices, base, includeUsage);
}

/** What the token SSE sources share: how chunks are written and how the stream ends. */
abstract class ChoiceSse implements SseSource {
  protected readonly choices: TokenChoices;
  readonly #base: ChunkBase;
  readonly #includeUsage: boolean;
  readonly #chat: boolean;
  /** Every chunk of a request starts the same: serialized once. */
  readonly #head: string;
  #ended = false;

  constructor(choices: TokenChoices, base: ChunkBase, includeUsage: boolean) {
    this.choices = choices;
    this.#base = base;
    this.#includeUsage = includeUsage;
    this.#chat = base.object === "chat.completion.chunk";
    this.#head = "data: " + JSON.stringify(base).slice(0, -1) + ',"choices":[';
  }

  abstract next(): Promise<SseStep>;

  /** Stops reading the engine (the stream is over, or nobody reads it any more). */
  protected abstract stop(): void;

  protected chunk(
    index: number,
    text: string,
    reason: ChoiceFinish | null,
    first: boolean,
    logprobs?: ChoiceLogprobs,
  ) {
    return this.#head + choiceJson(this.#chat, index, text, reason, first, logprobs) + "]}\n\n";
  }

  /** The chunks of a parsed event (reasoning, content, tool calls): "" when it adds nothing. */
  protected parsedChunks(ev: ChoiceEvent, first: boolean): string {
    let out = "";
    for (const choice of parsedChoiceJsons(ev.index, ev, ev.reason, first, ev.logprobs)) {
      out += this.#head + choice + "]}\n\n";
    }
    return out;
  }

  /** The stream's last step: `last` (the final chunk, or ""), usage, [DONE]. */
  protected end(last: string): SseStep {
    this.#ended = true;
    this.choices.observeOutput();
    const usage = this.#includeUsage
      ? sseEvent(JSON.stringify({ ...this.#base, choices: [], usage: this.choices.usage() }))
      : "";
    return { text: last + usage + SSE_DONE, last: true };
  }

  close(): void {
    this.choices.observeOutput();
    if (!this.#ended) {
      this.#ended = true;
      this.stop();
    }
  }
}

/**
 * One choice, read straight from its engine stream (no generator layers in between). The
 * outputs that have already arrived when one is read go out with it, in one step: under load
 * (or from a fast engine) that is one body pull and one socket write for several chunks; the
 * first chunk is never held back to wait for more.
 */
class SingleChoiceSse extends ChoiceSse {
  readonly #it: AsyncIterator<LLMEngineOutput>;
  readonly #poll: (() => IteratorResult<LLMEngineOutput> | undefined) | undefined;
  /** A failure met while taking outputs that were already there: thrown by the next step. */
  #held: { err: unknown } | undefined;
  #first = true;

  constructor(choices: TokenChoices, base: ChunkBase, includeUsage: boolean) {
    super(choices, base, includeUsage);
    const it = this.#it = choices.streams[0]![Symbol.asyncIterator]();
    const poll = (it as Partial<Pollable<LLMEngineOutput>>).poll;
    this.#poll = typeof poll === "function" ? poll.bind(it) : undefined;
  }

  #text(text: string, reason: FinishReason | null, logprobs?: ChoiceLogprobs): string {
    const event = this.chunk(0, text, reason, this.#first, logprobs);
    this.#first = false;
    return event;
  }

  async next(): Promise<SseStep> {
    const held = this.#held;
    if (held !== undefined) {
      this.#held = undefined;
      throw held.err;
    }
    let text = "";
    // One clock reading per wait: the outputs polled after it arrived with the one awaited.
    let now = 0;
    for (;;) {
      let r: IteratorResult<LLMEngineOutput> | undefined;
      if (text === "") {
        r = await this.#it.next();
        now = performance.now();
      } else r = this.#ready();
      if (r === undefined) return { text, last: false };
      const step = this.#apply(r, now);
      if (typeof step !== "string") {
        return text === "" ? step : { text: text + step.text, last: true };
      }
      text += step;
    }
  }

  /** An output that has already arrived, or undefined (a failure is held for the next step). */
  #ready(): IteratorResult<LLMEngineOutput> | undefined {
    if (this.#poll === undefined) return undefined;
    try {
      return this.#poll();
    } catch (err) {
      this.#held = { err };
      return undefined;
    }
  }

  /** One engine output as SSE text ("" when it adds nothing), or the stream's last step. */
  #apply(r: IteratorResult<LLMEngineOutput>, now: number): string | SseStep {
    const choices = this.choices;
    const proc = choices.processors[0]!;
    if (r.done) {
      const tail = proc.finish();
      const reason = tail.finishReason ? openaiReason(tail.finishReason) : "stop";
      return this.end(this.#text(tail.text, reason));
    }
    const out = r.value;
    choices.observe(0, out, now);
    const delta = proc.push(out);
    const logprobs = choices.logprobsOf(0, delta);
    if (delta.finishReason) {
      const reason = openaiReason(delta.finishReason);
      closeQuietly(this.#it); // the choice is over: the engine's stream is not read further
      return this.end(this.#text(delta.text, reason, logprobs));
    }
    return delta.text !== "" || logprobs !== undefined
      ? this.#text(delta.text, null, logprobs)
      : "";
  }

  protected stop(): void {
    closeQuietly(this.#it);
  }
}

/** Several choices, their events merged in arrival order. */
class MergedChoicesSse extends ChoiceSse {
  readonly #events: AsyncIterator<ChoiceEvent>;
  readonly #started = new Set<number>();
  #open: number;

  constructor(choices: TokenChoices, base: ChunkBase, includeUsage: boolean) {
    super(choices, base, includeUsage);
    this.#events = choices.events()[Symbol.asyncIterator]();
    this.#open = choices.n;
  }

  async next(): Promise<SseStep> {
    const parsed = this.choices.parsers !== undefined;
    for (;;) {
      const r = await this.#events.next();
      if (r.done) return this.end("");
      const ev = r.value;
      const first = !this.#started.has(ev.index);
      const text = parsed
        ? this.parsedChunks(ev, first)
        : this.chunk(ev.index, ev.text, ev.reason, first, ev.logprobs);
      if (text === "") continue;
      if (first) this.#started.add(ev.index);
      if (ev.reason !== null && --this.#open === 0) {
        closeQuietly(this.#events);
        return this.end(text);
      }
      return { text, last: false };
    }
  }

  protected stop(): void {
    closeQuietly(this.#events);
  }
}

/** A text model's chunks as SSE, one event each, then [DONE]. */
export function textSse(chunks: AsyncIterable<unknown>): SseSource {
  const iterator = chunks[Symbol.asyncIterator]();
  return {
    async next(): Promise<SseStep> {
      const r = await iterator.next();
      if (r.done) return { text: SSE_DONE, last: true };
      return { text: sseEvent(JSON.stringify(r.value)), last: false };
    },
    close() {
      closeQuietly(iterator);
    },
  };
}

/** A tokens model's whole response (non-streaming clients). */
export async function tokenResponse(
  choices: TokenChoices,
  base: ChunkBase,
): Promise<Record<string, unknown>> {
  const n = choices.n;
  const texts = Array.from({ length: n }, () => "");
  const reasonings = Array.from({ length: n }, () => "");
  const calls = Array.from({ length: n }, (): IndexedToolCall[] => []);
  const reasons: (ChoiceFinish | null)[] = Array.from({ length: n }, () => null);
  const logprobs: (ChatTokenLogprob[] | CompletionLogprobs | null)[] = Array.from(
    { length: n },
    () => null,
  );
  try {
    for await (const ev of choices.events()) {
      texts[ev.index] += ev.text;
      if (ev.logprobs !== undefined) addLogprobs(logprobs, ev.index, ev.logprobs);
      if (ev.reasoning) reasonings[ev.index] += ev.reasoning;
      if (ev.calls) calls[ev.index]!.push(...ev.calls);
      if (ev.reason) reasons[ev.index] = ev.reason;
    }
  } finally {
    choices.observeOutput();
  }
  const chat = base.object === "chat.completion.chunk";
  const parsers = choices.parsers;
  return {
    id: base.id,
    object: chat ? "chat.completion" : "text_completion",
    created: base.created,
    model: base.model,
    choices: texts.map((text, index) =>
      chat
        ? {
          index,
          message: parsers === undefined ? { role: "assistant", content: text } : parsedMessage(
            text,
            reasonings[index]!,
            calls[index]!,
            parsers[index]!.splitsReasoning,
          ),
          logprobs: choiceLogprobs(logprobs[index]!, choices.wantsLogprobs, true),
          finish_reason: reasons[index],
        }
        : {
          index,
          text,
          logprobs: choiceLogprobs(logprobs[index]!, choices.wantsLogprobs, false),
          finish_reason: reasons[index],
        }
    ),
    usage: choices.usage(),
  };
}

/** Adds an event's log probabilities to its choice's. */
function addLogprobs(
  acc: (ChatTokenLogprob[] | CompletionLogprobs | null)[],
  index: number,
  more: ChoiceLogprobs,
): void {
  if ("content" in more) {
    const list = (acc[index] ??= []) as ChatTokenLogprob[];
    list.push(...(more.content ?? []));
    return;
  }
  const a = acc[index] as CompletionLogprobs | null;
  if (a === null) {
    acc[index] = {
      tokens: [...more.tokens],
      token_logprobs: [...more.token_logprobs],
      top_logprobs: [...(more.top_logprobs ?? [])],
      text_offset: [...more.text_offset],
    };
  } else {
    appendCompletionLogprobs(a, more);
  }
}

/** A whole choice's `logprobs`: null unless asked for; empty lists when it had no tokens. */
function choiceLogprobs(
  got: ChatTokenLogprob[] | CompletionLogprobs | null,
  wanted: boolean,
  chat: boolean,
): unknown {
  if (!wanted) return null;
  if (chat) return { content: got ?? [] };
  return got ?? { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
}

/** A parsed answer's message: content (null when it only calls tools), reasoning, calls. */
function parsedMessage(
  content: string,
  reasoning: string,
  calls: readonly IndexedToolCall[],
  splitsReasoning: boolean,
): Record<string, unknown> {
  return {
    role: "assistant",
    content: content === "" && calls.length > 0 ? null : content,
    ...(splitsReasoning ? { reasoning_content: reasoning === "" ? null : reasoning } : {}),
    ...(calls.length > 0
      ? {
        tool_calls: calls.map((c) => ({
          id: c.id,
          type: "function",
          function: { name: c.name, arguments: c.arguments },
        })),
      }
      : {}),
  };
}

/** A text model's whole response: its full response object, or its chunks folded into one. */
export async function textResponse(
  chunks: AsyncIterable<Record<string, unknown>>,
): Promise<Record<string, unknown>> {
  const all: Record<string, unknown>[] = [];
  for await (const c of chunks) all.push(c);
  // An engine that answers non-streaming requests with a full response object.
  if (
    all.length === 1 && all[0]!.object !== "chat.completion.chunk" &&
    all[0]!.object !== "text_completion"
  ) {
    return all[0]!;
  }
  return aggregateChunks(all);
}

/**
 * Folds OpenAI stream chunks into one response (for non-streaming clients of text engines),
 * the choices' `logprobs` joined (chat `content` lists, completion arrays) when they carry any,
 * and chat `reasoning_content` and `tool_calls` deltas (by call index: id, type and name
 * taken once, arguments concatenated) folded into the message.
 */
export function aggregateChunks(chunks: Record<string, unknown>[]): Record<string, unknown> {
  const first = chunks[0] ?? {};
  const isChat = first.object === "chat.completion.chunk";
  const choices = new Map<
    number,
    {
      text: string;
      reasoning?: string;
      calls?: Map<number, FoldedCall>;
      finish_reason: unknown;
      logprobs: ChatTokenLogprob[] | CompletionLogprobs | null;
    }
  >();
  let usage: unknown = undefined;
  for (const c of chunks) {
    if (c.usage) usage = c.usage;
    for (const ch of (c.choices as Record<string, unknown>[] | undefined) ?? []) {
      const index = Number(ch.index ?? 0);
      const acc = choices.get(index) ?? { text: "", finish_reason: null, logprobs: null };
      const delta = isChat
        ? (ch.delta as { content?: string } | undefined)?.content
        : ch.text as string | undefined;
      acc.text += delta ?? "";
      if (isChat && isRecord(ch.delta)) {
        const { reasoning_content: reasoning, tool_calls: calls } = ch.delta;
        if (typeof reasoning === "string") acc.reasoning = (acc.reasoning ?? "") + reasoning;
        if (Array.isArray(calls)) acc.calls = foldToolCalls(acc.calls ?? new Map(), calls);
      }
      if (ch.finish_reason) acc.finish_reason = ch.finish_reason;
      if (isRecord(ch.logprobs)) acc.logprobs = joinLogprobs(acc.logprobs, ch.logprobs, isChat);
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
          message: {
            role: "assistant",
            content: c.calls && c.text === "" ? null : c.text,
            ...(c.reasoning !== undefined && { reasoning_content: c.reasoning }),
            ...(c.calls && {
              tool_calls: [...c.calls.entries()].sort((a, b) => a[0] - b[0]).map(([, call]) =>
                call
              ),
            }),
          },
          logprobs: c.logprobs === null ? null : { content: c.logprobs },
          finish_reason: c.finish_reason,
        }
        : { index, text: c.text, logprobs: c.logprobs, finish_reason: c.finish_reason }
    ),
    ...(usage ? { usage } : {}),
  };
}

/** One tool call folded from its stream deltas. */
interface FoldedCall {
  id?: string;
  type: string;
  function: { name: string; arguments: string };
}

/** Adds a chunk's `delta.tool_calls` to the calls folded so far (keyed by their `index`). */
function foldToolCalls(acc: Map<number, FoldedCall>, deltas: unknown[]): Map<number, FoldedCall> {
  for (const d of deltas) {
    if (!isRecord(d)) continue;
    const index = typeof d.index === "number" ? d.index : acc.size;
    const call = acc.get(index) ?? { type: "function", function: { name: "", arguments: "" } };
    if (typeof d.id === "string") call.id = d.id;
    if (typeof d.type === "string") call.type = d.type;
    const fn = isRecord(d.function) ? d.function : {};
    if (typeof fn.name === "string") call.function.name += fn.name;
    if (typeof fn.arguments === "string") call.function.arguments += fn.arguments;
    acc.set(index, call);
  }
  return acc;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** An upstream chunk's logprobs added to a choice's (entries taken as the upstream sent them). */
function joinLogprobs(
  acc: ChatTokenLogprob[] | CompletionLogprobs | null,
  more: Record<string, unknown>,
  chat: boolean,
): ChatTokenLogprob[] | CompletionLogprobs | null {
  const list = <T>(v: unknown): T[] => (Array.isArray(v) ? v as T[] : []);
  if (chat) {
    return [...((acc as ChatTokenLogprob[] | null) ?? []), ...list<ChatTokenLogprob>(more.content)];
  }
  const a = (acc as CompletionLogprobs | null) ??
    { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  appendCompletionLogprobs(a, {
    tokens: list(more.tokens),
    token_logprobs: list(more.token_logprobs),
    top_logprobs: list(more.top_logprobs),
    text_offset: list(more.text_offset),
  });
  return a;
}

/** Ends an iterator without waiting; a failure to end is of no interest any more. */
function closeQuietly(iterator: AsyncIterator<unknown>): void {
  iterator.return?.()?.catch(() => {});
}
