// DecodeKvCache's notification intake: forged and malformed notifications from a peer are
// ignored or kept only up to a bound, and never disturb a request that waits.

import assert from "node:assert/strict";
import { TransferAgent } from "../../native/mod.ts";
import { DecodeKvCache, MAX_LATE_NOTIFS } from "./kv_cache.ts";
import { prefillDoneNotif } from "./protocol.ts";

Deno.test("DecodeKvCache keeps at most MAX_LATE_NOTIFS late notifications and ignores garbage", async () => {
  const decodeAgent = new TransferAgent("decode-notifs");
  const forger = new TransferAgent("forger");
  const kv = new DecodeKvCache(decodeAgent, { numBlocks: 2, blockBytes: 64 });
  try {
    forger.addRemoteAgent(decodeAgent.getAgentMetadata());
    const waiting = kv.waitPrefilled("real", { timeoutMs: 5000 });
    // Garbage bodies and an empty id are ignored; a long id is kept like any other.
    for (const body of ["", "hello", "prefill_done:", `prefill_done:${"x".repeat(900)}`]) {
      forger.sendNotif("decode-notifs", body);
    }
    // More forged ids than the bound, drained as they come (the queue has 1024 slots).
    for (let i = 0; i <= MAX_LATE_NOTIFS; i++) {
      forger.sendNotif("decode-notifs", prefillDoneNotif(`forged-${i}`));
      if (i % 512 === 511) kv.takeLate("none");
    }
    assert.equal(kv.takeLate("forged-0"), false, "the oldest forged id was dropped");
    assert.equal(kv.takeLate(`forged-${MAX_LATE_NOTIFS}`), true);
    assert.equal(kv.takeLate(""), false);
    forger.sendNotif("decode-notifs", prefillDoneNotif("real"));
    await waiting;
  } finally {
    kv.close();
    forger.close();
    decodeAgent.close();
  }
});
