import assert from "node:assert/strict";
import type { Client, GenerateOptions } from "../../runtime/client.ts";
import { Context } from "../../runtime/context.ts";
import { NoInstancesError, TimeoutError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import { type EndpointGroup, type EndpointId, endpointPath } from "../model/endpoints.ts";
import { ModelInput } from "../protocols.ts";
import { ModelRouter, type RoutePolicy, type RouterMode, type TokenRouter } from "./route.ts";

/** A client that answers with a stream naming how it was chosen. */
function fakeClient(calls: string[]): Client {
  const answer = (how: string, options: GenerateOptions) => {
    const ids = options.instances === undefined ? undefined : [...options.instances].join(",");
    calls.push(`${how}:${ids}`);
    return Promise.resolve({ how } as unknown as ResponseStream<unknown>);
  };
  return {
    instanceIds: () => [],
    waitForInstances: () => Promise.resolve([]),
    roundRobin: (_: unknown, o: GenerateOptions) => answer("rr", o),
    random: (_: unknown, o: GenerateOptions) => answer("random", o),
    reportInstanceDown: (id: string) => calls.push(`down:${id}`),
  } as unknown as Client;
}

function group(name: string, instances: string[], client: Client): [string, EndpointGroup] {
  const id: EndpointId = { namespace: "ns", component: "c", name };
  return [endpointPath(id), {
    id,
    path: endpointPath(id),
    client: Promise.resolve(client),
    instances: new Set(instances),
  }];
}

function policy(mode: RouterMode, kv: string[], warnings: string[]): RoutePolicy {
  const kvRouter: TokenRouter = {
    generate(_request, options) {
      kv.push(options.instances === undefined ? "" : [...options.instances].join(","));
      return Promise.resolve({} as ResponseStream<never>);
    },
  };
  const logger = { warn: (msg: string) => warnings.push(msg) } as unknown as Logger;
  return {
    mode,
    instanceWaitMs: 0,
    kvRouter: (endpoint, _client, blockSize) => {
      kv.push(`${endpointPath(endpoint)}#${blockSize}`);
      return kvRouter;
    },
    logger,
  };
}

Deno.test("ModelRouter takes the model's endpoints in turn and only the instances that registered it", async () => {
  const calls: string[] = [];
  const client = fakeClient(calls);
  const target = {
    name: "m",
    modelInput: ModelInput.Tokens,
    endpoints: new Map([group("a", ["1", "2"], client), group("b", ["3"], client)]),
  };
  const router = new ModelRouter(target, policy("round-robin", [], []), () => Promise.resolve(16));
  for (let i = 0; i < 3; i++) await router.generate({ token_ids: [1] }, new Context());
  assert.deepEqual(calls, ["rr:1,2", "rr:3", "rr:1,2"]);
  router.reportInstanceDown("3");
  await Promise.resolve();
  assert.equal(calls.at(-1), "down:3");
});

Deno.test("ModelRouter fails with NoInstancesError when no endpoint has an instance", async () => {
  const target = {
    name: "m",
    modelInput: ModelInput.Text,
    endpoints: new Map<string, EndpointGroup>(),
  };
  const router = new ModelRouter(target, policy("random", [], []), () => Promise.resolve(16));
  await assert.rejects(router.generate({}, new Context()), NoInstancesError);
});

Deno.test("ModelRouter in kv mode sends token requests to the endpoint's KV router and text round-robin, saying so once", async () => {
  const calls: string[] = [];
  const kv: string[] = [];
  const warnings: string[] = [];
  const client = fakeClient(calls);
  const endpoints = new Map([group("a", ["1"], client)]);
  const tokens = new ModelRouter(
    { name: "t", modelInput: ModelInput.Tokens, endpoints },
    policy("kv", kv, warnings),
    () => Promise.resolve(32),
  );
  await tokens.generate({ token_ids: [1, 2] }, new Context());
  assert.deepEqual(kv, ["ns/c/a#32", "1"]);
  const text = new ModelRouter(
    { name: "x", modelInput: ModelInput.Text, endpoints },
    policy("kv", kv, warnings),
    () => Promise.reject(new Error("a text model has no block size")),
  );
  await text.generate({ prompt: "p" }, new Context());
  await text.generate({ prompt: "p" }, new Context());
  assert.deepEqual(calls, ["rr:1", "rr:1"]);
  assert.equal(warnings.length, 1);
});

Deno.test("ModelRouter in kv mode sends an embedding request (token lists) round-robin", async () => {
  const calls: string[] = [];
  const kv: string[] = [];
  const endpoints = new Map([group("a", ["1"], fakeClient(calls))]);
  const router = new ModelRouter(
    { name: "e", modelInput: ModelInput.Tokens, endpoints },
    policy("kv", kv, []),
    () => Promise.resolve(16),
  );
  await router.generate({ token_ids: [[1, 2], [3]] }, new Context());
  assert.deepEqual(kv, []);
  assert.deepEqual(calls, ["rr:1"]);
});

Deno.test("ModelRouter gives up on an endpoint whose first discovery listing never comes, and on a gone client at once", async () => {
  const id: EndpointId = { namespace: "ns", component: "c", name: "stuck" };
  const stuck: EndpointGroup = {
    id,
    path: endpointPath(id),
    client: new Promise(() => {}), // discovery unreachable: the listing is retried forever
    instances: new Set(["1"]),
  };
  const target = {
    name: "m",
    modelInput: ModelInput.Text,
    endpoints: new Map([[stuck.path, stuck]]),
  };
  const router = new ModelRouter(target, policy("round-robin", [], []), () => Promise.resolve(16));
  const started = performance.now();
  await assert.rejects(router.generate({}, new Context()), (err: Error) => {
    assert.ok(err instanceof TimeoutError, String(err));
    assert.match(err.message, /ns\/c\/stuck/);
    return true;
  });
  const waited = performance.now() - started;
  assert.ok(waited >= 900 && waited < 5000, `waited ${waited} ms`);

  const gone = new Context();
  const pending = router.generate({}, gone);
  gone.kill();
  await assert.rejects(pending);
});
