import assert from "node:assert/strict";
import { choiceRequest, Preprocessor } from "./preprocessor.ts";
import { RequestError } from "../openai/errors.ts";
import { validateChatRequest, validateCompletionRequest } from "../openai/validate.ts";
import { type ModelDeploymentCard, ModelInput, ModelType } from "../protocols.ts";
import { qwen3ChatTemplate, qwen3Tokenizer } from "../../tests/_helpers/qwen3.ts";

function qwenCard(over: Partial<ModelDeploymentCard> = {}): ModelDeploymentCard {
  return {
    display_name: "Qwen/Qwen3-0.6B",
    source_path: "/models/qwen3",
    model_type: ModelType.Chat | ModelType.Completions,
    model_input: ModelInput.Tokens,
    context_length: 64,
    kv_cache_block_size: 16,
    migration_limit: 0,
    files: {},
    chat_template: qwen3ChatTemplate(),
    eos_token_ids: [151645, 151643],
    eos_token: "<|im_end|>",
    mdcsum: "c0ffee",
    ...over,
  };
}

function preprocessor(over: Partial<ModelDeploymentCard> = {}, renderTools = false): Preprocessor {
  return new Preprocessor({ card: qwenCard(over), tokenizer: qwen3Tokenizer(), renderTools });
}

const chat = (extra: Record<string, unknown> = {}) =>
  validateChatRequest({
    model: "whatever-the-client-said",
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }],
    ...extra,
  });
const completion = (extra: Record<string, unknown> = {}) =>
  validateCompletionRequest({ model: "m", prompt: "Once upon a time", ...extra });

function rejects(fn: () => unknown, param: string, message: string, code?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof RequestError, `expected RequestError, got ${err}`);
    assert.equal(err.status, 400);
    assert.equal(err.param, param);
    assert.ok(err.message.includes(message), err.message);
    if (code !== undefined) assert.equal(err.code, code);
    return true;
  });
}

Deno.test("Preprocessor.chat renders the template, tokenizes it and fills the request", () => {
  const { request, promptTokens, n, promptText } = preprocessor().chat(chat());
  const expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" +
    "<|im_start|>assistant\n";
  assert.equal(promptText, expected);
  assert.deepEqual(request.token_ids, qwen3Tokenizer().encode(expected));
  assert.equal(request.token_ids[0], 151644, "starts with <|im_start|>");
  assert.equal(promptTokens, request.token_ids.length);
  assert.equal(request.model, "Qwen/Qwen3-0.6B");
  assert.equal(request.mdc_sum, "c0ffee");
  assert.deepEqual(request.eos_token_ids, [151645, 151643]);
  assert.deepEqual(request.stop_conditions, { max_tokens: 64 - promptTokens });
  assert.deepEqual(request.sampling_options, {});
  assert.equal(n, 1);
});

Deno.test("Preprocessor maps OpenAI fields into stop conditions and sampling options", () => {
  const { request, n } = preprocessor().chat(chat({
    max_tokens: 5,
    max_completion_tokens: 7,
    stop: "\n\n",
    ignore_eos: true,
    min_tokens: 2,
    stop_token_ids: [42],
    temperature: 0.7,
    top_p: 0.9,
    top_k: 20,
    min_p: 0.05,
    presence_penalty: 0.5,
    frequency_penalty: -0.5,
    repetition_penalty: 1.1,
    seed: 1234,
    n: 3,
    user: "u1",
  }));
  assert.deepEqual(request.stop_conditions, {
    max_tokens: 7,
    stop: ["\n\n"],
    stop_token_ids_hidden: [42],
    min_tokens: 2,
    ignore_eos: true,
  });
  assert.deepEqual(request.sampling_options, {
    temperature: 0.7,
    top_p: 0.9,
    top_k: 20,
    min_p: 0.05,
    presence_penalty: 0.5,
    frequency_penalty: -0.5,
    repetition_penalty: 1.1,
    seed: 1234,
  });
  assert.equal(n, 3, "n is the caller's to fan out, not the engine's");
  const list = preprocessor().chat(chat({ stop: ["a", "b"], max_tokens: 3 })).request;
  assert.deepEqual(list.stop_conditions, { max_tokens: 3, stop: ["a", "b"] });
});

Deno.test("Preprocessor passes chat_template_kwargs to the template", () => {
  const prompt = preprocessor().chat(chat({
    chat_template_kwargs: { enable_thinking: false },
  })).promptText ?? "";
  assert.ok(prompt.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), prompt);
});

Deno.test("Preprocessor refuses a prompt longer than the context with the OpenAI message", () => {
  const long = "word ".repeat(100);
  const prompt = qwen3Tokenizer().encode(long).length;
  rejects(
    () => preprocessor().completion(completion({ prompt: long })),
    "prompt",
    `This model's maximum context length is 64 tokens. However, your prompt resulted in ${prompt} tokens.`,
    "context_length_exceeded",
  );
  assert.throws(
    () => preprocessor().chat(chat({ messages: [{ role: "user", content: long }] })),
    (err: unknown) =>
      err instanceof RequestError && err.param === "messages" &&
      err.code === "context_length_exceeded" &&
      err.message.startsWith(
        "This model's maximum context length is 64 tokens. However, your messages resulted in ",
      ),
  );
});

