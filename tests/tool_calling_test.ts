// Tool calling and reasoning end to end with the official `openai` client: a frontend with
// the hermes and qwen3 parsers over a worker whose engine writes what Qwen3 writes (a think
// block, then a <tool_call>, or after the tool's answer a final reply), streamed and not.

import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  builtinTestModel,
  type Context,
  createFrontend,
  DistributedRuntime,
  type LLMEngineOutput,
  ModelInput,
  ModelManager,
  ModelType,
  type PreprocessedRequest,
  registerLlm,
} from "../mod.ts";
import { parseHttpFlags } from "../cli/frontend.ts";
import { UsageError } from "../cli/_common.ts";
import { qwen3Tokenizer } from "./_helpers/qwen3.ts";

const MODEL = "qwen3-tools";
const CALL_TEXT = "<think>\nThe user wants the weather in Paris: call get_weather.\n</think>\n\n" +
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const FINAL_TEXT = "<think>\nThe tool said sunny, 21C.\n</think>\n\nIt is sunny in Paris, 21C.";
const PLAIN_TEXT = "Hello! How can I help?";

/** What the scripted model answers: a call when tools are offered, a reply to a tool result. */
function script(prompt: string): string {
  const lastTurn = prompt.slice(prompt.lastIndexOf("<|im_start|>user"));
  if (lastTurn.includes("<tool_response>")) return FINAL_TEXT;
  if (prompt.includes("<tools>")) return CALL_TEXT;
  // Thinking switched off: the template wrote an empty think block; no think tags follow.
  return PLAIN_TEXT;
}

/** A worker engine that writes `script(prompt)` one token at a time. */
async function* scriptedEngine(
  req: PreprocessedRequest,
  _ctx: Context,
): AsyncGenerator<LLMEngineOutput> {
  const tok = qwen3Tokenizer();
  const ids = tok.encode(script(tok.decode(req.token_ids, { skipSpecialTokens: false })), {
    addSpecialTokens: false,
  });
  for (let i = 0; i < ids.length; i++) {
    yield i === ids.length - 1
      ? { token_ids: [ids[i]!], finish_reason: "stop" }
      : { token_ids: [ids[i]!] };
  }
}

const weatherTool: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

/**
 * A frontend on a free port over one scripted worker; `parsers` go to createFrontend,
 * `cardParsers` to registerLlm (the card's runtime_config).
 */
async function withFrontend(
  parsers: { toolCallParser?: string; reasoningParser?: string },
  body: (client: OpenAI) => Promise<void>,
  cardParsers: { toolCallParser?: string; reasoningParser?: string } = {},
): Promise<void> {
  const runtime = await DistributedRuntime.connect();
  const endpoint = runtime.namespace("tools").component("backend").endpoint("generate");
  const serving = endpoint.serveEndpoint(scriptedEngine);
  serving.catch(() => {});
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    await builtinTestModel(),
    { modelName: MODEL, contextLength: 4096, ...cardParsers },
  );
  const models = new ModelManager(runtime);
  await models.start();
  const app = createFrontend({ models, ...parsers });
  const listening = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve({
    port: 0,
    hostname: "127.0.0.1",
    onListen: (addr) => listening.resolve(addr as Deno.NetAddr),
  }, app.fetch);
  try {
    const { port } = await listening.promise;
    const client = new OpenAI({
      baseURL: `http://127.0.0.1:${port}/v1`,
      apiKey: "unused",
      maxRetries: 0,
    });
    const deadline = Date.now() + 5000;
    while (!models.list().some((m) => m.name === MODEL)) {
      if (Date.now() > deadline) throw new Error(`model ${MODEL} was not listed within 5 s`);
      await new Promise((r) => setTimeout(r, 10));
    }
    await body(client);
  } finally {
    await server.shutdown();
    await models.close();
    await runtime.shutdown();
  }
}

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;
const QUESTION: Message[] = [{ role: "user", content: "What is the weather in Paris?" }];

