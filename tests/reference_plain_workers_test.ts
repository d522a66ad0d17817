// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The reference frontend (ai-dynamo 1.6.1, `python -m dynamo.frontend`, on loopback against real
// etcd and NATS) serves PLAIN workers of ours: `runMockerWorker` and `runLlamaCppWorker`, i.e.
// `registerLlm` + `serveEndpoint` with a `KvEventPublisher`, nothing reference-specific in the
// worker's code. Its KV router routes by their KV events (published in its format besides ours),
// and a client that hangs up stops their request. Skipped, with a message, only where
// scripts/setup_reference.sh cannot install the reference (PyPI unreachable).

import assert from "node:assert/strict";
import { type DistributedRuntime, runMockerWorker } from "../mod.ts";
import { Context } from "../runtime/context.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";
import {
  etcdRuntime,
  type ReferenceFrontend,
  referencePython,
  startReferenceFrontend,
  until,
  untilListed,
} from "./_helpers/reference.ts";

if (!haveServers()) {
  console.warn("reference_plain_workers_test skipped: etcd or nats-server not installed");
}
const python = haveServers() ? await referencePython("reference_plain_workers_test") : undefined;

/** What a plain worker offers these tests, whatever its engine. */
interface PlainWorker {
  readonly runtime: DistributedRuntime;
  /** The engine, called directly (not through any frontend). */
  readonly handler: (request: never, ctx: Context) => AsyncIterable<unknown>;
  /** Subscribers of its reference-format KV event channel now. */
  readonly eventSubscribers: () => number;
}

/** Requests served by a worker's `generate` endpoint, from its runtime's metrics. */
async function served(runtime: DistributedRuntime, series = "requests_total"): Promise<number> {
  const text = await runtime.metrics.render();
  const re = new RegExp(`dynamo_component_${series}\\{[^}]*endpoint="generate"[^}]*\\} (\\d+)`);
  return Number(re.exec(text)?.[1] ?? 0);
}

/** Runs `tokens` through a worker's engine directly, so only its KV events tell where it is. */
async function computeOn(worker: PlainWorker, model: string, tokens: number[]): Promise<void> {
  const request = {
    model,
    token_ids: tokens,
    stop_conditions: { max_tokens: 1 },
    sampling_options: {},
    eos_token_ids: [],
  };
  for await (const _ of worker.handler(request as never, new Context())) { /* run through */ }
}

/**
 * Two plain workers (made by `start`) behind a reference frontend in `--router-mode kv`: prompts
 * computed on one worker directly are routed to it by the frontend, their answers streamed.
 */
