// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") (KvikIO's shim pattern):
// the library links neither libcuda nor libcudart and builds without the CUDA toolkit, and one
// binary runs on machines with and without a GPU. Only the entry points voxpipe calls are
// resolved; their types are declared here, ABI-compatible with cuda.h (checked by
// tests/cpp/cuda/driver_abi_test.cpp where the toolkit is installed). Internal.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace voxpipe::cuda {

// ---- the driver API's types (cuda.h), under voxpipe::cuda::drv -------------------------------
namespace drv {

using CUresult = int;  // cudaError_enum: an int-sized enum in cuda.h
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;

}  // namespace drv

// The resolved entry points. Each member is named after the driver symbol it holds (without the
// _v2 suffix where the symbol has one: cuda.h #defines the plain name to the _v2 symbol).
struct DriverApi {
  using R = drv::CUresult;
  R (*init)(unsigned flags);                                               // cuInit
  R (*driver_get_version)(int* version);                                   // cuDriverGetVersion
  R (*device_get_count)(int* count);                                       // cuDeviceGetCount
  R (*device_get)(drv::CUdevice* device, int ordinal);                     // cuDeviceGet
  R (*device_get_name)(char* name, int len, drv::CUdevice device);         // cuDeviceGetName
  R (*primary_ctx_retain)(drv::CUcontext* ctx, drv::CUdevice device);      // cuDevicePrimaryCtxRetain
  R (*primary_ctx_release)(drv::CUdevice device);                          // cuDevicePrimaryCtxRelease_v2
  R (*ctx_set_current)(drv::CUcontext ctx);                                // cuCtxSetCurrent
  R (*ctx_push_current)(drv::CUcontext ctx);                               // cuCtxPushCurrent_v2
  R (*ctx_pop_current)(drv::CUcontext* ctx);                               // cuCtxPopCurrent_v2
  R (*mem_alloc)(drv::CUdeviceptr* ptr, std::size_t bytes);                // cuMemAlloc_v2
  R (*mem_free)(drv::CUdeviceptr ptr);                                     // cuMemFree_v2
  R (*mem_alloc_host)(void** ptr, std::size_t bytes);                      // cuMemAllocHost_v2
  R (*mem_free_host)(void* ptr);                                           // cuMemFreeHost
  R (*memcpy_htod_async)(drv::CUdeviceptr dst, const void* src, std::size_t bytes,
                         drv::CUstream stream);                            // cuMemcpyHtoDAsync_v2
  R (*memcpy_dtoh)(void* dst, drv::CUdeviceptr src, std::size_t bytes);    // cuMemcpyDtoH_v2
  R (*memcpy_dtod_async)(drv::CUdeviceptr dst, drv::CUdeviceptr src, std::size_t bytes,
                         drv::CUstream stream);                            // cuMemcpyDtoDAsync_v2
  R (*stream_create)(drv::CUstream* stream, unsigned flags);               // cuStreamCreate
  R (*stream_destroy)(drv::CUstream stream);                               // cuStreamDestroy_v2
  R (*stream_synchronize)(drv::CUstream stream);                           // cuStreamSynchronize
  R (*stream_wait_event)(drv::CUstream stream, drv::CUevent event, unsigned flags);  // cuStreamWaitEvent
  R (*event_create)(drv::CUevent* event, unsigned flags);                  // cuEventCreate
  R (*event_record)(drv::CUevent event, drv::CUstream stream);             // cuEventRecord
  R (*event_synchronize)(drv::CUevent event);                              // cuEventSynchronize
  R (*event_destroy)(drv::CUevent event);                                  // cuEventDestroy_v2
  R (*module_load_data)(drv::CUmodule* module, const void* image);         // cuModuleLoadData
  R (*module_unload)(drv::CUmodule module);                                // cuModuleUnload
  R (*module_get_function)(drv::CUfunction* fn, drv::CUmodule module, const char* name);  // cuModuleGetFunction
  R (*launch_kernel)(drv::CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                     unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                     drv::CUstream stream, void** params, void** extra);   // cuLaunchKernel
  R (*get_error_name)(drv::CUresult error, const char** name);             // cuGetErrorName
  R (*get_error_string)(drv::CUresult error, const char** text);           // cuGetErrorString
};

// A loaded driver library with its entry points resolved. Closing it (destruction) is only safe
// once nothing it handed out is in use.
class DriverLibrary {
 public:
  // Loads `name` (normally "libcuda.so.1") and resolves every DriverApi entry point. Returns
  // nullptr and sets *why to "<name> not found: <dlerror>" or "<name> lacks <symbol> (driver
  // too old?)" on failure. Does not call cuInit.
  static std::unique_ptr<DriverLibrary> open(const char* name, std::string* why);
  ~DriverLibrary();
  DriverLibrary(const DriverLibrary&) = delete;
  DriverLibrary& operator=(const DriverLibrary&) = delete;

  const DriverApi& api() const noexcept { return api_; }

 private:
  DriverLibrary() = default;
  void* handle_ = nullptr;
  DriverApi api_{};
};

// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)", or "CUDA error 100" where the
// driver has no name for it.
std::string cuda_error_text(const DriverApi& api, drv::CUresult result);

// Throws voxpipe::Error naming the call and the CUDA error unless result is CUDA_SUCCESS:
// "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" (code limit for out of memory,
// io otherwise). `path` names the file being loaded, where there is one.
void check(const DriverApi& api, drv::CUresult result, const char* call,
           const std::string& path = "");

// The process's driver: libcuda.so.1, loaded and cuInit'ed once, on first use, thread-safe;
// nullptr when it is not available (cuda_status() says why). Never unloaded.
const DriverApi* driver() noexcept;

}  // namespace voxpipe::cuda
