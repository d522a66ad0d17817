import assert from "node:assert/strict";
import { parse } from "yaml";
import { Frontend } from "../../examples/hello_world/graph.ts";
import { parseConfigYaml, ServiceConfig } from "./config.ts";
import { buildManifests, k8sName, manifestYaml } from "./deploy.ts";
import { resolveGraph } from "./graph.ts";

const CONFIG = await Deno.readTextFile(
  new URL("../../examples/hello_world/config.yaml", import.meta.url),
);

interface Container {
  args: string[];
  env: { name: string; value?: string }[];
  resources?: { limits: Record<string, string>; requests: Record<string, string> };
}

function container(resource: Record<string, unknown>): Container {
  // deno-lint-ignore no-explicit-any
  return (resource as any).spec.template.spec.containers[0];
}

Deno.test("k8sName turns class names into DNS labels", () => {
  assert.equal(k8sName("Frontend"), "frontend");
  assert.equal(k8sName("VllmWorker"), "vllm-worker");
  assert.equal(k8sName("KV_Router2"), "kv-router2");
});

Deno.test("buildManifests: one Deployment per service with replicas and resources", () => {
  const config = new ServiceConfig(parseConfigYaml(CONFIG));
  const manifests = buildManifests(resolveGraph(Frontend, { config }), config, {
    target: "examples/hello_world/graph.ts:Frontend",
    image: "registry.local/hello:1",
    etcdEndpoints: "http://etcd.infra:2379",
    natsServer: "nats://nats.infra:4222",
    k8sNamespace: "demo",
  });
  assert.deepEqual(manifests.map((m) => [m.kind, m.name]), [
    ["ConfigMap", "frontend-config"],
    ["Deployment", "frontend-backend"],
    ["Deployment", "frontend-middle"],
    ["Deployment", "frontend-frontend"],
  ]);
  const byName = new Map(manifests.map((m) => [m.name, m.resource]));
  // deno-lint-ignore no-explicit-any
  const replicas = (n: string) => (byName.get(n) as any).spec.replicas;
  assert.equal(replicas("frontend-middle"), 2);
  assert.equal(replicas("frontend-backend"), 1);
  assert.deepEqual(container(byName.get("frontend-backend")!).resources!.limits, {
    cpu: "1",
    memory: "1Gi",
    "nvidia.com/gpu": "1",
  });
  assert.deepEqual(container(byName.get("frontend-middle")!).resources!.requests, {
    cpu: "2",
    memory: "2Gi",
  });
  const c = container(byName.get("frontend-middle")!);
  assert.deepEqual(c.args, [
    "serve",
    "examples/hello_world/graph.ts:Frontend",
    "--service-name",
    "Middle",
  ]);
  assert.equal(c.env.find((e) => e.name === "ETCD_ENDPOINTS")!.value, "http://etcd.infra:2379");
  assert.equal(c.env.find((e) => e.name === "NATS_SERVER")!.value, "nats://nats.infra:4222");
  // deno-lint-ignore no-explicit-any
  const data = (byName.get("frontend-config") as any).data;
  assert.deepEqual(JSON.parse(data.DYNAMO_SERVICE_CONFIG), config.toJSON());
  assert.deepEqual(parse(manifestYaml(manifests[2]!)), manifests[2]!.resource);
  // deno-lint-ignore no-explicit-any
  assert.equal((byName.get("frontend-middle") as any).metadata.namespace, "demo");
});

Deno.test("buildManifests refuses names Kubernetes would refuse", () => {
  const config = new ServiceConfig();
  const graph = resolveGraph(Frontend, { config });
  assert.throws(
    () => buildManifests(graph, config, { target: "g.ts:Frontend", name: "Bad_Name" }),
    /DNS-1123 label.*"Bad_Name"/,
  );
});
