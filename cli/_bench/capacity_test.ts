import assert from "node:assert/strict";
import { capacityHitRates } from "./capacity.ts";
import { simulate } from "./simulate.ts";
import { mulberry32, synthesizeTrace, SYNTHETIC_PRESETS } from "./synthetic.ts";
import { prefixCeiling, type TraceRequest } from "./trace.ts";

/** One-block prompts: prompt `i` reads block `ids[i]` (16 tokens). */
function oneBlockPrompts(ids: readonly number[]): TraceRequest[] {
  return ids.map((id, i) => ({
    timestamp: i,
    inputLength: 16,
    outputLength: 1,
    hashIds: [id],
    blockTokens: 16,
  }));
}

/** The most hits any cache of `capacity` blocks gets on `seq`, trying every choice. */
function bruteForceHits(seq: readonly number[], capacity: number): number {
  const best = (t: number, cache: ReadonlySet<number>): number => {
    if (t === seq.length) return 0;
    const x = seq[t]!;
    if (cache.has(x)) return 1 + best(t + 1, cache);
    let most = best(t + 1, cache); // not kept
    if (cache.size < capacity) most = Math.max(most, best(t + 1, new Set([...cache, x])));
    else {
      for (const y of cache) {
        const kept = new Set(cache);
        kept.delete(y);
        kept.add(x);
        most = Math.max(most, best(t + 1, kept));
      }
    }
    return most;
  };
  return best(0, new Set());
}

Deno.test("capacityHitRates: Belady's keeps what comes back soonest; LRU thrashes on a loop", () => {
  // A B C A B C through two blocks: LRU evicts each block just before it comes back; the best
  // cache keeps A and B and lets C pass.
  const r = capacityHitRates(oneBlockPrompts([1, 2, 3, 1, 2, 3]), 16, 2);
  assert.equal(r.belady, 2 / 6);
  assert.equal(r.lru, 0);
  // A B C A B: not keeping C beats evicting B for it.
  assert.equal(capacityHitRates(oneBlockPrompts([1, 2, 3, 1, 2]), 16, 2).belady, 2 / 5);
});

Deno.test("capacityHitRates: LRU keeps a prompt's head over its tail", () => {
  // Two-block prompts [A B] then [A C] through one block: the head A is what comes back.
  const trace: TraceRequest[] = [
    { timestamp: 0, inputLength: 32, outputLength: 1, hashIds: [1, 2], blockTokens: 16 },
    { timestamp: 1, inputLength: 32, outputLength: 1, hashIds: [1, 3], blockTokens: 16 },
  ];
  assert.deepEqual(capacityHitRates(trace, 16, 1), { belady: 16 / 64, lru: 16 / 64 });
});

Deno.test("capacityHitRates: Belady's equals the best of every choice on small sequences", () => {
  const rnd = mulberry32(7);
  for (let k = 0; k < 60; k++) {
    const seq = Array.from({ length: 9 }, () => 1 + Math.floor(rnd() * 4));
    const capacity = 1 + (k % 3);
    const { belady, lru } = capacityHitRates(oneBlockPrompts(seq), 16, capacity);
    assert.equal(
      Math.round(belady * seq.length),
      bruteForceHits(seq, capacity),
      `${seq} cap ${capacity}`,
    );
    assert.ok(lru <= belady, `${seq} cap ${capacity}`);
  }
});

/** Belady's with bypass, written plainly: a linear search for the block needed furthest ahead. */
function plainBeladyHits(seq: readonly number[], capacity: number): number {
  const nextUse = (x: number, t: number) => {
    const i = seq.indexOf(x, t + 1);
    return i < 0 ? Infinity : i;
  };
  const cache = new Set<number>();
  let hits = 0;
  seq.forEach((x, t) => {
    if (cache.has(x)) {
      hits++;
      return;
    }
    if (nextUse(x, t) === Infinity) return;
    if (cache.size < capacity) {
      cache.add(x);
      return;
    }
    let worst = x;
    for (const y of cache) if (nextUse(y, t) > nextUse(worst, t)) worst = y;
    if (worst !== x) {
      cache.delete(worst);
      cache.add(x);
    }
  });
  return hits;
}

Deno.test("capacityHitRates: Belady's as written plainly, on long sequences", () => {
  const rnd = mulberry32(11);
  for (const [items, capacity] of [[40, 8], [200, 30], [25, 24]] as const) {
    // Skewed draws, so that some blocks come back often and others rarely.
    const seq = Array.from({ length: 3000 }, () => 1 + Math.floor(items * rnd() ** 2));
    const { belady } = capacityHitRates(oneBlockPrompts(seq), 16, capacity);
    assert.equal(Math.round(belady * seq.length), plainBeladyHits(seq, capacity));
  }
});

Deno.test("capacityHitRates: unbounded caches reach the trace's ceiling", () => {
  const trace = synthesizeTrace({ ...SYNTHETIC_PRESETS["many-tenants"]!, seed: 3 });
  const ceiling = prefixCeiling(trace).tokens;
  const r = capacityHitRates(trace, 16, Infinity);
  assert.ok(ceiling > 0.5);
  assert.ok(Math.abs(r.belady - ceiling) < 1e-12, `${r.belady} vs ${ceiling}`);
  assert.ok(Math.abs(r.lru - ceiling) < 1e-12, `${r.lru} vs ${ceiling}`);
  assert.deepEqual(capacityHitRates(trace, 16, 0), { belady: 0, lru: 0 });
});

Deno.test("capacityHitRates: no simulated fleet of that size hits more than Belady's bound", () => {
  // Small caches, so that eviction decides: two workers of 400 blocks each, with or without a
  // host tier (whose blocks count: the fleet holds GPU and host blocks).
  const trace = synthesizeTrace({ ...SYNTHETIC_PRESETS["multi-tenant"]!, seed: 2 }).slice(0, 250);
  const workers = 2;
  const numGpuBlocks = 300;
  for (
    const [mode, hostBlocks] of [["kv", 0], ["round-robin", 0], ["kv", 100], [
      "round-robin",
      100,
    ]] as const
  ) {
    const bound = capacityHitRates(trace, 16, workers * (numGpuBlocks + hostBlocks));
    assert.ok(bound.belady < prefixCeiling(trace).tokens - 0.05, "the capacity binds");
    const { results } = simulate(trace, {
      workers,
      mode,
      load: 4,
      blockSize: 16,
      numGpuBlocks,
      hostBlocks,
    });
    let cached = 0;
    let prompt = 0;
    for (const r of results) {
      cached += r.cachedTokens ?? 0;
      prompt += r.promptTokens;
    }
    assert.ok(cached > 0);
    assert.ok(
      cached / prompt <= bound.belady,
      `${mode}, ${hostBlocks} host blocks: ${cached / prompt} > ${bound.belady}`,
    );
  }
});

Deno.test("capacityHitRates: a bad block size or capacity is refused", () => {
  const trace = oneBlockPrompts([1]);
  assert.throws(() => capacityHitRates(trace, 0, 1), /blockSize/);
  assert.throws(() => capacityHitRates(trace, 16, -1), /capacityBlocks/);
  assert.throws(() => capacityHitRates(trace, 16, NaN), /capacityBlocks/);
});
