/** Public value types of the transfer engine: memory types, descriptors, options, statuses. */

/** Where a region lives: host memory (shared with other processes) or GPU memory. */
export type MemType = "DRAM" | "VRAM";
/** WRITE copies local blocks into the remote agent's; READ copies them back. */
export type XferOp = "READ" | "WRITE";
/** NIXL's transfer states: in progress, done, failed. */
export type XferState = "PROC" | "DONE" | "ERR";

/** One transfer descriptor: `length` bytes at `offset` of the region keyed `region`. */
export interface XferDesc {
  /** Key of the region (as in the agent metadata). */
  region: string;
  /** Byte offset in the region. */
  offset: number;
  /** Bytes described. */
  length: number;
}

/**
 * A serializable list of descriptors (a wire type: send it to a peer as JSON together
 * with the agent metadata, then `prepXferDlist(agentName, list)` on the peer).
 */
export interface XferDescList {
  /** Where the described memory lives. */
  mem_type: MemType;
  /** The descriptors, in list order (transfers pick them by index). */
  descs: XferDesc[];
}

/** Options of {@linkcode TransferAgent}. */
export interface TransferAgentOptions {
  /** Slots of this agent's notification queue (a power of two); default 1024. */
  notifQueueSlots?: number;
  /** Bytes per notification slot, 16 of which are a header; default 1024. */
  notifSlotBytes?: number;
  /**
   * Host-memory transfers of at most this many bytes run inline on the calling thread
   * (transfer() returns "DONE"); larger ones and every VRAM transfer run on a native
   * thread. Default 65536; 0 sends everything off-thread.
   */
  inlineMaxBytes?: number;
}

/** Options of {@linkcode TransferAgent.allocate}. */
export interface AllocateOptions {
  /** CUDA device of a VRAM region; default 0. */
  device?: number;
}

/** Options of {@linkcode TransferAgent.waitXfer}. */
export interface WaitXferOptions {
  /** Stops waiting (the transfer itself goes on). */
  signal?: AbortSignal;
}

/** What {@linkcode TransferAgent.vramStatus} finds. */
export interface VramStatus {
  /** Whether VRAM regions can be allocated. */
  available: boolean;
  /** CUDA devices found. */
  devices: number;
  /** Why VRAM is unavailable, when it is. */
  reason?: string;
}

/** Options of {@linkcode TransferAgent.cudaKernelStatus}. */
export interface CudaKernelStatusOptions {
  /** CUDA device to load the kernel on; default 0. */
  device?: number;
}

/**
 * What {@linkcode TransferAgent.cudaKernelStatus} finds: whether VRAM-to-VRAM batches run
 * as one launch of the library's copy kernel, or as one `cudaMemcpyAsync` per descriptor.
 */
export interface CudaKernelStatus {
  /** Whether the library was built with the kernel's PTX (nvcc was found at build time). */
  ptxEmbedded: boolean;
  /** Size of the embedded PTX in bytes (0 without it). */
  ptxBytes: number;
  /** Virtual architecture of the PTX, e.g. "compute_75" ("" without it). */
  ptxArch: string;
  /** What the build found: the nvcc used and its release, or why there is no PTX. */
  buildNote: string;
  /** Whether the kernel is loaded on the device (the probe loads it, as a batch would). */
  loaded: boolean;
  /** Why the kernel is not loaded, when it is not. */
  reason?: string;
  /** VRAM batches of this process that ran as one kernel launch. */
  kernelBatches: number;
  /** VRAM batches of this process that ran as one cudaMemcpyAsync per descriptor. */
  copyBatches: number;
  /** Why the latest of those ran as copies (host memory on one side, a single copy, ...). */
  lastCopyReason?: string;
}

/** One region in the wire form of the agent metadata. */
export interface RegionWire {
  key: string;
  mem_type: MemType;
  bytes: number;
  device: number;
  native_id: number;
  shm?: string;
  ipc_handle?: string;
}
