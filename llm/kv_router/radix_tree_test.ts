// The radix tree against a brute-force model of what each worker caches, on random event
// sequences, plus the cases worth naming.

import assert from "node:assert/strict";
import fc from "fast-check";
import type { BlockHash } from "./hashing.ts";
import type { KvCacheEventData } from "./protocols.ts";
import { RadixTree } from "./radix_tree.ts";

const WORKERS = ["w0", "w1", "w2", "w3", "w4"];

type Op =
  | { kind: "stored"; w: number; parent: "none" | "held" | "bogus"; pick: number; blocks: number[] }
  | { kind: "removed"; w: number; picks: number[]; bogus: boolean }
  | { kind: "cleared"; w: number }
  | { kind: "removeWorker"; w: number };

const localHash = fc.integer({ min: 0, max: 3 });
const worker = fc.integer({ min: 0, max: WORKERS.length - 1 });
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("stored" as const),
      w: worker,
      parent: fc.constantFrom("none" as const, "held" as const, "held" as const, "bogus" as const),
      pick: fc.nat(),
      blocks: fc.array(localHash, { minLength: 1, maxLength: 4 }),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("removed" as const),
      w: worker,
      picks: fc.array(fc.nat(), { maxLength: 3 }),
      bogus: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("cleared" as const), w: worker }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("removeWorker" as const), w: worker }) },
);

/** Brute force: per worker, sequence hash -> path of local hashes. */
class Model {
  readonly held = new Map<string, Map<BlockHash, string>>();
  readonly #seq = new Map<string, BlockHash>();

  /** The sequence hash of a path: unique per path, as real chained hashes are. */
  seq(path: string): BlockHash {
    let h = this.#seq.get(path);
    if (h === undefined) this.#seq.set(path, h = BigInt(this.#seq.size + 1) * 7919n);
    return h;
  }

  paths(w: string): string[] {
    return [...(this.held.get(w)?.values() ?? [])];
  }

  apply(w: string, data: KvCacheEventData): boolean {
    if (data === "cleared") {
      this.held.get(w)?.clear();
      return true;
    }
    if ("removed" in data) {
      for (const h of data.removed.block_hashes) this.held.get(w)?.delete(h);
      return true;
    }
    const mine = this.held.get(w) ?? new Map<BlockHash, string>();
    this.held.set(w, mine);
    const { parent_hash, blocks } = data.stored;
    let path = "";
    if (parent_hash !== null) {
      const p = mine.get(parent_hash);
      if (p === undefined) return false;
      path = p;
    }
    for (const b of blocks) {
      path = `${path}/${b.tokens_hash}`;
      mine.set(b.block_hash, path);
    }
    return true;
  }

  scores(query: BlockHash[]): Map<string, number> {
    const out = new Map<string, number>();
    for (const [w, blocks] of this.held) {
      const paths = new Set(blocks.values());
      let k = 0;
      let path = "";
      while (k < query.length && paths.has(path = `${path}/${query[k]}`)) k++;
      if (k > 0) out.set(w, k);
    }
    return out;
  }

  /** Distinct prefixes of every held path: the nodes a pruned tree keeps. */
  nodeCount(): number {
    const prefixes = new Set<string>();
    for (const blocks of this.held.values()) {
      for (const path of blocks.values()) {
        const parts = path.split("/").slice(1);
        for (let i = 1; i <= parts.length; i++) prefixes.add(parts.slice(0, i).join("/"));
      }
    }
    return prefixes.size;
  }
}

/** Turns a generated op into an event against the model's current state. */
function toEvent(m: Model, o: Op): KvCacheEventData | "removeWorker" {
  const w = WORKERS[o.w]!;
  const held = m.paths(w);
  switch (o.kind) {
    case "cleared":
      return "cleared";
    case "removeWorker":
      return "removeWorker";
    case "removed": {
      const hashes = o.picks.map((p) => held.length ? m.seq(held[p % held.length]!) : 1n);
      if (o.bogus) hashes.push(m.seq("/9/9/9"));
      return { removed: { block_hashes: hashes } };
    }
    case "stored": {
      let parentPath = "";
      let parent_hash: BlockHash | null = null;
      if (o.parent === "held" && held.length > 0) {
        parentPath = held[o.pick % held.length]!;
        parent_hash = m.seq(parentPath);
      } else if (o.parent === "bogus") {
        parentPath = `/${o.pick % 4}/${(o.pick >> 2) % 4}`;
        parent_hash = m.seq(parentPath);
      }
      const blocks = o.blocks.map((b) => {
        parentPath = `${parentPath}/${b}`;
        return { block_hash: m.seq(parentPath), tokens_hash: BigInt(b) };
      });
      return { stored: { parent_hash, blocks } };
    }
  }
}

Deno.test("RadixTree scores match a brute-force model on random event sequences", () => {
  fc.assert(
    fc.property(
      fc.array(op, { maxLength: 60 }),
      fc.array(fc.array(localHash.map(BigInt), { maxLength: 8 }), { minLength: 1, maxLength: 12 }),
      (ops, queries) => {
        const tree = new RadixTree();
        const model = new Model();
        for (const o of ops) {
          const ev = toEvent(model, o);
          const w = WORKERS[o.w]!;
          if (ev === "removeWorker") {
            tree.removeWorker(w);
            model.held.delete(w);
            continue;
          }
          assert.equal(tree.apply(w, ev), model.apply(w, ev), `accepted ${JSON.stringify(o)}`);
        }
        for (const q of queries) {
          assert.deepEqual(
            [...tree.findMatches(q).scores].sort(),
            [...model.scores(q)].sort(),
            `query ${q}`,
          );
        }
        assert.equal(tree.size, model.nodeCount(), "nodes left after pruning");
        for (const w of WORKERS) assert.equal(tree.blockCount(w), model.held.get(w)?.size ?? 0);
      },
    ),
    { numRuns: 2000 },
  );
});

