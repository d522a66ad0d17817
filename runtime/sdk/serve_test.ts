import assert from "node:assert/strict";
import { z } from "zod";
import { DistributedRuntime } from "../distributed_runtime.ts";
import { RemoteError, TimeoutError } from "../errors.ts";
import { ServiceConfig } from "./config.ts";
import { resolveGraph } from "./graph.ts";
import { serveService } from "./serve.ts";
import {
  asyncOnShutdown,
  asyncOnStart,
  depends,
  dynamoContext,
  endpoint,
  service,
} from "./service.ts";
import { Backend, Frontend, Middle } from "../../examples/hello_world/graph.ts";
import { instanceKey } from "../keys.ts";

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

Deno.test("serveService runs the hello-world pipeline on one embedded runtime", async () => {
  const runtime = await DistributedRuntime.connect();
  const config = new ServiceConfig();
  const graph = resolveGraph(Frontend, { config });
  try {
    for (const node of graph.services) await serveService(node.cls, runtime, { config, node });
    const client = await runtime.namespace("hello_world").component("Frontend")
      .endpoint("generate").client();
    const items = await collect(await client.generate<string>({ text: "hi there" }));
    assert.deepEqual(items, [
      `Frontend: Middle(${runtime.instanceId}): Backend: hi`,
      `Frontend: Middle(${runtime.instanceId}): Backend: there-mid-back`,
    ]);
    // The zod schema refuses a bad request with a clear error.
    await assert.rejects(
      async () => collect(await client.generate({ txt: 1 })),
      (e: unknown) =>
        e instanceof RemoteError && e.remoteName === "RequestValidationError" &&
        /invalid request for hello_world\/Frontend\/generate: text: /.test(e.message),
    );
    assert.ok(Backend && Middle);
  } finally {
    await runtime.shutdown();
  }
});

Deno.test("hooks run around serving; constructor gets config; dynamoContext is set", async () => {
  const events: string[] = [];
  @service({ dynamo: { namespace: "hooks" } })
  class Svc {
    greeting: string;
    component: string;
    constructor({ greeting = "hello" }: { greeting?: string } = {}) {
      this.greeting = greeting;
      this.component = dynamoContext.component.path;
    }
    @asyncOnStart
    async start() {
      await Promise.resolve();
      events.push(`start ${this.greeting} ${this.component} ${dynamoContext.namespace}`);
    }
    @asyncOnShutdown
    async stop() {
      await Promise.resolve();
      events.push("shutdown");
    }
    @endpoint({ name: "say", request: z.object({ who: z.string() }) })
    async *hello(req: { who: string }) {
      yield `${this.greeting} ${req.who}`;
    }
    @endpoint()
    async once(req: number) {
      return await Promise.resolve(req + 1);
    }
  }
  const runtime = await DistributedRuntime.connect();
  try {
    const config = new ServiceConfig({
      Svc: { greeting: "hi", ServiceArgs: { dynamo: { namespace: "h2" } } },
    });
    const s = await serveService(Svc, runtime, { config });
    assert.deepEqual(events, ["start hi h2/Svc h2"]);
    assert.deepEqual(s.endpoints, ["h2/Svc/say", "h2/Svc/once"]);
    const say = await runtime.namespace("h2").component("Svc").endpoint("say").client();
    // A JSON string request is parsed before validation (Pydantic's model_validate_json).
    assert.deepEqual(await collect(await say.generate('{"who":"bob"}')), ["hi bob"]);
    const once = await runtime.namespace("h2").component("Svc").endpoint("once").client();
    assert.deepEqual(await collect(await once.generate(41)), [42]);
    await s.stop();
    assert.deepEqual(events, ["start hi h2/Svc h2", "shutdown"]);
  } finally {
    await runtime.shutdown();
  }
});

Deno.test("runtime shutdown stops the service and runs its shutdown hooks", async () => {
  let closed = 0;
  @service({ dynamo: { namespace: "sd" } })
  class S {
    @endpoint()
    async *generate(_r: unknown) {
      yield 1;
    }
    @asyncOnShutdown
    async close() {
      await Promise.resolve();
      closed++;
    }
  }
  const runtime = await DistributedRuntime.connect();
  const s = await serveService(S, runtime, { config: new ServiceConfig() });
  await runtime.shutdown();
  await s.done;
  assert.equal(closed, 1);
});

Deno.test("a dependency that link() removed refuses calls at run time", async () => {
  @service({ dynamo: { namespace: "lk" } })
  class A {
    @endpoint()
    async *generate(_r: unknown) {
      yield "a";
    }
  }
  @service({ dynamo: { namespace: "lk" } })
  class B {
    @endpoint()
    async *generate(_r: unknown) {
      yield "b";
    }
  }
  @service({ dynamo: { namespace: "lk" } })
  class Top {
    a = depends(A);
    b = depends(B);
    @endpoint()
    async *generate(which: string) {
      const dep = which === "a" ? this.a : this.b;
      yield* dep.generate(null);
    }
  }
  Top.link(A);
  const config = new ServiceConfig();
  const graph = resolveGraph(Top, { config });
  assert.deepEqual(graph.services.map((s) => s.name), ["A", "Top"]);
  const runtime = await DistributedRuntime.connect();
  try {
    for (const node of graph.services) await serveService(node.cls, runtime, { config, node });
    const c = await runtime.namespace("lk").component("Top").endpoint("generate").client();
    assert.deepEqual(await collect(await c.generate("a")), ["a"]);
    await assert.rejects(
      async () => collect(await c.generate("b")),
      /depends\(B\) is not part of the graph: Top\.link\(\) removed it/,
    );
  } finally {
    await runtime.shutdown();
  }
});

