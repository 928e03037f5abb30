// A stand-in for libcuda.so.1, for tests on machines without a GPU: the driver entry points the
// shim resolves, with "device" memory in host memory, synchronous copies, streams and events
// that are always complete, and cuLaunchKernel running the kernels' shared element function on
// the CPU. It lets the device sink's logic (slots, staging areas, offsets, the direct copy,
// context push/pop, resource release) run in CI; it says nothing about a real GPU.
//
// It checks what a real driver would reject and counts what is outstanding, readable through
// voxpipe_fake_cuda_counters(). VOXPIPE_FAKE_CUDA_INIT_ERROR=<code> makes cuInit fail.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#include "cuda/convert_element.hpp"

namespace {

using CUresult = int;
constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3,
                   kInvalidContext = 201, kInvalidImage = 200, kNotFound = 500,
                   kInvalidHandle = 400, kNoDevice = 100;

std::atomic<bool> g_initialised{false};
std::atomic<long> g_device_allocations{0}, g_host_allocations{0}, g_streams{0}, g_events{0},
    g_modules{0}, g_retains{0}, g_launches{0}, g_copies{0};
thread_local int t_context_depth = 0;
thread_local bool t_context_set = false;  // cuCtxSetCurrent, outside the push/pop count
std::atomic<long> g_context_depth_total{0};  // pushes minus pops over all threads

int g_context_tag = 0;  // its address is the one context
int g_stream_tag = 0, g_event_tag = 0, g_module_tag = 0;
constexpr const char* kKernels[] = {"voxpipe_convert_raw", "voxpipe_convert_nifti",
                                    "voxpipe_convert_dicom"};

bool context_current() { return t_context_depth > 0 || t_context_set; }

}  // namespace

