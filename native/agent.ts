/** The transfer agent (NIXL's `nixl_agent`): memory, peers, descriptor lists, transfers. */

import { argError, checkSize } from "./_args.ts";
import { cudaKernelPtx, probeCudaKernel, probeVram } from "./cuda.ts";
import { describeBlocks } from "./descriptors.ts";
import { ReleasedHandleError, UnknownAgentError } from "./errors.ts";
import { check, cString, enc, type Native, native } from "./ffi.ts";
import {
  type AgentContext,
  type DlistHandle,
  dlistStates,
  type MemoryRegion,
  regionStates,
  type RemoteAgent,
  type XferHandle,
  xferStates,
} from "./handles.ts";
import {
  allocateRegion,
  copyRegion,
  deregisterRegions,
  ownRegion,
  readRegion,
  registerRegions,
  releaseRegion,
  writeRegion,
} from "./memory.ts";
import { encodeMetadata, parseMetadata } from "./metadata.ts";
import { drainNotifs, notifRecord } from "./notifs.ts";
import { dropRemote, openRemote } from "./remotes.ts";
import {
  awaitXfer,
  makeXfer,
  postXfer,
  prepareDlist,
  releaseDlist,
  releaseXfer,
  xferState,
} from "./transfers.ts";
import type {
  AllocateOptions,
  CudaKernelStatus,
  CudaKernelStatusOptions,
  MemType,
  TransferAgentOptions,
  VramStatus,
  WaitXferOptions,
  XferDescList,
  XferOp,
  XferState,
} from "./types.ts";
import type { BlockLayout, XferDescInput } from "./handles.ts";

// Agents still open when the process exits normally (or calls Deno.exit) are closed then,
// so that their shared-memory segments do not outlive the process.
const openAgents = new Set<TransferAgent>();
let unloadHooked = false;
function trackAgent(agent: TransferAgent): void {
  if (!unloadHooked) {
    unloadHooked = true;
    globalThis.addEventListener("unload", () => {
      for (const a of [...openAgents]) a.close();
    });
  }
  openAgents.add(agent);
}

/**
 * A transfer agent (NIXL's `nixl_agent`): owns memory regions, knows remote agents by
 * their metadata, and moves blocks between its memory and theirs.
 *
 * The four steps of seed 000: allocate and register memory, describe its blocks
 * (`getXferDescs` + `prepXferDlist("", ...)`), exchange metadata and descriptors with the
 * peer (`getAgentMetadata` / `addRemoteAgent` + `prepXferDlist(peer, ...)`), then
 * `makePreppedXfer` + `transfer`; the peer learns of it through `getNewNotifs`.
 *
 * @example
 * ```ts
 * import { TransferAgent } from "./mod.ts";
 * const decode = new TransferAgent("decode-0");
 * const prefill = new TransferAgent("prefill-0");
 * const dst = decode.allocate("DRAM", 8 * 1024);
 * decode.registerMemory(dst);
 * const src = prefill.allocate("DRAM", 8 * 1024);
 * prefill.registerMemory(src);
 * const remoteDescs = decode.getXferDescs({ region: dst, blockBytes: 1024 });
 * prefill.addRemoteAgent(decode.getAgentMetadata());
 * const local = prefill.prepXferDlist("", prefill.getXferDescs({ region: src, blockBytes: 1024 }));
 * const remote = prefill.prepXferDlist("decode-0", remoteDescs);
 * const xfer = prefill.makePreppedXfer("WRITE", local, [0, 1], remote, [5, 2], "req-1");
 * prefill.transfer(xfer);
 * await prefill.waitXfer(xfer);
 * decode.getNewNotifs(); // Map { "prefill-0" => ["req-1"] }
 * prefill.close();
 * decode.close();
 * ```
 */
export class TransferAgent {
  /** The agent's name, unique among the agents that talk to each other. */
  readonly name: string;
  readonly #n: Native;
  readonly #ringId: number;
  readonly #ringName: string;
  readonly #ringCapacity: number;
  readonly #inlineMax: number;
  readonly #regions = new Set<MemoryRegion>();
  readonly #dlists = new Set<DlistHandle>();
  readonly #xfers = new Set<XferHandle>();
  readonly #remotes = new Map<string, RemoteAgent>();
  readonly #drainBuf: Uint8Array;
  #closed = false;
  readonly #ctx: AgentContext;

