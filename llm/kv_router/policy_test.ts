import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { predictedTtftCosts, RoutingPolicy, WAITING_DELAY_SHARE, withPeerFetch } from "./policy.ts";
import { TtftModel } from "./ttft_model.ts";
import type { WorkerCandidate } from "./scheduler.ts";

const worker = (id: string, o: Partial<WorkerCandidate> = {}): WorkerCandidate => ({
  workerId: id,
  overlapBlocks: 0,
  requestBlocks: 128,
  activeBlocks: 0,
  prefillBlocks: 0,
  activeRequests: 0,
  ...o,
});

Deno.test("RoutingPolicy's default cost keeps a prompt on the worker caching it despite its decode load", () => {
  const policy = new RoutingPolicy(16);
  assert.equal(policy.weighted, false);
  // a holds 120 of 128 blocks and runs requests holding 1,500 blocks; b is idle.
  const all = [
    worker("a", { overlapBlocks: 120, activeBlocks: 1500, activeRequests: 6 }),
    worker("b"),
  ];
  assert.equal(policy.choose(all, { totalRequests: 6 }).workerId, "a");
  // The reference's weighted cost at weight 1 sends it away: decode blocks count as much as prefill.
  const weighted = new RoutingPolicy(16, { overlapScoreWeight: 1 });
  assert.equal(weighted.choose(all, { totalRequests: 6 }).workerId, "b");
});

Deno.test("RoutingPolicy sends a prompt elsewhere when the holder's prefill queue outweighs the hit", () => {
  const policy = new RoutingPolicy(16);
  const all = [
    worker("a", { overlapBlocks: 64, prefillBlocks: 2000, activeRequests: 3 }),
    worker("b"),
  ];
  assert.equal(policy.choose(all, { totalRequests: 3 }).workerId, "b");
});

Deno.test("RoutingPolicy: bounded load, then busy workers, leave the pool only while others remain", () => {
  const policy = new RoutingPolicy(16, { loadBound: 1.5 });
  // 8 workers, 16 in flight: mean 17/8, bound 1.5 * 2.125 + 2 = 5.19; a has 6.
  const all = [
    worker("a", { overlapBlocks: 128, activeRequests: 6 }),
    ...Array.from({ length: 7 }, (_, i) => worker(`w${i}`, { activeRequests: 1 })),
  ];
  assert.equal(policy.eligible(all, { totalRequests: 16 }).some((c) => c.workerId === "a"), false);
  const unbounded = new RoutingPolicy(16, { loadBound: Infinity });
  assert.equal(unbounded.choose(all, { totalRequests: 16 }).workerId, "a");
  // Everyone over the bound: nobody is left out.
  const crowded = all.map((c) => ({ ...c, activeRequests: 9 }));
  assert.equal(policy.eligible(crowded, { totalRequests: 16 }).length, 8);
  // Busy: skipped while another is free; all busy: all stay.
  const busy = (c: WorkerCandidate) => c.workerId !== "w3";
  assert.deepEqual(policy.eligible(all, { totalRequests: 16, busy }).map((c) => c.workerId), [
    "w3",
  ]);
  assert.equal(policy.eligible(all, { totalRequests: 16, busy: () => true }).length, 7);
});

Deno.test("RoutingPolicy refuses options out of range", () => {
  assert.throws(() => new RoutingPolicy(0), InvalidArgumentError);
  assert.throws(() => new RoutingPolicy(16, { loadBound: 0.5 }), InvalidArgumentError);
  assert.throws(() => new RoutingPolicy(16, { overlapScoreWeight: -1 }), InvalidArgumentError);
  assert.throws(() => new RoutingPolicy(16, { temperature: -1 }), InvalidArgumentError);
});

Deno.test("RoutingPolicy takes a prompt nobody caches in turn among the workers near the cheapest", () => {
  const policy = new RoutingPolicy(16);
  // c carries twice the others' running KV: beyond the near-tie band, it is left out.
  const all = [
    worker("a", { activeBlocks: 100 }),
    worker("b"),
    worker("c", { activeBlocks: 60_000 }),
  ];
  const picks = Array.from({ length: 6 }, () => policy.choose(all, { totalRequests: 0 }).workerId);
  assert.deepEqual(picks, ["a", "b", "a", "b", "a", "b"]);
  // A prompt one of them caches goes to that one, not in turn.
  const cached = [worker("a"), worker("b", { overlapBlocks: 100 })];
  for (let i = 0; i < 3; i++) {
    assert.equal(policy.choose(cached, { totalRequests: 0 }).workerId, "b");
  }
});

