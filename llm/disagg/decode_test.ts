// Decode + prefill in one process over the embedded queue and two transfer agents: long
// prompts go remote and arrive byte-exact, short ones stay local, a lost prefill worker
// means local prefill after the deadline.

import assert from "node:assert/strict";
import { TransferAgent } from "../../native/mod.ts";
import { Context } from "../../runtime/context.ts";
import { echoEngine } from "../engines/echo.ts";
import type { PreprocessedRequest } from "../protocols.ts";
import { disaggDecodeEngine, type PrefillReport } from "./decode.ts";
import { DecodeKvCache, KvVerificationError } from "./kv_cache.ts";
import { type PrefillResult, PrefillWorker } from "./prefill_worker.ts";
import type { RemotePrefillRequest } from "./protocol.ts";
import { EmbeddedPrefillQueue } from "./queue.ts";
import { DisaggRouter } from "./router.ts";

const BLOCK_BYTES = 2048;

function request(len: number, base = 0): PreprocessedRequest {
  return {
    model: "m",
    token_ids: Array.from({ length: len }, (_, i) => base + i),
    stop_conditions: { max_tokens: 3 },
    sampling_options: {},
    eos_token_ids: [],
  };
}

async function collect(it: AsyncIterable<{ token_ids: number[] }>): Promise<number[]> {
  const out: number[] = [];
  for await (const x of it) out.push(...x.token_ids);
  return out;
}

Deno.test("disaggregated decode: long prompts prefill remotely byte-exact, short ones locally", async () => {
  using decodeAgent = new TransferAgent("decode-t1");
  using prefillAgent = new TransferAgent("prefill-t1");
  const kv = new DecodeKvCache(decodeAgent, { numBlocks: 64, blockBytes: BLOCK_BYTES });
  const queue = new EmbeddedPrefillQueue<RemotePrefillRequest>();
  const prefill = new PrefillWorker(prefillAgent, {
    blockBytes: BLOCK_BYTES,
    maxBlocks: 32,
    resolveDecode: () => Promise.resolve(kv.memoryInfo()),
  });
  const stop = new AbortController();
  const handled: PrefillResult[] = [];
  const running = prefill.run(queue, { signal: stop.signal, onResult: (r) => handled.push(r) });
  let running2: Promise<void> | undefined;
  const reports: PrefillReport[] = [];
  const engine = (remoteTimeoutMs: number) =>
    disaggDecodeEngine({
      router: new DisaggRouter({ maxLocalPrefillLength: 100 }),
      queue,
      kv,
      engine: echoEngine(),
      blockSize: 16,
      remoteTimeoutMs,
      onPrefill: (r) => reports.push(r),
    });
  const decode = engine(30_000);
  const fallback = engine(100);
  try {
    assert.deepEqual(await collect(decode(request(300, 7), new Context())), [7, 8, 9]);
    assert.deepEqual(await collect(decode(request(40, 1), new Context())), [1, 2, 3]);
    assert.deepEqual(
      reports.map((r) => [r.mode, r.fellBack, r.verifiedBlocks]),
      [["remote", false, 19], ["local", false, 3]],
    );
    assert.deepEqual(handled.map((h) => h.blocks), [19]);
    assert.equal(kv.freeBlocks, 64, "every block back on the free list");

    // The prefill worker goes away: the remote request waits out its deadline, then
    // prefills locally, and the answer is the same.
    stop.abort();
    await running;
    assert.deepEqual(await collect(fallback(request(300, 7), new Context())), [7, 8, 9]);
    assert.deepEqual(reports.at(-1)!.mode, "local");
    assert.equal(reports.at(-1)!.fellBack, true);
    assert.equal(kv.freeBlocks, 64 - 19, "the abandoned blocks stay quarantined");

    // A prefill worker that comes back finds the request expired, skips it and says so;
    // the decode worker then reuses the quarantined blocks.
    const stop2 = new AbortController();
    const skipped = new Promise<PrefillResult>((resolve) => {
      running2 = prefill.run(queue, { signal: stop2.signal, onResult: resolve });
    });
    assert.equal((await skipped).skipped, true);
    stop2.abort();
    await running2;
    await collect(fallback(request(10), new Context()));
    assert.equal(kv.freeBlocks, 64, "the quarantined blocks are free again");
  } finally {
    stop.abort();
    await running;
    await running2;
    await queue.close();
    prefill.close();
    kv.close();
  }
});

Deno.test("DecodeKvCache.verify reports the first wrong byte", () => {
  using agent = new TransferAgent("decode-t2");
  const kv = new DecodeKvCache(agent, { numBlocks: 4, blockBytes: 64 });
  try {
    const tokens = Array.from({ length: 40 }, (_, i) => i);
    const ids = kv.allocate(3);
    kv.fillLocal(ids, tokens, 16);
    assert.equal(kv.verify(ids, tokens, 16), 3);
    const other = [...tokens];
    other[20] = 999;
    assert.throws(
      () => kv.verify(ids, other, 16),
      (e: unknown) => e instanceof KvVerificationError && e.blockIndex === 1,
    );
  } finally {
    kv.close();
  }
});

Deno.test("disaggregated decode prefills locally when the queue fails", async () => {
  using agent = new TransferAgent("decode-t3");
  const kv = new DecodeKvCache(agent, { numBlocks: 32, blockBytes: 256 });
  const failing = new EmbeddedPrefillQueue<RemotePrefillRequest>();
  failing.enqueue = () => Promise.reject(new Error("queue down"));
  const reports: PrefillReport[] = [];
  const decode = disaggDecodeEngine({
    router: new DisaggRouter({ maxLocalPrefillLength: 10 }),
    queue: failing,
    kv,
    engine: echoEngine(),
    onPrefill: (r) => reports.push(r),
  });
  try {
    assert.deepEqual(await collect(decode(request(100, 3), new Context())), [3, 4, 5]);
    assert.deepEqual([reports[0]!.mode, reports[0]!.fellBack, reports[0]!.verifiedBlocks], [
      "local",
      true,
      7,
    ]);
  } finally {
    await failing.close();
    kv.close();
  }
});
