import assert from "node:assert/strict";
import { DistributedRuntime } from "../../../runtime/distributed_runtime.ts";
import {
  type LLMEngineOutput,
  MODEL_ENTRY_PREFIX,
  type ModelEntry,
  type PreprocessedRequest,
} from "../../protocols.ts";
import { KvRouter, type RouteDecisionRecord } from "../../kv_router/router.ts";
import { KV_FETCH_ENDPOINT, startMockerWorkers } from "./worker.ts";
import { DEFAULT_KV_FETCH_MS_PER_BLOCK } from "./timing.ts";
import { hashPromptBlocks } from "./scheduler.ts";
import type { BlockManager } from "./block_manager.ts";

Deno.test("startMockerWorkers runs each worker on its own instance and registers the model", async () => {
  const fleet = await startMockerWorkers(4, {
    speedupRatio: 100,
    numGpuBlocks: 256,
    concurrency: 2,
  });
  const frontend = await DistributedRuntime.connect({ embedded: fleet.embedded });
  try {
    const ids = fleet.workers.map((w) => w.runtime.instanceId);
    assert.equal(new Set(ids).size, 4, `distinct instance ids: ${ids}`);
    const entries = await frontend.discovery.list(MODEL_ENTRY_PREFIX);
    assert.equal(entries.length, 4);
    for (const { value } of entries) {
      const entry = JSON.parse(value) as ModelEntry;
      assert.equal(entry.name, "Qwen3-0.6B");
      assert.deepEqual(entry.endpoint, {
        namespace: "dynamo",
        component: "mocker",
        name: "generate",
      });
    }
    assert.ok(fleet.workers.every((w) => w.card.kv_cache_block_size === 16));

    const client = await frontend.namespace("dynamo").component("mocker").endpoint("generate")
      .client();
    await client.waitForInstances({ count: 4, timeoutMs: 5000 });
    for (const worker of fleet.workers) {
      const stream = await client.direct({
        model: "Qwen3-0.6B",
        token_ids: [1, 2, 3, 4, 5],
        stop_conditions: { max_tokens: 3 },
        sampling_options: {},
        eos_token_ids: [],
      }, worker.runtime.instanceId);
      let tokens = 0;
      for await (const item of stream as AsyncIterable<LLMEngineOutput>) {
        tokens += item.token_ids.length;
      }
      assert.equal(tokens, 3);
      assert.equal(worker.engine.steps, 3, "the request ran on the instance it was sent to");
    }
  } finally {
    await frontend.shutdown();
    await fleet.shutdown();
  }
  await Promise.all(fleet.workers.map((w) => w.serving));
});

Deno.test("startMockerWorkers refuses a count below one", async () => {
  await assert.rejects(startMockerWorkers(0), /count must be a whole number >= 1, got 0/);
});

Deno.test("a KV router sends a busy holder's prefix to an idle mocker, which copies it from the holder", async () => {
  await withBusyHolder(DEFAULT_KV_FETCH_MS_PER_BLOCK, ({ holder, decisions, out }) => {
    // P with a question went to the other worker, told to copy P's 128 blocks from the holder,
    // and found them cached.
    const d = decisions[2]!;
    assert.notEqual(d.instanceId, holder);
    assert.deepEqual(d.kvFetch, { source: holder, blocks: 128 });
    assert.equal(out.cached_tokens, 2048);
    return Promise.resolve();
  });
});

Deno.test("mockers without peer fetch get no kv_fetch hints", async () => {
  await withBusyHolder(null, ({ fleet, decisions }) => {
    assert.ok(decisions.every((d) => d.kvFetch === undefined));
    // Their metrics do not offer it either.
    assert.equal(fleet.workers[0]!.engine.metrics().kv_fetch_ms_per_block, undefined);
    return Promise.resolve();
  });
});

/**
 * Two mockers behind a KV router: a 2,048-token prompt P, then P with 6,000 more tokens (to P's
 * holder: some 170 ms of prefill), then, once the holder has announced that pass, P with a
 * question; `check` sees the three decisions and the question's first output.
 */
