#include "cuda/device_sink.hpp"

#include <algorithm>
#include <map>
#include <tuple>

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

PrimaryContext::PrimaryContext(const DriverApi& api, int ordinal) : api_(api), ordinal_(ordinal) {
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

namespace {

// Every device's resources, by driver and ordinal. Never destroyed: at exit the driver may
// already be unusable, and the process's end frees everything anyway.
struct ResourceMap {
  std::mutex mutex;
  std::map<std::pair<const DriverApi*, int>, std::shared_ptr<DeviceResources>> map;
};
ResourceMap& resource_map() {
  static ResourceMap* m = new ResourceMap;
  return *m;
}

int kind_index(ElementKind kind) { return static_cast<int>(kind); }

}  // namespace

std::shared_ptr<DeviceResources> DeviceResources::of(const PrimaryContext& ctx) {
  ResourceMap& m = resource_map();
  std::lock_guard lock(m.mutex);
  auto& r = m.map[{&ctx.api(), ctx.ordinal()}];
  if (!r) r = std::make_shared<DeviceResources>(ctx);
  return r;
}

DeviceResources::DeviceResources(const PrimaryContext& ctx)
    : ctx_(std::make_unique<PrimaryContext>(ctx.api(), ctx.ordinal())) {}

DeviceResources::~DeviceResources() {
  const DriverApi& api = ctx_->api();
  const bool pushed = api.ctx_push_current(ctx_->get()) == drv::CUDA_SUCCESS;
  for (auto& [p, bytes] : pinned_.idle) api.mem_free_host(p);
  for (auto& [p, bytes] : device_.idle) api.mem_free(p);
  if (module_) api.module_unload(module_);
  drv::CUcontext popped = nullptr;
  if (pushed) api.ctx_pop_current(&popped);
}  // then ctx_ releases this object's retain

drv::CUfunction DeviceResources::kernel(ElementKind kind) {
  std::lock_guard lock(mutex_);
  const DriverApi& api = ctx_->api();
  if (!module_) check(api, api.module_load_data(&module_, kernel_fatbin().data()), "cuModuleLoadData");
  drv::CUfunction& f = kernels_[kind_index(kind)];
  if (!f) check(api, api.module_get_function(&f, module_, kernel_name(kind)), "cuModuleGetFunction");
  return f;
}

// The smallest idle entry of at least `bytes` and at most twice that (a larger one would hold
// memory the caller does not use), taken out of the pool; false when there is none.
template <typename T>
bool DeviceResources::take_from(Pool<T>& pool, std::size_t bytes, T& out) {
  std::lock_guard lock(mutex_);
  auto best = pool.idle.end();
  for (auto it = pool.idle.begin(); it != pool.idle.end(); ++it)
    if (it->second >= bytes && it->second / 2 <= bytes &&
        (best == pool.idle.end() || it->second < best->second))
      best = it;
  if (best == pool.idle.end()) return false;
  out = best->first;
  pool.bytes -= best->second;
  pool.idle.erase(best);
  return true;
}

template <typename T>
void DeviceResources::note_taken(Pool<T>& pool, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  pool.in_use += bytes;
  pool.high_water = std::max(pool.high_water, pool.in_use);
}

// Keeps `p` in the pool when that stays within the cap (the larger of kPoolBytes and the most
// ever in use at once); false when the caller must free it.
template <typename T>
bool DeviceResources::give_to(Pool<T>& pool, T p, std::size_t bytes) noexcept {
  std::lock_guard lock(mutex_);
  pool.in_use -= std::min(pool.in_use, bytes);
  if (pool.bytes + bytes > std::max(kPoolBytes, pool.high_water)) return false;
  try {
    pool.idle.emplace_back(p, bytes);
  } catch (...) {  // no memory to note it down: freed instead
    return false;
  }
  pool.bytes += bytes;
  return true;
}

std::byte* DeviceResources::take_pinned(std::size_t bytes) {
  std::byte* p = nullptr;
  if (!take_from(pinned_, bytes, p)) {
    void* fresh = nullptr;
    check(ctx_->api(), ctx_->api().mem_alloc_host(&fresh, bytes), "cuMemAllocHost_v2");
    p = static_cast<std::byte*>(fresh);
  }
  note_taken(pinned_, bytes);
  return p;
}

void DeviceResources::give_pinned(std::byte* p, std::size_t bytes) noexcept {
  if (p && !give_to(pinned_, p, bytes)) ctx_->api().mem_free_host(p);
}

drv::CUdeviceptr DeviceResources::take_device(std::size_t bytes) {
  drv::CUdeviceptr p = 0;
  if (!take_from(device_, bytes, p)) check(ctx_->api(), ctx_->api().mem_alloc(&p, bytes), "cuMemAlloc_v2");
  note_taken(device_, bytes);
  return p;
}

void DeviceResources::give_device(drv::CUdeviceptr p, std::size_t bytes) noexcept {
  if (p && !give_to(device_, p, bytes)) ctx_->api().mem_free(p);
}

std::size_t DeviceResources::idle_pinned_bytes() const {
  std::lock_guard lock(mutex_);
  return pinned_.bytes;
}

std::size_t DeviceResources::idle_device_bytes() const {
  std::lock_guard lock(mutex_);
  return device_.bytes;
}

void empty_device_caches() noexcept {
  ResourceMap& m = resource_map();
  decltype(m.map) dropped;
  {
    std::lock_guard lock(m.mutex);
    dropped.swap(m.map);
  }
  // Destroyed here, outside the lock (each frees its pools with its context current), or by
  // the last load still holding one.
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
    resources_ = DeviceResources::of(ctx_);
    if (!direct_) kernel_ = resources_->kernel(op.kind);
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
    if (p) resources_->give_device(p, staging_bytes_);
  staging_.clear();
  for (auto s : streams_)
    if (s) api_.stream_destroy(s);
  streams_.clear();
}

void DeviceConvertSink::use_device_buffers(std::size_t skew) {
  device_buffers_ = true;
  skew_ = skew % kDirectAlign;
}

void DeviceConvertSink::begin(unsigned slots, std::size_t chunk_bytes) {
  ScopedContext scope(ctx_);
  events_.resize(slots, nullptr);
  for (auto& e : events_) check(api_, api_.event_create(&e, drv::CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  if (!direct_ && !device_buffers_) {
    staging_bytes_ = chunk_bytes;
    staging_.resize(slots, 0);
    for (auto& p : staging_) p = resources_->take_device(chunk_bytes);
  }
}

// stage() calls allocate_buffer and free_buffer on its calling thread only, so pinned_ needs no
// lock.
std::byte* DeviceConvertSink::allocate_buffer(std::size_t bytes) {
  ScopedContext scope(ctx_);
  if (device_buffers_) {
    // [base, base + bytes + slack): one aligned block of room before the aligned start, the
    // chunk at `skew_` past it, room after it for the end of its last aligned block.
    device_ring_.reserve(device_ring_.size() + 1);
    const std::size_t total = bytes + kDirectSlack;
    const drv::CUdeviceptr base = resources_->take_device(total);
    const drv::CUdeviceptr aligned = (base + kDirectAlign - 1) / kDirectAlign * kDirectAlign + kDirectAlign;
    auto* handed = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(aligned + skew_));
    device_ring_.push_back({handed, base, total});
    return handed;
  }
  pinned_.reserve(pinned_.size() + 1);  // before taking: the push below cannot throw
  std::byte* p = resources_->take_pinned(bytes);
  pinned_.emplace_back(p, bytes);
  return p;
}

void DeviceConvertSink::free_buffer(std::byte* p) noexcept {
  if (!p) return;
  if (device_buffers_) {
    const auto it = std::find_if(device_ring_.begin(), device_ring_.end(), [p](const auto& e) { return e.handed == p; });
    if (it == device_ring_.end()) return;
    const DeviceRing r = *it;
    device_ring_.erase(it);
    const bool pushed = api_.ctx_push_current(ctx_.get()) == drv::CUDA_SUCCESS;
    resources_->give_device(r.base, r.bytes);
    drv::CUcontext popped = nullptr;
    if (pushed) api_.ctx_pop_current(&popped);
    return;
  }
  const auto it = std::find_if(pinned_.begin(), pinned_.end(), [p](const auto& e) { return e.first == p; });
  if (it == pinned_.end()) return;
  const std::size_t bytes = it->second;
  pinned_.erase(it);
  const bool pushed = api_.ctx_push_current(ctx_.get()) == drv::CUDA_SUCCESS;
  resources_->give_pinned(p, bytes);
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
  const auto device_in = static_cast<drv::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(chunk.data.data()));
  if (direct_ && device_buffers_) {
    check(api_, api_.memcpy_dtod_async(out, device_in, chunk.data.size(), stream), "cuMemcpyDtoDAsync_v2");
  } else if (direct_) {
    check(api_, api_.memcpy_htod_async(out, chunk.data.data(), chunk.data.size(), stream), "cuMemcpyHtoDAsync_v2");
  } else {
    drv::CUdeviceptr in = device_buffers_ ? device_in : staging_[chunk.slot];
    if (!device_buffers_)
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
