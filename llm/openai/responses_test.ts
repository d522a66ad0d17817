import assert from "node:assert/strict";
import { chatToResponse, responsesParam, responsesRequest } from "./responses.ts";

Deno.test("responsesRequest turns instructions, input items and tools into a chat request", () => {
  const { chat, echo, stream } = responsesRequest({
    model: "m",
    instructions: "Be brief.",
    input: [
      {
        role: "user",
        content: [{ type: "input_text", text: "Weather " }, {
          type: "input_text",
          text: "in Paris?",
        }],
      },
      {
        type: "function_call",
        call_id: "call_1",
        name: "get_weather",
        arguments: '{"city":"Paris"}',
      },
      {
        type: "function_call",
        call_id: "call_2",
        name: "get_weather",
        arguments: '{"city":"Rome"}',
      },
      { type: "function_call_output", call_id: "call_1", output: "sunny" },
      { type: "reasoning", id: "rs_1", summary: [] },
    ],
    tools: [{ type: "function", name: "get_weather", parameters: { type: "object" } }],
    tool_choice: { type: "function", name: "get_weather" },
    max_output_tokens: 50,
    text: { format: { type: "json_schema", name: "w", schema: { type: "object" }, strict: true } },
    stream: true,
  });
  assert.equal(stream, true);
  assert.deepEqual(chat.messages, [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Weather in Paris?" },
    {
      // (validation drops the null content)
      role: "assistant",
      tool_calls: [
        {
          id: "call_1",
          type: "function",
          function: { name: "get_weather", arguments: '{"city":"Paris"}' },
        },
        {
          id: "call_2",
          type: "function",
          function: { name: "get_weather", arguments: '{"city":"Rome"}' },
        },
      ],
    },
    { role: "tool", tool_call_id: "call_1", content: "sunny" },
  ]);
  assert.equal(chat.max_tokens, 50);
  assert.deepEqual(chat.stream_options, { include_usage: true });
  assert.deepEqual(chat.tools, [
    { type: "function", function: { name: "get_weather", parameters: { type: "object" } } },
  ]);
  assert.deepEqual(chat.tool_choice, { type: "function", function: { name: "get_weather" } });
  assert.deepEqual(chat.response_format, {
    type: "json_schema",
    json_schema: { name: "w", schema: { type: "object" }, strict: true },
  });
  assert.equal(echo.instructions, "Be brief.");
  assert.equal(echo.max_output_tokens, 50);
  assert.equal(echo.text.format.type, "json_schema");
});

Deno.test("responsesParam names chat parameters as the Responses API does", () => {
  assert.equal(responsesParam("max_tokens"), "max_output_tokens");
  assert.equal(responsesParam("messages[1].content"), "input");
  assert.equal(responsesParam("response_format.json_schema.schema"), "text.format.schema");
  assert.equal(responsesParam("tools[0].function.name"), "tools[0].name");
  assert.equal(responsesParam("temperature"), "temperature");
  assert.equal(responsesParam(null), null);
});

Deno.test("chatToResponse: reasoning, message and calls become output items; length is incomplete", () => {
  const base = {
    id: "resp_1",
    created_at: 1,
    model: "m",
    echo: responsesRequest({ model: "m", input: "hi" }).echo,
  };
  const r = chatToResponse({
    choices: [{
      message: {
        content: "Hi",
        reasoning_content: "think",
        tool_calls: [{ id: "call_9", function: { name: "f", arguments: "{}" } }],
      },
      finish_reason: "length",
    }],
    usage: { prompt_tokens: 3, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 2 } },
  }, base);
  const output = r.output as Record<string, unknown>[];
  assert.deepEqual(output.map((o) => o.type), ["reasoning", "message", "function_call"]);
  assert.equal(output[2]!.call_id, "call_9");
  assert.equal(r.status, "incomplete");
  assert.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
  assert.deepEqual(r.usage, {
    input_tokens: 3,
    input_tokens_details: { cached_tokens: 2 },
    output_tokens: 4,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 7,
  });
});
