// The postprocess stage of a tokens model: each choice's engine outputs become text deltas
// and finish reasons (detokenize, stop strings, max_tokens), timed for TTFT and ITL, with
// the usage the response reports.

import { DynamoError } from "../../runtime/errors.ts";
import type { ChatOutput, ChatOutputParser, IndexedToolCall } from "../parsers/chat_output.ts";
import type { FinishReason, LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import type { Tokenizer } from "../preprocess/tokenizer.ts";
import { type OutputDelta, OutputProcessor } from "./postprocessor.ts";
import type { ChatChoiceLogprobs, CompletionLogprobs } from "../openai/types.ts";
import { chatLogprobs, CompletionLogprobsEncoder, TokenTexts } from "./logprobs.ts";

/** The `logprobs` of one chunk of a choice: chat's `{content}` or a completion's arrays. */
export type ChoiceLogprobs = ChatChoiceLogprobs | CompletionLogprobs;

/** Why a choice ended: the engine's reasons, and "tool_calls" when the answer called tools. */
export type ChoiceFinish = FinishReason | "tool_calls";

/** One piece of one choice's answer. */
export interface ChoiceEvent {
  index: number;
  /** New answer text (`content`). */
  text: string;
  reason: ChoiceFinish | null;
  /** New reasoning text (`reasoning_content`), when a reasoning parser runs. */
  reasoning?: string;
  /** Tool calls completed, when a tool-call parser runs. */
  calls?: IndexedToolCall[];
  /** The log probabilities of the tokens behind this event, when the request asked for them. */
  logprobs?: ChoiceLogprobs;
}

/** Options of the output of {@linkcode TokenChoices}. */
export interface TokenChoicesOutput {
  /** Each choice's output parser (none: the text is all content). */
  parsers?: readonly ChatOutputParser[];
  /** Whether special tokens stay in the text (a tool-call syntax made of them). */
  keepSpecialTokens?: boolean;
  /** Log probabilities were asked for, and in which API's shape. */
  logprobs?: "chat" | "completion";
}

/** The OpenAI `usage` of a response. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

/** The per-model series the postprocess stage observes. */
export interface TokenSeries {
  ttft: { observe(value: number): void };
  itl: { observe(value: number): void };
  outputTokens: { observe(value: number): void };
}

/**
 * OpenAI has no "cancelled" or "error": a cancelled choice just stopped; an error is an error.
 * @throws {DynamoError} the engine ended the sequence with "error"
 */
export function openaiReason(reason: FinishReason): FinishReason {
  if (reason === "error") throw new DynamoError("the engine ended the sequence with an error");
  if (reason === "cancelled" || reason === "eos") return "stop";
  return reason;
}

/**
 * The choices of one request: each choice's engine stream and output processor, and what
 * the response reports about them (usage, token timings).
 *
 * @example
 * ```ts ignore
 * const choices = new TokenChoices(tokenizer, requests, streams, promptTokens, series, t0);
 * for await (const ev of choices.events()) send(ev.index, ev.text, ev.reason);
 * const usage = choices.usage();
 * ```
 */
export class TokenChoices {
  /** How many choices. */
  readonly n: number;
  readonly streams: readonly AsyncIterable<LLMEngineOutput>[];
  readonly processors: readonly OutputProcessor[];
  readonly promptTokens: number;
  /** Each choice's output parser, when the answer is parsed (reasoning, tool calls). */
  readonly parsers: readonly ChatOutputParser[] | undefined;
  readonly #series: TokenSeries;
  readonly #started: number;
  readonly #logprobs: "chat" | "completion" | undefined;
  readonly #texts: TokenTexts | undefined;
  readonly #completionLogprobs: CompletionLogprobsEncoder[] = [];
  /** Prompt tokens served from an engine's prefix cache (choice 0's: all share the prompt). */
  #cachedTokens: number | undefined;
  #firstAt = 0;
  #lastAt = 0;
  #outputObserved = false;

  /**
   * @param tokenizer the model's tokenizer (to detokenize)
   * @param requests each choice's engine request
   * @param streams each choice's engine outputs
   * @param promptTokens the prompt's length in tokens
   * @param series where token timings and output lengths are observed
   * @param started when the request arrived (`performance.now()`)
   * @param output each choice's output parser (none: the text is all content), whether
   *   special tokens stay in the text, and whether log probabilities are returned
   */
  constructor(
    tokenizer: Tokenizer,
    requests: readonly PreprocessedRequest[],
    streams: readonly AsyncIterable<LLMEngineOutput>[],
    promptTokens: number,
    series: TokenSeries,
    started: number,
    output?: TokenChoicesOutput,
  ) {
    this.n = streams.length;
    this.parsers = output?.parsers;
    this.#logprobs = output?.logprobs;
    if (this.#logprobs !== undefined) {
      this.#texts = new TokenTexts(
        tokenizer,
        requests[0]?.output_options?.return_tokens_as_token_ids === true,
      );
      if (this.#logprobs === "completion") {
        for (let i = 0; i < this.n; i++) {
          this.#completionLogprobs.push(new CompletionLogprobsEncoder(this.#texts));
        }
      }
    }
    this.streams = streams;
    const skipSpecialTokens = output?.keepSpecialTokens === true ? false : undefined;
    this.processors = requests.map((r) =>
      OutputProcessor.forRequest(tokenizer, r, { skipSpecialTokens })
    );
    this.promptTokens = promptTokens;
    this.#series = series;
    this.#started = started;
  }

  /**
   * Notes an engine output of choice `index` (token timings, cached prompt tokens).
   * @param now when it arrived (`performance.now()`; outputs read together may share one)
   */
  observe(index: number, out: LLMEngineOutput, now?: number): void {
    if (out.token_ids.length > 0) {
      now ??= performance.now();
      if (this.#firstAt === 0) {
        this.#firstAt = now;
        this.#series.ttft.observe((now - this.#started) / 1000);
      } else {
        this.#series.itl.observe((now - this.#lastAt) / 1000);
      }
      this.#lastAt = now;
    }
    if (index === 0 && out.cached_tokens !== undefined) this.#cachedTokens ??= out.cached_tokens;
  }

  /** Whether the response carries log probabilities. */
  get wantsLogprobs(): boolean {
    return this.#logprobs !== undefined;
  }

  /**
   * The log probabilities of a delta of choice `index`, in the response's shape: undefined
   * when the request did not ask for them or the delta has no tokens.
   */
  logprobsOf(index: number, delta: OutputDelta): ChoiceLogprobs | undefined {
    if (this.#logprobs === undefined || delta.tokenIds.length === 0) return undefined;
    const lp = {
      tokenIds: delta.tokenIds,
      logProbs: delta.logProbs ?? [],
      topLogprobs: delta.topLogprobs,
    };
    return this.#logprobs === "chat"
      ? { content: chatLogprobs(this.#texts!, lp) }
      : this.#completionLogprobs[index]!.push(lp);
  }

  /** One choice's (delta, finish) events. */
  async *choiceEvents(index: number): AsyncGenerator<ChoiceEvent> {
    const proc = this.processors[index]!;
    const parser = this.parsers?.[index];
    for await (const out of this.streams[index]!) {
      this.observe(index, out);
      const delta = proc.push(out);
      const logprobs = this.logprobsOf(index, delta);
      if (delta.finishReason) {
        const ev = this.#event(index, delta.text, openaiReason(delta.finishReason), parser);
        yield logprobs === undefined ? ev : { ...ev, logprobs };
        return;
      }
      if (delta.text === "" && logprobs === undefined) continue;
      if (parser === undefined) {
        yield logprobs === undefined
          ? { index, text: delta.text, reason: null }
          : { index, text: delta.text, reason: null, logprobs };
        continue;
      }
      const parsed = parser.push(delta.text);
      if (
        parsed.content !== "" || parsed.reasoning !== "" || parsed.calls.length > 0 ||
        logprobs !== undefined
      ) {
        const ev = parsedEvent(index, parsed, null);
        yield logprobs === undefined ? ev : { ...ev, logprobs };
      }
    }
    const tail = proc.finish();
    yield this.#event(
      index,
      tail.text,
      tail.finishReason ? openaiReason(tail.finishReason) : "stop",
      parser,
    );
  }

  /** A choice's last event: the parser's held-back text, and "tool_calls" for a call. */
  #event(
    index: number,
    text: string,
    reason: FinishReason,
    parser: ChatOutputParser | undefined,
  ): ChoiceEvent {
    if (parser === undefined) return { index, text, reason };
    const a = parser.push(text);
    const b = parser.finish();
    const parsed = {
      content: a.content + b.content,
      reasoning: a.reasoning + b.reasoning,
      calls: [...a.calls, ...b.calls],
    };
    return parsedEvent(
      index,
      parsed,
      parser.callCount > 0 && reason === "stop" ? "tool_calls" : reason,
    );
  }

  /** All choices' events, merged in arrival order (one choice: its own events, no merging). */
  events(): AsyncIterable<ChoiceEvent> {
    return this.n === 1
      ? this.choiceEvents(0)
      : mergeStreams(this.processors.map((_, i) => this.choiceEvents(i)));
  }

  /** The response's usage, from what the choices generated so far. */
  usage(): Usage {
    let completion = 0;
    for (const p of this.processors) completion += p.completionTokens;
    const cached = this.#cachedTokens;
    const promptTokens = this.promptTokens;
    return {
      prompt_tokens: promptTokens,
      completion_tokens: completion,
      total_tokens: promptTokens + completion,
      ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
    };
  }

  /** Observes the output length once (when the response ends, however it ends). */
  observeOutput(): void {
    if (this.#outputObserved) return;
    this.#outputObserved = true;
    this.#series.outputTokens.observe(this.usage().completion_tokens);
  }
}

function parsedEvent(index: number, parsed: ChatOutput, reason: ChoiceFinish | null): ChoiceEvent {
  return {
    index,
    text: parsed.content,
    reason,
    reasoning: parsed.reasoning,
    calls: parsed.calls,
  };
}

/**
 * Merges async iterables in arrival order; breaking out of the merge ends every source.
 *
 * @example
 * ```ts ignore
 * for await (const x of mergeStreams([a, b])) console.log(x);
 * ```
 */
export async function* mergeStreams<T>(sources: readonly AsyncIterable<T>[]): AsyncGenerator<T> {
  const iterators = sources.map((s) => s[Symbol.asyncIterator]());
  const pending = new Map<number, Promise<{ index: number; r: IteratorResult<T> }>>();
  const pull = (i: number) => pending.set(i, iterators[i]!.next().then((r) => ({ index: i, r })));
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
    for (const [i] of pending) void iterators[i]!.return?.(undefined);
  }
}
