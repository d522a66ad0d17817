// The part every reference discovery record shares: a key `PREFIX<ns>/<component>/<endpoint>/<hex
// id>` and a JSON object value of a given `type`, checked before anything else reads it.

import { ReferenceRecordError } from "./errors.ts";

const NAME = /^[A-Za-z0-9_.-]{1,256}$/;
const HEX_ID = /^[0-9a-f]{1,16}$/;

/** A record's key parts and its value, checked. */
export interface KeyedRecord {
  namespace: string;
  component: string;
  endpoint: string;
  instanceId: string;
  /** The value, a JSON object whose `type` was the one asked for. */
  record: Record<string, unknown>;
  /** Throws a {@linkcode ReferenceRecordError} naming the key. */
  fail: (reason: string) => never;
}

/**
 * Checks a record's key and value.
 *
 * @throws {ReferenceRecordError} a key not of that shape, a value that is not a JSON object of
 *   that `type`
 */
export function parseKeyedRecord(
  key: string,
  value: string,
  prefix: string,
  type: string,
): KeyedRecord {
  const fail = (reason: string): never => {
    throw new ReferenceRecordError(key, reason);
  };
  if (!key.startsWith(prefix)) fail(`not under ${prefix}`);
  const parts = key.slice(prefix.length).split("/");
  if (parts.length !== 4) fail(`key is not ${prefix}<ns>/<component>/<endpoint>/<id>`);
  const [namespace, component, endpoint, instanceId] = parts as [string, string, string, string];
  for (const name of [namespace, component, endpoint]) {
    if (!NAME.test(name)) fail(`bad name ${JSON.stringify(name)}`);
  }
  if (!HEX_ID.test(instanceId)) fail(`instance id ${JSON.stringify(instanceId)} is not hex`);
  let record: unknown;
  try {
    record = JSON.parse(value);
  } catch (err) {
    fail(`value is not JSON: ${(err as Error).message}`);
  }
  if (typeof record !== "object" || record === null || Array.isArray(record)) {
    fail("value is not a JSON object");
  }
  const r = record as Record<string, unknown>;
  if (r.type !== type) fail(`type is ${JSON.stringify(r.type)}, not ${JSON.stringify(type)}`);
  return { namespace, component, endpoint, instanceId, record: r, fail };
}
