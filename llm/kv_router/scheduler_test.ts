import { deepStrictEqual as assertEquals, throws as assertThrows } from "node:assert/strict";
import fc from "fast-check";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { ActiveSequences, defaultCosts, pickByCost, type WorkerCandidate } from "./scheduler.ts";

const candidate = (id: string, over: Partial<WorkerCandidate> = {}): WorkerCandidate => ({
  workerId: id,
  overlapBlocks: 0,
  requestBlocks: 10,
  activeBlocks: 0,
  prefillBlocks: 0,
  activeRequests: 0,
  ...over,
});

Deno.test("defaultCosts prefers the worker with the longer cached prefix", () => {
  const costs = defaultCosts([candidate("a", { overlapBlocks: 8 }), candidate("b")], 1);
  assertEquals(costs.get("a"), 2 + 10);
  assertEquals(costs.get("b"), 10 + 10);
  assertEquals(pickByCost(costs, 0), "a");
});

Deno.test("defaultCosts weighs predicted load against the cached prefix", () => {
  // a has the prefix but holds 50 active blocks; b is idle.
  const cands = [candidate("a", { overlapBlocks: 8, activeBlocks: 50 }), candidate("b")];
  assertEquals(pickByCost(defaultCosts(cands, 1), 0), "b");
  // With a heavy overlap weight the cached prefix wins again.
  assertEquals(pickByCost(defaultCosts(cands, 10), 0), "a");
});

Deno.test("defaultCosts: the queued-prefill weight trades a cached prefix against queued prompts", () => {
  // a caches 8 of the 10 blocks but has 20 blocks of other prompts still to prefill; b is idle.
  const cands = [candidate("a", { overlapBlocks: 8, prefillBlocks: 20 }), candidate("b")];
  const reference = defaultCosts(cands, 16);
  assertEquals(reference, defaultCosts(cands, 16, 1), "1 is the reference cost");
  assertEquals(reference.get("a"), 16 * (2 + 20) + 10);
  assertEquals(pickByCost(reference, 0), "b", "the reference spreads queued prefill");
  const light = defaultCosts(cands, 16, 0.1);
  assertEquals(light.get("a"), 16 * (2 + 2) + 10);
  assertEquals(pickByCost(light, 0), "a", "a light queue weight keeps the cached prefix");
});

Deno.test("pickByCost at temperature 0 breaks ties at random among the cheapest", () => {
  const costs = new Map([["a", 1], ["b", 1], ["c", 2]]);
  assertEquals(pickByCost(costs, 0, () => 0), "a");
  assertEquals(pickByCost(costs, 0, () => 0.99), "b");
});

Deno.test("pickByCost with a temperature samples cheaper workers more often", () => {
  const costs = new Map([["cheap", 0], ["dear", 100]]);
  let seed = 1;
  const random = () => ((seed = (seed * 16807) % 2147483647) - 1) / 2147483646;
  const counts = { cheap: 0, dear: 0 };
  for (let i = 0; i < 2000; i++) counts[pickByCost(costs, 0.5, random) as "cheap" | "dear"]++;
  // weights 1 and e^-2: about 88% cheap.
  assertEquals(counts.cheap > 1600 && counts.cheap < 1900, true, JSON.stringify(counts));
});

Deno.test("pickByCost always returns one of the workers", () => {
  fc.assert(fc.property(
    fc.array(
      fc.tuple(fc.string({ minLength: 1 }), fc.double({ noNaN: true, noDefaultInfinity: true })),
      {
        minLength: 1,
      },
    ),
    fc.double({ min: 0, max: 5, noNaN: true }),
    fc.double({ min: 0, max: 0.999999, noNaN: true }),
    (entries, temperature, r) => {
      const costs = new Map(entries);
      return costs.has(pickByCost(costs, temperature, () => r));
    },
  ));
});

Deno.test("pickByCost rejects an empty set of workers", () => {
  assertThrows(() => pickByCost(new Map(), 0), InvalidArgumentError);
});

