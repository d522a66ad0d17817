// OpenAI wire types: chat completions and completions requests, responses and stream chunks.

/** A text part of a message's content. */
export interface TextContentPart {
  /** Always "text". */
  type: "text";
  /** The text. */
  text: string;
}

/** Any other part (images, audio, ...): accepted by validation, refused by text-only models. */
export interface OtherContentPart {
  /** The part's kind ("image_url", "input_audio", ...). */
  type: string;
  /** The kind's own fields. */
  [key: string]: unknown;
}

/** A part of a message's content. */
export type ContentPart = TextContentPart | OtherContentPart;

/** Roles a chat message may have. */
export const CHAT_ROLES = ["system", "developer", "user", "assistant", "tool", "function"] as const;
/** A chat message's role. */
export type ChatRole = typeof CHAT_ROLES[number];

/** A tool call an assistant made earlier in the conversation. */
export interface ToolCall {
  /** Id the tool's answer refers to (`tool_call_id`). */
  id: string;
  /** Always "function". */
  type: "function";
  /** The function called and its arguments (JSON text). */
  function: { name: string; arguments: string };
}

/** One chat message. */
export interface ChatMessage {
  /** Who speaks: system, developer, user, assistant, tool or function. */
  role: ChatRole;
  /** Text, parts, or null/absent for an assistant message that only calls tools. */
  content?: string | ContentPart[] | null;
  /** Name of the participant (or function) that speaks. */
  name?: string;
  /** Tools the assistant called in this turn. */
  tool_calls?: ToolCall[];
  /** The tool call this `tool` message answers. */
  tool_call_id?: string;
  /** Reasoning text of an earlier assistant turn (templates such as Qwen3's read it). */
  reasoning_content?: string;
}

/** A tool the model may call. */
export interface ChatTool {
  /** Always "function". */
  type: "function";
  /** The function's name, description and JSON-schema parameters. */
  function: {
    name: string;
    description?: string;
    parameters?: Record<string, unknown>;
    strict?: boolean;
  };
}

/** Which tool the model must call, if any. */
export type ToolChoice =
  | "none"
  | "auto"
  | "required"
  | { type: "function"; function: { name: string } };

/** Structured-output constraint. */
export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | {
    type: "json_schema";
    json_schema: {
      name: string;
      description?: string;
      schema?: Record<string, unknown> | boolean;
      strict?: boolean;
    };
  };

/** `stream_options` of a streaming request. */
export interface StreamOptions {
  /** Send a last chunk with `usage` (and empty choices). */
  include_usage?: boolean;
}

/** Fields shared by chat and completion requests (nulls from the client are dropped). */
export interface CommonRequestFields {
  /** Name of the model to serve the request. */
  model: string;
  /** Stream the answer as server-sent events. */
  stream?: boolean;
  /** Options of a streamed answer. */
  stream_options?: StreamOptions;
  /** Most tokens to generate. */
  max_tokens?: number;
  /** Sampling temperature (0: greedy). */
  temperature?: number;
  /** Nucleus sampling: the smallest token set with this much probability. */
  top_p?: number;
  /** -1 or 0: disabled. */
  top_k?: number;
  /** Smallest probability, relative to the likeliest token's, that a token may have. */
  min_p?: number;
  /** Choices to generate. */
  n?: number;
  /** Strings that end the generation (not shown). */
  stop?: string | string[];
  /** Seed for sampling. */
  seed?: number;
  /** Penalty on tokens already present (OpenAI's range -2..2). */
  presence_penalty?: number;
  /** Penalty by how often tokens appeared (OpenAI's range -2..2). */
  frequency_penalty?: number;
  /** Multiplicative penalty on repeated tokens (vLLM extension; 1: none). */
  repetition_penalty?: number;
  /** Bias added to the logits of token ids (keys are ids as strings). */
  logit_bias?: Record<string, number>;
  /** The end user, for monitoring and abuse detection. */
  user?: string;
  /** vLLM extension: keep generating past eos. */
  ignore_eos?: boolean;
  /** vLLM extension: no eos, stop token or stop string ends the sequence before this many tokens. */
  min_tokens?: number;
  /** vLLM extension: more token ids that end the sequence (and are not shown). */
  stop_token_ids?: number[];
}

