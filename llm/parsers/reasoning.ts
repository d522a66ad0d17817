// Streaming reasoning parsers: a model's text, delta by delta, split into reasoning (between
// `<think>` and `</think>`) and the answer. Some models start inside the reasoning because
// their chat template already wrote the opening tag (DeepSeek-R1, Qwen3 thinking variants):
// whether an answer starts there is decided per request from the rendered prompt.

import { findMarker, heldBack } from "./_scan.ts";
import { type ReasoningOutput, type StreamingParser, UnknownParserError } from "./types.ts";

/** One model family's reasoning markers. */
export interface ReasoningFormat {
  /** The tag that opens reasoning. */
  readonly start: string;
  /** The tag that closes it. */
  readonly end: string;
  /**
   * Whether an answer starts inside the reasoning when the prompt does not say (the model's
   * template writes the opening tag itself, as DeepSeek-R1's does).
   */
  readonly startsInReasoning: boolean;
}

const THINK: ReasoningFormat = { start: "<think>", end: "</think>", startsInReasoning: false };

/** The registered reasoning formats, by the reference's `--dyn-reasoning-parser` names. */
export const REASONING_FORMATS: Readonly<Record<string, ReasoningFormat>> = {
  basic: THINK,
  qwen3: THINK,
  deepseek_r1: { ...THINK, startsInReasoning: true },
};

/** The names {@linkcode reasoningParser} knows. */
export const REASONING_PARSER_NAMES: readonly string[] = Object.keys(REASONING_FORMATS);

/**
 * The format registered under `name`.
 *
 * @param name A `--dyn-reasoning-parser` name (basic, qwen3, deepseek_r1).
 * @returns The format.
 * @throws {UnknownParserError} No format has that name.
 */
export function reasoningFormat(name: string): ReasoningFormat {
  if (!Object.hasOwn(REASONING_FORMATS, name)) {
    throw new UnknownParserError("reasoning", name, REASONING_PARSER_NAMES);
  }
  return REASONING_FORMATS[name]!;
}

/** What decides whether one answer starts inside the reasoning. */
export interface ReasoningStartOptions {
  /** The rendered prompt (chat template output), when there is one. */
  prompt?: string;
  /** The request's template variables (`enable_thinking`, `thinking`). */
  templateKwargs?: Record<string, unknown>;
}

/**
 * Whether an answer to `prompt` starts inside the reasoning: the prompt ends with the opening
 * tag (the template opened it); not when it ends with the closing tag (thinking switched off,
 * as Qwen3's `enable_thinking: false` renders an empty block) or the request switched thinking
 * off; else the format's default.
 *
 * @param format The reasoning format.
 * @param options The rendered prompt and template variables.
 * @returns true when the first text of the answer is reasoning.
 */
export function startsInReasoning(
  format: ReasoningFormat,
  options: ReasoningStartOptions = {},
): boolean {
  const prompt = options.prompt?.trimEnd();
  if (prompt !== undefined) {
    if (prompt.endsWith(format.start)) return true;
    if (prompt.endsWith(format.end)) return false;
  }
  const kwargs = options.templateKwargs ?? {};
  if (kwargs.enable_thinking === false || kwargs.thinking === false) return false;
  return format.startsInReasoning;
}

/**
 * A new streaming reasoning parser of the format registered under `name`.
 *
 * @param name A `--dyn-reasoning-parser` name.
 * @param options Decides whether the answer starts inside the reasoning.
 * @returns A parser for one answer.
 * @throws {UnknownParserError} No format has that name.
 * @example
 * ```ts
 * const p = reasoningParser("qwen3");
 * p.push("<think>Sunny, so"); // { content: "", reasoning: "Sunny, so" }
 * p.push(" yes.</think>\n\nYes."); // { content: "Yes.", reasoning: " yes." }
 * ```
 */
export function reasoningParser(name: string, options?: ReasoningStartOptions): ReasoningParser {
  const format = reasoningFormat(name);
  return new ReasoningParser(format, startsInReasoning(format, options));
}

/**
 * Splits an answer into reasoning and content. Several think blocks may alternate with
 * answer text; an opening tag repeated at the start of a block the template opened is
 * dropped; whitespace right after a closing tag is not content.
 */
export class ReasoningParser implements StreamingParser<ReasoningOutput> {
  readonly #format: ReasoningFormat;
  #buf = "";
  #inReasoning: boolean;
  /** In a block where nothing was emitted yet (an opening tag there is dropped). */
  #fresh: boolean;
  /** Just after a closing tag: whitespace is dropped. */
  #afterEnd = false;

  /**
   * Creates a parser for one answer.
   *
   * @param format The reasoning markers.
   * @param inReasoning Whether the answer starts inside the reasoning.
   */
  constructor(format: ReasoningFormat, inReasoning: boolean) {
    this.#format = format;
    this.#inReasoning = inReasoning;
    this.#fresh = inReasoning;
  }

  /**
   * Takes the next delta.
   *
   * @param delta The model's next text.
   * @returns The reasoning and content this delta made certain.
   */
  push(delta: string): ReasoningOutput {
    this.#buf += delta;
    return this.#run(false);
  }

  /**
   * The answer ended: everything held back (an unclosed block is reasoning).
   *
   * @returns The rest of the reasoning and content.
   */
  finish(): ReasoningOutput {
    return this.#run(true);
  }

  #run(final: boolean): ReasoningOutput {
    const out: ReasoningOutput = { content: "", reasoning: "" };
    const { start, end } = this.#format;
    for (;;) {
      if (this.#afterEnd) {
        const trimmed = this.#buf.trimStart();
        if (trimmed === "" && !final) {
          this.#buf = "";
          break;
        }
        this.#buf = trimmed;
        this.#afterEnd = false;
      }
      if (this.#inReasoning) {
        if (this.#fresh) {
          const lead = this.#buf.trimStart();
          if (lead.startsWith(start)) {
            this.#buf = lead.slice(start.length);
          } else if (!final && start.startsWith(lead)) {
            break;
          }
          this.#fresh = false;
        }
        const found = findMarker(this.#buf, [end]);
        if (found !== undefined) {
          out.reasoning += this.#buf.slice(0, found.at);
          this.#buf = this.#buf.slice(found.at + end.length);
          this.#inReasoning = false;
          this.#afterEnd = true;
          continue;
        }
      } else {
        const found = findMarker(this.#buf, [start]);
        if (found !== undefined) {
          out.content += this.#buf.slice(0, found.at);
          this.#buf = this.#buf.slice(found.at + start.length);
          this.#inReasoning = true;
          continue;
        }
      }
      const keep = final ? 0 : heldBack(this.#buf, [this.#inReasoning ? end : start]);
      const piece = this.#buf.slice(0, this.#buf.length - keep);
      if (this.#inReasoning) out.reasoning += piece;
      else out.content += piece;
      this.#buf = this.#buf.slice(this.#buf.length - keep);
      break;
    }
    return out;
  }
}
