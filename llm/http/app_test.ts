import assert from "node:assert/strict";
import { DistributedRuntime, EmbeddedCluster } from "../../runtime/mod.ts";
import { echoEngine } from "../engines/echo.ts";
import { ModelManager } from "../model/registry.ts";
import { ModelInput, ModelType } from "../protocols.ts";
import { registerLlm } from "../model/register.ts";
import { builtinTestModel } from "../model/test_model.ts";
import { createFrontend } from "./app.ts";

async function eventually(check: () => Promise<boolean>, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function worker(cluster: EmbeddedCluster, name: string) {
  const rt = await DistributedRuntime.connect({ embedded: cluster });
  const endpoint = rt.namespace("ns").component("backend").endpoint("generate");
  endpoint.serveEndpoint(echoEngine()).catch(() => {});
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    await builtinTestModel(),
    {
      modelName: name,
    },
  );
  return rt;
}

Deno.test("a model is listed while at least one worker registers it, and /health waits for discovery", async () => {
  const cluster = new EmbeddedCluster();
  const front = await DistributedRuntime.connect({ embedded: cluster });
  // No grace: a model is unknown (404) as soon as its last worker leaves.
  const models = new ModelManager(front, { goneGraceMs: 0 });
  const app = createFrontend({ models });
  const get = (path: string) => app.fetch(new Request(`http://x${path}`));
  const ids = async () =>
    ((await (await get("/v1/models")).json()).data as { id: string }[]).map((m) => m.id);
  try {
    assert.equal((await get("/health")).status, 503, "unhealthy before the first discovery sync");
    await models.start();
    assert.equal((await get("/health")).status, 200);
    assert.deepEqual(await ids(), []);
    const a = await worker(cluster, "m1");
    const b = await worker(cluster, "m1");
    await eventually(async () => (await ids()).includes("m1"), "m1 is listed");
    await a.shutdown();
    assert.deepEqual(await ids(), ["m1"], "still served by the second worker");
    const r = await app.fetch(
      new Request("http://x/v1/completions", {
        method: "POST",
        body: JSON.stringify({ model: "m1", prompt: "hello world", max_tokens: 2 }),
      }),
    );
    assert.equal(r.status, 200);
    assert.equal((await r.json()).choices[0].text, "hello world");
    await b.shutdown();
    await eventually(async () => (await ids()).length === 0, "m1 disappears with its last worker");
    const gone = await app.fetch(
      new Request("http://x/v1/completions", {
        method: "POST",
        body: JSON.stringify({ model: "m1", prompt: "x" }),
      }),
    );
    assert.equal(gone.status, 404);
    assert.equal((await gone.json()).error.code, "model_not_found");
  } finally {
    await models.close();
    await front.shutdown();
  }
});

Deno.test("unknown routes are 404 and wrong methods 405, as OpenAI error objects", async () => {
  const front = await DistributedRuntime.connect();
  const models = new ModelManager(front);
  const app = createFrontend({ models });
  try {
    const missing = await app.fetch(new Request("http://x/v2/nothing"));
    assert.equal(missing.status, 404);
    assert.equal(typeof (await missing.json()).error.message, "string");
    const wrong = await app.fetch(new Request("http://x/v1/chat/completions"));
    assert.equal(wrong.status, 405);
    assert.match((await wrong.json()).error.message, /POST/);
  } finally {
    await models.close();
    await front.shutdown();
  }
});

Deno.test("a request for a model registered before its endpoint serves waits for the endpoint", async () => {
  const cluster = new EmbeddedCluster();
  const front = await DistributedRuntime.connect({ embedded: cluster });
  const models = new ModelManager(front);
  await models.start();
  const app = createFrontend({ models });
  const rt = await DistributedRuntime.connect({ embedded: cluster });
  try {
    const endpoint = rt.namespace("ns").component("late").endpoint("generate");
    // Seed 001's order: register_llm first, serve_endpoint after.
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Completions,
      endpoint,
      await builtinTestModel(),
      { modelName: "late" },
    );
    await eventually(
      () => Promise.resolve(models.get("late") !== undefined),
      "the model is listed",
    );
    const answer = app.fetch(
      new Request("http://x/v1/completions", {
        method: "POST",
        body: JSON.stringify({ model: "late", prompt: "on time" }),
      }),
    );
    await new Promise((r) => setTimeout(r, 200));
    endpoint.serveEndpoint(echoEngine()).catch(() => {});
    const r = await answer;
    assert.equal(r.status, 200);
    assert.equal((await r.json()).choices[0].text, "on time");
  } finally {
    await rt.shutdown();
    await models.close();
    await front.shutdown();
  }
});