/** `POST /v1/chat/completions` body, after {@linkcode validateChatRequest}. */
export interface ChatCompletionRequest extends CommonRequestFields {
  /** The conversation so far. */
  messages: ChatMessage[];
  /** Most tokens to generate (OpenAI's newer name for `max_tokens`). */
  max_completion_tokens?: number;
  /** Return the log probabilities of the generated tokens. */
  logprobs?: boolean;
  /** Most likely alternatives per token with their log probabilities (0..20). */
  top_logprobs?: number;
  /** Tools the model may call. */
  tools?: ChatTool[];
  /** Whether and which tool the model must call. */
  tool_choice?: ToolChoice;
  /** Allow several tool calls in one turn. */
  parallel_tool_calls?: boolean;
  /** Constrains the output: plain text, any JSON object, or a JSON schema. */
  response_format?: ResponseFormat;
  /** Extra variables for the chat template (vLLM's name), e.g. `{enable_thinking: false}`. */
  chat_template_kwargs?: Record<string, unknown>;
  /** Dynamo's name for {@linkcode ChatCompletionRequest.chat_template_kwargs}. */
  chat_template_args?: Record<string, unknown>;
}

/** A completion prompt: text, texts, token ids, or lists of token ids. */
export type CompletionPrompt = string | string[] | number[] | number[][];

/** `POST /v1/completions` body, after {@linkcode validateCompletionRequest}. */
export interface CompletionRequest extends CommonRequestFields {
  /** The prompt: text, texts, token ids, or lists of token ids. */
  prompt: CompletionPrompt;
  /** Text after the completion (for insertion). */
  suffix?: string;
  /** Repeat the prompt before the completion. */
  echo?: boolean;
  /** Candidates generated server-side; the best `n` are returned. */
  best_of?: number;
  /** Number of top log probabilities per token (0..5). */
  logprobs?: number;
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/** Why a choice ended, in OpenAI's words. */
export type OpenAIFinishReason = "stop" | "length" | "tool_calls" | "content_filter";

/** Token counts of a request. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Log probability of one token, with alternatives. */
export interface ChatTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: { token: string; logprob: number; bytes: number[] | null }[];
}

/** The `logprobs` of a chat choice. */
export interface ChatChoiceLogprobs {
  content: ChatTokenLogprob[] | null;
}

/** The assistant's message in a non-streaming chat response. */
export interface ChatResponseMessage {
  role: "assistant";
  content: string | null;
  reasoning_content?: string | null;
  tool_calls?: ToolCall[];
}

/** One choice of a non-streaming chat response. */
export interface ChatChoice {
  index: number;
  message: ChatResponseMessage;
  logprobs: ChatChoiceLogprobs | null;
  finish_reason: OpenAIFinishReason | null;
}

/** A non-streaming chat response (`object: "chat.completion"`). */
export interface ChatCompletionResponse {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: ChatChoice[];
  usage?: Usage;
  system_fingerprint?: string | null;
}

/** What a streaming chat choice adds. */
export interface ChatDelta {
  role?: "assistant";
  content?: string | null;
  reasoning_content?: string | null;
  tool_calls?: (Partial<ToolCall> & { index: number })[];
}

/** One choice of a streaming chat chunk. */
export interface ChatChunkChoice {
  index: number;
  delta: ChatDelta;
  logprobs?: ChatChoiceLogprobs | null;
  finish_reason: OpenAIFinishReason | null;
}

/** A streaming chat chunk (`object: "chat.completion.chunk"`), sent as an SSE `data:` line. */
export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: ChatChunkChoice[];
  /** Only on the last chunk, when `stream_options.include_usage`; null before. */
  usage?: Usage | null;
  system_fingerprint?: string | null;
}

/** The `logprobs` of a completion choice. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: (number | null)[];
  top_logprobs: (Record<string, number> | null)[] | null;
  text_offset: number[];
}

/** One choice of a completion response or chunk. */
export interface CompletionChoice {
  index: number;
  text: string;
  logprobs: CompletionLogprobs | null;
  finish_reason: OpenAIFinishReason | null;
}

/** A completion response; streamed chunks have the same shape (`object: "text_completion"`). */
export interface CompletionResponse {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: CompletionChoice[];
  usage?: Usage | null;
  system_fingerprint?: string | null;
}

/** A streaming completion chunk. */
export type CompletionChunk = CompletionResponse;
