import assert from "node:assert/strict";
import { Context } from "../../runtime/context.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { echoEngine } from "./echo.ts";
import { syntheticTopLogprobs } from "./synthetic_logprobs.ts";

const req = (
  token_ids: number[],
  extra: Partial<PreprocessedRequest> = {},
): PreprocessedRequest => ({
  model: "m",
  token_ids,
  stop_conditions: {},
  sampling_options: {},
  eos_token_ids: [],
  ...extra,
});

async function run(r: PreprocessedRequest, ctx = new Context()): Promise<LLMEngineOutput[]> {
  const out: LLMEngineOutput[] = [];
  for await (const x of echoEngine()(r, ctx)) out.push(x);
  return out;
}

Deno.test("the echo engine yields the prompt's tokens one by one and stops", async () => {
  const out = await run(req([5, 6, 7]));
  assert.deepEqual(out.map((o) => o.token_ids[0]), [5, 6, 7]);
  assert.equal(out.at(-1)?.finish_reason, "stop");
});

Deno.test("the echo engine honours max_tokens with finish_reason length", async () => {
  const out = await run(req([5, 6, 7, 8], { stop_conditions: { max_tokens: 2 } }));
  assert.deepEqual(out, [{ token_ids: [5] }, { token_ids: [6], finish_reason: "length" }]);
});

Deno.test("a migrated echo request continues where the first attempt stopped", async () => {
  const prompt = [1, 2, 3, 4, 5];
  const first = (await run(req(prompt))).flatMap((o) => o.token_ids);
  const k = 2;
  const rest = await run(req([...prompt, ...first.slice(0, k)], { migrated_tokens: k }));
  assert.deepEqual([...first.slice(0, k), ...rest.flatMap((o) => o.token_ids)], first);
});

Deno.test("the echo engine rejects a request without token_ids", async () => {
  await assert.rejects(run({ text: "hi" } as unknown as PreprocessedRequest), /token_ids/);
});

Deno.test("asked for log probabilities, the echo engine gives fixed values, its token ranked first", async () => {
  const out = await run(req([9, 16], { output_options: { logprobs: 3 } }));
  assert.deepEqual(out.map((o) => o.log_probs), [[-0.125], [0]]);
  assert.deepEqual(out[0]!.top_logprobs, [[
    { rank: 1, token_id: 9, logprob: -0.125 },
    { rank: 2, token_id: 8, logprob: -1.125 },
    { rank: 3, token_id: 7, logprob: -2.125 },
  ]]);
  assert.deepEqual(syntheticTopLogprobs(1, 3).map((t) => t.token_id), [1, 0, 3]);
  assert.deepEqual((await run(req([9]))).map((o) => o.log_probs), [undefined]);
});
