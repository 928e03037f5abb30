#include "cuda/driver.hpp"

#include <dlfcn.h>

#include "cuda/status.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cuda {

namespace {

// Resolves `symbol` into `slot`; false (and *why set) when the library lacks it.
template <class Fn>
bool resolve(void* handle, const char* library, const char* symbol, Fn& slot, std::string* why) {
  void* p = ::dlsym(handle, symbol);
  if (!p) {
    *why = std::string(library) + " lacks " + symbol + " (a driver older than CUDA 11?)";
    return false;
  }
  slot = reinterpret_cast<Fn>(p);
  return true;
}

}  // namespace

std::unique_ptr<DriverLibrary> DriverLibrary::open(const char* name, std::string* why) {
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace of the process (another
  // copy loaded by PyTorch or CuPy is the same file and shares the one instance anyway).
  void* handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    *why = std::string(name) + " not found: " + (e ? e : "dlopen failed");
    return nullptr;
  }
  std::unique_ptr<DriverLibrary> lib(new DriverLibrary);
  lib->handle_ = handle;
  DriverApi& a = lib->api_;
  const bool ok =
      resolve(handle, name, "cuInit", a.init, why) &&
      resolve(handle, name, "cuDriverGetVersion", a.driver_get_version, why) &&
      resolve(handle, name, "cuDeviceGetCount", a.device_get_count, why) &&
      resolve(handle, name, "cuDeviceGet", a.device_get, why) &&
      resolve(handle, name, "cuDeviceGetName", a.device_get_name, why) &&
      resolve(handle, name, "cuDevicePrimaryCtxRetain", a.primary_ctx_retain, why) &&
      resolve(handle, name, "cuDevicePrimaryCtxRelease_v2", a.primary_ctx_release, why) &&
      resolve(handle, name, "cuCtxSetCurrent", a.ctx_set_current, why) &&
      resolve(handle, name, "cuCtxPushCurrent_v2", a.ctx_push_current, why) &&
      resolve(handle, name, "cuCtxPopCurrent_v2", a.ctx_pop_current, why) &&
      resolve(handle, name, "cuMemAlloc_v2", a.mem_alloc, why) &&
      resolve(handle, name, "cuMemFree_v2", a.mem_free, why) &&
      resolve(handle, name, "cuMemAllocHost_v2", a.mem_alloc_host, why) &&
      resolve(handle, name, "cuMemFreeHost", a.mem_free_host, why) &&
      resolve(handle, name, "cuMemcpyHtoDAsync_v2", a.memcpy_htod_async, why) &&
      resolve(handle, name, "cuMemcpyDtoH_v2", a.memcpy_dtoh, why) &&
      resolve(handle, name, "cuMemcpyDtoDAsync_v2", a.memcpy_dtod_async, why) &&
      resolve(handle, name, "cuStreamCreate", a.stream_create, why) &&
      resolve(handle, name, "cuStreamDestroy_v2", a.stream_destroy, why) &&
      resolve(handle, name, "cuStreamSynchronize", a.stream_synchronize, why) &&
      resolve(handle, name, "cuStreamWaitEvent", a.stream_wait_event, why) &&
      resolve(handle, name, "cuEventCreate", a.event_create, why) &&
      resolve(handle, name, "cuEventRecord", a.event_record, why) &&
      resolve(handle, name, "cuEventSynchronize", a.event_synchronize, why) &&
      resolve(handle, name, "cuEventDestroy_v2", a.event_destroy, why) &&
      resolve(handle, name, "cuModuleLoadData", a.module_load_data, why) &&
      resolve(handle, name, "cuModuleUnload", a.module_unload, why) &&
      resolve(handle, name, "cuModuleGetFunction", a.module_get_function, why) &&
      resolve(handle, name, "cuLaunchKernel", a.launch_kernel, why) &&
      resolve(handle, name, "cuGetErrorName", a.get_error_name, why) &&
      resolve(handle, name, "cuGetErrorString", a.get_error_string, why);
  if (!ok) return nullptr;  // the destructor closes the handle
  return lib;
}

DriverLibrary::~DriverLibrary() {
  if (handle_) ::dlclose(handle_);
}

std::string cuda_error_text(const DriverApi& api, drv::CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name(result, &name) != drv::CUDA_SUCCESS || !name)
    return "CUDA error " + std::to_string(result);
  std::string s = name;
  if (api.get_error_string(result, &text) == drv::CUDA_SUCCESS && text) s += std::string(" (") + text + ")";
  return s;
}

void check(const DriverApi& api, drv::CUresult result, const char* call, const std::string& path) {
  if (result == drv::CUDA_SUCCESS) return;
  const ErrorCode code = result == drv::CUDA_ERROR_OUT_OF_MEMORY ? ErrorCode::limit : ErrorCode::io;
  throw Error(code, path, call, cuda_error_text(api, result));
}

const DriverApi* driver() noexcept { return detail::process_driver(); }

}  // namespace voxpipe::cuda