  /**
   * Creates an agent and its notification queue (loads the native library on first use).
   *
   * @param name agent name (non-empty), e.g. "decode-0"
   * @param options notification queue geometry and the inline-transfer threshold
   * @throws {NativeLibraryError} the native library is not built or cannot be loaded
   * @throws {TransferArgumentError} a bad name or option
   */
  constructor(name: string, options: TransferAgentOptions = {}) {
    if (typeof name !== "string" || name === "" || name.length > 256) {
      argError(`agent name must be a non-empty string of at most 256 characters, got ${name}`);
    }
    this.name = name;
    this.#inlineMax = checkSize(options.inlineMaxBytes ?? 65536, "inlineMaxBytes");
    const slots = checkSize(options.notifQueueSlots ?? 1024, "notifQueueSlots", 2);
    const slotBytes = checkSize(options.notifSlotBytes ?? 1024, "notifSlotBytes", 64);
    if (slots > 65536 || slotBytes > 65536) {
      argError(`notification queue too large: ${slots} slots of ${slotBytes} bytes (max 65536)`);
    }
    this.#n = native();
    const nameBuf = new Uint8Array(256);
    this.#ringId = check(
      this.#n,
      this.#n.dyn_ring_create(slots, slotBytes, nameBuf),
      "cannot create the notification queue",
    );
    this.#ringName = cString(nameBuf);
    this.#ringCapacity = this.#n.dyn_ring_capacity(this.#ringId);
    this.#drainBuf = new Uint8Array(Math.max(65536, slotBytes * 4));
    this.#ctx = {
      agent: this,
      name,
      n: this.#n,
      ringId: this.#ringId,
      inlineMax: this.#inlineMax,
      regions: this.#regions,
      dlists: this.#dlists,
      xfers: this.#xfers,
      remotes: this.#remotes,
      alive: () => this.#alive(),
    };
    trackAgent(this);
  }

  /**
   * Whether VRAM can be used here (libcudart found and at least one device).
   *
   * @returns availability, device count, and the reason when unavailable
   * @throws {NativeLibraryError} the native library is not built
   */
  static vramStatus(): VramStatus {
    return probeVram();
  }

  /**
   * Whether VRAM-to-VRAM batches can run as one launch of the library's copy kernel:
   * whether the build embedded its PTX, whether it loads on `options.device` (this loads
   * it, as the first such batch would), and why not. Also counts the VRAM batches of this
   * process by the path they took, so a run can report which one it used. Without the
   * kernel, batches run as one `cudaMemcpyAsync` per descriptor.
   *
   * @param options the CUDA device to probe (default 0)
   * @returns what was built in, whether it loaded, and the batch counters
   * @throws {NativeLibraryError} the native library is not built
   * @throws {TransferArgumentError} `options.device` is not a non-negative integer
   * @example
   * ```ts
   * import { TransferAgent } from "./mod.ts";
   * const k = TransferAgent.cudaKernelStatus();
   * if (!k.loaded) console.log(`batches use cudaMemcpyAsync: ${k.reason}`);
   * ```
   */
  static cudaKernelStatus(options: CudaKernelStatusOptions = {}): CudaKernelStatus {
    return probeCudaKernel(options);
  }

  /**
   * The PTX of the copy kernel embedded in the library ("" when it was built without
   * nvcc), e.g. to check it offline with `ptxas`.
   *
   * @returns the PTX source text
   * @throws {NativeLibraryError} the native library is not built
   */
  static cudaKernelPtx(): string {
    return cudaKernelPtx();
  }

  #alive(): void {
    if (this.#closed) throw new ReleasedHandleError(`agent '${this.name}' is closed`);
  }

  /**
   * Allocates zeroed memory: DRAM as POSIX shared memory another process can map, VRAM
   * with cudaMalloc on `options.device`.
   *
   * @param memType "DRAM" or "VRAM"
   * @param bytes size in bytes (> 0)
   * @param options the CUDA device of a VRAM region
   * @returns the region (register it to let peers see it)
   * @throws {TransferArgumentError} a bad type or size
   * @throws {VramUnavailableError} VRAM without libcudart or a device
   * @throws {TransferFailedError} the OS refused the memory (e.g. /dev/shm full)
   */
  allocate(memType: MemType, bytes: number, options: AllocateOptions = {}): MemoryRegion {
    return allocateRegion(this.#ctx, memType, bytes, options);
  }

  /**
   * Registers regions for transfers: local descriptor lists may use them, and the agent
   * metadata lists them for peers.
   *
   * @param regions one region or several, allocated by this agent
   * @returns the regions
   * @throws {ReleasedHandleError} a region was released
   */
  registerMemory(regions: MemoryRegion | readonly MemoryRegion[]): MemoryRegion[] {
    return registerRegions(this.#ctx, regions);
  }

  /**
   * Withdraws regions from the metadata (peers that mapped them keep their mapping until
   * the region is released and they remove this agent).
   *
   * @param regions one region or several
   * @throws {ReleasedHandleError} a region was released
   */
  deregisterMemory(regions: MemoryRegion | readonly MemoryRegion[]): void {
    deregisterRegions(this.#ctx, regions);
  }

  /**
   * Releases a region. Transfers already in flight finish on it; new lists and
   * transfers that use it are refused.
   *
   * @param region a region of this agent
   * @throws {ReleasedHandleError} it was already released
   */
  releaseMemory(region: MemoryRegion): void {
    releaseRegion(this.#ctx, region);
  }

  /**
   * Copies bytes into a local region (host or device memory).
   *
   * @param region a region of this agent
   * @param offset byte offset in the region
   * @param data the bytes
   * @throws {DescriptorRangeError} the range does not fit the region
   */
  writeMemory(region: MemoryRegion, offset: number, data: Uint8Array): void {
    writeRegion(this.#ctx, region, offset, data);
  }

  /**
   * Copies bytes out of a local region.
   *
   * @param region a region of this agent
   * @param offset byte offset in the region
   * @param length bytes to read
   * @returns a fresh copy of the bytes
   * @throws {DescriptorRangeError} the range does not fit the region
   */
  readMemory(region: MemoryRegion, offset: number, length: number): Uint8Array {
    return readRegion(this.#ctx, region, offset, length);
  }

  /**
   * One contiguous copy between two local regions (a plain memcpy for DRAM, cudaMemcpy
   * when either side is VRAM); the baseline the batched transfers are measured against.
   *
   * @param src source region
   * @param srcOffset byte offset in `src`
   * @param dst destination region
   * @param dstOffset byte offset in `dst`
   * @param length bytes to copy
   * @throws {DescriptorRangeError} a range does not fit its region
   */
  copyMemory(
    src: MemoryRegion,
    srcOffset: number,
    dst: MemoryRegion,
    dstOffset: number,
    length: number,
  ): void {
    copyRegion(this.#ctx, src, srcOffset, dst, dstOffset, length);
  }

  /**
   * Describes blocks of local regions for transfers: either explicit
   * `{region, offset, length}` entries or a region cut into equal blocks.
   *
   * @param descs explicit descriptors, or a {@linkcode BlockLayout}
   * @returns a serializable descriptor list (send it to peers as JSON)
   * @throws {DescriptorRangeError} a descriptor does not fit its region
   * @throws {TransferArgumentError} mixed memory types, empty or bad descriptors
   */
  getXferDescs(descs: readonly XferDescInput[] | BlockLayout): XferDescList {
    this.#alive();
    return describeBlocks(descs, (region, what) => ownRegion(this.#ctx, region, what));
  }

  /**
   * What a peer needs to reach this agent's registered memory and notification queue
   * (NIXL's `get_agent_metadata`). Send it, then call `addRemoteAgent` on the peer.
   *
   * @returns UTF-8 JSON bytes
   */
  getAgentMetadata(): Uint8Array {
    this.#alive();
    return encodeMetadata({
      name: this.name,
      process: BigInt(this.#n.dyn_process_token()).toString(16),
      notifQueue: { shm: this.#ringName, native_id: this.#ringId },
      regions: this.#regions,
    });
  }

  /**
   * Adds (or refreshes) a peer from its metadata: opens its notification queue; its
   * regions are mapped when a list first uses them.
   *
   * @param metadata bytes (or string) from the peer's `getAgentMetadata()`
   * @returns the peer's agent name
   * @throws {TransferArgumentError} malformed metadata, or this agent's own
   * @throws {TransferFailedError} the peer's queue cannot be opened (peer gone?)
   */
  addRemoteAgent(metadata: Uint8Array | string): string {
    this.#alive();
    const m = parseMetadata(metadata);
    if (m.name === this.name) argError(`cannot add agent '${m.name}' as a remote of itself`);
    const remote = openRemote(this.#n, m, BigInt(this.#n.dyn_process_token()).toString(16));
    if (this.#remotes.has(m.name)) this.removeRemoteAgent(m.name);
    this.#remotes.set(m.name, remote);
    return m.name;
  }

  /**
   * Forgets a peer: unmaps its memory here and releases the lists prepared on it.
   *
   * @param agentName the peer's name
   * @throws {UnknownAgentError} no such peer
   */
  removeRemoteAgent(agentName: string): void {
    this.#alive();
    const r = this.#remotes.get(agentName);
    if (!r) throw new UnknownAgentError(agentName);
    this.#dropRemote(r);
  }

  #dropRemote(r: RemoteAgent): void {
    this.#remotes.delete(r.name);
    dropRemote(this.#n, r);
  }

  /**
   * Prepares a descriptor list for transfers (NIXL's `prep_xfer_dlist`): `""` (or this
   * agent's name) for local memory, a peer's name for its memory.
   *
   * @param agentName "" for local, or a peer added with `addRemoteAgent`
   * @param descs a list from `getXferDescs` (the peer's, for a remote list)
   * @returns a handle for `makePreppedXfer`
   * @throws {UnknownAgentError} the peer was not added
   * @throws {DescriptorRangeError} a descriptor lies outside its region
   * @throws {TransferArgumentError} an unknown or unregistered region, mixed types
   */
  prepXferDlist(agentName: string, descs: XferDescList): DlistHandle {
    return prepareDlist(this.#ctx, agentName, descs);
  }

  /**
   * Releases a prepared descriptor list.
   *
   * @param handle a list of this agent
   * @throws {ReleasedHandleError} it was already released
   */
  releaseDlistHandle(handle: DlistHandle): void {
    releaseDlist(this.#ctx, handle);
  }

  /**
   * Prepares a transfer between entries of two prepared lists (NIXL's
   * `make_prepped_xfer`): pair i copies `local[localIdx[i]]` to `remote[remoteIdx[i]]`
   * (WRITE) or back (READ). The peer gets `notif` once every byte has landed.
   *
   * @param op "WRITE" or "READ"
   * @param local a local list from `prepXferDlist("")`
   * @param localIdx indices into `local`
   * @param remote a list of the peer (or a local one, for a copy within this agent)
   * @param remoteIdx indices into `remote`, as many as `localIdx`
   * @param notif message delivered to the peer after the copy (omit for none)
   * @returns a handle for `transfer`; it can be posted again once done
   * @throws {DescriptorRangeError} an index is out of range
   * @throws {SizeMismatchError} paired descriptors differ in size
   * @throws {TransferArgumentError} a bad operation, unequal index lists, a long notif
   * @throws {ReleasedHandleError} a list, region or agent was released
   */
  makePreppedXfer(
    op: XferOp,
    local: DlistHandle,
    localIdx: readonly number[] | Uint32Array,
    remote: DlistHandle,
    remoteIdx: readonly number[] | Uint32Array,
    notif?: string | Uint8Array,
  ): XferHandle {
    return makeXfer(this.#ctx, op, local, localIdx, remote, remoteIdx, notif);
  }

  /**
   * Starts a prepared transfer (NIXL's `transfer`). Small host-memory transfers complete
   * before it returns ("DONE"); others run on a native thread ("PROC"): poll
   * `checkXferState` or await `waitXfer`.
   *
   * @param handle a transfer of this agent, not in progress
   * @returns "DONE" or "PROC"
   * @throws {TransferBusyError} the transfer is still running
   * @throws {TransferError} an inline transfer failed (e.g. NotificationQueueFullError)
   */
  transfer(handle: XferHandle): XferState {
    return postXfer(this.#ctx, handle);
  }

  /**
   * The state of a posted transfer (NIXL's `check_xfer_state`).
   *
   * @param handle a transfer of this agent
   * @returns "PROC" while copying, "DONE" when finished, "ERR" when it failed
   * @throws {TransferArgumentError} it was never posted
   */
  checkXferState(handle: XferHandle): XferState {
    return xferState(this.#ctx, handle);
  }

  /**
   * Waits for a posted transfer to finish.
   *
   * @param handle a transfer of this agent
   * @param options `signal` stops the wait (not the copy)
   * @throws {TransferError} the transfer failed (the class says why)
   */
  async waitXfer(handle: XferHandle, options: WaitXferOptions = {}): Promise<void> {
    await awaitXfer(this.#ctx, handle, options);
  }

  /**
   * Releases a transfer (NIXL's `release_xfer_handle`).
   *
   * @param handle a finished (or never posted) transfer of this agent
   * @throws {TransferBusyError} it is still in progress
   */
  releaseXferHandle(handle: XferHandle): void {
    releaseXfer(this.#ctx, handle);
  }

  /**
   * Sends a notification without a transfer (NIXL's `send_notif`).
   *
   * @param agentName a peer added with `addRemoteAgent` (or this agent's own name)
   * @param message the message
   * @throws {UnknownAgentError} no such peer
   * @throws {NotificationQueueFullError} the peer does not drain its queue
   */
  sendNotif(agentName: string, message: string | Uint8Array): void {
    this.#alive();
    const r = agentName === this.name ? undefined : this.#remotes.get(agentName);
    if (!r && agentName !== this.name) throw new UnknownAgentError(agentName);
    const body = typeof message === "string" ? enc.encode(message) : message;
    const msg = notifRecord(this.name, body);
    if (msg.length > this.#ringCapacity) {
      argError(`notification of ${body.length} bytes is too long for the queue`);
    }
    const ring = r?.ringId ?? this.#ringId;
    check(
      this.#n,
      this.#n.dyn_ring_push(ring, msg),
      `sendNotif to '${agentName}'`,
    );
  }

  /**
   * Takes the notifications that arrived since the last call (NIXL's `get_new_notifs`).
   *
   * @returns messages (UTF-8 decoded) by sending agent, in arrival order
   */
  getNewNotifs(): Map<string, string[]> {
    this.#alive();
    return drainNotifs(this.#n, this.#ringId, this.#drainBuf);
  }

  /**
   * Releases everything the agent holds: transfers (those in flight finish first on the
   * native side), lists, peers' mappings, its memory and its notification queue. Peers
   * that already mapped its memory keep their mapping; new ones cannot open it.
   */
  close(): void {
    if (this.#closed) return;
    const n = this.#n;
    for (const h of this.#xfers) {
      const s = xferStates.get(h)!;
      s.released = true;
      if (n.dyn_xfer_free(s.id) < 0 && s.pending) {
        s.pending.then(() => n.dyn_xfer_free(s.id)).catch(() => {});
      }
    }
    for (const h of this.#dlists) {
      const s = dlistStates.get(h)!;
      s.released = true;
      n.dyn_dlist_free(s.id);
    }
    for (const r of [...this.#remotes.values()]) this.#dropRemote(r);
    for (const r of this.#regions) {
      const s = regionStates.get(r)!;
      s.released = true;
      s.registered = false;
      n.dyn_region_free(s.id);
    }
    n.dyn_ring_free(this.#ringId);
    this.#xfers.clear();
    this.#dlists.clear();
    this.#regions.clear();
    this.#closed = true;
    openAgents.delete(this);
  }

  /** Same as {@linkcode TransferAgent.close}. */
  [Symbol.dispose](): void {
    this.close();
  }
}
