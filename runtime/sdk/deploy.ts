// Kubernetes manifests for a resolved graph (`dynamo deploy`): one Deployment and one Service
// per service (replicas = workers, resources from the service's settings, probes on the
// system status port), one ConfigMap with the configuration and one ServiceMonitor for
// Prometheus, each validated against its schema before it is returned.

import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { Deployment } from "kubernetes-models/apps/v1";
import { ConfigMap, Service } from "kubernetes-models/v1";
import { stringify as toYaml } from "yaml";
import { InvalidArgumentError } from "../errors.ts";
import { SERVICE_CONFIG_ENV, type ServiceConfig } from "./config.ts";
import type { GraphNode, ServiceGraph } from "./graph.ts";

/** Options of {@linkcode buildManifests}. */
export interface BuildManifestsOptions {
  /** `graph.ts:Entry` as the container will see it (its working directory is the image's). */
  target: string;
  /** Container image with this project and the graph (default "dynamo-deno:latest"). */
  image?: string;
  /** Prefix of every resource name (default: the entry service's name, in kebab case). */
  name?: string;
  /** Kubernetes namespace of the resources (default: none, kubectl's current one). */
  k8sNamespace?: string;
  /** etcd endpoints the services use (default "http://etcd:2379"). */
  etcdEndpoints?: string;
  /** NATS server the services use (default "nats://nats:4222"). */
  natsServer?: string;
  /** Command that starts `dynamo` in the image (default: the image's entrypoint). */
  command?: string[];
  /** Port of each service's system status server: /live, /health, /metrics (default 9090). */
  systemPort?: number;
}

/** One manifest: a file name and the validated resource. */
export interface Manifest {
  /** e.g. "frontend-middle.deployment.yaml" */
  file: string;
  kind: "Deployment" | "ConfigMap" | "Service" | "ServiceMonitor";
  name: string;
  /** The resource as plain JSON data. */
  resource: Record<string, unknown>;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** The system status port of the reference's Kubernetes deployments. */
const DEFAULT_SYSTEM_PORT = 9090;
/** The name of that port in the pod spec, the Service and the ServiceMonitor. */
const SYSTEM_PORT_NAME = "system";
/**
 * How long a stopping worker lets in-flight requests finish: `serveEndpoint`'s default
 * `shutdownTimeoutMs` (30 s), as `dynamo serve` runs it.
 */
const DRAIN_SECONDS = 30;
/** Time past the drain to leave discovery and exit before Kubernetes sends SIGKILL. */
const EXIT_MARGIN_SECONDS = 5;
/** The non-root user of the Dockerfile's runtime stage. */
const IMAGE_UID = 10001;
/** What a container asks the scheduler for when its service sets no cpu or memory. */
const DEFAULT_REQUESTS: Record<string, string> = { cpu: "250m", memory: "256Mi" };

/** "HelloWorld_v2" -> "hello-world-v2": a DNS-1123 label for Kubernetes names. */
export function k8sName(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1-$2").toLowerCase().replace(/[^a-z0-9-]+/g, "-")
    .replace(/-+/g, "-").replace(/^-|-$/g, "");
}

function checkName(what: string, name: string): string {
  if (name.length > 63 || !DNS_LABEL.test(name)) {
    throw new InvalidArgumentError(
      `${what} must be a DNS-1123 label (lowercase letters, digits, "-", at most 63), got ${
        JSON.stringify(name)
      }`,
    );
  }
  return name;
}

/**
 * Kubernetes resources of a service: its cpu, memory and `nvidia.com/gpu` as limits, and
 * as requests over the defaults (every container asks for something, so the scheduler
 * places it knowingly).
 */
function containerResources(
  node: GraphNode,
): { requests: Record<string, string>; limits?: Record<string, string> } {
  const limits: Record<string, string> = {};
  const r = node.resources;
  if (r.cpu !== undefined) limits.cpu = String(r.cpu);
  if (r.memory !== undefined) limits.memory = String(r.memory);
  if (r.gpu !== undefined && Number(r.gpu) > 0) limits["nvidia.com/gpu"] = String(r.gpu);
  const requests = { ...DEFAULT_REQUESTS, ...limits };
  return Object.keys(limits).length > 0 ? { requests, limits } : { requests };
}

function checkPort(port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`the system port must be an integer in 1..65535, got ${port}`);
  }
  return port;
}

/**
 * Builds and validates the manifests of `graph`: a ConfigMap, then a Deployment and a
 * Service per service, then one ServiceMonitor scraping every service's system port.
 * Containers get `DYN_SYSTEM_ENABLED`/`DYN_SYSTEM_PORT`, a liveness probe on `/live`, a
 * readiness probe on `/health` (both on that port), resource requests, and a termination
 * grace period covering the runtime's drain of in-flight requests.
 *
 * @throws {InvalidArgumentError} a name that is not a DNS-1123 label, a bad system port
 * @throws {Error} a resource that fails Kubernetes schema validation (kubernetes-models)
 *
 * @example
 * ```ts ignore
 * const manifests = buildManifests(resolveGraph(Frontend, { config }), config, {
 *   target: "graph.ts:Frontend",
 * });
 * ```
 */
