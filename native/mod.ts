/**
 * Native KV-block transfer (NIXL-like) over the Rust library in `native/src`, bound with
 * `Deno.dlopen`. Memory, descriptor lists and transfers are opaque handles: no pointer
 * leaves this module, and every index and size is checked before a byte moves.
 *
 * Agents in one process copy directly; across processes, DRAM regions are POSIX shared
 * memory that the peer maps by the name in the agent metadata, VRAM regions are CUDA IPC
 * handles, and notifications travel through a small queue in shared memory that each
 * agent owns (see `native/README.md`).
 *
 * @example
 * ```ts
 * import { TransferAgent } from "./mod.ts";
 * const decode = new TransferAgent("decode-0");
 * const kv = decode.allocate("DRAM", 64 * 4096);
 * decode.registerMemory(kv);
 * const descs = decode.getXferDescs({ region: kv, blockBytes: 4096 });
 * const metadata = decode.getAgentMetadata(); // send metadata + descs to the prefill worker
 * ```
 *
 * @module
 */

export * from "./errors.ts";
export * from "./types.ts";
export { loadNativeLibrary, nativeLibraryPath } from "./ffi.ts";
export {
  type BlockLayout,
  DlistHandle,
  MemoryRegion,
  type XferDescInput,
  XferHandle,
} from "./handles.ts";
export { TransferAgent } from "./agent.ts";
