// Wire types of the LLM serving path (snake_case: they cross process boundaries) and the
// enums of seeds 001/002. Shared by registerLlm, the frontend, preprocessing and engines.

/** What the engine takes in. */
export const ModelInput = {
  /** Pre-processed token ids (Dynamo tokenizes and applies the chat template). */
  Tokens: "tokens",
  /** The raw OpenAI request (the engine does its own pre-processing). */
  Text: "text",
} as const;
export type ModelInput = typeof ModelInput[keyof typeof ModelInput];

/** Which OpenAI APIs a model serves (bit flags, combine with `|`). */
export const ModelType = {
  Chat: 1,
  Completions: 2,
  Embedding: 4,
  /** Seed 002: tokens in, tokens out, for chat and completions. */
  Backend: 1 | 2 | 8,
} as const;
export type ModelType = number;

/** Stop conditions of a pre-processed request. */
export interface StopConditions {
  max_tokens?: number;
  /** Stop strings, matched on detokenized text by the frontend (never sent to mean tokens). */
  stop?: string[];
  /** Token ids that end generation and are not shown. */
  stop_token_ids_hidden?: number[];
  min_tokens?: number;
  ignore_eos?: boolean;
}

/** Sampling options of a pre-processed request. */
export interface SamplingOptions {
  n?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  seed?: number;
}

/** What a `ModelInput.Tokens` handler receives. */
export interface PreprocessedRequest {
  model: string;
  token_ids: number[];
  stop_conditions: StopConditions;
  sampling_options: SamplingOptions;
  eos_token_ids: number[];
  /** Checksum of the model card the frontend used. */
  mdc_sum?: string;
  annotations?: string[];
}

/** Why a sequence ended (OpenAI names plus Dynamo's). */
export type FinishReason = "stop" | "length" | "eos" | "cancelled" | "error" | "content_filter";

/** What a `ModelInput.Tokens` handler yields. */
export interface LLMEngineOutput {
  token_ids: number[];
  /** Optional text the engine decoded itself (the frontend detokenizes otherwise). */
  text?: string;
  finish_reason?: FinishReason | null;
  /** Log probability per token in token_ids, when asked for. */
  log_probs?: number[];
}

/** Hashes and sizes of the files a card was built from. */
export interface CardFile {
  /** sha256, lowercase hex. */
  sha256: string;
  bytes: number;
}

/**
 * A model deployment card: everything a frontend needs to serve a model, published by
 * registerLlm under the worker's lease at `v1/mdc/{namespace}/{component}/{endpoint}/{instance}`.
 */
export interface ModelDeploymentCard {
  /** The name clients use (`model` in requests). */
  display_name: string;
  /** Where the worker loaded it from (folder, hf repo id, or GGUF file). */
  source_path: string;
  model_type: ModelType;
  model_input: ModelInput;
  context_length: number;
  kv_cache_block_size: number;
  migration_limit: number;
  user_data?: Record<string, unknown>;
  /** Parsed config.json (or GGUF metadata), trimmed to scalars and small arrays. */
  model_info?: Record<string, unknown>;
  /** Files by name ("tokenizer.json", "tokenizer_config.json", ...), content-addressed in the blob store. */
  files: Record<string, CardFile>;
  /** Chat template (Jinja), when the model has one. */
  chat_template?: string;
  /** Token ids that end generation. */
  eos_token_ids: number[];
  bos_token?: string;
  eos_token?: string;
  /** sha256 over the canonical card (without this field): equal cards, equal sums. */
  mdcsum: string;
}

/** The discovery record that makes a model routable: `v1/models/{namespace}/{component}/{endpoint}/{instance}`. */
export interface ModelEntry {
  name: string;
  endpoint: { namespace: string; component: string; name: string };
  model_type: ModelType;
  model_input: ModelInput;
  /** Key of the instance's model card. */
  card_key: string;
  mdcsum: string;
}

/** Discovery prefixes of the LLM layer. */
export const MODEL_ENTRY_PREFIX = "v1/models/";
export const MODEL_CARD_PREFIX = "v1/mdc/";
