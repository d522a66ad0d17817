import assert from "node:assert/strict";
import { summarizeMode } from "./report.ts";
import { simulate } from "./simulate.ts";
import { synthesizeTrace, SYNTHETIC_PRESETS } from "./synthetic.ts";

// A small multi-tenant trace: 4 tenants, 6 users each.
const trace = synthesizeTrace({
  ...SYNTHETIC_PRESETS["multi-tenant"]!,
  seed: 5,
  tenants: 4,
  usersPerTenant: 6,
});

Deno.test("simulate: every request completes with its tokens; the same inputs give the same figures", () => {
  const a = simulate(trace, { workers: 4, mode: "kv", load: 4, blockSize: 16 });
  const b = simulate(trace, { workers: 4, mode: "kv", load: 4, blockSize: 16 });
  assert.ok(a.results.every((r) => r.ok));
  assert.deepEqual(
    a.results.map((r) => r.outputTokens),
    trace.map((r) => r.outputLength),
  );
  assert.ok(a.results.every((r) => r.ttftMs! > 0 && r.itlMs.length === r.outputTokens - 1));
  assert.deepEqual(a.results, b.results);
  assert.ok(a.load.length > 0 && a.load.every((s) => s.length === 5));
});

Deno.test("simulate: the kv router hits more of the prefix cache than round-robin on shared prompts", () => {
  const kv = summarizeMode(...run("kv"));
  const rr = summarizeMode(...run("round-robin"));
  assert.ok(
    kv.prefix_hit_rate > rr.prefix_hit_rate + 0.05,
    `kv ${kv.prefix_hit_rate} vs round-robin ${rr.prefix_hit_rate}`,
  );
  function run(mode: "kv" | "round-robin") {
    const r = simulate(trace, { workers: 4, mode, load: 4, blockSize: 16 });
    return [r.results, r.seconds] as const;
  }
});

Deno.test("simulate: two routers with replica sync route as one", () => {
  const one = simulate(trace, { workers: 4, mode: "kv", load: 4, blockSize: 16 });
  const two = simulate(trace, {
    workers: 4,
    mode: "kv",
    load: 4,
    blockSize: 16,
    routers: 2,
    replicaSync: true,
  });
  const hit = (r: typeof one) => summarizeMode(r.results, r.seconds).prefix_hit_rate;
  assert.ok(hit(two) >= 0.95 * hit(one), `${hit(two)} vs ${hit(one)}`);
});

Deno.test("simulate: prompts sharing a prefix still being prefilled reuse it instead of computing it again", () => {
  // Three tenants' 2,048-token system prompts, then 10 questions each in a burst of 3 ms, long
  // before the first prefills end: only the router's record of where it sent the first
  // prompts says where the prefixes will be.
  const tenants = 3;
  const trace = Array.from({ length: 33 }, (_, i) => {
    const tenant = i % tenants;
    const question = i < tenants ? [] : [1000 + i];
    return {
      timestamp: i < tenants ? 0 : 1 + (i % 3),
      inputLength: 2048 + question.length * 16,
      outputLength: 4,
      hashIds: [...Array.from({ length: 128 }, (_, b) => tenant * 1000 + b + 1), ...question],
      blockTokens: 16,
    };
  });
  const r = simulate(trace, { workers: 4, mode: "kv", load: 1, blockSize: 16 });
  assert.ok(r.results.every((x) => x.ok));
  // Each prefix computed on one or two workers: under 2 x 3 x 2,048 tokens with the questions'
  // own blocks. Routed as if nothing were cached, the burst computes them some 20 times over
  // (41,440 tokens before the router kept this record).
  const uncached = r.results.reduce((a, x) => a + x.promptTokens - (x.cachedTokens ?? 0), 0);
  assert.ok(uncached < 2 * tenants * 2048, `${uncached} tokens computed`);
});

