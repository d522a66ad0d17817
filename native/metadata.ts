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

export function parseMetadata(metadata: Uint8Array | string): AgentMetadataWire {
  let m: unknown;
  try {
    m = JSON.parse(typeof metadata === "string" ? metadata : dec.decode(metadata));
  } catch (e) {
    throw new TransferArgumentError("agent metadata is not valid JSON", { cause: e });
  }
  const bad = (why: string): never => argError(`agent metadata is malformed: ${why}`);
  if (typeof m !== "object" || m === null) bad("not an object");
  const o = m as Record<string, unknown>;
  if (o.version !== 1) bad(`unsupported version ${String(o.version)}`);
  if (typeof o.name !== "string" || o.name === "") bad("no agent name");
  if (typeof o.process !== "string" || typeof o.pid !== "number") bad("no process identity");
  const q = o.notif_queue as Record<string, unknown> | undefined;
  if (typeof q?.shm !== "string" || typeof q.native_id !== "number") bad("no notification queue");
  if (!Array.isArray(o.regions)) bad("no region list");
  for (const r of o.regions as unknown[]) {
    const x = r as Record<string, unknown>;
    const ok = typeof x === "object" && x !== null && typeof x.key === "string" &&
      (x.mem_type === "DRAM" || x.mem_type === "VRAM") && Number.isSafeInteger(x.bytes) &&
      Number.isSafeInteger(x.device) && Number.isSafeInteger(x.native_id) &&
      (x.mem_type === "DRAM"
        ? typeof x.shm === "string"
        : typeof x.ipc_handle === "string" && /^[0-9a-f]{128}$/.test(x.ipc_handle));
    if (!ok) bad(`bad region entry ${JSON.stringify(r)}`);
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