Deno.test("the sdk_config service sees CLI > YAML > decorator > constructor defaults", async () => {
  const { LLMService } = await import("../../examples/sdk_config/service.ts");
  const { parseConfigYaml } = await import("./config.ts");
  const yaml = parseConfigYaml(
    await Deno.readTextFile(new URL("../../examples/sdk_config/prod_config.yaml", import.meta.url)),
  );
  const config = ServiceConfig.fromLayers({ yaml, cli: { LLMService: { temperature: 0.9 } } });
  const runtime = await DistributedRuntime.connect();
  try {
    await serveService(LLMService, runtime, { config });
    const c = await runtime.namespace("prod").component("LLMService").endpoint("config").client();
    assert.deepEqual(await collect(await c.generate(null)), [{
      model_name: "llama-3-70b-instruct",
      temperature: 0.9,
      max_tokens: 2048,
      cache_size: 10000,
      use_kv_cache: true,
      namespace: "prod",
    }]);
  } finally {
    await runtime.shutdown();
  }
});

Deno.test("serveService gives up with a TimeoutError when its endpoints never show up in discovery", async () => {
  const events: string[] = [];
  @service({ dynamo: { namespace: "rt" } })
  class Lost {
    @asyncOnStart
    async open() {
      await Promise.resolve();
      events.push("start");
    }
    @asyncOnShutdown
    async close() {
      await Promise.resolve();
      events.push("shutdown");
    }
    @endpoint()
    async *generate(_r: unknown) {
      yield 1;
    }
  }
  const runtime = await DistributedRuntime.connect();
  const discovery = runtime.discovery;
  const get = discovery.get.bind(discovery);
  // Discovery that never answers with the key: the poll must end on its own deadline.
  discovery.get = () => Promise.resolve(undefined);
  try {
    await assert.rejects(
      serveService(Lost, runtime, { config: new ServiceConfig(), registerTimeoutMs: 100 }),
      (e: unknown) =>
        e instanceof TimeoutError &&
        /Lost: rt\/Lost\/generate was not registered in discovery within 100 ms/.test(e.message),
    );
    assert.deepEqual(events, ["start", "shutdown"]);
    const key = instanceKey("rt", "Lost", "generate", runtime.instanceId);
    assert.equal(await get(key), undefined, "the endpoint left discovery again");
  } finally {
    discovery.get = get;
    await runtime.shutdown();
  }
});

Deno.test("serveService runs the shutdown hooks when serving fails after the start hooks ran", async () => {
  const events: string[] = [];
  @service({ dynamo: { namespace: "sf" } })
  class Leaky {
    @asyncOnStart
    async open() {
      await Promise.resolve();
      events.push("engine opened");
    }
    @asyncOnShutdown
    async closeEngine() {
      await Promise.resolve();
      events.push("engine closed");
    }
    @asyncOnShutdown
    async closePublisher() {
      await Promise.resolve();
      events.push("publisher closed");
      throw new Error("publisher already gone");
    }
    @asyncOnShutdown
    async last() {
      await Promise.resolve();
      events.push("last hook");
    }
    @endpoint()
    async *generate(_r: unknown) {
      yield 1;
    }
  }
  const runtime = await DistributedRuntime.connect();
  const discovery = runtime.discovery;
  const put = discovery.put.bind(discovery);
  discovery.put = () => Promise.reject(new Error("discovery refused the write"));
  try {
    // createService() fails: the original error comes out, every shutdown hook ran.
    await assert.rejects(
      serveService(Leaky, runtime, { config: new ServiceConfig() }),
      /discovery refused the write/,
    );
    assert.deepEqual(events, ["engine opened", "engine closed", "publisher closed", "last hook"]);
  } finally {
    discovery.put = put;
    await runtime.shutdown();
  }
});

Deno.test("serveService starts nothing when its signal is already aborted", async () => {
  let constructed = 0;
  @service({ dynamo: { namespace: "ab" } })
  class Never {
    constructor() {
      constructed++;
    }
    @endpoint()
    async *generate(_r: unknown) {
      yield 1;
    }
  }
  const runtime = await DistributedRuntime.connect();
  try {
    const abort = new AbortController();
    abort.abort(new Error("stopped before it started"));
    await assert.rejects(
      serveService(Never, runtime, { config: new ServiceConfig(), signal: abort.signal }),
      /stopped before it started/,
    );
    assert.equal(constructed, 0);
    assert.deepEqual(await runtime.discovery.list("v1/"), []);
  } finally {
    await runtime.shutdown();
  }
});

Deno.test("a signal aborted while a start hook runs stops the service before it is ready", async () => {
  const events: string[] = [];
  const abort = new AbortController();
  @service({ dynamo: { namespace: "as" } })
  class Slow {
    @asyncOnStart
    async open() {
      await Promise.resolve();
      abort.abort(new Error("Ctrl-C during start"));
      events.push("start");
    }
    @asyncOnShutdown
    async close() {
      await Promise.resolve();
      events.push("shutdown");
    }
    @endpoint()
    async *generate(_r: unknown) {
      yield 1;
    }
  }
  const runtime = await DistributedRuntime.connect();
  try {
    await assert.rejects(
      serveService(Slow, runtime, { config: new ServiceConfig(), signal: abort.signal }),
      /Ctrl-C during start/,
    );
    assert.deepEqual(events, ["start", "shutdown"]);
    assert.deepEqual(
      (await runtime.discovery.list("v1/")).filter((kv) => kv.key.includes("/Slow/")),
      [],
    );
  } finally {
    await runtime.shutdown();
  }
});
