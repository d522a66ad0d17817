// The benches' measuring loops: a hung operation fails the measurement (one deadline per case
// and round, no timer per operation), and a healthy case gets every sample it asked for. And
// their command lines: an unknown flag is refused before any work, `--help` lists the flags.

import assert from "node:assert/strict";
import { flagProblem, measureInterleaved, withTimeout } from "../bench/_stats.ts";

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

Deno.test("a benchmark's command line: unknown flags, missing values and --help are caught", () => {
  const flags = { "--json PATH": "write there", "--quick": "short", "--workers N": "workers" };
  assert.equal(flagProblem([], flags), undefined);
  assert.equal(flagProblem(["--quick", "--workers", "4", "--json", "/tmp/x"], flags), undefined);
  assert.equal(flagProblem(["--quick", "--help"], flags), "help");
  assert.equal(flagProblem(["-h"], flags), "help");
  assert.equal(flagProblem(["--wrokers", "4"], flags), 'unknown flag "--wrokers"');
  assert.equal(flagProblem(["--workers"], flags), "--workers needs a value");
  assert.equal(flagProblem(["--workers", "--quick"], flags), "--workers needs a value");
  assert.equal(flagProblem(["--quick", "4"], flags), 'unknown flag "4"');
});

Deno.test("bench scripts refuse an unknown flag before running, and --help prints their flags", async () => {
  const script = new URL("../bench/indexer.ts", import.meta.url).pathname;
  const run = (arg: string) =>
    new Deno.Command(Deno.execPath(), { args: ["run", "-A", script, arg], stdin: "null" }).output();
  const bad = await run("--qiuck");
  assert.equal(bad.code, 2);
  assert.match(new TextDecoder().decode(bad.stderr), /unknown flag "--qiuck"[\s\S]*--json PATH/);
  const help = await run("--help");
  assert.equal(help.code, 0);
  assert.match(new TextDecoder().decode(help.stdout), /bench:indexer[\s\S]*--quick/);
});
