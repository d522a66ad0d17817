// `dynamo deploy graph.ts:Entry -f config.yaml -o DIR`: writes validated Kubernetes
// manifests for the graph: a ConfigMap with the configuration, a Deployment and a Service per
// service, and a ServiceMonitor for Prometheus.

import { join } from "node:path";
import { InvalidArgumentError } from "../runtime/errors.ts";
import { type Command, ExitCode, type Io, parseCommandArgs, UsageError } from "./_common.ts";
import { loadGraph, loadServeConfig, splitOverrides } from "./serve.ts";

const usage =
  `Usage: dynamo deploy GRAPH.ts:Entry -o DIR [-f CONFIG.yaml] [--Service.key=value ...] [options]

Resolves the graph as 'dynamo serve' does and writes Kubernetes manifests to DIR: a
ConfigMap holding the merged configuration (DYNAMO_SERVICE_CONFIG); per service a
Deployment (replicas = workers; cpu, memory and nvidia.com/gpu from its resources, as
requests and limits) whose container runs 'dynamo serve GRAPH.ts:Entry --service-name
Service' with its system status server on (DYN_SYSTEM_ENABLED, DYN_SYSTEM_PORT), startup
and liveness probes on /live, a readiness probe on /health, and 35 s to stop (the
runtime's 30 s drain of in-flight requests, then exit), and a Service for that port; and
a ServiceMonitor (monitoring.coreos.com/v1) scraping /metrics from every Service. Every
manifest is validated against its schema before anything is written. The etcd and NATS
addresses come from ETCD_ENDPOINTS and NATS_SERVER (default http://etcd:2379 and
nats://nats:4222, in-cluster services of those names).

Options:
  -o, --output DIR      where to write the manifests (created if missing)
  -f, --file FILE       YAML configuration
  --image IMAGE         container image with the project and the graph (default dynamo-deno:latest)
  --name NAME           prefix of the resource names (default: the entry, in kebab case)
  --namespace NS        Kubernetes namespace of the resources
  --system-port PORT    the system status port: probes, Service, metrics (default 9090)
  -h, --help            show this help`;

async function run(args: string[], io: Io): Promise<number> {
  const { config: cli, rest } = splitOverrides("deploy", args);
  const { values, positionals } = parseCommandArgs("deploy", rest, {
    output: { type: "string", short: "o" },
    file: { type: "string", short: "f" },
    image: { type: "string" },
    name: { type: "string" },
    namespace: { type: "string" },
    "system-port": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length !== 1) {
    throw new UsageError(
      `needs one GRAPH.ts:Entry, got ${positionals.length} argument(s)`,
      "deploy",
    );
  }
  if (values.output === undefined) throw new UsageError("needs -o DIR", "deploy");
  const target = positionals[0]!;
  const port = values["system-port"];
  if (port !== undefined && !/^\d+$/.test(port)) {
    throw new UsageError(
      `--system-port: expected a port number, got ${JSON.stringify(port)}`,
      "deploy",
    );
  }
  const systemPort = port === undefined ? undefined : Number(port);
  const config = await loadServeConfig("deploy", values.file, cli);
  const graph = await loadGraph("deploy", target, config);
  // Loaded here, not at start-up: the Kubernetes schemas are large, and every service
  // process `dynamo serve` starts loads this CLI.
  const { buildManifests, manifestYaml } = await import("../runtime/sdk/deploy.ts");
  let manifests;
  try {
    manifests = buildManifests(graph, config, {
      target,
      image: values.image,
      name: values.name,
      k8sNamespace: values.namespace,
      etcdEndpoints: Deno.env.get("ETCD_ENDPOINTS") || undefined,
      natsServer: Deno.env.get("NATS_SERVER") || undefined,
      systemPort,
    });
  } catch (err: unknown) {
    if (err instanceof InvalidArgumentError) throw new UsageError(err.message, "deploy");
    throw err;
  }
  await Deno.mkdir(values.output, { recursive: true });
  for (const m of manifests) {
    const path = join(values.output, m.file);
    await Deno.writeTextFile(path, manifestYaml(m));
    io.out(`${m.kind.padEnd(14)} ${m.name.padEnd(30)} ${path}`);
  }
  return ExitCode.Ok;
}

/** `dynamo deploy`. */
export const deployCommand: Command = {
  name: "deploy",
  summary: "write Kubernetes manifests for a graph of @service classes",
  usage,
  run,
};