Deno.test("RadixTree scores the prefix a worker holds every block of", () => {
  const tree = new RadixTree();
  const stored = (parent: bigint | null, ...b: [bigint, bigint][]) => ({
    stored: { parent_hash: parent, blocks: b.map(([s, l]) => ({ block_hash: s, tokens_hash: l })) },
  });
  tree.apply("a", stored(null, [11n, 1n], [12n, 2n], [13n, 3n]));
  tree.apply("b", stored(null, [21n, 1n], [22n, 2n]));
  assert.deepEqual(tree.findMatches([1n, 2n, 3n, 4n]).scores, new Map([["a", 3], ["b", 2]]));
  // a loses its middle block: its prefix stops before it
  tree.apply("a", { removed: { block_hashes: [12n] } });
  assert.deepEqual(tree.findMatches([1n, 2n, 3n]).scores, new Map([["a", 1], ["b", 2]]));
  assert.deepEqual(tree.findMatches([2n]).scores, new Map());
  assert.deepEqual(tree.findMatches([]).scores, new Map());
});

Deno.test("RadixTree drops a stored event whose parent the worker does not hold", () => {
  const tree = new RadixTree();
  const ok = tree.apply("a", {
    stored: { parent_hash: 99n, blocks: [{ block_hash: 1n, tokens_hash: 1n }] },
  });
  assert.equal(ok, false);
  assert.equal(tree.size, 0);
});

Deno.test("RadixTree handles more than 64 workers on one prefix", () => {
  const tree = new RadixTree();
  for (let i = 0; i < 100; i++) {
    const blocks = Array.from({ length: i % 5 + 1 }, (_, d) => ({
      block_hash: BigInt(i * 10 + d),
      tokens_hash: BigInt(d),
    }));
    tree.apply(`w${i}`, { stored: { parent_hash: null, blocks } });
  }
  const scores = tree.findMatches([0n, 1n, 2n, 3n, 4n, 5n]).scores;
  assert.equal(scores.size, 100);
  for (let i = 0; i < 100; i++) assert.equal(scores.get(`w${i}`), i % 5 + 1);
  for (let i = 0; i < 100; i += 2) tree.removeWorker(`w${i}`);
  assert.equal(tree.findMatches([0n]).scores.size, 50);
  // freed indexes are reused without leaking old bits
  tree.apply("new", {
    stored: { parent_hash: null, blocks: [{ block_hash: 1n, tokens_hash: 7n }] },
  });
  assert.deepEqual(tree.findMatches([7n]).scores, new Map([["new", 1]]));
});

Deno.test("RadixTree counts lookups per block within the frequency window", () => {
  let now = 0;
  const tree = new RadixTree({ frequencyWindowMs: 100, now: () => now });
  tree.apply("a", {
    stored: {
      parent_hash: null,
      blocks: [{ block_hash: 1n, tokens_hash: 1n }, { block_hash: 2n, tokens_hash: 2n }],
    },
  });
  assert.deepEqual(tree.findMatches([1n, 2n]).frequencies, [1, 1]);
  now = 50;
  assert.deepEqual(tree.findMatches([1n]).frequencies, [2]);
  now = 120; // the first lookup left the window
  assert.deepEqual(tree.findMatches([1n, 2n]).frequencies, [2, 1]);
});

Deno.test("a clone holds the same blocks and workers, and changes apart from its original", () => {
  const tree = new RadixTree();
  const chain = (from: number, to: number, parent: bigint | null = null) => ({
    stored: {
      parent_hash: parent,
      blocks: Array.from({ length: to - from }, (_, i) => ({
        block_hash: BigInt(100 + from + i),
        tokens_hash: BigInt(from + i),
      })),
    },
  });
  tree.apply("a", chain(0, 3));
  tree.apply("b", chain(0, 2));
  tree.apply("b", chain(2, 4, 101n));
  tree.apply("gone", chain(0, 1));
  tree.removeWorker("gone"); // a free worker index, taken again below
  const copy = tree.clone();
  const q = [0n, 1n, 2n, 3n];
  assert.deepEqual(copy.findMatches(q).scores, tree.findMatches(q).scores);
  assert.deepEqual(copy.workers.sort(), ["a", "b"]);
  assert.equal(copy.size, tree.size);
  assert.deepEqual([...copy.blockHashes("b")].sort(), [100n, 101n, 102n, 103n]);
  copy.apply("a", { removed: { block_hashes: [102n] } });
  copy.apply("c", chain(0, 4));
  assert.deepEqual(copy.findMatches(q).scores, new Map([["a", 2], ["b", 4], ["c", 4]]));
  assert.deepEqual(tree.findMatches(q).scores, new Map([["a", 3], ["b", 4]]), "the original");
  copy.removeWorker("b");
  copy.removeWorker("c");
  copy.removeWorker("a");
  assert.equal(copy.size, 0, "every node pruned");
  assert.equal(tree.blockCount("b"), 4);
});
