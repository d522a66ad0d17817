import assert from "node:assert/strict";
import { ServiceConfig } from "./config.ts";
import { GraphError } from "./errors.ts";
import { describeGraph, resolveGraph } from "./graph.ts";
import { depends, dynamoContext, endpoint, service } from "./service.ts";

/** A fresh set of classes per test, since link() edits a class for good. */
function pipeline() {
  @service({ dynamo: { namespace: "p" } })
  class Worker {
    @endpoint()
    async *generate(_req: unknown) {
      yield 1;
    }
  }
  @service({ dynamo: { namespace: "p" } })
  class Router {
    worker = depends(Worker);
    @endpoint()
    async *generate(_req: unknown) {
      yield 1;
    }
  }
  @service({ dynamo: { namespace: "p" }, workers: 2 })
  class Processor {
    worker = depends(Worker);
    router = depends(Router);
    @endpoint()
    async *generate(_req: unknown) {
      yield 1;
    }
  }
  @service({ dynamo: { namespace: "p" } })
  class Frontend {
    processor = depends(Processor);
    @endpoint()
    async *generate(_req: unknown) {
      yield 1;
    }
  }
  return { Worker, Router, Processor, Frontend };
}

Deno.test("resolveGraph follows depends() fields, dependencies first", () => {
  const { Frontend } = pipeline();
  const g = resolveGraph(Frontend, { config: new ServiceConfig() });
  assert.equal(g.entry, "Frontend");
  assert.deepEqual(g.services.map((s) => s.name), ["Worker", "Router", "Processor", "Frontend"]);
  assert.deepEqual(g.get("Processor")!.dependencies, [
    { field: "worker", service: "Worker" },
    { field: "router", service: "Router" },
  ]);
  assert.equal(g.get("Processor")!.workers, 2);
  assert.deepEqual(g.get("Frontend")!.endpoints, ["generate"]);
  assert.deepEqual(g.warnings, []);
});

Deno.test("link() keeps only linked dependencies, and the graph shrinks accordingly", () => {
  const { Frontend, Processor, Router, Worker } = pipeline();
  // Processor -> Router only: Processor's direct Worker edge goes, Router still needs Worker.
  assert.equal(Processor.link(Router), Router);
  let g = resolveGraph(Frontend, { config: new ServiceConfig() });
  assert.deepEqual(g.get("Processor")!.dependencies, [{ field: "router", service: "Router" }]);
  assert.deepEqual(g.get("Processor")!.removed, [{ field: "worker", service: "Worker" }]);
  assert.deepEqual(g.services.map((s) => s.name), ["Worker", "Router", "Processor", "Frontend"]);

  const p2 = pipeline();
  p2.Frontend.link(p2.Processor).link(p2.Worker);
  g = resolveGraph(p2.Frontend, { config: new ServiceConfig() });
  assert.deepEqual(g.services.map((s) => s.name), ["Worker", "Processor", "Frontend"]);
  assert.equal(g.get("Router"), undefined);
  assert.ok(Worker);
});

Deno.test("link() to a service that is not a dependency is a graph error", () => {
  const { Frontend, Worker } = pipeline();
  Frontend.link(Worker);
  assert.throws(
    () => resolveGraph(Frontend, { config: new ServiceConfig() }),
    (e: unknown) =>
      e instanceof GraphError && /Frontend\.link\(Worker\): Frontend has no depends\(Worker\)/
        .test(e.message),
  );
});

Deno.test("precedence: CLI > YAML > decorator for ServiceArgs, config > constructor defaults", () => {
  @service({ dynamo: { namespace: "default" }, resources: { gpu: 1 }, workers: 1 })
  class LLMService {
    modelName: string;
    temperature: number;
    maxTokens: number;
    constructor(
      { model_name = "gpt-2", temperature = 0.7, max_tokens = 1024 }: {
        model_name?: string;
        temperature?: number;
        max_tokens?: number;
      } = {},
    ) {
      this.modelName = model_name;
      this.temperature = temperature;
      this.maxTokens = max_tokens;
    }
  }
  const yaml = {
    LLMService: {
      ServiceArgs: {
        dynamo: { namespace: "prod" },
        resources: { gpu: 4, memory: "64Gi" },
        workers: 8,
      },
      model_name: "llama-3-70b-instruct",
      temperature: 0.8,
    },
  };
  const cli = { LLMService: { temperature: 0.9, ServiceArgs: { workers: 3 } } };
  const config = ServiceConfig.fromLayers({
    env: { LLMService: { model_name: "from-env", max_tokens: 7 } },
    yaml,
    cli,
  });
  const node = resolveGraph(LLMService, { config }).get("LLMService")!;
  assert.equal(node.namespace, "prod", "YAML over decorator");
  assert.deepEqual(node.resources, { gpu: 4, memory: "64Gi" }, "YAML over decorator, merged");
  assert.equal(node.workers, 3, "CLI over YAML");
  assert.deepEqual(node.params, {
    model_name: "llama-3-70b-instruct", // YAML over env
    max_tokens: 7, // env when nothing else sets it
    temperature: 0.9, // CLI over YAML
  });
  const s = new LLMService(node.params);
  assert.equal(s.temperature, 0.9);
  assert.equal(new LLMService({}).temperature, 0.7, "constructor default when unset");
});

Deno.test("a constructor using dynamoContext or throwing still yields its depends() edges", () => {
  @service()
  class B {}
  @service()
  class A {
    b = depends(B);
    component: unknown;
    constructor() {
      this.component = dynamoContext.component; // not available while probing
    }
  }
  @service()
  class C {
    a = depends(A);
    constructor() {
      ServiceConfig.getInstance().require("C", "api_key");
    }
  }
  const g = resolveGraph(C, { config: new ServiceConfig() });
  assert.deepEqual(g.services.map((s) => s.name), ["B", "A", "C"]);
  assert.deepEqual(g.get("A")!.dependencies, [{ field: undefined, service: "B" }]);
  assert.equal(g.warnings.length, 1);
  assert.match(g.warnings[0]!, /constructing C .* missing configuration C\.api_key/);
});

Deno.test("two classes with one name in a graph are refused; cycles resolve", () => {
  const make = () => {
    @service()
    class Same {}
    return Same;
  };
  const S1 = make();
  const S2 = make();
  @service()
  class Top {
    a = depends(S1);
    b = depends(S2);
  }
  assert.throws(
    () => resolveGraph(Top, { config: new ServiceConfig() }),
    /two different service classes are named Same/,
  );

  @service()
  class Ping {
    // deno-lint-ignore no-explicit-any
    pong = depends(Pong as any);
  }
  @service()
  class Pong {
    ping = depends(Ping);
  }
  const g = resolveGraph(Ping, { config: new ServiceConfig() });
  assert.deepEqual(g.services.map((s) => s.name).sort(), ["Ping", "Pong"]);
});

Deno.test("describeGraph prints services, endpoints, edges and the effective config", () => {
  const { Frontend } = pipeline();
  const config = new ServiceConfig({ Frontend: { greeting: "hi" } });
  const text = describeGraph(resolveGraph(Frontend, { config }), config);
  assert.match(text, /p\/Processor {2}workers=2/);
  assert.match(text, /endpoint p\/Frontend\/generate/);
  assert.match(text, /depends on Router \(field router\)/);
  assert.match(text, /"greeting": "hi"/);
});
