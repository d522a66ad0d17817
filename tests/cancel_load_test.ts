// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Cancellation under load (issue: reliability): 500 streaming clients of the frontend
// disconnect at random points while mocker workers generate. The worker's context of
// every request must stop within 50 ms of its client's disconnect becoming visible to the
// frontend (measured per request: one process, one clock; see STOP_WITHIN_MS), every
// sequence must leave its mocker's scheduler, and every KV block must go back to the free
// pool (cached blocks may stay, as prefix cache, but none may stay held). Deno's op and
// resource sanitizers (off by default in Deno 2.9, turned on for this test) check that no
// timer, socket or other resource outlives it; `--trace-leaks` says where a leaked one was
// started. `deno task test:chaos` runs this file twice: as is, and with `--trace-leaks`
// and CANCEL_TRACE_LEAKS=1, where the stop times are printed but not held to the bound
// (a stack trace taken for every op doubles the event loop's work: measured p50 7-14 ms,
// max 24-68 ms, against p50 3-6 ms, max 13-26 ms without).

import assert from "node:assert/strict";
import {
  type Context,
  createFrontend,
  DistributedRuntime,
  type MockerEngine,
  ModelManager,
  type PreprocessedRequest,
  startMockerWorkers,
} from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";

const CLIENTS = 500;
const CONCURRENCY = 50;
/**
 * The bound: from a client's disconnect to its request's worker context stopping.
 * Counted from the abort, or, for a client that left before the frontend answered (while
 * its request was being routed and opened), from the answer: Deno's HTTP server reports a
 * closed connection only when the answer is written to it (measured: `request.signal` was
 * never aborted before that; the frontend learnt through the body's cancel()), so no
 * frontend can react earlier.
 *
 * The bound is about this process (frontend, workers and 50 clients in one event loop):
 * beside the whole suite on a 2-core machine, its stalls put a few stops at 51-73 ms. So
 * `scripts/test.sh` and `deno task test` run this file alone, after the parallel suite
 * (alone: max 11-28 ms, p99 9-24 ms over six runs).
 */
const STOP_WITHIN_MS = 50;
/** Set by the `--trace-leaks` run: stop times are printed, not asserted. */
const TRACING_LEAKS = Deno.env.get("CANCEL_TRACE_LEAKS") === "1";
/** Client `i` sends the prompt `FIRST_TOKEN + i, FIRST_TOKEN + i + 1, ...`. */
const FIRST_TOKEN = 100;
/** Client `i` sends `i` in this header. */
const CLIENT_HEADER = "x-test-client";

/** When, on this process's clock, each client's request met a worker and stopped there. */
interface WorkerSide {
  /** The engine got the request. */
  started: number;
  /** Its context stopped (or `started`, when it came already stopped). */
  stopped?: number;
}

/**
 * Records, per client, when `engine` got its request and when the worker context stopped.
 * The engine's handler calls `engine.generate` at each request, so a wrapper set on the
 * instance sees every request the frontend sent.
 */
function observeWorkerSide(engine: MockerEngine, seen: Map<number, WorkerSide>): void {
  const generate = engine.generate.bind(engine);
  engine.generate = async function* (request: PreprocessedRequest, context?: Context) {
    const client = request.token_ids[0]! - FIRST_TOKEN;
    const side: WorkerSide = { started: performance.now() };
    seen.set(client, side);
    if (context?.isStopped()) side.stopped = side.started;
    else context?.onStop(() => side.stopped ??= performance.now());
    yield* generate(request, context);
  };
}

/** "max / p50 / p99" of `xs` (ms). */
function summary(xs: number[]): string {
  const sorted = [...xs].sort((a, b) => a - b);
  const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
  return `max ${sorted.at(-1)!.toFixed(1)} / p50 ${q(0.5).toFixed(1)} / p99 ${
    q(0.99).toFixed(1)
  } ms`;
}

let seed = 0x9e3779b9;
function rnd(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
}

