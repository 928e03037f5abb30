// The device end of the staging pipeline (staging.hpp): pinned staging buffers, each chunk
// copied with cuMemcpyHtoDAsync into a per-slot device staging area and converted there by a
// kernel (kernels.cu) that writes the final dtype at the chunk's element offset of the output,
// on one of several streams; a CUDA event recorded after the kernel tells when the slot's host
// and device buffers may be reused. Where no conversion is needed (a raw copy in native byte
// order) the chunk is copied straight to its place in the output. Needs a GPU:
// cuda_status().available. Internal.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/convert_element.hpp"
#include "cuda/driver.hpp"
#include "cuda/staging.hpp"

namespace voxpipe::cuda {

// The driver, or Error(unsupported) carrying cuda_status().reason.
const DriverApi& require_driver();

// A retained primary context of a device, released on destruction. Everything below uses the
// driver of its context.
class PrimaryContext {
 public:
  // On the process's driver (require_driver()).
  explicit PrimaryContext(int ordinal);
  // On `api`, which must outlive the context (tests pass a stand-in driver).
  PrimaryContext(const DriverApi& api, int ordinal);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  drv::CUcontext get() const noexcept { return ctx_; }
  const DriverApi& api() const noexcept { return api_; }

 private:
  const DriverApi& api_;
  drv::CUdevice device_ = 0;
  drv::CUcontext ctx_ = nullptr;
};

// Makes a context current on this thread for the scope (push/pop, so the caller's current
// context, e.g. PyTorch's, is restored).
class ScopedContext {
 public:
  explicit ScopedContext(const PrimaryContext& ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const DriverApi& api_;
};

// Device memory from cuMemAlloc in `ctx`, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(const PrimaryContext& ctx, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  drv::CUdeviceptr get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  const PrimaryContext& ctx_;
  drv::CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

class DeviceConvertSink final : public StagingSink {
 public:
  // Converts into `dst`, device memory of `dst_bytes` in `ctx` (which must outlive the sink),
  // using `streams` (>= 2) streams. `op` must pass element_op_problem. Loads the kernels
  // (cuModuleLoadData of the embedded fatbin); Error(unsupported) when they were not built.
  DeviceConvertSink(const PrimaryContext& ctx, const ElementOp& op, drv::CUdeviceptr dst,
                    std::uint64_t dst_bytes, unsigned streams = 2);
  ~DeviceConvertSink() override;

  void begin(unsigned slots, std::size_t chunk_bytes) override;
  std::byte* allocate_buffer(std::size_t bytes) override;
  void free_buffer(std::byte* p) noexcept override;
  void attach_thread() override;
  void detach_thread() noexcept override;
  void consume(const StagedChunk& chunk) override;
  void release(unsigned slot) override;
  void finish() override;
  void abandon() noexcept override;

 private:
  void destroy() noexcept;

  const DriverApi& api_;
  const PrimaryContext& ctx_;
  ElementOp op_;
  drv::CUdeviceptr dst_;
  std::uint64_t dst_bytes_;
  bool direct_;  // no conversion: copy straight to the output
  drv::CUmodule module_ = nullptr;
  drv::CUfunction kernel_ = nullptr;
  std::vector<drv::CUstream> streams_;
  std::vector<drv::CUevent> events_;         // one per slot, recorded after its last use
  std::vector<drv::CUdeviceptr> staging_;    // one device staging area per slot (not if direct_)
};

}  // namespace voxpipe::cuda
