// Turns validated OpenAI requests into PreprocessedRequests for `ModelInput.Tokens` engines:
// chat template, tokenization, stop conditions, sampling options, context-length checks.
//
// What the token path cannot honour is refused with a 400 rather than silently dropped:
// - `response_format` json_object / json_schema when the card does not say its engine enforces
//   it (`runtime_config.runtime_data.guided_decoding`), or a schema outside the subset guided
//   decoding enforces (llm/openai/json_schema.ts); otherwise the schema goes to the engine as
//   `sampling_options.guided_decoding.json`.
// - `logit_bias`: no wire field.
// - `tools` (unless tool_choice is "none") when the caller has no tool-call parser for the
//   model (`renderTools` false): nothing would turn the model's output into `tool_calls`.
//   With `renderTools` the tools are rendered into the template and parsing the output is
//   the caller's job (llm/parsers/). `tool_choice: "required"` renders every tool and a named
//   choice only the named one: without grammar-guided decoding neither is enforced, the model
//   is only steered. Tool messages and earlier tool calls in the conversation are always
//   rendered.
// - completions `echo`, `suffix`, `best_of` > n, and prompt lists with more than one entry.
// - non-text content parts (the chat template only takes text).
// Chat `logprobs: true` (with `top_logprobs`, default 0) and completions `logprobs` become
// `output_options.logprobs`: how many alternatives the engine adds to each sampled token's
// log probability.
// `n` is not sent to the engine: PreprocessResult.n tells the caller how many requests to
// issue (see choiceRequest for giving each its own seed).

import { ChatTemplate } from "./chat_template.ts";
import type {
  ChatCompletionRequest,
  CommonRequestFields,
  CompletionRequest,
  ResponseFormat,
} from "../openai/types.ts";
import { grammarSchema, UnsupportedSchemaError } from "../openai/json_schema.ts";
import { RequestError } from "../openai/errors.ts";
import type {
  GuidedDecodingOptions,
  ModelDeploymentCard,
  PreprocessedRequest,
  SamplingOptions,
  StopConditions,
} from "../protocols.ts";
import type { Tokenizer } from "./tokenizer.ts";

/** Options of {@linkcode Preprocessor}. */
export interface PreprocessorOptions {
  /** The model's card: name, context length, eos ids, chat template. */
  card: ModelDeploymentCard;
  /** The model's tokenizer. */
  tokenizer: Tokenizer;
  /**
   * Render `tools` into the chat template (the default of {@linkcode ChatPreprocessOptions.renderTools}).
   * The caller must then parse tool calls out of the output. Default false: requests with
   * tools get a 400.
   */
  renderTools?: boolean;
}

/** Options of one {@linkcode Preprocessor.chat} call. */
export interface ChatPreprocessOptions {
  /**
   * Render the request's `tools` into the template: the caller parses tool calls out of the
   * answer. Default: the preprocessor's `renderTools`.
   */
  renderTools?: boolean;
}

/** A pre-processed request and what the caller needs to answer it. */
export interface PreprocessResult {
  /** What the engine receives. Its `model` is the card's display name. */
  request: PreprocessedRequest;
  /** Number of prompt tokens (`usage.prompt_tokens`). */
  promptTokens: number;
  /** Choices asked for: the caller issues this many requests (see {@linkcode choiceRequest}). */
  n: number;
  /** The rendered chat prompt, or the completion prompt text (undefined for token prompts). */
  promptText?: string;
  /**
   * A call the engine's grammar forces (`tool_choice` "required" or a named function, on an
   * engine with JSON-schema guided decoding): the answer is `{"name", "parameters"}` JSON, read
   * with the llama3_json tool-call format whatever the model's own.
   */
  forcedToolCall?: boolean;
}

/**
 * Chat template + tokenizer + request mapping for one model.
 *
 * @example
 * ```ts ignore
 * const pre = new Preprocessor({ card, tokenizer });
 * const { request, promptTokens } = pre.chat(validateChatRequest(body));
 * ```
 */