async function withBusyHolder(
  kvFetchMsPerBlock: number | null,
  check: (seen: {
    fleet: Awaited<ReturnType<typeof startMockerWorkers>>;
    holder: string;
    decisions: RouteDecisionRecord[];
    out: LLMEngineOutput;
  }) => Promise<void>,
): Promise<void> {
  const decisions: RouteDecisionRecord[] = [];
  const { fleet, frontend, router } = await routedFleet(kvFetchMsPerBlock, decisions);
  try {
    const p = Array.from({ length: 2048 }, (_, i) => 10 + i);
    await first(router, p);
    const holder = decisions[0]!.instanceId;
    await waitFor(async () => (await router.findBestMatch(p)).overlapBlocks === 128);
    const long = first(router, [...p, ...Array.from({ length: 6000 }, (_, i) => 50_000 + i)]);
    await waitFor(() => decisions.length === 2 && passBusy(fleet, holder));
    assert.equal(decisions[1]!.instanceId, holder);
    await new Promise((r) => setTimeout(r, 20));
    const out = await first(router, [...p, 7, 8, 9]);
    await check({ fleet, holder, decisions, out });
    await long;
  } finally {
    await router.close();
    await frontend.shutdown();
    await fleet.shutdown();
  }
}

Deno.test("a mocker's kv_fetch endpoint refuses malformed questions", async () => {
  await withFetchEndpoint(async (ask) => {
    assert.deepEqual(await ask({ sequence_hashes: ["1", "2"] }), { blocks: 0 });
    for (
      const bad of [{}, { sequence_hashes: [1] }, { sequence_hashes: ["-1"] }, {
        sequence_hashes: ["18446744073709551616"],
      }]
    ) {
      await assert.rejects(ask(bad), /sequence_hashes|u64/);
    }
  });
});

Deno.test("a mocker that answers a peer's question demotes the blocks of the prefix it holds", async () => {
  await withFetchEndpoint(async (ask, bm) => {
    // Two cached chains, 1-2 the least recently used.
    bm.allocate(4);
    bm.commit(null, [{ sequenceHash: 1n, localHash: 1n }, { sequenceHash: 2n, localHash: 2n }]);
    bm.commit(null, [{ sequenceHash: 3n, localHash: 3n }, { sequenceHash: 4n, localHash: 4n }]);
    bm.release([2n, 1n, 4n, 3n], 0);
    assert.deepEqual(bm.inactiveHashes(), [2n, 1n, 4n, 3n]);
    assert.deepEqual(await ask({ sequence_hashes: ["3", "4", "5"] }), { blocks: 2 });
    assert.deepEqual(bm.inactiveHashes(), [4n, 3n, 2n, 1n], "the peer's copy goes first here");
  });
});

/** One mocker worker; `check` asks its kv_fetch endpoint questions and sees its block manager. */
async function withFetchEndpoint(
  check: (ask: (q: unknown) => Promise<unknown>, bm: BlockManager) => Promise<void>,
): Promise<void> {
  const fleet = await startMockerWorkers(1, { speedupRatio: 100, numGpuBlocks: 256 });
  const frontend = await DistributedRuntime.connect({ embedded: fleet.embedded });
  try {
    const client = await frontend.namespace("dynamo").component("mocker")
      .endpoint(KV_FETCH_ENDPOINT).client();
    await client.waitForInstances({ count: 1, timeoutMs: 5000 });
    const { engine, runtime } = fleet.workers[0]!;
    const ask = async (q: unknown) => {
      for await (const item of await client.direct(q, runtime.instanceId)) return item;
    };
    await check(ask, engine.blockManager);
    await client.close();
  } finally {
    await frontend.shutdown();
    await fleet.shutdown();
  }
}

