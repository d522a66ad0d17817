// Where a model is served: an endpoint's typed id, and the group of a model's instances on
// one endpoint with the client that reaches them.

import type { Client } from "../../runtime/client.ts";

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

/** A model's instances on one endpoint (an endpoint may serve several models). */
export interface EndpointGroup {
  /** The endpoint. */
  readonly id: EndpointId;
  /** {@linkcode endpointPath} of `id`. */
  readonly path: string;
  /** The client that reaches the endpoint's instances. */
  readonly client: Promise<Client>;
  /** Ids of the instances that registered this model on this endpoint. */
  readonly instances: Set<string>;
}
