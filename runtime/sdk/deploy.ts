// Kubernetes manifests for a resolved graph (`dynamo deploy`): one Deployment per service
// (replicas = workers, resources from the service's settings) and one ConfigMap with the
// configuration, each validated against the Kubernetes schemas before it is returned.

import { Deployment } from "kubernetes-models/apps/v1";
import { ConfigMap } from "kubernetes-models/v1";
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
  /** Command that starts `dynamo` in the image (default ["dynamo"]). */
  command?: string[];
}

/** One manifest: a file name and the validated resource. */
export interface Manifest {
  /** e.g. "frontend-middle.deployment.yaml" */
  file: string;
  kind: "Deployment" | "ConfigMap";
  name: string;
  /** The resource as plain JSON data. */
  resource: Record<string, unknown>;
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

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

/** Kubernetes resource quantities of a service: cpu, memory and `nvidia.com/gpu`. */
function quantities(node: GraphNode): Record<string, string> {
  const out: Record<string, string> = {};
  const r = node.resources;
  if (r.cpu !== undefined) out.cpu = String(r.cpu);
  if (r.memory !== undefined) out.memory = String(r.memory);
  if (r.gpu !== undefined && Number(r.gpu) > 0) out["nvidia.com/gpu"] = String(r.gpu);
  return out;
}

/**
 * Builds and validates the manifests of `graph`.
 *
 * @throws {InvalidArgumentError} a name that is not a DNS-1123 label
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
    const resources = quantities(node);
    const deployment = new Deployment({
      metadata: { name, labels, ...ns },
      spec: {
        replicas: node.workers,
        selector: { matchLabels: selector },
        template: {
          metadata: { labels },
          spec: {
            containers: [{
              name: k8sName(node.name),
              image,
              command: options.command ?? ["dynamo"],
              args: ["serve", options.target, "--service-name", node.name],
              env: [
                { name: "ETCD_ENDPOINTS", value: options.etcdEndpoints ?? "http://etcd:2379" },
                { name: "NATS_SERVER", value: options.natsServer ?? "nats://nats:4222" },
                {
                  name: SERVICE_CONFIG_ENV,
                  valueFrom: { configMapKeyRef: { name: configName, key: SERVICE_CONFIG_ENV } },
                },
              ],
              ...(Object.keys(resources).length > 0
                ? { resources: { requests: resources, limits: resources } }
                : {}),
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
  }
  return manifests;
}

/** A manifest as YAML text. */
export function manifestYaml(manifest: Manifest): string {
  return toYaml(manifest.resource);
}
