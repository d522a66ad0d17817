import assert from "node:assert/strict";
import fc from "fast-check";
import { computeBlockHashesSync, computeLocalHashes } from "../../kv_router/hashing.ts";
import { RadixTree } from "../../kv_router/radix_tree.ts";
import type { KvCacheEventData } from "../../kv_router/protocols.ts";
import { KvBlockTracker } from "./kv_blocks.ts";

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

Deno.test("KvBlockTracker stores a sequence's full blocks once, with their parent chain", () => {
  const events: KvCacheEventData[] = [];
  const t = new KvBlockTracker<string>(4, (e) => events.push(e));
  t.update("a", range(0, 10)); // two full blocks, a partial tail
  const { local, sequence } = computeBlockHashesSync(range(0, 10), 4);
  assert.deepEqual(events, [{
    stored: {
      parent_hash: null,
      blocks: [
        { block_hash: sequence[0], tokens_hash: local[0] },
        { block_hash: sequence[1], tokens_hash: local[1] },
      ],
    },
  }]);
  events.length = 0;
  t.update("a", range(0, 13)); // a third block fills: stored under the second
  assert.equal(events.length, 1);
  const stored = events[0] as { stored: { parent_hash: bigint | null } };
  assert.equal(stored.stored.parent_hash, sequence[1]);
  events.length = 0;
  t.update("a", range(0, 13)); // nothing changed, nothing said
  assert.deepEqual(events, []);
});

Deno.test("KvBlockTracker removes a block only when the last sequence holding it lets go", () => {
  const events: KvCacheEventData[] = [];
  const t = new KvBlockTracker<string>(4, (e) => events.push(e));
  t.update("a", range(0, 8));
  t.update("b", [...range(0, 4), 99, 98, 97, 96]); // shares block 0 with a
  assert.equal(t.blockCount, 3);
  events.length = 0;
  t.update("a", []); // a cleared: its second block goes, the shared first stays
  const { sequence } = computeBlockHashesSync(range(0, 8), 4);
  assert.deepEqual(events, [{ removed: { block_hashes: [sequence[1]] } }]);
  assert.equal(t.blockCount, 2);
});

Deno.test("KvBlockTracker's events keep a radix tree equal to what the sequences hold", () => {
  // Random edits of a few sequences (truncate to a shared prefix, then extend), as the engine's
  // prefix reuse does; a radix tree fed the events must find exactly the held prefixes.
  const block = 4;
  fc.assert(fc.property(
    fc.array(
      fc.record({
        seq: fc.integer({ min: 0, max: 2 }),
        keep: fc.integer({ min: 0, max: 24 }),
        add: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 12 }),
      }),
      { maxLength: 30 },
    ),
    (edits) => {
      const tree = new RadixTree();
      const t = new KvBlockTracker<number>(block, (data) => {
        assert.ok(tree.apply("w", data), "the tree accepts every event");
      });
      const held: number[][] = [[], [], []];
      for (const e of edits) {
        held[e.seq] = [...held[e.seq]!.slice(0, e.keep), ...e.add];
        t.update(e.seq, held[e.seq]!);
      }
      const expected = new Set<bigint>();
      for (const h of held) {
        for (const s of computeBlockHashesSync(h, block).sequence) expected.add(s);
      }
      assert.deepEqual(new Set(t.blocks()), expected);
      for (const h of held) {
        const full = Math.floor(h.length / block);
        const scores = tree.findMatches(computeLocalHashes(h, block));
        assert.equal(scores.scores.get("w") ?? 0, full);
      }
    },
  ));
});
