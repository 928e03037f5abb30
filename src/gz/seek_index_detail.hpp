// What the seek index's two halves share: seek_index.cpp (reading ranges, keys, index files) and
// seek_index_build.cpp (building an index), which decodes the windows of some points the way a
// range read decodes; and the measure of a build's progress by the bytes it reads, which
// gzip_api.cpp's fast build uses too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/file.hpp"
#include "gz/known_window.hpp"
#include "gz/seek_index.hpp"
#include "gz/stream.hpp"

namespace voxpipe::gz::index_detail {

// Output is taken in pieces of this size, by the index build and by range reads.
constexpr std::size_t kOutputChunk = std::size_t{256} << 10;

// A point where a member begins: decoding from it sees the member from its first byte. Windows
// are empty exactly there (an index file may still store one for the stream's first point).
inline bool at_member_start(const SeekPoint& p) {
  return p.uncompressed == 0 || !p.has_window();
}

// Decodes from point `p` and delivers the output in [from, stop) to the sink; returns the run's
// segments. With ISA-L (through the parallel engine's known-window run; about twice zlib's
// speed), else with the engine's own decoder.
std::vector<inflate_detail::Segment> decode_from(const core::RandomAccessInput& file,
                                                 const SeekIndex& index, const SeekPoint& p,
                                                 std::uint64_t from, std::uint64_t stop,
                                                 const Sink& sink);

// Tells `on_read` the furthest byte read so far, whenever it grows, one call at a time: the
// progress of a pass that reads the file front to back (a parallel inflate a few chunks ahead of
// its output), measured without a hook inside it. An exception from `on_read` leaves read_at.
class ReadProgressInput final : public core::RandomAccessInput {
 public:
  ReadProgressInput(const core::RandomAccessInput& file,
                    std::function<void(std::uint64_t furthest)> on_read)
      : file_(file), on_read_(std::move(on_read)) {}
  std::size_t read_at(std::uint64_t offset, std::span<std::byte> dst) const override {
    const std::size_t n = file_.read_at(offset, dst);
    std::lock_guard lock(mutex_);
    if (offset + n > furthest_) {
      furthest_ = offset + n;
      on_read_(furthest_);
    }
    return n;
  }
  std::uint64_t size() const noexcept override { return file_.size(); }
  const std::string& path() const noexcept override { return file_.path(); }
  bool fetches() const noexcept override { return file_.fetches(); }
  void prefetch(std::span<const ByteRange> ranges) const override { file_.prefetch(ranges); }
  void read_ahead(std::span<const ByteRange> ranges) const override { file_.read_ahead(ranges); }

 private:
  const core::RandomAccessInput& file_;
  std::function<void(std::uint64_t)> on_read_;
  mutable std::mutex mutex_;
  mutable std::uint64_t furthest_ = 0;
};

}  // namespace voxpipe::gz::index_detail
