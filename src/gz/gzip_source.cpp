#include "gz/gzip_source.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>

#include "core/thread_pool.hpp"
#include "gz/parallel_inflate.hpp"
#include "voxpipe/error.hpp"

namespace voxpipe::gz {

namespace {
// Pieces of the pipelined sequential path: a piece and what the sink makes of it stay in L2.
constexpr std::size_t kPipePiece = 512 * 1024;
constexpr std::size_t kPipeRing = 4;
}  // namespace

GzipSource::GzipSource(const std::string& path, const GzipSourceOptions& options)
    : GzipSource(std::make_shared<const core::InputFile>(path), options) {}

GzipSource::GzipSource(std::shared_ptr<const core::RandomAccessInput> input,
                       const GzipSourceOptions& options)
    : input_(std::move(input)), file_(*input_) {
  const std::string& path = file_.path();
  std::uint8_t head[2] = {0, 0};
  const std::size_t got = file_.read_at(0, std::as_writable_bytes(std::span(head)));
  if (!has_gzip_magic(std::span<const std::uint8_t>(head, got)))
    throw Error(ErrorCode::format, path, "gzip magic",
                "expected a gzip file (1f 8b) because of the .gz name, but it is not a gzip file", 0);
  // An object read by ranges with an index skips the member table: finding the members costs
  // a request per member there, the index none (it has a point at every member's start).
  const bool index_first =
      file_.fetches() && (!options.index_path.empty() || options.index_input);
  if (!index_first) {
    members_ = read_member_table(file_);
    if (members_) return;
  }
  // Index files are found and checked by the path and key of a file: other inputs have none.
  const bool is_file = dynamic_cast<const core::InputFile*>(&file_) != nullptr;
  if (options.index_input) {
    if (!file_.fetches())
      throw Error(ErrorCode::invalid_argument, path, "index",
                  "expected an index object only for an object read by ranges");
    index_ = load_index(file_, options.index_input);
  } else if (!options.index_path.empty()) {
    // An object read by ranges takes the index its caller fetched (checked by size and tail).
    if (!is_file && !file_.fetches())
      throw Error(ErrorCode::invalid_argument, path, "index",
                  "expected no index file for data that are not in a file, but received " +
                      options.index_path);
    index_ = is_file ? load_index(path, options.index_path) : load_index(file_, options.index_path);
  } else if (options.find_index && is_file) {
    index_ = find_index(path);
  }
  if (!index_) sequential_ = std::make_unique<GzipByteSource>(input_);
}

GzipSource::~GzipSource() = default;

namespace {

// The span of the random-access layout that holds `offset`: a member, or the bytes between two
// seek points. {0, 0} past the end.
std::pair<std::uint64_t, std::uint64_t> span_at(const std::optional<std::vector<Member>>& members,
                                                const std::optional<SeekIndex>& index,
                                                std::uint64_t offset) {
  if (members) {
    const std::vector<Member>& m = *members;
    auto it = std::upper_bound(m.begin(), m.end(), offset, [](std::uint64_t v, const Member& x) {
      return v < x.uncompressed_offset + x.uncompressed_size;
    });
    if (it == m.end()) return {0, 0};
    return {it->uncompressed_offset, it->uncompressed_offset + it->uncompressed_size};
  }
  const std::vector<SeekPoint>& p = index->points;
  if (offset >= index->uncompressed_size || p.empty()) return {0, 0};
  auto it = std::upper_bound(p.begin(), p.end(), offset,
                             [](std::uint64_t v, const SeekPoint& x) { return v < x.uncompressed; });
  const std::uint64_t hi = it == p.end() ? index->uncompressed_size : it->uncompressed;
  const std::uint64_t lo = it == p.begin() ? 0 : std::prev(it)->uncompressed;
  return {lo, hi};
}

// Spans larger than this are inflated straight into the caller's buffer instead of the cache.
constexpr std::uint64_t kMaxCachedSpan = 32u << 20;

}  // namespace

void GzipSource::prefetch_compressed(std::uint64_t begin, std::uint64_t end) const {
  if (!file_.fetches() || begin >= end) return;
  std::vector<ByteRange> ranges;
  if (members_) {
    const std::vector<Member>& m = *members_;
    auto it = std::upper_bound(m.begin(), m.end(), begin, [](std::uint64_t v, const Member& x) {
      return v < x.uncompressed_offset + x.uncompressed_size;
    });
    for (; it != m.end() && it->uncompressed_offset < end; ++it)
      ranges.push_back({it->offset, it->size});
  } else if (index_) {
    // From the point inflate_range starts at to the first at or after `end`, plus the input
    // the decoder reads ahead in one piece and the trailer of a member that ends there.
    const std::vector<SeekPoint>& p = index_->points;
    const SeekPoint& start = p[start_point(*index_, begin, end, file_.path())];
    const std::uint64_t from = start.compressed_bit / 8;
    // The start point's window, when it lies in an object too, comes while the data do.
    if (const auto w = index_->window_range(start); w && index_->window_file->fetches())
      index_->window_file->read_ahead(std::span(&*w, 1));
    auto stop = std::lower_bound(p.begin(), p.end(), end, [](const SeekPoint& x, std::uint64_t v) {
      return x.uncompressed < v;
    });
    constexpr std::uint64_t kReadAhead = (std::uint64_t{1} << 16) + 4096;  // known_window.cpp
    const std::uint64_t to = stop == p.end() ? file_.size()
                                             : std::min(file_.size(), stop->compressed_bit / 8 + kReadAhead);
    ranges.push_back({from, to - from});
  } else {
    ranges.push_back({0, file_.size()});
  }
  // Large spans are read ahead (the decoder starts on the first parts while the next arrive);
  // small ones are fetched before decoding starts.
  std::uint64_t total = 0;
  for (const ByteRange& r : ranges) total += r.size;
  if (total > kReadAheadAbove)
    file_.read_ahead(ranges);
  else
    file_.prefetch(ranges);
}

std::size_t GzipSource::read_at(std::uint64_t offset, std::span<std::byte> dst) {
  if (sequential_) return sequential_->read_at(offset, dst);
  const std::uint64_t total =
      members_ ? (members_->empty() ? 0 : members_->back().uncompressed_offset + members_->back().uncompressed_size)
               : index_->uncompressed_size;
  if (offset >= total || dst.empty()) return 0;
  const std::uint64_t end = std::min<std::uint64_t>(total, offset + dst.size());
  auto inflate = [&](std::uint64_t begin, std::uint64_t stop, unsigned threads, const Sink& sink) {
    prefetch_compressed(begin, stop);
    if (members_)
      inflate_members(file_, *members_, begin, stop, threads, sink);
    else
      inflate_range(file_, *index_, begin, stop, threads, sink);
  };
  // A read inside one span goes through the cache: NIfTI slices read many small windows of the
  // same span in ascending order.
  const auto span = span_at(members_, index_, offset);
  const std::uint64_t lo = span.first, hi = span.second;  // not a structured binding: lambdas capture it
  if (end <= hi && hi - lo <= kMaxCachedSpan) {
    std::lock_guard lock(cache_mutex_);
    if (cache_begin_ != lo || cache_end_ != hi || cache_.empty()) {
      cache_end_ = cache_begin_ = 0;
      cache_.resize(static_cast<std::size_t>(hi - lo));
      inflate(lo, hi, 1, [&](std::uint64_t at, std::span<const std::byte> data) {
        std::memcpy(cache_.data() + (at - lo), data.data(), data.size());
      });
      cache_begin_ = lo;
      cache_end_ = hi;
    }
    std::memcpy(dst.data(), cache_.data() + (offset - lo), static_cast<std::size_t>(end - offset));
    return static_cast<std::size_t>(end - offset);
  }
  inflate(offset, end, 1, [&](std::uint64_t at, std::span<const std::byte> data) {
    std::memcpy(dst.data() + (at - offset), data.data(), data.size());
  });
  return static_cast<std::size_t>(end - offset);
}

void GzipSource::read_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                            const core::ByteSink& sink) {
  if (members_ || index_ || (threads >= 2 && file_.size() >= kMinParallelCompressed && end - begin >= begin))
    prefetch_compressed(begin, end);  // an object read by ranges: fetched coalesced, ahead
  if (members_)
    inflate_members(file_, *members_, begin, end, threads, sink);
  else if (index_)
    read_indexed_range(begin, std::min(end, index_->uncompressed_size), threads, sink);
  else if (threads >= 2 && file_.size() >= kMinParallelCompressed && end - begin >= begin)
    // The parallel engine starts at the file's first byte and leaves the stream where it was,
    // so it only serves reads that make up most of what it inflates (a whole image, the first
    // volumes). Later ranges continue the stream: a loop over volumes inflates the file once,
    // instead of from its start for every volume.
    inflate_parallel_range(begin, end, threads, sink);
  else
    pipelined_read_range(*sequential_, begin, end, threads, sink);
}

