// The recycled-buffer pool: reuse of released buffers of a fitting size only, the byte limit
// (oldest released buffers freed first), huge-page alignment of large buffers, and concurrent
// acquire/release from several threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "voxpipe/buffer_pool.hpp"

namespace {

using voxpipe::BufferPool;

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(BufferPool, ReleasedBufferIsReusedForTheSameSize) {
  BufferPool pool(64 * MiB);
  BufferPool::Block a = pool.acquire(10 * MiB);
  ASSERT_NE(a.data, nullptr);
  EXPECT_GE(a.capacity, 10 * MiB);
  std::memset(a.data, 0x5a, 10 * MiB);  // writable throughout
  pool.release(a);
  EXPECT_EQ(pool.stats().pooled_buffers, 1u);
  EXPECT_EQ(pool.stats().pooled_bytes, a.capacity);
  BufferPool::Block b = pool.acquire(10 * MiB);
  EXPECT_EQ(b.data, a.data);
  EXPECT_EQ(static_cast<unsigned char>(b.data[123]), 0x5au);  // the same pages, not new ones
  EXPECT_EQ(pool.stats().reused, 1u);
  EXPECT_EQ(pool.stats().allocated, 1u);
  EXPECT_EQ(pool.stats().pooled_bytes, 0u);
  pool.release(b);
}

TEST(BufferPool, ABufferMuchLargerThanAskedIsNotHandedOut) {
  BufferPool pool(256 * MiB);
  BufferPool::Block big = pool.acquire(64 * MiB);
  pool.release(big);
  BufferPool::Block small = pool.acquire(8 * MiB);  // 64 MiB > 8 + 1 + 2 MiB: a new buffer
  EXPECT_NE(small.data, big.data);
  EXPECT_EQ(pool.stats().pooled_buffers, 1u);
  BufferPool::Block again = pool.acquire(60 * MiB);  // within an eighth plus 2 MiB: reused
  EXPECT_EQ(again.data, big.data);
  pool.release(small);
  pool.release(again);
}

TEST(BufferPool, TooSmallBufferIsNotHandedOut) {
  BufferPool pool(256 * MiB);
  BufferPool::Block a = pool.acquire(8 * MiB);
  pool.release(a);
  BufferPool::Block b = pool.acquire(a.capacity + 1);
  EXPECT_NE(b.data, a.data);
  EXPECT_GE(b.capacity, a.capacity + 1);
  pool.release(b);
}

TEST(BufferPool, LimitFreesTheOldestReleasedFirst) {
  BufferPool pool(20 * MiB);
  BufferPool::Block a = pool.acquire(8 * MiB), b = pool.acquire(8 * MiB), c = pool.acquire(8 * MiB);
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.stats().pooled_bytes, 16 * MiB);
  pool.release(c);  // 24 MiB > 20: a goes
  EXPECT_EQ(pool.stats().pooled_buffers, 2u);
  EXPECT_EQ(pool.stats().pooled_bytes, 16 * MiB);
  // The most recently released fitting buffer comes back first.
  BufferPool::Block d = pool.acquire(8 * MiB);
  EXPECT_EQ(d.data, c.data);
  BufferPool::Block e = pool.acquire(8 * MiB);
  EXPECT_EQ(e.data, b.data);
  pool.release(d);
  pool.release(e);
  // A buffer larger than the limit is never kept.
  BufferPool::Block huge = pool.acquire(32 * MiB);
  pool.release(huge);
  EXPECT_EQ(pool.stats().pooled_bytes, 16 * MiB);
  EXPECT_EQ(pool.set_limit(0), 20 * MiB);
  EXPECT_EQ(pool.stats().pooled_buffers, 0u);
  EXPECT_EQ(pool.stats().pooled_bytes, 0u);
}

TEST(BufferPool, ClearKeepsTheLimit) {
  BufferPool pool(64 * MiB);
  pool.release(pool.acquire(4 * MiB));
  EXPECT_EQ(pool.stats().pooled_buffers, 1u);
  pool.clear();
  EXPECT_EQ(pool.stats().pooled_buffers, 0u);
  EXPECT_EQ(pool.stats().limit, 64 * MiB);
}

TEST(BufferPool, LargeBuffersAreHugePageAligned) {
  BufferPool::Block b = voxpipe::map_buffer(5 * MiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data) % (2 * MiB), 0u);
  EXPECT_EQ(b.capacity, 6 * MiB);
  std::memset(b.data, 1, b.capacity);
  voxpipe::unmap_buffer(b);
  BufferPool::Block s = voxpipe::map_buffer(100);
  EXPECT_EQ(s.capacity, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  s.data[99] = std::byte{7};
  voxpipe::unmap_buffer(s);
}

TEST(BufferPool, ConcurrentUseNeverHandsOneBufferToTwoOwners) {
  BufferPool pool(16 * MiB);
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const std::size_t size = (1 + (r + t) % 3) * MiB;
        BufferPool::Block b = pool.acquire(size);
        // Stamp the buffer with this owner and check nobody else writes it while held.
        const auto stamp = static_cast<unsigned char>(t * 50 + r % 50);
        std::memset(b.data, stamp, 4096);
        std::memset(b.data + size - 4096, stamp, 4096);
        std::this_thread::yield();
        if (static_cast<unsigned char>(b.data[0]) != stamp ||
            static_cast<unsigned char>(b.data[size - 1]) != stamp)
          ++failures[t];
        pool.release(b);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  const auto s = pool.stats();
  EXPECT_LE(s.pooled_bytes, 16 * MiB);
  EXPECT_EQ(s.reused + s.allocated, static_cast<std::uint64_t>(kThreads * kRounds));
  EXPECT_GT(s.reused, 0u);
}

}  // namespace
