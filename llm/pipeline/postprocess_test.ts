import assert from "node:assert/strict";
import { QWEN3_IM_END, qwen3Tokenizer } from "../../tests/_helpers/qwen3.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { type ChoiceEvent, mergeStreams, TokenChoices, type TokenSeries } from "./postprocess.ts";

const tok = qwen3Tokenizer();

function request(maxTokens?: number): PreprocessedRequest {
  return {
    model: "m",
    token_ids: [1, 2],
    stop_conditions: maxTokens === undefined ? {} : { max_tokens: maxTokens },
    sampling_options: {},
    eos_token_ids: [QWEN3_IM_END],
  };
}

async function* outputs(items: LLMEngineOutput[]): AsyncGenerator<LLMEngineOutput> {
  for (const item of items) yield item;
}

function recordingSeries(): TokenSeries & { seen: Record<string, number[]> } {
  const seen: Record<string, number[]> = { ttft: [], itl: [], outputTokens: [] };
  const observer = (name: string) => ({ observe: (v: number) => seen[name]!.push(v) });
  return {
    seen,
    ttft: observer("ttft"),
    itl: observer("itl"),
    outputTokens: observer("outputTokens"),
  };
}

async function all(events: AsyncIterable<ChoiceEvent>): Promise<ChoiceEvent[]> {
  const out: ChoiceEvent[] = [];
  for await (const ev of events) out.push(ev);
  return out;
}

Deno.test("TokenChoices turns engine outputs into text deltas and an OpenAI finish reason", async () => {
  const [hello, world] = tok.encode("Hello world", { addSpecialTokens: false });
  const series = recordingSeries();
  const choices = new TokenChoices(
    tok,
    [request()],
    [outputs([{ token_ids: [hello!], cached_tokens: 1 }, { token_ids: [world!] }, {
      token_ids: [QWEN3_IM_END],
      finish_reason: "eos",
    }])],
    2,
    series,
    performance.now(),
  );
  const events = await all(choices.events());
  assert.equal(events.map((e) => e.text).join(""), "Hello world");
  assert.deepEqual(events.at(-1)?.reason, "stop", "eos is reported as stop");
  assert.deepEqual(choices.usage(), {
    prompt_tokens: 2,
    completion_tokens: 3,
    total_tokens: 5,
    prompt_tokens_details: { cached_tokens: 1 },
  });
  assert.equal(series.seen.ttft!.length, 1);
  assert.equal(series.seen.itl!.length, 2);
  choices.observeOutput();
  choices.observeOutput();
  assert.deepEqual(series.seen.outputTokens, [3], "observed once");
});

Deno.test("TokenChoices ends a stream that just stops with stop, and merges several choices", async () => {
  const [a] = tok.encode("a", { addSpecialTokens: false });
  const choices = new TokenChoices(
    tok,
    [request(), request()],
    [outputs([{ token_ids: [a!] }]), outputs([{ token_ids: [a!, a!], finish_reason: "length" }])],
    2,
    recordingSeries(),
    performance.now(),
  );
  const events = await all(choices.events());
  const byChoice = (i: number) => events.filter((e) => e.index === i);
  assert.deepEqual(byChoice(0).map((e) => e.reason), [null, "stop"]);
  assert.deepEqual(byChoice(1).map((e) => [e.text, e.reason]), [["aa", "length"]]);
  assert.equal(choices.usage().completion_tokens, 3);
});

Deno.test("mergeStreams() yields in arrival order and ends the sources when the consumer leaves", async () => {
  const ended: string[] = [];
  async function* source(name: string, n: number) {
    try {
      for (let i = 0; i < n; i++) yield `${name}${i}`;
    } finally {
      ended.push(name);
    }
  }
  for await (const x of mergeStreams([source("a", 5), source("b", 5)])) {
    if (x === "b1") break;
  }
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(ended.sort(), ["a", "b"]);
});
