// The reference's instance records (etcd `v1/instances/<namespace>/<component>/<endpoint>/<hex id>`),
// parsed and checked at one door: past `parseReferenceInstance` a record is a typed, bounded value.

import type { Discovery } from "../discovery/types.ts";
import { TimeoutError } from "../errors.ts";
import { parseKeyedRecord } from "./_record.ts";
import { ReferenceRecordError } from "./errors.ts";

/** Prefix of the reference's instance records in etcd. */
export const REFERENCE_INSTANCES_PREFIX = "v1/instances/";

/** One reference worker's endpoint, as its discovery record advertises it. */
export interface ReferenceInstance {
  /** The instance id, lowercase hex (the record key's last segment). */
  instanceId: string;
  /** Namespace, component and endpoint names. */
  namespace: string;
  /** The component name. */
  component: string;
  /** The endpoint name. */
  endpoint: string;
  /** Request-plane host (an IP literal or a name; empty for a worker on NATS). */
  hostname: string;
  /** Request-plane TCP port (0 for a worker on NATS). */
  port: number;
  /**
   * The NATS subject the worker takes requests on, when it runs the reference's NATS request
   * plane (`{nats_tcp: subject}`; `DYN_REQUEST_PLANE=nats`); absent on TCP.
   */
  natsSubject?: string;
  /** The endpoint path requests are framed with: `<hex id>/<namespace>/<component>/<endpoint>`. */
  endpointPath: string;
  /** The request body codec the worker expects ("msgpack" or "json"). */
  codec: "msgpack" | "json";
}

/** Which endpoint's instances to read. */
export interface ReferenceEndpoint {
  /** Namespace, e.g. "dynamo". */
  namespace: string;
  /** Component, e.g. "backend". */
  component: string;
  /** Endpoint, e.g. "generate". */
  endpoint: string;
}

/**
 * Parses one reference instance record.
 *
 * @param key the etcd key (`v1/instances/ns/comp/ep/<hex id>`)
 * @param value the record's JSON text
 * @returns the instance
 * @throws {ReferenceRecordError} a key or value that is not a TCP instance record
 *
 * @example
 * ```ts
 * const instance = parseReferenceInstance(
 *   "v1/instances/dynamo/backend/generate/4e24a21101676f09",
 *   JSON.stringify({
 *     type: "Endpoint", namespace: "dynamo", component: "backend", endpoint: "generate",
 *     transport: { tcp: "127.0.0.1:43491/4e24a21101676f09/dynamo/backend/generate" },
 *     request_plane_codec: "msgpack",
 *   }),
 * );
 * ```
 */
export function parseReferenceInstance(key: string, value: string): ReferenceInstance {
  const { namespace, component, endpoint, instanceId, record: r, fail } = parseKeyedRecord(
    key,
    value,
    REFERENCE_INSTANCES_PREFIX,
    "Endpoint",
  );
  for (
    const [field, want] of [["namespace", namespace], ["component", component], [
      "endpoint",
      endpoint,
    ]] as const
  ) {
    if (r[field] !== want) fail(`${field} ${JSON.stringify(r[field])} does not match the key`);
  }
  // Ours too: every TCP-plane listener of ours also takes the reference's framing.
  const ours = r.dynamo_deno as { wire?: unknown } | null | undefined;
  if (
    typeof ours === "object" && ours !== null && ours.wire !== "reference" &&
    ours.wire !== "dynamo"
  ) {
    fail(`a worker of ours on an unknown wire ${JSON.stringify(ours.wire)}`);
  }
  const codec = r.request_plane_codec ?? "json";
  if (codec !== "msgpack" && codec !== "json") fail(`unknown codec ${JSON.stringify(codec)}`);
  const transport = r.transport as Record<string, unknown> | null | undefined;
  const tcp = typeof transport === "object" && transport !== null ? transport.tcp : undefined;
  const nats = typeof transport === "object" && transport !== null ? transport.nats_tcp : undefined;
  if (typeof nats === "string") {
    // The reference's subject: `<namespace>_<component>.<endpoint>-<hex id>`, plain characters.
    if (!/^[A-Za-z0-9_.-]{1,256}$/.test(nats) || !nats.endsWith(`-${instanceId}`)) {
      fail(`transport.nats_tcp ${JSON.stringify(nats)} is not this instance's subject`);
    }
    return {
      instanceId,
      namespace,
      component,
      endpoint,
      hostname: "",
      port: 0,
      endpointPath: `${instanceId}/${namespace}/${component}/${endpoint}`,
      codec: codec as "msgpack" | "json",
      natsSubject: nats,
    };
  }
  if (typeof tcp !== "string") fail("transport is neither {tcp: ...} nor {nats_tcp: ...}");
  const m = /^([^/\s]+):(\d{1,5})\/(.+)$/.exec(tcp as string) ??
    fail(`transport.tcp ${JSON.stringify(tcp)} is not host:port/path`);
  const [, hostname, portText, endpointPath] = m as unknown as [string, string, string, string];
  const port = Number(portText);
  if (port < 1 || port > 65535) fail(`port ${port} is out of range`);
  if (endpointPath !== `${instanceId}/${namespace}/${component}/${endpoint}`) {
    fail(`endpoint path ${JSON.stringify(endpointPath)} does not match the key`);
  }
  return {
    instanceId,
    namespace,
    component,
    endpoint,
    hostname: hostname.replace(/^\[(.*)\]$/, "$1"),
    port,
    endpointPath,
    codec: codec as "msgpack" | "json",
  };
}

