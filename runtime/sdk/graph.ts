// The dependency graph of a pipeline: from an entry service along its depends() fields
// (as link() edited them), with each service's effective settings and configuration.

import { ServiceConfig } from "./config.ts";
import { GraphError } from "./errors.ts";
import {
  type DependencyHandle,
  dependencyHandle,
  type EffectiveServiceSettings,
  effectiveSettings,
  probe,
  ProbeAbort,
  requireServiceMeta,
  type ServiceClass,
} from "./service.ts";

/** One edge: a depends() field of a service. */
export interface GraphEdge {
  /** The field's name, when the constructor finished and it could be seen. */
  field: string | undefined;
  /** Name of the service depended on. */
  service: string;
}

/** One service of a resolved graph. */
export interface GraphNode extends EffectiveServiceSettings {
  /** The service class. */
  cls: ServiceClass;
  /** Endpoint names (`namespace/name/endpoint`). */
  endpoints: string[];
  /** Dependencies kept in the graph (after link()). */
  dependencies: GraphEdge[];
  /** depends() fields link() removed. */
  removed: GraphEdge[];
  /** Constructor argument: the service's configuration without `ServiceArgs`. */
  params: Record<string, unknown>;
}

/** A resolved pipeline. */
export interface ServiceGraph {
  /** Name of the entry service. */
  entry: string;
  /** Every service, dependencies before their dependents (entry last). */
  services: GraphNode[];
  /** Things worth telling the user (a constructor that threw while probed). */
  warnings: string[];
  /** The service with this name. */
  get(name: string): GraphNode | undefined;
}

/** Options of {@linkcode resolveGraph}. */
export interface ResolveGraphOptions {
  /** Configuration for settings and constructor arguments (default: the process-wide one). */
  config?: ServiceConfig;
}

/** Result of {@linkcode probeDependencies}. */
export interface ProbeResult {
  handles: DependencyHandle[];
  /** Field name of each handle, when construction finished. */
  fields: Map<DependencyHandle, string>;
  /** What the constructor threw, other than a dynamoContext access. */
  error: unknown;
}

/**
 * Finds the depends() fields of a service by constructing it once with its configuration
 * (field initializers run before the constructor body; dynamoContext throws in between, so
 * a constructor that needs the runtime stops there). Keep constructors free of side
 * effects: do real work in `@asyncOnStart`.
 */
export function probeDependencies(
  cls: ServiceClass,
  config: ServiceConfig,
): ProbeResult {
  const meta = requireServiceMeta(cls);
  const handles: DependencyHandle[] = [];
  const fields = new Map<DependencyHandle, string>();
  let error: unknown;
  const previous = probe.active;
  probe.active = handles;
  try {
    const instance = new (cls as new (params: Record<string, unknown>) => object)(
      config.params(meta.name),
    );
    for (const [field, value] of Object.entries(instance)) {
      const h = dependencyHandle(value);
      if (h) fields.set(h, field);
    }
  } catch (err: unknown) {
    if (!(err instanceof ProbeAbort)) error = err;
  } finally {
    probe.active = previous;
  }
  return { handles, fields, error };
}

/**
 * Resolves the graph of services reachable from `entry` through depends() fields, keeping
 * only the linked dependencies of services that called link().
 *
 * @throws {GraphError} a link() names a service that is not a dependency, or two classes
 *   share a name
 * @throws {ServiceDefinitionError} a class is not a `@service`, or its settings are bad
 *
 * @example
 * ```ts ignore
 * const graph = resolveGraph(Frontend, { config });
 * for (const node of graph.services) console.log(node.name, node.workers);
 * ```
 */
