import assert from "node:assert/strict";
import fc from "fast-check";
import { RequestError } from "./errors.ts";
import {
  ACCEPTED_UNUSED_FIELDS,
  firstNonTokenId,
  validateChatRequest,
  validateCompletionRequest,
} from "./validate.ts";

const chat = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: "qwen3",
  messages: [{ role: "user", content: "Hi" }],
  ...extra,
});
const completion = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: "qwen3",
  prompt: "Once",
  ...extra,
});

function rejects(fn: () => unknown, param: string | null, message: RegExp | string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof RequestError, `expected RequestError, got ${err}`);
    assert.equal(err.status, 400);
    assert.equal(err.type, "invalid_request_error");
    assert.equal(err.param, param);
    if (typeof message === "string") assert.ok(err.message.includes(message), err.message);
    else assert.match(err.message, message);
    return true;
  });
}

Deno.test("RequestError serialises to the OpenAI error object", () => {
  const err = new RequestError(400, "bad temperature", { param: "temperature", code: "x" });
  assert.deepEqual(err.toJSON(), {
    error: {
      message: "bad temperature",
      type: "invalid_request_error",
      param: "temperature",
      code: "x",
    },
  });
  assert.deepEqual(JSON.parse(JSON.stringify(err)), err.toJSON());
  assert.equal(err.name, "RequestError");
  assert.ok(err instanceof Error);
});

Deno.test("RequestError picks the error type from the status unless told", () => {
  assert.equal(new RequestError(503, "no workers").type, "service_unavailable");
  assert.equal(new RequestError(500, "boom").type, "server_error");
  assert.equal(new RequestError(400, "x", { type: "custom" }).type, "custom");
  const notFound = RequestError.modelNotFound("gpt-9");
  assert.equal(notFound.status, 404);
  assert.equal(notFound.code, "model_not_found");
  assert.equal(notFound.toJSON().error.param, "model");
  assert.ok(notFound.message.includes("gpt-9"));
  assert.equal(RequestError.bodyTooLarge(1024).status, 413);
});

Deno.test("validateChatRequest accepts a minimal request and drops null fields", () => {
  const body = chat({ temperature: null, stop: null, max_tokens: 16 });
  const req = validateChatRequest(body);
  assert.equal(req.model, "qwen3");
  assert.equal(req.max_tokens, 16);
  assert.ok(!("temperature" in req));
  assert.ok(!("stop" in req));
  // The caller's object is left alone.
  assert.equal(body.temperature, null);
});

Deno.test("validateChatRequest accepts the edges of every range", () => {
  validateChatRequest(chat({
    temperature: 0,
    top_p: 1,
    top_k: -1,
    min_p: 0,
    presence_penalty: -2,
    frequency_penalty: 2,
    repetition_penalty: 2,
    n: 128,
    stop: Array.from({ length: 32 }, (_, i) => `s${i}`),
    logprobs: true,
    top_logprobs: 20,
    max_completion_tokens: 1,
    seed: -5,
    stream: true,
    stream_options: { include_usage: true },
  }));
  validateChatRequest(chat({ temperature: 2, top_p: 0, n: 1, stop: "x", top_k: 0 }));
});

Deno.test("validateChatRequest accepts content parts, tool history and tools", () => {
  const req = validateChatRequest({
    model: "m",
    messages: [
      { role: "system", content: [{ type: "text", text: "Be brief." }] },
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: "c1",
          type: "function",
          function: { name: "get_weather", arguments: "{}" },
        }],
      },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ],
    tools: [{ type: "function", function: { name: "get_weather", parameters: {} } }],
    tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  assert.equal(req.messages.length, 4);
  assert.ok(!("content" in req.messages[2]!), "null content is dropped");
});

