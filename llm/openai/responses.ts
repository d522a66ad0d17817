// The Responses API (`POST /v1/responses`) over chat completions: a request becomes a chat
// request (instructions, input text or items, function tools, text.format), and a chat answer
// becomes a Response object: message, function-call and reasoning output items, usage. The
// streamed form (server-sent events) is in llm/http/responses.ts.

import { RequestError } from "./errors.ts";
import type { ChatCompletionRequest, ChatMessage, ChatTool, ResponseFormat } from "./types.ts";
import { validateChatRequest } from "./validate.ts";

/** What a Response object echoes of its request. */
export interface ResponseEcho {
  instructions: string | null;
  max_output_tokens: number | null;
  temperature: number | null;
  top_p: number | null;
  tools: unknown[];
  tool_choice: unknown;
  parallel_tool_calls: boolean;
  text: { format: Record<string, unknown> };
  metadata: Record<string, unknown>;
  user: string | null;
}

/** A Responses request as the chat request that serves it, and what the answer echoes. */
export interface ResponsesRequest {
  /** The chat request (validated as any chat request is). */
  chat: ChatCompletionRequest;
  /** Fields the Response object repeats. */
  echo: ResponseEcho;
  /** Whether the answer is streamed. */
  stream: boolean;
}

/** Fields that need state this server does not keep. */
const STATEFUL = {
  previous_response_id: "this server stores no responses; send the whole conversation in `input`",
  conversation: "this server stores no conversations; send the whole conversation in `input`",
  prompt: "this server stores no prompt templates",
} as const;

function bad(param: string, message: string): RequestError {
  return new RequestError(400, message, { param });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (Array.isArray(v)) return "an array";
  if (v === null) return "null";
  return typeof v === "string" ? JSON.stringify(v.slice(0, 40)) : typeof v;
}

/** A message's content: text, or its text parts joined (other parts refused). */
function contentText(content: unknown, param: string): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) {
    throw bad(param, `\`${param}\` must be a string or a list of parts, got ${describe(content)}`);
  }
  return content.map((part, i) => {
    const at = `${param}[${i}]`;
    if (!isRecord(part)) throw bad(at, `\`${at}\` must be an object, got ${describe(part)}`);
    const type = part.type;
    if (type !== "input_text" && type !== "output_text" && type !== "text") {
      throw bad(
        `${at}.type`,
        `content parts of type ${describe(type)} are not supported (input_text, output_text are)`,
      );
    }
    if (typeof part.text !== "string") {
      throw bad(`${at}.text`, `\`${at}.text\` must be a string, got ${describe(part.text)}`);
    }
    return part.text;
  }).join("");
}

/** The chat messages of `input` (a text, or a list of input items). */
function inputMessages(input: unknown): ChatMessage[] {
  if (typeof input === "string") {
    if (input === "") throw bad("input", "`input` must not be empty");
    return [{ role: "user", content: input }];
  }
  if (!Array.isArray(input) || input.length === 0) {
    throw bad(
      "input",
      `\`input\` must be a non-empty string or a non-empty list of items, got ${
        Array.isArray(input) ? "an empty list" : describe(input)
      }`,
    );
  }
  const messages: ChatMessage[] = [];
  input.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isRecord(item)) throw bad(at, `\`${at}\` must be an object, got ${describe(item)}`);
    const type = item.type ?? "message";
    if (type === "message") {
      const role = item.role;
      if (role !== "user" && role !== "assistant" && role !== "system" && role !== "developer") {
        throw bad(
          `${at}.role`,
          `\`${at}.role\` must be user, assistant, system or developer, got ${describe(role)}`,
        );
      }
      messages.push({
        role: role === "developer" ? "system" : role,
        content: contentText(item.content, `${at}.content`),
      });
    } else if (type === "function_call") {
      for (const key of ["call_id", "name", "arguments"]) {
        if (typeof item[key] !== "string" || item[key] === "" && key !== "arguments") {
          throw bad(
            `${at}.${key}`,
            `\`${at}.${key}\` must be a string, got ${describe(item[key])}`,
          );
        }
      }
      const call = {
        id: item.call_id as string,
        type: "function" as const,
        function: { name: item.name as string, arguments: item.arguments as string },
      };
      // Calls of one turn are one assistant message.
      const last = messages.at(-1);
      if (last?.role === "assistant" && last.tool_calls !== undefined && !last.content) {
        last.tool_calls.push(call);
      } else {
        messages.push({ role: "assistant", content: null, tool_calls: [call] });
      }
    } else if (type === "function_call_output") {
      if (typeof item.call_id !== "string" || item.call_id === "") {
        throw bad(`${at}.call_id`, `\`${at}.call_id\` must be a non-empty string`);
      }
      messages.push({
        role: "tool",
        tool_call_id: item.call_id,
        content: contentText(item.output, `${at}.output`),
      });
    } else if (type === "reasoning") {
      // Earlier reasoning is not sent back to the model (as chat templates drop it).
    } else {
      throw bad(
        `${at}.type`,
        `input items of type ${
          describe(type)
        } are not supported (message, function_call, function_call_output, reasoning are)`,
      );
    }
  });
  return messages;
}

