// KvEventIntake units: what a flood of forged state-dump chunks can and cannot do.

import assert from "node:assert/strict";
import { silentLogger } from "../../runtime/logger.ts";
import { KvEventIntake, MAX_OPEN_DUMPS } from "./event_intake.ts";
import type { KvStateChunk } from "./protocols.ts";
import { RadixTree } from "./radix_tree.ts";

function intake(): { tree: RadixTree; intake: KvEventIntake } {
  const tree = new RadixTree();
  return {
    tree,
    intake: new KvEventIntake(tree, {
      logger: silentLogger,
      signal: AbortSignal.abort(), // no resync requests
      requestResync: () => Promise.resolve(),
    }),
  };
}

const chunk = (worker: string, nonce: string, index: number, last: boolean): KvStateChunk => ({
  worker_id: worker,
  nonce,
  last_event_id: 4,
  index,
  last,
  entries: [{
    block_hash: BigInt(index + 1),
    parent_hash: index ? BigInt(index) : null,
    tokens_hash: 7n,
  }],
});

Deno.test("KvEventIntake keeps at most MAX_OPEN_DUMPS dumps open; the oldest goes first", () => {
  const { tree, intake: ix } = intake();
  ix.applyChunk(chunk("w", "first", 0, false));
  for (let i = 0; i < MAX_OPEN_DUMPS; i++) ix.applyChunk(chunk(`forged${i}`, `n${i}`, 0, false));
  // The first dump was evicted: its last chunk has nothing to finish.
  ix.applyChunk(chunk("w", "first", 1, true));
  assert.equal(tree.blockCount("w"), 0);
  // A dump started now still completes.
  ix.applyChunk(chunk("v", "fresh", 0, false));
  ix.applyChunk(chunk("v", "fresh", 1, true));
  assert.equal(tree.blockCount("v"), 2);
  ix.close();
});