void GzipSource::read_indexed_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                                    const core::ByteSink& sink) {
  // The chain is taken out for the call: reads from several threads at once each get their
  // own (a read that finds none starts a new one), and none waits on another's inflate.
  RangeChain chain;
  {
    std::lock_guard lock(chain_mutex_);
    std::swap(chain, chain_);
  }
  inflate_range(file_, *index_, begin, end, threads, sink, chain);
  std::lock_guard lock(chain_mutex_);
  chain_ = std::move(chain);
}

void GzipSource::inflate_parallel_range(std::uint64_t begin, std::uint64_t end, unsigned threads,
                                        const core::ByteSink& sink) {
  // The engine starts at the file's first byte; bytes before `begin` are inflated and dropped.
  ParallelInflateOptions options;
  options.threads = threads;
  // The engine stops once `end` is delivered and the stream goes on; a read to the end of a
  // member (a whole image) runs on through its trailer, so a corrupt stream is Error(corrupt),
  // never wrong voxels, whatever the trailer's ISIZE says.
  options.stop_after = end;
  inflate_parallel(file_, [&](std::uint64_t at, std::span<const std::byte> data) {
    const std::uint64_t lo = std::max(at, begin), hi = std::min(at + data.size(), end);
    if (lo < hi) sink(lo, data.subspan(static_cast<std::size_t>(lo - at), static_cast<std::size_t>(hi - lo)));
  }, options);
}

void pipelined_read_range(core::ByteSource& source, std::uint64_t begin, std::uint64_t end,
                          unsigned threads, const core::ByteSink& sink) {
  if (begin >= end) return;
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
