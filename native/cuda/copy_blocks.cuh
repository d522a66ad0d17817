// The per-thread logic of the batched copy kernel (copy_blocks.cu), host and device code
// alike: the kernel's body is dyn_copy_blocks_thread, which a CPU program can call for every
// block and thread of a grid (copy_blocks_test.cpp, ../testdata/mock_cuda.cpp).

#pragma once

#include <cuda_runtime.h>

// Layout shared with `CopyDesc` in native/src/kernel.rs: three little-endian u64s.
struct DynCopyDesc {
  unsigned long long src;
  unsigned long long dst;
  unsigned long long len;
};

// Copies `len` bytes in words of type V, thread `tid` of `nthreads` taking every
// nthreads-th byte or word. src and dst must be congruent modulo sizeof(V): the head runs
// bytewise up to the first V-aligned source address (which is then V-aligned on both
// sides), the body in whole words, the tail bytewise. The ranges must not overlap (the host
// sends batches with overlapping ranges to ordered copies instead).
template <typename V>
__host__ __device__ inline void dyn_copy_span(const unsigned char* __restrict__ src,
                                              unsigned char* __restrict__ dst,
                                              unsigned long long len, unsigned tid,
                                              unsigned nthreads) {
  const unsigned long long w = sizeof(V);
  unsigned long long head = (w - (reinterpret_cast<unsigned long long>(src) & (w - 1))) & (w - 1);
  if (head > len) head = len;
  const unsigned long long words = (len - head) / w;
  const unsigned long long tail = head + words * w;
  for (unsigned long long i = tid; i < head; i += nthreads) dst[i] = src[i];
  const V* __restrict__ vs = reinterpret_cast<const V*>(src + head);
  V* __restrict__ vd = reinterpret_cast<V*>(dst + head);
  for (unsigned long long i = tid; i < words; i += nthreads) vd[i] = vs[i];
  for (unsigned long long i = tail + tid; i < len; i += nthreads) dst[i] = src[i];
}

// Thread `tid` of `nthreads` does its share of one descriptor, in the widest word (16, 8,
// 4 bytes, else single bytes) that both addresses can be aligned to at once. Taken by value:
// the copy's stores cannot then make the compiler reload the descriptor.
__host__ __device__ inline void dyn_copy_desc(const DynCopyDesc d, unsigned tid,
                                              unsigned nthreads) {
  const unsigned char* src = reinterpret_cast<const unsigned char*>(d.src);
  unsigned char* dst = reinterpret_cast<unsigned char*>(d.dst);
  const unsigned long long skew = d.src ^ d.dst;
  if ((skew & 15) == 0) {
    dyn_copy_span<uint4>(src, dst, d.len, tid, nthreads);
  } else if ((skew & 7) == 0) {
    dyn_copy_span<uint2>(src, dst, d.len, tid, nthreads);
  } else if ((skew & 3) == 0) {
    dyn_copy_span<unsigned int>(src, dst, d.len, tid, nthreads);
  } else {
    dyn_copy_span<unsigned char>(src, dst, d.len, tid, nthreads);
  }
}

// What thread `tid` of block `block` does in a grid of `grid` blocks of `nthreads`: the
// kernel's whole body, callable on the host to simulate a launch.
__host__ __device__ inline void dyn_copy_blocks_thread(const DynCopyDesc* descs,
                                                       unsigned long long n, unsigned block,
                                                       unsigned grid, unsigned tid,
                                                       unsigned nthreads) {
  for (unsigned long long i = block; i < n; i += grid) dyn_copy_desc(descs[i], tid, nthreads);
}
