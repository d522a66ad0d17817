// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Untrusted worker output (issue: reliability at the boundaries): a worker process on real etcd
// and NATS sends malformed items of every kind (token ids that are strings, null, negative or
// past the vocabulary, an unknown finish reason, an object posing as an array with a huge
// length, 200,000 ids in one item, a non-object, a non-string text, a negative cached count).
// Each fails only its own request, with an error that names the worker; good requests sent at
// the same time are answered exactly; the frontend keeps answering /live throughout, and the
// worst delay of those probes (an upper bound of its event-loop stalls) is reported.

import assert from "node:assert/strict";
import { builtinTestModel } from "../mod.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { probeLive } from "./_helpers/live_probe.ts";
import { spawnDeno } from "./_helpers/process.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";
import { MALFORMED } from "./_helpers/malformed_outputs.ts";

const WORKER = new URL("./_helpers/bad_worker.ts", import.meta.url).pathname;

Deno.test({
  name: "malformed worker output fails only its own request and never stalls the frontend",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const env = { ...servers.env, DYN_LOG: "warn" };
    const front = spawnFrontend(env);
    const worker = spawnDeno(WORKER, env, [await builtinTestModel()]);
    try {
      const base = await frontendUrl(front);
      const ready = await worker.waitFor<{ ready: string }>((l) => "ready" in l, 30_000, "ready");
      const ask = async (seed: number, stream: boolean) => {
        const r = await fetch(`${base}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "bad-model", prompt: "one two three four", seed, stream }),
          signal: AbortSignal.timeout(20_000),
        });
        return { status: r.status, text: await r.text() };
      };
      // The model appears once the frontend has seen the worker's entry.
      for (let i = 0;; i++) {
        if ((await ask(0, false)).status === 200) break;
        if (i > 100) throw new Error("the model never answered");
        await new Promise((r) => setTimeout(r, 100));
      }
      const good = (await ask(0, false)).text;

      // Probe the frontend's responsiveness every 10 ms while the bad requests run.
      const probe = probeLive(base, 10);
      const kinds = Object.keys(MALFORMED).map(Number);
      const results = await Promise.all([
        ...kinds.flatMap((seed) => [ask(seed, false), ask(seed, true)]),
        ...Array.from({ length: 10 }, () => ask(0, false)),
      ]);
      const worst = await probe.stop();

      for (const [i, seed] of kinds.entries()) {
        const unary = results[2 * i]!;
        const streamed = results[2 * i + 1]!;
        assert.equal(unary.status, 502, `seed ${seed}: ${unary.text}`);
        assert.match(unary.text, /"code":"invalid_worker_output"/);
        assert.match(unary.text, new RegExp(`worker ${ready.ready} sent an invalid output`));
        // A stream has begun (200) before the bad item: it ends with an error event.
        assert.equal(streamed.status, 200, `seed ${seed}`);
        assert.match(streamed.text, /"error":\{"message":"worker [0-9a-f]+ sent an invalid output/);
        assert.match(streamed.text, /"code":"invalid_worker_output"/);
        assert.doesNotMatch(streamed.text, /\[DONE\]/);
      }
      for (const r of results.slice(2 * kinds.length)) {
        assert.equal(r.status, 200);
        assert.equal(
          r.text.replace(/"id":"[^"]+","/, "").replace(/"created":\d+/, ""),
          good.replace(/"id":"[^"]+","/, "").replace(/"created":\d+/, ""),
        );
      }
      const metrics = await (await fetch(`${base}/metrics`)).text();
      const counted =
        /dynamo_frontend_invalid_worker_outputs_total\{[^}]*model="bad-model"[^}]*\} (\d+)/
          .exec(metrics);
      assert.equal(Number(counted?.[1]), 2 * kinds.length, metrics);
      // The worker is still in service: a good request after all of that.
      assert.equal((await ask(0, false)).status, 200);
      console.log(`worst /live probe while malformed items arrived: ${worst.toFixed(1)} ms`);
      assert.ok(worst < 1000, `the frontend stalled ${worst.toFixed(0)} ms`);
    } finally {
      worker.kill("SIGKILL");
      await worker.status;
      await stopChild(front);
      await servers.stop();
    }
  },
});
