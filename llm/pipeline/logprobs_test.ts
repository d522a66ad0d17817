// Log probabilities from engine outputs to OpenAI's shapes: chat `logprobs.content` and a
// completion's arrays, streamed and whole, and the request failed when an engine sends none.

import assert from "node:assert/strict";
import { QWEN3_IM_END, qwen3Tokenizer } from "../../tests/_helpers/qwen3.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { RequestError } from "../openai/errors.ts";
import { chunkBase, sseErrorEvent, type SseSource, tokenResponse, tokenSse } from "./encode.ts";
import { chatLogprobs, CompletionLogprobsEncoder, TokenTexts } from "./logprobs.ts";
import { TokenChoices } from "./postprocess.ts";
import { ChatOutputParser, reasoningParser, toolCallParser } from "../parsers/mod.ts";

const tok = qwen3Tokenizer();
const [HELLO, WORLD] = tok.encode("Hello world", { addSpecialTokens: false }) as [number, number];
const EURO = tok.encode("€", { addSpecialTokens: false });
const request: PreprocessedRequest = {
  model: "m",
  token_ids: [1, 2],
  stop_conditions: {},
  sampling_options: {},
  eos_token_ids: [QWEN3_IM_END],
  output_options: { logprobs: 2 },
};
const series = { ttft: { observe() {} }, itl: { observe() {} }, outputTokens: { observe() {} } };

async function* outputs(items: LLMEngineOutput[]): AsyncGenerator<LLMEngineOutput> {
  for (const item of items) yield item;
}

function choices(kind: "chat" | "completion", ...streams: LLMEngineOutput[][]): TokenChoices {
  return new TokenChoices(
    tok,
    streams.map(() => request),
    streams.map(outputs),
    2,
    series,
    0,
    { logprobs: kind },
  );
}

async function sseChoices(source: SseSource): Promise<Record<string, unknown>[]> {
  let text = "";
  for (;;) {
    const step = await source.next();
    text += step.text;
    if (step.last) break;
  }
  return text.split("\n\n").filter((e) => e !== "" && e !== "data: [DONE]")
    .map((e) => JSON.parse(e.slice(6)).choices[0]).filter((c) => c !== undefined);
}

const HELLO_OUT: LLMEngineOutput = {
  token_ids: [HELLO],
  log_probs: [-0.25],
  top_logprobs: [[
    { rank: 2, token_id: WORLD, logprob: -2 },
    { rank: 1, token_id: HELLO, logprob: -0.25 },
  ]],
};
const WORLD_OUT: LLMEngineOutput = {
  token_ids: [WORLD, QWEN3_IM_END],
  log_probs: [-0.5, -0.01],
  top_logprobs: [[{ rank: 1, token_id: WORLD, logprob: -0.5 }], []],
  finish_reason: "eos",
};

const helloEntry = {
  token: "Hello",
  logprob: -0.25,
  bytes: [72, 101, 108, 108, 111],
  top_logprobs: [
    { token: "Hello", logprob: -0.25, bytes: [72, 101, 108, 108, 111] },
    { token: " world", logprob: -2, bytes: [32, 119, 111, 114, 108, 100] },
  ],
};
const worldEntry = {
  token: " world",
  logprob: -0.5,
  bytes: [32, 119, 111, 114, 108, 100],
  top_logprobs: [{ token: " world", logprob: -0.5, bytes: [32, 119, 111, 114, 108, 100] }],
};

Deno.test("chat log probabilities stream with each chunk, alternatives most likely first", async () => {
  const got = await sseChoices(
    tokenSse(choices("chat", [HELLO_OUT, WORLD_OUT]), chunkBase("chat", "r", "m"), false),
  );
  assert.deepEqual(got.map((c) => c.logprobs), [
    { content: [helloEntry] },
    { content: [worldEntry] },
  ]);
  assert.equal(got.at(-1)!.finish_reason, "stop");
});

Deno.test("a whole chat response carries every token's log probability, the eos left out", async () => {
  const body = await tokenResponse(
    choices("chat", [HELLO_OUT, WORLD_OUT]),
    chunkBase("chat", "r", "m"),
  );
  const choice = (body.choices as Record<string, unknown>[])[0]!;
  assert.deepEqual(choice.logprobs, { content: [helloEntry, worldEntry] });
  assert.deepEqual(choice.message, { role: "assistant", content: "Hello world" });
});