Deno.test("RoutingPolicy's default cost counts the delay a prompt's prefill adds to the requests waiting there", () => {
  // Both hold half of the prompt (64 of 128 blocks: 1,024 uncached tokens). a has nothing queued
  // but 12 requests waiting for their first token; b has 32 blocks (512 tokens) queued and none
  // waiting. On its own TTFT a is cheaper (1,024 against 1,536 tokens to prefill); with the
  // delay its 1,024 tokens add to a's 12 waiting requests (and the mean, 6), b is.
  const all = [
    worker("a", { overlapBlocks: 64, waitingRequests: 12, activeRequests: 12 }),
    worker("b", { overlapBlocks: 64, prefillBlocks: 32, activeRequests: 1 }),
  ];
  const model = new TtftModel();
  const costs = predictedTtftCosts(all, 16, model);
  const msPerToken = model.coefficients().msPerKTokens / 1000;
  const own = (tokens: number) => model.predict({ prefillTokens: tokens, activeBlocks: 128 });
  const delay = (waiting: number) => WAITING_DELAY_SHARE * waiting * msPerToken * 1024;
  assert.equal(costs.get("a"), own(1024) + delay(12 + 6));
  assert.equal(costs.get("b"), own(1536) + delay(0 + 6));
  // (Bounded load off: it would leave out a, with 12 of the 13 requests, by itself.)
  const policy = new RoutingPolicy(16, { loadBound: Infinity });
  assert.equal(policy.choose(all, { totalRequests: 13 }).workerId, "b");
  // Without waiting requests a is cheaper, as before.
  const calm = [{ ...all[0]!, waitingRequests: 0 }, all[1]!];
  assert.equal(policy.choose(calm, { totalRequests: 13 }).workerId, "a");
});

Deno.test("RoutingPolicy's default cost: with requests waiting in the fleet, a prefix is not computed again on an idle worker", () => {
  // a holds 120 of 128 blocks behind 2,000 queued tokens; b is idle and holds nothing; c is
  // swamped (40 waiting, a long queue). By TTFT alone b wins (2,048 tokens to prefill against
  // 2,128), but with 40 / 3 requests waiting per worker, b's 2,048 tokens delay more of them
  // than a's 128.
  const all = [
    worker("a", { overlapBlocks: 120, prefillBlocks: 125 }),
    worker("b"),
    worker("c", { waitingRequests: 40, activeRequests: 40, prefillBlocks: 20_000 }),
  ];
  const policy = new RoutingPolicy(16, { loadBound: Infinity });
  assert.equal(policy.choose(all, { totalRequests: 40 }).workerId, "a");
  // Nobody waiting: b.
  const calm = [all[0]!, all[1]!, { ...all[2]!, waitingRequests: 0 }];
  assert.equal(policy.choose(calm, { totalRequests: 40 }).workerId, "b");
});

Deno.test("predictedTtftCosts adds no waiting delay for a prompt nobody caches", () => {
  const all = [worker("a", { waitingRequests: 20 }), worker("b")];
  const costs = predictedTtftCosts(all, 16, new TtftModel());
  assert.equal(costs.get("a"), costs.get("b"));
});

Deno.test("withPeerFetch: workers that can fetch take the best holder's prefix, to copy from it", () => {
  const all = [
    worker("a", { overlapBlocks: 100, fetchMsPerBlock: 0.1 }),
    worker("b", { overlapBlocks: 20, fetchMsPerBlock: 0.1 }),
    worker("c", { overlapBlocks: 20 }), // cannot fetch
    // d's overlap is a prompt still being prefilled there: nothing to copy from it yet.
    worker("d", { overlapBlocks: 120, fetchMsPerBlock: 0.1 }),
  ];
  const resident = new Map([["a", 100], ["b", 20], ["c", 20]]);
  const [a, b, c, d] = withPeerFetch(all, resident);
  assert.deepEqual([a, c, d], [all[0], all[2], all[3]]);
  assert.equal(b!.overlapBlocks, 100);
  assert.equal(b!.fetchBlocks, 80);
  assert.equal(b!.fetchFrom, "a");
  // A holder that cannot serve its blocks is no source.
  const noSource = withPeerFetch([worker("a", { overlapBlocks: 100 }), all[1]!], resident);
  assert.equal(noSource[1]!.fetchBlocks, undefined);
  // Nobody holds anything: nothing changes.
  assert.deepEqual(withPeerFetch(all, new Map()), all);
});

Deno.test("predictedTtftCosts: a copy costs its blocks' time; the pass in flight its time left", () => {
  const model = new TtftModel();
  const msPerToken = model.coefficients().msPerKTokens / 1000;
  const [base] = predictedTtftCosts([worker("a", { overlapBlocks: 100 })], 16, model).values();
  const [copied] = predictedTtftCosts(
    [worker("a", { overlapBlocks: 100, fetchBlocks: 80, fetchMsPerBlock: 0.1 })],
    16,
    model,
  ).values();
  assert.ok(Math.abs(copied! - base! - 8) < 1e-9);
  // 2,000 tokens queued, 1,000 of them in the pass in flight, which ends in 5 ms: the cost counts
  // the 1,000 in flight as 5 ms instead of their predicted prefill time.
  const queued = worker("a", { overlapBlocks: 100, prefillBlocks: 125 });
  const [counted] = predictedTtftCosts([queued], 16, model).values();
  const [timed] = predictedTtftCosts(
    [{ ...queued, passLeftMs: 5, passPrefillTokens: 1000 }],
    16,
    model,
  ).values();
  assert.ok(Math.abs(timed! - (counted! - 1000 * msPerToken + 5)) < 1e-9);
  // In-flight tokens the book does not count are not taken off twice.
  const [unbooked] = predictedTtftCosts(
    [worker("a", { overlapBlocks: 100, passLeftMs: 5, passPrefillTokens: 1000 })],
    16,
    model,
  ).values();
  assert.ok(Math.abs(unbooked! - (base! + 5)) < 1e-9);
});