/** Options of {@linkcode listReferenceInstances}. */
export interface ListReferenceInstancesOptions {
  /** Called with each record that does not parse (it is left out). */
  onInvalid?: (error: ReferenceRecordError) => void;
}

/**
 * The reference instances of one endpoint, as etcd holds them now.
 *
 * @param discovery where the reference registers (its etcd)
 * @param endpoint namespace, component, endpoint
 * @param options `onInvalid` hears of records left out
 * @returns the instances whose records parse, sorted by id
 *
 * @example
 * ```ts ignore
 * const workers = await listReferenceInstances(discovery, {
 *   namespace: "dynamo", component: "backend", endpoint: "generate",
 * });
 * ```
 */
export async function listReferenceInstances(
  discovery: Discovery,
  endpoint: ReferenceEndpoint,
  options: ListReferenceInstancesOptions = {},
): Promise<ReferenceInstance[]> {
  const prefix =
    `${REFERENCE_INSTANCES_PREFIX}${endpoint.namespace}/${endpoint.component}/${endpoint.endpoint}/`;
  const out: ReferenceInstance[] = [];
  for (const { key, value } of await discovery.list(prefix)) {
    try {
      out.push(parseReferenceInstance(key, value));
    } catch (err) {
      if (!(err instanceof ReferenceRecordError)) throw err;
      options.onInvalid?.(err);
    }
  }
  return out;
}

/** Options of {@linkcode waitForReferenceInstances}. */
export interface WaitForReferenceInstancesOptions extends ListReferenceInstancesOptions {
  /** How many instances to wait for (default 1). */
  count?: number;
  /** Give up after this long (ms, default 60,000). */
  timeoutMs?: number;
  /** How often to look (ms, default 250). */
  pollMs?: number;
  /** Stops waiting. */
  signal?: AbortSignal;
}

/**
 * Waits until at least `count` reference instances of the endpoint are registered.
 *
 * @param discovery where the reference registers
 * @param endpoint namespace, component, endpoint
 * @param options count, deadline, poll interval, signal
 * @returns the instances, once there are enough
 * @throws {TimeoutError} not enough instances within the deadline
 *
 * @example
 * ```ts ignore
 * const [worker] = await waitForReferenceInstances(discovery, {
 *   namespace: "dynamo", component: "backend", endpoint: "generate",
 * }, { timeoutMs: 30_000 });
 * ```
 */
export async function waitForReferenceInstances(
  discovery: Discovery,
  endpoint: ReferenceEndpoint,
  options: WaitForReferenceInstancesOptions = {},
): Promise<ReferenceInstance[]> {
  const { count = 1, timeoutMs = 60_000, pollMs = 250, signal } = options;
  signal?.throwIfAborted();
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const found = await listReferenceInstances(discovery, endpoint, options);
    if (found.length >= count) return found;
    if (Date.now() >= deadline) {
      throw new TimeoutError(
        `${found.length} of ${count} reference instances of ` +
          `${endpoint.namespace}/${endpoint.component}/${endpoint.endpoint} within ${timeoutMs} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
    signal?.throwIfAborted();
  }
}