/** The conversation after the call: the assistant's call and the tool's answer appended. */
function withToolResult(call: { id: string; name: string; arguments: string }): Message[] {
  return [
    ...QUESTION,
    {
      role: "assistant",
      content: null,
      tool_calls: [{
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: call.arguments },
      }],
    },
    { role: "tool", tool_call_id: call.id, content: '{"sky": "sunny", "celsius": 21}' },
  ];
}

/** A streamed answer folded the way a client folds it. */
async function fold(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>) {
  let content = "";
  let reasoning = "";
  let finish: string | null = null;
  const calls: { id: string; name: string; arguments: string }[] = [];
  const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      const delta = c.delta as typeof c.delta & { reasoning_content?: string };
      content += delta.content ?? "";
      reasoning += delta.reasoning_content ?? "";
      for (const t of delta.tool_calls ?? []) {
        deltas.push(t);
        const call = calls[t.index] ??= { id: "", name: "", arguments: "" };
        call.id ||= t.id ?? "";
        call.name ||= t.function?.name ?? "";
        call.arguments += t.function?.arguments ?? "";
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, reasoning, finish, calls, deltas };
}

Deno.test("a tool-call round trip through the frontend with the openai client, not streamed", async () => {
  await withFrontend({ toolCallParser: "hermes", reasoningParser: "qwen3" }, async (client) => {
    const first = await client.chat.completions.create({
      model: MODEL,
      messages: QUESTION,
      tools: [weatherTool],
    });
    const choice = first.choices[0]!;
    assert.equal(choice.finish_reason, "tool_calls");
    const message = choice.message as typeof choice.message & { reasoning_content?: string };
    assert.equal(message.content, null);
    assert.equal(
      message.reasoning_content,
      "\nThe user wants the weather in Paris: call get_weather.\n",
    );
    assert.equal(message.tool_calls?.length, 1);
    const call = message.tool_calls![0]!;
    assert.equal(call.type, "function");
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    assert.ok(call.type === "function");
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });

    const second = await client.chat.completions.create({
      model: MODEL,
      messages: withToolResult({ id: call.id, ...call.function }),
      tools: [weatherTool],
    });
    const answer = second.choices[0]!;
    assert.equal(answer.finish_reason, "stop");
    assert.equal(answer.message.content, "It is sunny in Paris, 21C.");
    assert.equal(answer.message.tool_calls, undefined);
    assert.equal(
      (answer.message as { reasoning_content?: string }).reasoning_content,
      "\nThe tool said sunny, 21C.\n",
    );
  });
});

Deno.test("a tool-call round trip through the frontend with the openai client, streamed", async () => {
  await withFrontend({ toolCallParser: "hermes", reasoningParser: "qwen3" }, async (client) => {
    const first = await fold(
      await client.chat.completions.create({
        model: MODEL,
        messages: QUESTION,
        tools: [weatherTool],
        stream: true,
      }),
    );
    assert.equal(first.finish, "tool_calls");
    assert.equal(first.content, "");
    assert.equal(first.reasoning, "\nThe user wants the weather in Paris: call get_weather.\n");
    assert.equal(first.calls.length, 1);
    const call = first.calls[0]!;
    assert.equal(call.name, "get_weather");
    assert.deepEqual(JSON.parse(call.arguments), { city: "Paris" });
    // As OpenAI streams a call: id, type and name first, the arguments after.
    assert.equal(first.deltas[0]!.id, call.id);
    assert.equal(first.deltas[0]!.type, "function");
    assert.equal(first.deltas[0]!.function?.name, "get_weather");
    assert.equal(first.deltas[1]!.id, undefined);
    assert.equal(first.deltas[1]!.function?.arguments, call.arguments);

    const second = await fold(
      await client.chat.completions.create({
        model: MODEL,
        messages: withToolResult(call),
        tools: [weatherTool],
        stream: true,
      }),
    );
    assert.equal(second.finish, "stop");
    assert.equal(second.content, "It is sunny in Paris, 21C.");
    assert.equal(second.reasoning, "\nThe tool said sunny, 21C.\n");
    assert.deepEqual(second.calls, []);
  });
});

