// The wire types a reference worker's `generate` endpoint takes and streams back: the
// PreprocessedRequest (token ids in, as the reference frontend builds it after tokenizing) and
// the LLMEngineOutput items, checked at the door where they arrive.

import { ProtocolError } from "../errors.ts";

/** The reference's PreprocessedRequest, as its frontend sends it (snake_case wire fields). */
export interface ReferencePreprocessedRequest {
  /** The served model name. */
  model: string;
  /** The prompt, tokenized. */
  token_ids: number[];
  /** When to stop. */
  stop_conditions: {
    max_tokens: number | null;
    stop: string[] | null;
    stop_token_ids: number[] | null;
    stop_token_ids_visible: number[] | null;
    stop_token_ids_hidden: number[] | null;
    min_tokens: number | null;
    ignore_eos: boolean | null;
    max_thinking_tokens: number | null;
  };
  /** Sampling (null: the engine's default). */
  sampling_options: Record<string, unknown>;
  /** Output shaping (null: the engine's default). */
  output_options: Record<string, unknown>;
  /** End-of-sequence token ids. */
  eos_token_ids: number[];
  /** Checksum of the model card the request was built for, when known. */
  mdc_sum: string | null;
  /** Annotations asked for. */
  annotations: string[];
  /** Routing hints. */
  routing: Record<string, unknown>;
  /** Per-request router configuration. */
  router_config_override: Record<string, unknown> | null;
  /** Fields this client does not set, passed through as given. */
  [field: string]: unknown;
}

/** What {@linkcode referenceTokensRequest} builds a request from. */
export interface ReferenceTokensRequestInit {
  /** The served model name. */
  model: string;
  /** The prompt's token ids. */
  tokenIds: readonly number[];
  /** Most tokens to generate. */
  maxTokens: number;
  /** End-of-sequence token ids (also hidden stop ids, as the reference frontend sets them). */
  eosTokenIds?: readonly number[];
  /** Generate past end-of-sequence until `maxTokens`. */
  ignoreEos?: boolean;
  /** Sampling temperature. */
  temperature?: number;
  /** The model card's checksum, when known. */
  mdcSum?: string;
}

/**
 * Builds a PreprocessedRequest the way the reference frontend does, every field present.
 *
 * @param init model, token ids, max tokens and the few options most callers set
 * @returns the wire request
 *
 * @example
 * ```ts
 * const request = referenceTokensRequest({ model: "Qwen3-0.6B", tokenIds: [9707], maxTokens: 4 });
 * ```
 */
export function referenceTokensRequest(
  init: ReferenceTokensRequestInit,
): ReferencePreprocessedRequest {
  const eos = [...(init.eosTokenIds ?? [])];
  return {
    model: init.model,
    token_ids: [...init.tokenIds],
    stop_conditions: {
      max_tokens: init.maxTokens,
      stop: null,
      stop_token_ids: null,
      stop_token_ids_visible: null,
      stop_token_ids_hidden: eos.length > 0 ? eos : null,
      min_tokens: null,
      ignore_eos: init.ignoreEos ?? null,
      max_thinking_tokens: null,
    },
    sampling_options: {
      n: null,
      best_of: null,
      presence_penalty: null,
      frequency_penalty: null,
      repetition_penalty: null,
      temperature: init.temperature ?? null,
      top_p: null,
      top_k: null,
      min_p: null,
      use_beam_search: null,
      length_penalty: null,
      seed: null,
      include_stop_str_in_output: null,
      guided_decoding: null,
    },
    output_options: {
      logprobs: null,
      prompt_logprobs: null,
      skip_special_tokens: null,
      formatted_prompt: null,
      return_tokens_as_token_ids: null,
    },
    eos_token_ids: eos,
    mdc_sum: init.mdcSum ?? null,
    annotations: [],
    routing: {},
    router_config_override: null,
  };
}

/** One item of a reference worker's response stream (its LLMEngineOutput). */
export interface ReferenceEngineOutput {
  /** Tokens generated since the last item. */
  token_ids: number[];
  /** Why generation ended, on the last item ("length", "stop", "eos", ...). */
  finish_reason: string | null;
  /** Text, when the worker detokenizes (the mocker does not). */
  text: string | null;
  /** Token counts, when the worker reports them. */
  completion_usage?: Record<string, unknown> | null;
  /** The rest of the worker's fields (log probs, index, ...), as sent. */
  [field: string]: unknown;
}

/** One decoded stream item: an output, the end marker, or the worker's error. */
export type ReferenceStreamItem =
  | { kind: "output"; output: ReferenceEngineOutput }
  | { kind: "final" }
  | { kind: "error"; message: string };

/**
 * Checks one decoded response body (`{data?: Annotated<LLMEngineOutput>, complete_final}`).
 *
 * @param body the msgpack- or JSON-decoded item
 * @returns what it says
 * @throws {ProtocolError} a body that is not a stream item
 */
export function parseReferenceStreamItem(body: unknown): ReferenceStreamItem {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ProtocolError("response item is not an object");
  }
  const { data, complete_final: final } = body as { data?: unknown; complete_final?: unknown };
  if (typeof final !== "boolean") throw new ProtocolError("response item lacks complete_final");
  if (final) return { kind: "final" };
  if (typeof data !== "object" || data === null) {
    throw new ProtocolError("response item has no data");
  }
  const annotated = data as { data?: unknown; event?: unknown; comment?: unknown };
  if (annotated.event === "error") {
    const comment = Array.isArray(annotated.comment) ? annotated.comment.join("; ") : "";
    return { kind: "error", message: comment || "the worker reported an error" };
  }
  const out = annotated.data as Record<string, unknown> | null | undefined;
  if (typeof out !== "object" || out === null) {
    throw new ProtocolError("response item's data has no engine output");
  }
  const ids = out.token_ids ?? [];
  if (!Array.isArray(ids) || !ids.every((t) => Number.isInteger(t) && t >= 0)) {
    throw new ProtocolError("engine output's token_ids is not a list of token ids");
  }
  const reason = out.finish_reason ?? null;
  if (reason !== null && typeof reason !== "string") {
    throw new ProtocolError("engine output's finish_reason is not a string");
  }
  const text = out.text ?? null;
  if (text !== null && typeof text !== "string") {
    throw new ProtocolError("engine output's text is not a string");
  }
  return {
    kind: "output",
    output: { ...out, token_ids: ids as number[], finish_reason: reason, text },
  };
}
