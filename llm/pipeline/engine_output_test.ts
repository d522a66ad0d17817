// The worker-output door: valid engine outputs pass untouched; random and adversarial values
// never throw past it, are refused with a reason, are never changed, and are checked in
// bounded time (an object posing as an array with a huge length included).

import assert from "node:assert/strict";
import fc from "fast-check";
import {
  engineOutputChecker,
  engineOutputProblem,
  MAX_TOKENS_PER_ITEM,
  WorkerOutputError,
} from "./engine_output.ts";

const bounds = { vocabSize: 1000 };

const validOutput = fc.record({
  token_ids: fc.array(fc.integer({ min: 0, max: 999 }), { maxLength: 20 }),
  finish_reason: fc.option(
    fc.constantFrom("stop", "length", "eos", "cancelled", "error", "content_filter"),
    { nil: undefined },
  ),
  text: fc.option(fc.string(), { nil: undefined }),
  cached_tokens: fc.option(fc.nat(), { nil: undefined }),
}, { requiredKeys: ["token_ids"] });

Deno.test("valid engine outputs pass the door unchanged", () => {
  fc.assert(fc.property(validOutput, (out) => {
    const before = JSON.stringify(out);
    assert.equal(engineOutputProblem(out, bounds), undefined);
    assert.equal(engineOutputChecker(bounds)(out, "w"), out);
    assert.equal(JSON.stringify(out), before);
  }));
});

Deno.test("log probabilities with one entry per token pass the door", () => {
  const out = {
    token_ids: [1, 2],
    log_probs: [-0.5, 0],
    top_logprobs: [
      [{ rank: 1, token_id: 1, logprob: -0.5 }, { rank: 2, token_id: 7, logprob: -2 }],
      [{ rank: 1, token_id: 2, token: "a", logprob: 0, bytes: [97] }],
    ],
  };
  assert.equal(engineOutputProblem(out, bounds), undefined);
  assert.equal(engineOutputProblem({ token_ids: [1], log_probs: null }, bounds), undefined);
});

Deno.test("random values never throw past the door and are never changed", () => {
  fc.assert(
    fc.property(fc.anything({ withNullPrototype: true, withObjectString: true }), (v) => {
      const before = typeof v === "object" && v !== null ? JSON.stringify(v) : undefined;
      const problem = engineOutputProblem(v, bounds);
      assert.ok(problem === undefined || typeof problem === "string");
      if (before !== undefined) assert.equal(JSON.stringify(v), before);
    }),
    { numRuns: 2000 },
  );
});

Deno.test("adversarial outputs are refused with a reason, each in bounded time", () => {
  const cases: [unknown, RegExp][] = [
    [{ token_ids: ["1"] }, /token_ids\[0\] must be an integer/],
    [{ token_ids: [null] }, /token_ids\[0\]/],
    [{ token_ids: [NaN] }, /token_ids\[0\]/],
    [{ token_ids: [1.5] }, /token_ids\[0\]/],
    [{ token_ids: [-1] }, /token_ids\[0\]/],
    [{ token_ids: [1000] }, /in \[0, 1000\)/],
    [{ token_ids: { length: 1e12 } }, /token_ids must be an array, got an object/],
    [{ token_ids: new Array(MAX_TOKENS_PER_ITEM + 1).fill(1) }, /more than 65536/],
    [{ token_ids: [1], finish_reason: "exploded" }, /unknown finish_reason "exploded"/],
    [{ token_ids: [1], text: 7 }, /text must be a string/],
    [{ token_ids: [1], text: "x".repeat((1 << 20) + 1) }, /text has/],
    [{ token_ids: [1], cached_tokens: -1 }, /cached_tokens/],
    [{ token_ids: [1], log_probs: [0.5] }, /log_probs must hold finite numbers <= 0/],
    [{ token_ids: [1], log_probs: [-Infinity] }, /log_probs must hold finite numbers/],
    [{ token_ids: [1], log_probs: [-1, -2] }, /one number per token \(1\)/],
    [{ token_ids: [1, 2], log_probs: [-1] }, /one number per token \(2\)/],
    [{ token_ids: [1], top_logprobs: [] }, /top_logprobs must be an array of one list/],
    [{ token_ids: [1], top_logprobs: [[{ token_id: 1, logprob: 0.1 }]] }, /logprob must be/],
    [{ token_ids: [1], top_logprobs: [[{ token_id: 1000, logprob: -1 }]] }, /token_id must/],
    [{ token_ids: [1], top_logprobs: [[{ token_id: 1, logprob: -1, rank: 0 }]] }, /rank/],
    [{ token_ids: [1], top_logprobs: [[{ token_id: 1, logprob: -1, bytes: [256] }]] }, /bytes/],
    [{ token_ids: [1], top_logprobs: [[7]] }, /top_logprobs\[0\]: entries must be objects/],
    [[1, 2], /expected an object, got an array/],
    ["tokens", /expected an object/],
    [null, /expected an object, got null/],
  ];
  for (const [value, reason] of cases) {
    const t = performance.now();
    const problem = engineOutputProblem(value, bounds);
    assert.ok(performance.now() - t < 50, `checking took ${performance.now() - t} ms`);
    assert.match(problem ?? "(accepted)", reason);
  }
});

Deno.test("the checker throws WorkerOutputError naming the worker, after telling onInvalid", () => {
  const seen: WorkerOutputError[] = [];
  const check = engineOutputChecker(bounds, (e) => seen.push(e));
  assert.throws(
    () => check({ token_ids: [-1] }, "abc123"),
    (e: unknown) =>
      e instanceof WorkerOutputError && e.instanceId === "abc123" &&
      /worker abc123 sent an invalid output/.test(e.message),
  );
  assert.equal(seen.length, 1);
});
