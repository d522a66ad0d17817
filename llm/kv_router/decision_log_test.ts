import assert from "node:assert/strict";
import { loggedDecision, openDecisionLog, parseDecisionLog } from "./decision_log.ts";
import type { RouteDecisionRecord } from "./router.ts";

const decision: RouteDecisionRecord = {
  instanceId: "w1",
  overlapBlocks: 6,
  promptTokens: 135,
  requestBlocks: 8,
  candidates: [
    {
      workerId: "w1",
      overlapBlocks: 6,
      requestBlocks: 9,
      activeBlocks: 40,
      prefillBlocks: 3,
      activeRequests: 2,
      waitingRequests: 1,
    },
    {
      workerId: "w2",
      overlapBlocks: 0,
      requestBlocks: 9,
      activeBlocks: 900,
      prefillBlocks: 0,
      activeRequests: 30,
    },
  ],
  // w2 was left out by the load bound: no cost.
  costs: new Map([["w1", 12.34567]]),
};

Deno.test("loggedDecision: the chosen worker and every candidate with its load and cost", () => {
  assert.deepEqual(loggedDecision(decision, 1_700_000_000_000.5), {
    time_ms: 1_700_000_000_000.5,
    instance: "w1",
    prompt_tokens: 135,
    request_blocks: 8,
    overlap_blocks: 6,
    candidates: [
      {
        instance: "w1",
        overlap_blocks: 6,
        prefill_blocks: 3,
        active_blocks: 40,
        active_requests: 2,
        waiting_requests: 1,
        cost: 12.346,
      },
      {
        instance: "w2",
        overlap_blocks: 0,
        prefill_blocks: 0,
        active_blocks: 900,
        active_requests: 30,
      },
    ],
  });
});

Deno.test("openDecisionLog appends JSON lines that parseDecisionLog reads back; a cut line is skipped", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/d.jsonl`;
    await Deno.writeTextFile(
      path,
      '{"time_ms":1,"instance":"old","request_blocks":1,"candidates":[]}\n',
    );
    const errors: unknown[] = [];
    const log = openDecisionLog(path, (e) => errors.push(e));
    log.write(decision);
    log.write({ ...decision, instanceId: "w2", costs: undefined });
    log.close();
    await Deno.writeTextFile(path, '{"time_ms":3,"instance":"cut', { append: true });
    const read = parseDecisionLog(await Deno.readTextFile(path));
    assert.deepEqual(read.map((d) => d.instance), ["old", "w1", "w2"]);
    assert.equal(read[1]!.candidates[0]!.cost, 12.346);
    assert.equal(read[2]!.candidates[0]!.cost, undefined, "a pick by id logs no costs");
    assert.ok(read[1]!.time_ms <= read[2]!.time_ms);
    assert.deepEqual(errors, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "openDecisionLog: a write that fails is reported once, then decisions are dropped",
  ignore: Deno.build.os !== "linux", // /dev/full: opens, and fails every write (ENOSPC)
  fn() {
    const errors: unknown[] = [];
    const log = openDecisionLog("/dev/full", (e) => errors.push(e));
    log.write(decision);
    log.write(decision);
    log.close();
    assert.equal(errors.length, 1);
    assert.throws(
      () => openDecisionLog("/nonexistent-dir/d.jsonl", () => {}),
      Deno.errors.NotFound,
    );
  },
});
