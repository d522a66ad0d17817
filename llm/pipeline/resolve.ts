// The resolve stage: the model a request names, or the OpenAI 404 for an unknown one.

import { RequestError } from "../openai/errors.ts";

/** Where models are looked up by name (a ModelManager). */
export interface ModelLookup<M> {
  get(name: string): M | undefined;
}

/**
 * The model named `name`.
 *
 * @throws {RequestError} 404 `model_not_found` when no instance serves it
 * @example
 * ```ts ignore
 * const model = resolveModel(models, req.model);
 * ```
 */
export function resolveModel<M>(models: ModelLookup<M>, name: string): M {
  const model = models.get(name);
  if (model === undefined) {
    throw new RequestError(404, `The model \`${name}\` does not exist.`, {
      type: "invalid_request_error",
      param: "model",
      code: "model_not_found",
    });
  }
  return model;
}