export class Preprocessor {
  readonly #card: ModelDeploymentCard;
  readonly #tokenizer: Tokenizer;
  readonly #renderTools: boolean;
  readonly #template: ChatTemplate | undefined;

  /**
   * Creates the preprocessor of one model.
   *
   * @param options The card, the tokenizer and whether to render tools.
   * @throws {ChatTemplateError} When the card's chat template does not parse.
   */
  constructor(options: PreprocessorOptions) {
    this.#card = options.card;
    this.#tokenizer = options.tokenizer;
    this.#renderTools = options.renderTools ?? false;
    const source = options.card.chat_template;
    this.#template = source === undefined || source === "" ? undefined : new ChatTemplate(source);
  }

  /** The card this preprocessor serves. */
  get card(): ModelDeploymentCard {
    return this.#card;
  }

  /**
   * Pre-processes a chat request.
   *
   * @param req A request from {@linkcode validateChatRequest}.
   * @param options Whether tools are rendered.
   * @returns The engine request, the prompt token count and the number of choices.
   * @throws {RequestError} 400 for what the model cannot do or a prompt over the context.
   */
  chat(req: ChatCompletionRequest, options: ChatPreprocessOptions = {}): PreprocessResult {
    if (this.#template === undefined) {
      throw new RequestError(
        400,
        `The model \`${this.#card.display_name}\` has no chat template; use /v1/completions.`,
        { param: "messages" },
      );
    }
    const guided = this.#guidedDecoding(req.response_format);
    const tools = this.#toolsToRender(req, options.renderTools ?? this.#renderTools);
    const kwargs = { ...req.chat_template_args, ...req.chat_template_kwargs };
    const prompt = this.#template.render({
      ...kwargs,
      messages: req.messages,
      tools,
      bos_token: this.#card.bos_token ?? "",
      eos_token: this.#card.eos_token ?? "",
    });
    // The template already holds BOS and friends.
    const ids = this.#tokenizer.encode(prompt, { addSpecialTokens: false });
    const result = this.#build(req, ids, "messages", req.max_completion_tokens ?? req.max_tokens);
    if (req.logprobs === true) {
      result.request.output_options = { logprobs: req.top_logprobs ?? 0 };
    }
    if (guided !== undefined) result.request.sampling_options.guided_decoding = guided;
    else {
      const forced = this.#forcedCall(req, tools);
      if (forced !== undefined) {
        result.request.sampling_options.guided_decoding = forced;
        result.forcedToolCall = true;
      }
    }
    result.promptText = prompt;
    return result;
  }

  /**
   * The grammar of a call `tool_choice` requires ("required", or a named function), when the
   * model's engine enforces JSON schemas and every offered tool's parameters fit the subset it
   * can enforce: `{"name": <one of the tools>, "parameters": <its parameters>}`. Otherwise
   * undefined, and the model is only asked (through its template) to call.
   */
  #forcedCall(
    req: ChatCompletionRequest,
    tools: ChatCompletionRequest["tools"],
  ): GuidedDecodingOptions | undefined {
    const choice = req.tool_choice;
    if (!tools?.length || (choice !== "required" && typeof choice !== "object")) return undefined;
    const data = this.#card.runtime_config?.runtime_data ?? {};
    const types = Array.isArray(data.guided_decoding) ? data.guided_decoding : [];
    if (!types.includes("json_schema")) return undefined;
    const calls = tools.map((t) => ({
      type: "object",
      properties: {
        name: { const: t.function.name },
        parameters: t.function.parameters ?? { type: "object" },
      },
      required: ["name", "parameters"],
      additionalProperties: false,
    }));
    const schema = calls.length === 1 ? calls[0]! : { anyOf: calls };
    try {
      grammarSchema(schema);
    } catch (err) {
      if (err instanceof UnsupportedSchemaError) return undefined;
      throw err;
    }
    return { json: schema };
  }

  /**
   * The guided decoding a `response_format` asks for: undefined for text; the JSON schema for
   * json_object (`{type: "object"}`) and json_schema, when the model's engine enforces it.
   */
  #guidedDecoding(format: ResponseFormat | undefined): GuidedDecodingOptions | undefined {
    if (format === undefined || format.type === "text") return undefined;
    const data = this.#card.runtime_config?.runtime_data ?? {};
    const types = Array.isArray(data.guided_decoding) ? data.guided_decoding : [];
    if (!types.includes(format.type)) {
      const engine = typeof data.engine === "string" && data.engine !== ""
        ? `its engine (${data.engine})`
        : "its engine (one that does not say it can, e.g. echo or mocker)";
      throw new RequestError(
        400,
        `\`response_format\` of type ${
          JSON.stringify(format.type)
        } cannot be enforced for the model \`${this.#card.display_name}\`: ${engine} has no guided decoding for it; serve the model with the llama.cpp engine (out=llamacpp) for structured output.`,
        { param: "response_format", code: "unsupported_response_format" },
      );
    }
    if (format.type === "json_object") return { json: { type: "object" } };
    const schema = format.json_schema.schema ?? { type: "object" };
    try {
      grammarSchema(schema);
    } catch (err) {
      if (!(err instanceof UnsupportedSchemaError)) throw err;
      throw new RequestError(
        400,
        `\`response_format.json_schema.schema\` is not supported: ${err.message}.`,
        { param: "response_format.json_schema.schema", code: "unsupported_schema" },
      );
    }
    return { json: schema };
  }

  /**
   * Pre-processes a completion request. A text prompt is tokenized with the tokenizer's
   * special tokens; a token-id prompt goes to the engine as it came (the request's array
   * itself is the engine request's `token_ids`).
   *
   * @param req A request from {@linkcode validateCompletionRequest}.
   * @returns The engine request, the prompt token count and the number of choices.
   * @throws {RequestError} 400 for batched prompts, unsupported fields, or a prompt over the context.
   */
  completion(req: CompletionRequest): PreprocessResult {
    if (req.echo === true) throw unsupported("echo", "this server does not echo the prompt");
    if (req.suffix !== undefined && req.suffix !== "") {
      throw unsupported("suffix", "this server does not insert text before a suffix");
    }
    if (req.best_of !== undefined && req.best_of > (req.n ?? 1)) {
      throw unsupported("best_of", "this server cannot generate more candidates than `n`");
    }
    const prompt = req.prompt;
    let single: string | number[];
    if (typeof prompt === "string") {
      single = prompt;
    } else if (prompt.length > 1 && (typeof prompt[0] === "string" || Array.isArray(prompt[0]))) {
      throw new RequestError(
        400,
        `batched prompts are not supported: send one prompt per request (got ${prompt.length}).`,
        { param: "prompt" },
      );
    } else if (typeof prompt[0] === "string" || Array.isArray(prompt[0])) {
      single = prompt[0];
    } else {
      single = prompt as number[];
    }
    // A token-id prompt is the request's own array, not a copy (a copy of 20,000 ids took
    // ~40-50 us in a profile of the frontend): nothing downstream changes a request's token ids
    // (migration builds a new array).
    const ids = typeof single === "string" ? this.#tokenizer.encode(single) : single;
    const result = this.#build(req, ids, "prompt", req.max_tokens);
    if (req.logprobs !== undefined && req.logprobs !== null) {
      result.request.output_options = { logprobs: req.logprobs };
    }
    if (typeof single === "string") result.promptText = single;
    return result;
  }

  #toolsToRender(
    req: ChatCompletionRequest,
    render: boolean,
  ): ChatCompletionRequest["tools"] {
    const tools = req.tools ?? [];
    const choice = req.tool_choice;
    if (tools.length === 0 || choice === "none") return undefined;
    if (!render) {
      throw new RequestError(
        400,
        `Tool calling is not supported for the model \`${this.#card.display_name}\`: no tool-call parser is configured for it (--dyn-tool-call-parser); send \`tools\` with \`tool_choice: "none"\` or without \`tools\`.`,
        { param: "tools" },
      );
    }
    // A named choice: only that tool is offered (validation checked that it is in `tools`).
    if (typeof choice === "object") {
      return tools.filter((t) => t.function.name === choice.function.name);
    }
    return tools;
  }

  #build(
    req: CommonRequestFields,
    ids: number[],
    promptParam: "messages" | "prompt",
    requestedMax: number | undefined,
  ): PreprocessResult {
    if (req.logit_bias !== undefined && Object.keys(req.logit_bias).length > 0) {
      throw unsupported("logit_bias", "the engine request has no logit bias");
    }
    const promptTokens = ids.length;
    const context = this.#card.context_length;
    const noun = promptParam === "messages" ? "messages" : "prompt";
    const maxParam = "max_completion_tokens" in req && req.max_completion_tokens !== undefined
      ? "max_completion_tokens"
      : "max_tokens";
    let maxTokens = requestedMax;
    if (context > 0) {
      if (promptTokens > context || (promptTokens === context && requestedMax === undefined)) {
        throw new RequestError(
          400,
          `This model's maximum context length is ${context} tokens. However, your ${noun} resulted in ${promptTokens} tokens${
            promptTokens === context ? ", which leaves no room for the completion" : ""
          }. Please reduce the length of the ${noun}.`,
          { param: promptParam, code: "context_length_exceeded" },
        );
      }
      if (maxTokens !== undefined && promptTokens + maxTokens > context) {
        throw new RequestError(
          400,
          `This model's maximum context length is ${context} tokens. However, you requested ${
            promptTokens + maxTokens
          } tokens (${promptTokens} in the ${noun}, ${maxTokens} in the completion). Please reduce the length of the ${noun} or completion.`,
          { param: maxParam, code: "context_length_exceeded" },
        );
      }
      maxTokens ??= context - promptTokens;
    }
    if (req.min_tokens !== undefined && maxTokens !== undefined && req.min_tokens > maxTokens) {
      throw new RequestError(
        400,
        `\`min_tokens\` (${req.min_tokens}) is more than the ${maxTokens} tokens left for the completion.`,
        { param: "min_tokens" },
      );
    }

    const stop_conditions: StopConditions = {};
    if (maxTokens !== undefined) stop_conditions.max_tokens = maxTokens;
    const stops = req.stop === undefined
      ? []
      : typeof req.stop === "string"
      ? [req.stop]
      : req.stop;
    if (stops.length > 0) stop_conditions.stop = [...stops];
    if (req.stop_token_ids !== undefined && req.stop_token_ids.length > 0) {
      stop_conditions.stop_token_ids_hidden = [...req.stop_token_ids];
    }
    if (req.min_tokens !== undefined && req.min_tokens > 0) {
      stop_conditions.min_tokens = req.min_tokens;
    }
    if (req.ignore_eos !== undefined) stop_conditions.ignore_eos = req.ignore_eos;

    const sampling_options: SamplingOptions = {};
    for (
      const key of [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
      ] as const
    ) {
      const value = req[key];
      if (value !== undefined) sampling_options[key] = value;
    }

    const request: PreprocessedRequest = {
      model: this.#card.display_name,
      token_ids: ids,
      stop_conditions,
      sampling_options,
      eos_token_ids: [...this.#card.eos_token_ids],
      mdc_sum: this.#card.mdcsum,
    };
    return { request, promptTokens, n: req.n ?? 1 };
  }
}

/**
 * The request for choice `index` of an `n > 1` request: a copy whose seed, when one was set,
 * is `seed + index`, so the choices differ yet stay reproducible.
 *
 * @param request The pre-processed request.
 * @param index The choice index (0 gives the request unchanged).
 * @returns The request for that choice.
 */
export function choiceRequest(request: PreprocessedRequest, index: number): PreprocessedRequest {
  const seed = request.sampling_options.seed;
  if (index === 0 || seed === undefined) return request;
  return { ...request, sampling_options: { ...request.sampling_options, seed: seed + index } };
}

function unsupported(param: string, why: string): RequestError {
  return new RequestError(400, `\`${param}\` is not supported: ${why}.`, { param });
}
