// The preprocess stage of a tokens model: an OpenAI request becomes the engine requests of
// its choices (chat template, tokenize, sampling and stop conditions).

import type { ChatCompletionRequest, CompletionRequest } from "../openai/types.ts";
import { choiceRequest, type Preprocessor } from "../preprocess/preprocessor.ts";
import type { PreprocessedRequest } from "../protocols.ts";
import type { EndpointKind, OpenAIRequest } from "./parse.ts";

/** What the preprocess stage hands on. */
export interface Preprocessed {
  /** One engine request per choice (n choices are n engine requests). */
  choices: PreprocessedRequest[];
  /** The prompt's length in tokens. */
  promptTokens: number;
  /** The rendered chat prompt or the completion's text prompt. */
  promptText?: string;
  /** The engine's grammar forces a tool call (see `PreprocessResult.forcedToolCall`). */
  forcedToolCall?: boolean;
}

/** Options of {@linkcode preprocess}. */
export interface PreprocessOptions {
  /** Render a chat request's tools (a tool-call parser will read the answer). */
  renderTools?: boolean;
}

/**
 * Preprocesses a validated request for one model.
 *
 * @throws {RequestError} the request asks for something the model cannot do
 * @example
 * ```ts ignore
 * const { choices, promptTokens } = preprocess(preprocessor, "chat", req);
 * ```
 */
export function preprocess(
  preprocessor: Preprocessor,
  kind: EndpointKind,
  req: OpenAIRequest,
  options: PreprocessOptions = {},
): Preprocessed {
  const { request, promptTokens, n, promptText, forcedToolCall } = kind === "chat"
    ? preprocessor.chat(req as ChatCompletionRequest, { renderTools: options.renderTools })
    : preprocessor.completion(req as CompletionRequest);
  // Each choice its own seed when one is given.
  const choices = n === 1
    ? [request]
    : Array.from({ length: n }, (_, i) => choiceRequest(request, i));
  return { choices, promptTokens, promptText, ...(forcedToolCall && { forcedToolCall }) };
}
