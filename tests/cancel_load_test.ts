// Cancellation under load (issue: reliability): 500 streaming clients of the frontend
// disconnect at random points while mocker workers generate. Every sequence must leave
// its mocker's scheduler at once and every KV block must go back to the free pool (cached
// blocks may stay, as prefix cache, but none may stay held); Deno's test sanitizers check
// that no timer, socket or other resource outlives the test.

import assert from "node:assert/strict";
import { createFrontend, DistributedRuntime, ModelManager, startMockerWorkers } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";

const CLIENTS = 500;
const CONCURRENCY = 50;

let seed = 0x9e3779b9;
function rnd(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
}

Deno.test("500 clients disconnecting at random points leave no sequence and no held KV block", async () => {
  const fleet = await startMockerWorkers(2, {
    speedupRatio: 5,
    blockSize: 16,
    numGpuBlocks: 16384,
    metricsIntervalMs: 200,
  });
  const front = await DistributedRuntime.connect({ embedded: fleet.embedded });
  const models = new ModelManager(front, { routerMode: "round-robin" });
  await models.start();
  const frontend = createFrontend({ models });
  const listening = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve({
    port: 0,
    hostname: "127.0.0.1",
    onListen: (a) => listening.resolve(a as Deno.NetAddr),
  }, frontend.fetch);
  const { port } = await listening.promise;
  const url = `http://127.0.0.1:${port}/v1/completions`;
  const engines = fleet.workers.map((w) => w.engine);
  try {
    await eventually(() => models.list().length === 1, 10_000, "the model appears");
    const model = models.list()[0]!.name;

    let completed = 0;
    let cut = 0;
    let next = 0;
    const client = async () => {
      const i = next++;
      const prompt = Array.from({ length: 64 + Math.floor(rnd() * 448) }, (_, k) => 100 + k + i);
      const abort = new AbortController();
      // A random point: before the first token or mid-stream (5,000 tokens take seconds, so a
      // sequence whose client left but that was not stopped would still run at the end).
      const timer = setTimeout(() => abort.abort(), Math.floor(rnd() * 400));
      try {
        const r = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model, prompt, max_tokens: 5000, stream: true }),
          signal: abort.signal,
        });
        assert.equal(r.status, 200);
        const reader = r.body!.getReader();
        // Hang up by cancelling the body: the client goes away mid-stream.
        const hangUp = () => void reader.cancel().catch(() => {});
        if (abort.signal.aborted) hangUp();
        else abort.signal.addEventListener("abort", hangUp, { once: true });
        for (;;) {
          const { done } = await reader.read();
          if (done) break;
        }
        if (abort.signal.aborted) cut++;
        else completed++;
      } catch (err) {
        if (!abort.signal.aborted) throw err;
        cut++;
      } finally {
        clearTimeout(timer);
      }
    };
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < CLIENTS) await client();
      }),
    );
    assert.equal(completed + cut, CLIENTS);
    assert.ok(cut > CLIENTS / 2, `most clients should disconnect mid-way (${cut} did)`);

    // Every sequence leaves its scheduler, and every block it held is released.
    await eventually(
      () => engines.every((e) => e.scheduler.numRunning + e.scheduler.numWaiting === 0),
      500,
      "every mocker sequence to end after its client went away",
    );
    for (const [i, e] of engines.entries()) {
      assert.equal(e.blockManager.activeBlocks, 0, `worker ${i} still holds KV blocks`);
      assert.equal(
        e.blockManager.availableBlocks,
        e.blockManager.numGpuBlocks,
        `worker ${i}: every block is free or reusable cache`,
      );
    }
    const metrics = await frontend.metrics.render();
    const disconnected = /dynamo_frontend_disconnected_clients(?:_total)?(?:\{[^}]*\})? (\d+)/
      .exec(metrics);
    assert.ok(disconnected && Number(disconnected[1]) > 0, "disconnects are counted");
  } finally {
    await server.shutdown();
    await models.close();
    await front.shutdown();
    await fleet.shutdown();
  }
});
