import assert from "node:assert/strict";
import { Context } from "../../runtime/context.ts";
import { QWEN3_IM_END, QWEN3_IM_START, qwen3Tokenizer } from "../../tests/_helpers/qwen3.ts";
import { FrontendMetrics } from "../http/metrics.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { admit } from "./admit.ts";
import {
  aggregateChunks,
  chunkBase,
  sseResponse,
  type SseSource,
  type SseStep,
  textSse,
  tokenResponse,
  tokenSse,
} from "./encode.ts";
import { MigrationExhaustedError } from "./migration.ts";
import { TokenChoices } from "./postprocess.ts";
import { ChatOutputParser, reasoningParser, toolCallParser } from "../parsers/mod.ts";

const tok = qwen3Tokenizer();
const [HELLO, WORLD] = tok.encode("Hello world", { addSpecialTokens: false });
const request: PreprocessedRequest = {
  model: "m",
  token_ids: [1, 2],
  stop_conditions: {},
  sampling_options: {},
  eos_token_ids: [QWEN3_IM_END],
};
const series = {
  ttft: { observe() {} },
  itl: { observe() {} },
  outputTokens: { observe() {} },
};

async function* outputs(items: LLMEngineOutput[]): AsyncGenerator<LLMEngineOutput> {
  for (const item of items) yield item;
}

function choicesOf(...streams: LLMEngineOutput[][]): TokenChoices {
  return new TokenChoices(
    tok,
    streams.map(() => request),
    streams.map(outputs),
    2,
    series,
    performance.now(),
  );
}

async function steps(source: SseSource): Promise<SseStep[]> {
  const out: SseStep[] = [];
  for (;;) {
    const step = await source.next();
    out.push(step);
    if (step.last) return out;
  }
}

const data = (text: string) =>
  text.split("\n\n").filter((e) => e !== "").map((e) => e.slice("data: ".length));

Deno.test("a single choice streams one chunk per delta, then its last chunk, usage and [DONE] in one step", async () => {
  const base = chunkBase("chat", "r1", "m");
  const source = tokenSse(
    choicesOf([{ token_ids: [HELLO!] }, { token_ids: [WORLD!] }, {
      token_ids: [QWEN3_IM_END],
      finish_reason: "eos",
    }]),
    base,
    true,
  );
  const all = await steps(source);
  assert.equal(all.length, 3);
  const first = JSON.parse(data(all[0]!.text)[0]!);
  assert.deepEqual(first, {
    ...base,
    choices: [{
      index: 0,
      delta: { role: "assistant", content: "Hello" },
      logprobs: null,
      finish_reason: null,
    }],
  });
  const [last, usage, done] = data(all[2]!.text);
  assert.deepEqual(JSON.parse(last!).choices[0].finish_reason, "stop");
  assert.deepEqual(JSON.parse(usage!).usage, {
    prompt_tokens: 2,
    completion_tokens: 3,
    total_tokens: 5,
  });
  assert.equal(done, "[DONE]");
});