Deno.test("Preprocessor refuses a prompt plus max_tokens over the context", () => {
  const { promptTokens } = preprocessor().chat(chat());
  const room = 64 - promptTokens;
  assert.equal(
    preprocessor().chat(chat({ max_tokens: room })).request.stop_conditions.max_tokens,
    room,
  );
  rejects(
    () => preprocessor().chat(chat({ max_tokens: room + 1 })),
    "max_tokens",
    `you requested 65 tokens (${promptTokens} in the messages, ${room + 1} in the completion)`,
    "context_length_exceeded",
  );
  rejects(
    () => preprocessor().chat(chat({ max_completion_tokens: room + 1 })),
    "max_completion_tokens",
    "you requested 65 tokens",
  );
});

Deno.test("Preprocessor refuses a prompt that fills the context when no max_tokens is given", () => {
  const ids = Array.from({ length: 64 }, (_, i) => i + 100);
  rejects(
    () => preprocessor().completion(completion({ prompt: ids })),
    "prompt",
    "leaves no room for the completion",
  );
});

Deno.test("Preprocessor.completion tokenizes text and passes token ids through untouched", () => {
  const pre = preprocessor();
  const text = pre.completion(completion());
  assert.deepEqual(text.request.token_ids, qwen3Tokenizer().encode("Once upon a time"));
  assert.equal(text.promptText, "Once upon a time");
  const ids = [5, 999_999, 7];
  const passed = pre.completion(completion({ prompt: ids }));
  assert.deepEqual(passed.request.token_ids, ids);
  assert.equal(passed.promptTokens, 3);
  assert.equal(passed.promptText, undefined);
  assert.deepEqual(
    pre.completion(completion({ prompt: [[1, 2]] })).request.token_ids,
    [1, 2],
  );
  assert.deepEqual(
    pre.completion(completion({ prompt: ["Once upon a time"] })).request.token_ids,
    text.request.token_ids,
  );
});

Deno.test("Preprocessor.completion refuses batched prompts", () => {
  rejects(
    () => preprocessor().completion(completion({ prompt: ["a", "b"] })),
    "prompt",
    "batched prompts are not supported",
  );
  rejects(
    () => preprocessor().completion(completion({ prompt: [[1], [2]] })),
    "prompt",
    "batched prompts are not supported",
  );
});

Deno.test("Preprocessor refuses what the token path cannot honour", () => {
  const pre = preprocessor();
  rejects(
    () => pre.chat(chat({ response_format: { type: "json_object" } })),
    "response_format",
    "no guided decoding",
  );
  rejects(() => pre.chat(chat({ logit_bias: { "5": 1 } })), "logit_bias", "not supported");
  rejects(() => pre.completion(completion({ echo: true })), "echo", "not supported");
  rejects(() => pre.completion(completion({ suffix: "end" })), "suffix", "not supported");
  rejects(() => pre.completion(completion({ best_of: 2 })), "best_of", "not supported");
  rejects(
    () =>
      pre.chat(chat({
        messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }],
      })),
    "messages[0].content[0]",
    "text only",
  );
  // Accepted: text response format, chat logprobs false.
  pre.chat(chat({ response_format: { type: "text" }, logprobs: false }));
});

Deno.test("Preprocessor asks the engine for log probabilities in output_options", () => {
  const pre = preprocessor();
  assert.deepEqual(pre.chat(chat({ logprobs: true })).request.output_options, { logprobs: 0 });
  assert.deepEqual(
    pre.chat(chat({ logprobs: true, top_logprobs: 3 })).request.output_options,
    { logprobs: 3 },
  );
  assert.equal(pre.chat(chat({ logprobs: false })).request.output_options, undefined);
  assert.deepEqual(pre.completion(completion({ logprobs: 2 })).request.output_options, {
    logprobs: 2,
  });
  assert.equal(pre.completion(completion({})).request.output_options, undefined);
});

const weatherTool = { type: "function", function: { name: "get_weather", parameters: {} } };

Deno.test("Preprocessor refuses tools unless told to render them", () => {
  rejects(
    () => preprocessor().chat(chat({ tools: [weatherTool] })),
    "tools",
    "Tool calling is not supported",
  );
  const none = preprocessor().chat(chat({ tools: [weatherTool], tool_choice: "none" }));
  assert.ok(!none.promptText!.includes("get_weather"), "tool_choice none renders no tools");

  const rendered = preprocessor({ context_length: 4096 }, true)
    .chat(chat({ tools: [weatherTool] })).promptText ?? "";
  assert.ok(rendered.includes("# Tools"), rendered);
  assert.ok(rendered.includes('"name": "get_weather"'), rendered);
});

