/** Agent metadata on the wire: what a peer needs to reach an agent's memory, and its parser. */

import { argError } from "./_args.ts";
import { TransferArgumentError } from "./errors.ts";
import { dec, enc } from "./ffi.ts";
import { type MemoryRegion, regionStates } from "./handles.ts";
import type { RegionWire } from "./types.ts";

export type { RegionWire };

// Wire form of the agent metadata (snake_case: it crosses process boundaries).

export interface AgentMetadataWire {
  version: 1;
  name: string;
  process: string;
  pid: number;
  notif_queue: { shm: string; native_id: number };
  regions: RegionWire[];
}

/** Longest metadata blob `addRemoteAgent` reads (bytes or characters). */
export const MAX_METADATA_BYTES = 16 << 20;
/** Most regions one agent's metadata may list. */
export const MAX_METADATA_REGIONS = 65_536;
/** Longest name, key or shared-memory segment name in metadata (characters). */
const MAX_NAME = 256;

const isName = (v: unknown): v is string =>
  typeof v === "string" && v !== "" && v.length <= MAX_NAME;
const isId = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/**
 * The door for a peer's metadata: it comes from another process, so every field is checked
 * (types, bounded strings and counts, whole numbers, unique region keys) before anything
 * maps memory or opens a queue from it. The native side checks the rest (segment names of
 * this library only, sizes against the real segment).
 *
 * @param metadata the peer's `getAgentMetadata()` bytes or text
 * @returns the metadata, typed
 * @throws {TransferArgumentError} it is not valid metadata (the message says why)
 */
export function parseMetadata(metadata: Uint8Array | string): AgentMetadataWire {
  if (typeof metadata !== "string" && !(metadata instanceof Uint8Array)) {
    argError("agent metadata must be bytes or a string");
  }
  if (metadata.length > MAX_METADATA_BYTES) {
    argError(`agent metadata is ${metadata.length} long, over ${MAX_METADATA_BYTES}`);
  }
  let m: unknown;
  try {
    m = JSON.parse(typeof metadata === "string" ? metadata : dec.decode(metadata));
  } catch (e) {
    throw new TransferArgumentError("agent metadata is not valid JSON", { cause: e });
  }
  const bad = (why: string): never => argError(`agent metadata is malformed: ${why}`);
  if (typeof m !== "object" || m === null || Array.isArray(m)) bad("not an object");
  const o = m as Record<string, unknown>;
  if (o.version !== 1) bad(`unsupported version ${String(o.version).slice(0, 40)}`);
  if (!isName(o.name)) bad(`the agent name must be 1 to ${MAX_NAME} characters`);
  if (!isName(o.process) || !isId(o.pid)) bad("no process identity");
  const q = o.notif_queue as Record<string, unknown> | undefined;
  if (typeof q !== "object" || q === null || !isName(q.shm) || !isId(q.native_id)) {
    bad("no notification queue");
  }
  if (!Array.isArray(o.regions)) bad("no region list");
  const regions = o.regions as unknown[];
  if (regions.length > MAX_METADATA_REGIONS) {
    bad(`${regions.length} regions, over ${MAX_METADATA_REGIONS}`);
  }
  const keys = new Set<string>();
  for (const [i, r] of regions.entries()) {
    const x = r as Record<string, unknown>;
    const ok = typeof x === "object" && x !== null && isName(x.key) && !keys.has(x.key) &&
      (x.mem_type === "DRAM" || x.mem_type === "VRAM") && isId(x.bytes) &&
      (x.bytes as number) > 0 && isId(x.device) && isId(x.native_id) &&
      (x.mem_type === "DRAM"
        ? isName(x.shm)
        : typeof x.ipc_handle === "string" && /^[0-9a-f]{128}$/.test(x.ipc_handle));
    if (!ok) bad(`bad region entry ${i}: ${String(JSON.stringify(r)).slice(0, 200)}`);
    keys.add(x.key as string);
  }
  return m as AgentMetadataWire;
}

/** What {@linkcode encodeMetadata} needs of an agent. */
export interface MetadataSource {
  /** The agent's name. */
  name: string;
  /** Its process's token (hex). */
  process: string;
  /** Its notification queue. */
  notifQueue: { shm: string; native_id: number };
  /** Its regions; the registered ones are listed. */
  regions: Iterable<MemoryRegion>;
}

/**
 * An agent's metadata as UTF-8 JSON: its registered regions and its notification queue.
 *
 * @param agent what the metadata describes
 * @returns the bytes a peer passes to `addRemoteAgent`
 */
export function encodeMetadata(agent: MetadataSource): Uint8Array {
  const regions: RegionWire[] = [];
  for (const r of agent.regions) {
    const s = regionStates.get(r)!;
    if (!s.registered) continue;
    regions.push({
      key: r.key,
      mem_type: r.memType,
      bytes: r.bytes,
      device: r.device,
      native_id: s.id,
      ...(s.shm !== undefined ? { shm: s.shm } : {}),
      ...(s.ipc !== undefined ? { ipc_handle: s.ipc } : {}),
    });
  }
  const meta: AgentMetadataWire = {
    version: 1,
    name: agent.name,
    process: agent.process,
    pid: Deno.pid,
    notif_queue: agent.notifQueue,
    regions,
  };
  return enc.encode(JSON.stringify(meta));
}
