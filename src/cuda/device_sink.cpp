#include "cuda/device_sink.hpp"

#include <algorithm>

#include "cuda/element_op.hpp"
#include "cuda/fatbin.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::cuda {

namespace {

// 256 threads per block; at most 8192 blocks (2M threads, enough to fill an H200's 132 SMs many
// times over), each thread looping over the rest: the kernels are bound by memory bandwidth.
constexpr unsigned kBlock = 256;
constexpr std::uint64_t kMaxBlocks = 8192;

const char* kernel_name(ElementKind kind) {
  switch (kind) {
    case ElementKind::raw: return kConvertRawKernel;
    case ElementKind::nifti: return kConvertNiftiKernel;
    case ElementKind::dicom: return kConvertDicomKernel;
  }
  return kConvertRawKernel;
}

}  // namespace

const DriverApi& require_driver() {
  const CudaStatus& st = cuda_status();
  const DriverApi* api = driver();
  if (!st.available || !api) throw Error(ErrorCode::unsupported, "", "device", "CUDA is not available: " + st.reason);
  return *api;
}

PrimaryContext::PrimaryContext(int ordinal) : PrimaryContext(require_driver(), ordinal) {}

PrimaryContext::PrimaryContext(const DriverApi& api, int ordinal) : api_(api) {
  check(api_, api_.device_get(&device_, ordinal), "cuDeviceGet");
  check(api_, api_.primary_ctx_retain(&ctx_, device_), "cuDevicePrimaryCtxRetain");
}

PrimaryContext::~PrimaryContext() { api_.primary_ctx_release(device_); }

ScopedContext::ScopedContext(const PrimaryContext& ctx) : api_(ctx.api()) {
  check(api_, api_.ctx_push_current(ctx.get()), "cuCtxPushCurrent_v2");
}

ScopedContext::~ScopedContext() {
  drv::CUcontext popped = nullptr;
  api_.ctx_pop_current(&popped);
}

DeviceBuffer::DeviceBuffer(const PrimaryContext& ctx, std::size_t bytes) : ctx_(ctx), bytes_(bytes) {
  ScopedContext scope(ctx_);
  if (bytes) check(ctx_.api(), ctx_.api().mem_alloc(&ptr_, bytes), "cuMemAlloc_v2");
}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_) return;
  const DriverApi& api = ctx_.api();
  const bool pushed = api.ctx_push_current(ctx_.get()) == drv::CUDA_SUCCESS;
  api.mem_free(ptr_);
  drv::CUcontext popped = nullptr;
  if (pushed) api.ctx_pop_current(&popped);
}

