// The device end of the staging pipeline (staging.hpp): pinned staging buffers, each chunk
// copied with cuMemcpyHtoDAsync into a per-slot device staging area and converted there by a
// kernel (kernels.cu) that writes the final dtype at the chunk's element offset of the output,
// on one of several streams; a CUDA event recorded after the kernel tells when the slot's host
// and device buffers may be reused. Where no conversion is needed (a raw copy in native byte
// order) the chunk is copied straight to its place in the output. Needs a GPU:
// cuda_status().available. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
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
  int ordinal() const noexcept { return ordinal_; }

 private:
  const DriverApi& api_;
  int ordinal_ = 0;
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

// What a device keeps between loads: the kernel module, idle pinned host buffers and idle device
// staging areas, with its own retain of the primary context so that none of it outlives the
// context (and the context is not destroyed and created again between loads). Loading the
// module and pinning memory cost milliseconds each time (pinning a ring of 64 MiB takes longer
// than copying it over PCIe), more than a small file's transfer: with these pools only the
// first load of a process pays them. Idle memory per pool is capped at the larger of
// kPoolBytes and the most bytes of that pool ever in use at once (a returned buffer beyond the
// cap is freed): so loads running side by side (load_many's file workers, one ring each) find
// their rings again next time, however many there are, and sequential loads keep at most
// kPoolBytes. empty_device_caches() frees everything. Thread-safe. The methods that call the
// driver need the context current.
class DeviceResources {
 public:
  static constexpr std::size_t kPoolBytes = std::size_t(256) << 20;

  // The resources of ctx's device on ctx's driver, made on first use.
  static std::shared_ptr<DeviceResources> of(const PrimaryContext& ctx);
  explicit DeviceResources(const PrimaryContext& ctx);  // of() is the way in
  ~DeviceResources();
  DeviceResources(const DeviceResources&) = delete;
  DeviceResources& operator=(const DeviceResources&) = delete;

  // The conversion kernel for `kind` (loads the module on first use).
  drv::CUfunction kernel(ElementKind kind);
  // Pinned host memory of at least `bytes`, from the pool or cuMemAllocHost; back with
  // give_pinned(p, bytes) (the same `bytes`).
  std::byte* take_pinned(std::size_t bytes);
  void give_pinned(std::byte* p, std::size_t bytes) noexcept;
  // Device memory of at least `bytes`, from the pool or cuMemAlloc; back with give_device.
  drv::CUdeviceptr take_device(std::size_t bytes);
  void give_device(drv::CUdeviceptr p, std::size_t bytes) noexcept;

  // Idle bytes in the pools (tests).
  std::size_t idle_pinned_bytes() const;
  std::size_t idle_device_bytes() const;

 private:
  template <typename T>
  struct Pool {
    std::vector<std::pair<T, std::size_t>> idle;  // (memory, its size)
    std::size_t bytes = 0;       // idle
    std::size_t in_use = 0;      // taken and not given back
    std::size_t high_water = 0;  // the most in use at once
  };
  template <typename T>
  void note_taken(Pool<T>& pool, std::size_t bytes);
  template <typename T>
  bool take_from(Pool<T>& pool, std::size_t bytes, T& out);
  template <typename T>
  bool give_to(Pool<T>& pool, T p, std::size_t bytes) noexcept;

  std::unique_ptr<PrimaryContext> ctx_;  // this object's own retain
  mutable std::mutex mutex_;
  drv::CUmodule module_ = nullptr;
  drv::CUfunction kernels_[3] = {};
  Pool<std::byte*> pinned_;
  Pool<drv::CUdeviceptr> device_;
};

// Drops every device's DeviceResources (see voxpipe::cuda_empty_cache); loads in flight keep
// theirs until they end.
void empty_device_caches() noexcept;

class DeviceConvertSink final : public StagingSink {
 public:
  // Converts into `dst`, device memory of `dst_bytes` in `ctx` (which must outlive the sink),
  // using `streams` (>= 2) streams. `op` must pass element_op_problem. The kernel, pinned
  // buffers and staging areas come from the device's DeviceResources; Error(unsupported) when
  // the kernels were not built.
  DeviceConvertSink(const PrimaryContext& ctx, const ElementOp& op, drv::CUdeviceptr dst,
                    std::uint64_t dst_bytes, unsigned streams = 2);

  // Device-resident buffers, for a source that writes device memory itself (cuFile): the ring's
  // buffers are device staging areas instead of pinned host memory (the "pointers" stage()
  // passes around are device addresses: only the source and this sink touch them), and a chunk
  // goes from its buffer to the kernel, or straight to the output with a device-to-device
  // copy, without crossing PCIe again. Each buffer has kDirectSlack bytes around it, and its
  // address is `skew` bytes past a kDirectAlign boundary, so that a source reading
  // kDirectAlign-aligned file windows (payload at a file offset of `skew` modulo kDirectAlign)
  // can read whole aligned blocks into aligned device memory around the chunk. Call before
  // stage().
  static constexpr std::size_t kDirectAlign = 4096;
  static constexpr std::size_t kDirectSlack = 4 * kDirectAlign;
  void use_device_buffers(std::size_t skew);
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
  std::shared_ptr<DeviceResources> resources_;
  drv::CUfunction kernel_ = nullptr;
  std::vector<drv::CUstream> streams_;
  std::vector<drv::CUevent> events_;         // one per slot, recorded after its last use
  std::vector<drv::CUdeviceptr> staging_;    // one device staging area per slot (not if direct_)
  std::size_t staging_bytes_ = 0;
  std::vector<std::pair<std::byte*, std::size_t>> pinned_;  // allocate_buffer's, with sizes
  bool device_buffers_ = false;  // use_device_buffers
  std::size_t skew_ = 0;
  struct DeviceRing {
    std::byte* handed;  // what allocate_buffer returned
    drv::CUdeviceptr base;
    std::size_t bytes;
  };
  std::vector<DeviceRing> device_ring_;
};

}  // namespace voxpipe::cuda