Deno.test("validateChatRequest rejects bad values naming the parameter and the value", () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ temperature: 2.5 }, "temperature", "between 0 and 2, got 2.5"],
    [{ temperature: -0.1 }, "temperature", "got -0.1"],
    [{ temperature: "hot" }, "temperature", 'must be a number, got "hot"'],
    [{ top_p: 1.01 }, "top_p", "between 0 and 1, got 1.01"],
    [{ top_k: -2 }, "top_k", "at least -1, got -2"],
    [{ top_k: 1.5 }, "top_k", "must be an integer, got 1.5"],
    [{ min_p: 2 }, "min_p", "got 2"],
    [{ presence_penalty: 3 }, "presence_penalty", "between -2 and 2, got 3"],
    [{ frequency_penalty: -2.5 }, "frequency_penalty", "got -2.5"],
    [{ repetition_penalty: 0 }, "repetition_penalty", "greater than 0"],
    [{ n: 0 }, "n", "between 1 and 128, got 0"],
    [{ n: 129 }, "n", "got 129"],
    [{ max_tokens: 0 }, "max_tokens", "positive integer, got 0"],
    [{ max_tokens: 2.5 }, "max_tokens", "got 2.5"],
    [{ max_completion_tokens: -1 }, "max_completion_tokens", "got -1"],
    [{ stop: "" }, "stop", "must not be an empty string"],
    [{ stop: ["a", ""] }, "stop[1]", "must not be empty"],
    [{ stop: ["a", 3] }, "stop[1]", "must be a string, got 3"],
    [{ stop: Array.from({ length: 33 }, (_, i) => `s${i}`) }, "stop", "at most 32"],
    [{ stop: 7 }, "stop", "got 7"],
    [{ model: "" }, "model", "must not be empty"],
    [{ model: "  " }, "model", "must not be empty"],
    [{ model: 3 }, "model", "must be a string, got 3"],
    [{ messages: [] }, "messages", "must not be empty"],
    [{ messages: "hi" }, "messages", 'must be an array, got "hi"'],
    [{ messages: [{ role: "wizard", content: "x" }] }, "messages[0].role", '"wizard"'],
    [{ messages: [{ role: "user" }] }, "messages[0].content", "is required"],
    [{ messages: [{ role: "user", content: 5 }] }, "messages[0].content", "got 5"],
    [
      { messages: [{ role: "user", content: [{ type: "text", text: 1 }] }] },
      "messages[0].content[0].text",
      "must be a string",
    ],
    [{ messages: [null] }, "messages[0]", "must be an object, got null"],
    [{ top_logprobs: 5 }, "top_logprobs", "requires `logprobs` to be true"],
    [{ logprobs: true, top_logprobs: 21 }, "top_logprobs", "between 0 and 20, got 21"],
    [{ logprobs: "yes" }, "logprobs", "must be a boolean"],
    [{ stream_options: { include_usage: true } }, "stream_options", "only allowed when `stream`"],
    [{ stream: "true" }, "stream", "must be a boolean"],
    [{ tool_choice: "required" }, "tool_choice", "`tools` is empty"],
    [{ tool_choice: "sometimes" }, "tool_choice", '"sometimes"'],
    [
      {
        tools: [{ type: "function", function: { name: "a" } }],
        tool_choice: { type: "function", function: { name: "b" } },
      },
      "tool_choice",
      '"b"',
    ],
    [
      { tools: [{ type: "function", function: { name: "bad name" } }] },
      "tools[0].function.name",
      '"bad name"',
    ],
    [{ response_format: { type: "yaml" } }, "response_format.type", '"yaml"'],
    [{ response_format: { type: "json_schema" } }, "response_format.json_schema", "`name`"],
    [{ logit_bias: { "42": 101 } }, "logit_bias", "got 101"],
    [{ stop_token_ids: [1, -1] }, "stop_token_ids[1]", "got -1"],
    [{ min_tokens: 10, max_tokens: 5 }, "min_tokens", "min_tokens=10, max=5"],
    [
      { chat_template_kwargs: { chat_template: "x" } },
      "chat_template_kwargs.chat_template",
      "not accepted",
    ],
    [{ seed: 1.5 }, "seed", "must be an integer"],
  ];
  for (const [extra, param, message] of cases) {
    rejects(() => validateChatRequest(chat(extra)), param, message);
  }
});

Deno.test("validateChatRequest rejects a body that is not an object", () => {
  rejects(() => validateChatRequest([1]), null, "must be a JSON object, got [1]");
  rejects(() => validateChatRequest(null), null, "got null");
  rejects(() => validateChatRequest({ messages: [] }), "model", "`model` is required");
  rejects(() => validateChatRequest({ model: "m" }), "messages", "`messages` is required");
});

Deno.test("validateChatRequest accepts temperature exactly when it lies in 0..2", () => {
  fc.assert(
    fc.property(fc.double({ min: -10, max: 10, noNaN: true }), (t) => {
      const ok = t >= 0 && t <= 2;
      try {
        validateChatRequest(chat({ temperature: t }));
        assert.ok(ok, `accepted ${t}`);
      } catch (err) {
        assert.ok(
          !ok && err instanceof RequestError && err.param === "temperature",
          `${t}: ${err}`,
        );
      }
    }),
  );
});

Deno.test("validateCompletionRequest accepts every prompt form", () => {
  for (const prompt of ["text", ["text"], [1, 2, 3], [[1, 2], [3]], ["a", "b"]]) {
    assert.deepEqual(validateCompletionRequest(completion({ prompt })).prompt, prompt);
  }
  const req = validateCompletionRequest(completion({ logprobs: 5, echo: false, best_of: 2, n: 2 }));
  assert.equal(req.logprobs, 5);
});

