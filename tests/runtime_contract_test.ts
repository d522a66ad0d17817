// One contract suite for the runtime, run against the embedded default and against real
// etcd + NATS. Each case starts fresh runtimes ("processes") on the backend.

import assert from "node:assert/strict";
import {
  CancelledError,
  type Context,
  Context as Ctx,
  type DistributedRuntime,
  EngineShutdownError,
  InvalidArgumentError,
  NoInstancesError,
  RemoteError,
  RuntimeShutdownError,
  StreamIncompleteError,
  TimeoutError,
} from "../mod.ts";
import { type Backend, BACKENDS, eventually, within } from "./_helpers/backends.ts";

type Case = (b: Backend) => Promise<void>;

const words = async function* (req: { text: string }) {
  for (const w of req.text.split(/\s+/)) yield { text: w };
};

function serve(
  rt: DistributedRuntime,
  handler: (req: never, ctx: Context) => AsyncIterable<unknown>,
  name = "generate",
) {
  const endpoint = rt.namespace("test").component("backend").endpoint(name);
  const serving = endpoint.serveEndpoint(handler);
  serving.catch(() => {});
  return { endpoint, serving };
}

async function collect<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of stream) out.push(x);
  return out;
}

/** Serves `handler` on `rt` and returns a client that already sees the instance. */
async function serveAndConnect(
  rt: DistributedRuntime,
  handler: (req: never, ctx: Context) => AsyncIterable<unknown>,
) {
  const { endpoint } = serve(rt, handler);
  const client = await endpoint.client();
  await client.waitForInstances({ timeoutMs: 5000 });
  return { endpoint, client };
}

/** A handler that records the contexts it ran with and yields `n` items slowly. */
function recorder() {
  const contexts: Context[] = [];
  const started = Promise.withResolvers<Context>();
  const handler = async function* (req: { n?: number; delayMs?: number }, ctx: Context) {
    contexts.push(ctx);
    started.resolve(ctx);
    for (let i = 0; i < (req.n ?? 1000); i++) {
      if (ctx.isStopped()) return;
      yield i;
      await new Promise((r) => setTimeout(r, req.delayMs ?? 5));
    }
  };
  return { contexts, started: started.promise, handler };
}