function chatTools(tools: unknown): ChatTool[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw bad("tools", `\`tools\` must be a list, got ${describe(tools)}`);
  return tools.map((t, i) => {
    const at = `tools[${i}]`;
    if (!isRecord(t) || t.type !== "function") {
      throw bad(
        `${at}.type`,
        `only function tools are supported, got ${describe(isRecord(t) ? t.type : t)}`,
      );
    }
    if (typeof t.name !== "string") {
      throw bad(`${at}.name`, `\`${at}.name\` must be a string, got ${describe(t.name)}`);
    }
    return {
      type: "function",
      function: {
        name: t.name,
        ...(typeof t.description === "string" ? { description: t.description } : {}),
        ...(isRecord(t.parameters) ? { parameters: t.parameters } : {}),
        ...(typeof t.strict === "boolean" ? { strict: t.strict } : {}),
      },
    };
  });
}

function chatToolChoice(choice: unknown): unknown {
  if (choice === undefined || choice === null || typeof choice === "string") return choice;
  if (isRecord(choice) && choice.type === "function" && typeof choice.name === "string") {
    return { type: "function", function: { name: choice.name } };
  }
  throw bad(
    "tool_choice",
    `\`tool_choice\` must be "none", "auto", "required" or {type: "function", name}, got ${
      describe(choice)
    }`,
  );
}

function chatFormat(text: unknown): ResponseFormat | undefined {
  if (text === undefined || text === null) return undefined;
  if (!isRecord(text)) throw bad("text", `\`text\` must be an object, got ${describe(text)}`);
  const format = text.format;
  if (format === undefined || format === null) return undefined;
  if (!isRecord(format)) {
    throw bad("text.format", `\`text.format\` must be an object, got ${describe(format)}`);
  }
  if (format.type === "json_schema") {
    return {
      type: "json_schema",
      json_schema: {
        name: format.name as string,
        ...(format.description !== undefined ? { description: format.description as string } : {}),
        ...(format.schema !== undefined
          ? { schema: format.schema as Record<string, unknown> }
          : {}),
        ...(format.strict !== undefined ? { strict: format.strict as boolean } : {}),
      },
    };
  }
  return format as ResponseFormat;
}

/**
 * A chat parameter's name as the Responses API spells it (`max_tokens` is `max_output_tokens`,
 * `messages[...]` is `input`, `response_format` is `text.format`).
 *
 * @param param the chat request's parameter, or null
 * @returns the Responses request's parameter, or null
 */
export function responsesParam(param: string | null): string | null {
  if (param === null) return null;
  if (param === "max_tokens" || param === "max_completion_tokens") return "max_output_tokens";
  if (param.startsWith("messages")) return "input";
  if (param.startsWith("response_format")) {
    return "text.format" + param.slice("response_format".length).replace(/^\.json_schema/, "");
  }
  if (param.startsWith("tools[")) return param.replace(/\.function\./, ".");
  return param;
}