async function routedFleet(kvFetchMsPerBlock: number | null, decisions: RouteDecisionRecord[]) {
  const fleet = await startMockerWorkers(2, {
    speedupRatio: 1,
    numGpuBlocks: 4096,
    kvFetchMsPerBlock,
  });
  const frontend = await DistributedRuntime.connect({ embedded: fleet.embedded });
  const endpoint = frontend.namespace("dynamo").component("mocker").endpoint("generate");
  const router = new KvRouter(endpoint, { blockSize: 16, onRoute: (d) => decisions.push(d) });
  const client = await endpoint.client();
  await client.waitForInstances({ count: 2, timeoutMs: 5000 });
  await client.close();
  return { fleet, frontend, router };
}

/** Routes a prompt (one output token) and returns its first output. */
async function first(router: KvRouter, token_ids: number[]): Promise<LLMEngineOutput> {
  const request: PreprocessedRequest = {
    model: "Qwen3-0.6B",
    token_ids,
    stop_conditions: { max_tokens: 1 },
    sampling_options: {},
    eos_token_ids: [],
  };
  const stream = await router.generate<LLMEngineOutput>(request);
  let out: LLMEngineOutput | undefined;
  for await (const item of stream) out ??= item;
  return out!;
}

function passBusy(fleet: Awaited<ReturnType<typeof startMockerWorkers>>, id: string): boolean {
  const w = fleet.workers.find((w) => w.runtime.instanceId === id)!;
  return w.engine.scheduler.numRunning > 0;
}

async function waitFor(check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("a prefix a mocker moved to host memory: the router sends it back there and charges the copy", async () => {
  const decisions: RouteDecisionRecord[] = [];
  const fleet = await startMockerWorkers(2, { speedupRatio: 100, numGpuBlocks: 64 });
  const frontend = await DistributedRuntime.connect({ embedded: fleet.embedded });
  const endpoint = frontend.namespace("dynamo").component("mocker").endpoint("generate");
  const router = new KvRouter(endpoint, { blockSize: 16, onRoute: (d) => decisions.push(d) });
  try {
    const client = await endpoint.client();
    await client.waitForInstances({ count: 2, timeoutMs: 5000 });
    await client.close();
    const p = Array.from({ length: 512 }, (_, i) => 10 + i); // 32 blocks
    await first(router, p);
    const holder = decisions[0]!.instanceId;
    const engine = fleet.workers.find((w) => w.runtime.instanceId === holder)!.engine;
    await waitFor(async () => (await router.findBestMatch(p)).overlapBlocks === 32);
    // Two other prompts of 32 blocks on the holder: its 64 GPU blocks send p's to host memory.
    for (const salt of [1, 2]) {
      const other = Array.from({ length: 512 }, (_, i) => salt * 100_000 + i);
      for await (
        const _ of engine.generate({
          model: "m",
          token_ids: other,
          stop_conditions: { max_tokens: 1 },
          sampling_options: {},
          eos_token_ids: [],
        } as PreprocessedRequest)
      ) { /* run it through */ }
    }
    const hashes = hashPromptBlocks(p, 16).map((b) => b.sequenceHash);
    assert.equal(engine.blockManager.matchPrefix(hashes), 0, "off the holder's GPU");
    assert.equal(engine.blockManager.heldPrefix(hashes), 32, "in its host memory");
    decisions.length = 0;
    // The router hears the move (host stored, device removed) and still sends p there, with the
    // copy up charged at the rate the holder announces.
    await waitFor(async () => {
      const d = await router.findBestMatch(p);
      return d.instanceId === holder && d.overlapBlocks === 32;
    });
    const out = await first(router, [...p, 7, 8, 9]);
    const decision = decisions.at(-1)!;
    assert.equal(decision.instanceId, holder);
    const c = decision.candidates.find((c) => c.workerId === holder)!;
    assert.equal(c.onboardBlocks, 32);
    assert.equal(c.onboardMsPerBlock, engine.scheduler.hostOnboardMsPerBlock / 100);
    assert.equal(out.cached_tokens, 512, "copied back, not computed");
  } finally {
    await router.close();
    await frontend.shutdown();
    await fleet.shutdown();
  }
});
