import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { pooledRatio } from "./pooled.ts";
import { percentile } from "./report.ts";
import { mulberry32 } from "./synthetic.ts";

const replays = (n: number, size: number, scale: number, seed: number) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Array.from({ length: size }, () => scale * rnd()));
};

Deno.test("pooledRatio takes the percentile of all replays together", () => {
  const ours = replays(5, 600, 1, 1);
  const ref = replays(5, 600, 1.2, 2);
  const r = pooledRatio(ours, ref);
  assert.equal(r.ours, percentile(ours.flat(), 90));
  assert.equal(r.reference, percentile(ref.flat(), 90));
  assert.equal(r.ratio, r.ours / r.reference);
  // Not the median of the replays' own p90s: one replay far slower moves the pooled figure.
  const slow = [...ours.slice(0, 4), ours[4]!.map((x) => 10 * x)];
  assert.ok(pooledRatio(slow, ref).ratio > r.ratio * 1.05);
});

Deno.test("pooledRatio's interval follows the spread between replays", () => {
  // The same samples in every replay: drawing replays again changes nothing.
  const one = replays(1, 500, 1, 3)[0]!;
  const steady = pooledRatio([one, one, one], [one.map((x) => 2 * x), one.map((x) => 2 * x)]);
  assert.equal(steady.ratio, 0.5);
  assert.equal(steady.low, 0.5);
  assert.equal(steady.high, 0.5);
  // Replays at different levels: an interval around the ratio, and the same one again for the
  // same seed.
  const varied = [0.8, 1, 1.2, 0.9, 1.1].map((s, i) => replays(1, 500, s, 10 + i)[0]!);
  const r = pooledRatio(varied, varied);
  assert.equal(r.ratio, 1);
  assert.ok(r.low < 0.95 && r.high > 1.05, `${r.low}-${r.high}`);
  assert.deepEqual(pooledRatio(varied, varied), r);
  assert.notDeepEqual(pooledRatio(varied, varied, { seed: 2 }), r);
});

Deno.test("pooledRatio refuses a side without samples", () => {
  assert.throws(() => pooledRatio([], [[1]]), InvalidArgumentError);
  assert.throws(() => pooledRatio([[1]], [[1], []]), InvalidArgumentError);
});