Deno.test("usage reports the prompt tokens an engine found in its prefix cache", async () => {
  const cluster = new EmbeddedCluster();
  const rt = await DistributedRuntime.connect({ embedded: cluster });
  const endpoint = rt.namespace("ns").component("backend").endpoint("generate");
  endpoint.serveEndpoint(async function* () {
    yield { token_ids: [9707], cached_tokens: 2 };
    yield { token_ids: [1879], finish_reason: "length" };
  }).catch(() => {});
  await registerLlm(ModelInput.Tokens, ModelType.Completions, endpoint, await builtinTestModel(), {
    modelName: "cached",
  });
  const models = new ModelManager(rt);
  await models.start();
  const app = createFrontend({ models });
  try {
    await eventually(() => Promise.resolve(models.get("cached") !== undefined), "model is listed");
    const r = await app.fetch(
      new Request("http://x/v1/completions", {
        method: "POST",
        body: JSON.stringify({ model: "cached", prompt: [1, 2, 3], max_tokens: 2 }),
      }),
    );
    assert.equal(r.status, 200);
    const usage = (await r.json()).usage;
    assert.deepEqual(usage, {
      prompt_tokens: 3,
      completion_tokens: 2,
      total_tokens: 5,
      prompt_tokens_details: { cached_tokens: 2 },
    });
  } finally {
    await models.close();
    await rt.shutdown();
  }
});

Deno.test("a tokens model's pipeline is loaded when the model appears, not on its first request", async () => {
  const cluster = new EmbeddedCluster();
  const front = await DistributedRuntime.connect({ embedded: cluster });
  const models = new ModelManager(front);
  const loads: string[] = [];
  const load = models.loader.loadPipeline.bind(models.loader);
  models.loader.loadPipeline = (cardKey) => {
    loads.push(cardKey);
    return load(cardKey);
  };
  const app = createFrontend({ models });
  let w1: DistributedRuntime | undefined;
  let w2: DistributedRuntime | undefined;
  try {
    await models.start();
    w1 = await worker(cluster, "m1");
    await eventually(() => Promise.resolve(loads.length === 1), "the pipeline loads unasked");
    w2 = await worker(cluster, "m1");
    await eventually(() => Promise.resolve(models.list()[0]?.instanceCount === 2), "2 instances");
    const r = await app.fetch(
      new Request("http://x/v1/completions", {
        method: "POST",
        body: JSON.stringify({ model: "m1", prompt: "hello", max_tokens: 1 }),
      }),
    );
    assert.equal(r.status, 200);
    await r.body?.cancel();
    assert.equal(loads.length, 1, "loaded once: not again for a second worker or a request");
  } finally {
    await w1?.shutdown();
    await w2?.shutdown();
    await models.close();
    await front.shutdown();
  }
});

Deno.test("a text model's card is read once per card key, not on every request", async () => {
  const cluster = new EmbeddedCluster();
  const front = await DistributedRuntime.connect({ embedded: cluster });
  const rt = await DistributedRuntime.connect({ embedded: cluster });
  const models = new ModelManager(front);
  const cards: string[] = [];
  const loadCard = models.loader.loadCard.bind(models.loader);
  models.loader.loadCard = (cardKey) => {
    cards.push(cardKey);
    return loadCard(cardKey);
  };
  const app = createFrontend({ models });
  try {
    const endpoint = rt.namespace("ns").component("text").endpoint("generate");
    endpoint.serveEndpoint(async function* (req: { model: string }) {
      yield {
        id: "c",
        object: "text_completion",
        created: 1,
        model: req.model,
        choices: [{ index: 0, text: "ok", finish_reason: "stop" }],
      };
    }).catch(() => {});
    await registerLlm(ModelInput.Text, ModelType.Completions, endpoint, await builtinTestModel(), {
      modelName: "t",
    });
    await models.start();
    await eventually(() => Promise.resolve(models.get("t") !== undefined), "the model is listed");
    for (let i = 0; i < 3; i++) {
      const r = await app.fetch(
        new Request("http://x/v1/completions", {
          method: "POST",
          body: JSON.stringify({ model: "t", prompt: "p" }),
        }),
      );
      assert.equal(r.status, 200);
      assert.equal((await r.json()).choices[0].text, "ok");
    }
    assert.equal(cards.length, 1);
  } finally {
    await models.close();
    await rt.shutdown();
    await front.shutdown();
  }
});