Deno.test("simulate: the sharedCache oracle gives a worker the prefix another worker computed", () => {
  // Two prompts sharing 1,024 tokens, one second apart; round-robin sends them to two workers.
  const shared = Array.from({ length: 64 }, (_, i) => i + 1);
  const trace = [
    { timestamp: 0, inputLength: 1500, outputLength: 2, hashIds: [...shared, ...ids(100, 30)] },
    { timestamp: 1000, inputLength: 1500, outputLength: 2, hashIds: [...shared, ...ids(200, 30)] },
  ].map((r) => ({ ...r, blockTokens: 16 }));
  const run = (sharedCache: boolean) =>
    simulate(trace, { workers: 2, mode: "round-robin", load: 1, blockSize: 16, sharedCache })
      .results.map((r) => r.cachedTokens);
  assert.deepEqual(run(false), [0, 0]);
  assert.deepEqual(run(true), [0, 1024]);
});

function ids(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}

Deno.test("simulate: with peer fetch and pass timing (the defaults), a busy holder's prefix is copied to an idle worker", () => {
  // A 2,048-token prompt X; once it is done, X with 6,000 more tokens (it goes to X's holder);
  // then X with a question while that long prefill runs.
  const x = Array.from({ length: 128 }, (_, i) => i + 1);
  const trace = [
    { timestamp: 0, inputLength: 2048, outputLength: 2, hashIds: x },
    { timestamp: 1000, inputLength: 8048, outputLength: 2, hashIds: [...x, ...ids(5000, 375)] },
    { timestamp: 1010, inputLength: 2064, outputLength: 2, hashIds: [...x, 9999] },
  ].map((r) => ({ ...r, blockTokens: 16 }));
  const run = (kvFetchMsPerBlock: number | null) =>
    simulate(trace, {
      workers: 2,
      mode: "kv",
      load: 1,
      blockSize: 16,
      passTiming: true,
      kvFetchMsPerBlock,
    }).results;
  const fetched = run(0.05);
  const [first, long, again] = fetched;
  assert.ok(fetched.every((r) => r.ok));
  // The long prompt's prefill takes ~125 ms; the question does not wait for it, and its 2,048
  // tokens of X come from the holder (128 blocks at 0.05 ms: 6.4 ms) instead of being computed.
  assert.equal(long!.cachedTokens, 2048);
  assert.ok(long!.ttftMs! > 110, `long prompt ${long!.ttftMs} ms`);
  assert.equal(again!.cachedTokens, 2048);
  assert.ok(again!.ttftMs! < first!.ttftMs!, `${again!.ttftMs} vs ${first!.ttftMs}`);
  // The copy's time is charged: 128 blocks at 0.05 ms instead of 0.01 ms start 5.12 ms later.
  const quicker = run(0.01)[2]!;
  assert.equal(quicker.cachedTokens, 2048);
  assert.ok(Math.abs(again!.ttftMs! - quicker.ttftMs! - 128 * 0.04) < 1e-6);
  // Without peer fetch the question either waits behind the long prefill or computes X again.
  const [, , alone] = run(null);
  assert.ok(
    alone!.ttftMs! > 100 || alone!.cachedTokens === 0,
    `${alone!.ttftMs} ms, ${alone!.cachedTokens} cached`,
  );
  // Copying (640 ms) slower than waiting for the holder: it waits.
  const [, , slow] = run(5);
  assert.ok(slow!.ttftMs! > 100 && slow!.ttftMs! < 128 * 5, `${slow!.ttftMs} ms`);
});

