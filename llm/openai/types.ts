// OpenAI wire types: chat completions and completions requests, responses and stream chunks.

/** A text part of a message's content. */
export interface TextContentPart {
  type: "text";
  text: string;
}

/** Any other part (images, audio, ...): accepted by validation, refused by text-only models. */
export interface OtherContentPart {
  type: string;
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
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** One chat message. */
export interface ChatMessage {
  role: ChatRole;
  /** Text, parts, or null/absent for an assistant message that only calls tools. */
  content?: string | ContentPart[] | null;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  /** Reasoning text of an earlier assistant turn (templates such as Qwen3's read it). */
  reasoning_content?: string;
}

/** A tool the model may call. */
export interface ChatTool {
  type: "function";
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
  model: string;
  stream?: boolean;
  stream_options?: StreamOptions;
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  /** -1 or 0: disabled. */
  top_k?: number;
  min_p?: number;
  n?: number;
  stop?: string | string[];
  seed?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  logit_bias?: Record<string, number>;
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
  messages: ChatMessage[];
  max_completion_tokens?: number;
  logprobs?: boolean;
  top_logprobs?: number;
  tools?: ChatTool[];
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;
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
  prompt: CompletionPrompt;
  suffix?: string;
  echo?: boolean;
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
