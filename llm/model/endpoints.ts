// Where a model is served: an endpoint's typed id, and the group of a model's instances on
// one endpoint with the client that reaches them.

import type { GenerateOptions, WaitForInstancesOptions } from "../../runtime/client.ts";
import type { ResponseStream } from "../../runtime/stream.ts";

/** One endpoint on the network (the vocabulary of DESIGN.md: namespace, component, endpoint). */
export interface EndpointId {
  /** Namespace name. */
  readonly namespace: string;
  /** Component name. */
  readonly component: string;
  /** Endpoint name. */
  readonly name: string;
}

/**
 * The endpoint as one string ("ns/comp/ep"): a map key and a log field, never split again.
 *
 * @example
 * ```ts
 * endpointPath({ namespace: "dynamo", component: "backend", name: "generate" });
 * // "dynamo/backend/generate"
 * ```
 */
export function endpointPath(id: EndpointId): string {
  return `${id.namespace}/${id.component}/${id.name}`;
}

/**
 * What the route stage needs of an endpoint's client: our runtime's `Client`, or an adapter that
 * reaches other workers the same way (e.g. reference workers: runtime/reference/endpoint_client.ts).
 */
export interface EndpointClient {
  /** `namespace/component/endpoint`. */
  readonly path: string;
  /**
   * "reference" for reference workers (their KV events and wire are the reference's: routed by
   * ./reference_kv.ts); our runtime's clients leave it out.
   */
  readonly kind?: "reference";
  /** Ids of the instances known now, sorted. */
  instanceIds(): string[];
  /** Resolves once enough instances are known. */
  waitForInstances(options?: WaitForInstancesOptions): Promise<string[]>;
  /** Sends to the next instance in round-robin order. */
  roundRobin<T = unknown>(request: unknown, options?: GenerateOptions): Promise<ResponseStream<T>>;
  /** Sends to an instance picked at random. */
  random<T = unknown>(request: unknown, options?: GenerateOptions): Promise<ResponseStream<T>>;
  /** Skips an instance for a while (its stream broke). */
  reportInstanceDown(instanceId: string): void;
  /** Stops watching the instances. */
  close(): Promise<void>;
}

/** A model's instances on one endpoint (an endpoint may serve several models). */
export interface EndpointGroup {
  /** The endpoint. */
  readonly id: EndpointId;
  /** {@linkcode endpointPath} of `id`. */
  readonly path: string;
  /** The client that reaches the endpoint's instances. */
  readonly client: Promise<EndpointClient>;
  /** Ids of the instances that registered this model on this endpoint. */
  readonly instances: Set<string>;
}
