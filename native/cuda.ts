/** What the CUDA side of the native library finds: VRAM availability and the copy kernel. */

import { checkSize } from "./_args.ts";
import { lastError, native, nativeString } from "./ffi.ts";
import type { CudaKernelStatus, CudaKernelStatusOptions, VramStatus } from "./types.ts";

export interface CudaKernelInfoWire {
  ptx_embedded: boolean;
  ptx_bytes: number;
  ptx_arch: string;
  build_note: string;
  loaded: boolean;
  reason: string | null;
  kernel_batches: number;
  copy_batches: number;
  last_copy_reason: string;
}

/**
 * Probes for VRAM (libcudart found and at least one device).
 *
 * @returns availability, device count, and the reason when unavailable
 */
export function probeVram(): VramStatus {
  const n = native();
  const rc = n.dyn_vram_probe();
  return rc > 0
    ? { available: true, devices: rc }
    : { available: false, devices: 0, reason: lastError(n) };
}

/**
 * Probes the copy kernel on a device (loading it, as the first VRAM batch would).
 *
 * @param options the CUDA device to probe (default 0)
 * @returns what was built in, whether it loaded, and the batch counters
 */
export function probeCudaKernel(options: CudaKernelStatusOptions = {}): CudaKernelStatus {
  const device = checkSize(options.device ?? 0, "device");
  const n = native();
  const w = JSON.parse(
    nativeString((buf) => n.dyn_cuda_kernel_info(device, buf)),
  ) as CudaKernelInfoWire;
  const status: CudaKernelStatus = {
    ptxEmbedded: w.ptx_embedded,
    ptxBytes: w.ptx_bytes,
    ptxArch: w.ptx_arch,
    buildNote: w.build_note,
    loaded: w.loaded,
    kernelBatches: w.kernel_batches,
    copyBatches: w.copy_batches,
  };
  if (w.reason !== null) status.reason = w.reason;
  if (w.last_copy_reason !== "") status.lastCopyReason = w.last_copy_reason;
  return status;
}

/**
 * Reads the copy kernel's PTX embedded in the library ("" without nvcc at build time).
 *
 * @returns the PTX source text
 */
export function cudaKernelPtx(): string {
  const n = native();
  return nativeString((buf) => n.dyn_cuda_kernel_ptx(buf));
}
