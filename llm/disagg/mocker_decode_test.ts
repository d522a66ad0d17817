import assert from "node:assert/strict";
import { BlockManager } from "../engines/mocker/block_manager.ts";
import type { KvCacheEventData } from "../engines/mocker/kv_types.ts";
import { hashPromptBlocks } from "../engines/mocker/scheduler.ts";
import { loadPromptBlocks } from "./mocker_decode.ts";

const PROMPT = Array.from({ length: 100 }, (_, i) => 40 + i); // 6 full blocks + 4 tokens

Deno.test("loadPromptBlocks caches a prompt's full blocks, evictable, with one stored event", () => {
  const events: KvCacheEventData[] = [];
  const bm = new BlockManager({ numGpuBlocks: 32, blockSize: 16, onEvent: (e) => events.push(e) });
  const hashes = hashPromptBlocks(PROMPT, 16).map((b) => b.sequenceHash);
  assert.equal(loadPromptBlocks(bm, PROMPT), 6);
  assert.equal(bm.matchPrefix(hashes), 6);
  assert.equal(bm.activeBlocks, 0, "nothing stays held");
  assert.equal(bm.inactiveBlocks, 6);
  assert.deepEqual(bm.inactiveHashes(), hashes.toReversed(), "the tail is evicted first");
  assert.equal(events.length, 1);
  assert.deepEqual(
    events[0],
    {
      stored: {
        parent_hash: null,
        blocks: hashPromptBlocks(PROMPT, 16).map((b) => ({
          block_hash: b.sequenceHash,
          tokens_hash: b.localHash,
        })),
      },
    },
  );

  // A longer prompt with the same prefix adds only its new blocks, parented on the prefix.
  const longer = [...PROMPT.slice(0, 96), ...Array.from({ length: 40 }, (_, i) => 900 + i)];
  assert.equal(loadPromptBlocks(bm, longer), 8);
  assert.equal(events.length, 2);
  const stored = (events[1] as { stored: { parent_hash: bigint | null; blocks: unknown[] } })
    .stored;
  assert.equal(stored.parent_hash, hashes[5]);
  assert.equal(stored.blocks.length, 2);
});

Deno.test("loadPromptBlocks loads only what fits beside held blocks", () => {
  const bm = new BlockManager({ numGpuBlocks: 4, blockSize: 16 });
  bm.allocate(1); // held by a running sequence
  assert.equal(loadPromptBlocks(bm, PROMPT), 3);
  assert.equal(bm.activeBlocks, 1);
  assert.equal(bm.matchPrefix(hashPromptBlocks(PROMPT, 16).map((b) => b.sequenceHash)), 3);
});
