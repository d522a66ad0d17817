// bench:routing --from: a saved run printed and drawn again without simulating, and a file that
// is not one refused with the reason and exit status 2.

import assert from "node:assert/strict";
import { routingRow } from "../cli/_bench/_routing_test_support.ts";

const script = new URL("../bench/routing.ts", import.meta.url).pathname;

function run(...args: string[]): Promise<Deno.CommandOutput> {
  return new Deno.Command(Deno.execPath(), { args: ["run", "-A", script, ...args], stdin: "null" })
    .output();
}

function row(trace: string, level: "moderate" | "saturation", kvP90: number, kvHit: number) {
  return routingRow(level, kvP90, kvHit, { trace });
}

Deno.test("bench:routing --from prints a saved run's tables and goals and draws it with --svg", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const saved = `${dir}/routing.json`;
    await Deno.writeTextFile(
      saved,
      JSON.stringify({
        workers: 3,
        rows: [
          row("t seed 1", "moderate", 50, 0.5), // met
          row("t seed 2", "moderate", 70, 0.5), // p90 missed
          row("t seed 1", "saturation", 30, 0.45), // met
        ],
        replicaSync: [{ trace: "t seed 1", level: "moderate", hitRatio: 0.99, p90Ratio: 1.01 }],
      }),
    );
    const out = await run("--from", saved, "--svg", `${dir}/goals.svg`);
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.match(stdout, /3 simulated mocker workers/);
    assert.match(stdout, /\| t \| moderate \| 2 \| 0\.60x, 0\.70x \| 100%, 100% \| 1 of 2 \|/);
    assert.match(stdout, /\| t \| saturation \| 1 \| 0\.30x, 0\.30x \| 90%, 90% \| 1 of 1 \|/);
    assert.match(stdout, /goals met in 2 of 3 rows/);
    assert.match(stdout, /t seed 1, moderate: hit 99% of one router's, p90 1\.01x/);
    const svg = await Deno.readTextFile(`${dir}/goals.svg`);
    assert.match(svg, /^<svg /);
    assert.match(svg, /2 of 3 rows meet both goals/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("bench:routing --from refuses a file that is not a saved run, saying why", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const bad = `${dir}/bad.json`;
    await Deno.writeTextFile(bad, JSON.stringify({ rows: [{ trace: "t", level: "high" }] }));
    const out = await run("--from", bad);
    assert.equal(out.code, 2);
    assert.match(new TextDecoder().decode(out.stderr), /--from .*bad\.json: row 0: `level`/);
    const mixed = await run("--from", bad, "--held-out");
    assert.equal(mixed.code, 2);
    assert.match(new TextDecoder().decode(mixed.stderr), /--held-out would not apply/);
    const missing = await run("--from", `${dir}/none.json`);
    assert.equal(missing.code, 2);
    assert.match(new TextDecoder().decode(missing.stderr), /--from .*none\.json: /);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
