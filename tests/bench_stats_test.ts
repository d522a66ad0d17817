// The benches' measuring loops: a hung operation fails the measurement (one deadline per case
// and round, no timer per operation), and a healthy case gets every sample it asked for.

import assert from "node:assert/strict";
import { measureInterleaved, withTimeout } from "../bench/_stats.ts";

Deno.test("measureInterleaved: every timed iteration is a sample, in rounds taken in turn", async () => {
  const order: string[] = [];
  const caseOf = (name: string) => ({
    name,
    once: () => {
      order.push(name);
      return Promise.resolve();
    },
  });
  const samples = await measureInterleaved([caseOf("a"), caseOf("b")], {
    warmup: 2,
    iterations: 6,
    rounds: 3,
    maxRoundMs: 5_000,
    maxTotalMs: 5_000,
  });
  assert.equal(samples.get("a")!.length, 6);
  assert.equal(samples.get("b")!.length, 6);
  // Warm-up (2 each), then rounds of 2 per case, taking turns.
  assert.equal(order.join(""), "aabb" + "aabb".repeat(3));
});

Deno.test("measureInterleaved: an operation that never ends fails the round, naming the case", async () => {
  let calls = 0;
  const started = performance.now();
  const measuring = measureInterleaved([{
    name: "stuck",
    once: () => ++calls <= 3 ? Promise.resolve() : new Promise<void>(() => {}),
  }], { warmup: 3, iterations: 10, rounds: 2, maxRoundMs: 50, maxTotalMs: 1_000, hangMs: 100 });
  // Without the guard the measurement would never end: this test's own limit says so.
  let limit: ReturnType<typeof setTimeout> | undefined;
  const gaveUp = new Promise<never>((_, reject) => {
    limit = setTimeout(() => reject(new Error("measureInterleaved never gave up")), 5_000);
  });
  try {
    await assert.rejects(
      Promise.race([measuring, gaveUp]),
      /stuck, round 1: still running after 150 ms/,
    );
  } finally {
    clearTimeout(limit);
  }
  assert.ok(performance.now() - started < 2_000);
});

Deno.test("withTimeout: the work's own result or failure when it ends in time", async () => {
  assert.equal(await withTimeout(Promise.resolve(7), 1_000, "quick"), 7);
  await assert.rejects(withTimeout(Promise.reject(new Error("own")), 1_000, "quick"), /own/);
  await assert.rejects(
    withTimeout(new Promise(() => {}), 20, "slow"),
    /slow: still running after 20 ms/,
  );
});