export function buildManifests(
  graph: ServiceGraph,
  config: ServiceConfig,
  options: BuildManifestsOptions,
): Manifest[] {
  const prefix = checkName("the deployment name", options.name ?? k8sName(graph.entry));
  const ns = options.k8sNamespace === undefined
    ? {}
    : { namespace: checkName("the Kubernetes namespace", options.k8sNamespace) };
  const image = options.image ?? "dynamo-deno:latest";
  const systemPort = checkPort(options.systemPort ?? DEFAULT_SYSTEM_PORT);
  const configName = `${prefix}-config`;
  const partOf = { "app.kubernetes.io/part-of": prefix, "app.kubernetes.io/managed-by": "dynamo" };

  const configMap = new ConfigMap({
    metadata: { name: configName, labels: partOf, ...ns },
    data: {
      [SERVICE_CONFIG_ENV]: JSON.stringify(config.toJSON()),
      "config.yaml": toYaml(config.toJSON()),
    },
  });
  configMap.validate();
  const manifests: Manifest[] = [{
    file: `${configName}.configmap.yaml`,
    kind: "ConfigMap",
    name: configName,
    resource: configMap.toJSON() as Record<string, unknown>,
  }];

  for (const node of graph.services) {
    const name = checkName(`the name of ${node.name}`, `${prefix}-${k8sName(node.name)}`);
    const labels = {
      ...partOf,
      "app.kubernetes.io/name": name,
      "app.kubernetes.io/component": node.name,
      "dynamo.nvidia.com/namespace": node.namespace,
    };
    const selector = { "app.kubernetes.io/name": name };
    const probe = (path: string) => ({
      httpGet: { path, port: SYSTEM_PORT_NAME },
      periodSeconds: 10,
      timeoutSeconds: 5,
      failureThreshold: 3,
    });
    const deployment = new Deployment({
      metadata: { name, labels, ...ns },
      spec: {
        replicas: node.workers,
        selector: { matchLabels: selector },
        template: {
          metadata: { labels },
          spec: {
            terminationGracePeriodSeconds: DRAIN_SECONDS + EXIT_MARGIN_SECONDS,
            securityContext: { runAsNonRoot: true, runAsUser: IMAGE_UID, runAsGroup: IMAGE_UID },
            containers: [{
              name: k8sName(node.name),
              image,
              ...(options.command ? { command: options.command } : {}),
              args: ["serve", options.target, "--service-name", node.name],
              env: [
                { name: "ETCD_ENDPOINTS", value: options.etcdEndpoints ?? "http://etcd:2379" },
                { name: "NATS_SERVER", value: options.natsServer ?? "nats://nats:4222" },
                {
                  name: SERVICE_CONFIG_ENV,
                  valueFrom: { configMapKeyRef: { name: configName, key: SERVICE_CONFIG_ENV } },
                },
                { name: "DYN_SYSTEM_ENABLED", value: "true" },
                { name: "DYN_SYSTEM_PORT", value: String(systemPort) },
                { name: "DYN_HEALTH_URL", value: `http://127.0.0.1:${systemPort}/live` },
              ],
              ports: [{ name: SYSTEM_PORT_NAME, containerPort: systemPort, protocol: "TCP" }],
              // Model loading can be slow: liveness starts counting once /live first answers.
              startupProbe: { ...probe("/live"), periodSeconds: 5, failureThreshold: 60 },
              livenessProbe: probe("/live"),
              readinessProbe: { ...probe("/health"), periodSeconds: 5 },
              resources: containerResources(node),
            }],
          },
        },
      },
    });
    deployment.validate();
    manifests.push({
      file: `${name}.deployment.yaml`,
      kind: "Deployment",
      name,
      resource: deployment.toJSON() as Record<string, unknown>,
    });
    const service = new Service({
      metadata: { name, labels, ...ns },
      spec: {
        selector,
        ports: [{ name: SYSTEM_PORT_NAME, port: systemPort, targetPort: SYSTEM_PORT_NAME }],
      },
    });
    service.validate();
    manifests.push({
      file: `${name}.service.yaml`,
      kind: "Service",
      name,
      resource: service.toJSON() as Record<string, unknown>,
    });
  }

  // prometheus-operator's CRD, from its own schema package: scrapes every Service above.
  const monitorName = `${prefix}-system`;
  const monitor = new ServiceMonitor({
    metadata: { name: monitorName, labels: partOf, ...ns },
    spec: {
      selector: { matchLabels: partOf },
      ...(ns.namespace ? { namespaceSelector: { matchNames: [ns.namespace] } } : {}),
      endpoints: [{ port: SYSTEM_PORT_NAME, path: "/metrics", interval: "15s" }],
    },
  });
  monitor.validate();
  manifests.push({
    file: `${monitorName}.servicemonitor.yaml`,
    kind: "ServiceMonitor",
    name: monitorName,
    resource: monitor.toJSON() as Record<string, unknown>,
  });
  return manifests;
}

/** A manifest as YAML text. */
export function manifestYaml(manifest: Manifest): string {
  return toYaml(manifest.resource);
}
