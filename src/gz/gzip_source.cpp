#include "gz/gzip_source.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>

#include "core/thread_pool.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {

namespace {
// Pieces of the pipelined sequential path: a piece and what the sink makes of it stay in L2.
constexpr std::size_t kPipePiece = 512 * 1024;
constexpr std::size_t kPipeRing = 4;
}  // namespace

GzipSource::GzipSource(const std::string& path) : file_(path) {
  std::uint8_t head[2] = {0, 0};
  const std::size_t got = file_.read_at(0, std::as_writable_bytes(std::span(head)));
  if (!has_gzip_magic(std::span<const std::uint8_t>(head, got)))
    throw Error(ErrorCode::format, path, "gzip magic",
                "expected a gzip file (1f 8b) because of the .gz name, but it is not gzip", 0);
  members_ = read_member_table(file_);
  if (!members_) sequential_ = std::make_unique<GzipByteSource>(path);
}

GzipSource::~GzipSource() = default;

std::size_t GzipSource::read_at(std::uint64_t offset, std::span<std::byte> dst) {
  if (!members_) return sequential_->read_at(offset, dst);
  const std::vector<Member>& m = *members_;
  const std::uint64_t total = m.empty() ? 0 : m.back().uncompressed_offset + m.back().uncompressed_size;
  if (offset >= total || dst.empty()) return 0;
  const std::uint64_t end = std::min<std::uint64_t>(total, offset + dst.size());
  // A read inside one member goes through the cache: NIfTI slices read many small windows of
  // the same member in ascending order.
  auto it = std::upper_bound(m.begin(), m.end(), offset, [](std::uint64_t v, const Member& x) {
    return v < x.uncompressed_offset + x.uncompressed_size;
  });
  if (end <= it->uncompressed_offset + it->uncompressed_size) {
    std::lock_guard lock(cache_mutex_);
    const auto index = static_cast<std::size_t>(it - m.begin());
    if (cached_member_ != index) {
      cached_member_ = SIZE_MAX;
      cache_.resize(it->uncompressed_size);
      inflate_members(file_, std::span(&*it, 1), it->uncompressed_offset,
                      it->uncompressed_offset + it->uncompressed_size, 1,
                      [&](std::uint64_t at, std::span<const std::byte> data) {
                        std::memcpy(cache_.data() + (at - it->uncompressed_offset), data.data(), data.size());
                      });
      cached_member_ = index;
    }
    std::memcpy(dst.data(), cache_.data() + (offset - it->uncompressed_offset), end - offset);
    return static_cast<std::size_t>(end - offset);
  }
  inflate_members(file_, m, offset, end, 1, [&](std::uint64_t at, std::span<const std::byte> data) {
    std::memcpy(dst.data() + (at - offset), data.data(), data.size());
  });
  return static_cast<std::size_t>(end - offset);
}

void GzipSource::read_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                            const core::ByteSink& sink) {
  if (members_)
    inflate_members(file_, *members_, begin, end, threads, sink);
  else
    pipelined_read_range(*sequential_, begin, end, threads, sink);
}

void pipelined_read_range(core::ByteSource& source, std::uint64_t begin, std::uint64_t end,
                          unsigned threads, const core::ByteSink& sink) {
  if (begin >= end) return;
  if (threads == 0) threads = core::default_thread_count();
  if (threads < 2 || end - begin <= kPipePiece) {
    source.ByteSource::read_range(begin, end, 1, sink);
    return;
  }
  struct Piece {
    std::vector<std::byte> bytes = std::vector<std::byte>(kPipePiece);
    std::uint64_t offset = 0;
    std::size_t size = 0;
  };
  std::array<Piece, kPipeRing> ring;
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t produced = 0;  // pieces filled
  std::uint64_t claimed = 0;   // pieces handed to a sink caller
  std::uint64_t done = 0;      // pieces whose sink call returned, in any order
  std::array<bool, kPipeRing> busy{};  // slot holds a piece not yet through the sink
  bool producer_done = false;
  bool failed = false;

  // Runs the sink on the next produced piece, if there is one; false when there is none.
  auto consume_one = [&](std::unique_lock<std::mutex>& lock) {
    if (claimed == produced || failed) return false;
    const std::size_t slot = claimed % kPipeRing;
    Piece& p = ring[slot];
    ++claimed;
    lock.unlock();
    try {
      sink(p.offset, std::span<const std::byte>(p.bytes.data(), p.size));
    } catch (...) {
      lock.lock();
      failed = true;
      ++done;
      busy[slot] = false;
      cv.notify_all();
      throw;
    }
    lock.lock();
    ++done;
    busy[slot] = false;
    cv.notify_all();
    return true;
  };

  core::parallel_for(2, 2, [&](std::size_t task) {
    std::unique_lock lock(mutex);
    if (task == 1) {  // consumer
      for (;;) {
        if (consume_one(lock)) continue;
        if (producer_done || failed) return;
        cv.wait(lock, [&] { return claimed < produced || producer_done || failed; });
      }
    }
    // Producer. A slot is free once the piece kRing before it has been through the sink; with
    // no consumer running, the producer runs the sink itself.
    try {
      for (std::uint64_t at = begin; at < end && !failed;) {
        const std::size_t slot = produced % kPipeRing;
        while (busy[slot] && !failed) {
          if (!consume_one(lock)) cv.wait(lock, [&] { return !busy[slot] || failed; });
        }
        if (failed) break;
        Piece& p = ring[slot];
        lock.unlock();
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kPipePiece, end - at));
        const std::size_t got = source.read_at(at, std::span(p.bytes.data(), want));
        lock.lock();
        if (got == 0) break;
        p.offset = at;
        p.size = got;
        at += got;
        busy[slot] = true;
        ++produced;
        cv.notify_all();
      }
      while (consume_one(lock)) {
      }
      // Wait for pieces a consumer is still working on: their buffers are this frame's.
      cv.wait(lock, [&] { return done == claimed; });
      producer_done = true;
      cv.notify_all();
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      failed = true;
      producer_done = true;
      cv.notify_all();
      cv.wait(lock, [&] { return done == claimed; });
      throw;
    }
  });
}

}  // namespace voxpipe::gz
