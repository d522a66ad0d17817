/** Peers an agent knows by their metadata: their notification queue and mapped regions. */

import { argError } from "./_args.ts";
import { check, enc, type Native, unhex } from "./ffi.ts";
import type { RemoteAgent } from "./handles.ts";
import type { AgentMetadataWire } from "./metadata.ts";

/**
 * Opens a peer's notification queue (a peer in this process shares its own) and records
 * its regions, to be mapped when a list first uses them.
 *
 * @param n the native library
 * @param m the peer's parsed metadata
 * @param processToken this process's token (peers with the same one share memory ids)
 * @returns the peer's record
 */
export function openRemote(n: Native, m: AgentMetadataWire, processToken: string): RemoteAgent {
  const sameProcess = m.process === processToken;
  let ringId: number;
  if (sameProcess) {
    ringId = m.notif_queue.native_id;
  } else {
    const name = enc.encode(m.notif_queue.shm);
    ringId = check(
      n,
      n.dyn_ring_open(name),
      `cannot reach agent '${m.name}'`,
    );
  }
  return {
    name: m.name,
    sameProcess,
    regions: new Map(m.regions.map((r) => [r.key, r])),
    opened: new Map(),
    ringId,
    removed: false,
    dlists: new Set(),
  };
}

/**
 * Forgets a peer: releases the lists prepared on it and unmaps what was mapped here.
 *
 * @param n the native library
 * @param r the peer's record
 */
export function dropRemote(n: Native, r: RemoteAgent): void {
  r.removed = true;
  for (const d of r.dlists) {
    d.released = true;
    n.dyn_dlist_free(d.id);
  }
  if (!r.sameProcess) {
    for (const id of r.opened.values()) n.dyn_region_free(id);
    n.dyn_ring_free(r.ringId);
  }
}

/**
 * The native id of a peer's region, mapping it on first use (shared memory for DRAM, a
 * CUDA IPC handle for VRAM).
 *
 * @param n the native library
 * @param r the peer's record
 * @param key the region's key
 * @param i the descriptor's index, for messages
 * @returns the region's native id here
 */
export function remoteRegionId(n: Native, r: RemoteAgent, key: string, i: number): number {
  const known = r.opened.get(key);
  if (known !== undefined) return known;
  const w = r.regions.get(key);
  if (!w) {
    argError(`descriptor ${i}: agent '${r.name}' has no registered region '${key}'`);
  }
  let id: number;
  if (r.sameProcess) {
    id = w.native_id;
  } else if (w.mem_type === "DRAM") {
    const name = enc.encode(w.shm!);
    id = check(
      n,
      n.dyn_region_open_dram(name, w.bytes),
      `cannot map region ${key} of agent '${r.name}'`,
    );
  } else {
    id = check(
      n,
      n.dyn_region_open_vram(unhex(w.ipc_handle!), w.bytes, w.device),
      `cannot open VRAM region ${key} of agent '${r.name}'`,
    );
  }
  r.opened.set(key, id);
  return id;
}
