// The public device API (voxpipe/device.hpp) on top of the internal device layer: a retained
// primary context shared per device, device buffers in it, and the loads of load.hpp.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/checked.hpp"
#include "cuda/device_sink.hpp"
#include "cuda/load.hpp"
#include "voxpipe/device.hpp"
#include "voxpipe/error.hpp"
#include "voxpipe/threads.hpp"

namespace voxpipe {

namespace {

// One retained primary context per device, shared by the memory allocated on it and released
// with the last of them.
std::shared_ptr<cuda::PrimaryContext> primary_context(int ordinal) {
  static std::mutex mutex;
  static std::map<int, std::weak_ptr<cuda::PrimaryContext>> contexts;
  std::lock_guard lock(mutex);
  std::shared_ptr<cuda::PrimaryContext> ctx = contexts[ordinal].lock();
  if (!ctx) {
    ctx = std::make_shared<cuda::PrimaryContext>(ordinal);
    contexts[ordinal] = ctx;
  }
  return ctx;
}

void check_range(std::size_t size, std::uint64_t offset, std::uint64_t bytes, const char* what) {
  if (offset > size || bytes > size - offset)
    throw Error(ErrorCode::invalid_argument, "", what,
                "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                    ") are outside the " + std::to_string(size) + " bytes of the memory");
}

std::uint64_t product(std::uint64_t a, std::uint64_t b, const std::string& path, const char* field) {
  const auto r = core::checked_mul(a, b);
  if (!r) throw Error(ErrorCode::limit, path, field, "the data size overflows 64 bits");
  return *r;
}

}  // namespace

struct DeviceMemory::Impl {
  int ordinal = 0;
  // Declared before the buffer, so destroyed after it: cuMemFree runs with the context current.
  std::shared_ptr<cuda::PrimaryContext> ctx;
  std::unique_ptr<cuda::DeviceBuffer> buffer;
};

DeviceMemory::DeviceMemory(int ordinal, std::size_t bytes) : impl_(std::make_unique<Impl>()) {
  impl_->ordinal = ordinal;
  impl_->ctx = primary_context(ordinal);  // Error(unsupported) with the status reason
  impl_->buffer = std::make_unique<cuda::DeviceBuffer>(*impl_->ctx, bytes);
}

DeviceMemory::~DeviceMemory() {
  if (impl_) impl_->buffer.reset();  // before the context
}

DeviceMemory::DeviceMemory(DeviceMemory&&) noexcept = default;

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->buffer.reset();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

std::uintptr_t DeviceMemory::address() const noexcept {
  return impl_ ? static_cast<std::uintptr_t>(impl_->buffer->get()) : 0;
}

std::size_t DeviceMemory::size() const noexcept { return impl_ ? impl_->buffer->size() : 0; }

int DeviceMemory::device() const noexcept { return impl_ ? impl_->ordinal : 0; }

void DeviceMemory::copy_from_host(std::size_t offset, std::span<const std::byte> src) {
  check_range(size(), offset, src.size(), "copy");
  if (src.empty()) return;
  cuda::copy_to_device(src, *impl_->ctx, impl_->buffer->get() + offset);
}

void DeviceMemory::copy_to_host(std::size_t offset, std::span<std::byte> dst) const {
  check_range(size(), offset, dst.size(), "copy");
  if (dst.empty()) return;
  cuda::copy_to_host(*impl_->ctx, impl_->buffer->get() + offset, dst);
}

void read_nifti_data_to_device(const NiftiImage& image, const OutputSpec& spec, DeviceMemory& dst,
                               std::size_t offset, unsigned threads, const DataSourceOptions& source) {
  std::uint64_t bytes = dtype_size(spec.type);
  for (auto d : image.shape) bytes = product(bytes, static_cast<std::uint64_t>(d), image.header_path, "dim");
  check_range(dst.size(), offset, bytes, "destination");
  if (!dst.impl_) throw Error(ErrorCode::invalid_argument, "", "destination", "the device memory was moved from");
  cuda::StagingOptions options;
  options.decode_threads = resolve_threads(threads);
  options.readers = std::min(options.readers, options.decode_threads);
  cuda::load_nifti_to_device(image, spec, *dst.impl_->ctx, dst.impl_->buffer->get() + offset, bytes,
                             options, source);
}

void cuda_empty_cache() noexcept { cuda::empty_device_caches(); }

CufileStatus cufile_status(int ordinal) {
  CufileStatus st;
  switch (cuda::cufile_policy_from_env()) {
    case cuda::CufilePolicy::automatic: st.policy = "auto"; break;
    case cuda::CufilePolicy::on: st.policy = "on"; break;
    case cuda::CufilePolicy::off: st.policy = "off"; break;
  }
  const std::shared_ptr<cuda::PrimaryContext> ctx = primary_context(ordinal);
  if (!cuda_status().cufile_available) {
    st.library = cuda::cufile_library_name();
    st.reason = cuda_status().cufile_reason;
    return st;
  }
  const cuda::CufileDriver& d = cuda::process_cufile(*ctx);
  st.usable = d.usable;
  st.gds = d.gds;
  st.library = d.library;
  st.reason = d.reason;
  return st;
}

void read_dicom_series_to_device(const DicomSeries& series, DType out_type, DeviceMemory& dst,
                                 std::size_t offset, unsigned threads) {
  std::uint64_t bytes = dtype_size(out_type);
  for (auto d : series.shape()) bytes = product(bytes, d, "", "shape");
  check_range(dst.size(), offset, bytes, "destination");
  if (!dst.impl_) throw Error(ErrorCode::invalid_argument, "", "destination", "the device memory was moved from");
  cuda::load_dicom_series_to_device(series, out_type, *dst.impl_->ctx,
                                    dst.impl_->buffer->get() + offset, bytes,
                                    resolve_threads(threads));
}

}  // namespace voxpipe