const cases: Record<string, Case> = {
  async "items arrive in order, one per word"(b) {
    const rt = await b.runtime();
    const { endpoint } = await serve(rt, words);
    const client = await endpoint.client();
    assert.deepEqual(await client.waitForInstances({ timeoutMs: 5000 }), [endpoint.instanceId]);
    const items = await collect(await client.generate({ text: "Hello, Dynamo! how are you" }));
    assert.deepEqual(items, ["Hello,", "Dynamo!", "how", "are", "you"].map((text) => ({ text })));
  },

  async "a first item slower than the connect deadline still arrives"(b) {
    // The deadline covers acknowledging and calling back, not the engine's own latency
    // (a queue or a long prefill before the first token).
    const rt = await b.runtime({ connectTimeoutMs: 200 });
    const { client } = await serveAndConnect(rt, async function* () {
      await new Promise((r) => setTimeout(r, 600));
      yield "late";
    });
    assert.deepEqual(await collect(await client.generate({})), ["late"]);
  },

  async "a handler that takes no context still works"(b) {
    const rt = await b.runtime();
    const { client } = await serveAndConnect(rt, async function* (req: { n: number }) {
      for (let i = 0; i < req.n; i++) yield i;
    });
    assert.deepEqual(await collect(await client.generate({ n: 3 })), [0, 1, 2]);
  },

  async "a handler that throws before its first item rejects generate() with RemoteError"(b) {
    const rt = await b.runtime();
    // deno-lint-ignore require-yield
    const { client } = await serveAndConnect(rt, async function* () {
      throw new TypeError("bad request: no text");
    });
    await assert.rejects(client.generate({}), (err: unknown) => {
      assert.ok(err instanceof RemoteError);
      assert.equal(err.message, "bad request: no text");
      assert.equal(err.remoteName, "TypeError");
      return true;
    });
  },

  async "a handler error mid-stream reaches the caller as RemoteError after the items before it"(
    b,
  ) {
    const rt = await b.runtime();
    const { client } = await serveAndConnect(rt, async function* () {
      yield 1;
      yield 2;
      throw new Error("engine exploded");
    });
    const got: unknown[] = [];
    await assert.rejects(async () => {
      for await (const x of await client.generate({})) got.push(x);
    }, (err: unknown) => err instanceof RemoteError && err.message === "engine exploded");
    assert.deepEqual(got, [1, 2]);
  },

  async "EngineShutdownError from a handler reaches the caller as EngineShutdownError"(b) {
    const rt = await b.runtime();
    const { client } = await serveAndConnect(rt, async function* () {
      yield "partial";
      throw new EngineShutdownError("worker shutting down, migrating request");
    });
    const got: unknown[] = [];
    await assert.rejects(async () => {
      for await (const x of await client.generate({})) got.push(x);
    }, EngineShutdownError);
    assert.deepEqual(got, ["partial"]);
  },

  async "breaking out of the caller's loop stops the worker's context"(b) {
    const rt = await b.runtime();
    const rec = recorder();
    const { client } = await serveAndConnect(rt, rec.handler);
    const stream = await client.generate({ n: 100000, delayMs: 1 });
    for await (const i of stream) if (i === 2) break;
    const ctx = await within(rec.started, 1000, "the handler to start");
    await within(ctx.stopped(), 1000, "the worker context to stop after the caller broke out");
    assert.equal(stream.context.isStopped(), true);
  },

  async "aborting the caller's signal stops the worker and fails iteration with CancelledError"(b) {
    const rt = await b.runtime();
    const rec = recorder();
    const { client } = await serveAndConnect(rt, rec.handler);
    const abort = new AbortController();
    const stream = await client.generate({ n: 100000, delayMs: 1 }, { signal: abort.signal });
    await assert.rejects(async () => {
      for await (const i of stream) if (i === 3) abort.abort();
    }, CancelledError);
    const ctx = await within(rec.started, 1000, "the handler to start");
    await within(ctx.stopped(), 1000, "the worker context to stop after the abort");
  },

  async "aborting before the first item rejects generate() with CancelledError"(b) {
    const rt = await b.runtime();
    const gate = Promise.withResolvers<void>();
    const seen = Promise.withResolvers<Context>();
    const { client } = await serveAndConnect(rt, async function* (_req: unknown, ctx: Context) {
      seen.resolve(ctx);
      await Promise.race([gate.promise, ctx.stopped()]);
      yield "late";
    });
    const abort = new AbortController();
    const pending = client.generate({}, { signal: abort.signal });
    const ctx = await within(seen.promise, 2000, "the handler to start");
    abort.abort();
    await assert.rejects(pending, CancelledError);
    await within(ctx.stopped(), 1000, "the worker context to stop");
    gate.resolve();
  },

  async "stopping a parent context stops the remote context"(b) {
    const rt = await b.runtime();
    const rec = recorder();
    const { client } = await serveAndConnect(rt, rec.handler);
    const parent = new Ctx();
    const child = new Ctx();
    parent.linkChild(child);
    const stream = await client.generate({ n: 100000, delayMs: 1 }, { context: child });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    const ctx = await within(rec.started, 1000, "the handler to start");
    assert.equal(ctx.id, child.id, "the request id is the caller context's id");
    parent.stopGenerating();
    await within(ctx.stopped(), 1000, "the worker context to stop after the parent stopped");
    // Stop is graceful: the stream ends normally once the handler returns.
    for (let r = await it.next(); !r.done; r = await it.next()) { /* drain */ }
  },

  async "a stop before anyone reads the stream still reaches the worker"(b) {
    const rt = await b.runtime();
    const rec = recorder();
    const { client } = await serveAndConnect(rt, rec.handler);
    const stream = await client.generate({ n: 100000, delayMs: 1 });
    const ctx = await within(rec.started, 1000, "the handler to start");
    stream.context.stopGenerating(); // nobody has called next() yet
    await within(ctx.stopped(), 1000, "the worker context to stop before the stream was read");
    for await (const _ of stream) { /* the stream still ends normally */ }
  },

  async "stopGenerating() lets the handler finish gracefully with a last item"(b) {
    const rt = await b.runtime();
    const { client } = await serveAndConnect(rt, async function* (_req: unknown, ctx: Context) {
      let i = 0;
      while (!ctx.isStopped()) {
        yield i++;
        await new Promise((r) => setTimeout(r, 2));
      }
      yield "bye";
    });
    const stream = await client.generate({});
    const got: unknown[] = [];
    for await (const x of stream) {
      got.push(x);
      if (x === 3) stream.context.stopGenerating();
    }
    assert.equal(got.at(-1), "bye");
    assert.deepEqual(got.slice(0, 4), [0, 1, 2, 3]);
  },

  async "kill() ends the caller's stream at once and kills the worker context"(b) {
    const rt = await b.runtime();
    const rec = recorder();
    const { client } = await serveAndConnect(rt, rec.handler);
    const stream = await client.generate({ n: 100000, delayMs: 1 });
    const got: unknown[] = [];
    for await (const x of stream) {
      got.push(x);
      if (x === 1) stream.context.kill();
    }
    assert.deepEqual(got, [0, 1]);
    const ctx = await within(rec.started, 1000, "the handler to start");
    await eventually(() => ctx.isKilled(), 1000, "the worker context is killed");
  },

  async "instances appear and disappear live"(b) {
    const rt1 = await b.runtime();
    const rt2 = await b.runtime();
    const observer = await b.runtime();
    const { endpoint: e1 } = await serve(rt1, words);
    const client = await observer.namespace("test").component("backend").endpoint("generate")
      .client();
    await client.waitForInstances({ timeoutMs: 5000 });
    assert.deepEqual(client.instanceIds(), [e1.instanceId]);
    const { endpoint: e2 } = await serve(rt2, words);
    await client.waitForInstances({ timeoutMs: 5000, count: 2 });
    assert.deepEqual(client.instanceIds(), [e1.instanceId, e2.instanceId].sort());
    await rt1.shutdown(); // a clean shutdown revokes the lease at once
    await eventually(
      () => client.instanceIds().length === 1,
      2000,
      "the stopped instance disappears",
    );
    assert.deepEqual(client.instanceIds(), [e2.instanceId]);
  },

  async "roundRobin alternates, random spreads, and direct() reaches the named instance"(b) {
    const rts = [await b.runtime(), await b.runtime()];
    const eps = [];
    for (const rt of rts) {
      const id = rt.instanceId;
      eps.push(
        (await serve(rt, async function* () {
          yield id;
        })).endpoint,
      );
    }
    const caller = await b.runtime();
    const client = await caller.namespace("test").component("backend").endpoint("generate")
      .client();
    await client.waitForInstances({ timeoutMs: 5000, count: 2 });
    const rr = [];
    for (let i = 0; i < 4; i++) rr.push((await collect(await client.roundRobin({})))[0]);
    assert.notEqual(rr[0], rr[1]);
    assert.deepEqual([rr[0], rr[1]], [rr[2], rr[3]]);
    const seen = new Set();
    for (let i = 0; i < 40; i++) seen.add((await collect(await client.random({})))[0]);
    assert.equal(seen.size, 2, "40 random picks reach both instances");
    for (const ep of eps) {
      assert.deepEqual(await collect(await client.direct({}, ep.instanceId)), [ep.instanceId]);
    }
    await assert.rejects(client.direct({}, "deadbeef"), NoInstancesError);
  },

  async "no instances: generate() fails fast and waitForInstances() honours its deadline"(b) {
    const rt = await b.runtime();
    const client = await rt.namespace("test").component("nobody").endpoint("generate").client();
    assert.deepEqual(client.instanceIds(), []);
    await assert.rejects(client.generate({}), NoInstancesError);
    await assert.rejects(client.waitForInstances({ timeoutMs: 100 }), TimeoutError);
    const abort = new AbortController();
    const waiting = client.waitForInstances({ signal: abort.signal });
    abort.abort();
    await assert.rejects(waiting);
    const closing = await (await b.runtime()).namespace("test").component("nobody").endpoint(
      "generate",
    ).client();
    const pendingWait = assert.rejects(closing.waitForInstances(), RuntimeShutdownError);
    await closing.close();
    await pendingWait; // closing the client settles its waiters
    const later = client.waitForInstances({ timeoutMs: 5000 });
    const worker = await b.runtime();
    worker.namespace("test").component("nobody").endpoint("generate").serveEndpoint(words).catch(
      () => {},
    );
    assert.deepEqual(await later, [worker.instanceId]);
  },

  async "a 4 MiB item arrives intact"(b) {
    const rt = await b.runtime();
    const big = "x".repeat(4 * 1024 * 1024 - 10) + "0123456789";
    const { client } = await serveAndConnect(rt, async function* () {
      yield { big };
      yield "after";
    });
    const items = await collect(await client.generate({})) as [{ big: string }, string];
    assert.equal(items[0].big.length, big.length);
    assert.equal(items[0].big, big);
    assert.equal(items[1], "after");
  },

  async "200 concurrent streams of 100 items each arrive complete and in order"(b) {
    const rt = await b.runtime();
    await serve(rt, async function* (req: { id: number }) {
      for (let i = 0; i < 100; i++) {
        yield { id: req.id, i };
        if (i % 10 === 0) await new Promise((r) => setTimeout(r, 0));
      }
    });
    const client = await (await b.runtime()).namespace("test").component("backend").endpoint(
      "generate",
    ).client();
    await client.waitForInstances({ timeoutMs: 5000 });
    const results = await Promise.all(
      Array.from(
        { length: 200 },
        async (_, id) =>
          collect(await client.generate({ id })) as Promise<{ id: number; i: number }[]>,
      ),
    );
    results.forEach((items, id) => {
      assert.deepEqual(items, Array.from({ length: 100 }, (_, i) => ({ id, i })));
    });
  },

  async "a slow consumer holds the producer back instead of buffering everything"(b) {
    const rt = await b.runtime();
    let produced = 0;
    const chunk = "y".repeat(64 * 1024);
    const { client } = await serveAndConnect(rt, async function* () {
      for (let i = 0; i < 5000; i++) {
        produced++;
        yield chunk; // 5000 x 64 KiB = 320 MiB if nothing pushed back
      }
    });
    const stream = await client.generate({});
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(produced < 1000, `producer ran ahead by ${produced} items of 64 KiB`);
    let n = 1;
    for (let r = await it.next(); !r.done; r = await it.next()) n++;
    assert.equal(n, 5000);
  },

  async "a stop that comes while the endpoint is still registering still stops it"(b) {
    const rt = await b.runtime();
    const abort = new AbortController();
    const endpoint = rt.namespace("test").component("early").endpoint("generate");
    const serving = endpoint.serveEndpoint(words, { signal: abort.signal });
    abort.abort(); // registration has not finished yet
    await within(serving, 5000, "serveEndpoint to return after the early stop");
  },

  async "graceful shutdown lets in-flight streams finish"(b) {
    const worker = await b.runtime();
    const rec = recorder();
    const { endpoint, serving } = await serve(worker, rec.handler);
    const client = await (await b.runtime()).namespace("test").component("backend").endpoint(
      "generate",
    ).client();
    await client.waitForInstances({ timeoutMs: 5000 });
    const stream = await client.generate({ n: 20, delayMs: 5 });
    const shutdown = worker.shutdown();
    const items = await collect(stream);
    assert.equal(items.length, 20);
    await within(shutdown, 5000, "shutdown to finish");
    await within(serving, 1000, "serveEndpoint to resolve");
    assert.ok(endpoint);
    await eventually(
      () => client.instanceIds().length === 0,
      2000,
      "the instance leaves discovery",
    );
  },

  async "non-graceful shutdown ends in-flight streams as incomplete"(b) {
    const worker = await b.runtime();
    const rec = recorder();
    const endpoint = worker.namespace("test").component("backend").endpoint("generate");
    endpoint.serveEndpoint(rec.handler, { gracefulShutdown: false }).catch(() => {});
    const client = await (await b.runtime()).namespace("test").component("backend").endpoint(
      "generate",
    ).client();
    await client.waitForInstances({ timeoutMs: 5000 });
    const stream = await client.generate({ n: 100000, delayMs: 2 });
    let n = 0;
    await assert.rejects(async () => {
      for await (const _ of stream) if (++n === 3) void worker.shutdown();
    }, StreamIncompleteError);
  },

  async "bad names and handlers are rejected with InvalidArgumentError"(b) {
    const rt = await b.runtime();
    assert.throws(() => rt.namespace("a.b"), InvalidArgumentError);
    assert.throws(() => rt.namespace("ns").component(""), InvalidArgumentError);
    assert.throws(() => rt.namespace("ns").component("c").endpoint("x/y"), InvalidArgumentError);
    const ep = rt.namespace("ns").component("c").endpoint("e");
    await assert.rejects(ep.serveEndpoint("nope" as never), InvalidArgumentError);
  },
};

for (const backend of BACKENDS) {
  Deno.test({
    name: `runtime contract on ${backend.name}`,
    ignore: !backend.available,
    async fn(t) {
      for (const [name, run] of Object.entries(cases)) {
        await t.step(name, async () => {
          const b = await backend.open();
          try {
            await run(b);
          } finally {
            await b.close();
          }
        });
      }
    },
  });
}
