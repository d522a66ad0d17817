import assert from "node:assert/strict";
import type { Preprocessor, PreprocessResult } from "../preprocess/preprocessor.ts";
import type { PreprocessedRequest } from "../protocols.ts";
import { preprocess } from "./preprocess.ts";

function fakePreprocessor(n: number, calls: string[]): Preprocessor {
  const request: PreprocessedRequest = {
    model: "m",
    token_ids: [1, 2, 3],
    stop_conditions: {},
    sampling_options: { seed: 7 },
    eos_token_ids: [],
  };
  const result = (what: string): PreprocessResult => {
    calls.push(what);
    return { request, promptTokens: 3, n };
  };
  return {
    chat: () => result("chat"),
    completion: () => result("completion"),
  } as unknown as Preprocessor;
}

Deno.test("preprocess() makes one engine request per choice, each its own seed", () => {
  const calls: string[] = [];
  const { choices, promptTokens } = preprocess(fakePreprocessor(3, calls), "chat", {
    model: "m",
    messages: [],
  });
  assert.deepEqual(calls, ["chat"]);
  assert.equal(promptTokens, 3);
  assert.deepEqual(choices.map((c) => c.sampling_options.seed), [7, 8, 9]);
});

Deno.test("preprocess() hands a single choice's request on as is", () => {
  const calls: string[] = [];
  const pre = fakePreprocessor(1, calls);
  const { choices } = preprocess(pre, "completion", { model: "m", prompt: "p" });
  assert.deepEqual(calls, ["completion"]);
  assert.equal(choices.length, 1);
  assert.equal(choices[0]!.sampling_options.seed, 7);
});
