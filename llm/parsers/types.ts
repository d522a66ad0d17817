// What the output parsers share: the pieces they split a model's text into, and the error
// for a parser name nobody registered.

/** A tool call read out of a model's text. */
export interface ParsedToolCall {
  /** The function's name. */
  name: string;
  /** The arguments as JSON text (an object, as OpenAI sends them). */
  arguments: string;
}

/** What one delta of model text turned into. */
export interface ToolCallOutput {
  /** Text for the client's `content`. */
  content: string;
  /** Tool calls completed by this delta, in order. */
  calls: ParsedToolCall[];
}

/** What one delta of model text turned into, reasoning split from the answer. */
export interface ReasoningOutput {
  /** Text for the client's `content`. */
  content: string;
  /** Text for the client's `reasoning_content`. */
  reasoning: string;
}

/**
 * A streaming parser: fed a model's text delta by delta, it returns what each delta made
 * certain and holds back only what a later delta may still change (a possible marker prefix,
 * an unfinished call). The concatenated output does not depend on where the text was split.
 */
export interface StreamingParser<Out> {
  /** Takes the next delta. */
  push(text: string): Out;
  /** The text ended: everything still held back. */
  finish(): Out;
}

/** Thrown for a parser name that is not registered. */
export class UnknownParserError extends Error {
  /** The error class name. */
  override name = "UnknownParserError";
  /** "tool call" or "reasoning". */
  readonly kind: "tool call" | "reasoning";
  /** The name asked for. */
  readonly parser: string;
  /** The names that exist. */
  readonly known: readonly string[];

  /**
   * Creates the error.
   *
   * @param kind Which registry was asked.
   * @param parser The name asked for.
   * @param known The registered names.
   */
  constructor(kind: "tool call" | "reasoning", parser: string, known: readonly string[]) {
    super(
      `unknown ${kind} parser ${JSON.stringify(parser)}; known: ${known.join(", ")}`,
    );
    this.kind = kind;
    this.parser = parser;
    this.known = known;
  }
}
