// Discovery keys: the one module that spells the `v1/...` layout of what workers publish
// (instances, components, model entries and cards, disaggregation records).

/** Root of the endpoint instance records: `v1/instances/{ns}/{component}/{endpoint}/{id}`. */
export const INSTANCE_PREFIX = "v1/instances/";
/** Root of the component records (`createService`): `v1/components/{ns}/{component}/{id}`. */
export const COMPONENT_PREFIX = "v1/components/";
/** Root of the model entries: `v1/models/{ns}/{component}/{endpoint}/{id}`. */
export const MODEL_ENTRY_PREFIX = "v1/models/";
/** Root of the model deployment cards: `v1/mdc/{ns}/{component}/{endpoint}/{id}`. */
export const MODEL_CARD_PREFIX = "v1/mdc/";
/** Root of the disaggregation records: `v1/disagg/{ns}/...`. */
export const DISAGG_PREFIX = "v1/disagg/";

/**
 * Prefix of the instances under a namespace, component or endpoint (ends with "/"); with no
 * arguments, of every instance.
 *
 * @example
 * ```ts
 * instancePrefix("ns", "backend"); // "v1/instances/ns/backend/"
 * ```
 */
export function instancePrefix(namespace?: string, component?: string, endpoint?: string): string {
  return INSTANCE_PREFIX + path(namespace, component, endpoint);
}

/** Key of one instance of an endpoint. */
export function instanceKey(
  namespace: string,
  component: string,
  endpoint: string,
  instanceId: string,
): string {
  return `${instancePrefix(namespace, component, endpoint)}${instanceId}`;
}

/** Key of a component's record for one runtime (written by `createService`). */
export function componentKey(namespace: string, component: string, instanceId: string): string {
  return `${COMPONENT_PREFIX}${namespace}/${component}/${instanceId}`;
}

/** Key of the model entry an instance of an endpoint publishes. */
export function modelEntryKey(
  namespace: string,
  component: string,
  endpoint: string,
  instanceId: string,
): string {
  return `${MODEL_ENTRY_PREFIX}${namespace}/${component}/${endpoint}/${instanceId}`;
}

/** Key of the model deployment card an instance of an endpoint publishes. */
export function modelCardKey(
  namespace: string,
  component: string,
  endpoint: string,
  instanceId: string,
): string {
  return `${MODEL_CARD_PREFIX}${namespace}/${component}/${endpoint}/${instanceId}`;
}

/** The instance id a model entry or card key ends with (its last segment). */
export function keyInstanceId(key: string): string {
  return key.slice(key.lastIndexOf("/") + 1);
}

/** Key of a decode worker's published KV memory (disaggregated serving). */
export function decodeMemoryKey(namespace: string, agentName: string): string {
  return `${DISAGG_PREFIX}${namespace}/decode_memory/${agentName}`;
}

function path(...parts: (string | undefined)[]): string {
  let out = "";
  for (const p of parts) {
    if (p === undefined) break;
    out += `${p}/`;
  }
  return out;
}
