// deno-lint-ignore-file no-console -- a program that prints its results
// OpenAI API conformance with the official `openai` npm client: drives a running server
// (`dynamo run ...`) through the named cases and prints one line per case, `ok CASE: detail` or
// `FAIL CASE: why`, then `N passed, N failed`. Exit 0 only when every case passed.
//
//   deno run -A scripts/conformance/openai_npm.ts --base-url http://127.0.0.1:8000 \
//     --model Qwen3-0.6B --cases chat,stream,logprobs,seed,errors
//
// A case is one function in CASES; scripts/conformance/openai_python.py holds the same cases,
// under the same names, for the Python client. Adding a case is one function in each.

import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import OpenAI from "openai";

type Chat = OpenAI.Chat.Completions.ChatCompletion;
type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** What every case gets: the client, the model name and the server's base URL. */
interface Ctx {
  client: OpenAI;
  model: string;
  baseUrl: string;
}

/** A case: resolves with a one-line detail, or throws why it failed. */
type Case = (ctx: Ctx) => Promise<string>;

const WEATHER_TOOL: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

/** The echo engine writes its prompt back: a system message holding a call makes a call. */
const SCRIPTED_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n' +
  "</tool_call>";

const CASES: Record<string, Case> = {
  /** A non-streamed chat answer has the OpenAI shape and consistent usage. */
  async chat({ client, model }) {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Say hello." }],
      max_tokens: 8,
    });
    assert.equal(r.object, "chat.completion");
    assert.match(r.id, /\S/);
    assert.equal(r.model, model);
    const choice = only(r.choices);
    assert.equal(choice.message.role, "assistant");
    assert.equal(typeof choice.message.content, "string");
    assert.ok(["stop", "length"].includes(choice.finish_reason), choice.finish_reason);
    usageAddsUp(r.usage);
    return `${r.usage!.completion_tokens} tokens, finish ${choice.finish_reason}`;
  },

  /** A streamed chat answer: deltas, one finish reason, and a last usage-only chunk. */
  async stream({ client, model }) {
    const stream = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Count to five." }],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, "chat.completion.chunk");
      if (chunk.usage) {
        assert.equal(chunk.choices.length, 0, "the usage chunk has no choices");
        usage = chunk.usage;
        continue;
      }
      const choice = only(chunk.choices);
      text += choice.delta.content ?? "";
      if (choice.finish_reason) {
        assert.equal(finish, null, "one finish_reason");
        finish = choice.finish_reason;
      }
    }
    assert.ok(finish === "stop" || finish === "length", `finish_reason ${finish}`);
    usageAddsUp(usage);
    assert.ok(text.length > 0 || usage!.completion_tokens === 0, "text streamed");
    return `${chunks} chunks, ${usage!.completion_tokens} tokens`;
  },

  /** A legacy completion (`/v1/completions`), not streamed. */
  async completions({ client, model }) {
    const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 6 });
    assert.equal(r.object, "text_completion");
    const choice = only(r.choices);
    assert.equal(typeof choice.text, "string");
    usageAddsUp(r.usage);
    return `${r.usage!.completion_tokens} tokens`;
  },

  /** A streamed legacy completion: text deltas, a finish reason, the usage chunk. */
  async completions_stream({ client, model }) {
    const stream = await client.completions.create({
      model,
      prompt: "Once upon a time",
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      assert.equal(chunk.object, "text_completion");
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) finish = c.finish_reason ?? finish;
    }
    assert.ok(finish === "stop" || finish === "length", `finish_reason ${finish}`);
    usageAddsUp(usage);
    return `finish ${finish}, ${usage!.completion_tokens} tokens`;
  },

  /** The model list names the model, and the model can be fetched by its id. */
  async models({ client, model }) {
    const ids: string[] = [];
    for await (const m of client.models.list()) {
      assert.equal(m.object, "model");
      ids.push(m.id);
    }
    assert.ok(ids.includes(model), `${model} in ${ids}`);
    const one = await client.models.retrieve(model);
    assert.equal(one.id, model);
    return `${ids.length} model(s)`;
  },

  /** `n: 2` gives two choices, indexed 0 and 1, and usage counts both. */
  async n_choices({ client, model }) {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 4,
      n: 2,
      seed: 5,
    });
    assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
    usageAddsUp(r.usage);
    return `2 choices, ${r.usage!.completion_tokens} tokens`;
  },

  /** A stop string ends the answer before it, with finish_reason "stop" (echo engine). */
  async stop({ client, model }) {
    const r = await client.completions.create({
      model,
      prompt: "alpha beta gamma delta",
      stop: [" gamma"],
      max_tokens: 20,
    });
    const choice = only(r.choices);
    assert.equal(choice.finish_reason, "stop");
    assert.equal(choice.text, "alpha beta");
    return `stopped at " gamma": ${JSON.stringify(choice.text)}`;
  },

  /** Logprobs: one entry per token, each <= 0, alternatives sorted, greedy picks the best. */
  async logprobs({ client, model }) {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Name a colour." }],
      max_tokens: 6,
      temperature: 0,
      logprobs: true,
      top_logprobs: 3,
    });
    const choice = only(r.choices);
    const entries = choice.logprobs?.content;
    assert.ok(Array.isArray(entries), "choices[0].logprobs.content is an array");
    assert.equal(entries.length, r.usage!.completion_tokens, "one entry per generated token");
    for (const e of entries) {
      assert.equal(typeof e.token, "string");
      assert.ok(Number.isFinite(e.logprob) && e.logprob <= 0, `logprob ${e.logprob}`);
      assert.ok(e.bytes === null || Array.isArray(e.bytes));
      assert.ok(e.top_logprobs.length >= 1 && e.top_logprobs.length <= 3, "1..3 alternatives");
      for (let i = 1; i < e.top_logprobs.length; i++) {
        assert.ok(e.top_logprobs[i - 1]!.logprob >= e.top_logprobs[i]!.logprob, "sorted");
      }
      // temperature 0 is greedy: the chosen token is the most likely one.
      assert.ok(
        e.logprob >= e.top_logprobs[0]!.logprob - 1e-4,
        `greedy token ${JSON.stringify(e.token)} (${e.logprob}) below the best alternative ` +
          `(${e.top_logprobs[0]!.logprob})`,
      );
    }
    return `${entries.length} entries, first ${entries[0]?.logprob.toFixed(3)}`;
  },

  /** The same seed at temperature 1 gives the same answer. */
  async seed({ client, model }) {
    const ask = () => sampled(client, model, 1234);
    const [a, b] = [await ask(), await ask()];
    assert.equal(b, a, "same seed, same answer");
    return `repeatable: ${JSON.stringify(a.slice(0, 30))}`;
  },

  /** Different seeds give different answers (engines whose sampling follows the seed). */
  async seed_differs({ client, model }) {
    const [a, b] = [await sampled(client, model, 1), await sampled(client, model, 2)];
    assert.notEqual(a, b, "seeds 1 and 2 gave the same answer");
    return "seeds 1 and 2 differ";
  },

  /** Fields OpenAI accepts that the server does not use are accepted. */
  async fields({ client, model }) {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 2,
      seed: 7,
      user: "conformance",
      metadata: { suite: "conformance" },
      service_tier: "auto",
      store: false,
      parallel_tool_calls: true,
      prompt_cache_key: "conformance",
      safety_identifier: "user-1",
      logit_bias: {},
      n: 1,
    });
    only(r.choices);
    return "seed, user, metadata, service_tier, store, parallel_tool_calls, ... accepted";
  },

  /** Bad requests give OpenAI's error shape and the client's matching error class. */
  async errors({ client, model, baseUrl }) {
    const bad: [string, Record<string, unknown>, number, string | null][] = [
      ["temperature", { temperature: 5 }, 400, "temperature"],
      ["metadata", { metadata: { k: 1 } }, 400, "metadata"],
      ["service_tier", { service_tier: "gold" }, 400, "service_tier"],
      ["store", { store: "yes" }, 400, "store"],
      ["seed", { seed: 1.5 }, 400, "seed"],
      ["messages", { messages: [] }, 400, "messages"],
    ];
    for (const [name, extra, status, param] of bad) {
      const body = { model, messages: [{ role: "user", content: "Hi" }], ...extra };
      const err = await client.chat.completions.create(body as never).then(
        () => assert.fail(`${name}: a bad value was accepted`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof OpenAI.BadRequestError, `${name}: BadRequestError, got ${err}`);
      assert.equal(err.status, status, name);
      assert.equal(err.type, "invalid_request_error", name);
      assert.equal(err.param, param, name);
      await rawErrorShape(baseUrl, body, status);
    }
    const missing = await client.chat.completions.create({
      model: "no-such-model",
      messages: [{ role: "user", content: "Hi" }],
    }).then(() => assert.fail("an unknown model was served"), (e: unknown) => e);
    assert.ok(missing instanceof OpenAI.NotFoundError, `NotFoundError, got ${missing}`);
    assert.equal(missing.code, "model_not_found");
    return `${bad.length} bad fields -> 400 invalid_request_error with param; unknown model -> 404`;
  },

  /** Tool round trip, not streamed: call, tool result, final answer (echo engine + hermes). */
  async tools({ client, model }) {
    const messages: Message[] = [
      { role: "system", content: SCRIPTED_CALL },
      { role: "user", content: "What is the weather in Paris?" },
    ];
    const first = await client.chat.completions.create({
      model,
      messages,
      tools: [WEATHER_TOOL],
      tool_choice: "required",
    });
    const choice = only(first.choices);
    assert.equal(choice.finish_reason, "tool_calls");
    const call = only(choice.message.tool_calls ?? []);
    assert.equal(call.type, "function");
    assert.match(call.id, /\S/);
    if (call.type !== "function") throw new Error("not a function call");
    assert.equal(call.function.name, "get_weather");
    assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
    return await finalAnswer(client, model, messages, choice.message, call.id);
  },

  /** Tool round trip, streamed: the call arrives as deltas, then the final answer. */
  async tools_stream({ client, model }) {
    const messages: Message[] = [
      { role: "system", content: SCRIPTED_CALL },
      { role: "user", content: "What is the weather in Paris?" },
    ];
    const stream = await client.chat.completions.create({
      model,
      messages,
      tools: [WEATHER_TOOL],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      stream: true,
    });
    let id = "";
    let name = "";
    let args = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      for (const d of choice.delta.tool_calls ?? []) {
        assert.equal(d.index, 0);
        id += d.id ?? "";
        name += d.function?.name ?? "";
        args += d.function?.arguments ?? "";
      }
      finish = choice.finish_reason ?? finish;
    }
    assert.equal(finish, "tool_calls");
    assert.equal(name, "get_weather");
    assert.deepEqual(JSON.parse(args), { city: "Paris" });
    const assistant: OpenAI.Chat.Completions.ChatCompletionAssistantMessageParam = {
      role: "assistant",
      content: null,
      tool_calls: [{ id, type: "function", function: { name, arguments: args } }],
    };
    return await finalAnswer(client, model, messages, assistant, id);
  },

  /**
   * A forced tool choice on a real model: the answer is well formed, and any call it makes
   * names an offered tool with JSON arguments (without guided decoding a small model may
   * still answer in prose: the detail says which).
   */
  async tool_shape({ client, model }) {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "What is the weather in Paris? Use the tool." }],
      tools: [WEATHER_TOOL],
      tool_choice: "required",
      max_tokens: 48,
      temperature: 0,
    });
    const choice = only(r.choices);
    const calls = choice.message.tool_calls ?? [];
    for (const call of calls) {
      if (call.type !== "function") throw new Error(`call of type ${call.type}`);
      assert.equal(call.function.name, "get_weather");
      JSON.parse(call.function.arguments);
    }
    if (calls.length > 0) assert.equal(choice.finish_reason, "tool_calls");
    return calls.length > 0
      ? `model called ${calls.map((c) => c.type === "function" ? c.function.name : "?")}`
      : `model answered in prose (no constrained decoding): ${
        JSON.stringify((choice.message.content ?? "").slice(0, 40))
      }`;
  },

  /**
   * A tool round trip on an engine whose grammar forces the call (`tool_choice: "required"`):
   * a call that parses, the tool's result sent back, a final answer.
   */
  async tools_forced({ client, model }) {
    const messages: Message[] = [{ role: "user", content: "What is the weather in Paris?" }];
    const r = await client.chat.completions.create({
      model,
      messages,
      tools: [WEATHER_TOOL],
      tool_choice: "required",
      max_tokens: 64,
      temperature: 0,
    });
    const choice = only(r.choices);
    assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice.message));
    const call = only(choice.message.tool_calls ?? []);
    if (call.type !== "function") throw new Error(`call of type ${call.type}`);
    assert.equal(call.function.name, "get_weather");
    const args = JSON.parse(call.function.arguments) as { city?: unknown };
    assert.equal(typeof args.city, "string", call.function.arguments);
    const final = await client.chat.completions.create({
      model,
      messages: [
        ...messages,
        choice.message as Message,
        { role: "tool", tool_call_id: call.id, content: "sunny, 21C" },
      ],
      tools: [WEATHER_TOOL],
      tool_choice: "none",
      max_tokens: 24,
      temperature: 0,
    });
    const answer = only(final.choices);
    assert.ok(["stop", "length"].includes(answer.finish_reason), answer.finish_reason);
    assert.ok(!answer.message.tool_calls?.length, "no call in the final answer");
    assert.equal(typeof answer.message.content, "string");
    assert.ok(final.usage!.prompt_tokens > r.usage!.prompt_tokens, "the call and result in");
    return `call get_weather(${call.function.arguments.slice(0, 30)}), result, final answer`;
  },

  /** Reasoning split (qwen3 parser): the think block goes to reasoning_content. */
  async reasoning({ client, model }) {
    const messages: Message[] = [{ role: "user", content: "<think>pondering</think>The answer" }];
    const r = await client.chat.completions.create({ model, messages });
    const msg = only(r.choices).message as { content: string | null; reasoning_content?: string };
    assert.equal(msg.reasoning_content?.trim(), "pondering");
    assert.ok(msg.content?.includes("The answer"), `content ${JSON.stringify(msg.content)}`);
    assert.ok(!msg.content?.includes("pondering") && !msg.content?.includes("<think>"));
    const stream = await client.chat.completions.create({ model, messages, stream: true });
    let reasoning = "";
    let content = "";
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as
        | { content?: string | null; reasoning_content?: string | null }
        | undefined;
      reasoning += delta?.reasoning_content ?? "";
      content += delta?.content ?? "";
    }
    assert.equal(reasoning.trim(), "pondering", "streamed reasoning");
    assert.equal(content, msg.content, "streamed content = unary content");
    return "reasoning_content split, streamed and not";
  },

  /**
   * response_format json_schema (strict): the answer parses and fits the schema. Greedy, with
   * room to finish: sampled, a small model sometimes wrote a name string past max_tokens.
   */
  async json_schema({ client, model }) {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: "user", content: "Describe a person as JSON." }],
      max_tokens: 160,
      temperature: 0,
      response_format: {
        type: "json_schema",
        json_schema: { name: "person", schema: PERSON_SCHEMA, strict: true },
      },
    });
    const value = JSON.parse(only(r.choices).message.content ?? "") as Record<string, unknown>;
    assert.ok(typeof value === "object" && value !== null && !Array.isArray(value), "an object");
    assert.deepEqual(Object.keys(value).sort(), ["age", "name"], JSON.stringify(value));
    assert.equal(typeof value.name, "string");
    assert.ok(Number.isInteger(value.age), `age ${value.age} is an integer`);
    return `valid: ${JSON.stringify(value).slice(0, 60)}`;
  },

  /** An engine without guided decoding: a 400 naming the engine, in OpenAI's shape. */
  async json_schema_refused({ client, model }) {
    try {
      await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "JSON please" }],
        response_format: { type: "json_object" },
      });
    } catch (err) {
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal(err.code, "unsupported_response_format");
      return "400 unsupported_response_format";
    }
    throw new Error("json_object accepted by an engine that cannot enforce it");
  },

  /** /v1/embeddings: one vector per input, identical inputs at cosine 1, different ones not. */
  async embeddings({ client, model }) {
    const inputs = ["the cat sat on the mat", "the cat sat on the mat", "quarterly revenue grew"];
    const r = await client.embeddings.create({ model, input: inputs });
    assert.equal(r.data.length, 3);
    assert.deepEqual(r.data.map((d) => d.index), [0, 1, 2]);
    const vecs = r.data.map((d) => d.embedding);
    assert.ok(vecs[0]!.length > 0 && vecs.every((v) => v.length === vecs[0]!.length), "one width");
    const same = cosine(vecs[0]!, vecs[1]!);
    const other = cosine(vecs[0]!, vecs[2]!);
    assert.ok(Math.abs(same - 1) < 1e-5, `identical inputs at cosine ${same}`);
    assert.ok(other < 0.999, `different inputs at cosine ${other}`);
    assert.ok(r.usage.prompt_tokens > 0, "usage.prompt_tokens");
    return `${vecs[0]!.length} dims, cosine same ${same.toFixed(6)}, other ${other.toFixed(3)}`;
  },

  /** /v1/responses: a completed (or incomplete) response with output text and usage. */
  async responses({ client, model }) {
    const r = await client.responses.create({
      model,
      input: "Say hello.",
      max_output_tokens: 16,
    });
    assert.equal(r.object, "response");
    assert.ok(["completed", "incomplete"].includes(r.status ?? ""), `status ${r.status}`);
    assert.ok(r.output_text !== "", "output_text");
    assert.ok((r.usage?.output_tokens ?? 0) > 0, "usage.output_tokens");
    return `${r.status}, ${r.usage!.output_tokens} tokens`;
  },

  /** /v1/responses streamed: created first, completed last, deltas adding up to the text. */
  async responses_stream({ client, model }) {
    const stream = client.responses.stream({ model, input: "Say hello.", max_output_tokens: 16 });
    const kinds: string[] = [];
    let text = "";
    let done: string | undefined;
    for await (const event of stream) {
      kinds.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.output_text.done") done = event.text;
    }
    const final = await stream.finalResponse();
    assert.equal(kinds[0], "response.created");
    assert.ok(
      ["response.completed", "response.incomplete"].includes(kinds.at(-1)!),
      `last ${kinds.at(-1)}`,
    );
    assert.ok(text !== "" && done === text, "deltas add up to the done text");
    assert.equal(final.output_text, text, "the final response holds the text");
    return `${kinds.length} events, ${text.length} characters`;
  },
};

