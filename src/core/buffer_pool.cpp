#include "voxpipe/buffer_pool.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <string>

namespace voxpipe {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
// From this size on a buffer is mapped huge-page aligned with MADV_HUGEPAGE (NumPy's own
// threshold for the same advice).
constexpr std::size_t kHugeFrom = std::size_t{4} << 20;

std::size_t page_size() noexcept {
  static const std::size_t size = [] {
    long s = sysconf(_SC_PAGESIZE);
    return s > 0 ? static_cast<std::size_t>(s) : std::size_t{4096};
  }();
  return size;
}

std::size_t round_up(std::size_t n, std::size_t to) noexcept { return (n + to - 1) / to * to; }

// VOXPIPE_POOL_BYTES: a byte count with an optional K, M or G (powers of 1024); anything else
// leaves the default.
std::size_t limit_from_environment() noexcept {
  const char* env = std::getenv("VOXPIPE_POOL_BYTES");
  if (!env || !*env) return BufferPool::kDefaultLimit;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(env, &end, 10);
  if (errno != 0 || end == env) return BufferPool::kDefaultLimit;
  int shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; ++end; break;
    case 'm': case 'M': shift = 20; ++end; break;
    case 'g': case 'G': shift = 30; ++end; break;
    default: break;
  }
  if (*end != '\0' || v > (~0ULL >> shift)) return BufferPool::kDefaultLimit;
  return static_cast<std::size_t>(v << shift);
}

}  // namespace

BufferPool::Block map_buffer(std::size_t size) {
  const std::size_t page = page_size();
  const std::size_t want = round_up(std::max<std::size_t>(size, 1), page);
  if (want < kHugeFrom) {
    void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return {static_cast<std::byte*>(p), want};
  }
  // Map one huge page more than needed and cut the ends off, so the buffer starts on a 2 MiB
  // boundary and the kernel can back it with huge pages.
  const std::size_t capacity = round_up(want, kHugePage);
  if (capacity > SIZE_MAX - kHugePage) throw std::bad_alloc();
  void* raw = mmap(nullptr, capacity + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::byte*>(raw);
  const auto addr = reinterpret_cast<std::uintptr_t>(base);
  auto* aligned = base + (round_up(addr, kHugePage) - addr);
  if (aligned > base) munmap(base, static_cast<std::size_t>(aligned - base));
  std::byte* end = base + capacity + kHugePage;
  if (end > aligned + capacity) munmap(aligned + capacity, static_cast<std::size_t>(end - (aligned + capacity)));
  // Advice only: a kernel without transparent huge pages says EINVAL, and the buffer works as is.
  madvise(aligned, capacity, MADV_HUGEPAGE);
  return {aligned, capacity};
}

void unmap_buffer(BufferPool::Block block) noexcept {
  if (block.data) munmap(block.data, block.capacity);
}

BufferPool& BufferPool::instance() {
  // Leaked on purpose: arrays freed while the process exits release into it.
  static BufferPool* pool = [] {
    auto* p = new BufferPool(limit_from_environment());
    // A fork while another thread holds the lock would leave the child's copy locked for good.
    pthread_atfork([] { instance().mutex_.lock(); }, [] { instance().mutex_.unlock(); },
                   [] { instance().mutex_.unlock(); });
    return p;
  }();
  return *pool;
}

BufferPool::~BufferPool() {
  for (const Block& b : free_) unmap_buffer(b);
}

BufferPool::Block BufferPool::acquire(std::size_t size) {
  {
    std::lock_guard lock(mutex_);
    // The most recently released fitting block: the likeliest to be in cache and in the TLB.
    const std::size_t most = size + size / 8 + kHugePage;
    for (std::size_t i = free_.size(); i-- > 0;) {
      const Block b = free_[i];
      if (b.capacity >= size && b.capacity <= most) {
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        pooled_bytes_ -= b.capacity;
        ++reused_;
        return b;
      }
    }
    ++allocated_;
  }
  return map_buffer(size);
}

void BufferPool::release(Block block) noexcept {
  if (!block.data) return;
  std::vector<Block> dropped;
  {
    std::lock_guard lock(mutex_);
    if (block.capacity > limit_) {
      dropped.push_back(block);
    } else {
      try {
        free_.push_back(block);
        pooled_bytes_ += block.capacity;
        trim_locked(limit_, dropped);
      } catch (const std::bad_alloc&) {
        dropped.push_back(block);
      }
    }
  }
  for (const Block& b : dropped) unmap_buffer(b);  // outside the lock: munmap can take a while
}

void BufferPool::trim_locked(std::size_t limit, std::vector<Block>& dropped) noexcept {
  std::size_t n = 0;
  while (pooled_bytes_ > limit && n < free_.size()) pooled_bytes_ -= free_[n++].capacity;
  if (n == 0) return;
  try {
    dropped.insert(dropped.end(), free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
  } catch (const std::bad_alloc&) {
    for (std::size_t i = 0; i < n; ++i) unmap_buffer(free_[i]);
  }
  free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(n));
}

std::size_t BufferPool::set_limit(std::size_t limit) noexcept {
  std::vector<Block> dropped;
  std::size_t previous;
  {
    std::lock_guard lock(mutex_);
    previous = limit_;
    limit_ = limit;
    trim_locked(limit, dropped);
  }
  for (const Block& b : dropped) unmap_buffer(b);
  return previous;
}

BufferPoolStats BufferPool::stats() const noexcept {
  std::lock_guard lock(mutex_);
  return {limit_, pooled_bytes_, free_.size(), reused_, allocated_};
}

}  // namespace voxpipe
