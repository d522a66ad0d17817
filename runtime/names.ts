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

/**
 * The framing a worker's requests come in: ours ("dynamo": the mux on the TCP plane, our
 * envelope on NATS and in process; on the TCP plane the same listener also takes the
 * reference's framing) or the reference's only ("reference", `serveReferenceEndpoint`).
 */
export type InstanceWire = "dynamo" | "reference";

/** Our facts in an instance record, in a field the reference ignores (it reads only its own). */
export interface InstanceRecordExtras {
  /** The instance id, lowercase hex as in the key (the record's `instance_id` is a u64 number). */
  instance_id: string;
  /** What the worker at `transport` speaks. */
  wire: InstanceWire;
}

/**
 * Value stored under an instance key: the reference's (ai-dynamo 1.6.1) instance record, field
 * for field (tests/golden/reference_1.6.1/discovery.json), plus `dynamo_deno`, our facts.
 */
export interface InstanceRecord {
  /** Always "Endpoint". */
  type: "Endpoint";
  /** The namespace name. */
  namespace: string;
  /** The component name. */
  component: string;
  /** The endpoint name. */
  endpoint: string;
  /**
   * The instance id, lowercase hex; {@linkcode encodeInstanceRecord} writes it as the
   * reference does, the u64 as a JSON number (exact, beyond 2^53).
   */
  instance_id: string;
  /**
   * Where requests go: a NATS subject, `host:port/<endpoint path>` of the worker's TCP
   * listener (the reference's layout), or an in-process subject.
   */
  transport: { nats_tcp: string } | { tcp: string } | { local: string };
  /** The reference's device type ("cpu" for ours). */
  device_type: string;
  /** The codec the reference encodes a request body with for this worker. */
  request_plane_codec: "msgpack" | "json";
  /** Our facts (the reference ignores unknown fields). */
  dynamo_deno: InstanceRecordExtras;
}

/** Where {@linkcode encodeInstanceRecord} writes the exact id. */
const ID_SLOT = JSON.stringify("\u0000instance_id\u0000");
const HEX_ID = /^[0-9a-f]{1,16}$/;

/**
 * An instance record's JSON as the reference writes it: `instance_id` the u64 as an exact
 * JSON number (an id that is not hex stays a string).
 */
export function encodeInstanceRecord(record: InstanceRecord): string {
  if (!HEX_ID.test(record.instance_id)) return JSON.stringify(record);
  return JSON.stringify({ ...record, instance_id: JSON.parse(ID_SLOT) }).replace(
    ID_SLOT,
    BigInt(`0x${record.instance_id}`).toString(),
  );
}

/**
 * What routing needs from the value under an instance key (other fields are dropped). Reads
 * both the reference-shaped records (a numeric `instance_id`, `dynamo_deno` naming our wire)
 * and the earlier ones of ours (a hex string `instance_id`, no `dynamo_deno`); a record of a
 * worker that speaks only the reference's wire (no `dynamo_deno` of ours: the reference's own
 * workers, `serveReferenceEndpoint`) is not one our plane can call, and is refused here.
 */
export const instanceRecordValueSchema = z.object({
  instance_id: z.union([z.string().max(MAX_NAME), z.number()]),
  transport: z.union([
    z.object({ nats_tcp: z.string().max(MAX_NAME) }),
    z.object({ tcp: z.string().max(MAX_NAME) }),
    z.object({ local: z.string().max(MAX_NAME) }),
  ]),
  dynamo_deno: z.object({
    instance_id: z.string().max(MAX_NAME),
    wire: z.enum(["dynamo", "reference"]),
  }).optional(),
}).refine(
  (r) => r.dynamo_deno ? r.dynamo_deno.wire === "dynamo" : typeof r.instance_id === "string",
  { message: "a worker on the reference's wire only (the reference workers' client serves it)" },
);

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