export function resolveGraph(entry: ServiceClass, options: ResolveGraphOptions = {}): ServiceGraph {
  const config = options.config ?? ServiceConfig.getInstance();
  const entryMeta = requireServiceMeta(entry, "the graph's entry");
  const byName = new Map<string, GraphNode>();
  const order: GraphNode[] = [];
  const warnings: string[] = [];
  const visiting = new Set<ServiceClass>();
  // Constructors read ServiceConfig.getInstance(): let them see this graph's configuration.
  const saved = ServiceConfig.setInstance(config);

  const visit = (cls: ServiceClass): GraphNode => {
    const meta = requireServiceMeta(cls);
    const known = byName.get(meta.name);
    if (known) {
      if (known.cls !== cls) {
        throw new GraphError(`two different service classes are named ${meta.name}`);
      }
      return known;
    }
    if (visiting.has(cls)) {
      // A cycle: the node is being built further up; edges by name are enough.
      return { name: meta.name } as GraphNode;
    }
    visiting.add(cls);
    const settings = effectiveSettings(cls, config);
    const found = probeDependencies(cls, config);
    if (found.error !== undefined) {
      warnings.push(
        `constructing ${meta.name} to find its depends() fields threw: ${
          found.error instanceof Error ? found.error.message : String(found.error)
        }`,
      );
    }
    const links = meta.links;
    if (links) {
      for (const l of links) {
        if (!found.handles.some((h) => h.target === l)) {
          throw new GraphError(
            `${meta.name}.link(${requireServiceMeta(l).name}): ${meta.name} has no depends(${
              requireServiceMeta(l).name
            }) field`,
          );
        }
      }
    }
    const dependencies: GraphEdge[] = [];
    const removed: GraphEdge[] = [];
    const kept: ServiceClass[] = [];
    for (const h of found.handles) {
      const edge = { field: found.fields.get(h), service: requireServiceMeta(h.target).name };
      if (links && !links.includes(h.target)) {
        removed.push(edge);
        continue;
      }
      if (!dependencies.some((d) => d.service === edge.service && d.field === edge.field)) {
        dependencies.push(edge);
      }
      if (!kept.includes(h.target)) kept.push(h.target);
    }
    for (const dep of kept) visit(dep);
    const node: GraphNode = {
      ...settings,
      cls,
      endpoints: meta.endpoints.map((e) => e.name),
      dependencies,
      removed,
      params: config.params(meta.name),
    };
    visiting.delete(cls);
    byName.set(meta.name, node);
    order.push(node);
    return node;
  };

  try {
    visit(entry);
  } finally {
    ServiceConfig.setInstance(saved);
  }
  return {
    entry: entryMeta.name,
    services: order,
    warnings,
    get: (name) => byName.get(name),
  };
}

/**
 * The graph and effective configuration as text (what `dynamo serve --dry-run` prints).
 */
export function describeGraph(graph: ServiceGraph, config: ServiceConfig): string {
  const lines = [`graph of ${graph.entry} (${graph.services.length} services):`];
  for (const n of [...graph.services].reverse()) {
    lines.push(
      `  ${n.namespace}/${n.name}  workers=${n.workers}  resources=${JSON.stringify(n.resources)}${
        n.enabled ? "" : "  (dynamo disabled)"
      }`,
    );
    for (const e of n.endpoints) lines.push(`    endpoint ${n.namespace}/${n.name}/${e}`);
    for (const d of n.dependencies) {
      lines.push(`    depends on ${d.service}${d.field ? ` (field ${d.field})` : ""}`);
    }
    for (const d of n.removed) {
      lines.push(`    unlinked ${d.service}${d.field ? ` (field ${d.field})` : ""}`);
    }
  }
  for (const w of graph.warnings) lines.push(`warning: ${w}`);
  lines.push("effective configuration:");
  const effective: Record<string, unknown> = {};
  for (const n of graph.services) {
    effective[n.name] = {
      ...config.get(n.name),
      ServiceArgs: {
        dynamo: { namespace: n.namespace, enabled: n.enabled },
        workers: n.workers,
        resources: n.resources,
      },
    };
  }
  for (const line of JSON.stringify(effective, null, 2).split("\n")) lines.push(`  ${line}`);
  return lines.join("\n");
}
