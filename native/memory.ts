/** An agent's memory regions: allocating, registering, reading, writing and releasing them. */

import { argError, checkMemType, checkSize } from "./_args.ts";
import { ReleasedHandleError } from "./errors.ts";
import { bytesOf, check, cString, hex } from "./ffi.ts";
import { type AgentContext, MemoryRegion, type RegionState, regionStates } from "./handles.ts";
import type { AllocateOptions, MemType } from "./types.ts";

/** The state of a region of this agent, checked: the agent's own and not released. */
export function ownRegion(ctx: AgentContext, region: MemoryRegion, what: string): RegionState {
  ctx.alive();
  const s = region instanceof MemoryRegion ? regionStates.get(region) : undefined;
  if (!s || s.agent !== ctx.agent) {
    argError(`${what}: not a memory region of agent '${ctx.name}'`);
  }
  if (s.released) {
    throw new ReleasedHandleError(`${what}: memory region ${region.key} was released`);
  }
  return s;
}

/** Allocates zeroed memory (see `TransferAgent.allocate`). */
export function allocateRegion(
  ctx: AgentContext,
  memType: MemType,
  bytes: number,
  options: AllocateOptions = {},
): MemoryRegion {
  ctx.alive();
  checkMemType(memType);
  checkSize(bytes, "bytes", 1);
  const device = memType === "VRAM" ? checkSize(options.device ?? 0, "device") : 0;
  const n = ctx.n;
  let id: number;
  const state: Partial<RegionState> = {};
  if (memType === "DRAM") {
    const name = new Uint8Array(256);
    id = check(
      n,
      n.dyn_region_alloc_dram(bytes, name),
      `allocate ${bytes} B DRAM`,
    );
    state.shm = cString(name);
  } else {
    const ipc = new Uint8Array(64);
    id = check(
      n,
      n.dyn_region_alloc_vram(bytes, device, ipc),
      `allocate ${bytes} B VRAM`,
    );
    state.ipc = hex(ipc);
  }
  const region = new MemoryRegion(memType, bytes, device, String(id), ctx.name);
  regionStates.set(region, { ...state, agent: ctx.agent, id, registered: false, released: false });
  ctx.regions.add(region);
  return region;
}

/** Registers regions for transfers and the metadata. */
export function registerRegions(
  ctx: AgentContext,
  regions: MemoryRegion | readonly MemoryRegion[],
): MemoryRegion[] {
  const list = Array.isArray(regions) ? [...regions] : [regions as MemoryRegion];
  for (const r of list) ownRegion(ctx, r, "registerMemory");
  for (const r of list) regionStates.get(r)!.registered = true;
  return list;
}

/** Withdraws regions from the metadata. */
export function deregisterRegions(
  ctx: AgentContext,
  regions: MemoryRegion | readonly MemoryRegion[],
): void {
  const list = Array.isArray(regions) ? [...regions] : [regions as MemoryRegion];
  for (const r of list) ownRegion(ctx, r, "deregisterMemory").registered = false;
}

/** Releases a region. */
export function releaseRegion(ctx: AgentContext, region: MemoryRegion): void {
  const s = ownRegion(ctx, region, "releaseMemory");
  s.released = true;
  s.registered = false;
  ctx.regions.delete(region);
  check(ctx.n, ctx.n.dyn_region_free(s.id), "releaseMemory");
}

/** Copies bytes into a local region. */
export function writeRegion(
  ctx: AgentContext,
  region: MemoryRegion,
  offset: number,
  data: Uint8Array,
): void {
  const s = ownRegion(ctx, region, "writeMemory");
  checkSize(offset, "offset");
  if (!(data instanceof Uint8Array)) argError("writeMemory: data must be a Uint8Array");
  check(
    ctx.n,
    ctx.n.dyn_region_write(s.id, offset, bytesOf(data)),
    "writeMemory",
  );
}

/** Copies bytes out of a local region. */
export function readRegion(
  ctx: AgentContext,
  region: MemoryRegion,
  offset: number,
  length: number,
): Uint8Array {
  const s = ownRegion(ctx, region, "readMemory");
  checkSize(offset, "offset");
  checkSize(length, "length");
  const out = new Uint8Array(length);
  check(
    ctx.n,
    ctx.n.dyn_region_read(s.id, offset, bytesOf(out)),
    "readMemory",
  );
  return out;
}

/** One contiguous copy between two local regions. */
export function copyRegion(
  ctx: AgentContext,
  src: MemoryRegion,
  srcOffset: number,
  dst: MemoryRegion,
  dstOffset: number,
  length: number,
): void {
  const s = ownRegion(ctx, src, "copyMemory source");
  const d = ownRegion(ctx, dst, "copyMemory destination");
  checkSize(srcOffset, "srcOffset");
  checkSize(dstOffset, "dstOffset");
  checkSize(length, "length");
  check(
    ctx.n,
    ctx.n.dyn_region_copy(
      s.id,
      srcOffset,
      d.id,
      dstOffset,
      length,
    ),
    "copyMemory",
  );
}
