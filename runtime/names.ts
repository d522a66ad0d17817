// Names, keys and subjects: the one place that spells the wire layout of discovery and
// the request plane.

import { InvalidArgumentError } from "./errors.ts";

const NAME = /^[A-Za-z0-9_-]+$/;

/** Checks a namespace, component or endpoint name. */
export function validateName(kind: string, name: unknown): string {
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new InvalidArgumentError(
      `${kind} name must be non-empty letters, digits, "_" or "-", got ${JSON.stringify(name)}`,
    );
  }
  return name;
}

/** Lowercases and replaces anything outside [a-z0-9_-] with "_" (Dynamo's slugify). */
export function slug(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9_-]/g, "_");
}

/** etcd prefix of an endpoint's instances (ends with "/"). */
export function instancePrefix(namespace: string, component: string, endpoint: string): string {
  return `v1/instances/${namespace}/${component}/${endpoint}/`;
}

/** etcd key of one instance. */
export function instanceKey(
  namespace: string,
  component: string,
  endpoint: string,
  instanceId: string,
): string {
  return `${instancePrefix(namespace, component, endpoint)}${instanceId}`;
}

/** The request-plane subject of one instance. */
export function instanceSubject(
  namespace: string,
  component: string,
  endpoint: string,
  instanceId: string,
): string {
  return `${slug(`${namespace}_${component}`)}.${slug(endpoint)}-${instanceId}`;
}

/** Value stored under an instance key (wire names follow the reference system). */
export interface InstanceRecord {
  namespace: string;
  component: string;
  endpoint: string;
  instance_id: string;
  transport: { nats_tcp: string } | { local: string };
}

/** Parses an instance record; returns undefined for anything malformed. */
export function parseInstanceRecord(value: string): InstanceRecord | undefined {
  try {
    const r = JSON.parse(value) as InstanceRecord;
    if (
      typeof r?.instance_id !== "string" || typeof r.transport !== "object" || r.transport === null
    ) return;
    const subject = "nats_tcp" in r.transport
      ? r.transport.nats_tcp
      : "local" in r.transport
      ? r.transport.local
      : undefined;
    return typeof subject === "string" ? r : undefined;
  } catch {
    return undefined;
  }
}

/** The subject named by an instance record. */
export function recordSubject(r: InstanceRecord): string {
  return "nats_tcp" in r.transport ? r.transport.nats_tcp : r.transport.local;
}