extern "C" {

struct VoxpipeFakeCudaCounters {
  long device_allocations, host_allocations, streams, events, modules, retains, launches,
      copies, context_depth;
};

__attribute__((visibility("default"))) VoxpipeFakeCudaCounters voxpipe_fake_cuda_counters() {
  return {g_device_allocations, g_host_allocations, g_streams, g_events, g_modules, g_retains,
          g_launches, g_copies, g_context_depth_total};
}

#define FAKE_API __attribute__((visibility("default")))

FAKE_API CUresult cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  if (const char* e = std::getenv("VOXPIPE_FAKE_CUDA_INIT_ERROR")) return std::atoi(e);
  g_initialised = true;
  return kSuccess;
}
FAKE_API CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetCount(int* n) {
  if (!g_initialised) return kNotInitialized;
  *n = 1;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGet(int* d, int ordinal) {
  if (!g_initialised) return kNotInitialized;
  if (ordinal != 0) return kNoDevice;
  *d = 0;
  return kSuccess;
}
FAKE_API CUresult cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "voxpipe fake device", static_cast<std::size_t>(len));
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxRetain(void** ctx, int) {
  ++g_retains;
  *ctx = &g_context_tag;
  return kSuccess;
}
FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(int) {
  return --g_retains < 0 ? kInvalidContext : kSuccess;
}
FAKE_API CUresult cuCtxSetCurrent(void* ctx) {
  if (ctx && ctx != &g_context_tag) return kInvalidContext;
  t_context_set = ctx != nullptr;
  return kSuccess;
}
FAKE_API CUresult cuCtxPushCurrent_v2(void* ctx) {
  if (ctx != &g_context_tag) return kInvalidContext;
  ++t_context_depth;
  ++g_context_depth_total;
  return kSuccess;
}
FAKE_API CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (t_context_depth == 0) return kInvalidContext;
  --t_context_depth;
  --g_context_depth_total;
  if (ctx) *ctx = &g_context_tag;
  return kSuccess;
}
FAKE_API CUresult cuMemAlloc_v2(unsigned long long* p, std::size_t bytes) {
  if (!context_current()) return kInvalidContext;
  void* m = std::malloc(std::max<std::size_t>(bytes, 1));
  if (!m) return kOutOfMemory;
  ++g_device_allocations;
  *p = reinterpret_cast<std::uintptr_t>(m);
  return kSuccess;
}
FAKE_API CUresult cuMemFree_v2(unsigned long long p) {
  if (!context_current()) return kInvalidContext;
  std::free(reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)));
  --g_device_allocations;
  return kSuccess;
}
FAKE_API CUresult cuMemAllocHost_v2(void** p, std::size_t bytes) {
  if (!context_current()) return kInvalidContext;
  *p = ::operator new(std::max<std::size_t>(bytes, 1), std::align_val_t{4096}, std::nothrow);
  if (!*p) return kOutOfMemory;
  ++g_host_allocations;
  return kSuccess;
}
FAKE_API CUresult cuMemFreeHost(void* p) {
  ::operator delete(p, std::align_val_t{4096});
  --g_host_allocations;
  return kSuccess;
}
FAKE_API CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, std::size_t n, void* stream) {
  if (!context_current()) return kInvalidContext;
  if (stream != &g_stream_tag) return kInvalidHandle;
  std::memcpy(reinterpret_cast<void*>(static_cast<std::uintptr_t>(dst)), src, n);
  ++g_copies;
  return kSuccess;
}
// Synchronous (bench/gpu/bench_gpu.py's baseline copies, run on the stand-in as a smoke test).
FAKE_API CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void* src, std::size_t n) {
  if (!context_current()) return kInvalidContext;
  std::memcpy(reinterpret_cast<void*>(static_cast<std::uintptr_t>(dst)), src, n);
  ++g_copies;
  return kSuccess;
}
FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, unsigned long long src, std::size_t n) {
  if (!context_current()) return kInvalidContext;
  std::memcpy(dst, reinterpret_cast<const void*>(static_cast<std::uintptr_t>(src)), n);
  return kSuccess;
}
FAKE_API CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, std::size_t n,
                                       void* stream) {
  if (!context_current()) return kInvalidContext;
  if (stream != &g_stream_tag) return kInvalidHandle;
  std::memmove(reinterpret_cast<void*>(static_cast<std::uintptr_t>(dst)),
               reinterpret_cast<const void*>(static_cast<std::uintptr_t>(src)), n);
  ++g_copies;
  return kSuccess;
}
FAKE_API CUresult cuStreamCreate(void** s, unsigned) {
  if (!context_current()) return kInvalidContext;
  ++g_streams;
  *s = &g_stream_tag;
  return kSuccess;
}
FAKE_API CUresult cuStreamDestroy_v2(void*) {
  --g_streams;
  return kSuccess;
}
FAKE_API CUresult cuStreamSynchronize(void* s) { return s == &g_stream_tag ? kSuccess : kInvalidHandle; }
FAKE_API CUresult cuStreamWaitEvent(void*, void*, unsigned) { return kSuccess; }
FAKE_API CUresult cuEventCreate(void** e, unsigned) {
  if (!context_current()) return kInvalidContext;
  ++g_events;
  *e = &g_event_tag;
  return kSuccess;
}
FAKE_API CUresult cuEventRecord(void* e, void* s) {
  return e == &g_event_tag && s == &g_stream_tag ? kSuccess : kInvalidHandle;
}
FAKE_API CUresult cuEventSynchronize(void* e) {
  if (!context_current()) return kInvalidContext;
  return e == &g_event_tag ? kSuccess : kInvalidHandle;
}
FAKE_API CUresult cuEventDestroy_v2(void*) {
  --g_events;
  return kSuccess;
}
// Accepts a fatbin (magic 0xBA55ED50) and keeps nothing but its address: the names are looked up
// in its bytes (header: magic, version, header size, then the size of what follows).
const unsigned char* g_image = nullptr;
FAKE_API CUresult cuModuleLoadData(void** m, const void* image) {
  if (!context_current()) return kInvalidContext;
  std::uint32_t magic;
  std::memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u) return kInvalidImage;
  g_image = static_cast<const unsigned char*>(image);
  ++g_modules;
  *m = &g_module_tag;
  return kSuccess;
}
FAKE_API CUresult cuModuleUnload(void*) {
  --g_modules;
  return kSuccess;
}
FAKE_API CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  if (m != &g_module_tag) return kInvalidHandle;
  std::uint16_t header;
  std::uint64_t body;
  std::memcpy(&header, g_image + 6, 2);
  std::memcpy(&body, g_image + 8, 8);
  const std::string_view bytes(reinterpret_cast<const char*>(g_image), header + body);
  for (const char* k : kKernels)
    if (std::string_view(name) == k && bytes.find(k) != std::string_view::npos) {
      *f = const_cast<char*>(k);
      return kSuccess;
    }
  return kNotFound;
}
// Runs the kernel as kernels.cu does: the kind from the kernel's name, then the shared function.
FAKE_API CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned, void* stream, void** params,
                                 void** extra) {
  if (!context_current()) return kInvalidContext;
  if (stream != &g_stream_tag || extra || !params) return kInvalidValue;
  if (gx == 0 || gy != 1 || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1) return kInvalidValue;
  voxpipe::cuda::ElementOp op;
  std::memcpy(&op, params[0], sizeof(op));
  const std::string_view name(static_cast<const char*>(f));
  op.kind = name == kKernels[0]   ? voxpipe::cuda::ElementKind::raw
            : name == kKernels[1] ? voxpipe::cuda::ElementKind::nifti
                                  : voxpipe::cuda::ElementKind::dicom;
  unsigned long long src, dst, n;
  std::memcpy(&src, params[1], 8);
  std::memcpy(&dst, params[2], 8);
  std::memcpy(&n, params[3], 8);
  voxpipe::cuda::convert_elements(op, reinterpret_cast<const unsigned char*>(static_cast<std::uintptr_t>(src)),
                                  reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(dst)), 0, n);
  ++g_launches;
  return kSuccess;
}
FAKE_API CUresult cuGetErrorName(CUresult e, const char** s) {
  switch (e) {
    case kNoDevice: *s = "CUDA_ERROR_NO_DEVICE"; return kSuccess;
    case kOutOfMemory: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return kSuccess;
    case kInvalidContext: *s = "CUDA_ERROR_INVALID_CONTEXT"; return kSuccess;
    default: *s = nullptr; return kInvalidValue;
  }
}
FAKE_API CUresult cuGetErrorString(CUresult e, const char** s) {
  switch (e) {
    case kNoDevice: *s = "no CUDA-capable device is detected"; return kSuccess;
    case kOutOfMemory: *s = "out of memory"; return kSuccess;
    case kInvalidContext: *s = "invalid device context"; return kSuccess;
    default: *s = nullptr; return kInvalidValue;
  }
}

}  // extern "C"