Deno.test("firstNonTokenId: a token id is a non-negative safe integer, past u32 too", () => {
  assert.equal(firstNonTokenId([]), -1);
  assert.equal(firstNonTokenId([0, -0, 1, 0xffffffff, 2 ** 32, 2 ** 53 - 1]), -1);
  const bad: unknown[] = [-1, 2 ** 53, 1.5, NaN, Infinity, "3", null, true, [4], { n: 5 }];
  for (const x of bad) assert.equal(firstNonTokenId([7, 8, x, -1]), 2, `${String(x)}`);
  // A long prompt: the first bad one, wherever it is.
  const long = Array.from({ length: 30_000 }, (_, i) => i * 5);
  assert.equal(firstNonTokenId(long), -1);
  long[29_999] = -4;
  long[20_000] = 0.5;
  assert.equal(firstNonTokenId(long), 20_000);
});

Deno.test("validateCompletionRequest rejects bad prompts and completion-only fields", () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ prompt: "" }, "prompt", "must not be empty"],
    [{ prompt: [] }, "prompt", "must not be empty"],
    [{ prompt: ["a", ""] }, "prompt[1]", "must not be empty"],
    [{ prompt: ["a", 1] }, "prompt[1]", "got 1"],
    [{ prompt: [1, -2] }, "prompt[1]", "must be a token id, got -2"],
    [{ prompt: [1, 2.5] }, "prompt[1]", "got 2.5"],
    [{ prompt: [[1], []] }, "prompt[1]", "must not be empty"],
    [{ prompt: [[1], ["x"]] }, "prompt[1][0]", 'got "x"'],
    [{ prompt: [[1], [2, 2 ** 53]] }, "prompt[1][1]", "got 9007199254740992"],
    [{ prompt: [2 ** 32, -1] }, "prompt[1]", "got -1"],
    [{ prompt: { text: "x" } }, "prompt", "must be a string, an array of strings"],
    [{ prompt: undefined }, "prompt", "`prompt` is required"],
    [{ logprobs: 6 }, "logprobs", "between 0 and 5, got 6"],
    [{ logprobs: true }, "logprobs", "must be an integer, got true"],
    [{ best_of: 1, n: 2 }, "best_of", "at least `n`"],
    [{ echo: 1 }, "echo", "must be a boolean"],
    [{ temperature: 9 }, "temperature", "got 9"],
  ];
  for (const [extra, param, message] of cases) {
    rejects(() => validateCompletionRequest(completion(extra)), param, message);
  }
});

Deno.test("fields OpenAI accepts and we do not use are accepted when well formed", () => {
  const wellFormed: Record<string, unknown> = {
    user: "u-1",
    metadata: { suite: "conformance", empty: "" },
    service_tier: "auto",
    store: false,
    prompt_cache_key: "k",
    safety_identifier: "hashed-user",
    reasoning_effort: "low",
    verbosity: "medium",
    modalities: ["text"],
    prediction: { type: "content", content: "x" },
    web_search_options: {},
  };
  assert.deepEqual(Object.keys(wellFormed).sort(), [...ACCEPTED_UNUSED_FIELDS].sort());
  const req = validateChatRequest(chat(wellFormed)) as unknown as Record<string, unknown>;
  for (const [k, v] of Object.entries(wellFormed)) assert.deepEqual(req[k], v, k);
  // null means "not set", as OpenAI's clients send it.
  validateChatRequest(chat(Object.fromEntries(ACCEPTED_UNUSED_FIELDS.map((k) => [k, null]))));
});

Deno.test("malformed accepted fields are a 400 naming the field", () => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ metadata: "x" }, "metadata", "must be an object"],
    [{ metadata: { k: 1 } }, "metadata", "`metadata.k` must be a string"],
    [{ metadata: { ["k".repeat(65)]: "v" } }, "metadata", "at most 64 characters"],
    [{ metadata: { k: "v".repeat(513) } }, "metadata", "at most 512 characters"],
    [
      { metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) },
      "metadata",
      "at most 16 pairs",
    ],
    [{ service_tier: "gold" }, "service_tier", '"auto"'],
    [{ store: "yes" }, "store", "must be a boolean"],
    [{ prompt_cache_key: 3 }, "prompt_cache_key", "must be a string"],
    [{ safety_identifier: {} }, "safety_identifier", "must be a string"],
    [{ reasoning_effort: "max" }, "reasoning_effort", "must be one of"],
    [{ verbosity: 1 }, "verbosity", "must be one of"],
    [{ modalities: "text" }, "modalities", "must be an array"],
    [{ modalities: ["video"] }, "modalities[0]", '"text" or "audio"'],
    [{ prediction: "x" }, "prediction", "must be an object"],
    [{ web_search_options: [] }, "web_search_options", "must be an object"],
    [{ user: 5 }, "user", "must be a string"],
    [{ seed: 1.5 }, "seed", "must be an integer"],
  ];
  for (const [extra, param, message] of cases) {
    rejects(() => validateChatRequest(chat(extra)), param, message);
  }
  rejects(() => validateCompletionRequest(completion({ store: 1 })), "store", "boolean");
});
