/**
 * Descriptor lists and transfers of an agent: preparing them, posting, waiting and
 * releasing, on the agent's state as {@linkcode AgentContext} lends it.
 */

import { argError, checkMemType, checkSize, packIndices } from "./_args.ts";
import {
  ReleasedHandleError,
  SizeMismatchError,
  type TransferError,
  UnknownAgentError,
} from "./errors.ts";
import { bytesOf, check, dec, enc, errorFor, lastError } from "./ffi.ts";
import {
  type AgentContext,
  DlistHandle,
  type DlistState,
  dlistStates,
  type MemoryRegion,
  regionStates,
  XferHandle,
  type XferInternal,
  xferStates,
} from "./handles.ts";
import { notifRecord } from "./notifs.ts";
import { remoteRegionId } from "./remotes.ts";
import type { MemType, WaitXferOptions, XferDescList, XferOp, XferState } from "./types.ts";

/** Prepares a descriptor list of local memory or of a peer's (see `TransferAgent.prepXferDlist`). */
export function prepareDlist(
  ctx: AgentContext,
  agentName: string,
  descs: XferDescList,
): DlistHandle {
  ctx.alive();
  if (typeof descs !== "object" || descs === null || !Array.isArray(descs.descs)) {
    argError("prepXferDlist: descs must be a list from getXferDescs()");
  }
  const memType = checkMemType(descs.mem_type);
  const local = agentName === "" || agentName === ctx.name;
  const remote = local ? undefined : ctx.remotes.get(agentName);
  if (!local && !remote) throw new UnknownAgentError(agentName);
  const entries = new BigUint64Array(descs.descs.length * 3);
  const regions: MemoryRegion[] = [];
  const lengths: number[] = [];
  const byKey = new Map<string, MemoryRegion>();
  if (local) { for (const r of ctx.regions) byKey.set(r.key, r); }
  for (const [i, d] of descs.descs.entries()) {
    if (typeof d !== "object" || d === null || typeof d.region !== "string") {
      argError(`descriptor ${i} is malformed: ${JSON.stringify(d)}`);
    }
    const offset = checkSize(d.offset, `descriptor ${i} offset`);
    const length = checkSize(d.length, `descriptor ${i} length`, 1);
    let id: number;
    let type: MemType;
    if (remote) {
      id = remoteRegionId(ctx.n, remote, d.region, i);
      type = remote.regions.get(d.region)!.mem_type;
    } else {
      const region = byKey.get(d.region);
      if (!region) {
        throw new ReleasedHandleError(
          `descriptor ${i}: agent '${ctx.name}' has no region '${d.region}' (released?)`,
        );
      }
      const s = regionStates.get(region)!;
      if (!s.registered) argError(`descriptor ${i}: region ${d.region} is not registered`);
      id = s.id;
      type = region.memType;
      regions.push(region);
    }
    if (type !== memType) {
      argError(`descriptor ${i}: region ${d.region} is ${type}, the list says ${memType}`);
    }
    entries[3 * i] = BigInt(id);
    entries[3 * i + 1] = BigInt(offset);
    entries[3 * i + 2] = BigInt(length);
    lengths.push(length);
  }
  const n = ctx.n;
  const id = check(n, n.dyn_dlist_create(bytesOf(entries)), "prepXferDlist");
  const handle = new DlistHandle(local ? "" : agentName, memType, descs.descs.length);
  const state: DlistState = { agent: ctx.agent, id, released: false, remote, regions, lengths };
  dlistStates.set(handle, state);
  remote?.dlists.add(state);
  ctx.dlists.add(handle);
  return handle;
}

/** The state of a list of this agent, checked: not released, nor any region it uses. */
export function ownDlist(ctx: AgentContext, h: DlistHandle, what: string): DlistState {
  ctx.alive();
  const s = h instanceof DlistHandle ? dlistStates.get(h) : undefined;
  if (!s || s.agent !== ctx.agent) {
    argError(`${what}: not a descriptor list of agent '${ctx.name}'`);
  }
  if (s.released) {
    throw new ReleasedHandleError(
      s.remote?.removed
        ? `${what}: agent '${s.remote.name}' was removed`
        : `${what}: the descriptor list was released`,
    );
  }
  for (const r of s.regions) {
    if (regionStates.get(r)!.released) {
      throw new ReleasedHandleError(`${what}: memory region ${r.key} was released`);
    }
  }
  return s;
}

/** Releases a prepared descriptor list. */
export function releaseDlist(ctx: AgentContext, handle: DlistHandle): void {
  const s = ownDlist(ctx, handle, "releaseDlistHandle");
  s.released = true;
  s.remote?.dlists.delete(s);
  ctx.dlists.delete(handle);
  check(ctx.n, ctx.n.dyn_dlist_free(s.id), "releaseDlistHandle");
}