/**
 * Checks a `POST /v1/responses` body and turns it into the chat request that serves it.
 * Unknown fields are ignored; fields that need stored state (`previous_response_id`,
 * `conversation`, `prompt`) and `background` get a 400.
 *
 * @param body the parsed JSON body
 * @returns the chat request, what the Response echoes, and whether it streams
 * @throws {RequestError} 400 naming the (Responses API) parameter at fault
 * @example
 * ```ts
 * const { chat } = responsesRequest({ model: "m", instructions: "Be brief.", input: "Hi" });
 * chat.messages; // [{role: "system", content: "Be brief."}, {role: "user", content: "Hi"}]
 * ```
 */
export function responsesRequest(body: unknown): ResponsesRequest {
  if (!isRecord(body)) {
    throw new RequestError(400, `the request body must be a JSON object, got ${describe(body)}`);
  }
  for (const [key, why] of Object.entries(STATEFUL)) {
    if (body[key] !== undefined && body[key] !== null) {
      throw bad(key, `\`${key}\` is not supported: ${why}.`);
    }
  }
  if (body.background === true) {
    throw bad("background", "`background` is not supported: this server answers in the request");
  }
  if (body.instructions !== undefined && body.instructions !== null) {
    if (typeof body.instructions !== "string") {
      throw bad(
        "instructions",
        `\`instructions\` must be a string, got ${describe(body.instructions)}`,
      );
    }
  }
  if (body.input === undefined) throw bad("input", "`input` is required");
  const messages: ChatMessage[] = [
    ...(typeof body.instructions === "string" && body.instructions !== ""
      ? [{ role: "system" as const, content: body.instructions }]
      : []),
    ...inputMessages(body.input),
  ];
  const tools = chatTools(body.tools);
  const stream = body.stream === true;
  const chatBody: Record<string, unknown> = {
    model: body.model,
    messages,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
    max_tokens: body.max_output_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    top_p: body.top_p ?? undefined,
    ...(tools && tools.length > 0 ? { tools } : {}),
    tool_choice: tools && tools.length > 0 ? chatToolChoice(body.tool_choice) : undefined,
    parallel_tool_calls: body.parallel_tool_calls ?? undefined,
    response_format: chatFormat(body.text),
    user: body.user ?? undefined,
  };
  for (const key of Object.keys(chatBody)) {
    if (chatBody[key] === undefined) delete chatBody[key];
  }
  let chat: ChatCompletionRequest;
  try {
    chat = validateChatRequest(chatBody);
  } catch (err) {
    throw inResponsesTerms(err);
  }
  const format = isRecord(body.text) && isRecord(body.text.format)
    ? body.text.format
    : { type: "text" };
  return {
    chat,
    stream,
    echo: {
      instructions: typeof body.instructions === "string" ? body.instructions : null,
      max_output_tokens: typeof body.max_output_tokens === "number" ? body.max_output_tokens : null,
      temperature: typeof body.temperature === "number" ? body.temperature : 1,
      top_p: typeof body.top_p === "number" ? body.top_p : 1,
      tools: Array.isArray(body.tools) ? body.tools : [],
      tool_choice: body.tool_choice ?? "auto",
      parallel_tool_calls: body.parallel_tool_calls !== false,
      text: { format },
      metadata: isRecord(body.metadata) ? body.metadata : {},
      user: typeof body.user === "string" ? body.user : null,
    },
  };
}

/** One output item of a Response. */
export type ResponseOutputItem = Record<string, unknown> & { type: string; id: string };

/** Usage in the Responses API's terms. */
export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** A new output item id: `prefix` and 24 hex digits. */
export function itemId(prefix: string): string {
  return `${prefix}_${crypto.randomUUID().replaceAll("-", "").slice(0, 24)}`;
}

/** A chat completion's usage as a Response's. */
export function responseUsage(usage: unknown): ResponseUsage {
  const u = isRecord(usage) ? usage : {};
  const num = (v: unknown) => typeof v === "number" ? v : 0;
  const details = isRecord(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const input = num(u.prompt_tokens);
  const output = num(u.completion_tokens);
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: num(details.cached_tokens) },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}

