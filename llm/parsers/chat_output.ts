// One chat answer through both parsers: reasoning split off first, then tool calls read out
// of the rest. Calls get their OpenAI index and `call_...` id here.

import type { ReasoningParser } from "./reasoning.ts";
import type { ToolCallParser } from "./tool_calls.ts";
import type { ParsedToolCall, StreamingParser } from "./types.ts";

/** A tool call with its place in the answer and its id. */
export interface IndexedToolCall extends ParsedToolCall {
  /** Its position among the answer's calls (OpenAI's `index`). */
  index: number;
  /** `call_` and 24 random characters (or what `newId` gave). */
  id: string;
}

/** What one delta of a chat answer turned into. */
export interface ChatOutput {
  /** Text for `content`. */
  content: string;
  /** Text for `reasoning_content`. */
  reasoning: string;
  /** Calls completed by this delta. */
  calls: IndexedToolCall[];
}

/** Options of {@linkcode ChatOutputParser}. */
export interface ChatOutputParserOptions {
  /** Splits reasoning from the answer (none: no reasoning). */
  reasoning?: ReasoningParser;
  /** Reads tool calls out of the answer (none: the answer is all content). */
  tools?: ToolCallParser;
  /** Keep only the first call (`parallel_tool_calls: false`). */
  singleCall?: boolean;
  /** Makes call ids (default: `call_` and 24 random letters and digits). */
  newId?: () => string;
}

const ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/**
 * A new tool-call id: `call_` and 24 random letters and digits.
 *
 * @returns The id.
 */
export function newToolCallId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  let id = "call_";
  for (const b of bytes) id += ID_CHARS[b % ID_CHARS.length];
  return id;
}

/**
 * Parses one chat answer delta by delta into content, reasoning and tool calls.
 *
 * @example
 * ```ts
 * import { ChatOutputParser, reasoningParser, toolCallParser } from "./mod.ts";
 * const p = new ChatOutputParser({
 *   reasoning: reasoningParser("qwen3"),
 *   tools: toolCallParser("hermes"),
 * });
 * p.push('<think>Need the weather.</think><tool_call>{"name": "get_weather", ');
 * const { calls } = p.push('"arguments": {"city": "Paris"}}</tool_call>');
 * // calls: [{ index: 0, id: "call_...", name: "get_weather", arguments: '{"city":"Paris"}' }]
 * ```
 */
export class ChatOutputParser implements StreamingParser<ChatOutput> {
  readonly #reasoning: ReasoningParser | undefined;
  readonly #tools: ToolCallParser | undefined;
  readonly #single: boolean;
  readonly #newId: () => string;
  #calls = 0;

  /**
   * Creates the parser of one answer.
   *
   * @param options The parsers to run and how calls are numbered.
   */
  constructor(options: ChatOutputParserOptions) {
    this.#reasoning = options.reasoning;
    this.#tools = options.tools;
    this.#single = options.singleCall ?? false;
    this.#newId = options.newId ?? newToolCallId;
  }

  /** How many calls were handed out so far. */
  get callCount(): number {
    return this.#calls;
  }

  /** Whether reasoning is split off (the response then carries `reasoning_content`). */
  get splitsReasoning(): boolean {
    return this.#reasoning !== undefined;
  }

  /**
   * Takes the next delta.
   *
   * @param delta The model's next text.
   * @returns What the delta made certain.
   */
  push(delta: string): ChatOutput {
    const r = this.#reasoning?.push(delta) ?? { content: delta, reasoning: "" };
    return this.#answer(r.reasoning, this.#tools?.push(r.content), r.content, false);
  }

  /**
   * The answer ended.
   *
   * @returns Everything still held back.
   */
  finish(): ChatOutput {
    const r = this.#reasoning?.finish() ?? { content: "", reasoning: "" };
    return this.#answer(r.reasoning, this.#tools?.push(r.content), r.content, true);
  }

  #answer(
    reasoning: string,
    parsed: { content: string; calls: ParsedToolCall[] } | undefined,
    content: string,
    final: boolean,
  ): ChatOutput {
    let out = parsed ?? { content, calls: [] };
    if (final && this.#tools !== undefined) {
      const tail = this.#tools.finish();
      out = { content: out.content + tail.content, calls: [...out.calls, ...tail.calls] };
    }
    const calls: IndexedToolCall[] = [];
    for (const call of out.calls) {
      if (this.#single && this.#calls > 0) break;
      calls.push({ index: this.#calls++, id: this.#newId(), ...call });
    }
    return { content: out.content, reasoning, calls };
  }
}
