// A stand-in for libcudart and libcuda where no GPU is (native/kernel_test.ts): one device
// whose memory is host memory, copies that are memmove, and a cuLaunchKernel that runs the
// copy kernel's per-thread logic (cuda/copy_blocks.cuh) for every block and thread. The
// test links it as libcudart.so and libcuda.so.1 in a folder on LD_LIBRARY_PATH of a child
// process, so the library's real launch path (context, module, descriptor upload, kernel
// parameters, fallbacks) runs without a GPU.
//
// MOCK_CUDA_FAIL=module: cuModuleLoadData fails as with a driver older than the PTX;
// MOCK_CUDA_FAIL=launch: cuLaunchKernel fails.

// C++, not CUDA: in a .cu file nvcc's own headers define some of these runtime functions.
// Build: nvcc -shared -Xcompiler -fPIC --cudart none -o libmockcuda.so mock_cuda.cpp

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "../cuda/copy_blocks.cuh"

namespace {

// The device whose context is current on this thread (-1: none), as cudaSetDevice leaves
// it for the driver API.
thread_local int current = -1;

std::atomic<long long> launches{0}, mallocs{0}, last_grid{0}, last_block{0}, last_descs{0},
    no_context{0};

const int MODULE_HANDLE = 1, FUNCTION_HANDLE = 2;

bool failing(const char* what) {
  const char* f = std::getenv("MOCK_CUDA_FAIL");
  return f != nullptr && std::strcmp(f, what) == 0;
}

}  // namespace

// --- the runtime API subset the library loads --------------------------------------------

extern "C" {

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  current = device;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  mallocs++;
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind,
                            cudaStream_t) {
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = reinterpret_cast<cudaStream_t>(new int(0));
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete reinterpret_cast<int*>(s);
  return cudaSuccess;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void* p) {
  std::memset(h, 0, sizeof(*h));
  std::memcpy(h->reserved, &p, sizeof(p));
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t h, unsigned int) {
  std::memcpy(p, h.reserved, sizeof(*p));
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void*) { return cudaSuccess; }

const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "mock CUDA error";
}

// --- the driver API subset ---------------------------------------------------------------

int cuInit(unsigned int) { return 0; }

int cuCtxGetCurrent(void** ctx) {
  *ctx = current < 0 ? nullptr : reinterpret_cast<void*>(0x1000 + current);
  return 0;
}

int cuCtxGetDevice(int* device) {
  if (current < 0) return 201;  // CUDA_ERROR_INVALID_CONTEXT
  *device = current;
  return 0;
}

int cuModuleLoadData(void** module, const void* image) {
  if (failing("module")) return 222;  // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
  if (current < 0) return 201;
  if (std::strstr(static_cast<const char*>(image), ".entry dyn_copy_blocks(") == nullptr) {
    return 218;  // CUDA_ERROR_INVALID_PTX
  }
  *module = const_cast<int*>(&MODULE_HANDLE);
  return 0;
}

int cuModuleGetFunction(void** f, void* module, const char* name) {
  if (module != &MODULE_HANDLE || std::strcmp(name, "dyn_copy_blocks") != 0) return 500;
  *f = const_cast<int*>(&FUNCTION_HANDLE);
  return 0;
}

int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
  if (failing("launch")) return 701;  // CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
  if (current < 0) {
    no_context++;
    return 201;
  }
  if (f != &FUNCTION_HANDLE || gy != 1 || gz != 1 || by != 1 || bz != 1 || gx == 0 ||
      gx > 65535 || bx == 0 || bx > 1024 || shared != 0 || stream == nullptr ||
      params == nullptr || extra != nullptr) {
    return 1;  // CUDA_ERROR_INVALID_VALUE
  }
  const DynCopyDesc* descs = *static_cast<const DynCopyDesc* const*>(params[0]);
  unsigned long long n = *static_cast<const unsigned long long*>(params[1]);
  for (unsigned b = 0; b < gx; b++) {
    for (unsigned t = 0; t < bx; t++) dyn_copy_blocks_thread(descs, n, b, gx, t, bx);
  }
  launches++;
  last_grid = gx;
  last_block = bx;
  last_descs = static_cast<long long>(n);
  return 0;
}

int cuGetErrorName(int e, const char** s) {
  *s = e == 222 ? "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
     : e == 701 ? "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
                : "CUDA_ERROR_MOCK";
  return 0;
}

int cuGetErrorString(int, const char** s) {
  *s = "mock driver error";
  return 0;
}

// What the test reads back: [launches, mallocs, last grid, last block, last descriptor
// count, launches without a current context].
void mock_cuda_stats(long long* out) {
  out[0] = launches;
  out[1] = mallocs;
  out[2] = last_grid;
  out[3] = last_block;
  out[4] = last_descs;
  out[5] = no_context;
}

}  // extern "C"