const PERSON_SCHEMA = {
  type: "object",
  properties: { name: { type: "string" }, age: { type: "integer" } },
  required: ["name", "age"],
  additionalProperties: false,
};

function cosine(a: number[], b: number[]): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return dot / Math.sqrt(na * nb);
}

/**
 * The second leg of a tool round trip: the tool's result in, a final answer out. The echo
 * engine answers its prompt's first turn (it stops at the first end-of-turn token), so the
 * result's arrival shows in the prompt's size: the same request without it is shorter.
 */
async function finalAnswer(
  client: OpenAI,
  model: string,
  messages: Message[],
  assistant:
    | OpenAI.Chat.Completions.ChatCompletionAssistantMessageParam
    | Chat["choices"][0]["message"],
  callId: string,
): Promise<string> {
  const ask = (toolResult: Message[]) =>
    client.chat.completions.create({
      model,
      messages: [...messages, assistant as Message, ...toolResult],
      tools: [WEATHER_TOOL],
      tool_choice: "none",
    });
  const r = await ask([{ role: "tool", tool_call_id: callId, content: "sunny, 21C" }]);
  const choice = only(r.choices);
  assert.equal(choice.finish_reason, "stop");
  assert.ok(!choice.message.tool_calls?.length, "no call in the final answer");
  assert.equal(typeof choice.message.content, "string");
  const without = await ask([]);
  const grew = r.usage!.prompt_tokens - without.usage!.prompt_tokens;
  assert.ok(grew >= 3, `the tool result adds to the prompt (${grew} tokens)`);
  return `call ${callId.slice(0, 12)}..., tool result (+${grew} prompt tokens), final answer`;
}