Deno.test({
  name: "500 clients disconnecting at random points: each worker context stops within 50 ms, " +
    "no sequence and no held KV block is left",
  // Deno 2.9 runs tests without these unless told: this test is about leaks.
  sanitizeOps: true,
  sanitizeResources: true,
}, async () => {
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
  /** Client -> when the frontend handed its answer (status, headers, body) to the server. */
  const answeredAt = new Map<number, number>();
  const listening = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve({
    port: 0,
    hostname: "127.0.0.1",
    onListen: (a) => listening.resolve(a as Deno.NetAddr),
  }, async (request) => {
    const client = Number(request.headers.get(CLIENT_HEADER) ?? NaN);
    const response = await frontend.fetch(request);
    answeredAt.set(client, performance.now());
    return response;
  });
  const { port } = await listening.promise;
  const url = `http://127.0.0.1:${port}/v1/completions`;
  const engines = fleet.workers.map((w) => w.engine);
  const workerSide = new Map<number, WorkerSide>();
  for (const e of engines) observeWorkerSide(e, workerSide);
  /** Client -> when it aborted. */
  const abortedAt = new Map<number, number>();
  try {
    await eventually(() => models.list().length === 1, 10_000, "the model appears");
    const model = models.list()[0]!.name;
    // One request first: the frontend loads a model's tokenizer pipeline on its first
    // request (0.3-0.8 s here, most of it blocking the event loop), and cold code runs
    // slower; clients that leave during that start were measured stopping up to 80 ms after
    // the frontend answered. The bound is for a started frontend.
    const warm = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model, prompt: [1, 2, 3], max_tokens: 1, stream: true }),
    });
    await warm.text();

    let completed = 0;
    let cut = 0;
    let next = 0;
    const client = async () => {
      const i = next++;
      const prompt = Array.from(
        { length: 64 + Math.floor(rnd() * 448) },
        (_, k) => FIRST_TOKEN + k + i,
      );
      const abort = new AbortController();
      // A random point: before the first token or mid-stream (5,000 tokens take seconds, so a
      // sequence whose client left but that was not stopped would still run at the end).
      const timer = setTimeout(() => {
        abortedAt.set(i, performance.now());
        abort.abort();
      }, Math.floor(rnd() * 400));
      try {
        const r = await fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json", [CLIENT_HEADER]: String(i) },
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

    // Every worker context of a client that left stops within the bound.
    await eventually(
      () =>
        [...abortedAt.keys()].every((i) =>
          workerSide.get(i)?.stopped !== undefined || !workerSide.has(i)
        ),
      1_000,
      "every worker context of a client that left to stop",
    );
    const fromAbort: number[] = [];
    const fromVisible: number[] = [];
    const late: string[] = [];
    let beforeAnswer = 0;
    for (const [i, at] of abortedAt) {
      const side = workerSide.get(i);
      if (!side) continue; // the frontend never sent it: no worker context to stop
      const answered = answeredAt.get(i) ?? Infinity;
      if (answered > at) beforeAnswer++;
      const visible = Math.min(Math.max(at, answered), side.stopped!);
      fromAbort.push(side.stopped! - at);
      fromVisible.push(side.stopped! - visible);
      if (side.stopped! - visible > STOP_WITHIN_MS) {
        late.push(
          `client ${i}: worker context stopped ${(side.stopped! - at).toFixed(1)} ms after ` +
            `the abort; the request reached the worker ${(side.started - at).toFixed(1)} ms ` +
            `and the frontend answered ${(answered - at).toFixed(1)} ms after it`,
        );
      }
    }
    console.log(
      `cancel: ${abortedAt.size} clients aborted, ${fromAbort.length} had a worker context ` +
        `(${beforeAnswer} left before the frontend answered); worker context stopped, from ` +
        `the abort: ${summary(fromAbort)}; from when the frontend could see it: ` +
        `${summary(fromVisible)}`,
    );
    assert.ok(fromAbort.length > CLIENTS / 2, `most aborted requests reached a worker`);
    if (TRACING_LEAKS) {
      console.log(`cancel: tracing leaks, so ${late.length} late stop(s) are not checked`);
    } else {
      assert.deepEqual(
        late.slice(0, 10),
        [],
        `${late.length} worker context(s) stopped later than ${STOP_WITHIN_MS} ms`,
      );
    }

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