Deno.test("completion log probabilities: tokens, token_logprobs, top_logprobs and text_offset", async () => {
  const expected = {
    tokens: ["Hello", " world"],
    token_logprobs: [-0.25, -0.5],
    top_logprobs: [{ "Hello": -0.25, " world": -2 }, { " world": -0.5 }],
    text_offset: [0, 5],
  };
  const body = await tokenResponse(
    choices("completion", [HELLO_OUT, WORLD_OUT]),
    chunkBase("completion", "r", "m"),
  );
  assert.deepEqual((body.choices as Record<string, unknown>[])[0]!.logprobs, expected);

  const streamed = await sseChoices(
    tokenSse(
      choices("completion", [HELLO_OUT, WORLD_OUT]),
      chunkBase("completion", "r", "m"),
      false,
    ),
  );
  assert.deepEqual(streamed.map((c) => c.logprobs), [
    {
      tokens: ["Hello"],
      token_logprobs: [-0.25],
      top_logprobs: [expected.top_logprobs[0]],
      text_offset: [0],
    },
    {
      tokens: [" world"],
      token_logprobs: [-0.5],
      top_logprobs: [expected.top_logprobs[1]],
      text_offset: [5],
    },
  ]);
});

Deno.test("several choices each get their own log probabilities and offsets", async () => {
  const body = await tokenResponse(
    choices("completion", [HELLO_OUT, WORLD_OUT], [{
      token_ids: [WORLD, HELLO],
      log_probs: [-0.5, -0.25],
      finish_reason: "length",
    }]),
    chunkBase("completion", "r", "m"),
  );
  const [a, b] = body.choices as { logprobs: { tokens: string[]; text_offset: number[] } }[];
  assert.deepEqual(a!.logprobs.text_offset, [0, 5]);
  assert.deepEqual(b!.logprobs.tokens, [" world", "Hello"]);
  assert.deepEqual(b!.logprobs.text_offset, [0, 6]);
});

Deno.test("a request for log probabilities fails with a 400 naming the model when the engine sends none", async () => {
  await assert.rejects(
    () => tokenResponse(choices("chat", [{ token_ids: [HELLO] }]), chunkBase("chat", "r", "m")),
    (e: unknown) =>
      e instanceof RequestError && e.status === 400 && e.param === "logprobs" &&
      /engine serving the model `m`/.test(e.message),
  );
  // An output without tokens (a bare finish) needs none.
  const body = await tokenResponse(
    choices("chat", [{ token_ids: [], finish_reason: "stop" }]),
    chunkBase("chat", "r", "m"),
  );
  assert.deepEqual((body.choices as Record<string, unknown>[])[0]!.logprobs, { content: [] });
});

Deno.test("a byte-level token's bytes are exact, even a piece of a character", () => {
  const texts = new TokenTexts(tok);
  const entries = chatLogprobs(texts, {
    tokenIds: EURO,
    logProbs: EURO.map(() => -1),
  });
  assert.deepEqual(entries.flatMap((e) => e.bytes), [0xe2, 0x82, 0xac]);
  const asIds = new TokenTexts(tok, true);
  assert.equal(asIds.of(HELLO).token, `token_id:${HELLO}`);
  const enc = new CompletionLogprobsEncoder(texts);
  assert.deepEqual(enc.push({ tokenIds: [HELLO], logProbs: [-1] }).top_logprobs, [{}]);
  assert.deepEqual(enc.push({ tokenIds: [WORLD], logProbs: [-1] }).text_offset, [5]);
});

Deno.test("with an output parser (reasoning, tool calls) every token's log probability still arrives once", async () => {
  const answer = "<think>Hm.</think>\n\nOK.\n<tool_call>\n" +
    '{"name": "f", "arguments": {}}\n</tool_call>';
  const ids = tok.encode(answer, { addSpecialTokens: false });
  const make = () => {
    const items: LLMEngineOutput[] = ids.map((id) => ({ token_ids: [id], log_probs: [-1] }));
    items.push({ token_ids: [QWEN3_IM_END], log_probs: [-1], finish_reason: "eos" });
    return new TokenChoices(tok, [request], [outputs(items)], 2, series, 0, {
      parsers: [
        new ChatOutputParser({
          reasoning: reasoningParser("qwen3"),
          tools: toolCallParser("hermes"),
          newId: () => "call_0",
        }),
      ],
      logprobs: "chat",
    });
  };
  const streamed = await sseChoices(tokenSse(make(), chunkBase("chat", "r", "m"), false));
  const tokens = streamed.flatMap((c) =>
    ((c.logprobs as { content?: { token: string }[] } | null)?.content ?? []).map((e) => e.token)
  );
  assert.equal(tokens.join(""), answer);
  const body = await tokenResponse(make(), chunkBase("chat", "r", "m"));
  const choice =
    (body.choices as { logprobs: { content: unknown[] }; finish_reason: string }[])[0]!;
  assert.equal(choice.logprobs.content.length, ids.length);
  assert.equal(choice.finish_reason, "tool_calls");
});

Deno.test("streamed, an engine without log probabilities ends the stream with the 400's error object", () => {
  const err = new RequestError(400, "no log probabilities", {
    param: "logprobs",
    code: "logprobs_unsupported",
  });
  assert.deepEqual(JSON.parse(sseErrorEvent(err).slice(6)), {
    error: {
      message: "no log probabilities",
      type: "invalid_request_error",
      param: "logprobs",
      code: "logprobs_unsupported",
    },
  });
});
