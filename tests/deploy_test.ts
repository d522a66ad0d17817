// `dynamo deploy` of the hello-world graph: validated manifests with the configured
// replicas and resources, probes, Services and a ServiceMonitor, written to the output folder.

import assert from "node:assert/strict";
import { parse } from "yaml";
import { runDeno } from "./_helpers/process.ts";

const GRAPH = "examples/hello_world/graph.ts:Frontend";

interface Deployment {
  kind: string;
  metadata: { name: string };
  spec: {
    replicas: number;
    template: {
      spec: {
        terminationGracePeriodSeconds: number;
        containers: {
          args: string[];
          env: { name: string; value?: string }[];
          resources?: { limits: Record<string, string>; requests: Record<string, string> };
          livenessProbe: { httpGet: { path: string; port: string } };
          readinessProbe: { httpGet: { path: string; port: string } };
          ports: { name: string; containerPort: number }[];
        }[];
      };
    };
  };
}

Deno.test("dynamo deploy writes validated Deployments, Services, a ServiceMonitor and the config", async () => {
  const out = await Deno.makeTempDir({ prefix: "dynamo-deploy-" });
  try {
    const run = await runDeno(
      [
        "cli/main.ts",
        "deploy",
        GRAPH,
        "-f",
        "examples/hello_world/config.yaml",
        "-o",
        out,
        "--image",
        "registry.local/hello:1",
        "--Backend.ServiceArgs.workers=3",
        "--system-port",
        "9100",
      ],
      { ETCD_ENDPOINTS: "http://etcd.prod:2379", NATS_SERVER: "nats://nats.prod:4222" },
      60_000,
    );
    assert.equal(run.code, 0, run.stderr);
    const files = [...Deno.readDirSync(out)].map((e) => e.name).sort();
    assert.deepEqual(files, [
      "frontend-backend.deployment.yaml",
      "frontend-backend.service.yaml",
      "frontend-config.configmap.yaml",
      "frontend-frontend.deployment.yaml",
      "frontend-frontend.service.yaml",
      "frontend-middle.deployment.yaml",
      "frontend-middle.service.yaml",
      "frontend-system.servicemonitor.yaml",
    ]);
    const read = (f: string) => parse(Deno.readTextFileSync(`${out}/${f}`)) as Deployment;
    const expected: Record<string, [number, Record<string, string>]> = {
      "frontend-frontend": [1, { cpu: "1", memory: "512Mi" }],
      "frontend-middle": [2, { cpu: "2", memory: "2Gi" }],
      "frontend-backend": [3, { cpu: "1", memory: "1Gi", "nvidia.com/gpu": "1" }],
    };
    for (const [name, [replicas, limits]] of Object.entries(expected)) {
      const d = read(`${name}.deployment.yaml`);
      assert.equal(d.kind, "Deployment");
      assert.equal(d.spec.replicas, replicas, `${name} replicas`);
      const c = d.spec.template.spec.containers[0]!;
      assert.deepEqual(c.resources?.limits, limits, `${name} resources`);
      assert.deepEqual(c.resources?.requests, limits, `${name} requests`);
      assert.deepEqual(c.ports, [{ name: "system", containerPort: 9100, protocol: "TCP" }]);
      assert.deepEqual(c.livenessProbe.httpGet, { path: "/live", port: "system" });
      assert.deepEqual(c.readinessProbe.httpGet, { path: "/health", port: "system" });
      assert.equal(c.env.find((e) => e.name === "DYN_SYSTEM_PORT")?.value, "9100");
      assert.equal(d.spec.template.spec.terminationGracePeriodSeconds, 35);
      const svc = parse(Deno.readTextFileSync(`${out}/${name}.service.yaml`));
      assert.equal(svc.kind, "Service");
      assert.deepEqual(svc.spec.ports, [{ name: "system", port: 9100, targetPort: "system" }]);
      assert.equal(
        c.args.at(-1),
        name.replace("frontend-", "").replace(/^./, (x) => x.toUpperCase()),
      );
      assert.equal(c.env.find((e) => e.name === "ETCD_ENDPOINTS")?.value, "http://etcd.prod:2379");
      assert.equal(c.env.find((e) => e.name === "NATS_SERVER")?.value, "nats://nats.prod:4222");
    }
    const cm = parse(Deno.readTextFileSync(`${out}/frontend-config.configmap.yaml`)) as {
      data: Record<string, string>;
    };
    const config = JSON.parse(cm.data.DYNAMO_SERVICE_CONFIG!);
    assert.equal(config.Backend.ServiceArgs.workers, 3, "CLI override in the ConfigMap");
    assert.equal(config.Middle.ServiceArgs.workers, 2);
    const monitor = parse(Deno.readTextFileSync(`${out}/frontend-system.servicemonitor.yaml`));
    assert.equal(monitor.apiVersion, "monitoring.coreos.com/v1");
    assert.equal(monitor.kind, "ServiceMonitor");
    assert.deepEqual(monitor.spec.endpoints, [{
      port: "system",
      path: "/metrics",
      interval: "15s",
    }]);
    assert.match(run.stdout, /ServiceMonitor +frontend-system/);
  } finally {
    await Deno.remove(out, { recursive: true });
  }
});

