import assert from "node:assert/strict";
import { warmRequestPath } from "./warm.ts";
import { warmReferenceWire } from "../../runtime/reference/warm.ts";

Deno.test("warmRequestPath runs every step on its synthetic requests and reports the rounds", async () => {
  const report = await warmRequestPath({ rounds: 2, promptTokens: 300 });
  assert.equal(report.rounds, 2);
  assert.ok(report.ms >= 0 && Number.isFinite(report.ms));
  // No round at all: nothing run, nothing thrown.
  assert.equal((await warmRequestPath({ rounds: 0 })).rounds, 0);
});

Deno.test("warmReferenceWire sends a request through the reference wire and reads an answer item back", () => {
  const item = warmReferenceWire({ token_ids: [1, 2, 3], stop_conditions: {} }, 3);
  assert.deepEqual(item, {
    kind: "output",
    output: { token_ids: [1000, 1001, 1002], finish_reason: null, text: null },
  });
  // A request the wire cannot carry fails as it would on a real request.
  assert.throws(() => warmReferenceWire({ big: 1n << 70n }));
});