/** A message output item holding `text`. */
export function messageItem(id: string, text: string, status: string): ResponseOutputItem {
  return {
    type: "message",
    id,
    status,
    role: "assistant",
    content: status === "in_progress" ? [] : [outputTextPart(text)],
  };
}

/** An output_text content part. */
export function outputTextPart(text: string): Record<string, unknown> {
  return { type: "output_text", text, annotations: [], logprobs: [] };
}

/** A function_call output item. */
export function functionCallItem(
  id: string,
  call: { id: string; name: string; arguments: string },
  status: string,
): ResponseOutputItem {
  return {
    type: "function_call",
    id,
    call_id: call.id,
    name: call.name,
    arguments: call.arguments,
    status,
  };
}

/** A reasoning output item holding `text`. */
export function reasoningItem(id: string, text: string): ResponseOutputItem {
  return { type: "reasoning", id, summary: [], content: [{ type: "reasoning_text", text }] };
}

/** What every Response object of one request shares. */
export interface ResponseBase {
  id: string;
  created_at: number;
  model: string;
  echo: ResponseEcho;
}

/**
 * A Response object.
 *
 * @param base id, creation time, model, echoed request fields
 * @param status "in_progress", "completed", "incomplete" or "failed"
 * @param output the output items
 * @param extra usage, incomplete_details or error
 */
export function responseObject(
  base: ResponseBase,
  status: string,
  output: ResponseOutputItem[],
  extra: { usage?: ResponseUsage; incomplete?: string; error?: { code: string; message: string } } =
    {},
): Record<string, unknown> {
  return {
    id: base.id,
    object: "response",
    created_at: base.created_at,
    status,
    error: extra.error ?? null,
    incomplete_details: extra.incomplete === undefined ? null : { reason: extra.incomplete },
    ...base.echo,
    model: base.model,
    output,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    truncation: "disabled",
    usage: extra.usage ?? null,
  };
}

/**
 * A (non-streamed) chat completion as a Response object: reasoning, then the message, then the
 * function calls; "incomplete" (`max_output_tokens`) when the answer ran out of tokens.
 *
 * @param completion the chat completion object
 * @param base id, creation time, model, echoed request fields
 * @returns the Response object
 */
export function chatToResponse(
  completion: unknown,
  base: ResponseBase,
): Record<string, unknown> {
  const c = isRecord(completion) ? completion : {};
  const choice = Array.isArray(c.choices) && isRecord(c.choices[0]) ? c.choices[0] : {};
  const message = isRecord(choice.message) ? choice.message : {};
  const output: ResponseOutputItem[] = [];
  if (typeof message.reasoning_content === "string" && message.reasoning_content !== "") {
    output.push(reasoningItem(itemId("rs"), message.reasoning_content));
  }
  if (typeof message.content === "string" && message.content !== "") {
    output.push(messageItem(itemId("msg"), message.content, "completed"));
  }
  for (const call of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
    const fn = isRecord(call) && isRecord(call.function) ? call.function : {};
    output.push(functionCallItem(itemId("fc"), {
      id: isRecord(call) && typeof call.id === "string" ? call.id : itemId("call"),
      name: typeof fn.name === "string" ? fn.name : "",
      arguments: typeof fn.arguments === "string" ? fn.arguments : "",
    }, "completed"));
  }
  const length = choice.finish_reason === "length";
  return responseObject(base, length ? "incomplete" : "completed", output, {
    usage: responseUsage(c.usage),
    ...(length ? { incomplete: "max_output_tokens" } : {}),
  });
}

/**
 * A chat request's error with its parameter named as the Responses API names it; other
 * errors as they are.
 *
 * @param err what serving the chat request threw
 * @returns the error to throw
 */
export function inResponsesTerms(err: unknown): unknown {
  if (!(err instanceof RequestError)) return err;
  return new RequestError(err.status, err.message, {
    type: err.type,
    code: err.code,
    param: responsesParam(err.param),
    cause: err,
  });
}
