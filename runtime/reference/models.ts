// The reference's model records (etcd `v1/mdc/<namespace>/<component>/<endpoint>/<hex id>`: one
// model deployment card per worker that serves a model), parsed at one door, to list the models
// reference workers serve and where.

import type { Discovery } from "../discovery/types.ts";
import { parseKeyedRecord } from "./_record.ts";
import { ReferenceRecordError } from "./errors.ts";

/** Prefix of the reference's model records in etcd. */
export const REFERENCE_MODELS_PREFIX = "v1/mdc/";

/** One model a reference worker serves, from its deployment card. */
export interface ReferenceModel {
  /** The served model name (the card's `display_name`). */
  name: string;
  /** The worker's instance id, lowercase hex. */
  instanceId: string;
  /** Namespace of the endpoint that serves it. */
  namespace: string;
  /** Component of the endpoint that serves it. */
  component: string;
  /** The endpoint that serves it (requests go there). */
  endpoint: string;
  /** What the model answers, e.g. "Chat | Completions". */
  modelType: string;
  /** What the worker takes: "Tokens" (preprocessed) or "Text". */
  modelInput: string;
  /** KV cache block size in tokens. */
  kvCacheBlockSize: number;
  /** The whole card, as the worker published it (snake_case wire fields). */
  card: Record<string, unknown>;
}

/**
 * Parses one reference model record.
 *
 * @param key the etcd key (`v1/mdc/ns/comp/ep/<hex id>`)
 * @param value the record's JSON text
 * @returns the model
 * @throws {ReferenceRecordError} a key or value that is not a model record
 *
 * @example
 * ```ts
 * const model = parseReferenceModel(
 *   "v1/mdc/dynamo/backend/generate/4e24a21101676f09",
 *   JSON.stringify({
 *     type: "Model", namespace: "dynamo", component: "backend", endpoint: "generate",
 *     card_json: { display_name: "Qwen3-0.6B", model_type: "Chat | Completions",
 *       model_input: "Tokens", kv_cache_block_size: 64 },
 *   }),
 * );
 * ```
 */
export function parseReferenceModel(key: string, value: string): ReferenceModel {
  const { namespace, component, endpoint, instanceId, record: r, fail } = parseKeyedRecord(
    key,
    value,
    REFERENCE_MODELS_PREFIX,
    "Model",
  );
  const card = r.card_json;
  if (typeof card !== "object" || card === null || Array.isArray(card)) {
    fail("card_json is not an object");
  }
  const c = card as Record<string, unknown>;
  const text = (field: string, max = 512): string => {
    const v = c[field];
    if (typeof v !== "string" || v.length === 0 || v.length > max) {
      return fail(`card_json.${field} is not a non-empty string`);
    }
    return v;
  };
  const block = c.kv_cache_block_size;
  if (!Number.isInteger(block) || (block as number) < 1) {
    fail(`card_json.kv_cache_block_size ${JSON.stringify(block)} is not a positive integer`);
  }
  return {
    name: text("display_name"),
    instanceId,
    namespace,
    component,
    endpoint,
    modelType: text("model_type"),
    modelInput: text("model_input"),
    kvCacheBlockSize: block as number,
    card: c,
  };
}

/** Options of {@linkcode listReferenceModels}. */
export interface ListReferenceModelsOptions {
  /** Only this namespace's models. */
  namespace?: string;
  /** Called with each record that does not parse (it is left out). */
  onInvalid?: (error: ReferenceRecordError) => void;
}

/**
 * The models reference workers serve now, one entry per worker and model. Our workers'
 * records (`registerLlm`: the same record, our card in `dynamo_deno`) are listed too: the
 * reference frontend serves them alike.
 *
 * @param discovery where the reference registers (its etcd)
 * @param options namespace filter, `onInvalid`
 * @returns the models whose records parse, sorted by key
 *
 * @example
 * ```ts ignore
 * for (const m of await listReferenceModels(discovery)) console.log(m.name, m.endpoint);
 * ```
 */
export async function listReferenceModels(
  discovery: Discovery,
  options: ListReferenceModelsOptions = {},
): Promise<ReferenceModel[]> {
  const prefix = options.namespace === undefined
    ? REFERENCE_MODELS_PREFIX
    : `${REFERENCE_MODELS_PREFIX}${options.namespace}/`;
  const out: ReferenceModel[] = [];
  for (const { key, value } of await discovery.list(prefix)) {
    try {
      out.push(parseReferenceModel(key, value));
    } catch (err) {
      if (!(err instanceof ReferenceRecordError)) throw err;
      options.onInvalid?.(err);
    }
  }
  return out;
}
