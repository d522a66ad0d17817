import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { TtftModel, type TtftModelOptions } from "./ttft_model.ts";

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

/** 300 noisy TTFTs of an engine (10 ms + 4 ms per 1,000 tokens + `perKBlocks` per 1,000 blocks). */
function noisyModel(
  seed: number,
  options: TtftModelOptions,
  blocks: [number, number],
  perKBlocks: number,
) {
  let s = seed * 7919;
  const rnd = () => (s = (s * 16807) % 2147483647) / 2147483647;
  const model = new TtftModel(options);
  for (let i = 0; i < 300; i++) {
    const x = {
      prefillTokens: Math.floor(rnd() * 3000),
      activeBlocks: blocks[0] + Math.floor(rnd() * (blocks[1] - blocks[0])),
    };
    const noise = (rnd() + rnd() + rnd() - 1.5) * 20; // about ±10 ms
    model.observe(
      x,
      Math.max(0, 10 + 4 * x.prefillTokens / 1000 + perKBlocks * x.activeBlocks / 1000 + noise),
    );
  }
  return model.coefficients();
}

Deno.test("TtftModel keeps a load rate the observations barely determine near the prior's ratio", () => {
  // As on a busy fleet: the running KV varies little (50-150 blocks) beside ±10 ms of noise.
  // The true ratio is the prior's (1); the raw fit swings from the floor to several times it.
  const ratio = (c: { msPerKBlocks: number; msPerKTokens: number }) =>
    c.msPerKBlocks / c.msPerKTokens;
  const shrunk = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((seed) =>
    ratio(noisyModel(seed, {}, [50, 150], 4))
  );
  const raw = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((seed) =>
    ratio(noisyModel(seed, { loadRateSpread: Infinity }, [50, 150], 4))
  );
  const near = (r: number) => r > 0.2 && r < 2;
  assert.ok(shrunk.every(near), `ratios ${shrunk}`);
  assert.ok(!raw.every(near), `raw ratios ${raw}`);
  assert.ok(Math.max(...raw) / Math.min(...raw) > 10, `raw ratios ${raw}`);
});

Deno.test("TtftModel takes a load rate the observations determine, far from the prior's", () => {
  // Running KV from 0 to 6,000 blocks: 80 ms per 1,000 blocks (20x the prefill rate) shows.
  for (const seed of [1, 2, 3]) {
    const c = noisyModel(seed, {}, [0, 6000], 80);
    assert.ok(Math.abs(c.msPerKBlocks - 80) < 8, `per 1k blocks ${c.msPerKBlocks}`);
  }
});

Deno.test("TtftModel refuses options out of range", () => {
  assert.throws(() => new TtftModel({ priorMsPerKTokens: 0 }), InvalidArgumentError);
  assert.throws(() => new TtftModel({ forgetting: 1.5 }), InvalidArgumentError);
  assert.throws(() => new TtftModel({ warmup: -1 }), InvalidArgumentError);
  assert.throws(() => new TtftModel({ loadRateSpread: 0 }), InvalidArgumentError);
});