/** Prepares a transfer between entries of two lists (see `TransferAgent.makePreppedXfer`). */
export function makeXfer(
  ctx: AgentContext,
  op: XferOp,
  local: DlistHandle,
  localIdx: readonly number[] | Uint32Array,
  remote: DlistHandle,
  remoteIdx: readonly number[] | Uint32Array,
  notif?: string | Uint8Array,
): XferHandle {
  if (op !== "READ" && op !== "WRITE") {
    argError(`transfer operation must be "READ" or "WRITE", got ${JSON.stringify(op)}`);
  }
  const l = ownDlist(ctx, local, "makePreppedXfer local list");
  const r = ownDlist(ctx, remote, "makePreppedXfer remote list");
  if (local.agentName !== "") argError("makePreppedXfer: the first list must be a local one");
  const li = packIndices(localIdx, local.length, "local");
  const ri = packIndices(remoteIdx, remote.length, "remote");
  if (li.length !== ri.length) {
    argError(`index lists differ in length: ${li.length} local, ${ri.length} remote`);
  }
  let bytes = 0;
  for (let i = 0; i < li.length; i++) {
    const a = l.lengths[li[i]!]!;
    const b = r.lengths[ri[i]!]!;
    if (a !== b) {
      throw new SizeMismatchError(
        `sizes differ at position ${i}: local descriptor ${li[i]} has ${a} bytes, ` +
          `remote descriptor ${ri[i]} has ${b}`,
      );
    }
    bytes += a;
  }
  let ring = 0;
  let msg = new Uint8Array(0);
  if (notif !== undefined) {
    const body = typeof notif === "string" ? enc.encode(notif) : notif;
    if (!(body instanceof Uint8Array)) argError("notif must be a string or a Uint8Array");
    msg = notifRecord(ctx.name, body);
    ring = r.remote?.ringId ?? ctx.ringId;
  }
  const n = ctx.n;
  const id = check(
    n,
    n.dyn_xfer_create(
      op === "WRITE" ? 1 : 0,
      l.id,
      bytesOf(li),
      r.id,
      bytesOf(ri),
      ring,
      bytesOf(msg),
    ),
    "makePreppedXfer",
  );
  const inline = bytes <= ctx.inlineMax && local.memType === "DRAM" &&
    remote.memType === "DRAM";
  const handle = new XferHandle(op, li.length, bytes);
  xferStates.set(handle, { agent: ctx.agent, id, released: false, bytes, inline, rc: 0 });
  ctx.xfers.add(handle);
  return handle;
}

/** The state of a transfer of this agent, checked: not released. */
export function ownXfer(ctx: AgentContext, h: XferHandle, what: string): XferInternal {
  ctx.alive();
  const s = h instanceof XferHandle ? xferStates.get(h) : undefined;
  if (!s || s.agent !== ctx.agent) argError(`${what}: not a transfer of agent '${ctx.name}'`);
  if (s.released) throw new ReleasedHandleError(`${what}: the transfer was released`);
  return s;
}

/** The typed error of a failed transfer, with the native engine's message. */
export function xferFailure(ctx: AgentContext, s: XferInternal, rc: number): TransferError {
  const buf = new Uint8Array(1024);
  const len = Number(ctx.n.dyn_xfer_error(s.id, buf));
  return errorFor(rc, `transfer failed: ${dec.decode(buf.subarray(0, Math.min(len, 1024)))}`);
}

/** Starts a prepared transfer: inline when small and in host memory, else off-thread. */
export function postXfer(ctx: AgentContext, handle: XferHandle): XferState {
  const s = ownXfer(ctx, handle, "transfer");
  const n = ctx.n;
  if (s.inline) {
    const rc = n.dyn_xfer_post(s.id);
    s.rc = rc;
    if (rc < 0) throw errorFor(rc, `transfer: ${lastError(n)}`);
    return "DONE";
  }
  check(n, n.dyn_xfer_arm(s.id), "transfer");
  const p: Promise<number> = n.dyn_xfer_run(s.id).then((rc) => {
    s.rc = rc;
    if (s.pending === p) s.pending = undefined;
    return rc;
  });
  s.pending = p;
  return "PROC";
}

/** The state of a posted transfer. */
export function xferState(ctx: AgentContext, handle: XferHandle): XferState {
  const s = ownXfer(ctx, handle, "checkXferState");
  const st = ctx.n.dyn_xfer_state(s.id);
  if (st === 0) argError("checkXferState: the transfer was never posted; call transfer()");
  return st === 1 ? "PROC" : st === 2 ? "DONE" : "ERR";
}

/** Waits for a posted transfer to finish; throws its failure. */
export async function awaitXfer(
  ctx: AgentContext,
  handle: XferHandle,
  options: WaitXferOptions = {},
): Promise<void> {
  const s = ownXfer(ctx, handle, "waitXfer");
  const signal = options.signal;
  signal?.throwIfAborted();
  while (s.pending) {
    if (!signal) {
      await s.pending;
      continue;
    }
    let onAbort: (() => void) | undefined;
    try {
      await Promise.race([
        s.pending,
        new Promise<never>((_, reject) => {
          onAbort = () => reject(signal.reason);
          signal.addEventListener("abort", onAbort, { once: true });
        }),
      ]);
    } finally {
      if (onAbort) signal.removeEventListener("abort", onAbort);
    }
  }
  const st = ctx.n.dyn_xfer_state(s.id);
  if (st === 0) argError("waitXfer: the transfer was never posted; call transfer()");
  if (st === 3) throw xferFailure(ctx, s, s.rc < 0 ? s.rc : -5);
}

/** Releases a transfer. */
export function releaseXfer(ctx: AgentContext, handle: XferHandle): void {
  const s = ownXfer(ctx, handle, "releaseXferHandle");
  check(ctx.n, ctx.n.dyn_xfer_free(s.id), "releaseXferHandle");
  s.released = true;
  ctx.xfers.delete(handle);
}