Deno.test("dynamo deploy refuses a system port that is not a port", async () => {
  for (
    const [port, message] of [
      ["http", /--system-port: expected a port number, got "http"/],
      ["70000", /the system port must be an integer in 1\.\.65535, got 70000/],
    ] as const
  ) {
    const run = await runDeno(
      ["cli/main.ts", "deploy", GRAPH, "-o", "/tmp/dynamo-deploy-unused", "--system-port", port],
      {},
      60_000,
    );
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, message);
  }
});

Deno.test("dynamo deploy and serve report a bad graph target as a usage error", async () => {
  const run = await runDeno(
    ["cli/main.ts", "deploy", "examples/hello_world/graph.ts:Nope", "-o", "/tmp/x"],
    {},
    60_000,
  );
  assert.equal(run.code, 2);
  assert.match(
    run.stderr,
    /exports no @service class named Nope \(services it exports: Backend, Frontend, Middle\)/,
  );
  const bad = await runDeno(
    ["cli/main.ts", "serve", GRAPH, "--Middle.x={oops", "--dry-run"],
    {},
    60_000,
  );
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--Middle\.x: "\{oops" looks like JSON but does not parse/);
});

Deno.test("dynamo serve --dry-run prints the graph with the effective configuration", async () => {
  const run = await runDeno(
    [
      "cli/main.ts",
      "serve",
      GRAPH,
      "-f",
      "examples/hello_world/config.yaml",
      "--Middle.ServiceArgs.workers=5",
      "--Frontend.greeting=hi",
      "--dry-run",
    ],
    {},
    60_000,
  );
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /hello_world\/Middle {2}workers=5/);
  assert.match(
    run.stdout,
    /hello_world\/Backend {2}workers=1 {2}resources=\{"cpu":"1","memory":"1Gi","gpu":1\}/,
  );
  assert.match(run.stdout, /depends on Middle \(field middle\)/);
  assert.match(run.stdout, /"greeting": "hi"/);
});

Deno.test("the sdk_config example resolves seed 004's effective configuration", async () => {
  const run = await runDeno(
    [
      "cli/main.ts",
      "serve",
      "examples/sdk_config/service.ts:LLMService",
      "-f",
      "examples/sdk_config/prod_config.yaml",
      "--LLMService.temperature=0.9",
      "--dry-run",
    ],
    {},
    60_000,
  );
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stdout,
    /prod\/LLMService {2}workers=8 {2}resources=\{"gpu":4,"memory":"64Gi"\}/,
  );
  assert.match(run.stdout, /"temperature": 0\.9/);
  assert.match(run.stdout, /"model_name": "llama-3-70b-instruct"/);
});