DeviceConvertSink::DeviceConvertSink(const PrimaryContext& ctx, const ElementOp& op,
                                     drv::CUdeviceptr dst, std::uint64_t dst_bytes,
                                     unsigned streams)
    : api_(ctx.api()), ctx_(ctx), op_(op), dst_(dst), dst_bytes_(dst_bytes),
      direct_(op.kind == ElementKind::raw && !op.swap) {
  if (const char* why = element_op_problem(op))
    throw Error(ErrorCode::invalid_argument, "", "conversion", why);
  if (kernel_fatbin().empty())
    throw Error(ErrorCode::unsupported, "", "device", "the library was built without CUDA kernels");
  ScopedContext scope(ctx_);
  try {
    check(api_, api_.module_load_data(&module_, kernel_fatbin().data()), "cuModuleLoadData");
    check(api_, api_.module_get_function(&kernel_, module_, kernel_name(op.kind)), "cuModuleGetFunction");
    streams_.resize(std::max(streams, 2u), nullptr);
    for (auto& s : streams_) check(api_, api_.stream_create(&s, drv::CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  } catch (...) {
    destroy();
    throw;
  }
}

DeviceConvertSink::~DeviceConvertSink() {
  const bool pushed = api_.ctx_push_current(ctx_.get()) == drv::CUDA_SUCCESS;
  abandon();
  destroy();
  drv::CUcontext popped = nullptr;
  if (pushed) api_.ctx_pop_current(&popped);
}

// Frees what exists; the context must be current.
void DeviceConvertSink::destroy() noexcept {
  for (auto e : events_)
    if (e) api_.event_destroy(e);
  events_.clear();
  for (auto p : staging_)
    if (p) api_.mem_free(p);
  staging_.clear();
  for (auto s : streams_)
    if (s) api_.stream_destroy(s);
  streams_.clear();
  if (module_) api_.module_unload(module_);
  module_ = nullptr;
}

void DeviceConvertSink::begin(unsigned slots, std::size_t chunk_bytes) {
  ScopedContext scope(ctx_);
  events_.resize(slots, nullptr);
  for (auto& e : events_) check(api_, api_.event_create(&e, drv::CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  if (!direct_) {
    staging_.resize(slots, 0);
    for (auto& p : staging_) check(api_, api_.mem_alloc(&p, chunk_bytes), "cuMemAlloc_v2");
  }
}

std::byte* DeviceConvertSink::allocate_buffer(std::size_t bytes) {
  ScopedContext scope(ctx_);
  void* p = nullptr;
  check(api_, api_.mem_alloc_host(&p, bytes), "cuMemAllocHost_v2");
  return static_cast<std::byte*>(p);
}

void DeviceConvertSink::free_buffer(std::byte* p) noexcept {
  if (!p) return;
  const bool pushed = api_.ctx_push_current(ctx_.get()) == drv::CUDA_SUCCESS;
  api_.mem_free_host(p);
  drv::CUcontext popped = nullptr;
  if (pushed) api_.ctx_pop_current(&popped);
}

void DeviceConvertSink::attach_thread() { check(api_, api_.ctx_push_current(ctx_.get()), "cuCtxPushCurrent_v2"); }

void DeviceConvertSink::detach_thread() noexcept {
  drv::CUcontext popped = nullptr;
  api_.ctx_pop_current(&popped);
}

void DeviceConvertSink::consume(const StagedChunk& chunk) {
  const std::uint64_t in_size = element::size_of(op_.source), out_size = element::size_of(op_.dest);
  std::uint64_t first = chunk.offset / in_size, n = chunk.data.size() / in_size;
  if ((first + n) * out_size > dst_bytes_)
    throw Error(ErrorCode::invalid_argument, "", "output",
                "expected room for " + std::to_string(first + n) + " elements, but it holds " +
                    std::to_string(dst_bytes_ / out_size));
  drv::CUstream stream = streams_[chunk.index % streams_.size()];
  drv::CUdeviceptr out = dst_ + first * out_size;
  if (direct_) {
    check(api_, api_.memcpy_htod_async(out, chunk.data.data(), chunk.data.size(), stream), "cuMemcpyHtoDAsync_v2");
  } else {
    drv::CUdeviceptr in = staging_[chunk.slot];
    check(api_, api_.memcpy_htod_async(in, chunk.data.data(), chunk.data.size(), stream), "cuMemcpyHtoDAsync_v2");
    const unsigned blocks = static_cast<unsigned>(std::min<std::uint64_t>((n + kBlock - 1) / kBlock, kMaxBlocks));
    void* params[] = {&op_, &in, &out, &n};
    check(api_, api_.launch_kernel(kernel_, blocks, 1, 1, kBlock, 1, 1, 0, stream, params, nullptr), "cuLaunchKernel");
  }
  check(api_, api_.event_record(events_[chunk.slot], stream), "cuEventRecord");
}

void DeviceConvertSink::release(unsigned slot) {
  check(api_, api_.event_synchronize(events_[slot]), "cuEventSynchronize");
}

void DeviceConvertSink::finish() {
  for (auto s : streams_) check(api_, api_.stream_synchronize(s), "cuStreamSynchronize");
}

void DeviceConvertSink::abandon() noexcept {
  for (auto s : streams_) api_.stream_synchronize(s);
}

}  // namespace voxpipe::cuda
