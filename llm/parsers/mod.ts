/**
 * Output parsers of chat answers: reasoning (`<think>...</think>`) split from the answer,
 * and tool calls read out of it (hermes, llama3_json, mistral, pythonic, deepseek_v3),
 * streaming: fed text deltas, exact wherever the text was split.
 * @module
 */

export {
  type ChatOutput,
  ChatOutputParser,
  type ChatOutputParserOptions,
  type IndexedToolCall,
  newToolCallId,
} from "./chat_output.ts";
export {
  REASONING_FORMATS,
  REASONING_PARSER_NAMES,
  type ReasoningFormat,
  reasoningFormat,
  ReasoningParser,
  reasoningParser,
  type ReasoningStartOptions,
  startsInReasoning,
} from "./reasoning.ts";
export {
  deepseekV3Format,
  hermesFormat,
  llama3JsonFormat,
  mistralFormat,
  pythonicFormat,
  type SectionScan,
  TOOL_CALL_FORMATS,
  TOOL_CALL_PARSER_NAMES,
  type ToolCallFormat,
  toolCallFormat,
  ToolCallParser,
  toolCallParser,
} from "./tool_calls.ts";
export {
  type ParsedToolCall,
  type ReasoningOutput,
  type StreamingParser,
  type ToolCallOutput,
  UnknownParserError,
} from "./types.ts";