Deno.test("simulate: a conversation evicted from the GPU comes back from the host tier, in its copy time", () => {
  // One worker of 200 blocks. A 1,024-token prompt, then two of 1,600 tokens (evicting the
  // first from the GPU), then the first again with a question.
  const a = ids(1, 64);
  const trace = [
    { timestamp: 0, inputLength: 1024, outputLength: 2, hashIds: a },
    { timestamp: 1000, inputLength: 1600, outputLength: 2, hashIds: ids(500, 100) },
    { timestamp: 1500, inputLength: 1600, outputLength: 2, hashIds: ids(700, 100) },
    { timestamp: 2000, inputLength: 1040, outputLength: 2, hashIds: [...a, 9999] },
  ].map((r) => ({ ...r, blockTokens: 16 }));
  const run = (hostBlocks: number, hostOnboardMsPerBlock?: number) =>
    simulate(trace, {
      workers: 1,
      mode: "kv",
      load: 1,
      blockSize: 16,
      numGpuBlocks: 200,
      hostBlocks,
      hostOnboardMsPerBlock,
    }).results;
  const gpuOnly = run(0);
  assert.ok(gpuOnly.every((r) => r.ok));
  assert.equal(gpuOnly[3]!.cachedTokens, 0, "evicted: computed again");
  const tiered = run(800, 0.2);
  assert.equal(tiered[3]!.cachedTokens, 1024);
  // 64 blocks at 0.2 ms before a pass of 16 tokens, instead of a pass of 1,040.
  assert.ok(tiered[3]!.ttftMs! < gpuOnly[3]!.ttftMs!);
  const quicker = run(800, 0.1)[3]!;
  assert.ok(Math.abs(tiered[3]!.ttftMs! - quicker.ttftMs! - 64 * 0.1) < 1e-6);
  // The mocker's default tier (4 blocks per GPU block) holds it too.
  assert.equal(
    simulate(trace, { workers: 1, mode: "kv", load: 1, blockSize: 16, numGpuBlocks: 200 })
      .results[3]!.cachedTokens,
    1024,
  );
});

Deno.test("simulate: blocks a peer copied are the first its source evicts, unless demoteCopied is false", () => {
  // Two workers of 500 blocks, no host tier. Prompts V and W go to one worker, X (while that one
  // is busy) to the other; a long prompt Z to V and W's worker; a question on W while Z runs
  // there is copied to the other worker. Then Z grows by 40 blocks, which V and W's worker must
  // evict for; then a question on V.
  const v = ids(7000, 60);
  const w = ids(3000, 60);
  const z = ids(5000, 375);
  const trace = [
    { timestamp: 0, inputLength: 960, outputLength: 2, hashIds: v },
    { timestamp: 1, inputLength: 1600, outputLength: 2, hashIds: ids(1, 100) },
    { timestamp: 100, inputLength: 960, outputLength: 2, hashIds: w },
    { timestamp: 1000, inputLength: 6000, outputLength: 2, hashIds: z },
    { timestamp: 1010, inputLength: 976, outputLength: 2, hashIds: [...w, 9999] },
    { timestamp: 2000, inputLength: 6640, outputLength: 2, hashIds: [...z, ...ids(8000, 40)] },
    { timestamp: 3000, inputLength: 976, outputLength: 2, hashIds: [...v, 6666] },
  ].map((r) => ({ ...r, blockTokens: 16 }));
  const run = (demoteCopied?: boolean) =>
    simulate(trace, {
      workers: 2,
      mode: "kv",
      load: 1,
      blockSize: 16,
      numGpuBlocks: 500,
      hostBlocks: 0,
      kvFetchMsPerBlock: 0.05,
      demoteCopied,
    }).results;
  const demoted = run();
  const kept = run(false);
  for (const results of [demoted, kept]) {
    assert.ok(results.every((r) => r.ok));
    assert.equal(results[4]!.cachedTokens, 960, "W copied from its busy holder");
    assert.equal(results[5]!.cachedTokens, 6000, "Z's growth on Z's worker");
  }
  // The copied W went first, so all of V is still there...
  assert.equal(demoted[6]!.cachedTokens, 960);
  // ...where in LRU order V, the oldest, lost its tail.
  assert.ok(kept[6]!.cachedTokens! < 960, `${kept[6]!.cachedTokens} cached`);
  assert.ok(demoted[6]!.ttftMs! < kept[6]!.ttftMs!);
});
