import assert from "node:assert/strict";
import { TransferAgent } from "../../native/mod.ts";
import { DecodeMemoryNotFoundError } from "./discovery.ts";
import { PrefillWorker } from "./prefill_worker.ts";
import type { RemotePrefillRequest } from "./protocol.ts";

function req(expiresAt: number): RemotePrefillRequest {
  return {
    request_id: "r1",
    token_ids: [1, 2, 3],
    block_size: 16,
    engine_agent: "decode-gone",
    first_block: 0,
    block_ids: [0],
    expires_at: expiresAt,
  };
}

Deno.test("PrefillWorker skips an expired request even when its decode worker is gone", async () => {
  using agent = new TransferAgent("prefill-t4");
  const worker = new PrefillWorker(agent, {
    blockBytes: 64,
    maxBlocks: 4,
    resolveDecode: (name) => Promise.reject(new DecodeMemoryNotFoundError(name, "k")),
    now: () => 1000,
  });
  try {
    assert.deepEqual(await worker.handle(req(999)), {
      requestId: "r1",
      blocks: 0,
      skipped: true,
    });
    await assert.rejects(worker.handle(req(2000)), DecodeMemoryNotFoundError);
  } finally {
    worker.close();
  }
});
