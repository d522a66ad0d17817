// Decode + prefill in one process over the embedded queue and two transfer agents: long
// prompts go remote and arrive byte-exact, short ones stay local, a lost prefill worker
// means local prefill after the deadline, a cached prefix is not prefilled again (and
// still checked byte for byte).

import assert from "node:assert/strict";
import { TransferAgent } from "../../native/mod.ts";
import { Context } from "../../runtime/context.ts";
import { echoEngine } from "../engines/echo.ts";
import { MockerEngine } from "../engines/mocker/engine.ts";
import { hashPromptBlocks } from "../engines/mocker/scheduler.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { disaggDecodeEngine, type PrefillReport, type TokensEngine } from "./decode.ts";
import { DecodeKvCache, KvVerificationError } from "./kv_cache.ts";
import { mockerDecodeEngine } from "./mocker_decode.ts";
import { type PrefillResult, PrefillWorker } from "./prefill_worker.ts";
import type { RemotePrefillRequest } from "./protocol.ts";
import { EmbeddedPrefillQueue } from "./queue.ts";
import { DisaggRouter } from "./router.ts";

const BLOCK_BYTES = 2048;

function request(len: number, base = 0): PreprocessedRequest {
  return prompt(Array.from({ length: len }, (_, i) => base + i));
}

