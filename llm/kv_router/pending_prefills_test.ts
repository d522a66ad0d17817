import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { computeBlockHashesSync } from "./hashing.ts";
import { PendingPrefills } from "./pending_prefills.ts";

const prompt = (n: number, salt = 0) =>
  computeBlockHashesSync(Array.from({ length: n }, (_, i) => i + 1 + salt * 100_000), 16);

Deno.test("PendingPrefills counts a prompt's blocks on its worker until its first token", () => {
  const pending = new PendingPrefills();
  const a = prompt(64);
  pending.add("a", "w1", a.sequence);
  assert.equal(pending.size, 1);
  // A longer prompt with the same start matches the 4 pending blocks.
  assert.deepEqual(pending.findMatches(prompt(96).sequence).scores, new Map([["w1", 4]]));
  assert.equal(pending.findMatches(prompt(64, 1).sequence).scores.size, 0);
  pending.done("a");
  pending.done("a"); // idempotent
  assert.equal(pending.size, 0);
  assert.equal(pending.findMatches(a.sequence).scores.size, 0);
});

Deno.test("PendingPrefills keeps blocks another pending request on the same worker shares", () => {
  const pending = new PendingPrefills();
  const short = prompt(32);
  const long = prompt(80);
  pending.add("s", "w1", short.sequence);
  pending.add("l", "w1", long.sequence);
  pending.add("o", "w2", short.sequence);
  assert.deepEqual(pending.findMatches(long.sequence).scores, new Map([["w1", 5], ["w2", 2]]));
  pending.done("l");
  // w1 still prefills the short prompt: its 2 blocks stay, the long prompt's others go.
  assert.deepEqual(pending.findMatches(long.sequence).scores, new Map([["w1", 2], ["w2", 2]]));
  pending.removeWorker("w1");
  assert.deepEqual(pending.findMatches(long.sequence).scores, new Map([["w2", 2]]));
  assert.equal(pending.size, 1);
});

Deno.test("PendingPrefills rejects a request recorded twice", () => {
  const pending = new PendingPrefills();
  const a = prompt(32);
  pending.add("a", "w1", a.sequence);
  assert.throws(() => pending.add("a", "w2", a.sequence), InvalidArgumentError);
  assert.deepEqual(pending.findMatches(a.sequence).scores, new Map([["w1", 2]]));
  // An empty prompt (no full block) is recorded and matches nothing.
  pending.add("e", "w1", []);
  assert.equal(pending.findMatches([]).scores.size, 0);
  pending.done("e");
  assert.equal(pending.size, 1);
});

Deno.test("PendingPrefills finds the longest pending prefix of every worker, like a tree walk", () => {
  // Prompts branching from shared starts, on 4 workers, some finished: each worker's score is
  // the longest prefix of the query that one of its pending prompts shares, checked against a
  // direct comparison of the hashes.
  const blocks = 16;
  const tokens = (seed: number, branchAt: number) =>
    Array.from(
      { length: 40 * blocks },
      (_, i) => i < branchAt * blocks ? i + 1 : i + 1 + seed * 1e6,
    );
  const prompts = Array.from({ length: 24 }, (_, k) => {
    const ids = tokens(k + 1, (k * 7) % 41).slice(0, ((k * 13) % 40 + 1) * blocks);
    return { worker: `w${k % 4}`, sequence: computeBlockHashesSync(ids, blocks).sequence };
  });
  const pending = new PendingPrefills();
  prompts.forEach((p, k) => pending.add(`r${k}`, p.worker, p.sequence));
  for (let k = 0; k < prompts.length; k += 3) pending.done(`r${k}`);
  const live = prompts.filter((_, k) => k % 3 !== 0);
  for (let q = 0; q < 12; q++) {
    const query = computeBlockHashesSync(tokens(100 + q, (q * 5) % 41), blocks).sequence;
    const expected = new Map<string, number>();
    for (const p of live) {
      let d = 0;
      while (d < p.sequence.length && d < query.length && p.sequence[d] === query[d]) d++;
      if (d > 0) expected.set(p.worker, Math.max(expected.get(p.worker) ?? 0, d));
    }
    assert.deepEqual(pending.findMatches(query).scores, expected, `query ${q}`);
  }
});

Deno.test("PendingPrefills forgets a worker's blocks with its last pending request, in any order", () => {
  const pending = new PendingPrefills();
  const a = prompt(48);
  const b = prompt(96);
  for (const order of [["a", "b"], ["b", "a"]]) {
    pending.add("a", "w1", a.sequence);
    pending.add("b", "w1", b.sequence);
    pending.done(order[0]!);
    const left = order[0] === "a" ? 6 : 3;
    assert.deepEqual(pending.findMatches(b.sequence).scores, new Map([["w1", left]]));
    pending.done(order[1]!);
    assert.equal(pending.findMatches(b.sequence).scores.size, 0);
    assert.equal(pending.size, 0);
  }
  // The worker's next prompt starts from nothing left over.
  pending.add("c", "w1", a.sequence);
  assert.deepEqual(pending.findMatches(b.sequence).scores, new Map([["w1", 3]]));
});
