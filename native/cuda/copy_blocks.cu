// Batched gather/scatter copy: one launch copies a list of {src, dst, len} descriptors
// between device-accessible addresses. Built to PTX by native/build.rs and embedded in the
// library; the per-thread logic is in copy_blocks.cuh, where copy_blocks_test.cpp runs it on
// the CPU.
//
// Each CUDA block takes descriptors blockIdx.x, blockIdx.x + gridDim.x, ...; its threads
// split one descriptor between them. The host cuts long copies into chunks (src/kernel.rs),
// so a descriptor is at most a few tens of KiB and the grid has enough blocks.

#include "copy_blocks.cuh"

extern "C" __global__ void dyn_copy_blocks(const DynCopyDesc* descs, unsigned long long n) {
  dyn_copy_blocks_thread(descs, n, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
}