function prompt(tokenIds: number[]): PreprocessedRequest {
  return {
    model: "m",
    token_ids: tokenIds,
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

async function outputs(it: AsyncIterable<LLMEngineOutput>): Promise<LLMEngineOutput[]> {
  const out: LLMEngineOutput[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** A decode worker and a prefill worker in one process, over an embedded queue. */
function pair(name: string, engine: TokensEngine, numBlocks = 128) {
  const decodeAgent = new TransferAgent(`decode-${name}`);
  const prefillAgent = new TransferAgent(`prefill-${name}`);
  const kv = new DecodeKvCache(decodeAgent, { numBlocks, blockBytes: BLOCK_BYTES });
  const queue = new EmbeddedPrefillQueue<RemotePrefillRequest>();
  const prefill = new PrefillWorker(prefillAgent, {
    blockBytes: BLOCK_BYTES,
    maxBlocks: 64,
    resolveDecode: () => Promise.resolve(kv.memoryInfo()),
  });
  const stop = new AbortController();
  const handled: PrefillResult[] = [];
  const running = prefill.run(queue, { signal: stop.signal, onResult: (r) => handled.push(r) });
  const reports: PrefillReport[] = [];
  const router = new DisaggRouter({ maxLocalPrefillLength: 100 });
  const decode = disaggDecodeEngine({
    router,
    queue,
    kv,
    engine,
    blockSize: 16,
    remoteTimeoutMs: 30_000,
    onPrefill: (r) => reports.push(r),
  });
  return {
    kv,
    prefill,
    router,
    decode,
    handled,
    reports,
    async [Symbol.asyncDispose]() {
      stop.abort();
      await running;
      await queue.close();
      prefill.close();
      kv.close();
      prefillAgent.close();
      decodeAgent.close();
    },
  };
}

const LONG = Array.from({ length: 300 }, (_, i) => 5000 + i);

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
      reports.map((r) => [r.mode, r.fellBack, r.remoteBlocks, r.localBlocks, r.verifiedBlocks]),
      [["remote", false, 19, 0, 19], ["local", false, 0, 3, 3]],
    );
    assert.deepEqual(handled.map((h) => h.blocks), [19]);
    assert.equal(kv.availableBlocks, 64, "no block is held after the requests");
    assert.equal(kv.cachedBlocks, 18 + 2, "the full blocks stay cached");

    // The prefill worker goes away: the remote request waits out its deadline, then
    // prefills locally, and the answer is the same.
    stop.abort();
    await running;
    assert.deepEqual(await collect(fallback(request(300, 1000), new Context())), [
      1000,
      1001,
      1002,
    ]);
    assert.deepEqual(reports.at(-1)!.mode, "local");
    assert.equal(reports.at(-1)!.fellBack, true);
    assert.equal(reports.at(-1)!.localBlocks, 19);
    assert.equal(kv.availableBlocks, 64 - 19, "the abandoned blocks stay quarantined");

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
    assert.equal(kv.availableBlocks, 64, "the quarantined blocks are free again");
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
    kv.fillLocal(ids, tokens.map((t) => t + 1), 16, 2);
    assert.throws(
      () => kv.verify(ids, tokens, 16),
      (e: unknown) => e instanceof KvVerificationError && e.blockIndex === 2 && !e.cached,
      "fillLocal from block 2 rewrote block 2 only",
    );
    kv.fillLocal(ids, tokens, 16, 2);
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

Deno.test("a prompt sharing a cached prefix prefills only the rest: remotely when long, locally when short", async () => {
  await using p = pair("t5", echoEngine());
  const first = await outputs(p.decode(prompt(LONG), new Context()));
  assert.equal(first[0]!.cached_tokens, 0);
  // 16 cached blocks (256 tokens) + 200 new tokens: 200 uncached > 100, remote.
  const longer = [...LONG.slice(0, 256), ...Array.from({ length: 200 }, (_, i) => 9000 + i)];
  const second = await outputs(p.decode(prompt(longer), new Context()));
  assert.equal(second[0]!.cached_tokens, 256, "the response says what the cache served");
  // 18 cached blocks (288 tokens) + 50 new tokens: 50 uncached, local.
  const shorter = [...LONG.slice(0, 288), ...Array.from({ length: 50 }, (_, i) => 7000 + i)];
  await outputs(p.decode(prompt(shorter), new Context()));
  // The same prompt again: all 18 full blocks hit, only the partial tail is filled.
  await outputs(p.decode(prompt(LONG), new Context()));
  assert.deepEqual(
    p.reports.map((r) => [
      r.mode,
      r.prefixHitBlocks,
      r.prefixHitLength,
      r.remoteBlocks,
      r.localBlocks,
      r.verifiedBlocks,
    ]),
    [
      ["remote", 0, 0, 19, 0, 19],
      ["remote", 16, 256, 13, 0, 29],
      ["local", 18, 288, 0, 4, 22],
      ["local", 18, 288, 0, 1, 19],
    ],
  );
  assert.deepEqual(p.handled.map((h) => h.blocks), [19, 13], "the prefill wrote only misses");
  assert.equal(p.kv.availableBlocks, 128, "no block stays held");

  // The limit changes at run time: the same remainder now goes remote.
  p.router.setMaxLocalPrefillLength(10);
  const third = [...LONG.slice(0, 288), ...Array.from({ length: 50 }, (_, i) => 3000 + i)];
  await outputs(p.decode(prompt(third), new Context()));
  assert.deepEqual(
    [p.reports.at(-1)!.mode, p.reports.at(-1)!.prefixHitBlocks, p.reports.at(-1)!.remoteBlocks],
    ["remote", 18, 4],
  );
  assert.equal(p.handled.at(-1)?.blocks, 4);
});

Deno.test("a wrong byte in a cached block fails the request and leaves the cache", async () => {
  await using p = pair("t6", echoEngine());
  await collect(p.decode(prompt(LONG), new Context()));
  const hashes = hashPromptBlocks(LONG, 16).map((b) => b.sequenceHash);
  const ids = p.kv.acquirePrefix(hashes);
  assert.equal(ids.length, 18);
  p.kv.release(ids.toReversed());
  // A faulty peer overwrites cached block 5 with another block's bytes.
  await p.prefill.handle({
    request_id: "rogue",
    token_ids: LONG.slice(0, 6 * 16).map((t) => t + 1),
    block_size: 16,
    engine_agent: p.kv.agent.name,
    first_block: 5,
    block_ids: [ids[5]!],
    expires_at: Date.now() + 60_000,
  });
  await assert.rejects(
    collect(p.decode(prompt(LONG), new Context())),
    (e: unknown) => e instanceof KvVerificationError && e.blockIndex === 5 && e.cached,
  );
  assert.equal(p.kv.matchPrefix(hashes), 5, "the bad block left the cache");
  assert.equal(p.kv.availableBlocks, 128, "the failed request held nothing back");
  // The next request prefills again from the bad block on (14 blocks, remotely) and
  // checks every block.
  assert.deepEqual(await collect(p.decode(prompt(LONG), new Context())), LONG.slice(0, 3));
  const last = p.reports.at(-1)!;
  assert.deepEqual([last.mode, last.prefixHitBlocks, last.remoteBlocks, last.verifiedBlocks], [
    "remote",
    5,
    14,
    19,
  ]);
  assert.equal(p.kv.matchPrefix(hashes), 18);
});

Deno.test("with the mocker generating, prompt blocks enter its prefix cache under the same hashes", async () => {
  const mocker = new MockerEngine({ blockSize: 16, numGpuBlocks: 256, speedupRatio: 1000 });
  try {
    await using p = pair("t7", mockerDecodeEngine(mocker));
    const a = await outputs(p.decode(prompt(LONG), new Context()));
    assert.equal(a.flatMap((o) => o.token_ids).length, 3);
    assert.equal(a.at(-1)!.finish_reason, "length");
    const hashes = hashPromptBlocks(LONG, 16).map((b) => b.sequenceHash);
    assert.equal(mocker.blockManager.matchPrefix(hashes), 18, "the mocker has the prompt too");
    assert.equal(
      mocker.scheduler.metrics().gpu_prefix_cache_hit_rate,
      288 / 300,
      "the mocker found the transferred blocks and prefilled only the last one",
    );
    assert.equal(p.kv.matchPrefix(hashes), 18);
    const b = await outputs(p.decode(prompt(LONG), new Context()));
    assert.deepEqual(
      b.flatMap((o) => o.token_ids),
      a.flatMap((o) => o.token_ids),
      "the mocker's tokens follow from the prompt",
    );
    assert.equal(b[0]!.cached_tokens, 288);
    assert.deepEqual(p.reports.map((r) => [r.mode, r.prefixHitBlocks]), [
      ["remote", 0],
      ["local", 18],
    ]);
  } finally {
    await mocker.close();
  }
});
