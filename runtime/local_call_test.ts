// Calls within one process on the in-process plane go straight to the handler
// (runtime/local_call.ts). The contract suite (tests/runtime_contract_test.ts) checks their
// semantics on the embedded backend; these check what is particular to the direct way.

import assert from "node:assert/strict";
import { CancelledError, type Client, Context, DistributedRuntime } from "../mod.ts";
import { LocalRequestPlane } from "./transport/local.ts";

async function withEndpoint(
  handler: (req: never, ctx: Context) => AsyncIterable<unknown>,
  fn: (rt: DistributedRuntime, client: Client) => Promise<void>,
): Promise<void> {
  const rt = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
  try {
    const endpoint = rt.namespace("test").component("backend").endpoint("generate");
    const serving = endpoint.serveEndpoint(handler);
    serving.catch(() => {});
    const client = await endpoint.client();
    await client.waitForInstances({ timeoutMs: 5000 });
    await fn(rt, client);
  } finally {
    await rt.shutdown();
  }
}

Deno.test("a call in process skips the request plane: items by reference, counted by the endpoint", async () => {
  const items = [{ n: 1 }, { n: 2 }, { n: 3 }];
  await withEndpoint(async function* () {
    yield* items;
  }, async (rt, client) => {
    const request = LocalRequestPlane.prototype.request;
    let planeRequests = 0;
    LocalRequestPlane.prototype.request = function (...args) {
      planeRequests++;
      return request.apply(this, args);
    };
    try {
      const got: unknown[] = [];
      for await (const item of await client.generate({})) got.push(item);
      assert.equal(got.length, 3);
      got.forEach((item, i) => assert.equal(item, items[i], "the handler's own objects"));
      assert.equal(planeRequests, 0);
    } finally {
      LocalRequestPlane.prototype.request = request;
    }
    const text = await rt.metrics.render();
    assert.match(text, /dynamo_component_requests_total\{[^}]*endpoint="generate"[^}]*\} 1/);
  });
});

Deno.test("a kill before the first item rejects the call and kills the handler's context", async () => {
  const seen = Promise.withResolvers<Context>();
  const release = Promise.withResolvers<void>();
  await withEndpoint(async function* (_req: never, ctx: Context) {
    seen.resolve(ctx);
    await release.promise;
    yield { late: true };
  }, async (_rt, client) => {
    const ctx = new Context();
    const call = client.generate({}, { context: ctx });
    const worker = await seen.promise;
    assert.notEqual(worker, ctx, "the handler has a context of its own");
    assert.equal(worker.id, ctx.id);
    ctx.kill();
    await assert.rejects(call, CancelledError);
    assert.equal(worker.isKilled(), true);
    release.resolve();
  });
});

Deno.test("a consumer that stops after the last item leaves a finished handler's context alone", async () => {
  const seen = Promise.withResolvers<Context>();
  await withEndpoint(async function* (_req: never, ctx: Context) {
    seen.resolve(ctx);
    yield 1;
    yield 2;
  }, async (_rt, client) => {
    const stream = await client.generate<number>({});
    const it = stream[Symbol.asyncIterator]();
    assert.deepEqual(await it.next(), { value: 1, done: false });
    assert.deepEqual(await it.next(), { value: 2, done: false });
    const worker = await seen.promise;
    // Let the handler finish, then break out before reading its end.
    await new Promise((r) => setTimeout(r, 10));
    await it.return?.();
    assert.equal(worker.isStopped(), false);
    assert.equal(stream.context.isStopped(), false);
  });
});

Deno.test("a consumer that breaks out early kills the handler's context", async () => {
  const seen = Promise.withResolvers<Context>();
  const ended = Promise.withResolvers<void>();
  await withEndpoint(async function* (_req: never, ctx: Context) {
    seen.resolve(ctx);
    try {
      for (let i = 0;; i++) {
        yield i;
        await new Promise((r) => setTimeout(r, 1));
      }
    } finally {
      ended.resolve();
    }
  }, async (_rt, client) => {
    for await (const i of await client.generate<number>({})) if (i === 2) break;
    const worker = await seen.promise;
    assert.equal(worker.isKilled(), true);
    await ended.promise; // the handler was returned, its cleanup ran
  });
});
