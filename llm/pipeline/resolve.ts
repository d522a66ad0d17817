// The resolve stage: the model a request names; a 503 with Retry-After for a model that was
// served a moment ago (its workers are re-registering, e.g. after an etcd outage); the OpenAI
// 404 for a model nobody serves.

import { NoInstancesError } from "../../runtime/errors.ts";
import { RequestError } from "../openai/errors.ts";

/** Where models are looked up by name (a ModelManager). */
export interface ModelLookup<M> {
  get(name: string): M | undefined;
  /** True when a model of this name was served recently (within the registry's grace). */
  recentlyServed?(name: string): boolean;
}

/**
 * The model named `name`.
 *
 * @throws {NoInstancesError} (503, Retry-After) the model lost its last instance a moment ago
 * @throws {RequestError} 404 `model_not_found` when no instance serves it
 * @example
 * ```ts ignore
 * const model = resolveModel(models, req.model);
 * ```
 */
export function resolveModel<M>(models: ModelLookup<M>, name: string): M {
  const model = models.get(name);
  if (model === undefined && models.recentlyServed?.(name)) {
    // Its workers are most likely registering again (a restart, an etcd outage): retry.
    throw new NoInstancesError(`model ${name}`);
  }
  if (model === undefined) {
    throw new RequestError(404, `The model \`${name}\` does not exist.`, {
      type: "invalid_request_error",
      param: "model",
      code: "model_not_found",
    });
  }
  return model;
}
