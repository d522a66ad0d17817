/**
 * Opaque handles an agent hands out (memory regions, prepared descriptor lists, prepared
 * transfers) and the state behind them, kept out of reach of callers.
 */

import type { Native } from "./ffi.ts";
import type { MemType, RegionWire, XferOp } from "./types.ts";

/** The agent that owns a handle, compared by identity (the TransferAgent itself). */
export type AgentOwner = object;

export interface RegionState {
  agent: AgentOwner;
  id: number;
  registered: boolean;
  released: boolean;
  shm?: string;
  ipc?: string;
}

export interface DlistState {
  agent: AgentOwner;
  id: number;
  released: boolean;
  remote?: RemoteAgent;
  /** Local regions the list refers to (checked for release before each transfer). */
  regions: MemoryRegion[];
  lengths: number[];
}

export interface XferInternal {
  agent: AgentOwner;
  id: number;
  released: boolean;
  bytes: number;
  inline: boolean;
  pending?: Promise<number>;
  rc: number;
}

export interface RemoteAgent {
  name: string;
  sameProcess: boolean;
  regions: Map<string, RegionWire>;
  /** Native region ids by key: mapped here (cross-process) or the peer's own ids. */
  opened: Map<string, number>;
  ringId: number;
  removed: boolean;
  dlists: Set<DlistState>;
}

export const regionStates = new WeakMap<MemoryRegion, RegionState>();
export const dlistStates = new WeakMap<DlistHandle, DlistState>();
export const xferStates = new WeakMap<XferHandle, XferInternal>();

/** Memory allocated by an agent (opaque; pass it back to that agent's methods). */
export class MemoryRegion {
  /** Where the memory lives. */
  readonly memType: MemType;
  /** Size in bytes. */
  readonly bytes: number;
  /** CUDA device (0 for DRAM). */
  readonly device: number;
  /** Key of the region in descriptor lists and metadata. */
  readonly key: string;
  /** Name of the agent that allocated it. */
  readonly agentName: string;
  /** @internal regions come from {@linkcode TransferAgent.allocate} */
  constructor(memType: MemType, bytes: number, device: number, key: string, agentName: string) {
    this.memType = memType;
    this.bytes = bytes;
    this.device = device;
    this.key = key;
    this.agentName = agentName;
  }
  /** Whether the region was released. */
  get released(): boolean {
    return regionStates.get(this)?.released ?? true;
  }
  /** Whether the region is registered (visible to peers through the metadata). */
  get registered(): boolean {
    return regionStates.get(this)?.registered ?? false;
  }
}

/** A prepared descriptor list (local or of a remote agent); from `prepXferDlist`. */
export class DlistHandle {
  /** The agent whose memory the list describes ("" = the local agent). */
  readonly agentName: string;
  /** Where the memory of the listed descriptors lives. */
  readonly memType: MemType;
  /** Number of descriptors. */
  readonly length: number;
  /** @internal handles come from {@linkcode TransferAgent.prepXferDlist} */
  constructor(agentName: string, memType: MemType, length: number) {
    this.agentName = agentName;
    this.memType = memType;
    this.length = length;
  }
  /** Whether the handle was released (or its remote agent removed). */
  get released(): boolean {
    return dlistStates.get(this)?.released ?? true;
  }
}

/** A prepared transfer; from `makePreppedXfer`, run with `transfer`. */
export class XferHandle {
  /** Whether the transfer writes to or reads from the remote agent. */
  readonly op: XferOp;
  /** Descriptor pairs in the transfer. */
  readonly count: number;
  /** Bytes moved per run. */
  readonly bytes: number;
  /** @internal handles come from {@linkcode TransferAgent.makePreppedXfer} */
  constructor(op: XferOp, count: number, bytes: number) {
    this.op = op;
    this.count = count;
    this.bytes = bytes;
  }
  /** Whether the handle was released. */
  get released(): boolean {
    return xferStates.get(this)?.released ?? true;
  }
}

/** What an agent lends the modules that work on its state (its fields stay private). */
export interface AgentContext {
  /** The agent, as handle states record their owner. */
  readonly agent: AgentOwner;
  /** The agent's name. */
  readonly name: string;
  /** The native library. */
  readonly n: Native;
  /** The agent's notification queue. */
  readonly ringId: number;
  /** Host-memory transfers up to this many bytes run inline. */
  readonly inlineMax: number;
  /** Its live regions. */
  readonly regions: Set<MemoryRegion>;
  /** Its live descriptor lists. */
  readonly dlists: Set<DlistHandle>;
  /** Its live transfers. */
  readonly xfers: Set<XferHandle>;
  /** Its peers, by name. */
  readonly remotes: Map<string, RemoteAgent>;
  /** Throws unless the agent is open. */
  alive(): void;
}

/** One descriptor as given to {@linkcode TransferAgent.getXferDescs}. */
export interface XferDescInput {
  /** A region of the local agent. */
  region: MemoryRegion;
  /** Byte offset in the region. */
  offset: number;
  /** Bytes described. */
  length: number;
}

/** A region cut into equal blocks, as given to {@linkcode TransferAgent.getXferDescs}. */
export interface BlockLayout {
  /** The region to cut, of the local agent. */
  region: MemoryRegion;
  /** Bytes per block. */
  blockBytes: number;
  /** Blocks in the list; default: as many as fit after `offset`. */
  numBlocks?: number;
  /** Byte offset of block 0; default 0. */
  offset?: number;
}