Deno.test("several choices stream merged, the last choice's end together with [DONE]", async () => {
  const source = tokenSse(
    choicesOf([{ token_ids: [HELLO!], finish_reason: "length" }], [{
      token_ids: [WORLD!],
      finish_reason: "length",
    }]),
    chunkBase("completion", "r2", "m"),
    false,
  );
  const all = await steps(source);
  const events = all.flatMap((s) => data(s.text));
  assert.equal(events.at(-1), "[DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e).choices[0]);
  assert.deepEqual(chunks.map((c) => c.index).sort(), [0, 1]);
  assert.deepEqual(chunks.map((c) => c.finish_reason), ["length", "length"]);
  assert.equal(all.at(-1)!.text.endsWith("data: [DONE]\n\n"), true);
  assert.equal(data(all.at(-1)!.text).length, 2, "the last chunk and [DONE] are one step");
});

Deno.test("a text model's chunks stream one event each, then [DONE]", async () => {
  const all = await steps(textSse(outputs([{ token_ids: [1] }, { token_ids: [2] }])));
  assert.deepEqual(all.map((s) => s.text), [
    'data: {"token_ids":[1]}\n\n',
    'data: {"token_ids":[2]}\n\n',
    "data: [DONE]\n\n",
  ]);
});

Deno.test("a non-streaming response folds the choices with their usage", async () => {
  const body = await tokenResponse(
    choicesOf([{ token_ids: [HELLO!, WORLD!], finish_reason: "length" }]),
    chunkBase("chat", "r3", "m"),
  );
  assert.equal(body.object, "chat.completion");
  assert.deepEqual(body.choices, [{
    index: 0,
    message: { role: "assistant", content: "Hello world" },
    logprobs: null,
    finish_reason: "length",
  }]);
  const folded = aggregateChunks([
    { id: "x", object: "text_completion", created: 1, model: "m", choices: [{ text: "a" }] },
    { choices: [{ text: "b", finish_reason: "stop" }], usage: { total_tokens: 2 } },
  ]);
  assert.deepEqual(folded.choices, [{
    index: 0,
    text: "ab",
    logprobs: null,
    finish_reason: "stop",
  }]);
  assert.deepEqual(folded.usage, { total_tokens: 2 });
});

Deno.test("folded chat chunks keep reasoning and tool calls (deltas by call index)", () => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
    id: "x",
    object: "chat.completion.chunk",
    created: 1,
    model: "m",
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const folded = aggregateChunks([
    chunk({ role: "assistant", reasoning_content: "Weather: " }),
    chunk({ reasoning_content: "call it." }),
    chunk({
      tool_calls: [{
        index: 0,
        id: "call_1",
        type: "function",
        function: { name: "get_weather", arguments: "" },
      }],
    }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
    chunk({
      tool_calls: [
        { index: 0, function: { arguments: '"Paris"}' } },
        { index: 1, id: "call_2", type: "function", function: { name: "now", arguments: "{}" } },
      ],
    }),
    chunk({}, "tool_calls"),
  ]);
  assert.deepEqual(folded.choices, [{
    index: 0,
    message: {
      role: "assistant",
      content: null,
      reasoning_content: "Weather: call it.",
      tool_calls: [
        {
          id: "call_1",
          type: "function",
          function: { name: "get_weather", arguments: '{"city":"Paris"}' },
        },
        { id: "call_2", type: "function", function: { name: "now", arguments: "{}" } },
      ],
    },
    logprobs: null,
    finish_reason: "tool_calls",
  }]);
});

Deno.test("sseResponse() reports a failure mid-stream as an error event and counts it", async () => {
  const metrics = new FrontendMetrics();
  const admission = admit(metrics, "m", "completion", true);
  const ctx = new Context();
  let closed = false;
  let n = 0;
  const source: SseSource = {
    next() {
      if (n++ === 0) return Promise.resolve({ text: "data: 1\n\n", last: false });
      return Promise.reject(new MigrationExhaustedError(1, new Error("gone")));
    },
    close() {
      closed = true;
    },
  };
  const response = sseResponse(source, ctx, admission);
  assert.equal(response.headers.get("content-type"), "text/event-stream");
  const events = data(await response.text());
  assert.equal(events[0], "1");
  assert.equal(JSON.parse(events[1]!).error.code, "migration_exhausted");
  assert.ok(closed && ctx.isKilled());
  assert.match(await metrics.render(), /status="error"\} 1/);
});

Deno.test("sseResponse() kills the request when the client goes away", async () => {
  const metrics = new FrontendMetrics();
  const ctx = new Context();
  let closed = false;
  const source: SseSource = {
    next: () => new Promise<SseStep>(() => {}),
    close() {
      closed = true;
    },
  };
  const response = sseResponse(source, ctx, admit(metrics, "m", "chat", true));
  // The HTTP server cancels the body when the client's connection closes.
  await response.body?.cancel();
  assert.ok(closed && ctx.isKilled());
  const text = await metrics.render();
  assert.match(text, /status="cancelled"\} 1/);
  assert.match(text, /dynamo_frontend_disconnected_clients\{model="m"\} 1/);
});

Deno.test("sseResponse() over Deno.serve: a client hanging up mid-stream kills the request", async () => {
  const metrics = new FrontendMetrics();
  const ctx = new Context();
  let step = 0;
  const source: SseSource = {
    // One event, then an engine that never answers again (a long prefill, a hung worker).
    next: () =>
      step++ === 0
        ? Promise.resolve({ text: "data: {}\n\n", last: false })
        : new Promise<SseStep>(() => {}),
    close() {},
  };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => sseResponse(source, ctx, admit(metrics, "m", "chat", true), "req-1"),
  );
  try {
    const hangUp = new AbortController();
    const res = await fetch(`http://127.0.0.1:${server.addr.port}/`, { signal: hangUp.signal });
    assert.equal(res.headers.get("x-request-id"), "req-1");
    const reader = res.body!.getReader();
    await reader.read();
    hangUp.abort();
    await reader.cancel().catch(() => {});
    const deadline = Date.now() + 5_000;
    while (!ctx.isKilled()) {
      assert.ok(Date.now() < deadline, "the request was not killed within 5 s of the hang-up");
      await new Promise((r) => setTimeout(r, 10));
    }
  } finally {
    await server.shutdown();
  }
});

const ANSWER = "<think>Need the weather.</think>\n\nChecking.\n<tool_call>\n" +
  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

function parsedChoices(): TokenChoices {
  const ids = tok.encode(ANSWER, { addSpecialTokens: false });
  const items: LLMEngineOutput[] = ids.map((id) => ({ token_ids: [id] }));
  items.push({ token_ids: [QWEN3_IM_END], finish_reason: "eos" });
  let n = 0;
  return new TokenChoices(tok, [request], [outputs(items)], 2, series, performance.now(), {
    parsers: [
      new ChatOutputParser({
        reasoning: reasoningParser("qwen3"),
        tools: toolCallParser("hermes"),
        newId: () => `call_${n++}`,
      }),
    ],
  });
}

