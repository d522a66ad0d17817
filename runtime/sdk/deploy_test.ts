import assert from "node:assert/strict";
import { parse } from "yaml";
import { Frontend } from "../../examples/hello_world/graph.ts";
import { parseConfigYaml, ServiceConfig } from "./config.ts";
import { buildManifests, k8sName, manifestYaml } from "./deploy.ts";
import { resolveGraph } from "./graph.ts";

const CONFIG = await Deno.readTextFile(
  new URL("../../examples/hello_world/config.yaml", import.meta.url),
);

interface Probe {
  httpGet: { path: string; port: string };
}

interface Container {
  command?: string[];
  args: string[];
  env: { name: string; value?: string }[];
  ports: { name: string; containerPort: number }[];
  livenessProbe: Probe;
  readinessProbe: Probe;
  startupProbe: Probe;
  resources: { limits?: Record<string, string>; requests: Record<string, string> };
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

Deno.test("buildManifests: a Deployment and a Service per service, one ServiceMonitor", () => {
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
    ["Service", "frontend-backend"],
    ["Deployment", "frontend-middle"],
    ["Service", "frontend-middle"],
    ["Deployment", "frontend-frontend"],
    ["Service", "frontend-frontend"],
    ["ServiceMonitor", "frontend-system"],
  ]);
  const byName = new Map(
    manifests.filter((m) => m.kind !== "Service").map((m) => [m.name, m.resource]),
  );
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
  assert.equal(c.command, undefined, "the image's entrypoint starts dynamo");
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

Deno.test("buildManifests: probes, drain time, requests and Prometheus on the system port", () => {
  const config = new ServiceConfig(parseConfigYaml(CONFIG));
  const manifests = buildManifests(resolveGraph(Frontend, { config }), config, {
    target: "examples/hello_world/graph.ts:Frontend",
    k8sNamespace: "demo",
    systemPort: 9345,
  });
  const find = (kind: string, name: string) =>
    // deno-lint-ignore no-explicit-any
    manifests.find((m) => m.kind === kind && m.name === name)!.resource as any;
  for (const name of ["frontend-frontend", "frontend-middle", "frontend-backend"]) {
    const deployment = find("Deployment", name);
    const c = container(deployment);
    assert.deepEqual(c.ports, [{ name: "system", containerPort: 9345, protocol: "TCP" }]);
    assert.equal(c.env.find((e) => e.name === "DYN_SYSTEM_ENABLED")!.value, "true");
    assert.equal(c.env.find((e) => e.name === "DYN_SYSTEM_PORT")!.value, "9345");
    assert.deepEqual(c.livenessProbe.httpGet, { path: "/live", port: "system" });
    assert.deepEqual(c.startupProbe.httpGet, { path: "/live", port: "system" });
    assert.deepEqual(c.readinessProbe.httpGet, { path: "/health", port: "system" });
    // The runtime drains in-flight requests for up to 30 s before it exits.
    assert.equal(deployment.spec.template.spec.terminationGracePeriodSeconds, 35);
    assert.equal(deployment.spec.template.spec.securityContext.runAsNonRoot, true);
    assert.ok(c.resources.requests.cpu && c.resources.requests.memory, `${name} requests`);
    const service = find("Service", name);
    assert.deepEqual(service.spec.selector, { "app.kubernetes.io/name": name });
    assert.deepEqual(service.spec.ports, [{ name: "system", port: 9345, targetPort: "system" }]);
    assert.equal(service.metadata.labels["app.kubernetes.io/part-of"], "frontend");
  }
  // Frontend sets only cpu and memory in the example config: requests fill in nothing more.
  assert.deepEqual(container(find("Deployment", "frontend-frontend")).resources, {
    requests: { cpu: "1", memory: "512Mi" },
    limits: { cpu: "1", memory: "512Mi" },
  });
  // Backend asks only for a GPU in its config.yaml entry: memory and cpu come from the class.
  assert.deepEqual(container(find("Deployment", "frontend-backend")).resources.requests, {
    cpu: "1",
    memory: "1Gi",
    "nvidia.com/gpu": "1",
  });
  const monitor = find("ServiceMonitor", "frontend-system");
  assert.equal(monitor.apiVersion, "monitoring.coreos.com/v1");
  assert.deepEqual(monitor.spec.selector.matchLabels, {
    "app.kubernetes.io/part-of": "frontend",
    "app.kubernetes.io/managed-by": "dynamo",
  });
  assert.deepEqual(monitor.spec.namespaceSelector, { matchNames: ["demo"] });
  assert.deepEqual(monitor.spec.endpoints, [{ port: "system", path: "/metrics", interval: "15s" }]);
});

Deno.test("buildManifests refuses a system port outside 1..65535", () => {
  const config = new ServiceConfig();
  const graph = resolveGraph(Frontend, { config });
  for (const systemPort of [0, 70000, 1.5]) {
    assert.throws(
      () => buildManifests(graph, config, { target: "g.ts:Frontend", systemPort }),
      new RegExp(`system port must be an integer in 1\\.\\.65535, got ${systemPort}`),
    );
  }
});
