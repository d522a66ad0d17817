import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { computeBlockHashesSync } from "./hashing.ts";
import { PendingPrefills } from "./pending_prefills.ts";

const prompt = (n: number, salt = 0) =>
  computeBlockHashesSync(Array.from({ length: n }, (_, i) => i + 1 + salt * 100_000), 16);

Deno.test("PendingPrefills counts a prompt's blocks on its worker until its first token", () => {
  const pending = new PendingPrefills();
  const a = prompt(64);
  pending.add("a", "w1", a.local, a.sequence);
  assert.equal(pending.size, 1);
  // A longer prompt with the same start matches the 4 pending blocks.
  assert.deepEqual(pending.findMatches(prompt(96).local).scores, new Map([["w1", 4]]));
  assert.equal(pending.findMatches(prompt(64, 1).local).scores.size, 0);
  pending.done("a");
  pending.done("a"); // idempotent
  assert.equal(pending.size, 0);
  assert.equal(pending.findMatches(a.local).scores.size, 0);
});

Deno.test("PendingPrefills keeps blocks another pending request on the same worker shares", () => {
  const pending = new PendingPrefills();
  const short = prompt(32);
  const long = prompt(80);
  pending.add("s", "w1", short.local, short.sequence);
  pending.add("l", "w1", long.local, long.sequence);
  pending.add("o", "w2", short.local, short.sequence);
  assert.deepEqual(pending.findMatches(long.local).scores, new Map([["w1", 5], ["w2", 2]]));
  pending.done("l");
  // w1 still prefills the short prompt: its 2 blocks stay, the long prompt's others go.
  assert.deepEqual(pending.findMatches(long.local).scores, new Map([["w1", 2], ["w2", 2]]));
  pending.removeWorker("w1");
  assert.deepEqual(pending.findMatches(long.local).scores, new Map([["w2", 2]]));
  assert.equal(pending.size, 1);
});

Deno.test("PendingPrefills rejects a request recorded twice and mismatched hashes", () => {
  const pending = new PendingPrefills();
  const a = prompt(32);
  pending.add("a", "w1", a.local, a.sequence);
  assert.throws(() => pending.add("a", "w2", a.local, a.sequence), InvalidArgumentError);
  assert.throws(
    () => pending.add("b", "w1", a.local, a.sequence.slice(1)),
    (err: unknown) => err instanceof InvalidArgumentError && /differ in length/.test(err.message),
  );
  // An empty prompt (no full block) is recorded and matches nothing.
  pending.add("e", "w1", [], []);
  pending.done("e");
});