async function sampled(client: OpenAI, model: string, seed: number): Promise<string> {
  const r = await client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Write a word." }],
    max_tokens: 12,
    temperature: 1,
    seed,
  });
  return only(r.choices).message.content ?? "";
}

/** The error body as sent: exactly `{"error": {message, type, param, code}}`. */
async function rawErrorShape(baseUrl: string, body: unknown, status: number): Promise<void> {
  const res = await fetch(`${baseUrl}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  assert.equal(res.status, status);
  const json = await res.json() as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(json), ["error"]);
  assert.deepEqual(Object.keys(json.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(typeof json.error.message, "string");
}

function usageAddsUp(usage: OpenAI.CompletionUsage | undefined): void {
  assert.ok(usage, "usage is present");
  assert.ok(usage.prompt_tokens > 0, "prompt_tokens > 0");
  assert.ok(usage.completion_tokens >= 0, "completion_tokens >= 0");
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, "total");
}

function only<T>(items: readonly T[]): T {
  assert.equal(items.length, 1, `one item, got ${items.length}`);
  return items[0]!;
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      "base-url": { type: "string" },
      model: { type: "string" },
      cases: { type: "string", default: "chat,stream,completions,logprobs,seed,fields,errors" },
    },
  });
  const root = values["base-url"];
  if (!root || !values.model) {
    console.error(
      `usage: openai_npm.ts --base-url URL --model NAME [--cases ${Object.keys(CASES).join(",")}]`,
    );
    return 2;
  }
  const names = values.cases.split(",").filter((n) => n !== "");
  const unknown = names.filter((n) => !(n in CASES));
  if (unknown.length > 0) {
    console.error(`unknown case(s) ${unknown.join(", ")}; known: ${Object.keys(CASES).join(", ")}`);
    return 2;
  }
  const baseUrl = root.replace(/\/+$/, "").replace(/\/v1$/, "") + "/v1";
  const client = new OpenAI({ baseURL: baseUrl, apiKey: "none", maxRetries: 0, timeout: 120_000 });
  let failed = 0;
  for (const name of names) {
    try {
      console.log(`ok ${name}: ${await CASES[name]!({ client, model: values.model, baseUrl })}`);
    } catch (err) {
      failed++;
      const why = err instanceof Error ? err.message : String(err);
      console.log(`FAIL ${name}: ${why.replaceAll("\n", " ")}`);
    }
  }
  console.log(`${names.length - failed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main());