Deno.test("RoutingPolicy: a busy holder's prefix goes to a peer whose pass ends sooner, copied", () => {
  const policy = new RoutingPolicy(16);
  // a holds 120 of 128 blocks but its pass in flight has 25 ms left; b is idle and can copy.
  const all = withPeerFetch([
    worker("a", { overlapBlocks: 120, passLeftMs: 25, fetchMsPerBlock: 0.05 }),
    worker("b", { passLeftMs: 0, fetchMsPerBlock: 0.05 }),
  ], new Map([["a", 120]]));
  const chosen = policy.choose(all, { totalRequests: 0 });
  assert.equal(chosen.workerId, "b");
  assert.equal(chosen.fetchFrom, "a");
  assert.equal(chosen.overlapBlocks, 120);
  // Copying slowly costs more than the wait: it stays.
  const slow = withPeerFetch([
    worker("a", { overlapBlocks: 120, passLeftMs: 25, fetchMsPerBlock: 1 }),
    worker("b", { passLeftMs: 0, fetchMsPerBlock: 1 }),
  ], new Map([["a", 120]]));
  assert.equal(policy.choose(slow, { totalRequests: 0 }).workerId, "a");
  // Without pass timing the holder keeps it, as before.
  const untimed = withPeerFetch([
    worker("a", { overlapBlocks: 120, fetchMsPerBlock: 0.05 }),
    worker("b", { fetchMsPerBlock: 0.05 }),
  ], new Map([["a", 120]]));
  assert.equal(policy.choose(untimed, { totalRequests: 0 }).workerId, "a");
});

Deno.test("RoutingPolicy: with pass timing a prompt nobody caches goes where the pass ends first", () => {
  const policy = new RoutingPolicy(16);
  const all = [
    worker("a", { passLeftMs: 20 }),
    worker("b", { passLeftMs: 3 }),
    worker("c", { passLeftMs: 12 }),
  ];
  for (let i = 0; i < 4; i++) assert.equal(policy.choose(all, { totalRequests: 0 }).workerId, "b");
  // Without it, such prompts take turns among near-equal workers.
  const untimed = all.map(({ passLeftMs: _, ...c }) => c);
  const picks = new Set(
    Array.from({ length: 3 }, () => policy.choose(untimed, { totalRequests: 0 }).workerId),
  );
  assert.equal(picks.size, 3);
});

Deno.test("predictedTtftCosts: a copy that outlasts the pass in flight waits for half the next", () => {
  const model = new TtftModel();
  const [base] = predictedTtftCosts([worker("a", { overlapBlocks: 100 })], 16, model).values();
  const cost = (o: Partial<WorkerCandidate>) =>
    [...predictedTtftCosts([worker("a", { overlapBlocks: 100, ...o })], 16, model).values()][0]! -
    base!;
  // 20 ms of copying on a worker whose 30 ms pass has 5 ms left: the copy lands mid-pass of the
  // next one: 20 + 30 / 2.
  assert.ok(
    Math.abs(
      cost({ fetchBlocks: 200, fetchMsPerBlock: 0.1, passLeftMs: 5, passMs: 30 }) - 35,
    ) < 1e-9,
  );
  // A copy done before the pass in flight ends waits for that pass only.
  assert.ok(
    Math.abs(cost({ fetchBlocks: 20, fetchMsPerBlock: 0.1, passLeftMs: 5, passMs: 30 }) - 5) < 1e-9,
  );
  // Without pass timing the copy's time alone.
  assert.ok(Math.abs(cost({ fetchBlocks: 200, fetchMsPerBlock: 0.1 }) - 20) < 1e-9);
});

Deno.test("predicted TTFT: blocks copied up from host memory cost their copy, not their prefill", () => {
  const model = new TtftModel();
  const base = {
    requestBlocks: 20,
    activeBlocks: 0,
    prefillBlocks: 0,
    activeRequests: 0,
  };
  const costs = predictedTtftCosts(
    [
      { workerId: "device", overlapBlocks: 16, ...base },
      { workerId: "host", overlapBlocks: 16, onboardBlocks: 10, onboardMsPerBlock: 0.01, ...base },
      { workerId: "cold", overlapBlocks: 6, ...base },
    ],
    16,
    model,
  );
  assert.ok(Math.abs(costs.get("host")! - costs.get("device")! - 0.1) < 1e-9, "10 at 0.01 ms");
  assert.ok(costs.get("host")! < costs.get("cold")!, "cheaper than computing them");
});
