import assert from "node:assert/strict";
import type { LoggedCandidate, LoggedDecision } from "../../llm/kv_router/decision_log.ts";
import { attributeTail, formatTail, matchDecisions } from "./decision_tail.ts";
import type { RequestResult } from "./replay.ts";

const result = (prompt: number, ttft: number, at: number, cached = 0): RequestResult => ({
  ok: true,
  ttftMs: ttft,
  itlMs: [],
  promptTokens: prompt,
  outputTokens: 1,
  cachedTokens: cached,
  latencyMs: ttft,
  startMs: at,
});

const cand = (instance: string, overlap: number, prefill: number): LoggedCandidate => ({
  instance,
  overlap_blocks: overlap,
  prefill_blocks: prefill,
  active_blocks: 0,
  active_requests: 0,
});

const decision = (prompt: number, instance: string, cands: LoggedCandidate[]): LoggedDecision => ({
  time_ms: 0,
  instance,
  prompt_tokens: prompt,
  request_blocks: Math.floor(prompt / 16),
  overlap_blocks: cands.find((c) => c.instance === instance)!.overlap_blocks,
  candidates: cands,
});

Deno.test("matchDecisions pairs requests with the decisions for their prompt length, in order", () => {
  // Sent as 100, 200, 100; the frontend decided the second 100 before the 200.
  const results = [result(100, 5, 0), result(200, 5, 1), result(100, 5, 2), result(300, 5, 3)];
  const ds = [
    decision(100, "a", [cand("a", 0, 0)]),
    decision(100, "b", [cand("b", 0, 0)]),
    decision(200, "c", [cand("c", 0, 0)]),
  ];
  const m = matchDecisions(results, ds);
  assert.deepEqual(m.map((d) => d?.instance), ["a", "c", "b", undefined]);
});

Deno.test("attributeTail sorts the requests at or over the p90 by what their worker looked like", () => {
  const results: RequestResult[] = [];
  const ds: LoggedDecision[] = [];
  // 18 fast requests to the best worker; 2 slow ones: one long prompt on an idle worker
  // holding what is there to hold, one sent past a worker holding more of it.
  for (let i = 0; i < 18; i++) {
    results.push(result(1000 + i, i + 1, i));
    ds.push(decision(1000 + i, "a", [cand("a", 4, 0), cand("b", 0, 0)]));
  }
  results.push(result(20_000, 90, 18, 512));
  ds.push(decision(20_000, "b", [cand("a", 32, 40), cand("b", 32, 0)]));
  results.push(result(5_000, 80, 19, 0));
  ds.push(decision(5_000, "b", [cand("a", 200, 90), cand("b", 0, 10)]));
  const a = attributeTail(results, ds)!;
  // The p90 of 20 is the 18th fastest (18 ms): the tail is it and the two slow ones.
  assert.deepEqual(a, {
    p90Ms: 18,
    tail: 3,
    matched: 3,
    toLongestPrefix: 2,
    toFewestQueued: 3,
    toNoneQueued: 2,
    toBest: 2,
    offLongestPrefix: 1,
    medianUncachedTokens: 5_000,
  });
  assert.match(formatTail(a), /^3 requests at or over the p90 \(18\.0 ms\), 3 matched/);
  assert.equal(attributeTail([], ds), undefined);
});
