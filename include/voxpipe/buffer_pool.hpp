// Recycled output buffers. A loader that streams thousands of volumes would otherwise allocate a
// new output for each and pay to fault every page of it in: on the VMs we measure, first touch
// of a 44 MiB float32 volume costs as much CPU as inflating it. The pool keeps buffers its users
// have released and hands them out again, already faulted in.
//
// A buffer is released only by its owner (in Python: when the last array over it is freed), so
// a buffer is never handed out while anything still references it. The pool holds at most
// `limit` bytes of released buffers; a release beyond that frees the least recently released
// buffers first. Large fresh buffers are mapped 2 MiB-aligned with MADV_HUGEPAGE, so that where
// the kernel offers transparent huge pages one fault maps 2 MiB instead of 4 KiB.
//
// Thread-safe; fork-safe (the lock is held across fork, so a child never inherits it locked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace voxpipe {

struct BufferPoolStats {
  std::size_t limit = 0;          // most bytes of released buffers kept
  std::size_t pooled_bytes = 0;   // bytes of released buffers kept now
  std::size_t pooled_buffers = 0;
  std::uint64_t reused = 0;       // acquires served from the pool
  std::uint64_t allocated = 0;    // acquires that mapped a new buffer
};

class BufferPool {
 public:
  struct Block {
    std::byte* data = nullptr;
    std::size_t capacity = 0;  // bytes mapped (>= the size asked for)
  };

  // The process's pool: its limit comes from VOXPIPE_POOL_BYTES (bytes; suffixes K, M, G), else
  // kDefaultLimit. Never destroyed, so buffers released during exit still find it.
  static BufferPool& instance();

  static constexpr std::size_t kDefaultLimit = std::size_t{512} << 20;

  explicit BufferPool(std::size_t limit) noexcept : limit_(limit) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `size` bytes (page-aligned; its contents are whatever the last user
  // left). A released buffer is reused when its capacity is within an eighth (plus 2 MiB) of
  // `size`, so a small request never pins a large buffer. std::bad_alloc when the mapping fails.
  Block acquire(std::size_t size);

  // Gives a block back; kept for reuse when it fits in the limit, otherwise unmapped (with the
  // oldest kept blocks, until it fits). Never throws.
  void release(Block block) noexcept;

  // Sets the limit (0 keeps nothing) and frees what no longer fits; returns the previous limit.
  std::size_t set_limit(std::size_t limit) noexcept;

  // Frees every kept block.
  void clear() noexcept { set_limit(set_limit(0)); }

  BufferPoolStats stats() const noexcept;

 private:
  void trim_locked(std::size_t limit, std::vector<Block>& dropped) noexcept;

  mutable std::mutex mutex_;
  std::size_t limit_;
  std::size_t pooled_bytes_ = 0;
  std::uint64_t reused_ = 0;
  std::uint64_t allocated_ = 0;
  std::vector<Block> free_;  // least recently released first
};

// The mapping helpers the pool uses, for tests: maps `size` bytes (rounded up to pages; 2 MiB
// aligned with huge-page advice when size >= 4 MiB) / unmaps what map_buffer returned.
BufferPool::Block map_buffer(std::size_t size);
void unmap_buffer(BufferPool::Block block) noexcept;

}  // namespace voxpipe
