import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { TtftModel } from "./ttft_model.ts";

Deno.test("TtftModel predicts with its prior until warm, then learns the rates it observes", () => {
  const model = new TtftModel({ warmup: 16, priorMsPerKTokens: 10, priorMsPerKBlocks: 10 });
  const f = { prefillTokens: 2000, activeBlocks: 1000 };
  assert.equal(model.predict(f), 30);
  // The engine: 5 ms fixed, 24 ms per 1,000 prefill tokens, 3 ms per 1,000 blocks.
  let seed = 7;
  const rnd = () => (seed = (seed * 16807) % 2147483647) / 2147483647;
  for (let i = 0; i < 400; i++) {
    const x = { prefillTokens: Math.floor(rnd() * 8000), activeBlocks: Math.floor(rnd() * 6000) };
    model.observe(x, 5 + 24 * x.prefillTokens / 1000 + 3 * x.activeBlocks / 1000);
  }
  const c = model.coefficients();
  assert.ok(c.fitted);
  assert.ok(Math.abs(c.intercept - 5) < 0.5, `intercept ${c.intercept}`);
  assert.ok(Math.abs(c.msPerKTokens - 24) < 0.5, `per 1k tokens ${c.msPerKTokens}`);
  assert.ok(Math.abs(c.msPerKBlocks - 3) < 0.5, `per 1k blocks ${c.msPerKBlocks}`);
  assert.ok(Math.abs(model.predict(f) - (5 + 48 + 3)) < 1);
});

Deno.test("TtftModel ignores impossible observations and keeps a small cost of load", () => {
  const model = new TtftModel({ warmup: 4 });
  model.observe({ prefillTokens: 100, activeBlocks: 0 }, Number.NaN);
  model.observe({ prefillTokens: -1, activeBlocks: 0 }, 10);
  model.observe({ prefillTokens: 100, activeBlocks: 0 }, Infinity);
  assert.equal(model.observations, 0);
  // Load that seems to make requests faster: kept at a twentieth of the prefill rate.
  for (let i = 0; i < 200; i++) {
    const blocks = (i % 10) * 500;
    model.observe(
      { prefillTokens: (i % 7) * 1000, activeBlocks: blocks },
      50 + (i % 7) * 20 - blocks / 1000,
    );
  }
  const c = model.coefficients();
  assert.ok(c.fitted);
  assert.ok(Math.abs(c.msPerKBlocks - c.msPerKTokens / 20) < 1e-9, JSON.stringify(c));
});

Deno.test("TtftModel refuses options out of range", () => {
  assert.throws(() => new TtftModel({ priorMsPerKTokens: 0 }), InvalidArgumentError);
  assert.throws(() => new TtftModel({ forgetting: 1.5 }), InvalidArgumentError);
  assert.throws(() => new TtftModel({ warmup: -1 }), InvalidArgumentError);
});