const timeTool = { type: "function", function: { name: "get_time", parameters: {} } };

Deno.test("Preprocessor renders every tool for required and only the named one for a named choice", () => {
  const pre = preprocessor({ context_length: 4096 });
  const tools = [weatherTool, timeTool];
  const required = pre.chat(chat({ tools, tool_choice: "required" }), { renderTools: true })
    .promptText!;
  assert.ok(required.includes('"name": "get_weather"') && required.includes('"name": "get_time"'));
  const named = pre.chat(
    chat({ tools, tool_choice: { type: "function", function: { name: "get_time" } } }),
    { renderTools: true },
  ).promptText!;
  assert.ok(named.includes('"name": "get_time"'), named);
  assert.ok(!named.includes("get_weather"), "the other tools are not offered");
  rejects(() => pre.chat(chat({ tools })), "tools", "no tool-call parser is configured");
});

Deno.test("Preprocessor renders tool calls and tool results of the history through the template", () => {
  const pre = preprocessor({ context_length: 4096 });
  const { promptText } = pre.chat(
    validateChatRequest({
      model: "m",
      tools: [weatherTool],
      messages: [
        { role: "user", content: "Weather in Paris?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_1",
            type: "function",
            function: { name: "get_weather", arguments: '{"city": "Paris"}' },
          }],
        },
        { role: "tool", tool_call_id: "call_1", content: "sunny, 21C" },
      ],
    }),
    { renderTools: true },
  );
  assert.ok(
    promptText!.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'),
    promptText ?? "",
  );
  assert.ok(
    promptText!.includes("<tool_response>\nsunny, 21C\n</tool_response>"),
    promptText ?? "",
  );
});

Deno.test("Preprocessor refuses chat for a model without a chat template", () => {
  rejects(
    () => preprocessor({ chat_template: undefined }).chat(chat()),
    "messages",
    "has no chat template",
  );
  // Completions still work.
  preprocessor({ chat_template: undefined }).completion(completion());
});

Deno.test("Preprocessor refuses min_tokens beyond the tokens left in the context", () => {
  rejects(
    () => preprocessor().completion(completion({ min_tokens: 1000 })),
    "min_tokens",
    "more than the",
  );
});

Deno.test("choiceRequest gives each choice its own seed only when one was set", () => {
  const seeded = preprocessor().chat(chat({ seed: 10, n: 3 })).request;
  assert.equal(choiceRequest(seeded, 0), seeded);
  assert.equal(choiceRequest(seeded, 2).sampling_options.seed, 12);
  assert.equal(seeded.sampling_options.seed, 10, "the original is not changed");
  const unseeded = preprocessor().chat(chat({ n: 2 })).request;
  assert.equal(choiceRequest(unseeded, 1), unseeded);
});

Deno.test("a required or named tool choice is forced by the engine's grammar when it can enforce one", () => {
  const tool = (name: string, parameters: Record<string, unknown>) => ({
    type: "function",
    function: { name, parameters },
  });
  const city = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
  const guided = { runtime_config: { runtime_data: { guided_decoding: ["json_schema"] } } };
  const big = { context_length: 4096 };
  const forced = preprocessor({ ...big, ...guided }, true).chat(
    chat({ tools: [tool("a", city), tool("b", city)], tool_choice: "required", max_tokens: 8 }),
  );
  assert.equal(forced.forcedToolCall, true);
  const schema = forced.request.sampling_options.guided_decoding?.json as {
    anyOf: { properties: { name: { const: string } } }[];
  };
  assert.deepEqual(schema.anyOf.map((s) => s.properties.name.const), ["a", "b"]);
  // A named choice: that tool only.
  const named = preprocessor({ ...big, ...guided }, true).chat(
    chat({
      tools: [tool("a", city), tool("b", city)],
      tool_choice: { type: "function", function: { name: "b" } },
      max_tokens: 8,
    }),
  );
  const one = named.request.sampling_options.guided_decoding?.json as {
    properties: { name: { const: string }; parameters: unknown };
  };
  assert.equal(one.properties.name.const, "b");
  assert.deepEqual(one.properties.parameters, city);
  // "auto", an engine without guided decoding, or parameters the grammar cannot enforce: asked
  // through the template only.
  for (
    const [over, extra] of [
      [guided, { tools: [tool("a", city)], tool_choice: "auto" }],
      [{}, { tools: [tool("a", city)], tool_choice: "required" }],
      [guided, {
        tools: [
          tool("a", { type: "object", properties: { x: { type: "string", pattern: "^a" } } }),
        ],
        tool_choice: "required",
      }],
    ] as const
  ) {
    const r = preprocessor({ ...big, ...over }, true).chat(chat({ ...extra, max_tokens: 8 }));
    assert.equal(r.forcedToolCall, undefined);
    assert.equal(r.request.sampling_options.guided_decoding, undefined);
  }
});
