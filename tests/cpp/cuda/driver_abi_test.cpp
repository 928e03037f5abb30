// The driver shim's own declarations (src/cuda/driver.hpp) against the toolkit's cuda.h: every
// entry point it resolves must have cuda.h's signature, every constant cuda.h's value. Compiled
// only where the toolkit's headers are found (tests/CMakeLists.txt); the checks are at compile
// time, the test only records that they ran.
#include <cuda.h>
#include <gtest/gtest.h>

#include <type_traits>

#include "cuda/driver.hpp"

namespace {

namespace drv = voxpipe::cuda::drv;

// Maps a cuda.h type to the shim's: the opaque handle structs and CUresult; pointers,
// const and function pointers recursively; everything else (int, size_t, void) unchanged.
template <class T> struct Map { using type = T; };
template <class T> using Mapped = typename Map<T>::type;
template <class T> struct Map<T*> { using type = Mapped<T>*; };
template <class T> struct Map<const T> { using type = const Mapped<T>; };
template <> struct Map<CUresult> { using type = drv::CUresult; };
template <> struct Map<CUctx_st> { using type = drv::CUctx_st; };
template <> struct Map<CUmod_st> { using type = drv::CUmod_st; };
template <> struct Map<CUfunc_st> { using type = drv::CUfunc_st; };
template <> struct Map<CUstream_st> { using type = drv::CUstream_st; };
template <> struct Map<CUevent_st> { using type = drv::CUevent_st; };
template <class R, class... A> struct Map<R (*)(A...)> { using type = Mapped<R> (*)(Mapped<A>...); };

template <class Official, class Shim>
constexpr bool same_signature = std::is_same_v<Mapped<Official>, Shim>;

using Api = voxpipe::cuda::DriverApi;
#define VOXPIPE_CHECK_ENTRY(symbol, member)                                             \
  static_assert(same_signature<decltype(&::symbol), decltype(Api::member)>,           \
                #symbol " differs from DriverApi::" #member)

VOXPIPE_CHECK_ENTRY(cuInit, init);
VOXPIPE_CHECK_ENTRY(cuDriverGetVersion, driver_get_version);
VOXPIPE_CHECK_ENTRY(cuDeviceGetCount, device_get_count);
VOXPIPE_CHECK_ENTRY(cuDeviceGet, device_get);
VOXPIPE_CHECK_ENTRY(cuDeviceGetName, device_get_name);
VOXPIPE_CHECK_ENTRY(cuDevicePrimaryCtxRetain, primary_ctx_retain);
VOXPIPE_CHECK_ENTRY(cuDevicePrimaryCtxRelease_v2, primary_ctx_release);
VOXPIPE_CHECK_ENTRY(cuCtxSetCurrent, ctx_set_current);
VOXPIPE_CHECK_ENTRY(cuCtxPushCurrent_v2, ctx_push_current);
VOXPIPE_CHECK_ENTRY(cuCtxPopCurrent_v2, ctx_pop_current);
VOXPIPE_CHECK_ENTRY(cuMemAlloc_v2, mem_alloc);
VOXPIPE_CHECK_ENTRY(cuMemFree_v2, mem_free);
VOXPIPE_CHECK_ENTRY(cuMemAllocHost_v2, mem_alloc_host);
VOXPIPE_CHECK_ENTRY(cuMemFreeHost, mem_free_host);
VOXPIPE_CHECK_ENTRY(cuMemcpyHtoDAsync_v2, memcpy_htod_async);
VOXPIPE_CHECK_ENTRY(cuMemcpyDtoH_v2, memcpy_dtoh);
VOXPIPE_CHECK_ENTRY(cuMemcpyDtoDAsync_v2, memcpy_dtod_async);
VOXPIPE_CHECK_ENTRY(cuStreamCreate, stream_create);
VOXPIPE_CHECK_ENTRY(cuStreamDestroy_v2, stream_destroy);
VOXPIPE_CHECK_ENTRY(cuStreamSynchronize, stream_synchronize);
VOXPIPE_CHECK_ENTRY(cuStreamWaitEvent, stream_wait_event);
VOXPIPE_CHECK_ENTRY(cuEventCreate, event_create);
VOXPIPE_CHECK_ENTRY(cuEventRecord, event_record);
VOXPIPE_CHECK_ENTRY(cuEventSynchronize, event_synchronize);
VOXPIPE_CHECK_ENTRY(cuEventDestroy_v2, event_destroy);
VOXPIPE_CHECK_ENTRY(cuModuleLoadData, module_load_data);
VOXPIPE_CHECK_ENTRY(cuModuleUnload, module_unload);
VOXPIPE_CHECK_ENTRY(cuModuleGetFunction, module_get_function);
VOXPIPE_CHECK_ENTRY(cuLaunchKernel, launch_kernel);
VOXPIPE_CHECK_ENTRY(cuGetErrorName, get_error_name);
VOXPIPE_CHECK_ENTRY(cuGetErrorString, get_error_string);

static_assert(sizeof(CUresult) == sizeof(drv::CUresult));
static_assert(std::is_same_v<CUdevice, drv::CUdevice>);
static_assert(std::is_same_v<CUdeviceptr, drv::CUdeviceptr>);
static_assert(CUDA_SUCCESS == drv::CUDA_SUCCESS);
static_assert(CUDA_ERROR_OUT_OF_MEMORY == drv::CUDA_ERROR_OUT_OF_MEMORY);
static_assert(CUDA_ERROR_NOT_READY == drv::CUDA_ERROR_NOT_READY);
static_assert(CU_STREAM_NON_BLOCKING == drv::CU_STREAM_NON_BLOCKING);
static_assert(CU_EVENT_DISABLE_TIMING == drv::CU_EVENT_DISABLE_TIMING);

TEST(CudaDriverAbi, ShimDeclarationsMatchCudaH) { SUCCEED() << "checked at compile time, CUDA " << CUDA_VERSION; }

}  // namespace
