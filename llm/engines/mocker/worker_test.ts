import assert from "node:assert/strict";
import { DistributedRuntime } from "../../../runtime/distributed_runtime.ts";
import { type LLMEngineOutput, MODEL_ENTRY_PREFIX, type ModelEntry } from "../../protocols.ts";
import { startMockerWorkers } from "./worker.ts";

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
