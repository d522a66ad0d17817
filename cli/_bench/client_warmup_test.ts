import assert from "node:assert/strict";
import { warmReplayClient } from "./client_warmup.ts";

Deno.test("warmReplayClient replays its synthetic requests against the stub, all answered", async () => {
  const warm = await warmReplayClient({ requests: 12, maxPromptTokens: 4096 });
  assert.equal(warm.requests, 12);
  assert.equal(warm.failed, 0);
  assert.ok(warm.ms > 0);
});
