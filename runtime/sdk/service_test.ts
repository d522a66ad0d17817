import assert from "node:assert/strict";
import { z } from "zod";
import { ServiceConfig } from "./config.ts";
import { ServiceDefinitionError } from "./errors.ts";
import {
  asyncOnShutdown,
  asyncOnStart,
  depends,
  dynamoAddress,
  dynamoContext,
  effectiveSettings,
  endpoint,
  service,
  serviceMeta,
} from "./service.ts";

@service({ dynamo: { namespace: "ns" }, resources: { gpu: 1, cpu: "2" }, workers: 2 })
class Backend {
  @endpoint()
  async *generate(req: { text: string }) {
    yield req.text;
  }
  @endpoint({ name: "my_chat", request: z.object({ n: z.number() }) })
  async *chat(req: { n: number }) {
    yield req.n;
  }
  @asyncOnStart
  async init() {}
  @asyncOnShutdown
  async close() {}
}

Deno.test("@service records settings, endpoints (named or by method) and hooks", () => {
  const meta = serviceMeta(Backend)!;
  assert.equal(meta.name, "Backend");
  assert.deepEqual(meta.endpoints.map((e) => [e.name, e.method]), [
    ["generate", "generate"],
    ["my_chat", "chat"],
  ]);
  assert.ok(meta.endpoints[1]!.request);
  assert.deepEqual(meta.onStart, ["init"]);
  assert.deepEqual(meta.onShutdown, ["close"]);
  assert.deepEqual(Backend.dynamoAddress(), ["ns", "Backend"]);
});

Deno.test("a subclass service inherits its parent's endpoints", () => {
  @service({ dynamo: { namespace: "ns" } })
  class Child extends Backend {
    @endpoint()
    async *extra(_req: unknown) {
      yield 1;
    }
  }
  assert.deepEqual(serviceMeta(Child)!.endpoints.map((e) => e.name), [
    "generate",
    "my_chat",
    "extra",
  ]);
  assert.deepEqual(serviceMeta(Backend)!.endpoints.map((e) => e.name), ["generate", "my_chat"]);
});

Deno.test("precedence: ServiceArgs override the decorator, which overrides built-in defaults", () => {
  const none = new ServiceConfig();
  assert.deepEqual(effectiveSettings(Backend, none), {
    name: "Backend",
    namespace: "ns",
    enabled: true,
    workers: 2,
    resources: { gpu: 1, cpu: "2" },
  });
  const yaml = new ServiceConfig({
    Backend: {
      ServiceArgs: { dynamo: { namespace: "staging" }, workers: 8, resources: { gpu: 4 } },
    },
  });
  assert.deepEqual(effectiveSettings(Backend, yaml), {
    name: "Backend",
    namespace: "staging",
    enabled: true,
    workers: 8,
    resources: { gpu: 4, cpu: "2" },
  });
  assert.deepEqual(dynamoAddress(Backend, yaml), ["staging", "Backend"]);

  @service()
  class Plain {}
  assert.deepEqual(effectiveSettings(Plain, none), {
    name: "Plain",
    namespace: "dynamo",
    enabled: true,
    workers: 1,
    resources: {},
  });
});

Deno.test("bad settings are refused with the offending value", () => {
  assert.throws(
    () =>
      effectiveSettings(Backend, new ServiceConfig({ Backend: { ServiceArgs: { workers: 0 } } })),
    /workers must be a whole number >= 1, got 0/,
  );
  assert.throws(() => {
    @service({ workers: 1.5 })
    class _Bad {}
  }, ServiceDefinitionError);
  assert.throws(() => {
    @service({ dynamo: { namespace: "a b" } })
    class _Bad {}
  }, /namespace/);
  assert.throws(() => {
    @service()
    class _Dup {
      @endpoint({ name: "x" })
      async *a() {}
      @endpoint({ name: "x" })
      async *b() {}
    }
  }, /two endpoints named x/);
});

Deno.test("depends() builds a client with one method per endpoint of the other service", () => {
  @service({ dynamo: { namespace: "ns" } })
  class Front {
    backend = depends(Backend);
  }
  const f = new Front();
  assert.equal(typeof f.backend.generate, "function");
  assert.equal(typeof f.backend.chat, "function");
  assert.throws(() => depends(class NotAService {}), /NotAService is not a @service class/);
});

Deno.test("a depends() client that is not connected says so when called", async () => {
  @service({ dynamo: { namespace: "ns" } })
  class Front {
    backend = depends(Backend);
  }
  const f = new Front();
  await assert.rejects(async () => {
    for await (const _ of f.backend.generate({ text: "x" })) { /* nothing */ }
  }, /depends\(Backend\) is not connected/);
});

Deno.test("dynamoContext outside a service explains where it is available", () => {
  assert.throws(() => dynamoContext.runtime, /only available inside a service/);
});

Deno.test("link() and dynamoAddress() refuse classes that are not services", () => {
  assert.throws(() => Backend.link(class X {}), /link\(\) target X is not a @service class/);
});