Deno.test("the template's thinking switch decides where the answer starts (deepseek_r1)", async () => {
  await withFrontend({ reasoningParser: "deepseek_r1" }, async (client) => {
    // deepseek_r1 starts inside the reasoning (its template writes <think>) ...
    const thinking = await client.chat.completions.create({ model: MODEL, messages: QUESTION });
    const m1 = thinking.choices[0]!.message as { content: string; reasoning_content?: unknown };
    assert.equal(m1.reasoning_content, PLAIN_TEXT);
    assert.equal(m1.content, "");
    // ... unless thinking is switched off: Qwen3's template then renders an empty think block.
    const params = {
      model: MODEL,
      messages: QUESTION,
      chat_template_kwargs: { enable_thinking: false },
    };
    const r = await client.chat.completions.create(params);
    const message = r.choices[0]!.message as { content: string; reasoning_content?: unknown };
    assert.equal(message.content, PLAIN_TEXT);
    assert.equal(message.reasoning_content, null);
    const streamed = await fold(await client.chat.completions.create({ ...params, stream: true }));
    assert.equal(streamed.content, PLAIN_TEXT);
    assert.equal(streamed.reasoning, "");
  });
});

Deno.test("tool_choice: required and a named function are served; without a parser, tools are a 400", async () => {
  await withFrontend({ toolCallParser: "hermes" }, async (client) => {
    const toolChoices: OpenAI.Chat.Completions.ChatCompletionToolChoiceOption[] = [
      "required",
      { type: "function", function: { name: "get_weather" } },
    ];
    for (const toolChoice of toolChoices) {
      const r: OpenAI.Chat.Completions.ChatCompletion = await client.chat.completions.create({
        model: MODEL,
        messages: QUESTION,
        tools: [weatherTool],
        tool_choice: toolChoice,
      });
      assert.equal(r.choices[0]!.finish_reason, "tool_calls");
      // No reasoning parser: the think block stays in the content, no reasoning_content.
      assert.ok(!("reasoning_content" in r.choices[0]!.message));
    }
    // tool_choice none: tools are not rendered, nothing is parsed.
    const none = await client.chat.completions.create({
      model: MODEL,
      messages: QUESTION,
      tools: [weatherTool],
      tool_choice: "none",
    });
    assert.equal(none.choices[0]!.message.content, PLAIN_TEXT);
  });
  await withFrontend({}, async (client) => {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages: QUESTION, tools: [weatherTool] }),
      (err: unknown) => {
        assert.ok(err instanceof OpenAI.BadRequestError);
        assert.match(err.message, /no tool-call parser is configured/);
        return true;
      },
    );
    // Without parsers a chat answer is unchanged.
    const plain = await client.chat.completions.create({ model: MODEL, messages: QUESTION });
    assert.equal(plain.choices[0]!.message.content, PLAIN_TEXT);
    assert.ok(!("reasoning_content" in plain.choices[0]!.message));
  });
});

Deno.test("parsers named on the card (registerLlm) serve tools without frontend flags", async () => {
  await withFrontend({}, async (client) => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: QUESTION,
      tools: [weatherTool],
    });
    const message = r.choices[0]!.message as {
      reasoning_content?: unknown;
      tool_calls?: unknown[];
    };
    assert.equal(r.choices[0]!.finish_reason, "tool_calls");
    assert.equal(message.tool_calls?.length, 1);
    assert.equal(
      message.reasoning_content,
      "\nThe user wants the weather in Paris: call get_weather.\n",
    );
  }, { toolCallParser: "hermes", reasoningParser: "qwen3" });
});

Deno.test("--dyn-tool-call-parser and --dyn-reasoning-parser take the registered names only", () => {
  const flags = parseHttpFlags(
    "frontend",
    { "dyn-tool-call-parser": "hermes", "dyn-reasoning-parser": "deepseek_r1" },
    { host: "0.0.0.0" },
    () => undefined,
  );
  assert.equal(flags.toolCallParser, "hermes");
  assert.equal(flags.reasoningParser, "deepseek_r1");
  assert.throws(
    () =>
      parseHttpFlags("run", { "dyn-tool-call-parser": "hermes2" }, { host: "x" }, () => undefined),
    (err: unknown) =>
      err instanceof UsageError && /--dyn-tool-call-parser must be one of hermes/.test(err.message),
  );
});
