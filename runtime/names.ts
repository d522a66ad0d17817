// Names and subjects: how namespaces, components and endpoints are named, the request-plane
// subject of an instance, and the instance record under its discovery key (keys: keys.ts).

import { z } from "zod";
import { InvalidArgumentError } from "./errors.ts";

/** Longest id or subject accepted from an instance record. */
const MAX_NAME = 1024;

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
  /**
   * Where requests go: a NATS subject, `host:port/<endpoint path>` of the worker's TCP
   * listener (the reference's layout), or an in-process subject.
   */
  transport: { nats_tcp: string } | { tcp: string } | { local: string };
}

/** What routing needs from the value under an instance key (other fields are dropped). */
export const instanceRecordValueSchema = z.object({
  instance_id: z.string().max(MAX_NAME),
  transport: z.union([
    z.object({ nats_tcp: z.string().max(MAX_NAME) }),
    z.object({ tcp: z.string().max(MAX_NAME) }),
    z.object({ local: z.string().max(MAX_NAME) }),
  ]),
});

/**
 * An instance record watched under its endpoint's prefix (the key is the instance id):
 * parses to the id and the request-plane subject.
 */
export const instanceRecordSchema = z.object({
  key: z.string().min(1).max(MAX_NAME),
  value: instanceRecordValueSchema,
}).transform(({ key, value }) => ({ id: key, subject: recordSubject(value) }));

/** The subject named by an instance record. */
export function recordSubject(r: Pick<InstanceRecord, "transport">): string {
  const t = r.transport;
  return "nats_tcp" in t ? t.nats_tcp : "tcp" in t ? t.tcp : t.local;
}