Deno.test("a model whose workers all left a moment ago answers 503 with Retry-After, not 404, until its grace ends", async () => {
  const cluster = new EmbeddedCluster();
  const front = await DistributedRuntime.connect({ embedded: cluster });
  const models = new ModelManager(front, { goneGraceMs: 300 });
  const app = createFrontend({ models });
  const ask = () =>
    app.fetch(
      new Request("http://x/v1/completions", {
        method: "POST",
        body: JSON.stringify({ model: "m1", prompt: "hello", max_tokens: 1 }),
      }),
    );
  try {
    await models.start();
    const w = await worker(cluster, "m1");
    await eventually(() => Promise.resolve(models.get("m1") !== undefined), "m1 is served");
    await w.shutdown(); // as when a lease expires during an etcd outage
    await eventually(() => Promise.resolve(models.get("m1") === undefined), "m1 is gone");
    const gap = await ask();
    assert.equal(gap.status, 503, await gap.clone().text());
    assert.equal(gap.headers.get("retry-after"), "1");
    assert.match((await gap.json()).error.message, /no instances of model m1/);
    // Registered again: served.
    const again = await worker(cluster, "m1");
    await eventually(async () => (await ask()).status === 200, "m1 is served again");
    await again.shutdown();
    await eventually(() => Promise.resolve(models.get("m1") === undefined), "m1 is gone again");
    await new Promise((r) => setTimeout(r, 400));
    const gone = await ask();
    assert.equal(gone.status, 404, "after the grace period the model is unknown");
    await gone.body?.cancel();
  } finally {
    await models.close();
    await front.shutdown();
  }
});

Deno.test("GET /v1/models/{id} describes one model (ids with slashes too); x-request-id is echoed", async () => {
  const cluster = new EmbeddedCluster();
  const front = await DistributedRuntime.connect({ embedded: cluster });
  const models = new ModelManager(front);
  const app = createFrontend({ models });
  try {
    await models.start();
    const w = await worker(cluster, "org/m1");
    await eventually(() => Promise.resolve(models.get("org/m1") !== undefined), "org/m1 is served");
    const one = await app.fetch(new Request("http://x/v1/models/org/m1"));
    assert.equal(one.status, 200);
    const body = await one.json();
    assert.equal(body.id, "org/m1");
    assert.equal(body.object, "model");
    const missing = await app.fetch(new Request("http://x/v1/models/nope"));
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.code, "model_not_found");
    const post = await app.fetch(new Request("http://x/v1/models/org/m1", { method: "POST" }));
    assert.equal(post.status, 405);
    await post.body?.cancel();

    const ask = (headers: Record<string, string>, stream: boolean) =>
      app.fetch(
        new Request("http://x/v1/completions", {
          method: "POST",
          headers,
          body: JSON.stringify({ model: "org/m1", prompt: "hello", max_tokens: 1, stream }),
        }),
      );
    for (const stream of [false, true]) {
      const mine = await ask({ "x-request-id": "client-42.a:b" }, stream);
      assert.equal(mine.headers.get("x-request-id"), "client-42.a:b");
      // The answer's id is the client's too.
      assert.match(await mine.text(), /"id":"cmpl-client-42\.a:b"/);
      const bad = await ask({ "x-request-id": "not safe\u00e9" }, stream);
      assert.match(
        bad.headers.get("x-request-id") ?? "",
        /^[0-9a-f-]{36}$/,
        "replaced by the server's",
      );
      await bad.text();
      const none = await ask({}, stream);
      assert.match(none.headers.get("x-request-id") ?? "", /^[0-9a-f-]{36}$/);
      await none.text();
    }
    await w.shutdown();
  } finally {
    await models.close();
    await front.shutdown();
  }
});
