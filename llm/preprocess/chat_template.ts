// Renders a model's Jinja chat template (from its card) into the prompt text, with messages
// normalised the way vLLM hands them to Hugging Face templates.

import { Template } from "@huggingface/jinja";
import { Bail, type CompiledTemplate, compileTemplate } from "./template_compiler.ts";
import type { ChatMessage, ChatTool } from "../openai/types.ts";
import { RequestError } from "../openai/errors.ts";

/** Thrown when a chat template's source does not parse (the model's files are broken). */
export class ChatTemplateError extends Error {
  /** The error class name. */
  override name = "ChatTemplateError";
  /**
   * Creates the error.
   *
   * @param message What was wrong.
   * @param options The underlying cause.
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** What {@linkcode ChatTemplate.render} takes; keys are template variables, hence snake_case. */
export interface ChatTemplateContext {
  /** The conversation, oldest message first. */
  messages: readonly ChatMessage[];
  /** Tools the model may call. */
  tools?: readonly ChatTool[];
  /** End with the opening of the assistant's turn. Default true. */
  add_generation_prompt?: boolean;
  /** The beginning-of-sequence token text. */
  bos_token?: string;
  /** The end-of-sequence token text. */
  eos_token?: string;
  /** Further template variables (`enable_thinking`, ...). */
  [variable: string]: unknown;
}

/**
 * A chat template.
 *
 * @example
 * ```ts
 * const template = new ChatTemplate(
 *   "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}" +
 *     "{% if add_generation_prompt %}<assistant>{% endif %}",
 * );
 * template.render({ messages: [{ role: "user", content: "hi" }] }); // "<user>hi<assistant>"
 * ```
 */
export class ChatTemplate {
  /** The Jinja source. */
  readonly source: string;
  readonly #template: Template;
  /** Names the template reads that the renderer declares (as undefined) when not given. */
  readonly #freeNames: string[];
  /** The template compiled to closures, when it uses only what the compiler covers. */
  readonly #compiled: CompiledTemplate | undefined;

  /**
   * Parses a chat template (and compiles it when it can).
   *
   * @param source Jinja source (`chat_template` of tokenizer_config.json).
   * @throws {ChatTemplateError} When the source does not parse.
   */
  constructor(source: string) {
    this.source = source;
    try {
      this.#template = new Template(source);
      this.#freeNames = freeNames(this.#template.parsed);
      this.#compiled = compileTemplate(this.#template.parsed);
    } catch (err) {
      throw new ChatTemplateError(`chat template does not parse: ${errorMessage(err)}`, {
        cause: err,
      });
    }
  }

  /** Whether renders take the compiled path (falling back to the interpreter per render). */
  get compiled(): boolean {
    return this.#compiled !== undefined;
  }

  /**
   * Renders the prompt. Text content parts are joined with newlines, `developer` messages
   * become `system` ones, a missing assistant content becomes "", and tool-call arguments
   * that are JSON objects are parsed (templates often `tojson` them).
   *
   * @param context Messages, tools, flags and further template variables.
   * @returns The prompt text.
   * @throws {RequestError} 400 when a message cannot be rendered (a non-text content part,
   *   or the template raised an error such as "roles must alternate").
   */
  render(context: ChatTemplateContext): string {
    const { messages, tools, add_generation_prompt, bos_token, eos_token, ...extra } = context;
    const vars: Record<string, unknown> = {
      ...extra,
      messages: messages.map(normaliseMessage),
      add_generation_prompt: add_generation_prompt ?? true,
      bos_token: bos_token ?? "",
      eos_token: eos_token ?? "",
    };
    if (tools !== undefined && tools.length > 0) vars.tools = tools;
    if (this.#compiled !== undefined) {
      try {
        return this.#compiled(vars);
      } catch (err) {
        // Something the compiled form does not reproduce exactly (or an error, which the
        // interpreter words): the interpreter renders it.
        if (!(err instanceof Bail)) throw err;
      }
    }
    // The interpreter finds a name it was not given by throwing and catching an Error, at
    // every read: declaring the names the template reads as undefined is the same to the
    // template (`is defined` is false, filters see undefined) and much cheaper.
    for (const name of this.#freeNames) if (!(name in vars)) vars[name] = undefined;
    try {
      return this.#template.render(vars);
    } catch (err) {
      throw new RequestError(400, `chat template error: ${errorMessage(err)}`, {
        param: "messages",
        cause: err,
      });
    }
  }
}

// Declared by the interpreter itself: declaring them again is an error.
const INTERPRETER_NAMES = new Set([
  "false",
  "true",
  "none",
  "False",
  "True",
  "None",
  "raise_exception",
  "range",
  "strftime_now",
  "namespace",
]);

/** Every identifier in a parsed template, but the interpreter's own. */
function freeNames(ast: unknown): string[] {
  const names = new Set<string>();
  const seen = new Set<unknown>();
  const visit = (node: unknown): void => {
    if (typeof node !== "object" || node === null || seen.has(node)) return;
    seen.add(node);
    if (Array.isArray(node)) {
      for (const child of node) visit(child);
      return;
    }
    const n = node as { type?: unknown; value?: unknown };
    if (n.type === "Identifier" && typeof n.value === "string") names.add(n.value);
    for (const child of Object.values(node)) visit(child);
  };
  visit(ast);
  return [...names].filter((name) => !INTERPRETER_NAMES.has(name));
}

function normaliseMessage(message: ChatMessage, i: number): Record<string, unknown> {
  const out: Record<string, unknown> = { ...message };
  if (message.role === "developer") out.role = "system";
  const content = message.content;
  if (Array.isArray(content)) {
    const texts: string[] = [];
    content.forEach((part, j) => {
      if (part.type !== "text" || typeof part.text !== "string") {
        throw new RequestError(
          400,
          `content parts of type ${
            JSON.stringify(part.type)
          } are not supported: this model takes text only`,
          { param: `messages[${i}].content[${j}]` },
        );
      }
      texts.push(part.text);
    });
    out.content = texts.join("\n");
  } else if (content === undefined || content === null) {
    out.content = "";
  }
  if (message.tool_calls !== undefined) {
    out.tool_calls = message.tool_calls.map((call) => ({
      ...call,
      function: { ...call.function, arguments: parseArguments(call.function.arguments) },
    }));
  }
  return out;
}

function parseArguments(args: string): unknown {
  try {
    const parsed: unknown = JSON.parse(args);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed;
  } catch {
    // Not JSON: the template gets the string as the client sent it.
  }
  return args;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