async function routesByEvents(
  model: string,
  start: (runtime: DistributedRuntime) => Promise<PlainWorker & { close(): Promise<void> }>,
  prompt: (seed: number) => number[],
): Promise<void> {
  const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
  const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
  const workers: (PlainWorker & { close(): Promise<void> })[] = [];
  let front: ReferenceFrontend | undefined;
  try {
    for (let i = 0; i < 2; i++) workers.push(await start(await etcdRuntime(etcd, nats)));
    front = await startReferenceFrontend(
      python!,
      ["--router-mode", "kv"],
      servers,
    );
    const base = front.base;
    await untilListed(base, model);
    await until(
      "the reference router to follow both workers' KV event channels",
      30_000,
      () => Promise.resolve(workers.every((w) => w.eventSubscribers() > 0) ? true : undefined),
    );
    // Six prompts, placed so that neither chance (1 in 64) nor taking turns routes them all.
    const placed = [1, 0, 0, 1, 1, 0];
    for (const [seed, worker] of placed.entries()) {
      await computeOn(workers[worker]!, model, prompt(seed));
    }
    await new Promise((r) => setTimeout(r, 1000)); // the events on their way
    for (const seed of [0, 1, 2, 3, 4, 5, 0, 3]) {
      const worker = placed[seed]!;
      const before = await Promise.all(workers.map((w) => served(w.runtime)));
      const res = await fetch(`${base}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model, prompt: prompt(seed), max_tokens: 2, stream: true }),
      });
      const text = await res.text();
      assert.equal(res.status, 200, text);
      assert.match(text, /"finish_reason":"(length|stop)"[^]*data: \[DONE\]\s*$/, text);
      const after = await Promise.all(workers.map((w) => served(w.runtime)));
      assert.deepEqual(
        after.map((n, i) => n - before[i]!),
        worker === 0 ? [1, 0] : [0, 1],
        `the prompt (seed ${seed}) cached on worker ${worker} went elsewhere`,
      );
    }
  } catch (err) {
    console.error(`reference frontend log (tail):\n${front?.log()}`);
    throw err;
  } finally {
    await front?.stop();
    for (const w of workers) await w.close();
    await Promise.all([etcd.stop(), nats.stop()]);
  }
}

Deno.test({
  name:
    "the reference's KV router routes by plain mocker workers' KV events (runMockerWorker: registerLlm + serveEndpoint)",
  ignore: python === undefined,
  fn: () =>
    routesByEvents(
      "plain-kv-mocker",
      async (runtime) => {
        const endpoint = runtime.namespace("dynamo").component("backend").endpoint("generate");
        const worker = await runMockerWorker(endpoint, {
          speedupRatio: 20,
          blockSize: 16,
          register: { modelName: "plain-kv-mocker" },
        });
        await worker.events!.ready;
        return {
          runtime,
          handler: (req, ctx) => worker.engine.handler(req, ctx),
          eventSubscribers: () => worker.events!.reference?.subscribers ?? 0,
          close: () => runtime.shutdown(),
        };
      },
      (seed) => Array.from({ length: 160 }, (_, i) => 1000 + seed * 200 + i),
    ),
});

Deno.test({
  name:
    "the reference's KV router routes by plain llama.cpp workers' KV events (runLlamaCppWorker)",
  ignore: python === undefined,
  fn: async () => {
    const { runLlamaCppWorker } = await import("../llm/engines/llamacpp/mod.ts");
    const { tinyLlamaGguf } = await import("./_helpers/tiny_gguf.ts");
    const gguf = await tinyLlamaGguf();
    await routesByEvents(
      "plain-tiny-llama",
      async (runtime) => {
        const endpoint = runtime.namespace("dynamo").component("llamacpp").endpoint("generate");
        const worker = await runLlamaCppWorker(endpoint, gguf, {
          maxNumSeqs: 4,
          register: { modelName: "plain-tiny-llama" },
        });
        await worker.events!.ready;
        return {
          runtime,
          handler: (req, ctx) => worker.engine.handler(req, ctx),
          eventSubscribers: () => worker.events!.reference?.subscribers ?? 0,
          close: async () => {
            await runtime.shutdown();
            await worker.serving;
          },
        };
      },
      // The tiny vocabulary's ordinary tokens (3..511), a different run for each seed.
      (seed) => Array.from({ length: 80 }, (_, i) => 3 + ((seed * 131 + i * 7) % 500)),
    );
  },
});

/**
 * A slow plain mocker worker of ours on `plane`, behind a reference frontend on the same request
 * plane: a short chat streams whole, and a long one the client hangs up on is stopped.
 */
async function streamsAndStops(plane: "tcp" | "nats"): Promise<void> {
  const { DistributedRuntime } = await import("../mod.ts");
  const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
  const runtime = await DistributedRuntime.connect({
    discovery: "etcd",
    requestPlane: plane,
    etcdEndpoints: etcd.url,
    natsServer: nats.url,
  });
  const model = `slow-mocker-${plane}`;
  let front: ReferenceFrontend | undefined;
  try {
    const endpoint = runtime.namespace("dynamo").component("backend").endpoint("generate");
    // About 6 ms a token: a 30,000-token answer would take minutes.
    await runMockerWorker(endpoint, { speedupRatio: 1, register: { modelName: model } });
    front = await startReferenceFrontend(
      python!,
      ["--router-mode", "round-robin"],
      { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url, DYN_REQUEST_PLANE: plane },
    );
    const base = front.base;
    await untilListed(base, model);
    const chat = (maxTokens: number, signal?: AbortSignal) =>
      fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model,
          messages: [{ role: "user", content: `hello over ${plane}` }],
          max_tokens: maxTokens,
          stream: true,
        }),
        // Every wait has a deadline: a worker that never calls home must fail the test.
        signal: signal ?? AbortSignal.timeout(30_000),
      });
    const whole = await chat(5);
    const text = await whole.text();
    assert.equal(whole.status, 200, text);
    assert.match(text, /"finish_reason":"length"[^]*data: \[DONE\]\s*$/, text);
    assert.equal(await served(runtime), 1);
    // A long one, hung up on after its first chunk: our worker stops it.
    const hangUp = new AbortController();
    const long = await chat(30_000, hangUp.signal);
    assert.equal(long.status, 200);
    const reader = long.body!.getReader();
    await reader.read(); // the first chunk: the engine is generating
    assert.equal(await served(runtime, "inflight_requests"), 1);
    hangUp.abort();
    await reader.cancel().catch(() => {});
    const stoppedAt = Date.now();
    await until(
      `our ${plane}-plane worker to stop the request after the hang-up`,
      10_000,
      async () => (await served(runtime, "inflight_requests")) === 0 ? true : undefined,
    );
    console.log(`request stopped ${Date.now() - stoppedAt} ms after the hang-up`);
  } catch (err) {
    console.error(`reference frontend log (tail):\n${front?.log()}`);
    throw err;
  } finally {
    await front?.stop();
    await runtime.shutdown();
    await Promise.all([etcd.stop(), nats.stop()]);
  }
}

Deno.test({
  name:
    "the reference frontend streams a plain mocker worker's answer; a client hanging up stops it (TCP plane)",
  ignore: python === undefined,
  fn: () => streamsAndStops("tcp"),
});

Deno.test({
  name:
    "the reference frontend on its NATS request plane serves a plain worker of ours on the NATS plane; a hang-up stops it",
  ignore: python === undefined,
  fn: () => streamsAndStops("nats"),
});