Deno.test("pickByCost rejects a cost that is not a finite number, naming the worker", () => {
  const bad: [Map<string, number>, number, RegExp][] = [
    [new Map([["a", NaN], ["b", NaN]]), 0, /worker "a" must be a finite number, got NaN/],
    [new Map([["a", 1], ["b", NaN]]), 0.5, /worker "b" must be a finite number, got NaN/],
    [new Map([["a", 1], ["b", Infinity]]), 0, /worker "b" .* got Infinity/],
    [new Map([["a", -Infinity]]), 1, /worker "a" .* got -Infinity/],
    [new Map([["a", "3" as unknown as number]]), 0, /worker "a" .* got 3/],
  ];
  for (const [costs, temperature, message] of bad) {
    assertThrows(() => pickByCost(costs, temperature, () => 0.5), (err: unknown) => {
      return err instanceof InvalidArgumentError && message.test(err.message);
    }, `${[...costs]} at temperature ${temperature}`);
  }
});

Deno.test("pickByCost with a temperature still weighs costs near the limits of a double", () => {
  // Their span overflows a double: the dear worker must not win by a NaN weight.
  const costs = new Map([["cheap", -1e308], ["dear", 1e308]]);
  assertEquals(pickByCost(costs, 0.01, () => 0.5), "cheap");
});

Deno.test("ActiveSequences predicts load from prefill to finish", () => {
  const seqs = new ActiveSequences(16);
  seqs.add("r1", "w1", 100, 2); // 7 blocks, 5 uncached
  assertEquals(seqs.load("w1"), { activeBlocks: 7, prefillBlocks: 5, requests: 1, waiting: 1 });
  seqs.progress("r1", 1); // first token: prefill done, 101 tokens still 7 blocks
  assertEquals(seqs.load("w1"), { activeBlocks: 7, prefillBlocks: 0, requests: 1, waiting: 0 });
  seqs.progress("r1", 12); // 113 tokens: 8 blocks
  assertEquals(seqs.load("w1").activeBlocks, 8);
  assertEquals(seqs.has("r1"), true);
  seqs.free("r1");
  assertEquals(seqs.has("r1"), false);
  assertEquals(seqs.load("w1"), { activeBlocks: 0, prefillBlocks: 0, requests: 0, waiting: 0 });
  assertEquals(seqs.size, 0);
  // A request that ends before its first token stops waiting too.
  seqs.add("r2", "w1", 100, 0);
  seqs.add("r3", "w1", 100, 0);
  assertEquals(seqs.load("w1").waiting, 2);
  seqs.free("r2");
  assertEquals(seqs.load("w1").waiting, 1);
});

Deno.test("ActiveSequences keeps its totals equal to the sum of its requests", () => {
  const op = fc.oneof(
    fc.record({
      k: fc.constant("add"),
      r: fc.nat(20),
      w: fc.nat(3),
      t: fc.nat(500),
      o: fc.nat(40),
    }),
    fc.record({ k: fc.constant("progress"), r: fc.nat(20), t: fc.nat(40) }),
    fc.record({ k: fc.constant("free"), r: fc.nat(20) }),
    fc.record({ k: fc.constant("remove"), w: fc.nat(3) }),
  );
  fc.assert(fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
    const seqs = new ActiveSequences(16);
    const model = new Map<
      string,
      { w: string; tokens: number; prefill: number; started: boolean }
    >();
    for (const o of ops) {
      if (o.k === "add") {
        const id = `r${o.r}`;
        if (model.has(id)) continue;
        seqs.add(id, `w${o.w}`, o.t, o.o);
        model.set(id, {
          w: `w${o.w}`,
          tokens: o.t,
          prefill: Math.max(0, Math.ceil(o.t / 16) - o.o),
          started: false,
        });
      } else if (o.k === "progress") {
        const m = model.get(`r${o.r}`);
        seqs.progress(`r${o.r}`, o.t);
        if (m) {
          m.prefill = 0;
          m.tokens += o.t;
          m.started = true;
        }
      } else if (o.k === "free") {
        seqs.free(`r${o.r}`);
        model.delete(`r${o.r}`);
      } else {
        seqs.removeWorker(`w${o.w}`);
        for (const [id, m] of model) if (m.w === `w${o.w}`) model.delete(id);
      }
    }
    for (const w of ["w0", "w1", "w2", "w3"]) {
      const mine = [...model.values()].filter((m) => m.w === w);
      assertEquals(seqs.load(w), {
        activeBlocks: mine.reduce((s, m) => s + Math.ceil(m.tokens / 16), 0),
        prefillBlocks: mine.reduce((s, m) => s + m.prefill, 0),
        requests: mine.length,
        waiting: mine.filter((m) => !m.started).length,
      });
    }
    assertEquals(seqs.size, model.size);
  }));
});