Deno.test("a parsed choice streams reasoning, content, then the call's id and name before its arguments", async () => {
  const all = (await steps(tokenSse(parsedChoices(), chunkBase("chat", "r1", "m"), false)))
    .flatMap((s) => data(s.text)).filter((d) => d !== "[DONE]").map((d) => JSON.parse(d));
  const deltas = all.map((c) => c.choices[0].delta);
  assert.equal(deltas[0].role, "assistant");
  assert.equal(deltas.map((d) => d.reasoning_content ?? "").join(""), "Need the weather.");
  assert.equal(deltas.map((d) => d.content ?? "").join(""), "Checking.");
  const calls = deltas.filter((d) => d.tool_calls).map((d) => d.tool_calls[0]);
  assert.deepEqual(calls, [
    { index: 0, id: "call_0", type: "function", function: { name: "get_weather", arguments: "" } },
    { index: 0, function: { arguments: '{"city":"Paris"}' } },
  ]);
  const reasons = all.map((c) => c.choices[0].finish_reason);
  assert.deepEqual(reasons.filter((r) => r !== null), ["tool_calls"]);
  assert.equal(reasons.at(-1), "tool_calls", "on the last chunk");
});

Deno.test("a parsed choice's whole response carries content, reasoning_content and tool_calls", async () => {
  const r = await tokenResponse(parsedChoices(), chunkBase("chat", "r1", "m"));
  const choice = (r.choices as Record<string, unknown>[])[0]!;
  assert.equal(choice.finish_reason, "tool_calls");
  assert.deepEqual(choice.message, {
    role: "assistant",
    content: "Checking.",
    reasoning_content: "Need the weather.",
    tool_calls: [{
      id: "call_0",
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Paris"}' },
    }],
  });
});

Deno.test("a tool-call syntax made of special tokens keeps them in the text its parser reads", async () => {
  const [hello] = tok.encode("Hello", { addSpecialTokens: false });
  const items = (): LLMEngineOutput[] => [
    { token_ids: [QWEN3_IM_START] },
    { token_ids: [hello!], finish_reason: "stop" },
  ];
  const answer = async (keepSpecialTokens: boolean) => {
    const choices = new TokenChoices(tok, [request], [outputs(items())], 2, series, 0, {
      parsers: [new ChatOutputParser({})],
      keepSpecialTokens,
    });
    let text = "";
    for await (const ev of choices.events()) text += ev.text;
    return text;
  };
  assert.equal(await answer(true), "<|im_start|>Hello");
  assert.equal(await answer(false), "Hello");
});

/** An engine stream whose outputs are all already there (`poll` hands them over at once). */
function pollable(items: LLMEngineOutput[], failAt?: number) {
  let i = 0;
  const take = (): IteratorResult<LLMEngineOutput> => {
    if (i === failAt) {
      i++;
      throw new Error("worker died");
    }
    return i < items.length
      ? { value: items[i++]!, done: false }
      : { value: undefined, done: true };
  };
  const it = {
    polls: 0,
    next: () => {
      try {
        return Promise.resolve(take());
      } catch (err) {
        return Promise.reject(err);
      }
    },
    poll: () => (it.polls++, take()),
    [Symbol.asyncIterator]: () => it,
  };
  return it;
}

Deno.test("a single choice sends the outputs already there with the one it waited for, in one step", async () => {
  const stream = pollable([{ token_ids: [HELLO!] }, { token_ids: [WORLD!] }, {
    token_ids: [QWEN3_IM_END],
    finish_reason: "eos",
  }]);
  const choices = new TokenChoices(tok, [request], [stream], 2, series, performance.now());
  const all = await steps(tokenSse(choices, chunkBase("chat", "r1", "m"), false));
  assert.equal(all.length, 1, "one step: the first output was awaited, the rest polled");
  assert.ok(stream.polls >= 2);
  const events = data(all[0]!.text);
  assert.deepEqual(events.slice(0, 2).map((e) => JSON.parse(e).choices[0].delta), [
    { role: "assistant", content: "Hello" },
    { content: " world" },
  ]);
  assert.equal(JSON.parse(events[2]!).choices[0].finish_reason, "stop");
  assert.equal(events.at(-1), "[DONE]");
});

Deno.test("a failure met while polling comes after the chunks polled before it", async () => {
  const stream = pollable([{ token_ids: [HELLO!] }, { token_ids: [WORLD!] }], 2);
  const choices = new TokenChoices(tok, [request], [stream], 2, series, performance.now());
  const source = tokenSse(choices, chunkBase("chat", "r1", "m"), false);
  const first = await source.next();
  assert.equal(data(first.text).length, 2);
  assert.equal(first.last, false);
  await assert.rejects(source.next(), /worker died/);
});
